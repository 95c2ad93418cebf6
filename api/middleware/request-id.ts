import { randomUUID } from 'node:crypto';
import type { Middleware } from 'koa';
import type { Logger } from '../../shared/logger.js';

export interface RequestIdState {
  requestId: string;
  log: Logger;
}

/**
 * Every request gets a fresh id (also its job id, so a client cannot pick it)
 * and a child logger; one line is logged per request when it ends.
 */
export function requestId(log: Logger): Middleware<RequestIdState> {
  return async (ctx, next) => {
    const id = `req_${randomUUID().replaceAll('-', '')}`;
    const started = performance.now();
    ctx.state.requestId = id;
    ctx.state.log = log.child({ reqId: id });
    ctx.set('x-request-id', id);
    try {
      await next();
    } finally {
      const ms = Math.round((performance.now() - started) * 10) / 10;
      const status = ctx.respond === false ? ctx.res.statusCode : ctx.status;
      ctx.state.log.info({ method: ctx.method, path: ctx.path, status, ms }, 'request');
    }
  };
}
