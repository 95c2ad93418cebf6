/**
 * A fake OpenAI-compatible upstream for tests and benchmarks. By default it
 * answers like a well-formed OpenAI (auth and request checks included);
 * scripted responses replace the default one request at a time.
 */
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { buildDefaultResponse } from './fake-openai-defaults.js';
import type { DefaultAnswer, DefaultOptions } from './fake-openai-defaults.js';
import { closeServer, FakePauses, listenOnLoopback, writeFlushed } from './fake-server.js';

export interface RecordedRequest {
  method: string;
  /** Path with query, e.g. `/v1/chat/completions`. */
  path: string;
  headers: IncomingHttpHeaders;
  /** The parsed JSON body; undefined when there was none or it was not JSON. */
  body: unknown;
  rawBody: string;
  /** The body's exact bytes: `rawBody` is UTF-8 decoded, which mangles binary multipart parts (image uploads). */
  rawBuffer?: Buffer;
  /** The client went away before the answer was complete. */
  aborted: boolean;
}

interface Timing {
  /** Wait before answering at all. */
  delayMs?: number;
}

interface SseOptions extends Timing {
  status?: number;
  headers?: Record<string, string>;
  /** Cut the body into pieces of this many bytes (may cut inside a UTF-8 character or `\r\n`). */
  chunkSize?: number;
  /** Pause between pieces; without `chunkSize` the body is cut after each event. */
  chunkDelayMs?: number;
  /** Keep the connection open after the body (an upstream stalled mid-stream). */
  hang?: boolean;
  /** Destroy the socket after the body instead of ending it (a connection lost mid-stream). */
  destroyAtEnd?: boolean;
}

export type FakeResponse =
  | (Timing & { status?: number; headers?: Record<string, string>; json: unknown })
  | (Timing & { status: number; headers?: Record<string, string>; text: string })
  | (SseOptions & { sse: string })
  | (SseOptions & { sseFile: string })
  | (Timing & { hang: true })
  | (Timing & { destroy: true })
  /** Only a delay: the default answer follows it. */
  | (Timing & { delayMs: number });

/** Returns the response for a request, or undefined for the built-in OpenAI behaviour. */
export type FakeHandler = (request: RecordedRequest) => FakeResponse | undefined | Promise<FakeResponse | undefined>;

/**
 * What the batch tests ask of OpenAI by a request's text: "please fail" is refused as a bad request (not retried),
 * "slowly" takes 400 ms; anything else gets the default answer.
 */
export function refusedOrSlow(text: string): FakeResponse | undefined {
  if (text.includes('please fail'))
    return {
      status: 400,
      json: {
        error: {
          message: 'This request was refused upstream.',
          type: 'invalid_request_error',
          param: null,
          code: null,
        },
      },
    };
  if (text.includes('slowly')) return { delayMs: 400 };
  return undefined;
}

/**
 * The `service_tier` the default chat answers say they were served in (the body's, and every chunk's):
 * a value (null included), or one per request. Unset: they say none, as before tiers.
 */
export type FakeServiceTier = string | null | ((request: RecordedRequest) => string | null | undefined);

/** What OpenAI does: it answers the tier it was asked for (`default` when asked none). */
export const echoServiceTier: FakeServiceTier = (request) => {
  const asked = (request.body as { service_tier?: unknown } | undefined)?.service_tier;
  return typeof asked === 'string' ? asked : 'default';
};

export interface FakeOpenAIOptions extends DefaultOptions {
  /** Record requests in `requests` (default true); benchmarks turn it off to keep memory flat. */
  record?: boolean;
  /** Delay before every default answer. */
  latencyMs?: number;
  /** The `service_tier` default chat answers say (unset: none). */
  serviceTier?: FakeServiceTier;
}

export interface FakeOpenAI {
  /** Base URL including `/v1`. */
  url: string;
  requests: RecordedRequest[];
  readonly inFlight: number;
  readonly maxInFlight: number;
  /** Requests whose client went away before the answer was complete. */
  readonly abortedRequests: number;
  /** TCP connections accepted so far: shows whether the client pools keep-alive connections. */
  readonly connections: number;
  enqueue(...responses: FakeResponse[]): void;
  setDefault(handler: FakeHandler | null): void;
  /** The `service_tier` default chat answers say from now on (undefined: back to the option's); `reset` forgets it. */
  setServiceTier(tier: FakeServiceTier | undefined): void;
  /** Forgets recorded requests, queued responses, the default handler, the tier set, and zeroes the counters. */
  reset(): void;
  close(): Promise<void>;
}

