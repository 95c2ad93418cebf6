import type { SessionAnswer } from './types';

/*
 * The one way the console talks to /console/api: JSON in and out, the session
 * cookie sent by the browser, the CSRF token on every state-changing call.
 * Errors come back as ApiError with the server's own message, which the
 * pages show as they are.
 */

export const apiBase = '/console/api';

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | null = null,
    readonly param: string | null = null,
    /** The gateway's id of the request that failed (its `x-request-id`), when the answer named one. */
    readonly requestId: string | null = null,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

let csrfToken = '';
let notSignedInHandler: (() => void) | undefined;
let teamLostHandler: (() => void) | undefined;
/**
 * The team every call works in (its id), or '' for the person's own account, which the server takes when none is named.
 */
let currentTeam = '';

/** The newest CSRF token (from the session, sign-in, sign-up and sign-out answers). */
export function setCsrfToken(token: string | undefined): void {
  if (token) csrfToken = token;
}

/** Called whenever the server says the session is gone (401 not_signed_in). */
export function onNotSignedIn(handler: () => void): void {
  notSignedInHandler = handler;
}

/**
 * The team the console works in from now on: sent as `x-team` on every call ('' for the person's own account), so a
 * page's reads and changes are always the chosen team's, and never a mix.
 */
export function setCurrentTeam(id: string): void {
  currentTeam = id;
}

/**
 * `team=<id>` for a link the browser follows itself (a CSV download), which sends no header; '' in the person's own
 * account.
 */
export function teamQuery(): string {
  return currentTeam ? `team=${encodeURIComponent(currentTeam)}` : '';
}

/**
 * Called when the server says the current team is not one the person is in (any more): the console drops the choice.
 */
export function onTeamLost(handler: () => void): void {
  teamLostHandler = handler;
}

const unreachable = () =>
  new ApiError('Could not reach the server. Check your connection and try again.', 0, 'network_error');

/** The error an answer carries, read from its OpenAI-shaped body (or made up from the status when it has none). */
export async function errorFrom(response: Response): Promise<ApiError> {
  let message = `The server answered ${response.status} ${response.statusText}`.trim() + '.';
  let code: string | null = null;
  let param: string | null = null;
  try {
    const body = (await response.json()) as { error?: { message?: unknown; code?: unknown; param?: unknown } };
    if (body.error && typeof body.error.message === 'string' && body.error.message) message = body.error.message;
    if (body.error && typeof body.error.code === 'string') code = body.error.code;
    if (body.error && typeof body.error.param === 'string') param = body.error.param;
  } catch {
    // not JSON: keep the status line
  }
  if (response.status === 429) {
    const retry = Number(response.headers.get('retry-after'));
    if (Number.isFinite(retry) && retry > 0 && !/\btry again\b|\bretry\b/i.test(message)) {
      message += ` Try again in ${retry} second${retry === 1 ? '' : 's'}.`;
    }
  }
  return new ApiError(message, response.status, code, param, response.headers.get('x-request-id'));
}

export function isNotSignedIn(error: unknown): boolean {
  return error instanceof ApiError && error.status === 401 && error.code === 'not_signed_in';
}

/** Sends a request to the console API with the cookie and (unless GET) the CSRF header. */
export async function send(method: string, path: string, body?: unknown, init: RequestInit = {}): Promise<Response> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && method !== 'HEAD') headers['x-csrf-token'] = csrfToken;
  if (currentTeam) headers['x-team'] = currentTeam;
  try {
    return await fetch(`${apiBase}${path}`, {
      ...init,
      method,
      headers,
      credentials: 'same-origin',
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  } catch (error) {
    if (error instanceof DOMException && error.name === 'AbortError') throw error;
    throw unreachable();
  }
}

/**
 * Fetches the session again for a fresh CSRF token (after a csrf_failed, e.g. a session that changed in another tab).
 */
async function refreshCsrf(): Promise<void> {
  const response = await send('GET', '/session');
  if (response.ok) setCsrfToken(((await response.json()) as SessionAnswer).csrf_token);
}

/**
 * A JSON call. Throws ApiError with the server's message on any error; a 401
 * not_signed_in also sends the user to the sign-in page. A CSRF refusal is
 * retried once with a fresh token.
 */
export async function api<T>(method: string, path: string, body?: unknown, init: RequestInit = {}): Promise<T> {
  let response = await send(method, path, body, init);
  if (response.status === 403 && method !== 'GET') {
    const error = await errorFrom(response.clone());
    if (error.code === 'csrf_failed') {
      await refreshCsrf();
      response = await send(method, path, body, init);
    }
  }
  if (!response.ok) {
    const error = await errorFrom(response);
    if (error.status === 401 && error.code === 'not_signed_in') notSignedInHandler?.();
    if (error.status === 404 && error.code === 'team_not_found' && currentTeam) teamLostHandler?.();
    throw error;
  }
  try {
    return (await response.json()) as T;
  } catch {
    throw new ApiError('The server sent an answer the console cannot read.', response.status, 'bad_response');
  }
}

/** Array answers may come bare or as `{object:'list', data}`. */
export function listOf<T>(answer: T[] | { data: T[] }): T[] {
  return Array.isArray(answer) ? answer : answer.data;
}

export function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}

