/**
 * The batches section of `npm run bench` (`BENCH_ONLY=batches`): a Message Batch (`POST /v1/messages/batches`,
 * api/batches/anthropic-intake.ts, workers/batch-run.ts) against a vendor capped at BENCH_BATCH_CAP (50) in flight
 * answering in BENCH_BATCH_VENDOR_MS (200 ms), with interactive traffic from another account on the same model
 * meanwhile.
 *
 * One fake OpenAI (bench/fake-upstream-process.ts, `--latency-ms`, `--cap`: 429 beyond the cap, counted) and a split
 * gateway (`--role=api` + BENCH_BATCH_WORKERS (1) `--role=worker`) with `OPENAI_MAX_CONCURRENCY` = the cap (the
 * vendor's own lane) and the default worker concurrency (4,096 chat jobs in flight per worker: never the bottleneck at
 * 50), on an emptied Redis database and an empty record. Two credited accounts, A (the batch) and B (interactive),
 * their keys made with the key store as the cache section makes its own.
 *
 *   1. alone      B sends BENCH_BATCH_INTERACTIVE (100) default-tier chat completions, BENCH_BATCH_CONCURRENCY (4) at a
 *                 time (each loop sends its next when its last is answered): p50/p95/p99
 *   2. accept     A posts one batch of BENCH_BATCH_REQUESTS (10,000) `/v1/messages` requests on the model; the time
 *                 until the POST is answered. B's loops keep sending while it is under way (the api parses and queues
 *                 the batch meanwhile): their latencies are reported apart
 *   3. the batch  from the answer, B sends the same interactive load as alone; the batch is polled
 *                 (`GET /v1/messages/batches/{id}`, every BENCH_BATCH_POLL_MS, 250) until `ended`. Its time to finish:
 *                 the batch's `ended_at` − the POST's send, against the vendor's capacity time (requests × vendor ms
 *                 ÷ cap), and against the capacity of every vendor call made meanwhile (B's included)
 *   4. memory     api and worker RSS (/proc VmRSS, sampled every 250 ms from before the POST to the end: peak);
 *                 Redis used_memory right after the accept − just before the POST, ÷ requests (the jobs and their
 *                 payloads, the batch's record, and the results of what already ran during the accept), its peak
 *                 during the batch, and after the end (the results kept)
 *   5. results    `GET …/results` read whole: every line parsed, counted by result type and custom_id; the fake's
 *                 most in flight and its 429s over the batch
 *
 * Writes nothing itself: bench/run.ts writes bench/results/latest-batches.json and prints renderBatches' tables.
 */
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { Agent, request } from 'undici';
import { KeyStore } from '../api/accounts/key-store.js';
import { FAKE_REPLY_TEXT } from '../test/support/fake-openai-defaults.js';
import { resetRecordFor, testRecord } from '../test/support/record.js';
import {
  envInt,
  outcomes,
  redisProcessId,
  redisUsedMemory,
  RssSampler,
  summariseSorted,
  type LatencySummary,
} from './measure.js';
import { cpuWindow, sleep, waitForQuiet, waitUntil } from './procs.js';
import {
  fakeControl,
  log,
  model,
  plainBody,
  probe,
  startFake,
  startGateway,
  stopGateway,
  type Fake,
  type Gateway,
  type SlotUse,
} from './stack.js';
import { table, type Bar } from './table.js';

export interface BatchesSettings {
  /** Requests in the batch. */
  requests: number;
  /** OPENAI_MAX_CONCURRENCY and the fake's 429 threshold. */
  cap: number;
  /** The fake's answer time, ms. */
  vendorMs: number;
  /** B's interactive requests per phase (alone; during the batch). */
  interactive: number;
  /** B's requests in flight at once. */
  concurrency: number;
  /** Between two polls of the batch, ms. */
  pollMs: number;
  /** Worker processes of the split gateway. */
  workers: number;
  /** Before the measurement, wait up to this long for a quiet second (ms; 0: do not check). */
  quietWaitMs: number;
}

