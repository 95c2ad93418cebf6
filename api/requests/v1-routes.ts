import type Router from '@koa/router';
import { createRouter } from '../http/canonical-path.js';
import { GatewayError, modelNotFound } from '../../shared/errors.js';
import { toOpenAIModel, type ModelResolver } from './model-resolver.js';
import { parseStrict } from '../accounts/account-requests.js';
import type { RecordDb } from '../../storage/record/database.js';
import { findRequest } from '../../storage/record/request-log.js';
import { generationNotFound, generationQuerySchema } from '../accounts/admin-requests.js';
import type { KeyedState } from './request-context.js';
import type { CatalogModel } from '../../shared/catalog.js';
import { invalidRequest } from '../../shared/errors.js';
import { googleModel, googleModelPage } from '../gemini/routes.js';

type State = KeyedState;

/**
 * Model listing, one request's record (`GET /v1/generation?id=`, for the key
 * that made it), and the OpenAI-shaped 404 for every other /v1 URL (the queued
 * endpoints are `endpoint-routes.ts`).
 */
export function v1Routes(deps: { models: ModelResolver; record: RecordDb }): Router<State> {
  const router = createRouter<State>('/v1');

  // An Anthropic client (it sends `anthropic-version`) gets Anthropic's model objects and paging, a Google client (it
  // sends `x-goog-api-key`, as the GenAI SDKs list models under /v1) Google's; any other, OpenAI's list.
  router.get('/models', (ctx) => {
    const models = deps.models.list();
    if (ctx.get('x-goog-api-key')) ctx.body = googleModelPage(models, ctx.query);
    else
      ctx.body = ctx.get('anthropic-version')
        ? anthropicModelPage(models, ctx.query)
        : { object: 'list', data: models.map(toOpenAIModel) };
  });

  router.get('/models/*model', (ctx) => {
    const raw = ctx.params.model as string | string[];
    const id = Array.isArray(raw) ? raw.join('/') : raw;
    if (ctx.get('x-goog-api-key')) {
      ctx.body = googleModel(deps.models, id, 'v1');
      return;
    }
    const model = deps.models.get(id);
    if (!model) throw modelNotFound(id);
    ctx.body = ctx.get('anthropic-version') ? toAnthropicModel(model) : toOpenAIModel(model);
  });

  router.get('/generation', async (ctx) => {
    const { id } = parseStrict(generationQuerySchema, ctx.query);
    const found = await findRequest(deps.record, id, ctx.state.keyId);
    if (!found) throw generationNotFound(id);
    ctx.body = { data: found };
  });

  // The Realtime API answers only a WebSocket upgrade (api/realtime/); a plain request to it is told so.
  router.all('/realtime', (ctx) => {
    throw new GatewayError(
      426,
      `The Realtime API is a WebSocket: open ${ctx.method === 'GET' ? 'this URL' : 'GET /v1/realtime?model=…'} with \`Upgrade: websocket\`.`,
      {
        code: 'upgrade_required',
        headers: { upgrade: 'websocket' },
      },
    );
  });

  router.all('/{*rest}', (ctx) => {
    throw new GatewayError(404, `Unknown request URL: ${ctx.method} ${ctx.path}.`, { code: 'unknown_url' });
  });

  return router;
}

/** A model as Anthropic's Models API describes one. */
function toAnthropicModel(model: CatalogModel) {
  return {
    type: 'model' as const,
    id: model.id,
    display_name: model.id,
    created_at: new Date(model.created * 1000).toISOString(),
  };
}

/** One page of Anthropic's model list: `limit` (1–1000, 20) models after `after_id` or before `before_id`. */
function anthropicModelPage(models: readonly CatalogModel[], query: Record<string, unknown>) {
  const text = (name: string) => (typeof query[name] === 'string' ? (query[name] as string) : undefined);
  const limit = text('limit') === undefined ? 20 : Number(text('limit'));
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
    throw invalidRequest('limit must be a whole number from 1 to 1000.', 'limit');
  const cursor = (name: string) => {
    const id = text(name);
    if (id === undefined) return undefined;
    const at = models.findIndex((model) => model.id === id);
    if (at < 0) throw invalidRequest(`No model with id '${id.slice(0, 80)}'.`, name);
    return at;
  };
  const after = cursor('after_id');
  const before = cursor('before_id');
  const end = before ?? models.length;
  const start = after !== undefined ? after + 1 : before !== undefined ? Math.max(0, end - limit) : 0;
  const page = models.slice(start, Math.min(end, start + limit)).map(toAnthropicModel);
  const hasMore = before !== undefined ? start > 0 : start + limit < end;
  return { data: page, has_more: hasMore, first_id: page[0]?.id ?? null, last_id: page.at(-1)?.id ?? null };
}
