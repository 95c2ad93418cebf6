import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { waitFor } from './gateway.js';

/** What one client of a fault test ended up with. */
export interface Outcome {
  label: string;
  /** From sending the request to the end of the answer (or the failure). */
  ms: number;
  /** Epoch ms of the end of the answer (or the failure). */
  endedAt: number;
  /** Still unanswered when the test's bound ran out. */
  hung: boolean;
  /** The connection failed (refused, reset, cut mid-body). */
  connectionError?: string;
  status?: number;
  retryAfter?: string | null;
  /** Parsed JSON body of a non-stream answer. */
  body?: unknown;
  /** `data:` payloads of a stream, in order (comments dropped). */
  events?: string[];
}

export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/**
 * Sends one chat request with fetch and reads the whole answer, giving up
 * after `boundMs` (then the outcome says `hung`). `started` resolves when the
 * response headers arrive, so a test can act while a stream is open.
 */
export function chat(
  baseUrl: string,
  apiKey: string,
  label: string,
  body: Record<string, unknown>,
  boundMs: number,
): { outcome: Promise<Outcome>; started: Promise<void>; received: () => string } {
  const begin = Date.now();
  let text = '';
  let markStarted!: () => void;
  const started = new Promise<void>((resolve) => (markStarted = resolve));
  const outcome = (async (): Promise<Omit<Outcome, 'endedAt'>> => {
    const base = { label, hung: false };
    let res: Response;
    try {
      res = await fetch(`${baseUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mock-chat', ...body }),
        signal: AbortSignal.timeout(boundMs),
      });
    } catch (error) {
      markStarted();
      return { ...base, ...failure(error), ms: Date.now() - begin };
    }
    markStarted();
    const head = { ...base, status: res.status, retryAfter: res.headers.get('retry-after') };
    try {
      if ((res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
        const decoder = new TextDecoder();
        for await (const piece of res.body as unknown as AsyncIterable<Uint8Array>)
          text += decoder.decode(piece, { stream: true });
        return { ...head, events: dataEvents(text), ms: Date.now() - begin };
      }
      return { ...head, body: await res.json(), ms: Date.now() - begin };
    } catch (error) {
      return { ...head, events: dataEvents(text), ...failure(error), ms: Date.now() - begin };
    }
  })().then((o) => ({ ...o, endedAt: Date.now() }));
  return { outcome, started, received: () => text };
}

function failure(error: unknown): { hung: boolean; connectionError?: string } {
  const err = error as Error & { cause?: Error };
  if (err.name === 'TimeoutError' || err.cause?.name === 'TimeoutError') return { hung: true };
  return { hung: false, connectionError: `${err.message}${err.cause ? ` (${err.cause.message})` : ''}` };
}

function dataEvents(text: string): string[] {
  return (
    text
      .split('\n\n')
      // A chunk's frame starts with its number (`id: N`), for a resume; the error and [DONE] frames have none.
      .map((frame) => frame.trim().replace(/^id: \d+\n/, ''))
      .filter((frame) => frame.startsWith('data: '))
      .map((frame) => frame.slice('data: '.length))
  );
}

export function assertOpenAIError(value: unknown, code: string, where: string): void {
  const body = value as OpenAIErrorBody;
  assert.ok(body && typeof body.error === 'object', `${where}: an OpenAI error body, got ${JSON.stringify(value)}`);
  assert.deepEqual(
    Object.keys(body.error).sort(),
    ['code', 'message', 'param', 'type'],
    `${where}: OpenAI error fields`,
  );
  assert.equal(typeof body.error.message, 'string');
  assert.equal(body.error.code, code, `${where}: error code (${body.error.message})`);
}

/** The stream ended with an OpenAI error event carrying `code`, and no `[DONE]`. */
export function assertStreamError(outcome: Outcome, code: string): void {
  const where = `${outcome.label} (${summarize(outcome)})`;
  assert.equal(outcome.status, 200, `${where}: the stream had started`);
  const last = outcome.events?.at(-1);
  assert.ok(last !== undefined && last !== '[DONE]', `${where}: ends with an error event, not [DONE]`);
  assertOpenAIError(JSON.parse(last), code, where);
}

/** A plain HTTP error: status, OpenAI body with `code`, and a retry-after header. */
export function assertHttpError(outcome: Outcome, status: number, code: string): void {
  const where = `${outcome.label} (${summarize(outcome)})`;
  assert.equal(outcome.status, status, where);
  assertOpenAIError(outcome.body, code, where);
  assert.ok(outcome.retryAfter, `${where}: retry-after`);
}

/** The content a stream delivered, joined from its deltas; throws if it did not end with [DONE]. */
export function streamedText(outcome: Outcome): string {
  const where = `${outcome.label} (${summarize(outcome)})`;
  assert.equal(outcome.status, 200, where);
  assert.equal(outcome.events?.at(-1), '[DONE]', `${where}: ends with [DONE]`);
  let text = '';
  for (const event of outcome.events!.slice(0, -1)) {
    const chunk = JSON.parse(event) as { choices: Array<{ delta?: { content?: string } }> };
    text += chunk.choices[0]?.delta?.content ?? '';
  }
  return text;
}

export function summarize(outcome: Outcome): string {
  if (outcome.hung) return `no answer after ${outcome.ms} ms`;
  if (outcome.connectionError) return `connection error after ${outcome.ms} ms: ${outcome.connectionError}`;
  const tail = outcome.events
    ? `last event ${outcome.events.at(-1)?.slice(0, 160)}`
    : JSON.stringify(outcome.body).slice(0, 160);
  return `HTTP ${outcome.status} after ${outcome.ms} ms, ${tail}`;
}

/** Fails with every client's outcome when any of them hung or took longer than `boundMs`. */
export function assertNoneHung(outcomes: Outcome[], boundMs: number): void {
  const late = outcomes.filter((o) => o.hung || o.ms > boundMs);
  assert.equal(
    late.length,
    0,
    `clients without an answer within ${boundMs} ms:\n${outcomes.map((o) => `  ${o.label}: ${summarize(o)}`).join('\n')}`,
  );
}

/** Every outcome ended no later than `boundMs` after `from` (e.g. the fault). */
export function assertAnsweredWithin(outcomes: Outcome[], from: number, boundMs: number, what: string): void {
  const late = outcomes.filter((o) => o.endedAt - from > boundMs);
  assert.equal(
    late.length,
    0,
    `answered later than ${boundMs} ms after ${what}:\n${late.map((o) => `  ${o.label}: ${summarize(o)}`).join('\n')}`,
  );
}

/**
 * Jobs of a queue in each BullMQ state (read straight from Redis); jobs wait with a priority, in BullMQ's prioritized
 * set.
 */
export async function queueCounts(
  redis: Redis,
  queue = 'chat',
): Promise<{ wait: number; active: number; delayed: number }> {
  const [wait, prioritized, active, delayed] = await Promise.all([
    redis.llen(`bull:{${queue}}:wait`),
    redis.zcard(`bull:{${queue}}:prioritized`),
    redis.llen(`bull:{${queue}}:active`),
    redis.zcard(`bull:{${queue}}:delayed`),
  ]);
  return { wait: wait + prioritized, active, delayed };
}

export async function waitForQueue(
  redis: Redis,
  check: (counts: Awaited<ReturnType<typeof queueCounts>>) => boolean,
  timeoutMs: number,
  what: string,
): Promise<void> {
  await waitFor(async () => check(await queueCounts(redis)), timeoutMs, what);
}

/** Bounds on a hang for a loaded 2-core machine (the deadlines are longer), not speed targets. */
export const answerBoundMs = 20_000;
export const clientGiveUpMs = 60_000;

/** A prompt the mock answers with many chunks, `delayMs` apart (its reply quotes the prompt). */
export const slowPrompt = (tag: string, delayMs: number) =>
  `[mock:slow:${delayMs}] ${tag}: the quick brown fox jumps over the lazy dog while the patient gateway keeps ` +
  `every connection open`;