/** Aborted requests (a page left, a stream stopped) are not errors worth showing. */
export function isAbort(error: unknown): boolean {
  return error instanceof DOMException && error.name === 'AbortError';
}

/**
 * A POST whose answer is not JSON (a stream, audio): retried once on a CSRF refusal; an error answer thrown as
 * ApiError.
 */
async function post(path: string, body: unknown, signal: AbortSignal): Promise<Response> {
  let response = await send('POST', path, body, { signal });
  if (response.status === 403) {
    const error = await errorFrom(response.clone());
    if (error.code === 'csrf_failed') {
      await refreshCsrf();
      response = await send('POST', path, body, { signal });
    }
  }
  if (!response.ok) {
    const error = await errorFrom(response);
    if (error.status === 401 && error.code === 'not_signed_in') notSignedInHandler?.();
    if (error.status === 404 && error.code === 'team_not_found' && currentTeam) teamLostHandler?.();
    throw error;
  }
  return response;
}

export interface ChatMessage {
  role: 'user' | 'assistant' | 'system';
  content: string;
}

/** The usage an OpenAI answer reports (`usage`, or a stream's last chunk with `stream_options.include_usage`). */
export interface AnswerUsage {
  prompt_tokens: number;
  completion_tokens: number;
}

/** What a playground answer says of itself besides its content: the request's id, the server's clock, its usage. */
export interface AnswerFacts {
  /** The request's id (`x-request-id`): its request-log row, with what it cost, is found by it. */
  requestId: string | null;
  /** The answer's Date header: the server's clock. */
  date: string | null;
  /** The usage the answer reported, when it did. */
  usage: AnswerUsage | null;
}

function usageOf(value: unknown): AnswerUsage | null {
  const usage = value as { prompt_tokens?: unknown; completion_tokens?: unknown } | null | undefined;
  if (!usage || typeof usage.prompt_tokens !== 'number' || typeof usage.completion_tokens !== 'number') return null;
  return { prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens };
}

/**
 * Streams a playground chat completion: reads the SSE body line by line and
 * hands each `choices[0].delta.content` to onDelta, until `data: [DONE]`. An
 * error object in the stream is thrown as ApiError naming the request. The
 * usage comes in the stream's last chunk (`stream_options.include_usage`).
 */
export async function streamChat(
  body: { model: string; messages: ChatMessage[]; temperature?: number; max_tokens?: number },
  onDelta: (text: string) => void,
  signal: AbortSignal,
): Promise<AnswerFacts> {
  const response = await post(
    '/playground/chat/completions',
    { ...body, stream: true, stream_options: { include_usage: true } },
    signal,
  );
  const facts: AnswerFacts = {
    requestId: response.headers.get('x-request-id'),
    date: response.headers.get('date'),
    usage: null,
  };
  if (!response.body)
    throw new ApiError('The server sent no stream.', response.status, 'bad_response', null, facts.requestId);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  const handle = (line: string): boolean => {
    if (!line.startsWith('data:')) return false;
    const data = line.slice(5).trim();
    if (data === '[DONE]') return true;
    if (!data) return false;
    let chunk: {
      error?: { message?: string; code?: string };
      choices?: { delta?: { content?: unknown } }[];
      usage?: unknown;
    };
    try {
      chunk = JSON.parse(data);
    } catch {
      return false;
    }
    if (chunk.error)
      throw new ApiError(
        chunk.error.message || 'The model failed to answer.',
        response.status,
        chunk.error.code ?? null,
        null,
        facts.requestId,
      );
    const content = chunk.choices?.[0]?.delta?.content;
    if (typeof content === 'string' && content) onDelta(content);
    facts.usage = usageOf(chunk.usage) ?? facts.usage;
    return false;
  };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      const lines = buffer.split(/\r?\n/);
      buffer = lines.pop() ?? '';
      for (const line of lines) if (handle(line)) return facts;
    }
    if (buffer) handle(buffer);
    return facts;
  } finally {
    reader.cancel().catch(() => {});
  }
}