export function batchesSettings(quietWaitMs: number): BatchesSettings {
  return {
    requests: envInt('BENCH_BATCH_REQUESTS', 10_000, 1),
    cap: envInt('BENCH_BATCH_CAP', 50, 1),
    vendorMs: envInt('BENCH_BATCH_VENDOR_MS', 200, 1),
    interactive: envInt('BENCH_BATCH_INTERACTIVE', 100, 1),
    concurrency: envInt('BENCH_BATCH_CONCURRENCY', 4, 1),
    pollMs: envInt('BENCH_BATCH_POLL_MS', 250, 10),
    workers: envInt('BENCH_BATCH_WORKERS', 1, 1),
    quietWaitMs,
  };
}

/** B's requests of one phase. */
export interface InteractiveStats {
  sent: number;
  ok: number;
  failed: number;
  statusCodes: Record<string, number>;
  firstFailure?: string;
  /** ms, answered requests. */
  latency: LatencySummary;
  /** The reply's `service_tier` values. */
  tiers: Record<string, number>;
}

export interface BatchesResults {
  settings: BatchesSettings;
  processes: Record<string, number>;
  quietBefore: { quiet: boolean; busyPct: number | null };
  /** The batch's body, bytes. */
  bodyBytes: number;
  batchId: string;
  alone: InteractiveStats;
  /** B's loops while the POST was under way. */
  duringAccept: InteractiveStats;
  /** B's interactive load sent from the POST's answer. */
  duringBatch: InteractiveStats;
  /** B's last answer of the during-batch load, ms after the POST's send. */
  interactiveDoneMs: number;
  /** POST sent → answered, ms. */
  acceptMs: number;
  /** `request_counts` of the POST's answer (what had already run while it was accepted). */
  countsAtAccept: Record<string, number>;
  /** The batch's `ended_at` − the POST's send, ms; and when the poll first saw it ended. */
  finishMs: number;
  finishSeenMs: number;
  /** requests × vendorMs ÷ cap. */
  capacityMs: number;
  /** (requests + B's vendor calls between the POST's send and the batch's end) × vendorMs ÷ cap. */
  capacityWithInteractiveMs: number;
  interactiveCallsDuringBatch: number;
  finalCounts: Record<string, number>;
  /** RSS bytes: before the POST, peak from the POST to the end, after the end. */
  rss: Record<string, { before: number | null; peak: number | null; after: number | null }>;
  redis: {
    beforeBytes: number;
    afterAcceptBytes: number;
    peakBytes: number;
    afterEndBytes: number;
    /** (after accept − before) ÷ requests. */
    perQueuedRequestBytes: number;
    /** (after end − before) ÷ requests: the results kept, and the batch's record. */
    perResultBytes: number;
  };
  /**
   * The fake's calls, most in flight, 429s; slotUse: how long a slot sat idle between an answer and the next call, and
   * the busy share.
   */
  vendor: { calls: number | null; maxInFlight: number; overCap: number; slotUse: SlotUse | null };
  /**
   * From the POST's send to the batch's end: CPU of each process, % of one core (`others`: the rest of the machine).
   */
  cpuPct: Record<string, number | null>;
  results: {
    lines: number;
    byType: Record<string, number>;
    distinctCustomIds: number;
    unparsable: number;
    readMs: number;
    bytes: number;
  };
  /** Log lines at warn or above of the gateway's processes over the run. */
  warnings: Record<string, number>;
  bars: Bar[];
}

const headers = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
export const spread = (values: number[]): LatencySummary => summariseSorted(Float64Array.from(values).sort());

interface Done {
  ms: number;
  status: number;
  ok: boolean;
  tier?: string;
  failure?: string;
  /** performance.now() at the answer. */
  at: number;
}

