/**
 * What the fuzz suite needs around its generators: sending a case (Node's
 * HTTP client, or raw bytes on a socket), judging the answer against the
 * properties every answer must have, and a /healthz poller in its own thread.
 */
import http from 'node:http';
import net from 'node:net';
import { Worker } from 'node:worker_threads';
import type { FuzzCase } from './fuzz-arbitraries.js';
import { preview } from './fuzz-arbitraries.js';

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

export type Outcome =
  | ({ kind: 'answer'; ms: number } & Answer)
  | { kind: 'dropped'; ms: number; error: string; partial?: Answer }
  | { kind: 'timeout'; ms: number; partial?: Answer }
  /** We closed the socket on purpose (a cut-off body) before any answer came. */
  | { kind: 'cut'; ms: number }
  /** The run was stopped from outside (fast-check's time limit): nothing to judge. */
  | { kind: 'cancelled' }
  /** Node's client would not write the request: a generator bug, not a gateway one. */
  | { kind: 'unsendable'; error: string };

const placeholder = /\$(OTHER_VIDEO|OTHER_KEY|VIDEO|JOB|KEY|ADMIN)\b/g;

export function fill(text: string, secrets: Record<string, string>): string {
  return text.replace(placeholder, (whole, name: string) => secrets[name] ?? whole);
}

/** Sends one case; every way it can end is an Outcome, nothing throws. */
export function sendCase(
  c: FuzzCase,
  base: URL,
  secrets: Record<string, string>,
  timeoutMs: number,
  stop: AbortSignal,
): Promise<Outcome> {
  return c.transport === 'net'
    ? sendRaw(c, base, secrets, timeoutMs, stop)
    : sendHttp(c, base, secrets, timeoutMs, stop);
}

function sendHttp(
  c: FuzzCase,
  base: URL,
  secrets: Record<string, string>,
  timeoutMs: number,
  stop: AbortSignal,
): Promise<Outcome> {
  return new Promise((resolve) => {
    const started = performance.now();
    const ms = () => Math.round(performance.now() - started);
    let settled = false;
    let cutting = false;
    let partial: Answer | undefined;
    let req: http.ClientRequest | undefined;
    const timers: NodeJS.Timeout[] = [];
    const done = (outcome: Outcome) => {
      if (settled) return;
      settled = true;
      for (const timer of timers) clearTimeout(timer);
      stop.removeEventListener('abort', onStop);
      req?.destroy();
      resolve(outcome);
    };
    const onStop = () => done({ kind: 'cancelled' });
    if (stop.aborted) return done({ kind: 'cancelled' });
    stop.addEventListener('abort', onStop);

    const headers: Record<string, string | string[]> = {};
    for (const [name, value] of c.headers) {
      const filled = fill(value, secrets);
      const existing = headers[name];
      headers[name] = existing === undefined ? filled : [...[existing].flat(), filled];
    }
    // Keep-alive unless the case says otherwise, as real clients do (Node's client would send close without an agent).
    headers.connection ??= 'keep-alive';
    if (c.body && !c.chunked) headers['content-length'] = String(c.body.length);
    if (c.body && c.chunked) headers['transfer-encoding'] = 'chunked';
    try {
      req = http.request({
        host: base.hostname,
        port: base.port,
        method: c.method,
        path: fill(c.path, secrets),
        headers,
        agent: false,
      });
    } catch (error) {
      return done({ kind: 'unsendable', error: (error as Error).message });
    }
    timers.push(setTimeout(() => done({ kind: 'timeout', ms: ms(), ...(partial ? { partial } : {}) }), timeoutMs));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      partial = { status: res.statusCode ?? 0, headers: res.headers, body: Buffer.alloc(0) };
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () =>
        done({
          kind: 'answer',
          ms: ms(),
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: Buffer.concat(chunks),
        }),
      );
      res.on('close', () => {
        if (!res.complete)
          done({
            kind: 'dropped',
            ms: ms(),
            error: 'the connection closed before the answer was complete',
            partial: { ...partial!, body: Buffer.concat(chunks) },
          });
      });
      res.on('error', (error) =>
        done({
          kind: 'dropped',
          ms: ms(),
          error: error.message,
          partial: { ...partial!, body: Buffer.concat(chunks) },
        }),
      );
    });
    req.on('error', (error: NodeJS.ErrnoException) => {
      if (cutting) done({ kind: 'cut', ms: ms() });
      else done({ kind: 'dropped', ms: ms(), error: `${error.code ?? ''} ${error.message}`.trim() });
    });
    const body = c.body ?? Buffer.alloc(0);
    if (c.cutAfter !== undefined) {
      const sent = body.subarray(0, c.cutAfter);
      if (c.chunked) for (const piece of thirds(sent)) req.write(piece);
      else if (sent.length > 0) req.write(sent);
      else req.flushHeaders();
      timers.push(
        setTimeout(() => {
          if (partial) return; // the answer came first: judge it like any other
          cutting = true;
          done({ kind: 'cut', ms: ms() });
        }, c.cutDelayMs ?? 0),
      );
      return;
    }
    if (c.chunked) {
      for (const piece of thirds(body)) req.write(piece);
      req.end();
    } else req.end(body);
  });
}

