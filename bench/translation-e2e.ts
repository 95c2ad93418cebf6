/**
 * Translation cost per streamed chunk, end to end: the three fakes in one
 * process each serve the same long stream (N text deltas, one write), and
 * the gateway (one process, `node dist/bin/start.js`) is configured with
 * OPENAI_*, ANTHROPIC_* and GEMINI_* pointing at them. For each protocol the
 * stream is fetched sequentially, directly from the fake and through the
 * gateway; reported: time to the last chunk, added wall µs per chunk, and
 * the gateway's (and Redis's) CPU µs per chunk.
 */
import { Agent, request as httpRequest } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { KeyStore } from '../api/accounts/key-store.js';
import { redisProcessId, Samples, summarise, type LatencySummary } from './measure.js';
import { cpuWindow, waitForQuiet } from './procs.js';
import { directRequest, expectedText, longStream, protocolModels, protocols, type Protocol } from './long-streams.js';
import { fakeControl, log, probe, startFake, startGateway, stopGateway, type Fake } from './stack.js';
import { testRecord } from '../test/support/record.js';

const keys: Record<Protocol, string> = { openai: 'sk-bench', anthropic: 'sk-ant-bench', gemini: 'gm-bench' };

export interface E2eTarget {
  /** Sequential requests measured (after the warm-up), and those that failed. */
  requests: number;
  failures: number;
  /** Milliseconds from sending the request to the end of the stream. */
  total: LatencySummary;
  /** Bytes of one answer as received. */
  bytes: number;
  /** CPU ms used during the measured requests, per process; `others`: every other process on the machine. */
  cpuMs: Record<string, number | null>;
  /** The machine's busy share (% of one core) in the second before, and whether that was under the threshold. */
  before: { quiet: boolean; busyPct: number | null };
}

export interface E2eRow {
  protocol: Protocol;
  model: string;
  direct: E2eTarget;
  gateway: E2eTarget;
  /** (gateway p50 − direct p50) ÷ N, in µs. */
  addedWallUsPerChunkP50: number;
  /** Gateway process CPU during the measured gateway requests ÷ (requests × N), in µs. */
  gatewayCpuUsPerChunk: number | null;
  redisCpuUsPerChunk: number | null;
  /** The same stream through `/v1/messages`: Anthropic's own events relayed, or the others' written as Anthropic's. */
  messages: E2eTarget;
  messagesAddedWallUsPerChunkP50: number;
  messagesGatewayCpuUsPerChunk: number | null;
  /**
   * The same stream through Google's `:streamGenerateContent?alt=sse`: Gemini's own chunks relayed, or the others'
   * written as Gemini's.
   */
  gemini: E2eTarget;
  geminiAddedWallUsPerChunkP50: number;
  geminiGatewayCpuUsPerChunk: number | null;
}

export interface E2eResults {
  chunks: number;
  warmup: number;
  requests: number;
  gatewayPid: number;
  rows: E2eRow[];
  warnings: Record<string, number>;
}

interface Fetched {
  status: number;
  totalMs: number;
  text: string;
}

function fetchStream(url: string, headers: Record<string, string>, body: string, agent: Agent): Promise<Fetched> {
  return new Promise((resolve, reject) => {
    const payload = Buffer.from(body);
    const req = httpRequest(
      url,
      {
        method: 'POST',
        agent,
        headers: {
          ...headers,
          'content-type': 'application/json',
          'content-length': String(payload.length),
          accept: 'text/event-stream',
        },
      },
      (res) => {
        const pieces: Buffer[] = [];
        res.on('data', (piece: Buffer) => pieces.push(piece));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            totalMs: performance.now() - t0,
            text: Buffer.concat(pieces).toString('utf8'),
          }),
        );
        res.on('error', reject);
      },
    );
    req.setTimeout(60_000, () => req.destroy(new Error('stream request timed out')));
    req.on('error', reject);
    const t0 = performance.now();
    req.end(payload);
  });
}

/** The gateway's answer carries the whole text in N content chunks, then [DONE]. */
function gatewayAnswerIsComplete(text: string, chunks: number, expected: string): boolean {
  let content = '';
  let contentChunks = 0;
  let done = false;
  for (const frame of text.split('\n\n')) {
    // A frame may carry an `id:` line (its number, for a resume) before its data.
    const line = frame.split('\n').find((l) => l.startsWith('data: '));
    if (line === undefined) continue;
    const data = line.slice(6);
    if (data === '[DONE]') {
      done = true;
      continue;
    }
    const piece = (JSON.parse(data) as { choices: Array<{ delta?: { content?: string } }> }).choices[0]?.delta?.content;
    if (piece) {
      content += piece;
      contentChunks += 1;
    }
  }
  return done && contentChunks === chunks && content === expected;
}

