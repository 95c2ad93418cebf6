import { randomBytes } from 'node:crypto';
import type { KeyedContext } from './request-context.js';
import type { Redis } from 'ioredis';
import type { z } from 'zod';
import type { CatalogModel } from '../../shared/catalog.js';
import type { Config } from '../../shared/config.js';
import { endpoints, type Endpoint, type EndpointPayloads } from '../../shared/endpoints.js';
import { invalidRequest } from '../../shared/errors.js';
import { type ServiceTier } from '../../shared/scheduling/vocabulary.js';
import { videosOfKey } from '../../shared/redis-keys.js';
import type { QueueShards } from '../../shared/queue-shards.js';
import {
  chatContext,
  checkChatContext,
  checkCompletionContext,
  checkEmbeddingContext,
  checkModalities,
} from './context-window.js';
import {
  checkEditable,
  checkEditUploads,
  checkImageRequest,
  checkVariable,
  checkVariationUpload,
} from './image-rules.js';
import { loadOwnedJob, renderVideo } from '../jobs/views.js';
import type { UploadedFile } from '../http/multipart.js';
import { responseObject } from '../../shared/response-object.js';
import { buildShell, newResponseId, normaliseInputSliced, toChatRequest } from '../responses/translate.js';
import { createResponse, loadHistory, storeInput } from '../responses/store.js';
import type { BlobStore } from '../../storage/blob-store.js';
import type { EventLogs } from '../relay/event-log.js';
import { followResponse } from '../responses/routes.js';
import { toMessagesJob } from '../messages/accept.js';
import type { ToolRules } from '../../shared/mcp/tool-rules.js';
import type { McpRegistry } from '../../shared/mcp/registry.js';
import type { McpApproval } from '../../shared/mcp/tool-loop.js';
import { messagesLoopPlan, responsesLoopPlan } from '../mcp/loop-plan.js';
import { countChatPromptTokensAsync } from '../../shared/tokens.js';
import { requirePath, toCountTokensJob, toGeminiJob, type GeminiPathFields } from '../gemini/accept.js';
import { toEmbedJob } from '../gemini/translate-embeddings.js';
import type { ModelResolver } from './model-resolver.js';
import type { AudioTextFormat } from '../../shared/schemas/media-inputs.js';
import type { StreamDialect } from '../relay/stream-dialects.js';
import { checkSpeechRequest } from './speech-rules.js';
import type { EmbeddingRequest } from '../../shared/schemas/embeddings.js';
import {
  isPartList,
  maxModerationImages,
  moderationImages,
  moderationTexts,
} from '../../shared/schemas/moderations.js';

/** What a handler is given: the fields its row's schema validated, the model they name, and the stored uploads. */
export interface HandlerInput<E extends Endpoint> {
  fields: z.output<(typeof endpoints)[E]['schema']>;
  model: CatalogModel;
  /** The tier it is queued in, granted once by the route (shared/scheduling/tiers.ts `grantRequestTier`). */
  tier: ServiceTier;
  files: readonly UploadedFile[];
  /** Who asks, the store a handler reads earlier state from (stored responses), and the models served here. */
  scope: {
    redis: Redis;
    blobs: BlobStore;
    keyId: string;
    config: Config;
    models: ModelResolver;
    access?: ToolRules;
    mcpServers?: McpRegistry | undefined;
  };
  /** A request header ('' when absent). */
  header(name: string): string;
  /** What the path says for an endpoint whose path names its model (Google's `models/{model}:{method}`). */
  path?: GeminiPathFields;
}

