/**
 * The benchmark's fake upstreams in a process of their own, so their CPU is
 * apart from the load generator's and their RSS can be measured. Without
 * options: the zero-latency fake OpenAI, exactly as before.
 *
 *   --latency-ms=N     the fake OpenAI waits N ms before every default answer
 *   --cap=N            a vendor concurrency limit: a request arriving while N are
 *                      already in flight is answered 429 (as a real vendor would)
 *                      and counted
 *   --vendors=LIST     which fakes to start: openai (default), anthropic, gemini
 *   --anthropic-latency-ms=N  the fake Anthropic answers N ms late: a front of the
 *                      same process holds each request N ms, then passes it to the
 *                      fake (its checks and default answer unchanged)
 *   --stream-chunks=N  stream requests are answered with one long stream of N
 *                      text deltas in the vendor's framing (bench/long-streams.ts),
 *                      after the fake's own request checks, in one write;
 *                      the fake Anthropic only serves as many as were queued
 *                      with POST /__enqueue?vendor=anthropic&count=K
 *   --pace-tokens=N    a stream chat completion the fake OpenAI would stream (its own
 *   --pace-ms=M        checks first: auth, body) is answered like a real model instead:
 *                      N text deltas in the vendor's exact SSE framing, one write every
 *                      M ms (default 20): the role chunk with the first delta at once,
 *                      then one delta a write, the last write adding the finish chunk,
 *                      the usage chunk when the request asked for it
 *                      (`stream_options.include_usage`) and `data: [DONE]`. A front of
 *                      the same process does it (the url printed is the front's); every
 *                      other request passes through to the fake untouched
 *
 * A control server on a port of its own (not counted by the fakes):
 *   GET  /__stats                      per fake: requests, inFlight, maxInFlight, overCap (429s), aborted;
 *                                      with a cap and a latency, how long slots sat idle between answers (slotUse);
 *                                      with --pace-tokens, `paced`: streams started, completed, left by their client,
 *                                      most at once
 *   GET  /__marks                      when each request whose `user` is `bench-mark:<id>` reached the fake OpenAI
 *                                      (wall clock ms, by id): the bench's measure of a request's wait before its call
 *   POST /__reset                      zeroes those counters, the marks (and the queued Anthropic streams)
 *   POST /__enqueue?vendor=anthropic&count=K
 *
 * Prints one line `{"url", "pid", "controlUrl", "anthropicUrl"?, "geminiUrl"?}` on
 * stdout when it listens. Exits when told (SIGTERM/SIGINT) or when its parent
 * goes away (stdin closes).
 */
import { Agent, createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { startFakeAnthropic, type FakeAnthropic } from '../test/support/fake-anthropic.js';
import { startFakeGemini, type FakeGemini } from '../test/support/fake-gemini.js';
import { startFakeOpenAI, type FakeHandler } from '../test/support/fake-openai.js';
import { buildDefaultResponse } from '../test/support/fake-openai-defaults.js';
import { longStream } from './long-streams.js';
import { closeWithParent } from './parent-watch.js';

function option(name: string): string | undefined {
  return process.argv.find((arg) => arg.startsWith(`--${name}=`))?.slice(name.length + 3);
}

function intOption(name: string): number {
  const raw = option(name);
  if (raw === undefined) return 0;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`--${name} must be a non-negative integer, got "${raw}"`);
  return value;
}

const latencyMs = intOption('latency-ms');
const cap = intOption('cap');
const streamChunks = intOption('stream-chunks');
const anthropicLatencyMs = intOption('anthropic-latency-ms');
const paceTokens = intOption('pace-tokens');
const paceMs = option('pace-ms') === undefined ? 20 : intOption('pace-ms');
if (paceTokens > 0 && streamChunks > 0)
  throw new Error('--pace-tokens and --stream-chunks are two ways to answer a stream: give one');
const vendors = new Set(
  (option('vendors') ?? 'openai')
    .split(',')
    .map((v) => v.trim())
    .filter(Boolean),
);
for (const vendor of vendors)
  if (!['openai', 'anthropic', 'gemini'].includes(vendor)) throw new Error(`--vendors: unknown vendor "${vendor}"`);