/** A `/v1/messages` stream carries the whole text in N text deltas, and ends with message_stop. */
function messagesAnswerIsComplete(text: string, chunks: number, expected: string): boolean {
  let content = '';
  let deltas = 0;
  let stopped = false;
  for (const frame of text.split('\n\n')) {
    const line = frame.split('\n').find((l) => l.startsWith('data: '));
    if (line === undefined) continue;
    const data = JSON.parse(line.slice(6)) as { type: string; delta?: { type?: string; text?: string } };
    if (data.type === 'message_stop') stopped = true;
    else if (data.type === 'content_block_delta' && data.delta?.type === 'text_delta' && data.delta.text) {
      content += data.delta.text;
      deltas += 1;
    }
  }
  return stopped && deltas === chunks && content === expected;
}

/**
 * A `:streamGenerateContent?alt=sse` stream carries the whole text, the last chunk its finishReason. A Gemini
 * model's chunks are relayed one for one; another vendor's answer is written as one chunk per upstream read (as
 * Gemini's own chunks hold what is new), so the pieces are not counted.
 */
function geminiAnswerIsComplete(text: string, expected: string): boolean {
  let content = '';
  let finished = false;
  for (const frame of text.split(/\r?\n\r?\n/)) {
    const line = frame.split(/\r?\n/).find((l) => l.startsWith('data: '));
    if (line === undefined) continue;
    const data = JSON.parse(line.slice(6)) as {
      candidates?: Array<{ content?: { parts?: Array<{ text?: string; thought?: boolean }> }; finishReason?: string }>;
    };
    const candidate = data.candidates?.[0];
    if (candidate?.finishReason) finished = true;
    for (const part of candidate?.content?.parts ?? []) if (!part.thought && part.text) content += part.text;
  }
  return finished && content === expected;
}

async function measureTarget(options: {
  url: string;
  headers: Record<string, string>;
  body: string;
  warmup: number;
  count: number;
  check: (fetched: Fetched) => boolean;
  cpuPids: Record<string, number>;
  quietWaitMs: number;
}): Promise<E2eTarget> {
  const quiet = await waitForQuiet({ maxWaitMs: options.quietWaitMs });
  if (!quiet.quiet)
    log(`  the machine did not go quiet (${quiet.busyPct?.toFixed(0)}% of a core busy): measuring anyway`);
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const totals = new Samples();
  let failures = 0;
  let bytes = 0;
  let cpuSince: ReturnType<typeof cpuWindow> | undefined;
  try {
    for (let i = 0; i < options.warmup + options.count; i += 1) {
      if (i === options.warmup) {
        cpuSince = cpuWindow(options.cpuPids);
      }
      let fetched: Fetched | undefined;
      try {
        fetched = await fetchStream(options.url, options.headers, options.body, agent);
      } catch {
        fetched = undefined;
      }
      if (i < options.warmup) continue;
      if (!fetched || fetched.status !== 200 || !options.check(fetched)) {
        failures += 1;
        continue;
      }
      bytes = Buffer.byteLength(fetched.text);
      totals.push(fetched.totalMs);
    }
  } finally {
    agent.destroy();
  }
  const cpuMs = cpuSince?.() ?? Object.fromEntries(Object.keys(options.cpuPids).map((name) => [name, null]));
  return {
    requests: options.count,
    failures,
    total: summarise(totals),
    bytes,
    cpuMs,
    before: { quiet: quiet.quiet, busyPct: quiet.busyPct },
  };
}