function thirds(bytes: Buffer): Buffer[] {
  const step = Math.max(1, Math.ceil(bytes.length / 3));
  const out: Buffer[] = [];
  for (let i = 0; i < bytes.length; i += step) out.push(bytes.subarray(i, i + step));
  return out;
}

/**
 * Raw bytes on a socket: for requests Node's client refuses to write (bad request lines, bare LF, duplicate lengths).
 */
function sendRaw(
  c: FuzzCase,
  base: URL,
  secrets: Record<string, string>,
  timeoutMs: number,
  stop: AbortSignal,
): Promise<Outcome> {
  return new Promise((resolve) => {
    const started = performance.now();
    const ms = () => Math.round(performance.now() - started);
    let settled = false;
    const chunks: Buffer[] = [];
    const socket = net.connect(Number(base.port), base.hostname);
    const done = (outcome: Outcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      stop.removeEventListener('abort', onStop);
      socket.destroy();
      resolve(outcome);
    };
    const onStop = () => done({ kind: 'cancelled' });
    if (stop.aborted) return done({ kind: 'cancelled' });
    stop.addEventListener('abort', onStop);
    const timer = setTimeout(() => {
      const parsed = parseAnswer(Buffer.concat(chunks), true);
      done({ kind: 'timeout', ms: ms(), ...(parsed ? { partial: parsed.answer } : {}) });
    }, timeoutMs);
    socket.on('connect', () =>
      socket.write(Buffer.from(fill((c.raw ?? Buffer.alloc(0)).toString('latin1'), secrets), 'latin1')),
    );
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      const parsed = parseAnswer(Buffer.concat(chunks), false);
      if (parsed?.complete) done({ kind: 'answer', ms: ms(), ...parsed.answer });
    });
    const ended = (error?: Error) => {
      const all = Buffer.concat(chunks);
      const parsed = parseAnswer(all, true);
      if (parsed?.complete) done({ kind: 'answer', ms: ms(), ...parsed.answer });
      else if (all.length === 0)
        done({
          kind: 'dropped',
          ms: ms(),
          error: error ? error.message : 'the server closed the connection without a byte of answer',
        });
      else
        done({
          kind: 'dropped',
          ms: ms(),
          error: `an answer that is not HTTP or is cut short: ${preview(all, 200)}`,
          ...(parsed ? { partial: parsed.answer } : {}),
        });
    };
    socket.on('end', () => ended());
    socket.on('close', () => ended());
    socket.on('error', (error) => ended(error));
  });
}

