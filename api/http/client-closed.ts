import type { Context } from 'koa';

/** What the access log says of a request whose client hung up before any byte of the answer went out (nginx's 499). */
export const clientClosedStatus = 499;

/**
 * The client closed the connection before the answer's headers went out: nothing was answered, so
 * the request is neither a 4xx nor a 5xx, and its time says nothing of the gateway's latency.
 */
export function clientClosedEarly(ctx: Pick<Context, 'req' | 'res'>): boolean {
  return !ctx.res.headersSent && (ctx.res.destroyed || ctx.req.socket.destroyed);
}