const sseFiles = new Map<string, Buffer>();

async function loadSseFile(path: string): Promise<Buffer> {
  let content = sseFiles.get(path);
  if (content === undefined) {
    content = await readFile(path);
    sseFiles.set(path, content);
  }
  return content;
}

/** Cuts after every blank line, keeping the bytes exactly as they were. */
function splitAfterEvents(body: Buffer): Buffer[] {
  const text = body.toString('latin1');
  const pieces: Buffer[] = [];
  const boundary = /\r\n\r\n|\n\n|\r\r/g;
  let start = 0;
  for (let match = boundary.exec(text); match !== null; match = boundary.exec(text)) {
    const end = match.index + match[0].length;
    pieces.push(body.subarray(start, end));
    start = end;
  }
  if (start < body.length) pieces.push(body.subarray(start));
  return pieces;
}

function splitBySize(body: Buffer, size: number): Buffer[] {
  const pieces: Buffer[] = [];
  for (let offset = 0; offset < body.length; offset += size) pieces.push(body.subarray(offset, offset + size));
  return pieces;
}

/**
 * A default chat answer saying `tier` as its `service_tier`: the body's, or every chunk's (the answer is cached: a copy
 * is made).
 */
function withServiceTier(answer: DefaultAnswer, tier: string | null): DefaultAnswer {
  const stamp = (json: string) =>
    JSON.stringify({ ...(JSON.parse(json) as Record<string, unknown>), service_tier: tier });
  if (answer.kind === 'json') {
    if (answer.status !== 200) return answer;
    return { ...answer, body: Buffer.from(stamp(answer.body.toString('utf8'))) };
  }
  const events = answer.events.map((event) => {
    const text = event.toString('utf8');
    const data = /^data: (\{.*\})\n\n$/s.exec(text);
    return data ? Buffer.from(`data: ${stamp(data[1]!)}\n\n`) : event;
  });
  return { kind: 'sse', body: Buffer.concat(events), events };
}

function mergeHeaders(headers: Record<string, string> | undefined, fallback: Record<string, string>) {
  return { ...fallback, ...headers };
}

