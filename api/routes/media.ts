import Router from '@koa/router';
import { z } from 'zod';
import { imageEditFieldsSchema, imageGenerationRequestSchema } from '../../shared/schemas/images.js';
import { invalidRequest } from '../../shared/errors.js';
import { formNumber } from '../../shared/schemas/common.js';
import { readJsonObject } from '../json-body.js';
import { parseBody } from '../validate.js';
import { relay, type RelayDeps } from '../relay.js';
import type { ModelResolver } from '../model-resolver.js';
import { readMultipart, refusingDeletesUploads } from '../multipart.js';
import { checkEditable, checkEditUploads, checkImageRequest } from '../image-rules.js';
import type { BlobStore } from '../../storage/blob-store.js';
import type { AuthState } from '../middleware/auth.js';
import type { RequestIdState } from '../middleware/request-id.js';
import { asyncMode } from './v1.js';

type State = AuthState & RequestIdState;

export interface MediaRouteDeps extends RelayDeps {
  models: ModelResolver;
  blobs: BlobStore;
}

const transcriptionFieldsSchema = z.looseObject({
  model: z.string().min(1),
  language: z.string().min(2).max(16).optional(),
  prompt: z.string().optional(),
  response_format: z.enum(['json', 'text', 'srt', 'verbose_json', 'vtt']).default('json'),
  temperature: formNumber().pipe(z.number().min(0).max(1)).optional(),
  'timestamp_granularities[]': z.array(z.enum(['word', 'segment'])).optional(),
});

const textFormats: Record<string, string> = { text: 'text/plain; charset=utf-8', srt: 'text/plain; charset=utf-8', vtt: 'text/plain; charset=utf-8' };

/** Images, image edits and transcriptions: the same queue ride, with uploads kept in the blob store. */
export function mediaRoutes(deps: MediaRouteDeps): Router<State> {
  const router = new Router<State>({ prefix: '/v1' });
  const { config } = deps;

  router.post('/images/generations', async (ctx) => {
    const body = parseBody(imageGenerationRequestSchema, await readJsonObject(ctx.req, config.maxBodyBytes));
    const model = deps.models.resolve(body.model, 'images.generations');
    checkImageRequest(model, body);
    await relay(ctx, deps, { endpoint: 'images.generations', model: model.id, keyId: ctx.state.keyId, body, stream: false, async: asyncMode(ctx, false) });
  });

  router.post('/images/edits', async (ctx) => {
    const form = await readMultipart(ctx.req, deps.blobs, ctx.state.requestId, config.maxImageBytes);
    const { model, body } = await refusingDeletesUploads(form, deps.blobs, () => {
      const fields = parseBody(imageEditFieldsSchema, Object.fromEntries(Object.entries(form.fields).map(([k, v]) => [k, Array.isArray(v) ? v.at(-1) : v])));
      const model = deps.models.resolve(fields.model, 'images.edits');
      checkEditable(model);
      checkImageRequest(model, fields);
      const uploads = form.files.filter((f) => f.field === 'image' || f.field === 'image[]');
      if (uploads.length === 0) throw invalidRequest("Missing required parameter: 'image' (send the image file as a multipart part).", 'image');
      const maskUpload = form.files.find((f) => f.field === 'mask');
      checkEditUploads(model, uploads, maskUpload);
      const mask = maskUpload?.ref;
      return { model, body: { ...fields, images: uploads.map((f) => f.ref), ...(mask ? { mask } : {}) } };
    });
    await relay(ctx, deps, { endpoint: 'images.edits', model: model.id, keyId: ctx.state.keyId, body, stream: false, async: asyncMode(ctx, false) });
  });

  router.post('/audio/transcriptions', async (ctx) => {
    const form = await readMultipart(ctx.req, deps.blobs, ctx.state.requestId, config.maxAudioBytes);
    const { model, fields, body } = await refusingDeletesUploads(form, deps.blobs, () => {
      const raw: Record<string, unknown> = {};
      for (const [name, value] of Object.entries(form.fields)) raw[name] = name.endsWith('[]') ? [value].flat() : Array.isArray(value) ? value.at(-1) : value;
      const fields = parseBody(transcriptionFieldsSchema, raw);
      const model = deps.models.resolve(fields.model, 'audio.transcriptions');
      const file = form.files.find((f) => f.field === 'file')?.ref;
      if (!file) throw invalidRequest("Missing required parameter: 'file' (send the audio file as a multipart part).", 'file');
      if (fields['timestamp_granularities[]'] && fields.response_format !== 'verbose_json') {
        throw invalidRequest('timestamp_granularities requires response_format verbose_json.', 'timestamp_granularities');
      }
      const body = {
        file,
        response_format: fields.response_format,
        ...(fields.language ? { language: fields.language } : {}),
        ...(fields.prompt ? { prompt: fields.prompt } : {}),
        ...(fields.temperature !== undefined ? { temperature: fields.temperature } : {}),
        ...(fields['timestamp_granularities[]'] ? { timestamp_granularities: fields['timestamp_granularities[]'] } : {}),
      };
      return { model, fields, body };
    });
    await relay(ctx, deps, {
      endpoint: 'audio.transcriptions',
      model: model.id,
      keyId: ctx.state.keyId,
      body,
      stream: false,
      async: asyncMode(ctx, false),
      contentType: textFormats[fields.response_format] ?? 'application/json',
    });
  });

  return router;
}
