/**
 * The openai-batches section of `npm run bench` (`BENCH_ONLY=openai-batches`): OpenAI's Batch API (`/v1/files`,
 * `/v1/batches`; api/files/, api/batches/openai-*.ts) with a file of BENCH_OAI_BATCH_LINES (50,000) `/v1/embeddings`
 * requests on text-embedding-3-small, about 60 MB (each line's input about 1,150 characters), run on the Message
 * Batches engine against a fake OpenAI capped at BENCH_OAI_BATCH_CAP (50) in flight answering in
 * BENCH_OAI_BATCH_VENDOR_MS (200 ms, as the batches section's vendor) with vectors of BENCH_OAI_BATCH_DIMENSIONS (8;
 * the request's `dimensions`); each input BENCH_OAI_BATCH_INPUT_CHARS (1,150) characters: 3,900 makes the file about
 * 200 MB, OpenAI's largest.
 *
 * One fake OpenAI (bench/fake-upstream-process.ts) and a split gateway (`--role=api` + one `--role=worker`) with
 * `OPENAI_MAX_CONCURRENCY` = the cap, on an emptied Redis database and an empty record. Two credited accounts: A (the
 * batch) and B (interactive embeddings on the same model, BENCH_OAI_BATCH_CONCURRENCY (4) at a time).
 *
 *   1. alone       B sends BENCH_OAI_BATCH_INTERACTIVE (200) embeddings: p50/p95/p99
 *   2. upload      A posts the file (`purpose: batch`, one multipart body with its length); its time, the api's RSS
 *                  peak and its longest event-loop turn meanwhile (`/readyz`'s `event_loop_max_ms`, read every 50 ms:
 *                  each read gives the worst turn since the one before)
 *   3. validation  A creates the batch; the batch is read every 100 ms until it leaves `validating` (the first
 *                  reading of the file): the time from the POST's send, with the api's RSS peak and longest turn
 *   4. storing     the second reading (each line checked as its endpoint checks a request and stored as its entry,
 *                  the window queued): from `in_progress` until the batch's `stored` (in Redis) reaches the lines,
 *                  with RSS and the longest turn. Redis then: used_memory − before the create, ÷ lines; the pending
 *                  entries' hash ÷ its entries (MEMORY USAGE): what a waiting request holds; the results so far ÷
 *                  their count: what a result holds until the batch ends
 *   5. the batch   from `in_progress`, B sends the same load as alone; the batch is read every 250 ms until it is
 *                  `completed`. Its time to finish (seen − the create's send) against the vendor's capacity time
 *                  (lines × vendor ms ÷ cap, as the batches section reports it), and the finalizing step (the output
 *                  file written from the results) apart. RSS peaks, Redis's peak
 *   6. output      the output file read whole: every line parsed, status 200 and a vector, once per custom_id
 *
 * Writes nothing itself: bench/run.ts writes bench/results/latest-openai-batches.json and prints the tables.
 */
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { Agent, request } from 'undici';
import { KeyStore } from '../api/accounts/key-store.js';
import { batchField } from '../shared/batches/index.js';
import { batchKey, batchPendingKey, batchResultsKey } from '../shared/redis-keys.js';
import { resetRecordFor, testRecord } from '../test/support/record.js';
import { loops, mib, ms0, result, spread } from './batches.js';
import { envInt, outcomes, redisUsedMemory, RssSampler, type LatencySummary } from './measure.js';
import { sleep, waitForQuiet, waitUntil } from './procs.js';
import {
  fakeControl,
  log,
  probe,
  startFake,
  startGateway,
  stopGateway,
  type Fake,
  type Gateway,
  type SlotUse,
} from './stack.js';
import { table, type Bar } from './table.js';

const embeddingModel = 'text-embedding-3-small';

export interface OpenAIBatchSettings {
  lines: number;
  /** Characters of each line's input. */
  inputChars: number;
  cap: number;
  vendorMs: number;
  dimensions: number;
  interactive: number;
  concurrency: number;
  quietWaitMs: number;
}