/** A request the handler let through: what the job carries, and how the client is answered. */
export interface Accepted<E extends Endpoint> {
  payload: EndpointPayloads[E];
  stream?: boolean;
  /** Content type of the final body (JSON unless said). */
  contentType?: string;
  /**
   * The job's id in its queue when it is not the request's (a response's `resp_…`, a video's `video_…`); money and the
   * request log stay the request's.
   */
  jobId?: string;
  /** The prompt's tokens as counted or bounded by the context check (text endpoints): what the reservation counts. */
  promptTokens?: number;
  /** Written beside the job, just before its add (a stored response's record). */
  beforeAdd?: () => Promise<void>;
  /** Runs in the background: queued, answered at once, and run to its end whoever listens. */
  detached?: boolean;
  /** The band it is served in (chat and Responses requests name it with `service_tier`). */
  serviceTier?: ServiceTier;
  /** The form its stream is written in, when not its row's dialect (speech's audio bytes). */
  dialect?: StreamDialect;
}

export interface HandlerDeps {
  config: Config;
  redis: Redis;
  queues: QueueShards;
  logs: EventLogs;
  blobs: BlobStore;
}

/**
 * One endpoint's own rules: the checks its row's schema cannot make (those
 * that need the model: context window, modalities, sizes, uploads), and the
 * job payload. `respond` writes the response itself for endpoints that
 * answer at once with a resource (videos, a background response).
 */
export interface EndpointHandler<E extends Endpoint> {
  accept(input: HandlerInput<E>): Accepted<E> | Promise<Accepted<E>>;
  respond?(ctx: KeyedContext, accepted: Accepted<E>, deps: HandlerDeps): Promise<void>;
}

const transcriptTextTypes: Record<string, string> = {
  text: 'text/plain; charset=utf-8',
  srt: 'text/plain; charset=utf-8',
  vtt: 'text/plain; charset=utf-8',
};

/** The audio of a transcription or a translation: its `file` part, which OpenAI requires. */
function requireAudioFile(files: readonly UploadedFile[]) {
  const file = files.find((f) => f.field === 'file')?.ref;
  if (!file)
    throw invalidRequest("Missing required parameter: 'file' (send the audio file as a multipart part).", 'file');
  return file;
}

/**
 * What a transcription and a translation share of their payload: the file and the fields that shape the text
 * (each left out when not sent, so the vendor's own default applies), and the answer's content type.
 */
function audioTextJob(
  fields: { prompt?: string | undefined; response_format: AudioTextFormat; temperature?: number | undefined },
  files: readonly UploadedFile[],
) {
  return {
    payload: {
      file: requireAudioFile(files),
      response_format: fields.response_format,
      ...(fields.prompt ? { prompt: fields.prompt } : {}),
      ...(fields.temperature !== undefined ? { temperature: fields.temperature } : {}),
    },
    contentType: transcriptTextTypes[fields.response_format] ?? 'application/json',
  };
}

/**
 * Only some transcription models translate (at OpenAI, whisper-1 alone: its gpt-4o transcribe models have no
 * translations), as the catalog's `supports_translation` says; another is refused naming those served here that do.
 */
function checkTranslatable(model: CatalogModel, models: ModelResolver): void {
  if (model.supports_translation) return;
  const translating = models
    .list()
    .filter((candidate) => candidate.supports_translation)
    .map((candidate) => candidate.id);
  throw invalidRequest(
    `\`${model.id}\` does not translate audio; ` +
      (translating.length > 0 ? `use ${translating.join(' or ')}.` : 'no model served here does.'),
    'model',
    'model_not_supported',
  );
}

function refuseStreamOptionsWithoutStream(body: { stream?: boolean | null; stream_options?: unknown }): void {
  if (body.stream_options && !body.stream)
    throw invalidRequest('stream_options is only allowed when stream is true.', 'stream_options');
}

/**
 * Every endpoint of the table has one handler here; the route around it is the same for all
 * (`routes/endpoint-routes.ts`).
 */