/** The first HTTP answer in `bytes` (skipping 1xx), and whether all of its body is there. */
export function parseAnswer(bytes: Buffer, atEnd: boolean): { answer: Answer; complete: boolean } | undefined {
  let offset = 0;
  for (;;) {
    const headEnd = bytes.indexOf('\r\n\r\n', offset);
    if (headEnd < 0) return undefined;
    const head = bytes.subarray(offset, headEnd).toString('latin1').split('\r\n');
    const status = /^HTTP\/\d\.\d (\d{3})/.exec(head[0] ?? '');
    if (!status) return undefined;
    const headers: Record<string, string> = {};
    for (const line of head.slice(1)) {
      const colon = line.indexOf(':');
      if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    const code = Number(status[1]);
    const rest = bytes.subarray(headEnd + 4);
    if (code >= 100 && code < 200 && code !== 101) {
      offset = headEnd + 4;
      continue;
    }
    const length = headers['content-length'];
    if (length !== undefined) {
      const n = Number(length);
      return { answer: { status: code, headers, body: rest.subarray(0, n) }, complete: rest.length >= n };
    }
    if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
      const body = dechunk(rest);
      return { answer: { status: code, headers, body: body ?? rest }, complete: body !== undefined };
    }
    return { answer: { status: code, headers, body: rest }, complete: atEnd };
  }
}

function dechunk(bytes: Buffer): Buffer | undefined {
  const out: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = bytes.indexOf('\r\n', at);
    if (lineEnd < 0) return undefined;
    const size = parseInt(bytes.subarray(at, lineEnd).toString('latin1'), 16);
    if (!Number.isFinite(size)) return undefined;
    if (size === 0) return Buffer.concat(out);
    if (bytes.length < lineEnd + 2 + size + 2) return undefined;
    out.push(bytes.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
}

// ---------------------------------------------------------------------------
// The properties of an answer

export type ProblemKind =
  | 'no-answer'
  | 'dropped'
  | '5xx'
  | 'status'
  | 'shape'
  | 'empty'
  | 'stream'
  | 'refuse'
  | 'number-field'
  | 'dropped-field'
  | 'connection'
  | 'generator'
  | 'crash'
  | 'unresponsive'
  | 'loop-stall'
  | 'health-stall';

export interface Problem {
  kind: ProblemKind;
  text: string;
}

const header = (answer: Answer, name: string) => [answer.headers[name]].flat().join(', ');
const bodyText = (answer: Answer) => preview(answer.body, 300);

/** Problems with an error body: OpenAI's shape, exactly, with a message that says something. */
export function errorShapeProblem(answer: Answer): string | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(answer.body.toString('utf8'));
  } catch {
    return answer.body.length === 0 ? 'an empty body' : `a body that is not JSON: ${bodyText(answer)}`;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) || Object.keys(parsed).join() !== 'error')
    return `not {"error": {...}}: ${bodyText(answer)}`;
  const error = (parsed as { error: unknown }).error as Record<string, unknown>;
  if (typeof error !== 'object' || error === null) return `"error" is not an object: ${bodyText(answer)}`;
  const keys = Object.keys(error).sort().join();
  if (keys !== 'code,message,param,type')
    return `error keys are ${keys}, not code,message,param,type: ${bodyText(answer)}`;
  if (typeof error.message !== 'string' || error.message.trim() === '')
    return `error.message is empty or not a string: ${bodyText(answer)}`;
  if (typeof error.type !== 'string' || error.type === '') return `error.type is not a string: ${bodyText(answer)}`;
  if (error.param !== null && typeof error.param !== 'string')
    return `error.param is neither a string nor null: ${bodyText(answer)}`;
  if (error.code !== null && typeof error.code !== 'string')
    return `error.code is neither a string nor null: ${bodyText(answer)}`;
  return undefined;
}

function errorOf(answer: Answer): { message: string; param: string | null; code: string | null } | undefined {
  try {
    return (
      JSON.parse(answer.body.toString('utf8')) as {
        error: { message: string; param: string | null; code: string | null };
      }
    ).error;
  } catch {
    return undefined;
  }
}