/** One default-tier chat completion from B; ok when 200 with the fake's reply. */
async function interactive(agent: Agent, url: string, key: string, body: string): Promise<Done> {
  const sent = performance.now();
  try {
    const response = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: agent,
      headers: headers(key),
      body,
    });
    const text = await response.body.text();
    const at = performance.now();
    let content: unknown;
    let tier: unknown;
    try {
      const parsed = JSON.parse(text) as {
        choices?: Array<{ message?: { content?: unknown } }>;
        service_tier?: unknown;
      };
      content = parsed.choices?.[0]?.message?.content;
      tier = parsed.service_tier;
    } catch {
      // not JSON: a failure below
    }
    const ok = response.statusCode === 200 && content === FAKE_REPLY_TEXT;
    return {
      ms: at - sent,
      status: response.statusCode,
      ok,
      at,
      ...(typeof tier === 'string' ? { tier } : {}),
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

/** `concurrency` loops sending B's requests, each its next when its last is answered, while `more(sent)` says so. */
export async function loops<T extends { status: number }>(
  concurrency: number,
  more: (sent: number) => boolean,
  fire: () => Promise<T>,
): Promise<T[]> {
  const done: T[] = [];
  let sent = 0;
  const loop = async () => {
    while (more(sent)) {
      sent += 1;
      const d = await fire();
      done.push(d);
      if (d.status === 0) await sleep(50);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  return done;
}

function stats(done: Done[]): InteractiveStats {
  return { ...outcomes(done), latency: spread(done.filter((d) => d.ok).map((d) => d.ms)) };
}

interface BatchView {
  id: string;
  processing_status: string;
  request_counts: Record<string, number>;
  ended_at: string | null;
  created_at: string;
}

async function getJson(agent: Agent, url: string, key: string): Promise<{ status: number; text: string }> {
  const response = await request(url, { method: 'GET', dispatcher: agent, headers: headers(key) });
  return { status: response.statusCode, text: await response.body.text() };
}

function batchBody(n: number, tag: string): string {
  const requests = Array.from({ length: n }, (_, i) => ({
    custom_id: `${tag}-${i}`,
    params: { model, max_tokens: 64, messages: [{ role: 'user', content: `Say hello. (${i})` }] },
  }));
  return JSON.stringify({ requests });
}

/** Posts a batch; throws unless it is answered 200 with a batch. */
async function postBatch(agent: Agent, url: string, key: string, body: string): Promise<BatchView> {
  const response = await request(`${url}/v1/messages/batches`, {
    method: 'POST',
    dispatcher: agent,
    headers: headers(key),
    body,
  });
  const text = await response.body.text();
  if (response.statusCode !== 200)
    throw new Error(`POST /v1/messages/batches: ${response.statusCode} ${text.slice(0, 500)}`);
  return JSON.parse(text) as BatchView;
}

async function readBatch(agent: Agent, url: string, key: string, id: string): Promise<BatchView> {
  const { status, text } = await getJson(agent, `${url}/v1/messages/batches/${id}`, key);
  if (status !== 200) throw new Error(`GET /v1/messages/batches/${id}: ${status} ${text.slice(0, 500)}`);
  return JSON.parse(text) as BatchView;
}

/** Polls the batch until `ended`; throws with the gateway's log tails when it does not end within `timeoutMs`. */
async function untilEnded(
  agent: Agent,
  gateway: Gateway,
  key: string,
  id: string,
  pollMs: number,
  timeoutMs: number,
  onPoll: (view: BatchView) => void,
): Promise<BatchView> {
  const until = performance.now() + timeoutMs;
  let last: BatchView | undefined;
  let lastLogged = 0;
  while (performance.now() < until) {
    const dead = Object.values(gateway.children).find((c) => c.exited);
    if (dead)
      throw new Error(
        `${dead.name} (pid ${dead.pid}) exited (code ${dead.proc.exitCode}, signal ${dead.proc.signalCode}) while the batch ran:\n${dead.tail.join('\n')}`,
      );
    last = await readBatch(agent, gateway.url, key, id);
    onPoll(last);
    if (last.processing_status === 'ended') return last;
    if (performance.now() - lastLogged > 10_000) {
      lastLogged = performance.now();
      log(`batches: ${JSON.stringify(last.request_counts)}`);
    }
    await sleep(pollMs);
  }
  const tails = Object.values(gateway.children)
    .map((c) => `--- ${c.name} ---\n${c.tail.join('\n')}`)
    .join('\n');
  throw new Error(
    `the batch ${id} did not end within ${Math.round(timeoutMs / 1000)} s; last seen ${JSON.stringify(last)}\n${tails}`,
  );
}

async function waitIdle(fake: Fake): Promise<void> {
  await waitUntil(
    'an idle fake vendor',
    async () => (await fakeControl(fake, 'GET', '/__stats')).openai!.inFlight === 0,
    60_000,
  );
  await sleep(500);
}

export async function runBatches(options: {
  settings: BatchesSettings;
  redis: Redis;
  redisUrl: string;
}): Promise<BatchesResults> {
  const { settings, redis, redisUrl } = options;
  const { cap, vendorMs } = settings;
  let fake: Fake | undefined;
  let gateway: Gateway | undefined;
  const agent = new Agent({ keepAliveTimeout: 60_000, headersTimeout: 600_000, bodyTimeout: 600_000 });
  try {
    fake = await startFake({ latencyMs: vendorMs, cap });
    log(`batches: fake OpenAI (${vendorMs} ms, 429 beyond ${cap}), pid ${fake.child.pid}`);
    await redis.flushdb();
    await resetRecordFor(redisUrl);
    const keyStore = new KeyStore(redis, await testRecord(redis));
    const keyOf = async (name: string) => {
      const account = await keyStore.accounts.create({
        email: `bench-batches-${name.toLowerCase()}@example.com`,
        name: `bench batches ${name}`,
      });
      await keyStore.accounts.credit(account.id, 10 ** 12, 'bench');
      return (
        await keyStore.create(`bench-batches-${name}`, {
          accountId: account.id,
          limitMicros: 10 ** 12,
          rpm: 10 ** 8,
          tpm: 10 ** 9,
        })
      ).key;
    };
    const keyA = await keyOf('A');
    const keyB = await keyOf('B');
    const env: Record<string, string> = { OPENAI_MAX_CONCURRENCY: String(cap) };
    if (settings.requests > 10_000) env.BATCH_MAX_REQUESTS = String(settings.requests);
    // The vendor's pace (VENDOR_PACE_PERCENT, 85 by default) as the run asks: how much call spreading costs the batch.
    if (process.env.BENCH_BATCH_PACE !== undefined) env.VENDOR_PACE_PERCENT = process.env.BENCH_BATCH_PACE;
    gateway = await startGateway('split', fake.url, redisUrl, process.env.BENCH_CPU_PROF || undefined, {
      env,
      logTag: 'batches',
      workers: settings.workers,
    });
    await probe(gateway.url, keyB, Object.values(gateway.children));
    const pids = { ...gateway.pids };
    log(
      `batches: gateway ready: ${Object.entries(pids)
        .map(([n, pid]) => `${n} ${pid}`)
        .join(', ')}`,
    );
    const url = gateway.url;
    const chatJson = JSON.stringify({ ...plainBody, service_tier: 'default' });
    const fireB = () => interactive(agent, url, keyB, chatJson);

    // Warm-up: both keys, the chat path, and the batch path (a small batch to its end and its results).
    const warm = [
      ...(await loops(settings.concurrency, (n) => n < 20, fireB)),
      ...(await loops(
        settings.concurrency,
        (n) => n < 20,
        () => interactive(agent, url, keyA, chatJson),
      )),
    ];
    const warmFailed = warm.filter((d) => !d.ok);
    if (warmFailed.length > 0)
      throw new Error(`warm-up: ${warmFailed.length} of ${warm.length} failed, e.g. ${warmFailed[0]!.failure}`);
    const warmBatch = await postBatch(agent, url, keyA, batchBody(Math.min(100, settings.requests), 'warm'));
    await untilEnded(agent, gateway, keyA, warmBatch.id, 100, 60_000, () => undefined);
    const warmResults = await getJson(agent, `${url}/v1/messages/batches/${warmBatch.id}/results`, keyA);
    if (warmResults.status !== 200)
      throw new Error(`warm-up batch results: ${warmResults.status} ${warmResults.text.slice(0, 300)}`);
    await waitIdle(fake);

    const quiet = await waitForQuiet({ maxWaitMs: settings.quietWaitMs });
    log(
      `batches: B alone, ${settings.interactive} default-tier requests ${settings.concurrency} at a time${quiet.busyPct === null ? '' : ` (machine ${Math.round(quiet.busyPct)} % of a core before)`}`,
    );
    const alone = stats(await loops(settings.concurrency, (n) => n < settings.interactive, fireB));
    await waitIdle(fake);
    await fakeControl(fake, 'POST', '/__reset');

    const body = batchBody(settings.requests, 'req');
    const rssSampler = new RssSampler(pids, 250);
    const rssBefore = rssSampler.snapshot();
    const redisBefore = await redisUsedMemory(redis);
    let redisPeak = redisBefore;
    let sampling = true;
    const redisSampling = (async () => {
      while (sampling) {
        const bytes = await redisUsedMemory(redis).catch(() => Number.NaN);
        if (bytes > redisPeak) redisPeak = bytes;
        await sleep(250);
      }
    })();
    rssSampler.start();
    const redisPid = await redisProcessId(redis);
    const cpu = cpuWindow({
      ...pids,
      fake: fake.child.pid,
      ...(redisPid ? { redis: redisPid } : {}),
      bench: process.pid,
    });

    log(
      `batches: A posts ${settings.requests.toLocaleString('en-US')} requests (${(body.length / 1024 / 1024).toFixed(2)} MiB); B keeps ${settings.concurrency} requests going meanwhile`,
    );
    const t0 = performance.now();
    const wall0 = Date.now();
    let accepting = true;
    const acceptLoad = loops(settings.concurrency, () => accepting, fireB);
    let posted: BatchView;
    try {
      posted = await postBatch(agent, url, keyA, body);
    } finally {
      accepting = false;
    }
    const acceptMs = performance.now() - t0;
    const redisAfterAccept = await redisUsedMemory(redis);
    log(
      `batches: accepted in ${Math.round(acceptMs)} ms (${posted.id}, ${JSON.stringify(posted.request_counts)}); ` +
        `B sends ${settings.interactive} more, ${settings.concurrency} at a time`,
    );
    const duringAcceptDone = await acceptLoad;

    let ended = false;
    const batchLoad = loops(settings.concurrency, (n) => n < settings.interactive && !ended, fireB);
    const capacityMs = (settings.requests * vendorMs) / cap;
    let seenEndedAt = Number.NaN;
    const final = await untilEnded(
      agent,
      gateway,
      keyA,
      posted.id,
      settings.pollMs,
      Math.max(120_000, capacityMs * 5),
      (view) => {
        if (view.processing_status === 'ended' && Number.isNaN(seenEndedAt)) seenEndedAt = performance.now() - t0;
      },
    );
    ended = true;
    const cpuMs = cpu();
    const windowMs = performance.now() - t0;
    const duringBatchDone = await batchLoad;
    const rssPeak = rssSampler.stop();
    sampling = false;
    await redisSampling;
    const vendorStats = (await fakeControl(fake, 'GET', '/__stats')).openai!;
    const finishMs = Date.parse(final.ended_at ?? '') - wall0;
    log(
      `batches: ended ${(finishMs / 1000).toFixed(2)} s after the POST (capacity ` +
        `${(capacityMs / 1000).toFixed(1)} s): ${JSON.stringify(final.request_counts)}`,
    );

    // B's vendor calls while the batch ran: answered between the POST's send and the batch's end.
    const endAt = t0 + finishMs;
    const interactiveCalls = [...duringAcceptDone, ...duringBatchDone].filter((d) => d.ok && d.at <= endAt).length;

    const readStarted = performance.now();
    const resultsAnswer = await request(`${url}/v1/messages/batches/${posted.id}/results`, {
      method: 'GET',
      dispatcher: agent,
      headers: headers(keyA),
    });
    const resultsText = await resultsAnswer.body.text();
    const readMs = performance.now() - readStarted;
    if (resultsAnswer.statusCode !== 200)
      throw new Error(`GET …/results: ${resultsAnswer.statusCode} ${resultsText.slice(0, 500)}`);
    const byType: Record<string, number> = {};
    const ids = new Set<string>();
    let lines = 0;
    let unparsable = 0;
    for (const line of resultsText.split('\n')) {
      if (line.trim() === '') continue;
      lines += 1;
      try {
        const parsed = JSON.parse(line) as {
          custom_id?: string;
          result?: { type?: string; message?: { content?: Array<{ text?: string }> } };
        };
        let type = parsed.result?.type ?? '(none)';
        if (type === 'succeeded' && parsed.result?.message?.content?.[0]?.text !== FAKE_REPLY_TEXT)
          type = 'succeeded, not the fake reply';
        byType[type] = (byType[type] ?? 0) + 1;
        if (parsed.custom_id) ids.add(parsed.custom_id);
      } catch {
        unparsable += 1;
      }
    }
    await sleep(1000);
    const rssAfter = rssSampler.snapshot();
    const redisAfterEnd = await redisUsedMemory(redis);
    const rss: BatchesResults['rss'] = {};
    for (const name of Object.keys(pids))
      rss[name] = { before: rssBefore[name] ?? null, peak: rssPeak[name] ?? null, after: rssAfter[name] ?? null };
    const warnings = Object.fromEntries(
      Object.entries(gateway.children).map(([name, child]) => [name, child.warnings]),
    );

    const r: BatchesResults = {
      settings,
      processes: { ...pids, fake: fake.child.pid },
      quietBefore: { quiet: quiet.quiet, busyPct: quiet.busyPct },
      bodyBytes: Buffer.byteLength(body),
      batchId: posted.id,
      alone,
      duringAccept: stats(duringAcceptDone),
      duringBatch: stats(duringBatchDone),
      interactiveDoneMs: duringBatchDone.length ? Math.max(...duringBatchDone.map((d) => d.at)) - t0 : Number.NaN,
      acceptMs,
      countsAtAccept: posted.request_counts,
      finishMs,
      finishSeenMs: seenEndedAt,
      capacityMs,
      capacityWithInteractiveMs: ((settings.requests + interactiveCalls) * vendorMs) / cap,
      interactiveCallsDuringBatch: interactiveCalls,
      finalCounts: final.request_counts,
      rss,
      redis: {
        beforeBytes: redisBefore,
        afterAcceptBytes: redisAfterAccept,
        peakBytes: redisPeak,
        afterEndBytes: redisAfterEnd,
        perQueuedRequestBytes: (redisAfterAccept - redisBefore) / settings.requests,
        perResultBytes: (redisAfterEnd - redisBefore) / settings.requests,
      },
      vendor: {
        calls: vendorStats.requests,
        maxInFlight: vendorStats.maxInFlight,
        overCap: vendorStats.overCap ?? 0,
        slotUse: vendorStats.slotUse ?? null,
      },
      cpuPct: Object.fromEntries(
        Object.entries(cpuMs).map(([name, v]) => [name, v === null ? null : (v / windowMs) * 100]),
      ),
      results: {
        lines,
        byType,
        distinctCustomIds: ids.size,
        unparsable,
        readMs,
        bytes: Buffer.byteLength(resultsText),
      },
      warnings,
      bars: [],
    };
    r.bars = batchesBars(r);
    return r;
  } finally {
    await agent.close().catch(() => undefined);
    if (gateway) await stopGateway(gateway);
    await fake?.child.stop();
  }
}

function batchesBars(r: BatchesResults): Bar[] {
  const s = r.settings;
  const bars: Bar[] = [];
  const ratio = r.finishMs / r.capacityMs;
  bars.push({
    name: `batch of ${s.requests.toLocaleString('en-US')}: finish ÷ the vendor's capacity time`,
    target: `≤ 1.05 × ${(r.capacityMs / 1000).toFixed(1)} s`,
    actual:
      `${(r.finishMs / 1000).toFixed(2)} s (${ratio.toFixed(3)}×; ` +
      `${(r.finishMs / r.capacityWithInteractiveMs).toFixed(3)}× with B's ${r.interactiveCallsDuringBatch} calls)`,
    pass: ratio <= 1.05,
  });
  const aloneP95 = r.alone.latency.p95;
  const duringP95 = r.duringBatch.latency.p95;
  bars.push({
    name: "B's default-tier p95 during the batch",
    target: `≤ alone + 100 ms (${Math.round(aloneP95 + 100)} ms)`,
    actual: `${Math.round(duringP95)} ms (${duringP95 - aloneP95 >= 0 ? '+' : ''}${Math.round(duringP95 - aloneP95)} ms)`,
    pass: duringP95 <= aloneP95 + 100 && r.duringBatch.failed === 0,
  });
  const acceptP95 = r.duringAccept.latency.p95;
  bars.push({
    name: "B's p95 while the batch is accepted",
    target: `≤ alone + 100 ms (${Math.round(aloneP95 + 100)} ms)`,
    actual: Number.isNaN(acceptP95) ? '-' : `${Math.round(acceptP95)} ms (${r.duringAccept.ok} answered)`,
    pass: !(acceptP95 > aloneP95 + 100) && r.duringAccept.failed === 0,
    informational: true,
  });
  const succeeded = r.results.byType.succeeded ?? 0;
  bars.push({
    name: 'every result succeeded, once per custom_id',
    target: `${s.requests.toLocaleString('en-US')} succeeded`,
    actual: `${succeeded.toLocaleString('en-US')} succeeded of ${r.results.lines.toLocaleString('en-US')} lines, ${r.results.distinctCustomIds.toLocaleString('en-US')} ids`,
    pass:
      succeeded === s.requests &&
      r.results.lines === s.requests &&
      r.results.distinctCustomIds === s.requests &&
      r.results.unparsable === 0,
  });
  const failed = r.alone.failed + r.duringAccept.failed + r.duringBatch.failed;
  bars.push({
    name: 'vendor cap kept, no interactive failure',
    target: `vendor ≤ ${s.cap}, 0 × 429, 0 failed`,
    actual: `vendor max ${r.vendor.maxInFlight}, ${r.vendor.overCap} × 429, ${failed} failed`,
    pass: r.vendor.maxInFlight <= s.cap && r.vendor.overCap === 0 && failed === 0,
  });
  return bars;
}

export const mib = (bytes: number | null | undefined) =>
  bytes == null || Number.isNaN(bytes) ? '-' : (bytes / 1024 / 1024).toFixed(1);
export const ms0 = (v: number) => (Number.isNaN(v) ? '-' : Math.round(v).toLocaleString('en-US'));
const codes = (s: InteractiveStats) =>
  Object.entries(s.statusCodes)
    .map(([c, k]) => `${c}×${k}`)
    .join(' ');
export const result = (b: Bar) => (b.informational ? `(${b.pass ? 'PASS' : 'FAIL'})` : b.pass ? 'PASS' : 'FAIL');

export function renderBatches(r: BatchesResults): string {
  const s = r.settings;
  const out: string[] = [];
  out.push(
    `Message Batches: a fake OpenAI answering in ${s.vendorMs} ms, 429 beyond ${s.cap} in flight; a split gateway (api + ${s.workers} worker${s.workers === 1 ? '' : 's'}) with OPENAI_MAX_CONCURRENCY=${s.cap}. ` +
      `A posts one batch of ${s.requests.toLocaleString('en-US')} /v1/messages requests on ${model} (${mib(r.bodyBytes)} MiB, ${r.batchId}); ` +
      (`B sends default-tier chat completions on the same model, ${s.concurrency} at a time: ${s.interactive} ` +
        `alone, loops while the POST is under way, then ${s.interactive} from its answer.`),
  );
  out.push(
    table(
      ['phase', 'B sent', 'ok', 'p50 ms', 'p95 ms', 'p99 ms', 'max ms', 'p95 − alone', 'status'],
      (
        [
          ['alone', r.alone],
          ['while accepted', r.duringAccept],
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
        name === 'alone' || Number.isNaN(x.latency.p95)
          ? ''
          : `${x.latency.p95 - r.alone.latency.p95 >= 0 ? '+' : ''}${ms0(x.latency.p95 - r.alone.latency.p95)}`,
        codes(x),
      ]),
    ),
  );
  out.push('');
  out.push(
    table(
      ['batch', 'value'],
      [
        [
          'time to accept (POST sent → answered)',
          `${ms0(r.acceptMs)} ms (${r.countsAtAccept.succeeded ?? 0} already succeeded)`,
        ],
        [
          'time to finish (ended_at − POST sent)',
          `${(r.finishMs / 1000).toFixed(2)} s (poll saw it at ${(r.finishSeenMs / 1000).toFixed(2)} s)`,
        ],
        [
          `vendor's capacity time (${s.requests} × ${s.vendorMs} ms ÷ ${s.cap})`,
          `${(r.capacityMs / 1000).toFixed(2)} s → ${(r.finishMs / r.capacityMs).toFixed(3)}×`,
        ],
        [
          `with B's ${r.interactiveCallsDuringBatch} calls meanwhile`,
          `${(r.capacityWithInteractiveMs / 1000).toFixed(2)} s → ` +
            `${(r.finishMs / r.capacityWithInteractiveMs).toFixed(3)}×`,
        ],
        ["B's during-batch load done at", `${(r.interactiveDoneMs / 1000).toFixed(2)} s`],
        ['final request_counts', JSON.stringify(r.finalCounts)],
        [
          'results',
          `${r.results.lines} lines, ${Object.entries(r.results.byType)
            .map(([t, k]) => `${k} ${t}`)
            .join(
              ', ',
            )}, ${r.results.distinctCustomIds} ids, read in ${ms0(r.results.readMs)} ms (${mib(r.results.bytes)} MiB)`,
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
          'CPU, POST → end, % of a core',
          Object.entries(r.cpuPct)
            .map(([n, v]) => `${n} ${v === null ? '-' : Math.round(v)}`)
            .join(', '),
        ],
        ...Object.entries(r.rss).map(([name, x]) => [
          `${name} RSS MiB (before / peak / after)`,
          `${mib(x.before)} / ${mib(x.peak)} / ${mib(x.after)}`,
        ]),
        [
          'Redis used_memory MiB (before / after accept / peak / after end)',
          `${mib(r.redis.beforeBytes)} / ${mib(r.redis.afterAcceptBytes)} / ${mib(r.redis.peakBytes)} / ` +
            `${mib(r.redis.afterEndBytes)}`,
        ],
        [
          'Redis per queued request (after accept − before) ÷ requests',
          `${Math.round(r.redis.perQueuedRequestBytes)} B`,
        ],
        ['Redis per result kept (after end − before) ÷ requests', `${Math.round(r.redis.perResultBytes)} B`],
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
  out.push('Bars of the batches section (in parentheses: informational)');
  out.push(
    table(
      ['bar', 'target', 'actual', 'result'],
      r.bars.map((b) => [b.name, b.target, b.actual, result(b)]),
    ),
  );
  return out.join('\n');
}