export function openAIBatchSettings(quietWaitMs: number): OpenAIBatchSettings {
  return {
    lines: envInt('BENCH_OAI_BATCH_LINES', 50_000, 1),
    inputChars: envInt('BENCH_OAI_BATCH_INPUT_CHARS', 1150, 20),
    cap: envInt('BENCH_OAI_BATCH_CAP', 50, 1),
    vendorMs: envInt('BENCH_OAI_BATCH_VENDOR_MS', 200, 1),
    dimensions: envInt('BENCH_OAI_BATCH_DIMENSIONS', 8, 1),
    interactive: envInt('BENCH_OAI_BATCH_INTERACTIVE', 200, 1),
    concurrency: envInt('BENCH_OAI_BATCH_CONCURRENCY', 4, 1),
    quietWaitMs,
  };
}

interface Phase {
  ms: number;
  /** The api's longest event-loop turn over the phase (ms), and how many /readyz reads saw it. */
  loopMaxMs: number;
  loopReads: number;
  /** RSS peaks over the phase, bytes. */
  rssPeak: Record<string, number | null>;
}

export interface InteractiveStats {
  sent: number;
  ok: number;
  failed: number;
  statusCodes: Record<string, number>;
  firstFailure?: string;
  latency: LatencySummary;
}

export interface OpenAIBatchResults {
  settings: OpenAIBatchSettings;
  processes: Record<string, number>;
  quietBefore: { quiet: boolean; busyPct: number | null };
  fileBytes: number;
  fileId: string;
  batchId: string;
  rssBefore: Record<string, number | null>;
  upload: Phase;
  validation: Phase;
  /** The second reading: `in_progress` seen → every line stored as its entry (the batch's `stored`). */
  storing: Phase;
  /** Every line stored → `completed` seen. */
  run: Phase;
  /** `finalizing` seen → `completed` seen, ms (NaN when the reads never saw `finalizing`). */
  finalizingMs: number;
  /** Create sent → `completed` seen, ms; and lines × vendor ms ÷ cap. */
  finishMs: number;
  capacityMs: number;
  /** B's calls answered while the batch ran, and the capacity with them. */
  interactiveCallsDuringBatch: number;
  capacityWithInteractiveMs: number;
  redis: {
    beforeBytes: number;
    /** used_memory once every line is stored. */
    afterStoredBytes: number;
    peakBytes: number;
    afterEndBytes: number;
    /** (after stored − before) ÷ lines: entries, the window's jobs, the batch's record and the results in so far. */
    perLineBytes: number;
    /**
     * Then: the entries still waiting (MEMORY USAGE of the batch's pending hash ÷ its fields), and the results in so
     * far (of its results stream ÷ its length).
     */
    waiting: number;
    perWaitingEntryBytes: number;
    resultsIn: number;
    perResultBytes: number;
  };
  alone: InteractiveStats;
  duringBatch: InteractiveStats;
  requestCounts: Record<string, number>;
  output: {
    lines: number;
    ok: number;
    distinctCustomIds: number;
    bad: number;
    readMs: number;
    bytes: number;
    errorFile: boolean;
  };
  vendor: { calls: number | null; maxInFlight: number; overCap: number; slotUse: SlotUse | null };
  warnings: Record<string, number>;
  bars: Bar[];
}

const auth = (key: string) => ({ authorization: `Bearer ${key}` });

/** A line's input: about `chars` characters of words, different on every line (so no two requests are the same). */
function inputOf(i: number, chars: number): string {
  const words = [
    'gateway',
    'queue',
    'vendor',
    'token',
    'account',
    'budget',
    'window',
    'stream',
    'result',
    'record',
    'worker',
    'redis',
  ];
  const parts: string[] = [`Document ${i}.`];
  let length = parts[0]!.length;
  for (let j = 0; length < chars; j++) {
    const word = words[(i * 7 + j * 13) % words.length]!;
    parts.push(word);
    length += word.length + 1;
  }
  return parts.join(' ');
}

/** The batch input file: `lines` embeddings requests. */
function batchFile(lines: number, dimensions: number, tag: string, chars: number): Buffer {
  const out: string[] = [];
  for (let i = 0; i < lines; i++) {
    out.push(
      JSON.stringify({
        custom_id: `${tag}-${i}`,
        method: 'POST',
        url: '/v1/embeddings',
        body: { model: embeddingModel, input: inputOf(i, chars), dimensions },
      }),
    );
  }
  return Buffer.from(`${out.join('\n')}\n`);
}

