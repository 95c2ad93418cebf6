import type { Context } from 'koa';
import type { Redis } from 'ioredis';
import type { Endpoint } from '../../shared/endpoints.js';
import type { KeyAccess } from '../../shared/accounts.js';
import type { RequestStatus } from '../../shared/money/usage.js';
import { appendRequestLog, loggedMessageChars, loggedText, type RequestLogEvent } from '../../shared/request-log.js';
import type { ServiceTier } from '../../shared/scheduling/vocabulary.js';

/**
 * The api's half of the request log: when a keyed request's response is
 * over (its last byte written, or its client gone), one event says how it
 * was answered. It is appended to the account's bucket's usage stream (one
 * XADD, after the answer, so never on the request's path) for the record's
 * writer, which merges it with the worker's settlement into the request's row.
 * What is noted along the way lives in the request's state under `requestLog`.
 */

export interface RequestLogNotes {
  /** `performance.now()` at the request's arrival (the envelope's). */
  arrived: number;
  /** The model as asked (the body's `model`) and, once resolved, the catalog's id. */
  model?: string;
  /** The job was queued: an error after this is the job's failure, before it a refusal. */
  enqueued?: boolean;
  /** A stream's first chunk written to the client. */
  firstChunk?: number;
  /** The error the client was answered with (as a status, or as a stream's error event). */
  errorCode?: string | null;
  /** That error's message, as the client read it. */
  errorMessage?: string;
}

/** What the request log adds to a request's state: its notes, from the envelope on. */
export interface RequestLogState {
  requestLog?: RequestLogNotes;
}

/** A request whose notes are read or written. */
type Noted = { state: RequestLogState };

const notes = (ctx: Noted): RequestLogNotes | undefined => ctx.state.requestLog;

/** Called by the envelope on arrival: every request carries the time, a keyed one may be logged. */
export function noteArrival(ctx: Noted): void {
  ctx.state.requestLog = { arrived: performance.now() };
}

/**
 * The model as the log keeps it: noted before the body is validated (a refusal is logged with what was asked), so as
 * text the record can store, a NUL (which the schema refuses) written as U+FFFD; a NUL in the log event would be an
 * entry the record's writer cannot write.
 */
export function noteLoggedModel(ctx: Noted, model: string): void {
  const n = notes(ctx);
  if (n) n.model = loggedText(model, 200);
}

export function noteEnqueued(ctx: Pick<Context, 'state'>): void {
  const n = notes(ctx);
  if (n) n.enqueued = true;
}

export function noteFirstChunk(ctx: Pick<Context, 'state'>): void {
  const n = notes(ctx);
  if (n && n.firstChunk === undefined) n.firstChunk = performance.now();
}

/**
 * The first error a request was answered with: its code, and its message as the client read it (the log keeps its first
 * 500 characters).
 */
export function noteError(ctx: Noted, code: string | null | undefined, message?: string): void {
  const n = notes(ctx);
  if (!n || n.errorCode !== undefined) return;
  n.errorCode = code ?? null;
  if (message) n.errorMessage = loggedText(message, loggedMessageChars);
}

export interface RequestLogDeps {
  redis: Redis;
  bufferRecords: number;
  log: { warn(obj: object, msg: string): void };
}

/** What the route learns of a request as it reads it: whether it streams, and whether its stream may be resumed. */
export interface RequestShape {
  stream: boolean;
  /** A stream with a resume grace: the client leaving does not end its job. */
  resumable: boolean;
  /** The tier it is served in, once its handler accepted it (chat and Responses requests). */
  serviceTier?: ServiceTier;
}

/**
 * Watches a keyed request to its end and then appends its log event. The
 * status: `cancelled` when the client left before the last byte (but for a
 * resumable stream, whose job runs on: the worker's settlement says whether it
 * was resumed, `completed`, or not, `cancelled`); else an error answered
 * before the job was queued is a refusal (validation, quota, rate limit,
 * overload), one after it a failure; else `completed`.
 */
export function watchRequest(
  ctx: Context & { state: RequestLogState & { requestId: string } },
  endpoint: Endpoint,
  shape: Readonly<RequestShape>,
  access: KeyAccess,
  deps: RequestLogDeps,
): void {
  const n = notes(ctx);
  if (!n) return;
  const res = ctx.res;
  const created = Math.floor((Date.now() - (performance.now() - n.arrived)) / 1000);
  res.once('close', () => {
    const now = performance.now();
    const finished = res.writableFinished;
    const failed = res.statusCode >= 400 || (n.errorCode !== undefined && n.errorCode !== null);
    // A response the gateway cut short itself after a failure it noted (speech's audio, which no byte can end with an
    // error) failed: the client did not leave.
    const cut = n.enqueued && n.errorCode !== undefined && n.errorCode !== null;
    const left = !finished && !(shape.resumable && n.enqueued) && !cut;
    const status: RequestStatus = left ? 'cancelled' : failed ? (n.enqueued ? 'failed' : 'refused') : 'completed';
    const streamed = shape.stream;
    const event: RequestLogEvent = {
      request_id: ctx.state.requestId,
      account_id: access.accountId,
      key_id: access.keyId,
      endpoint,
      model: n.model ?? '',
      stream: streamed,
      status,
      http_status: res.headersSent ? res.statusCode : null,
      error_code: n.errorCode ?? null,
      ...(n.errorMessage !== undefined ? { error_message: n.errorMessage } : {}),
      latency_ms: Math.round(now - n.arrived),
      ttft_ms: streamed && n.firstChunk !== undefined ? Math.round(n.firstChunk - n.arrived) : null,
      created,
      ...(shape.serviceTier !== undefined ? { service_tier: shape.serviceTier } : {}),
    };
    appendRequestLog(deps.redis, event, deps.bufferRecords).catch((error: unknown) =>
      deps.log.warn({ err: error }, 'could not append the request log event; this request has no log record'),
    );
  });
}
