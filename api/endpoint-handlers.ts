import { randomBytes } from 'node:crypto';
import type { Context } from 'koa';
import type { Redis } from 'ioredis';
import type { Queue } from 'bullmq';
import type { z } from 'zod';
import type { CatalogModel } from '../shared/catalog.js';
import type { Config } from '../shared/config.js';
import { endpoints, type Endpoint, type EndpointPayloads } from '../shared/endpoints.js';
import { invalidRequest } from '../shared/errors.js';
import { videosOfKey, type QueueName } from '../shared/queues.js';
import { checkChatContext, checkCompletionContext, checkEmbeddingContext, checkModalities } from './context-window.js';
import { checkEditable, checkEditUploads, checkImageRequest } from './image-rules.js';
import { loadOwnedJob, renderVideo } from './job-views.js';
import type { UploadedFile } from './multipart.js';

/** What a handler is given: the fields its row's schema validated, the model they name, and the stored uploads. */
export interface HandlerInput<E extends Endpoint> {
  fields: z.output<(typeof endpoints)[E]['schema']>;
  model: CatalogModel;
  files: readonly UploadedFile[];
}

/** A request the handler let through: what the job carries, and how the relay answers. */
export interface Admitted<E extends Endpoint> {
  payload: EndpointPayloads[E];
  stream?: boolean;
  /** Content type of the final body (JSON unless said). */
  contentType?: string;
  /** Job id when it is not the request id (videos). */
  jobId?: string;
  /** The prompt's tokens as counted or bounded by the context check (text endpoints): what admission reserves for. */
  promptTokens?: number;
}

export interface HandlerDeps {
  config: Config;
  redis: Redis;
  queues: Map<QueueName, Queue>;
}

/**
 * One endpoint's own rules: the checks its row's schema cannot make (those
 * that need the model: context window, modalities, sizes, uploads), and the
 * job payload. `answer` replaces the relay's answer for endpoints that create
 * a resource (videos).
 */
export interface EndpointHandler<E extends Endpoint> {
  admit(input: HandlerInput<E>): Admitted<E> | Promise<Admitted<E>>;
  answer?(ctx: Context, admitted: Admitted<E>, deps: HandlerDeps): Promise<void>;
}

const transcriptTextTypes: Record<string, string> = { text: 'text/plain; charset=utf-8', srt: 'text/plain; charset=utf-8', vtt: 'text/plain; charset=utf-8' };

function refuseStreamOptionsWithoutStream(body: { stream?: boolean | null; stream_options?: unknown }): void {
  if (body.stream_options && !body.stream) throw invalidRequest('stream_options is only allowed when stream is true.', 'stream_options');
}

/** Every endpoint of the table has one handler here; the route around it is the same for all (`routes/endpoint-routes.ts`). */
export const handlers: { [E in Endpoint]: EndpointHandler<E> } = {
  'chat.completions': {
    async admit({ fields: body, model }) {
      checkModalities(model, body.messages);
      const promptTokens = await checkChatContext(model, body);
      refuseStreamOptionsWithoutStream(body);
      if (body.top_logprobs != null && !body.logprobs) throw invalidRequest('top_logprobs requires logprobs to be true.', 'top_logprobs');
      return { payload: body, stream: !!body.stream, promptTokens };
    },
  },

  completions: {
    async admit({ fields: body, model }) {
      if (body.stream && body.best_of != null && body.best_of > 1) throw invalidRequest('best_of cannot be used with stream.', 'best_of');
      refuseStreamOptionsWithoutStream(body);
      const promptTokens = await checkCompletionContext(model, body);
      return { payload: body, stream: !!body.stream, promptTokens };
    },
  },

  embeddings: {
    async admit({ fields: body, model }) {
      if (body.dimensions != null) {
        if (!model.supports_dimensions) throw invalidRequest(`The model \`${model.id}\` does not support setting dimensions.`, 'dimensions');
        if (model.dimensions && body.dimensions > model.dimensions) {
          throw invalidRequest(`dimensions must be at most ${model.dimensions} for \`${model.id}\`.`, 'dimensions');
        }
      }
      const promptTokens = await checkEmbeddingContext(model, body);
      return { payload: body, promptTokens };
    },
  },

  'images.generations': {
    admit({ fields: body, model }) {
      checkImageRequest(model, body);
      return { payload: body };
    },
  },

  'images.edits': {
    admit({ fields, model, files }) {
      checkEditable(model);
      checkImageRequest(model, fields);
      const images = files.filter((f) => f.field === 'image' || f.field === 'image[]');
      if (images.length === 0) throw invalidRequest("Missing required parameter: 'image' (send the image file as a multipart part).", 'image');
      const mask = files.find((f) => f.field === 'mask');
      checkEditUploads(model, images, mask);
      return { payload: { ...fields, images: images.map((f) => f.ref), ...(mask ? { mask: mask.ref } : {}) } };
    },
  },

  'audio.transcriptions': {
    admit({ fields, files }) {
      const file = files.find((f) => f.field === 'file')?.ref;
      if (!file) throw invalidRequest("Missing required parameter: 'file' (send the audio file as a multipart part).", 'file');
      const granularities = fields['timestamp_granularities[]'];
      if (granularities && fields.response_format !== 'verbose_json') {
        throw invalidRequest('timestamp_granularities requires response_format verbose_json.', 'timestamp_granularities');
      }
      return {
        payload: {
          file,
          response_format: fields.response_format,
          ...(fields.language ? { language: fields.language } : {}),
          ...(fields.prompt ? { prompt: fields.prompt } : {}),
          ...(fields.temperature !== undefined ? { temperature: fields.temperature } : {}),
          ...(granularities ? { timestamp_granularities: granularities } : {}),
        },
        contentType: transcriptTextTypes[fields.response_format] ?? 'application/json',
      };
    },
  },

  videos: {
    admit({ fields, model, files }) {
      const size = fields.size ?? model.default_size ?? '720x1280';
      if (model.image_sizes?.length && !model.image_sizes.includes(size)) {
        throw invalidRequest(`Invalid size '${size}' for \`${model.id}\`. Supported sizes: ${model.image_sizes.join(', ')}.`, 'size', 'invalid_size');
      }
      const reference = files.find((f) => f.field === 'input_reference')?.ref;
      return {
        payload: { prompt: fields.prompt, seconds: fields.seconds, size, ...(reference ? { input_reference: reference } : {}) },
        jobId: `video_${randomBytes(16).toString('hex')}`,
      };
    },
    /** The answer to "create" is the new video as queued (a worker may already hold it). */
    async answer(ctx, admitted, deps) {
      const keyId: string = ctx.state.keyId;
      const id = admitted.jobId!;
      await deps.redis.zadd(videosOfKey(keyId), Date.now(), id);
      const owned = await loadOwnedJob(deps.redis, deps.queues, id, keyId, 'video');
      ctx.status = 200;
      ctx.remove('location');
      ctx.body = renderVideo({ ...owned, status: 'queued', progress: 0 }, deps.config.asyncResultTtlSeconds);
    },
  },
};
