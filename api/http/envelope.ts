import { randomUUID } from 'node:crypto';
import type { Middleware } from 'koa';
import { GatewayError, queueUnavailable, recordUnavailable, serverError } from '../../shared/errors.js';
import { lazyChild, type Logger } from '../../shared/logger.js';
import { anthropicErrorBody, anthropicStatus, speaksAnthropic } from '../../shared/messages.js';
import { geminiErrorBody, speaksGoogle } from '../../shared/gemini.js';
import { clientClosedEarly, clientClosedStatus } from './client-closed.js';

export interface RequestIdState {
  requestId: string;
  log: Logger;
}

/**
 * What the envelope tells the rest of the api of a request (the request log): that it arrived, and the error it was
 * answered with.
 */
export interface EnvelopeNotes<S> {
  arrived(ctx: { state: S }): void;
  failed(ctx: { state: S }, code: string, message: string): void;
}

/**
 * Whether a request is answered in Google's shape: a path of Google's dialect (`/v1beta/…`, a model's
 * `/v1/models/{model}:{method}`), or the model list and model of `/v1` asked with Google's key header, as the
 * GenAI SDKs ask them (an `anthropic-version` header picks Anthropic's shape there the same way).
 */
export function answersGoogle(ctx: { path: string; method: string; get(name: string): string }): boolean {
  if (speaksGoogle(ctx.path)) return true;
  return (ctx.path === '/v1/models' || ctx.path.startsWith('/v1/models/')) && ctx.get('x-goog-api-key') !== '';
}

/**
 * An error in Google's shape: its status name, a `RetryInfo` where a `Retry-After` says when to try again, an
 * `ErrorInfo` naming a key the gateway does not know (`API_KEY_INVALID`, as Google names it), and a
 * `QuotaFailure` describing a refusal of the key's limit or the account's balance.
 */
export function googleErrorBody(error: GatewayError): { error: Record<string, unknown> } {
  const retryAfter = Number(error.headers['retry-after']);
  const body = geminiErrorBody(
    error.status,
    error.message,
    Number.isFinite(retryAfter) && error.headers['retry-after'] !== undefined ? retryAfter : undefined,
  );
  const details = (body.error.details as unknown[] | undefined) ?? [];
  if (error.code === 'invalid_api_key' && error.status === 403) {
    details.push({
      '@type': 'type.googleapis.com/google.rpc.ErrorInfo',
      reason: 'API_KEY_INVALID',
      domain: 'googleapis.com',
      metadata: { service: 'generativelanguage.googleapis.com' },
    });
  }
  if (error.code === 'insufficient_quota') {
    details.push({
      '@type': 'type.googleapis.com/google.rpc.QuotaFailure',
      violations: [{ subject: 'api_key', description: error.message }],
    });
  }
  if (details.length > 0) body.error.details = details;
  return body;
}

/**
 * What every request gets around it: a fresh id (its money and its
 * request-log row are keyed by it, and most jobs' ids are it, so a client
 * cannot pick it) with a child logger; every failure rendered as the
 * OpenAI error body (only what was unexpected is logged as an error, a
 * client's mistake at debug); and one access-log line when it ends, with the
 * status the client got.
 */
export function envelope<S>(log: Logger, notes: EnvelopeNotes<S>): Middleware<RequestIdState & S> {
  const accessLog = log.isLevelEnabled('info');
  return async (ctx, next) => {
    const id = `req_${randomUUID().replaceAll('-', '')}`;
    const started = accessLog ? performance.now() : 0;
    const requestLog = lazyChild(log, () => ({ reqId: id }));
    ctx.state.requestId = id;
    ctx.state.log = requestLog;
    notes.arrived(ctx);
    ctx.set('x-request-id', id);
    // Anthropic's clients read `request-id`; the same id under both names.
    ctx.set('request-id', id);
    try {
      await next();
      // A client that hung up before the answer (a held request it gave up on) got nothing: not an unknown URL.
      if (ctx.body == null && ctx.respond !== false && !ctx.headerSent && !clientClosedEarly(ctx)) {
        if (ctx.status === 404)
          throw new GatewayError(404, `Unknown request URL: ${ctx.method} ${ctx.path}.`, { code: 'unknown_url' });
        // The router answers a method it knows nothing of (TRACE, PROPFIND…) with a bare 501: for a client that is a
        // 405.
        if (ctx.status === 405 || ctx.status === 501) {
          throw new GatewayError(405, `Method ${ctx.method} is not allowed on ${ctx.path}.`, {
            code: 'method_not_allowed',
          });
        }
      }
    } catch (caught) {
      const error = toGatewayError(caught);
      // A 503 the gateway chose (draining, overloaded) is an answer, not a fault: no stack, no error level.
      if (error.status === 503 && caught instanceof GatewayError)
        requestLog.warn({ status: error.status, code: error.code }, error.message);
      else if (error.status >= 500) requestLog.error({ err: caught }, error.message);
      else if (log.isLevelEnabled('debug')) requestLog.debug({ status: error.status, code: error.code }, error.message);
      if (!ctx.headerSent && ctx.respond !== false) {
        notes.failed(ctx, error.code ?? error.type, error.message);
        ctx.set(error.headers);
        // The path is canonical by now (the path guard ran inside): the Messages API answers its errors in Anthropic's
        // shape, Google's paths in Google's (a 503 stays a 503 there: UNAVAILABLE, which its clients retry).
        if (answersGoogle(ctx)) {
          ctx.status = error.status;
          ctx.body = googleErrorBody(error);
        } else if (speaksAnthropic(ctx.path)) {
          ctx.status = anthropicStatus(error.status);
          ctx.body = anthropicErrorBody(error.status, error.message, id);
        } else {
          ctx.status = error.status;
          ctx.body = error.toBody();
        }
      }
    } finally {
      if (accessLog) {
        const ms = Math.round((performance.now() - started) * 10) / 10;
        const status = clientClosedEarly(ctx)
          ? clientClosedStatus
          : ctx.respond === false
            ? ctx.res.statusCode
            : ctx.status;
        log.info(
          { reqId: id, method: ctx.method, path: ctx.path, status, ms },
          status === clientClosedStatus ? 'request: the client closed the connection before the answer' : 'request',
        );
      }
    }
  };
}

function toGatewayError(caught: unknown): GatewayError {
  if (caught instanceof GatewayError) return caught;
  const unavailable = recordUnavailable(caught) ?? queueUnavailable(caught);
  if (unavailable) return unavailable;
  // Koa and Node raise HttpErrors (e.g. a malformed URL); keep their status when it is a client error.
  const status = (caught as { status?: number }).status;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    return new GatewayError(status, (caught as Error).message || 'Bad request.');
  }
  return serverError(undefined, caught);
}