/** Everything wrong with one answer (the vitals of the process are checked apart). */
export function judge(c: FuzzCase, outcome: Outcome): Problem[] {
  if (outcome.kind === 'cancelled' || outcome.kind === 'cut') return [];
  if (outcome.kind === 'unsendable')
    return [{ kind: 'generator', text: `Node's client refused to send the case: ${outcome.error}` }];
  // A body we cut off is owed no answer; the server closing first is fine too.
  if (c.cutAfter !== undefined && outcome.kind === 'dropped' && !outcome.partial) return [];
  if (outcome.kind === 'timeout') {
    return [
      {
        kind: 'no-answer',
        text: `no complete answer within ${outcome.ms} ms${outcome.partial ? ` (status ${outcome.partial.status} arrived)` : ''}`,
      },
    ];
  }
  if (outcome.kind === 'dropped') {
    return [
      {
        kind: 'dropped',
        text: `the connection was dropped without a complete answer after ${outcome.ms} ms: ${outcome.error}${outcome.partial ? ` (status ${outcome.partial.status}, body so far ${preview(outcome.partial.body, 200)})` : ''}`,
      },
    ];
  }
  const problems: Problem[] = [];
  const { status } = outcome;
  const type = header(outcome, 'content-type');
  if (status >= 500) problems.push({ kind: '5xx', text: `answered ${status}: ${bodyText(outcome)}` });
  else if (status < 200 || (status >= 300 && status < 400))
    problems.push({ kind: 'status', text: `answered ${status}, neither a 2xx nor a 4xx: ${bodyText(outcome)}` });
  else if (status >= 400) {
    const shape = errorShapeProblem(outcome);
    if (shape) problems.push({ kind: 'shape', text: `answered ${status} with ${shape}` });
  } else if (/^text\/event-stream/i.test(type)) {
    if (!outcome.body.includes('data: [DONE]'))
      problems.push({
        kind: 'stream',
        text: `a ${status} event stream that ends without "data: [DONE]": …${preview(outcome.body.subarray(-300), 300)}`,
      });
  } else {
    if (outcome.body.length === 0 && status !== 204 && !c.expect.emptyOk)
      problems.push({ kind: 'empty', text: `answered ${status} with an empty body` });
    if (/json/i.test(type) && outcome.body.length > 0) {
      try {
        JSON.parse(outcome.body.toString('utf8'));
      } catch {
        problems.push({
          kind: 'shape',
          text: `answered ${status} as ${type} with a body that does not parse: ${bodyText(outcome)}`,
        });
      }
    }
  }

  const ok = status >= 200 && status < 300;
  if (c.expect.refuse && ok)
    problems.push({ kind: 'refuse', text: `answered ${status} although ${c.expect.refuse}: ${bodyText(outcome)}` });
  if (c.expect.numberField) {
    const field = c.expect.numberField;
    const error = status === 400 ? errorOf(outcome) : undefined;
    if (!error)
      problems.push({
        kind: 'number-field',
        text: `non-numeric text in '${field}' answered ${status}, not a 400: ${bodyText(outcome)}`,
      });
    else if (error.param !== field)
      problems.push({
        kind: 'number-field',
        text: `the 400 for non-numeric text in '${field}' names param ${JSON.stringify(error.param)}: ${error.message}`,
      });
    else if (/(got|received) (a |an )?number/i.test(error.message))
      problems.push({
        kind: 'number-field',
        text: `the 400 for non-numeric text in '${field}' calls it a number: "${error.message}"`,
      });
  }
  if (status === 400 && (c.expect.sentFields || c.expect.sentFiles)) {
    const missing = /Missing required parameter: '([^']+)'/.exec(errorOf(outcome)?.message ?? '')?.[1];
    if (missing && (c.expect.sentFields?.includes(missing) || c.expect.sentFiles?.includes(missing))) {
      problems.push({
        kind: 'dropped-field',
        text: `says '${missing}' is missing although it was sent (a part silently dropped): ${bodyText(outcome)}`,
      });
    }
  }
  if (c.expect.connectionClose) {
    const connection = header(outcome, 'connection');
    if (!/^close$/i.test(connection.trim()))
      problems.push({
        kind: 'connection',
        text:
          `the client asked for Connection: close; the ${status} answer says connection: ` +
          `${JSON.stringify(connection)}`,
      });
  }
  return problems;
}

// ---------------------------------------------------------------------------
// /healthz poller, in its own thread so the test's own work (building megabyte bodies) cannot delay it

const STARTED = 0;
const COMPLETED = 1;
const WINDOW_MAX = 2;
const OVERALL_MAX = 3;
const PROBES = 4;
const FAILURES = 5;
const PAUSED = 6;