export async function runE2e(options: {
  chunks: number;
  warmup: number;
  requests: number;
  quietWaitMs: number;
  redis: Redis;
  redisUrl: string;
}): Promise<E2eResults> {
  const { chunks, warmup, requests, quietWaitMs, redis, redisUrl } = options;
  const expected = expectedText(chunks);
  const fake: Fake = await startFake({ vendors: ['openai', 'anthropic', 'gemini'], streamChunks: chunks });
  log(
    `translation e2e: fakes in pid ${fake.child.pid}: OpenAI ${fake.url}, Anthropic ${fake.anthropicUrl}, Gemini ` +
      `${fake.geminiUrl}`,
  );
  const baseUrls: Record<Protocol, string> = {
    openai: fake.url,
    anthropic: fake.anthropicUrl!,
    gemini: fake.geminiUrl!,
  };
  try {
    await redis.flushdb();
    const { key } = await new KeyStore(redis, await testRecord(redis)).create('bench-translation');
    const gateway = await startGateway('all', fake.url, redisUrl, undefined, {
      env: {
        OPENAI_API_KEY: keys.openai,
        ANTHROPIC_API_KEY: keys.anthropic,
        ANTHROPIC_BASE_URL: baseUrls.anthropic,
        GEMINI_API_KEY: keys.gemini,
        GEMINI_BASE_URL: baseUrls.gemini,
      },
      logTag: 'translation',
    });
    const child = gateway.children.gateway!;
    try {
      await probe(gateway.url, key, [child]);
      const cpuPids: Record<string, number> = { gateway: child.pid, fake: fake.child.pid, client: process.pid };
      const redisPid = await redisProcessId(redis);
      if (redisPid !== undefined) cpuPids.redis = redisPid;
      const rows: E2eRow[] = [];
      for (const protocol of protocols) {
        await fakeControl(fake, 'POST', '/__reset');
        // The fake Anthropic has no default handler: queue one long stream per request to come (four targets: direct,
        // chat, messages, gemini).
        if (protocol === 'anthropic')
          await fakeControl(fake, 'POST', `/__enqueue?vendor=anthropic&count=${4 * (warmup + requests)}`);
        const upstreamBytes = Buffer.byteLength(longStream(protocol, chunks));
        const direct = directRequest(protocol, baseUrls[protocol], keys[protocol]);
        log(
          `translation e2e, ${protocol}: direct to the fake (${warmup} + ${requests} sequential streams of ` +
            `${chunks} deltas)`,
        );
        const directResult = await measureTarget({
          ...direct,
          warmup,
          count: requests,
          check: (fetched) => Buffer.byteLength(fetched.text) === upstreamBytes,
          cpuPids,
          quietWaitMs,
        });
        log(`translation e2e, ${protocol}: through the gateway`);
        const gatewayResult = await measureTarget({
          url: `${gateway.url}/v1/chat/completions`,
          headers: { authorization: `Bearer ${key}` },
          body: JSON.stringify({
            model: protocolModels[protocol],
            messages: [{ role: 'user', content: 'Say hello.' }],
            stream: true,
            stream_options: { include_usage: true },
          }),
          warmup,
          count: requests,
          check: (fetched) => gatewayAnswerIsComplete(fetched.text, chunks, expected),
          cpuPids,
          quietWaitMs,
        });
        log(`translation e2e, ${protocol}: through the gateway's /v1/messages`);
        const messagesResult = await measureTarget({
          url: `${gateway.url}/v1/messages`,
          headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01' },
          body: JSON.stringify({
            model: protocolModels[protocol],
            max_tokens: 1024,
            messages: [{ role: 'user', content: 'Say hello.' }],
            stream: true,
          }),
          warmup,
          count: requests,
          check: (fetched) => messagesAnswerIsComplete(fetched.text, chunks, expected),
          cpuPids,
          quietWaitMs,
        });
        log(`translation e2e, ${protocol}: through the gateway's :streamGenerateContent`);
        const geminiResult = await measureTarget({
          url: `${gateway.url}/v1beta/models/${protocolModels[protocol]}:streamGenerateContent?alt=sse`,
          headers: { 'x-goog-api-key': key },
          body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'Say hello.' }] }] }),
          warmup,
          count: requests,
          check: (fetched) => geminiAnswerIsComplete(fetched.text, expected),
          cpuPids,
          quietWaitMs,
        });
        const perChunk = (cpu: number | null | undefined) => (cpu == null ? null : (cpu * 1000) / (requests * chunks));
        rows.push({
          protocol,
          model: protocolModels[protocol],
          direct: directResult,
          gateway: gatewayResult,
          addedWallUsPerChunkP50: ((gatewayResult.total.p50 - directResult.total.p50) * 1000) / chunks,
          gatewayCpuUsPerChunk: perChunk(gatewayResult.cpuMs.gateway),
          redisCpuUsPerChunk: perChunk(gatewayResult.cpuMs.redis),
          messages: messagesResult,
          messagesAddedWallUsPerChunkP50: ((messagesResult.total.p50 - directResult.total.p50) * 1000) / chunks,
          messagesGatewayCpuUsPerChunk: perChunk(messagesResult.cpuMs.gateway),
          gemini: geminiResult,
          geminiAddedWallUsPerChunkP50: ((geminiResult.total.p50 - directResult.total.p50) * 1000) / chunks,
          geminiGatewayCpuUsPerChunk: perChunk(geminiResult.cpuMs.gateway),
        });
      }
      if (child.warnings > 0)
        log(
          `gateway logged ${child.warnings} line(s) at warn or above: see bench/results/logs/translation-gateway.log`,
        );
      return { chunks, warmup, requests, gatewayPid: child.pid, rows, warnings: { gateway: child.warnings } };
    } finally {
      log('translation e2e: stopping the gateway');
      await stopGateway(gateway);
    }
  } finally {
    await fake.child.stop();
  }
}
