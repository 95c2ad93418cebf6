import type Router from '@koa/router';
import { createRouter } from '../http/canonical-path.js';
import { GatewayError, modelNotFound } from '../../shared/errors.js';
import { toOpenAIModel, type ModelResolver } from './model-resolver.js';
import { parseStrict } from '../accounts/account-requests.js';
import type { RecordDb } from '../../storage/record/database.js';
import { findRequest } from '../../storage/record/request-log.js';
import { generationNotFound, generationQuerySchema } from '../accounts/admin-requests.js';
import type { KeyedState } from './request-context.js';

type State = KeyedState;

/**
 * Model listing, one request's record (`GET /v1/generation?id=`, for the key
 * that made it), and the OpenAI-shaped 404 for every other /v1 URL (the queued
 * endpoints are `endpoint-routes.ts`).
 */
export function v1Routes(deps: { models: ModelResolver; record: RecordDb }): Router<State> {
  const router = createRouter<State>('/v1');

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

  router.get('/generation', async (ctx) => {
    const { id } = parseStrict(generationQuerySchema, ctx.query);
    const found = await findRequest(deps.record, id, ctx.state.keyId);
    if (!found) throw generationNotFound(id);
    ctx.body = { data: found };
  });

  router.all('/{*rest}', (ctx) => {
    throw new GatewayError(404, `Unknown request URL: ${ctx.method} ${ctx.path}.`, { code: 'unknown_url' });
  });

  return router;
}