export const handlers: { [E in Endpoint]: EndpointHandler<E> } = {
  'chat.completions': {
    async accept({ fields: body, model, tier }) {
      checkModalities(model, body.messages);
      const promptTokens = await checkChatContext(model, body);
      refuseStreamOptionsWithoutStream(body);
      if (body.top_logprobs != null && !body.logprobs)
        throw invalidRequest('top_logprobs requires logprobs to be true.', 'top_logprobs');
      return { payload: body, stream: !!body.stream, promptTokens, serviceTier: tier };
    },
  },

  responses: {
    async accept({ fields: request, model, scope, tier }) {
      if (request.background && request.store === false)
        throw invalidRequest('A background response must be stored: store cannot be false.', 'store');
      if (request.stream_options && !request.stream)
        throw invalidRequest('stream_options is only allowed when stream is true.', 'stream_options');
      const input = request.input === undefined ? [] : await normaliseInputSliced(request.input);
      const history = request.previous_response_id
        ? await loadHistory(scope.redis, scope.blobs, request.previous_response_id, scope.keyId)
        : [];
      const approvals: McpApproval[] = [];
      const chat = toChatRequest({ ...request, model: model.id }, history, input, model.web_search === true, approvals);
      // Its `mcp` tools: the gateway's tool loop runs on the servers they name (shared/mcp/tool-loop.ts).
      const mcp = responsesLoopPlan(
        request.tools,
        request.max_tool_calls,
        request.tool_choice === 'required',
        approvals,
        scope.access ?? {},
        scope.mcpServers,
      );
      checkModalities(model, chat.messages);
      const promptTokens = await checkChatContext(model, chat);
      const id = newResponseId();
      const shell = buildShell(request, id, model.id, Math.floor(Date.now() / 1000));
      const queued = responseObject(shell, { status: 'queued', output: [], usage: null, error: null });
      // Large input goes to the blob store now, so that the record itself is one Redis write sent beside the enqueue.
      const stored = shell.store ? await storeInput(scope.blobs, id, input) : undefined;
      return {
        payload: {
          chat,
          shell,
          ...(mcp ? { mcp } : {}),
          ...(request.prompt_cache_key ? { promptCacheKey: request.prompt_cache_key.slice(0, 1024) } : {}),
        },
        stream: !!request.stream,
        promptTokens,
        jobId: id,
        detached: shell.background,
        serviceTier: tier,
        ...(stored
          ? {
              beforeAdd: () =>
                createResponse(
                  scope.redis,
                  id,
                  scope.keyId,
                  stored,
                  shell.background ? queued : { ...queued, status: 'in_progress' },
                  scope.config.responseTtlSeconds,
                ),
            }
          : {}),
      };
    },
    /** A background response is answered at once: queued, or its events followed from the start. */
    async respond(ctx, accepted, deps) {
      const { shell } = accepted.payload;
      if (!shell.background) return;
      if (accepted.stream) {
        await followResponse(ctx, deps, shell.id, -1, 'starting_after');
        return;
      }
      ctx.status = 200;
      ctx.body = responseObject(shell, { status: 'queued', output: [], usage: null, error: null });
    },
  },

  messages: {
    async accept({ fields: request, model, header, scope }) {
      const job = toMessagesJob(request, model, header('anthropic-beta'));
      // Its `mcp_servers`: the gateway's tool loop runs on them, whoever serves the model (shared/mcp/tool-loop.ts).
      const mcp = messagesLoopPlan(
        request.mcp_servers as unknown[] | undefined,
        request.tools,
        request.tool_choice?.type === 'any',
        scope.access ?? {},
        scope.mcpServers,
      );
      if (mcp) job.mcp = mcp;
      checkModalities(model, job.chat.messages);
      const { tokens: promptTokens, exact } = await chatContext(model, job.chat);
      // Exact, whatever the prompt's size: the stream's first event says it, and Claude Code reads its context's size
      // there (counted once: the context check counted a small prompt already).
      job.inputTokens = exact
        ? promptTokens
        : await countChatPromptTokensAsync(job.chat.messages, job.chat.tools ?? null);
      return { payload: job, stream: !!request.stream, promptTokens };
    },
  },

  'messages.count_tokens': {
    accept({ fields: request, model, header }) {
      // No context check: a client asks the count to learn whether its prompt still fits.
      return { payload: toMessagesJob({ ...request, max_tokens: 1 }, model, header('anthropic-beta')) };
    },
  },

  'gemini.generate': {
    async accept({ fields: request, model, path, scope }) {
      const named = requirePath(path);
      const job = toGeminiJob(request, model, named, scope.config);
      checkModalities(model, job.chat.messages);
      const { tokens: promptTokens, exact } = await chatContext(model, job.chat);
      // Exact, whatever the prompt's size, as the Messages API counts it: `usageMetadata.promptTokenCount` says it
      // when a vendor does not.
      job.inputTokens = exact
        ? promptTokens
        : await countChatPromptTokensAsync(job.chat.messages, job.chat.tools ?? null);
      return { payload: job, stream: named.stream, promptTokens };
    },
  },

  'gemini.count_tokens': {
    async accept({ fields: request, model, path, scope }) {
      // No context check: a client asks the count to learn whether its prompt still fits. Counted here, so a vendor
      // without a counting API answers with the gateway's count.
      const job = toCountTokensJob(request, model, requirePath(path), scope.config);
      job.inputTokens = await countChatPromptTokensAsync(job.chat.messages, job.chat.tools ?? null);
      return { payload: job };
    },
  },

  'gemini.embed': {
    async accept({ fields: request, model, path }) {
      const job = toEmbedJob(request, model, requirePath(path).model, false);
      return { payload: job, promptTokens: await checkEmbeddingContext(model, job.embedding) };
    },
  },

  'gemini.batch_embed': {
    async accept({ fields: request, model, path }) {
      const job = toEmbedJob(request, model, requirePath(path).model, true);
      return { payload: job, promptTokens: await checkEmbeddingContext(model, job.embedding) };
    },
  },

  completions: {
    async accept({ fields: body, model }) {
      if (body.stream && body.best_of != null && body.best_of > 1)
        throw invalidRequest('best_of cannot be used with stream.', 'best_of');
      refuseStreamOptionsWithoutStream(body);
      const promptTokens = await checkCompletionContext(model, body);
      // `service_tier` is no part of the legacy completions API: it reaches no vendor, and the job carries no tier
      // (billed `default`).
      const { service_tier: _tier, ...payload } = body as typeof body & { service_tier?: unknown };
      return { payload, stream: !!body.stream, promptTokens };
    },
  },

  embeddings: {
    async accept({ fields: body, model }) {
      if (body.dimensions != null) {
        if (!model.supports_dimensions)
          throw invalidRequest(`The model \`${model.id}\` does not support setting dimensions.`, 'dimensions');
        if (model.dimensions && body.dimensions > model.dimensions) {
          throw invalidRequest(`dimensions must be at most ${model.dimensions} for \`${model.id}\`.`, 'dimensions');
        }
      }
      const promptTokens = await checkEmbeddingContext(model, body);
      return { payload: body, promptTokens };
    },
  },

  moderations: {
    async accept({ fields: request, model, scope }) {
      const images = moderationImages(request.input);
      if (images.length > 0 && !model.input_modalities.includes('image')) {
        const seeing = scope.models
          .list()
          .filter((candidate) => candidate.capability === 'moderation' && candidate.input_modalities.includes('image'))
          .map((candidate) => candidate.id);
        throw invalidRequest(
          `The model \`${model.id}\` moderates text only; ` +
            (seeing.length > 0 ? `send images to ${seeing.join(' or ')}.` : 'no model served here moderates images.'),
          'input',
          'unsupported_content_type',
        );
      }
      if (images.length > maxModerationImages)
        throw invalidRequest(
          `Number of images (${images.length}) exceeds maximum of ${maxModerationImages}.`,
          'input',
          'too_many_images',
        );
      // A list of parts is one input (one result): its texts are judged, and bounded by the context, together.
      const texts = moderationTexts(request.input);
      const promptTokens = await checkEmbeddingContext(model, {
        model: model.id,
        input: isPartList(request.input) ? [texts.join('\n')] : texts,
      } as EmbeddingRequest);
      return { payload: request, promptTokens };
    },
  },

  'images.generations': {
    accept({ fields: body, model }) {
      checkImageRequest(model, body);
      return { payload: body };
    },
  },

  'images.edits': {
    accept({ fields, model, files }) {
      checkEditable(model);
      checkImageRequest(model, fields);
      const images = files.filter((f) => f.field === 'image' || f.field === 'image[]');
      if (images.length === 0)
        throw invalidRequest("Missing required parameter: 'image' (send the image file as a multipart part).", 'image');
      const mask = files.find((f) => f.field === 'mask');
      checkEditUploads(model, images, mask);
      return { payload: { ...fields, images: images.map((f) => f.ref), ...(mask ? { mask: mask.ref } : {}) } };
    },
  },

  'images.variations': {
    accept({ fields, model, files }) {
      checkVariable(model);
      checkImageRequest(model, fields);
      checkVariationUpload(model, files);
      // The check let through exactly one file, the image.
      return { payload: { ...fields, image: files[0]!.ref } };
    },
  },

  'audio.transcriptions': {
    accept({ fields, files }) {
      const { payload, contentType } = audioTextJob(fields, files);
      const granularities = fields['timestamp_granularities[]'];
      if (granularities && fields.response_format !== 'verbose_json') {
        throw invalidRequest(
          'timestamp_granularities requires response_format verbose_json.',
          'timestamp_granularities',
        );
      }
      return {
        payload: {
          ...payload,
          ...(fields.language ? { language: fields.language } : {}),
          ...(granularities ? { timestamp_granularities: granularities } : {}),
        },
        contentType,
      };
    },
  },

  'audio.translations': {
    accept({ fields, model, files, scope }) {
      checkTranslatable(model, scope.models);
      // Always to English: a translation takes no language, and its text has no word timings to ask for.
      return audioTextJob(fields, files);
    },
  },

  'audio.speech': {
    accept({ fields, model, header }) {
      return checkSpeechRequest(fields, model, header('prefer'));
    },
  },

  videos: {
    accept({ fields, model, files }) {
      const size = fields.size ?? model.default_size ?? '720x1280';
      if (model.image_sizes?.length && !model.image_sizes.includes(size)) {
        throw invalidRequest(
          `Invalid size '${size}' for \`${model.id}\`. Supported sizes: ${model.image_sizes.join(', ')}.`,
          'size',
          'invalid_size',
        );
      }
      const reference = files.find((f) => f.field === 'input_reference')?.ref;
      return {
        payload: {
          prompt: fields.prompt,
          seconds: fields.seconds,
          size,
          ...(reference ? { input_reference: reference } : {}),
        },
        jobId: `video_${randomBytes(16).toString('hex')}`,
      };
    },
    /** The answer to "create" is the new video as queued (a worker may already hold it). */
    async respond(ctx, accepted, deps) {
      const { keyId } = ctx.state;
      const id = accepted.jobId!;
      // The key's index of videos lives as long as its newest entry can, and holds at most the newest 10,000.
      const expiry = deps.config.asyncResultTtlSeconds;
      await deps.redis
        .multi()
        .zadd(videosOfKey(keyId), Date.now(), id)
        .zremrangebyrank(videosOfKey(keyId), 0, -10_001)
        .expire(videosOfKey(keyId), expiry)
        .exec();
      const owned = await loadOwnedJob(deps.redis, deps.queues, id, keyId, 'video');
      ctx.status = 200;
      ctx.remove('location');
      ctx.body = renderVideo({ ...owned, status: 'queued', progress: 0 }, deps.config.asyncResultTtlSeconds);
    },
  },
};