/** One multipart body (purpose first, then the file), with its length. */
function multipart(file: Buffer, filename: string): { body: Buffer; type: string } {
  const boundary = `----syBench${Date.now().toString(36)}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n` +
      (`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${filename}"\r\nContent-Type: ` +
        `application/jsonl\r\n\r\n`),
  );
  return {
    body: Buffer.concat([head, file, Buffer.from(`\r\n--${boundary}--\r\n`)]),
    type: `multipart/form-data; boundary=${boundary}`,
  };
}

async function call(
  agent: Agent,
  method: 'GET' | 'POST',
  url: string,
  key: string,
  body?: string | Buffer,
  type = 'application/json',
): Promise<{ status: number; text: string }> {
  const response = await request(url, {
    method,
    dispatcher: agent,
    headers: { ...auth(key), ...(body !== undefined ? { 'content-type': type } : {}) },
    ...(body !== undefined ? { body } : {}),
  });
  return { status: response.statusCode, text: await response.body.text() };
}

async function json<T>(
  agent: Agent,
  method: 'GET' | 'POST',
  url: string,
  key: string,
  body?: string | Buffer,
  type?: string,
): Promise<T> {
  const { status, text } = await call(agent, method, url, key, body, type);
  if (status !== 200) throw new Error(`${method} ${url}: ${status} ${text.slice(0, 500)}`);
  return JSON.parse(text) as T;
}

interface BatchView {
  id: string;
  status: string;
  request_counts: Record<string, number>;
  output_file_id: string | null;
  error_file_id: string | null;
  errors?: unknown;
}

interface Done {
  ms: number;
  status: number;
  ok: boolean;
  failure?: string;
  at: number;
}

/** One interactive embeddings request from B; ok when 200 with a vector. */
async function embed(agent: Agent, url: string, key: string, body: string): Promise<Done> {
  const sent = performance.now();
  try {
    const response = await request(`${url}/v1/embeddings`, {
      method: 'POST',
      dispatcher: agent,
      headers: { ...auth(key), 'content-type': 'application/json' },
      body,
    });
    const text = await response.body.text();
    const at = performance.now();
    let ok = false;
    try {
      ok =
        response.statusCode === 200 &&
        Array.isArray((JSON.parse(text) as { data?: Array<{ embedding?: unknown }> }).data?.[0]?.embedding);
    } catch {
      // not JSON: a failure below
    }
    return {
      ms: at - sent,
      status: response.statusCode,
      ok,
      at,
      ...(ok ? {} : { failure: `${response.statusCode} ${text.slice(0, 300)}` }),
    };
  } catch (error) {
    return {
      ms: performance.now() - sent,
      status: 0,
      ok: false,
      at: performance.now(),
      failure: (error as Error).message,
    };
  }
}

const stats = (done: Done[]): InteractiveStats => {
  const { sent, ok, failed, statusCodes, firstFailure } = outcomes(done);
  return {
    sent,
    ok,
    failed,
    statusCodes,
    ...(firstFailure ? { firstFailure } : {}),
    latency: spread(done.filter((d) => d.ok).map((d) => d.ms)),
  };
};

/** Reads `/readyz` every 50 ms while a phase runs: the api's worst event-loop turn since the read before. */
class LoopWatch {
  private worst = 0;
  private reads = 0;
  private running = true;
  private readonly done: Promise<void>;

  constructor(
    private readonly agent: Agent,
    private readonly url: string,
  ) {
    this.done = (async () => {
      while (this.running) {
        const seen = await this.read();
        if (seen !== undefined) {
          this.worst = Math.max(this.worst, seen);
          this.reads += 1;
        }
        await sleep(50);
      }
    })();
  }

  private async read(): Promise<number | undefined> {
    try {
      const response = await request(`${this.url}/readyz`, { dispatcher: this.agent });
      const body = (await response.body.json()) as { event_loop_max_ms?: unknown };
      return typeof body.event_loop_max_ms === 'number' ? body.event_loop_max_ms : undefined;
    } catch {
      return undefined; // a read lost: the next one covers its span
    }
  }

  /** The worst turn since the last take (and how many reads saw the span), starting over. */
  async take(): Promise<{ loopMaxMs: number; loopReads: number }> {
    // One more read covers the span up to now.
    const last = await this.read();
    const taken = { loopMaxMs: Math.max(this.worst, last ?? 0), loopReads: this.reads + (last === undefined ? 0 : 1) };
    this.worst = 0;
    this.reads = 0;
    return taken;
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }
}

