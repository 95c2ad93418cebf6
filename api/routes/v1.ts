import Router from '@koa/router';
import { chatCompletionRequestSchema } from '../../shared/schemas/chat.js';
import { completionRequestSchema } from '../../shared/schemas/completions.js';
import { embeddingRequestSchema } from '../../shared/schemas/embeddings.js';
import { GatewayError, invalidRequest, modelNotFound } from '../../shared/errors.js';
import { readJsonObject } from '../json-body.js';
import { parseBody } from '../validate.js';
import { checkChatContext, checkCompletionContext, checkEmbeddingContext, checkModalities } from '../context-window.js';
import { prefersAsync, relay, type RelayDeps } from '../relay.js';
import { toOpenAIModel, type ModelResolver } from '../model-resolver.js';
import type { AuthState } from '../middleware/auth.js';
import type { RequestIdState } from '../middleware/request-id.js';

type State = AuthState & RequestIdState;

/** `Prefer: respond-async` on any POST; a stream has nothing to hand over later, so the two do not mix. */
export function asyncMode(ctx: { get(name: string): string }, stream: boolean): boolean {
  const wanted = prefersAsync(ctx.get('prefer'));
  if (wanted && stream) throw invalidRequest('A streamed request cannot also be answered asynchronously (Prefer: respond-async).', 'stream');
  return wanted;
}

export function v1Routes(deps: RelayDeps & { models: ModelResolver }): Router<State> {
  const router = new Router<State>({ prefix: '/v1' });
  const limit = deps.config.maxBodyBytes;

  router.get('/models', (ctx) => {
    ctx.body = { object: 'list', data: deps.models.list().map(toOpenAIModel) };
  });

  router.get('/models/*model', (ctx) => {
    const raw = ctx.params.model as string | string[];
    const id = Array.isArray(raw) ? raw.join('/') : raw;
    const model = deps.models.get(id);
    if (!model) throw modelNotFound(id);
    ctx.body = toOpenAIModel(model);
  });

  router.post('/chat/completions', async (ctx) => {
    const body = parseBody(chatCompletionRequestSchema, await readJsonObject(ctx.req, limit));
    const model = deps.models.resolve(body.model, 'chat.completions');
    checkModalities(model, body.messages);
    await checkChatContext(model, body);
    if (body.stream_options && !body.stream) {
      throw invalidRequest('stream_options is only allowed when stream is true.', 'stream_options');
    }
    if (body.top_logprobs != null && !body.logprobs) {
      throw invalidRequest('top_logprobs requires logprobs to be true.', 'top_logprobs');
    }
    await relay(ctx, deps, { endpoint: 'chat.completions', model: body.model, keyId: ctx.state.keyId, body, stream: !!body.stream, async: asyncMode(ctx, !!body.stream) });
  });

  router.post('/completions', async (ctx) => {
    const body = parseBody(completionRequestSchema, await readJsonObject(ctx.req, limit));
    const model = deps.models.resolve(body.model, 'completions');
    if (body.stream && body.best_of != null && body.best_of > 1) {
      throw invalidRequest('best_of cannot be used with stream.', 'best_of');
    }
    if (body.stream_options && !body.stream) {
      throw invalidRequest('stream_options is only allowed when stream is true.', 'stream_options');
    }
    await checkCompletionContext(model, body);
    await relay(ctx, deps, { endpoint: 'completions', model: body.model, keyId: ctx.state.keyId, body, stream: !!body.stream, async: asyncMode(ctx, !!body.stream) });
  });

  router.post('/embeddings', async (ctx) => {
    const body = parseBody(embeddingRequestSchema, await readJsonObject(ctx.req, limit));
    const model = deps.models.resolve(body.model, 'embeddings');
    if (body.dimensions != null) {
      if (!model.supports_dimensions) {
        throw invalidRequest(`The model \`${model.id}\` does not support setting dimensions.`, 'dimensions');
      }
      if (model.dimensions && body.dimensions > model.dimensions) {
        throw invalidRequest(`dimensions must be at most ${model.dimensions} for \`${model.id}\`.`, 'dimensions');
      }
    }
    await checkEmbeddingContext(model, body);
    await relay(ctx, deps, { endpoint: 'embeddings', model: body.model, keyId: ctx.state.keyId, body, stream: false, async: asyncMode(ctx, false) });
  });

  router.all('/{*rest}', (ctx) => {
    throw new GatewayError(404, `Unknown request URL: ${ctx.method} ${ctx.path}.`, { code: 'unknown_url' });
  });

  return router;
}