const pollerSource = `
const { parentPort, workerData } = require('node:worker_threads');
const s = new Int32Array(workerData.buffer);
let url = workerData.url;
parentPort.on('message', (m) => { if (m.url) url = m.url; });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const raise = (i, v) => { let cur = Atomics.load(s, i); while (v > cur) { const prev = Atomics.compareExchange(s, i, cur, v); if (prev === cur) break; cur = prev; } };
(async () => {
  for (;;) {
    if (Atomics.load(s, ${PAUSED}) === 1) { await sleep(10); continue; }
    const index = Atomics.add(s, ${STARTED}, 1) + 1;
    const t0 = performance.now();
    let ok = false;
    try {
      const res = await fetch(url + '/healthz', { signal: AbortSignal.timeout(30000) });
      await res.arrayBuffer();
      ok = res.status === 200;
    } catch {}
    const us = Math.min(2147483647, Math.round((performance.now() - t0) * 1000));
    if (!ok) Atomics.add(s, ${FAILURES}, 1);
    raise(${WINDOW_MAX}, us);
    raise(${OVERALL_MAX}, us);
    Atomics.add(s, ${PROBES}, 1);
    Atomics.store(s, ${COMPLETED}, index);
    const wait = 50 - (performance.now() - t0);
    if (wait > 0) await sleep(wait);
  }
})();
`;

/** GETs /healthz every 50 ms and keeps the slowest answer: per window (one fuzz case) and over the whole run. */
export class HealthPoller {
  private readonly shared = new Int32Array(new SharedArrayBuffer(8 * Int32Array.BYTES_PER_ELEMENT));
  private readonly worker: Worker;

  constructor(url: string) {
    this.worker = new Worker(pollerSource, { eval: true, workerData: { buffer: this.shared.buffer, url } });
    this.worker.unref();
  }

  setUrl(url: string): void {
    this.worker.postMessage({ url });
  }

  /** Stops probing (while the gateway restarts) once the probe under way is done. */
  async pause(): Promise<void> {
    Atomics.store(this.shared, PAUSED, 1);
    const until = Date.now() + 35_000;
    while (Atomics.load(this.shared, COMPLETED) < Atomics.load(this.shared, STARTED) && Date.now() < until)
      await sleep(10);
  }

  resume(): void {
    Atomics.store(this.shared, WINDOW_MAX, 0);
    Atomics.store(this.shared, PAUSED, 0);
  }

  resetWindow(): void {
    Atomics.store(this.shared, WINDOW_MAX, 0);
  }

  /**
   * The slowest probe since resetWindow(), once a probe that started after this call has answered (so no stall is
   * missed).
   */
  async windowMaxMs(timeoutMs: number): Promise<number> {
    if (Atomics.load(this.shared, PAUSED) === 1) return 0;
    const target = Atomics.load(this.shared, STARTED) + 1;
    const until = Date.now() + timeoutMs;
    while (Atomics.load(this.shared, COMPLETED) < target && Date.now() < until) await sleep(5);
    return Atomics.load(this.shared, WINDOW_MAX) / 1000;
  }

  stats(): { probes: number; failures: number; maxMs: number } {
    return {
      probes: Atomics.load(this.shared, PROBES),
      failures: Atomics.load(this.shared, FAILURES),
      maxMs: Atomics.load(this.shared, OVERALL_MAX) / 1000,
    };
  }

  async stop(): Promise<void> {
    await this.worker.terminate();
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `GET /readyz`: the worst event-loop stall since the previous read (and resets it). */
export async function readLoopStall(
  url: string,
  timeoutMs: number,
): Promise<{ ok: true; ms: number } | { ok: false; error: string }> {
  try {
    const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(timeoutMs) });
    const body = (await res.json()) as { event_loop_max_ms?: unknown; status?: string };
    if (typeof body.event_loop_max_ms !== 'number')
      return { ok: false, error: `/readyz answered ${res.status} without event_loop_max_ms: ${JSON.stringify(body)}` };
    return { ok: true, ms: body.event_loop_max_ms };
  } catch (error) {
    return { ok: false, error: `${(error as Error).name}: ${(error as Error).message}` };
  }
}