export async function startFakeOpenAI(options: FakeOpenAIOptions = {}): Promise<FakeOpenAI> {
  const queue: FakeResponse[] = [];
  const requests: RecordedRequest[] = [];
  const pauses = new FakePauses();
  const wait = (ms: number) => pauses.wait(ms);
  let defaultHandler: FakeHandler | null = null;
  let serviceTier: FakeServiceTier | undefined = options.serviceTier;
  let inFlight = 0;
  let maxInFlight = 0;
  let abortedRequests = 0;
  let connections = 0;

  async function writeSse(res: ServerResponse, response: SseOptions, body: Buffer): Promise<void> {
    res.writeHead(
      response.status ?? 200,
      mergeHeaders(response.headers, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
      }),
    );
    const delay = response.chunkDelayMs ?? 0;
    const pieces =
      response.chunkSize !== undefined
        ? splitBySize(body, Math.max(1, response.chunkSize))
        : delay > 0
          ? splitAfterEvents(body)
          : [body];
    for (let index = 0; index < pieces.length; index += 1) {
      if (res.destroyed) return;
      // Cut at the end: the last piece reaches the client before the socket closes.
      if (response.destroyAtEnd && index === pieces.length - 1) await writeFlushed(res, pieces[index]!);
      else res.write(pieces[index]);
      if (delay > 0 && index < pieces.length - 1) await wait(delay);
    }
    if (res.destroyed || response.hang) return;
    if (response.destroyAtEnd) {
      // end() flushes what was written, then closes: the client sees a body cut off without its final chunk.
      res.socket?.end();
      return;
    }
    res.end();
  }

  async function respond(res: ServerResponse, request: RecordedRequest, scripted: FakeResponse | undefined) {
    if (scripted?.delayMs) await wait(scripted.delayMs);
    else if (scripted === undefined && options.latencyMs) await wait(options.latencyMs);
    if (res.destroyed || pauses.closed) return;

    if (scripted !== undefined) {
      if ('hang' in scripted && !('sse' in scripted) && !('sseFile' in scripted)) return;
      if ('destroy' in scripted) {
        res.socket?.destroy();
        return;
      }
      if ('json' in scripted) {
        const payload = Buffer.from(JSON.stringify(scripted.json));
        res.writeHead(
          scripted.status ?? 200,
          mergeHeaders(scripted.headers, {
            'content-type': 'application/json',
            'content-length': String(payload.length),
          }),
        );
        res.end(payload);
        return;
      }
      if ('text' in scripted) {
        res.writeHead(scripted.status, mergeHeaders(scripted.headers, { 'content-type': 'text/plain; charset=utf-8' }));
        res.end(scripted.text);
        return;
      }
      if ('sse' in scripted) return writeSse(res, scripted, Buffer.from(scripted.sse, 'utf8'));
      if ('sseFile' in scripted) return writeSse(res, scripted, await loadSseFile(scripted.sseFile));
    }

    let answer = buildDefaultResponse(request, options);
    if (serviceTier !== undefined && request.path.split('?')[0] === '/v1/chat/completions') {
      const tier = typeof serviceTier === 'function' ? serviceTier(request) : serviceTier;
      if (tier !== undefined) answer = withServiceTier(answer, tier);
    }
    if (answer.kind === 'json') {
      res.writeHead(answer.status, {
        'content-type': 'application/json',
        'content-length': String(answer.body.length),
      });
      res.end(answer.body);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
    const delay = options.streamChunkDelayMs ?? 0;
    if (delay <= 0) {
      res.end(answer.body);
      return;
    }
    for (const event of answer.events) {
      if (res.destroyed) return;
      res.write(event);
      await wait(delay);
    }
    if (!res.destroyed) res.end();
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    inFlight += 1;
    if (inFlight > maxInFlight) maxInFlight = inFlight;
    let counted = true;
    // Set when a scripted response drops the connection itself: that is not a client abort.
    let destroyedByFake = false;
    const record: RecordedRequest = {
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      headers: req.headers,
      body: undefined,
      rawBody: '',
      aborted: false,
    };
    res.on('close', () => {
      if (!res.writableFinished && !pauses.closed && !destroyedByFake) {
        abortedRequests += 1;
        record.aborted = true;
      }
      if (counted) {
        counted = false;
        inFlight -= 1;
      }
    });

    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const rawBuffer = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    record.rawBuffer = rawBuffer;
    record.rawBody = rawBuffer.toString('utf8');
    if (record.rawBody.length > 0) {
      try {
        record.body = JSON.parse(record.rawBody);
      } catch {
        record.body = undefined;
      }
    }
    if (options.record !== false) requests.push(record);

    let scripted = queue.shift();
    if (scripted === undefined && defaultHandler !== null) scripted = await defaultHandler(record);
    if (scripted !== undefined) {
      destroyedByFake =
        'destroy' in scripted || (('sse' in scripted || 'sseFile' in scripted) && scripted.destroyAtEnd === true);
    }
    await respond(res, record, scripted);
  }

  const server = createServer({ noDelay: true, keepAliveTimeout: 60_000, requestTimeout: 0 }, (req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: String(error), type: 'server_error', param: null, code: null } }));
      } else {
        res.destroy();
      }
    });
  });
  server.on('connection', () => {
    connections += 1;
  });
  const port = await listenOnLoopback(server);

  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    get inFlight() {
      return inFlight;
    },
    get maxInFlight() {
      return maxInFlight;
    },
    get abortedRequests() {
      return abortedRequests;
    },
    get connections() {
      return connections;
    },
    enqueue(...responses) {
      queue.push(...responses);
    },
    setDefault(handler) {
      defaultHandler = handler;
    },
    setServiceTier(tier) {
      serviceTier = tier === undefined ? options.serviceTier : tier;
    },
    reset() {
      queue.length = 0;
      requests.length = 0;
      defaultHandler = null;
      serviceTier = options.serviceTier;
      maxInFlight = inFlight;
      abortedRequests = 0;
      connections = 0;
    },
    async close() {
      pauses.close();
      await closeServer(server);
    },
  };
}
