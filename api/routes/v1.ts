import type Router from '@koa/router';
import { createRouter } from '../canonical-path.js';
import { GatewayError, modelNotFound } from '../../shared/errors.js';
import { toOpenAIModel, type ModelResolver } from '../model-resolver.js';
import type { AuthState } from '../middleware/auth.js';
import type { RequestIdState } from '../middleware/envelope.js';

type State = AuthState & RequestIdState;

/** Model listing, and the OpenAI-shaped 404 for every other /v1 URL (the queued endpoints are `endpoint-routes.ts`). */
export function v1Routes(deps: { models: ModelResolver }): Router<State> {
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

  router.all('/{*rest}', (ctx) => {
    throw new GatewayError(404, `Unknown request URL: ${ctx.method} ${ctx.path}.`, { code: 'unknown_url' });
  });

  return router;
}