async function untilStatus(
  agent: Agent,
  gateway: Gateway,
  key: string,
  id: string,
  everyMs: number,
  timeoutMs: number,
  onRead: (view: BatchView, at: number) => boolean,
): Promise<BatchView> {
  const until = performance.now() + timeoutMs;
  let last: BatchView | undefined;
  let logged = performance.now();
  while (performance.now() < until) {
    const dead = Object.values(gateway.children).find((c) => c.exited);
    if (dead) throw new Error(`${dead.name} (pid ${dead.pid}) exited while the batch ran:\n${dead.tail.join('\n')}`);
    last = await json<BatchView>(agent, 'GET', `${gateway.url}/v1/batches/${id}`, key);
    if (onRead(last, performance.now())) return last;
    if (['failed', 'cancelled', 'expired'].includes(last.status))
      throw new Error(`the batch ${id} ended ${last.status}: ${JSON.stringify(last.errors ?? null)}`);
    if (performance.now() - logged > 10_000) {
      logged = performance.now();
      log(`openai-batches: ${last.status} ${JSON.stringify(last.request_counts)}`);
    }
    await sleep(everyMs);
  }
  throw new Error(
    `the batch ${id} did not get there within ${Math.round(timeoutMs / 1000)} s; last seen ${JSON.stringify(last)}`,
  );
}