const customised = latencyMs > 0 || cap > 0 || streamChunks > 0;

const openai = await startFakeOpenAI({ record: false, ...(latencyMs > 0 ? { latencyMs } : {}) });
const anthropic: FakeAnthropic | undefined = vendors.has('anthropic') ? await startFakeAnthropic() : undefined;
const gemini: FakeGemini | undefined = vendors.has('gemini') ? await startFakeGemini({ record: false }) : undefined;

/**
 * A front that holds every request `delayMs`, then passes it on to `target` and its answer back:
 * a vendor that takes time, with the fake behind it checking and answering as it always does.
 */
async function delayingFront(target: string, delayMs: number) {
  const agent = new Agent({ keepAlive: true, maxSockets: Infinity });
  const server = createServer({ keepAliveTimeout: 60_000, requestTimeout: 0 }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      setTimeout(() => {
        if (res.destroyed) return;
        const out = httpRequest(
          `${target}${req.url ?? '/'}`,
          { method: req.method, headers: req.headers, agent },
          (answer) => {
            res.writeHead(answer.statusCode ?? 502, answer.headers);
            answer.pipe(res);
          },
        );
        out.on('error', () => res.destroy());
        out.end(Buffer.concat(chunks));
      }, delayMs);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      server.closeAllConnections();
      agent.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
const anthropicFront =
  anthropic && anthropicLatencyMs > 0 ? await delayingFront(anthropic.url, anthropicLatencyMs) : undefined;

/** Streams answered by the paced front (bench/paced-streams.ts reads them in its checks). */
const paced = { started: 0, completed: 0, aborted: 0, active: 0, maxActive: 0 };

/**
 * A front that passes every request to the fake OpenAI (`target`, its origin) and its answer back,
 * except a stream chat completion the fake accepted (200, an event stream): the fake's own stream is
 * dropped and the client gets `tokens` text deltas, one write every `everyMs` ms, as a real model
 * sends them. The frames are those of bench/long-streams.ts (the vendor's framing), built once.
 */
async function pacedFront(target: string, tokens: number, everyMs: number) {
  const agent = new Agent({ keepAlive: true, maxSockets: Infinity });
  // role, N deltas, finish, usage, [DONE]: each `data: …\n\n`.
  const events = longStream('openai', tokens)
    .split('\n\n')
    .filter(Boolean)
    .map((event) => `${event}\n\n`);
  const [role, ...rest] = events;
  const deltas = rest.slice(0, tokens).map((event) => Buffer.from(event));
  const [finish, usage, done] = rest.slice(tokens);
  const firstWith = (prefix: string) => Buffer.concat([Buffer.from(prefix), deltas[0]!]);
  const tails = { usage: Buffer.from(`${finish}${usage}${done}`), plain: Buffer.from(`${finish}${done}`) };

  const pace = (res: ServerResponse, includeUsage: boolean) => {
    paced.started += 1;
    paced.active += 1;
    if (paced.active > paced.maxActive) paced.maxActive = paced.active;
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
    let next = 0;
    let timer: NodeJS.Timeout | undefined;
    let finished = false;
    const settle = (completed: boolean) => {
      if (finished) return;
      finished = true;
      paced.active -= 1;
      if (completed) paced.completed += 1;
      else paced.aborted += 1;
    };
    res.on('close', () => {
      clearTimeout(timer);
      settle(res.writableFinished);
    });
    const step = () => {
      if (res.destroyed) return;
      const i = next++;
      const piece = i === 0 ? firstWith(role!) : deltas[i]!;
      if (i === tokens - 1) {
        res.end(Buffer.concat([piece, includeUsage ? tails.usage : tails.plain]));
        return;
      }
      res.write(piece);
      timer = setTimeout(step, everyMs);
    };
    step();
  };

  const server = createServer({ noDelay: true, keepAliveTimeout: 60_000, requestTimeout: 0 }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const out = httpRequest(
        `${target}${req.url ?? '/'}`,
        { method: req.method, headers: req.headers, agent },
        (answer) => {
          const isStream =
            answer.statusCode === 200 &&
            req.method === 'POST' &&
            (req.url ?? '').split('?')[0] === '/v1/chat/completions' &&
            String(answer.headers['content-type'] ?? '').startsWith('text/event-stream');
          if (!isStream) {
            res.writeHead(answer.statusCode ?? 502, answer.headers);
            answer.pipe(res);
            return;
          }
          answer.resume();
          let includeUsage = false;
          try {
            includeUsage =
              (JSON.parse(body.toString('utf8')) as { stream_options?: { include_usage?: unknown } }).stream_options
                ?.include_usage === true;
          } catch {
            // the fake accepted it, so it was JSON; without usage if not
          }
          pace(res, includeUsage);
        },
      );
      out.on('error', () => res.destroy());
      out.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', 1024, resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    close: () => {
      server.closeAllConnections();
      agent.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
const openaiFront = paceTokens > 0 ? await pacedFront(new URL(openai.url).origin, paceTokens, paceMs) : undefined;

const bodies = {
  openai: streamChunks > 0 ? longStream('openai', streamChunks) : '',
  anthropic: streamChunks > 0 ? longStream('anthropic', streamChunks) : '',
  gemini: streamChunks > 0 ? longStream('gemini', streamChunks) : '',
};

// Counters the fakes do not keep themselves (the fake OpenAI records nothing, to keep memory flat).
let openaiRequests = 0;
let openaiOverCap = 0;
let geminiRequests = 0;
/** When each request the fake OpenAI served (not refused) reached it, ms; bounded. */
const arrivals: number[] = [];
const MAX_ARRIVALS = 100_000;
/** When a request whose `user` is `bench-mark:<id>` reached the fake OpenAI (wall clock ms), by id; bounded. */
const marks = new Map<string, number>();
const MAX_MARKS = 100_000;

const rateLimited = {
  status: 429,
  headers: { 'retry-after': '1' },
  json: {
    error: {
      message: `Rate limit reached: more than ${cap} requests in flight.`,
      type: 'requests',
      param: null,
      code: 'rate_limit_exceeded',
    },
  },
};

const openaiHandler: FakeHandler = (request) => {
  openaiRequests += 1;
  // The fake counts a request in flight from its arrival, so this one is included.
  if (cap > 0 && openai.inFlight > cap) {
    openaiOverCap += 1;
    return rateLimited;
  }
  if (latencyMs > 0 && arrivals.length < MAX_ARRIVALS) arrivals.push(performance.now());
  const user = (request.body as { user?: unknown } | undefined)?.user;
  if (typeof user === 'string' && user.startsWith('bench-mark:') && marks.size < MAX_MARKS)
    marks.set(user.slice('bench-mark:'.length), Date.now());
  if (streamChunks > 0 && request.method === 'POST' && request.path.split('?')[0] === '/v1/chat/completions') {
    // The fake's own checks first: only a request it would stream gets the long stream.
    if (buildDefaultResponse(request, {}).kind === 'sse') return { sse: bodies.openai };
  }
  return undefined;
};

function installHandlers(): void {
  if (customised) openai.setDefault(openaiHandler);
  gemini?.setDefault((request) => {
    geminiRequests += 1;
    return streamChunks > 0 && request.path.includes(':streamGenerateContent') ? { sse: bodies.gemini } : undefined;
  });
}
installHandlers();

/**
 * With a cap and a fixed latency, the k-th request to arrive can only take the
 * slot the (k − cap)-th answer freed, and answers leave in arrival order
 * (latency + timer lateness, about 1 ms). So arrival[k] − arrival[k − cap] − latency is
 * how long that slot sat idle between an answer and the next request: the cost
 * of the hand-off through the gateway. Also: the share of cap × span the slots were busy.
 */
function slotUse() {
  if (cap === 0 || latencyMs === 0 || arrivals.length <= cap) return null;
  const gaps = arrivals
    .slice(cap)
    .map((at, i) => Math.max(0, at - arrivals[i]! - latencyMs))
    .sort((a, b) => a - b);
  const at = (q: number) => gaps[Math.min(gaps.length - 1, Math.max(0, Math.ceil(q * gaps.length) - 1))]!;
  const span = arrivals[arrivals.length - 1]! + latencyMs - arrivals[0]!;
  return {
    handoffs: gaps.length,
    gapMs: {
      p50: at(0.5),
      p90: at(0.9),
      p99: at(0.99),
      max: gaps[gaps.length - 1]!,
      mean: gaps.reduce((a, b) => a + b, 0) / gaps.length,
    },
    /** From the first arrival to the last answer. */
    spanMs: span,
    utilisation: (arrivals.length * latencyMs) / (cap * span),
  };
}

function stats() {
  const out: Record<string, unknown> = {
    openai: {
      requests: customised ? openaiRequests : null,
      inFlight: openai.inFlight,
      maxInFlight: openai.maxInFlight,
      overCap: openaiOverCap,
      aborted: openai.abortedRequests,
      connections: openai.connections,
      slotUse: slotUse(),
      ...(openaiFront ? { paced: { ...paced } } : {}),
    },
  };
  if (anthropic) {
    out.anthropic = {
      requests: anthropic.requests.length,
      inFlight: anthropic.inFlight,
      maxInFlight: anthropic.maxInFlight,
      aborted: anthropic.abortedRequests,
    };
  }
  if (gemini)
    out.gemini = {
      requests: geminiRequests,
      inFlight: gemini.inFlight,
      maxInFlight: gemini.maxInFlight,
      aborted: gemini.abortedRequests,
    };
  return out;
}

function control(req: IncomingMessage, res: ServerResponse): void {
  const url = new URL(req.url ?? '/', 'http://control');
  const reply = (status: number, value: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(value));
  };
  req.resume();
  if (req.method === 'GET' && url.pathname === '/__stats') return reply(200, stats());
  if (req.method === 'GET' && url.pathname === '/__marks') return reply(200, Object.fromEntries(marks));
  if (req.method === 'POST' && url.pathname === '/__reset') {
    openai.reset();
    anthropic?.reset();
    gemini?.reset();
    openaiRequests = 0;
    openaiOverCap = 0;
    geminiRequests = 0;
    arrivals.length = 0;
    marks.clear();
    Object.assign(paced, { started: 0, completed: 0, aborted: 0, maxActive: paced.active });
    installHandlers();
    return reply(200, stats());
  }
  if (req.method === 'POST' && url.pathname === '/__enqueue') {
    const count = Number(url.searchParams.get('count') ?? '1');
    if (
      url.searchParams.get('vendor') !== 'anthropic' ||
      !anthropic ||
      streamChunks === 0 ||
      !Number.isInteger(count) ||
      count < 1 ||
      count > 100_000
    ) {
      return reply(400, {
        error: 'POST /__enqueue?vendor=anthropic&count=K needs --vendors with anthropic and --stream-chunks',
      });
    }
    // The same string each time: the queue holds references, not copies.
    for (let i = 0; i < count; i += 1) anthropic.enqueue({ sse: bodies.anthropic });
    return reply(200, { queued: count });
  }
  reply(404, { error: 'not found' });
}

const controlServer = createServer(control);
await new Promise<void>((resolve) => controlServer.listen(0, '127.0.0.1', resolve));
const controlUrl = `http://127.0.0.1:${(controlServer.address() as AddressInfo).port}`;

process.stdout.write(
  `${JSON.stringify({
    url: openaiFront?.url ?? openai.url,
    pid: process.pid,
    controlUrl,
    ...(anthropic ? { anthropicUrl: anthropicFront?.url ?? anthropic.url } : {}),
    ...(gemini ? { geminiUrl: gemini.url } : {}),
  })}\n`,
);

closeWithParent(controlServer, () => [
  openaiFront?.close(),
  openai.close(),
  anthropicFront?.close(),
  anthropic?.close(),
  gemini?.close(),
]);