/** A playground POST answered in JSON, with what the answer says of itself (its request id, the server's clock). */
export async function playgroundJson<T>(
  path: string,
  body: unknown,
  signal: AbortSignal,
): Promise<{ body: T } & AnswerFacts> {
  const response = await post(path, body, signal);
  const requestId = response.headers.get('x-request-id');
  let answer: T;
  try {
    answer = (await response.json()) as T;
  } catch (error) {
    if (isAbort(error)) throw error;
    throw new ApiError(
      'The server sent an answer the console cannot read.',
      response.status,
      'bad_response',
      null,
      requestId,
    );
  }
  return {
    body: answer,
    requestId,
    date: response.headers.get('date'),
    usage: usageOf((answer as { usage?: unknown } | null)?.usage),
  };
}

/** What the playground's Speech tab sends: `POST /v1/audio/speech`'s body, audio answered as bytes. */
export interface SpeechRequest {
  model: string;
  input: string;
  voice: string;
  response_format: string;
  speed?: number;
  instructions?: string;
}

export interface SpokenAudio {
  /** The audio, typed as the gateway answered it (raw PCM made a WAV, which a browser can play). */
  audio: Blob;
  /** The request's id (`x-request-id`): its request-log row, with what it cost, is found by it. */
  requestId: string | null;
  /** The answer's Date header: the server's clock. */
  date: string | null;
}

/**
 * Speaks text through the playground (billed to the account's Playground
 * key) and reads the whole audio. An audio stream cut short (a vendor that
 * failed mid-way) is an ApiError naming the request, not a shorter clip.
 */
export async function speak(body: SpeechRequest, signal: AbortSignal): Promise<SpokenAudio> {
  const response = await post('/playground/audio/speech', body, signal);
  const requestId = response.headers.get('x-request-id');
  const date = response.headers.get('date');
  let bytes: ArrayBuffer;
  try {
    bytes = await response.arrayBuffer();
  } catch (error) {
    if (isAbort(error)) throw error;
    throw new ApiError(
      'The audio stopped before its end: the model failed while it spoke.',
      response.status,
      'stream_interrupted',
      null,
      requestId,
    );
  }
  if (bytes.byteLength === 0)
    throw new ApiError('The server sent no audio.', response.status, 'bad_response', null, requestId);
  const type = (response.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  if (body.response_format === 'pcm' || type === 'audio/pcm') return { audio: wavOfPcm(bytes), requestId, date };
  return { audio: new Blob([bytes], { type: type || 'application/octet-stream' }), requestId, date };
}

/** OpenAI's `pcm`: 24 kHz, 16-bit little-endian, mono, no header. A 44-byte RIFF header makes it a WAV. */
const pcmRate = 24_000;

function wavOfPcm(pcm: ArrayBuffer): Blob {
  const header = new DataView(new ArrayBuffer(44));
  const ascii = (at: number, text: string) => {
    for (let i = 0; i < text.length; i++) header.setUint8(at + i, text.charCodeAt(i));
  };
  const length = pcm.byteLength - (pcm.byteLength % 2);
  ascii(0, 'RIFF');
  header.setUint32(4, 36 + length, true);
  ascii(8, 'WAVE');
  ascii(12, 'fmt ');
  header.setUint32(16, 16, true);
  header.setUint16(20, 1, true); // PCM
  header.setUint16(22, 1, true); // mono
  header.setUint32(24, pcmRate, true);
  header.setUint32(28, pcmRate * 2, true);
  header.setUint16(32, 2, true);
  header.setUint16(34, 16, true);
  ascii(36, 'data');
  header.setUint32(40, length, true);
  return new Blob([header.buffer, pcm.slice(0, length)], { type: 'audio/wav' });
}
