import { createHash, timingSafeEqual } from 'node:crypto';
import Router from '@koa/router';
import { z } from 'zod';
import { GatewayError } from '../../shared/errors.js';
import { parseBody, readJsonObject } from '../request-body.js';
import type { KeyStore } from '../key-store.js';

const createKeySchema = z.object({ name: z.string().trim().min(1).max(200) });

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

/** Key management behind `Authorization: Bearer $ADMIN_TOKEN` (compared in constant time). */
export function adminRoutes(store: KeyStore, adminToken: string | undefined): Router {
  const router = new Router({ prefix: '/admin' });
  const expected = adminToken ? digest(adminToken) : undefined;

  router.use(async (ctx, next) => {
    if (!expected) {
      throw new GatewayError(403, 'The admin API is disabled: set ADMIN_TOKEN to enable it.', { code: 'admin_disabled' });
    }
    const match = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get('authorization'));
    if (!match || !timingSafeEqual(digest(match[1]!), expected)) {
      throw new GatewayError(401, 'Invalid admin token.', { code: 'invalid_admin_token' });
    }
    await next();
  });

  router.post('/keys', async (ctx) => {
    const { name } = parseBody(createKeySchema, await readJsonObject(ctx.req, 64 * 1024));
    const created = await store.create(name);
    ctx.status = 201;
    ctx.body = { id: created.id, key: created.key, name: created.name, created: created.created };
  });

  router.get('/keys', async (ctx) => {
    ctx.body = { object: 'list', data: await store.list() };
  });

  router.delete('/keys/:id', async (ctx) => {
    const id = ctx.params.id!;
    if (!(await store.revoke(id))) throw new GatewayError(404, `No API key with id '${id}'.`, { code: 'key_not_found' });
    ctx.body = { id, object: 'api_key', deleted: true };
  });

  return router;
}
