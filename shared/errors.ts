/**
 * The one error type of the gateway. Everything that reaches a client as an
 * error is a GatewayError rendered as the OpenAI error body.
 */
export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export interface GatewayErrorOptions {
  type?: string;
  code?: string | null;
  param?: string | null;
  /** A vendor call that failed this way may be tried again (before any output reached the client). */
  retryable?: boolean;
  /** Vendor- or gateway-advised wait before a retry. */
  retryAfterMs?: number;
  /** Extra response headers (retry-after, x-should-retry). */
  headers?: Record<string, string>;
  cause?: unknown;
}

export class GatewayError extends Error {
  readonly status: number;
  readonly type: string;
  readonly code: string | null;
  readonly param: string | null;
  readonly retryable: boolean;
  readonly retryAfterMs: number | undefined;
  readonly headers: Record<string, string>;

  constructor(status: number, message: string, options: GatewayErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'GatewayError';
    this.status = status;
    this.type = options.type ?? defaultTypeForStatus(status);
    this.code = options.code ?? null;
    this.param = options.param ?? null;
    this.retryable = options.retryable ?? false;
    this.retryAfterMs = options.retryAfterMs;
    this.headers = options.headers ?? {};
  }

  toBody(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }

  /** The form that travels from a worker to the api over the reply channel. */
  toWire(): WireError {
    return { status: this.status, headers: this.headers, ...this.toBody() };
  }

  static fromWire(wire: WireError): GatewayError {
    const { message, type, code, param } = wire.error;
    return new GatewayError(wire.status, message, { type, code, param, headers: wire.headers ?? {} });
  }
}

export interface WireError extends ErrorBody {
  status: number;
  headers?: Record<string, string>;
}

function defaultTypeForStatus(status: number): string {
  if (status === 429) return 'rate_limit_exceeded';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

export const invalidRequest = (message: string, param: string | null = null, code: string | null = null) =>
  new GatewayError(400, message, { param, code });

export const modelNotFound = (model: string) =>
  new GatewayError(404, `The model \`${model}\` does not exist or you do not have access to it.`, {
    code: 'model_not_found',
    param: 'model',
  });

export const invalidApiKey = (message = 'Incorrect API key provided.') =>
  new GatewayError(401, message, { code: 'invalid_api_key' });

export const serverError = (message = 'The server had an error while processing your request.', cause?: unknown) =>
  new GatewayError(500, message, { code: 'server_error', cause });

export const overloaded = (retryAfterSeconds: number, message = 'The server is overloaded, please retry shortly.') =>
  new GatewayError(503, message, {
    type: 'server_error',
    code: 'overloaded',
    headers: { 'retry-after': String(retryAfterSeconds) },
  });

// Redis away, restarting, or (Cluster, Sentinel) failing over: nothing the client did.
const redisUnavailable =
  /MaxRetriesPerRequest|Connection is closed|ECONNREFUSED|ECONNRESET|Stream isn't writeable|Too many Cluster redirections|CLUSTERDOWN|TRYAGAIN|MASTERDOWN|LOADING|READONLY|Failed to refresh slots cache|None of startup nodes is available/;

/**
 * The 503 for an error that says Redis could not be reached (a retry shortly may well succeed); undefined for any other
 * error.
 */
export function queueUnavailable(caught: unknown): GatewayError | undefined {
  if (!redisUnavailable.test(`${(caught as Error)?.name} ${(caught as Error)?.message}`)) return undefined;
  return new GatewayError(503, 'The gateway cannot reach its queue right now; retry shortly.', {
    code: 'queue_unavailable',
    headers: { 'retry-after': '1' },
    retryable: true,
    cause: caught,
  });
}

/**
 * Set by the record's pool (storage/record/database.ts) on an error of taking a connection: PostgreSQL could not be
 * reached.
 */
export const recordUnreachable = Symbol.for('switchyard.recordUnreachable');

/**
 * SQLSTATE classes that say the server is away, not that the statement was wrong: 08 (connection), 57P0x (shutting
 * down, starting up).
 */
const recordAwayState = /^(08\d{3}|57P0\d)$/;

/**
 * The 503 for an error that says PostgreSQL could not be reached (stopped, restarting, refusing connections):
 * a retry shortly may well succeed. Undefined for any other error. Checked before `queueUnavailable`, whose
 * connection errors would otherwise name the wrong server.
 */
export function recordUnavailable(caught: unknown): GatewayError | undefined {
  const error = caught as { [recordUnreachable]?: boolean; code?: unknown } | null;
  if (
    !error ||
    (error[recordUnreachable] !== true && !(typeof error.code === 'string' && recordAwayState.test(error.code)))
  )
    return undefined;
  return new GatewayError(503, 'The gateway cannot reach its record right now; retry shortly.', {
    code: 'record_unavailable',
    headers: { 'retry-after': '2' },
    retryable: true,
    cause: caught,
  });
}

export const timeoutError = (message = 'The request timed out before the model answered.') =>
  new GatewayError(504, message, { type: 'server_error', code: 'timeout' });

export function isGatewayError(value: unknown): value is GatewayError {
  return value instanceof GatewayError;
}