export async function runOpenAIBatches(options: {
  settings: OpenAIBatchSettings;
  redis: Redis;
  redisUrl: string;
}): Promise<OpenAIBatchResults> {
  const { settings, redis, redisUrl } = options;
  const { cap, vendorMs, lines } = settings;
  let fake: Fake | undefined;
  let gateway: Gateway | undefined;
  let watch: LoopWatch | undefined;
  const agent = new Agent({ keepAliveTimeout: 60_000, headersTimeout: 600_000, bodyTimeout: 600_000 });
  const watchAgent = new Agent({ keepAliveTimeout: 60_000 });
  try {
    fake = await startFake({ latencyMs: vendorMs, cap });
    log(`openai-batches: fake OpenAI (${vendorMs} ms, 429 beyond ${cap}), pid ${fake.child.pid}`);
    await redis.flushdb();
    await resetRecordFor(redisUrl);
    const keyStore = new KeyStore(redis, await testRecord(redis));
    const keyOf = async (name: string) => {
      const account = await keyStore.accounts.create({
        email: `bench-oai-batches-${name.toLowerCase()}@example.com`,
        name: `bench OpenAI batches ${name}`,
      });
      await keyStore.accounts.credit(account.id, 10 ** 12, 'bench');
      return (
        await keyStore.create(`bench-oai-batches-${name}`, {
          accountId: account.id,
          limitMicros: 10 ** 12,
          rpm: 10 ** 8,
          tpm: 10 ** 9,
        })
      ).key;
    };
    const keyA = await keyOf('A');
    const keyB = await keyOf('B');
    gateway = await startGateway('split', fake.url, redisUrl, process.env.BENCH_CPU_PROF || undefined, {
      env: { OPENAI_MAX_CONCURRENCY: String(cap) },
      logTag: 'openai-batches',
    });
    await probe(gateway.url, keyB, Object.values(gateway.children));
    const pids = { ...gateway.pids };
    const url = gateway.url;
    const embedJson = JSON.stringify({
      model: embeddingModel,
      input: 'An interactive request.',
      dimensions: settings.dimensions,
    });
    const fireB = () => embed(agent, url, keyB, embedJson);

    // Warm-up: both keys, the embeddings path, and a small batch to its end.
    const warm = [
      ...(await loops(settings.concurrency, (n) => n < 20, fireB)),
      ...(await loops(
        settings.concurrency,
        (n) => n < 20,
        () => embed(agent, url, keyA, embedJson),
      )),
    ];
    const warmFailed = warm.filter((d) => !d.ok);
    if (warmFailed.length > 0)
      throw new Error(`warm-up: ${warmFailed.length} of ${warm.length} failed, e.g. ${warmFailed[0]!.failure}`);
    {
      const small = multipart(batchFile(100, settings.dimensions, 'warm', settings.inputChars), 'warm.jsonl');
      const file = await json<{ id: string }>(agent, 'POST', `${url}/v1/files`, keyA, small.body, small.type);
      const batch = await json<BatchView>(
        agent,
        'POST',
        `${url}/v1/batches`,
        keyA,
        JSON.stringify({ input_file_id: file.id, endpoint: '/v1/embeddings', completion_window: '24h' }),
      );
      await untilStatus(agent, gateway, keyA, batch.id, 100, 60_000, (view) => view.status === 'completed');
    }
    await waitUntil(
      'an idle fake vendor',
      async () => (await fakeControl(fake!, 'GET', '/__stats')).openai!.inFlight === 0,
      60_000,
    );

    const quiet = await waitForQuiet({ maxWaitMs: settings.quietWaitMs });
    log(`openai-batches: B alone, ${settings.interactive} embeddings ${settings.concurrency} at a time`);
    const alone = stats(await loops(settings.concurrency, (n) => n < settings.interactive, fireB));
    await fakeControl(fake, 'POST', '/__reset');

    const file = batchFile(lines, settings.dimensions, 'req', settings.inputChars);
    const upload = multipart(file, 'corpus.jsonl');
    log(
      `openai-batches: A uploads ${lines.toLocaleString('en-US')} lines (${(file.length / 1024 / 1024).toFixed(1)} MiB)`,
    );
    const rssBefore = new RssSampler(pids).snapshot();
    watch = new LoopWatch(watchAgent, url);
    await watch.take();

    // 2. upload
    let sampler = new RssSampler(pids, 100);
    sampler.start();
    let t = performance.now();
    const made = await json<{ id: string; bytes: number }>(
      agent,
      'POST',
      `${url}/v1/files`,
      keyA,
      upload.body,
      upload.type,
    );
    const uploadPhase: Phase = { ms: performance.now() - t, ...(await watch.take()), rssPeak: sampler.stop() };
    log(
      `openai-batches: uploaded in ${Math.round(uploadPhase.ms)} ms (${made.id}, ${made.bytes} B), longest turn ` +
        `${uploadPhase.loopMaxMs} ms`,
    );

    // 3. validation
    const redisBefore = await redisUsedMemory(redis);
    let redisPeak = redisBefore;
    let sampling = true;
    const redisSampling = (async () => {
      while (sampling) {
        redisPeak = Math.max(redisPeak, await redisUsedMemory(redis).catch(() => 0));
        await sleep(250);
      }
    })();
    sampler = new RssSampler(pids, 100);
    sampler.start();
    const t0 = performance.now();
    const created = await json<BatchView>(
      agent,
      'POST',
      `${url}/v1/batches`,
      keyA,
      JSON.stringify({ input_file_id: made.id, endpoint: '/v1/embeddings', completion_window: '24h' }),
    );
    let validatedAt = Number.NaN;
    await untilStatus(agent, gateway, keyA, created.id, 100, 600_000, (view, at) => {
      if (view.status === 'validating') return false;
      validatedAt = at;
      return true;
    });
    const validationPhase: Phase = { ms: validatedAt - t0, ...(await watch.take()), rssPeak: sampler.stop() };
    log(
      `openai-batches: validated in ${Math.round(validationPhase.ms)} ms, longest turn ` +
        `${validationPhase.loopMaxMs} ms; B sends ${settings.interactive} more meanwhile`,
    );

    // 4. the batch, with B's load; its lines stored first
    let ended = false;
    const batchLoad = loops(settings.concurrency, (n) => n < settings.interactive && !ended, fireB);
    sampler = new RssSampler(pids, 100);
    sampler.start();
    await waitUntil(
      'every line stored',
      async () => Number(await redis.hget(batchKey(created.id), batchField.stored)) >= lines,
      600_000,
    );
    const storedAt = performance.now();
    const storingPhase: Phase = { ms: storedAt - validatedAt, ...(await watch.take()), rssPeak: sampler.stop() };
    const redisAfterStored = await redisUsedMemory(redis);
    const memoryOf = async (key: string) => Number((await redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')) ?? 0);
    const waiting = await redis.hlen(batchPendingKey(created.id));
    const waitingBytes = await memoryOf(batchPendingKey(created.id));
    const resultsIn = await redis.xlen(batchResultsKey(created.id));
    const resultsBytes = await memoryOf(batchResultsKey(created.id));
    log(
      `openai-batches: every line stored ${Math.round(storingPhase.ms)} ms after in_progress, longest turn ` +
        `${storingPhase.loopMaxMs} ms; ${waiting} waiting, ${resultsIn} results in`,
    );
    sampler = new RssSampler(pids, 250);
    sampler.start();
    let finalizingSeen = Number.NaN;
    let completedAt = Number.NaN;
    const capacityMs = (lines * vendorMs) / cap;
    const final = await untilStatus(
      agent,
      gateway,
      keyA,
      created.id,
      250,
      Math.max(300_000, capacityMs * 10),
      (view, at) => {
        if (view.status === 'finalizing' && Number.isNaN(finalizingSeen)) finalizingSeen = at;
        if (view.status !== 'completed') return false;
        completedAt = at;
        return true;
      },
    );
    ended = true;
    const duringDone = await batchLoad;
    const runPhase: Phase = { ms: completedAt - storedAt, ...(await watch.take()), rssPeak: sampler.stop() };
    sampling = false;
    await redisSampling;
    const finishMs = completedAt - t0;
    log(
      `openai-batches: completed ${(finishMs / 1000).toFixed(2)} s after the create (capacity ` +
        `${(capacityMs / 1000).toFixed(1)} s): ${JSON.stringify(final.request_counts)}`,
    );
    const vendorStats = (await fakeControl(fake, 'GET', '/__stats')).openai!;
    const interactiveCalls = duringDone.filter((d) => d.ok && d.at <= completedAt).length;

    // 5. output
    t = performance.now();
    const content = await call(agent, 'GET', `${url}/v1/files/${final.output_file_id}/content`, keyA);
    const readMs = performance.now() - t;
    if (content.status !== 200) throw new Error(`GET the output file: ${content.status} ${content.text.slice(0, 300)}`);
    const ids = new Set<string>();
    let outLines = 0;
    let ok = 0;
    let bad = 0;
    for (const line of content.text.split('\n')) {
      if (line === '') continue;
      outLines += 1;
      try {
        const parsed = JSON.parse(line) as {
          custom_id?: string;
          response?: { status_code?: number; body?: { data?: Array<{ embedding?: unknown[] }> } };
        };
        if (
          parsed.response?.status_code === 200 &&
          parsed.response.body?.data?.[0]?.embedding?.length === settings.dimensions
        )
          ok += 1;
        else bad += 1;
        if (parsed.custom_id) ids.add(parsed.custom_id);
      } catch {
        bad += 1;
      }
    }
    await sleep(1000);
    const redisAfterEnd = await redisUsedMemory(redis);
    await watch.stop();
    watch = undefined;

    const r: OpenAIBatchResults = {
      settings,
      processes: { ...pids, fake: fake.child.pid },
      quietBefore: { quiet: quiet.quiet, busyPct: quiet.busyPct },
      fileBytes: file.length,
      fileId: made.id,
      batchId: created.id,
      rssBefore,
      upload: uploadPhase,
      validation: validationPhase,
      storing: storingPhase,
      run: runPhase,
      finalizingMs: completedAt - finalizingSeen,
      finishMs,
      capacityMs,
      interactiveCallsDuringBatch: interactiveCalls,
      capacityWithInteractiveMs: ((lines + interactiveCalls) * vendorMs) / cap,
      redis: {
        beforeBytes: redisBefore,
        afterStoredBytes: redisAfterStored,
        peakBytes: redisPeak,
        afterEndBytes: redisAfterEnd,
        perLineBytes: (redisAfterStored - redisBefore) / lines,
        waiting,
        perWaitingEntryBytes: waiting > 0 ? waitingBytes / waiting : Number.NaN,
        resultsIn,
        perResultBytes: resultsIn > 0 ? resultsBytes / resultsIn : Number.NaN,
      },
      alone,
      duringBatch: stats(duringDone),
      requestCounts: final.request_counts,
      output: {
        lines: outLines,
        ok,
        distinctCustomIds: ids.size,
        bad,
        readMs,
        bytes: Buffer.byteLength(content.text),
        errorFile: final.error_file_id !== null,
      },
      vendor: {
        calls: vendorStats.requests,
        maxInFlight: vendorStats.maxInFlight,
        overCap: vendorStats.overCap ?? 0,
        slotUse: vendorStats.slotUse ?? null,
      },
      warnings: Object.fromEntries(Object.entries(gateway.children).map(([name, child]) => [name, child.warnings])),
      bars: [],
    };
    r.bars = bars(r);
    return r;
  } finally {
    await watch?.stop();
    await agent.close().catch(() => undefined);
    await watchAgent.close().catch(() => undefined);
    if (gateway) await stopGateway(gateway);
    await fake?.child.stop();
  }
}

function bars(r: OpenAIBatchResults): Bar[] {
  const s = r.settings;
  const out: Bar[] = [];
  out.push({
    name: `${s.lines.toLocaleString('en-US')} lines: every output line a vector, once per custom_id`,
    target: `${s.lines.toLocaleString('en-US')} ok, no error file`,
    actual: `${r.output.ok.toLocaleString('en-US')} ok of ${r.output.lines.toLocaleString('en-US')} lines, ${r.output.distinctCustomIds.toLocaleString('en-US')} ids${r.output.errorFile ? ', an error file' : ''}`,
    pass:
      r.output.ok === s.lines &&
      r.output.lines === s.lines &&
      r.output.distinctCustomIds === s.lines &&
      !r.output.errorFile,
  });
  const worst = Math.max(r.upload.loopMaxMs, r.validation.loopMaxMs);
  out.push({
    name: "the api's longest event-loop turn, upload and validation",
    target: '≤ 50 ms',
    actual: `${r.upload.loopMaxMs} / ${r.validation.loopMaxMs} ms`,
    pass: worst <= 50,
    informational: true,
  });
  out.push({
    name: "finish ÷ the vendor's capacity time",
    target: `≤ 1.05 × ${(r.capacityMs / 1000).toFixed(1)} s`,
    actual:
      `${(r.finishMs / 1000).toFixed(2)} s (${(r.finishMs / r.capacityMs).toFixed(3)}×; ` +
      `${(r.finishMs / r.capacityWithInteractiveMs).toFixed(3)}× with B's ${r.interactiveCallsDuringBatch} calls)`,
    pass: r.finishMs <= 1.05 * r.capacityMs,
    informational: true,
  });
  const aloneP95 = r.alone.latency.p95;
  const duringP95 = r.duringBatch.latency.p95;
  out.push({
    name: "B's p95 during the batch",
    target: `≤ alone + 100 ms (${Math.round(aloneP95 + 100)} ms)`,
    actual: `${Math.round(duringP95)} ms (${duringP95 - aloneP95 >= 0 ? '+' : ''}${Math.round(duringP95 - aloneP95)} ms)`,
    pass: duringP95 <= aloneP95 + 100 && r.duringBatch.failed === 0,
  });
  out.push({
    name: 'vendor cap kept, no interactive failure',
    target: `vendor ≤ ${s.cap}, 0 × 429, 0 failed`,
    actual:
      `vendor max ${r.vendor.maxInFlight}, ${r.vendor.overCap} × 429, ${r.alone.failed + r.duringBatch.failed} ` +
      `failed`,
    pass: r.vendor.maxInFlight <= s.cap && r.vendor.overCap === 0 && r.alone.failed + r.duringBatch.failed === 0,
  });
  return out;
}

export function renderOpenAIBatches(r: OpenAIBatchResults): string {
  const s = r.settings;
  const out: string[] = [];
  out.push(
    `OpenAI's Batch API: a fake OpenAI answering in ${s.vendorMs} ms, 429 beyond ${s.cap} in flight; a split ` +
      `gateway (api + worker) with OPENAI_MAX_CONCURRENCY=${s.cap}. ` +
      `A uploads ${s.lines.toLocaleString('en-US')} /v1/embeddings lines on ${embeddingModel} (${mib(r.fileBytes)} MiB, ${s.dimensions} dimensions) and runs them as ${r.batchId}; ` +
      (`B sends embeddings on the same model, ${s.concurrency} at a time: ${s.interactive} alone, ` +
        `${s.interactive} from the batch's start.`),
  );
  const phase = (name: string, p: Phase) => [
    name,
    `${ms0(p.ms)} ms`,
    `${p.loopMaxMs} ms (${p.loopReads} reads)`,
    ...Object.keys(r.rssBefore).map((n) => `${mib(r.rssBefore[n])} → ${mib(p.rssPeak[n])}`),
  ];
  out.push(
    table(
      ['phase', 'time', "api's longest turn", ...Object.keys(r.rssBefore).map((n) => `${n} RSS MiB (before → peak)`)],
      [
        phase('upload (POST /v1/files)', r.upload),
        phase('validation: first reading (create → in_progress)', r.validation),
        phase('second reading: every line checked and stored', r.storing),
        phase('the rest of the run (→ completed)', r.run),
      ],
    ),
  );
  out.push('');
  out.push(
    table(
      ['batch', 'value'],
      [
        [
          'time to finish (create sent → completed seen)',
          `${(r.finishMs / 1000).toFixed(2)} s (of it finalizing → completed: ${ms0(r.finalizingMs)} ms)`,
        ],
        [
          `vendor's capacity time (${s.lines} × ${s.vendorMs} ms ÷ ${s.cap})`,
          `${(r.capacityMs / 1000).toFixed(2)} s → ${(r.finishMs / r.capacityMs).toFixed(3)}×`,
        ],
        [
          `with B's ${r.interactiveCallsDuringBatch} calls meanwhile`,
          `${(r.capacityWithInteractiveMs / 1000).toFixed(2)} s → ` +
            `${(r.finishMs / r.capacityWithInteractiveMs).toFixed(3)}×`,
        ],
        ['request_counts', JSON.stringify(r.requestCounts)],
        [
          'output file',
          `${r.output.lines} lines (${r.output.ok} ok, ${r.output.bad} not), ${r.output.distinctCustomIds} ids, ` +
            `read in ${ms0(r.output.readMs)} ms (${mib(r.output.bytes)} MiB)`,
        ],
        ['vendor', `${r.vendor.calls ?? '-'} calls, max ${r.vendor.maxInFlight} in flight, ${r.vendor.overCap} × 429`],
        [
          'vendor slots: busy share; idle gap answer → next call (p50 / p90 / p99 ms)',
          r.vendor.slotUse
            ? `${(r.vendor.slotUse.utilisation * 100).toFixed(1)} %; ${r.vendor.slotUse.gapMs.p50.toFixed(1)} / ` +
              `${r.vendor.slotUse.gapMs.p90.toFixed(1)} / ${r.vendor.slotUse.gapMs.p99.toFixed(1)}`
            : '-',
        ],
        [
          'Redis used_memory MiB (before create / every line stored / peak / after end)',
          `${mib(r.redis.beforeBytes)} / ${mib(r.redis.afterStoredBytes)} / ${mib(r.redis.peakBytes)} / ` +
            `${mib(r.redis.afterEndBytes)}`,
        ],
        ['Redis per line once all are stored (used_memory − before) ÷ lines', `${Math.round(r.redis.perLineBytes)} B`],
        [
          `Redis per waiting request: the pending hash ÷ its ${r.redis.waiting} entries`,
          `${Math.round(r.redis.perWaitingEntryBytes)} B`,
        ],
        [
          `Redis per result kept until the end: the results stream ÷ its ${r.redis.resultsIn} entries`,
          `${Math.round(r.redis.perResultBytes)} B`,
        ],
        [
          'gateway log lines at warn+',
          Object.entries(r.warnings)
            .map(([n, k]) => `${n} ${k}`)
            .join(', '),
        ],
      ],
    ),
  );
  out.push('');
  out.push(
    table(
      ['B (embeddings)', 'sent', 'ok', 'p50 ms', 'p95 ms', 'p99 ms', 'max ms'],
      (
        [
          ['alone', r.alone],
          ['during the batch', r.duringBatch],
        ] as const
      ).map(([name, x]) => [
        name,
        String(x.sent),
        String(x.ok),
        ms0(x.latency.p50),
        ms0(x.latency.p95),
        ms0(x.latency.p99),
        ms0(x.latency.max),
      ]),
    ),
  );
  out.push('');
  out.push('Bars of the openai-batches section (in parentheses: informational)');
  out.push(
    table(
      ['bar', 'target', 'actual', 'result'],
      r.bars.map((b) => [b.name, b.target, b.actual, result(b)]),
    ),
  );
  return out.join('\n');
}
