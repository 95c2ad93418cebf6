/**
 * `npm run bench`: what the gateway costs on top of a vendor, and how it schedules, in eleven sections.
 *
 *   overhead     the gateway side by side with a direct call to a zero-latency fake
 *                OpenAI upstream and with the floor, a bare BullMQ loop
 *                (bench/floor-process.ts): every target started up front, each cell
 *                ({non-stream, stream} × {1, 64 connections}, time to first token)
 *                measured in alternated rounds, ratios and bars within the run; then
 *                RSS and Redis memory of `start` over a soak (bench/overhead.ts)
 *   burst        bursts of 10× and 50× a vendor concurrency cap through the gateway
 *                against a fake with a fixed latency (bench/burst.ts)
 *   translation  cost per streamed chunk of the OpenAI, Anthropic and Gemini
 *                adapters, in process and end to end (bench/translation.ts)
 *   scheduler    the queue as a scheduler against fakes that take real time, each scenario on a
 *                fresh default `start` (bench/scheduler.ts): latency (1 s vendor; direct, the
 *                gateway and Portkey at 500 and 2,000 connections, RSS per 1,000 in flight),
 *                noisy neighbour (a flood on a capped vendor; a quiet account on it and one on
 *                another vendor), shares (two floods, 6 keys against 1; then weights 3:1) and
 *                tiers (flex and default floods; priority requests meanwhile). Also writes
 *                bench/results/latest-scheduler.json in a run of several sections
 *   streams      streams as real traffic sends them (bench/paced-streams.ts): a fake pacing 300
 *                tokens 20 ms apart, waves of 200 and 1,000 streams opened at once, direct and
 *                through a default `start`: time to first token, gaps between tokens, the wave's
 *                time, broken streams, CPU per 1,000 tokens and RSS peak by process, Redis
 *                commands per token. Also writes bench/results/latest-streams.json in a run of
 *                several sections
 *   cache        the response cache (bench/cache.ts): at 1 connection a hit, a miss (a new body
 *                each request, Cache-Control: max-age=600), the plain path, the floor and Portkey
 *                against a direct call to a zero-latency fake; hits at 64 connections against the
 *                floor, the plain path and Portkey (its open-source build has no cache); 200
 *                identical requests at once, plain and streamed, against 200 different ones on a
 *                fake answering in 1 s (vendor calls, time to answer and to first token,
 *                Cache-Status counts); Redis commands per request of a miss against a plain request.
 *                Also writes bench/results/latest-cache.json in a run of several sections
 *   batches      Message Batches (bench/batches.ts): one batch of 10,000 /v1/messages requests against a fake
 *                capped at 50 in flight answering in 200 ms, through a split gateway: time to accept, time to
 *                finish against the vendor's capacity time, api and worker RSS, Redis memory per queued
 *                request, every result line checked; another account's default-tier requests alone and during
 *                the batch (p50/p95). Also writes bench/results/latest-batches.json in a run of several sections
 *   openai-batches  OpenAI's Batch API (bench/openai-batches.ts): a 50,000-line /v1/embeddings file (about 60 MB)
 *                uploaded to /v1/files and run with /v1/batches against a fake capped at 50 answering in 200 ms:
 *                upload and validation times with the api's RSS peak and longest event-loop turn, finish against
 *                the vendor's capacity time, Redis bytes per waiting request, the output file checked line by line;
 *                another account's embeddings alone and during the batch (p50/p95)
 *   speech       POST /v1/audio/speech (bench/speech.ts): time to the first byte of audio and to the last through
 *                the gateway (npm start, mock-speech) against the same mock speech served directly by a process of
 *                its own, at 1 and 64 connections, every answer checked byte for byte
 *   realtime     the Realtime API (bench/realtime.ts): 50 sessions each appending 20 ms pcm16 frames 50 times a
 *                second and asking for a response every second, against a vendor that echoes each frame: the
 *                latency added each way (p50, p99) over the vendor directly, CPU per 1,000 frames, api and worker
 *                RSS per session; then sessions added until the added p99 passes 50 ms; Portkey's route beside it
 *   mcp          tools through /mcp (bench/mcp.ts): 200 calls of a 1 s tool from one account against a server capped
 *                at 20, another account's call a second in (every call answered once, the cap never passed, what
 *                the other call waited); a fast tool's added latency over calling the upstream directly
 *   prompt-cache four channels of one vendor whose prompt cache is per key, 200 agents sharing five long system
 *                prompts (bench/prompt-cache.ts): the share of prompt tokens read from cache with affinity and without
 *
 * `npm run bench -- --topology` runs only the topology section instead (bench/topology.ts):
 * the floor, 1 api + 1 worker and 2 apis + 2 workers on one Redis, then 1 api + 1 worker on a
 * private 3-primary Redis Cluster with QUEUE_SHARDS_CHAT=1, 2, 3; plain chat, req/s, CPU per
 * request of every process and of each Redis node. Writes bench/results/latest-topology.json
 * and bench/results/topology-<date>.md (the markdown report it prints).
 *
 * Prints tables; a full run writes bench/results/latest.json, a BENCH_ONLY run
 * bench/results/latest-<sections>.json (so a quick run does not replace the full figures).
 *
 * Environment:
 *   BENCH_ONLY            comma-separated sections to run (default: all eleven)
 *   BENCH_CONFIGS         gateway targets of overhead: start (node dist/bin/start.js as is),
 *                         unlimited (start with the Default account's key, made by POST /admin/keys with no
 *                         account: unlimited, no limits; start's is a credited, limited key), log-off (start with
 *                         REQUEST_LOG=off: the request log's cost, side by side), one-loop (WORKER_PROCESS=off), split
 *                         (--role=api + --role=worker); default start,log-off,one-loop,split (all = one-loop); direct
 *                         and floor always run. Burst runs its one-process configuration if any of start, one-loop,
 *                         all is listed, and split if split is
 *   BENCH_ROUNDS          overhead: rounds per cell; each round measures every target once,
 *                         the order rotated by one each round (default 3)
 *   BENCH_DURATION_S      overhead: measured seconds per target per round (default 5)
 *   BENCH_WARMUP_S        overhead: warm-up seconds before each measurement (default 1)
 *   BENCH_TTFT_REQUESTS   overhead: measured sequential stream requests per target per round,
 *                         after 10 unmeasured (default 100)
 *   BENCH_KEY_ROUNDS      overhead: rounds of the Default account's key beside a credited account's limited key on
 *                         start's one gateway, non-stream at 64 connections, the order alternated (default 4; 0 skips)
 *   BENCH_SOAK_S          overhead: soak of `start` at 64 connections, then 30 s idle; 0 skips it (default 300)
 *   BENCH_CPU_PROF        overhead: a directory; gateway processes run with --cpu-prof into it
 *   BENCH_BURST_CAP       burst: OPENAI_MAX_CONCURRENCY and the fake's 429 threshold (default 4)
 *   BENCH_BURST_LATENCY_MS burst: the fake's latency per answer (default 100)
 *   BENCH_BURST_SIZES     burst: requests per burst (default 40,200)
 *   BENCH_BURST_WORKERS   burst: worker processes in the split configuration (default 2)
 *   BENCH_STREAM_CHUNKS   translation: text deltas per stream (default 2000)
 *   BENCH_TRANSLATION_RUNS translation: measured in-process rounds (default 21, after 5 warm-up)
 *   BENCH_TRANSLATION_REQUESTS translation: measured end-to-end streams per protocol and target (default 20, after 3
 *   warm-up) BENCH_SCHED_SCENARIOS scheduler: which scenarios (default latency,noisy,shares,tiers)
 *   BENCH_SCHED_LATENCY_MS scheduler/latency: the fake's answer time (default 1000)
 *   BENCH_SCHED_CONNECTIONS scheduler/latency: connections per cell; the gateway is held to 0.9× direct at
 *                         the first and 1.2× Portkey at the last (default 500,2000)
 *   BENCH_SCHED_DURATION_S scheduler/latency: measured seconds per cell (default 20)
 *   BENCH_SCHED_WARMUP_S  scheduler/latency: warm-up seconds before each (default 5)
 *   BENCH_SCHED_CAP       scheduler: OPENAI_MAX_CONCURRENCY and the fake's 429 threshold (default 20)
 *   BENCH_SCHED_VENDOR_MS scheduler: the capped fakes' answer time (default 200)
 *   BENCH_SCHED_RATE      scheduler: requests a second of each trickling account (default 4)
 *   BENCH_SCHED_ALONE_S   scheduler: how long the trickling accounts send alone (default 10)
 *   BENCH_SCHED_NOISY_FLOOD scheduler/noisy: account A's flood (default 1200)
 *   BENCH_SCHED_SHARE_FLOOD scheduler/shares: each account's flood (default 500)
 *   BENCH_SCHED_TIER_FLOOD scheduler/tiers: the flex flood and the default flood (default 500 each)
 *   BENCH_STREAMS_WAVES   streams: streams opened at once, one wave each, direct then gateway (default 200,1000);
 *                         the bars count at the largest wave
 *   BENCH_STREAMS_TOKENS  streams: text deltas per stream (default 300)
 *   BENCH_STREAMS_PACE_MS streams: the fake's pause between two deltas of a stream (default 20)
 *   BENCH_STREAMS_WARMUP  streams: streams of an unmeasured warm-up wave per target (default 20; 0: none)
 *   BENCH_CACHE_REQUESTS  cache: measured sequential requests per target at 1 connection (default 2000, after 100
 *   unmeasured) BENCH_CACHE_ROUNDS    cache: rounds those are spread over, the order of the targets rotated each round
 *   (default 4) BENCH_CACHE_DURATION_S cache: measured seconds per target at 64 connections (default 5, after 1 s
 *   warm-up) BENCH_CACHE_BURST     cache: requests at once per coalescing sitting (default 200)
 *   BENCH_CACHE_LATENCY_MS cache: the coalescing fake's answer time (default 1000)
 *   BENCH_CACHE_PACE_TOKENS cache: the coalescing fake's stream deltas after that time (default 50)
 *   BENCH_CACHE_PACE_MS   cache: one delta every this many ms (default 20)
 *   BENCH_BATCH_REQUESTS  batches: requests in the batch (default 10000; over 10,000 raises BATCH_MAX_REQUESTS to
 *   match) BENCH_BATCH_CAP       batches: OPENAI_MAX_CONCURRENCY and the fake's 429 threshold (default 50)
 *   BENCH_BATCH_VENDOR_MS batches: the fake's answer time (default 200)
 *   BENCH_BATCH_INTERACTIVE batches: the other account's requests alone, and again during the batch (default 100)
 *   BENCH_BATCH_CONCURRENCY batches: its requests in flight at once (default 4)
 *   BENCH_BATCH_POLL_MS   batches: between two polls of the batch (default 250)
 *   BENCH_BATCH_PACE      batches: VENDOR_PACE_PERCENT of the gateway under test (default: the gateway's, 85)
 *   BENCH_BATCH_WORKERS   batches: worker processes of the split gateway (default 1)
 *   BENCH_SPEECH_CONNECTIONS speech: connection counts measured (default 1,64)
 *   BENCH_SPEECH_REQUESTS speech: measured requests per connection count (default 256, at least one per connection)
 *   BENCH_SPEECH_WARMUP   speech: unmeasured requests per connection first (default 2)
 *   BENCH_SPEECH_DELAY_MS speech: the mock's pause between chunks, directly and in the gateway (default 20)
 *   BENCH_SPEECH_FORMAT   speech: mp3, wav or pcm (default mp3)
 *   BENCH_RT_SESSIONS     realtime: sessions of the main measurement (default 50)
 *   BENCH_RT_DURATION_S   realtime: measured seconds per target (default 10, after BENCH_RT_WARMUP_S, default 3)
 *   BENCH_RT_STEPS        realtime: session counts tried for the capacity, in order (default
 *   50,100,150,200,300,400,600) BENCH_RT_STEP_S       realtime: measured seconds per capacity step and target (default
 *   5) BENCH_RT_LIMIT_MS     realtime: added p99 (either way) under which a step counts as held (default 50)
 *   BENCH_RT_PORTKEY      realtime: 0 leaves Portkey out (default: measured)
 *   BENCH_QUIET_WAIT_S    burst, translation, streams, cache, batches: before each measurement (cache: each part), wait
 *   up to this
 *                         long for a second in which the machine uses < 25 % of a core (default 10; 0: do not check)
 *   BENCH_REDIS_URL       Redis database to use; it is FLUSHDB'd (default: database 15 of a private
 *                         redis-server this run starts and stops, like the tests'). The overhead
 *                         section also uses (and FLUSHDBs) the databases just below it, one per
 *                         target with a queue (14, 13, 12, 11 for floor, start, one-loop, split); the cache
 *                         section 14, 13, 12 (floor, its gateway, the coalescing gateway)
 *   BENCH_STRICT          1: exit with status 1 when a target bar fails (informational bars do not count)
 *   BENCH_TOPOLOGY_DURATION_S   --topology: measured seconds per cell and round (default 8)
 *   BENCH_TOPOLOGY_WARMUP_S     --topology: warm-up seconds before each measurement (default 2)
 *   BENCH_TOPOLOGY_ROUNDS       --topology: rounds; one-Redis targets rotate each round, the Cluster
 *                               gateway is restarted for each shard count each round (default 1)
 *   BENCH_TOPOLOGY_CONNECTIONS  --topology: connections of the one-Redis cells (default 64,256)
 *   BENCH_TOPOLOGY_CLUSTER_CONNECTIONS --topology: connections of the Cluster cells (default 64,256; 0 skips the
 *   Cluster) BENCH_TOPOLOGY_SHARDS       --topology: QUEUE_SHARDS_CHAT values on the Cluster (default 1,2,3)
 *   BENCH_TOPOLOGY_REPLICAS     --topology: replicas per Cluster primary (default 0: they would take
 *                               CPU from the measured processes on a small machine)
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { benchRedisUrl } from '../test/support/redis-server.js';
import { runBurst } from './burst.js';
import { batchesSettings, renderBatches, runBatches, type BatchesResults } from './batches.js';
import { cacheSettings, renderCache, runCache, type CacheResults } from './cache.js';
import { envInt, machineFacts, redisVersion } from './measure.js';
import { runOverhead, type OverheadConfig } from './overhead.js';
import { runScheduler, schedulerSettings } from './scheduler.js';
import { installCleanup, root, stopAll } from './procs.js';
import { renderStreams, runPacedStreams, type StreamsResults, type StreamsSettings } from './paced-streams.js';
import { render, type Results, type Section } from './report.js';
import { log } from './stack.js';
import { runTopologySection } from './topology.js';
import { runTranslation } from './translation.js';
import { renderSpeech, runSpeechBench, speechSettings, type SpeechResults } from './speech.js';
import { mcpSettings, renderMcp, runMcpBench, type McpResults } from './mcp.js';
import { promptCacheTable, runPromptCacheBench, type PromptCacheResults } from './prompt-cache.js';
import { realtimeSettings, renderRealtime, runRealtimeBench, type RealtimeResults } from './realtime.js';
import {
  openAIBatchSettings,
  renderOpenAIBatches,
  runOpenAIBatches,
  type OpenAIBatchResults,
} from './openai-batches.js';

function envList(name: string, fallback: string): string[] {
  return (process.env[name] || fallback)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

/**
 * The sections of this run: report.ts's, streams (rendered by bench/paced-streams.ts), cache (bench/cache.ts), batches
 * (bench/batches.ts) and speech (bench/speech.ts).
 */
type RunSection =
  Section | 'streams' | 'cache' | 'batches' | 'openai-batches' | 'speech' | 'realtime' | 'mcp' | 'prompt-cache';
/** A run's results: report.ts's, with the streams, cache, batches and speech sections beside them. */
type RunResults = Omit<Results, 'sections'> & {
  sections: RunSection[];
  streams?: StreamsResults;
  cache?: CacheResults;
  batches?: BatchesResults;
  'openai-batches'?: OpenAIBatchResults;
  speech?: SpeechResults;
  realtime?: RealtimeResults;
  mcp?: McpResults;
  'prompt-cache'?: PromptCacheResults;
};

const allSections: RunSection[] = [
  'overhead',
  'burst',
  'translation',
  'scheduler',
  'streams',
  'cache',
  'batches',
  'openai-batches',
  'speech',
  'realtime',
  'mcp',
  'prompt-cache',
];
const onlyList = envList('BENCH_ONLY', allSections.join(','));
for (const name of onlyList) {
  if (!allSections.includes(name as RunSection))
    throw new Error(`BENCH_ONLY: unknown section "${name}" (${allSections.join(', ')})`);
}
const sections = allSections.filter((s) => onlyList.includes(s));
const fullRun = sections.length === allSections.length;
// `npm run bench -- --topology`: the topology section alone (bench/topology.ts).
const topologyOnly = process.argv.slice(2).includes('--topology');

const configNames = envList('BENCH_CONFIGS', 'start,log-off,one-loop,split');
for (const name of configNames) {
  if (!['start', 'unlimited', 'log-off', 'one-loop', 'all', 'split'].includes(name))
    throw new Error(
      `BENCH_CONFIGS: unknown configuration "${name}" (start, unlimited, log-off, one-loop, split; all = one-loop)`,
    );
}
const overheadConfigs = [...new Set(configNames.map((n) => (n === 'all' ? 'one-loop' : n)))] as OverheadConfig[];
// Burst knows one process (`all`) and split.
const burstConfigs = (['all', 'split'] as const).filter((c) =>
  c === 'split' ? configNames.includes('split') : configNames.some((n) => n !== 'split'),
);

const overheadOptions = {
  rounds: envInt('BENCH_ROUNDS', 3, 1),
  durationS: envInt('BENCH_DURATION_S', 5, 1),
  warmupS: envInt('BENCH_WARMUP_S', 1, 0),
  soakS: envInt('BENCH_SOAK_S', 300, 0),
  ttftRequests: envInt('BENCH_TTFT_REQUESTS', 100, 1),
  ttftWarmup: 10,
  keyRounds: envInt('BENCH_KEY_ROUNDS', 4, 0),
  configNames: overheadConfigs,
  ...(process.env.BENCH_CPU_PROF ? { cpuProfDir: process.env.BENCH_CPU_PROF } : {}),
};
const quietWaitMs = envInt('BENCH_QUIET_WAIT_S', 10, 0) * 1000;
const burstSettings = {
  cap: envInt('BENCH_BURST_CAP', 4, 1),
  latencyMs: envInt('BENCH_BURST_LATENCY_MS', 100, 1),
  sizes: envList('BENCH_BURST_SIZES', '40,200').map((s) => {
    const n = Number(s);
    if (!Number.isInteger(n) || n < 1 || n > 5000)
      throw new Error(`BENCH_BURST_SIZES: "${s}" is not an integer in 1..5000`);
    return n;
  }),
  configs: burstConfigs,
  splitWorkers: envInt('BENCH_BURST_WORKERS', 2, 1),
  quietWaitMs,
};
const schedSettings = schedulerSettings();
const streamsSettings: StreamsSettings = {
  waves: envList('BENCH_STREAMS_WAVES', '200,1000').map((s) => {
    const n = Number(s);
    if (!Number.isInteger(n) || n < 1 || n > 10_000)
      throw new Error(`BENCH_STREAMS_WAVES: "${s}" is not an integer in 1..10000`);
    return n;
  }),
  tokens: envInt('BENCH_STREAMS_TOKENS', 300, 1),
  paceMs: envInt('BENCH_STREAMS_PACE_MS', 20, 0),
  warmupStreams: envInt('BENCH_STREAMS_WARMUP', 20, 0),
  quietWaitMs,
};
const cacheRunSettings = cacheSettings(quietWaitMs);
const batchesRunSettings = batchesSettings(quietWaitMs);
const openAIBatchRunSettings = openAIBatchSettings(quietWaitMs);
const speechRunSettings = speechSettings(process.env, quietWaitMs);
const realtimeRunSettings = realtimeSettings(process.env, quietWaitMs);
const translationSettings = {
  chunks: envInt('BENCH_STREAM_CHUNKS', 2000, 1),
  microRuns: envInt('BENCH_TRANSLATION_RUNS', 21, 1),
  microWarmupRuns: 5,
  e2eRequests: envInt('BENCH_TRANSLATION_REQUESTS', 20, 1),
  e2eWarmup: 3,
  quietWaitMs,
};

function runMachineFacts(redisVersionText: string) {
  let autocannonVersion = 'unknown';
  try {
    autocannonVersion = (
      JSON.parse(readFileSync(join(root, 'node_modules/autocannon/package.json'), 'utf8')) as { version: string }
    ).version;
  } catch {
    // reported as unknown
  }
  return { ...machineFacts(redisVersionText), autocannon: autocannonVersion, loadAverageAtStart: loadavg() };
}

async function main(): Promise<void> {
  installCleanup();
  // Database 15 (the tests, when told to use a shared Redis, use 1–15 of it and FLUSHDB theirs).
  const redisUrl = await benchRedisUrl('BENCH_REDIS_URL', 15);
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 3 });
  const startedAt = new Date().toISOString();
  const machine = runMachineFacts(await redisVersion(redis));
  log(
    `machine: ${machine.cpu}, ${machine.cores} cores, Node ${machine.node}, Redis ${machine.redis}; sections: ${topologyOnly ? 'topology' : sections.join(', ')}`,
  );
  await redis.flushdb();

  try {
    if (topologyOnly) {
      await runTopologySection({ redis, redisUrl, machine, startedAt, loadAverageAtEnd: loadavg });
      return;
    }
    const overhead = sections.includes('overhead')
      ? await runOverhead({ ...overheadOptions, redis, redisUrl })
      : undefined;
    const burst = sections.includes('burst') ? await runBurst({ settings: burstSettings, redis, redisUrl }) : undefined;
    const translation = sections.includes('translation')
      ? await runTranslation({ settings: translationSettings, redis, redisUrl })
      : undefined;
    const scheduler = sections.includes('scheduler')
      ? await runScheduler({ settings: schedSettings, redis, redisUrl })
      : undefined;
    const streams = sections.includes('streams')
      ? await runPacedStreams({ settings: streamsSettings, redis, redisUrl })
      : undefined;
    const cache = sections.includes('cache')
      ? await runCache({ settings: cacheRunSettings, redis, redisUrl })
      : undefined;
    const batches = sections.includes('batches')
      ? await runBatches({ settings: batchesRunSettings, redis, redisUrl })
      : undefined;
    const openAIBatches = sections.includes('openai-batches')
      ? await runOpenAIBatches({ settings: openAIBatchRunSettings, redis, redisUrl })
      : undefined;
    const speech = sections.includes('speech')
      ? await runSpeechBench({ settings: speechRunSettings, redis, redisUrl })
      : undefined;
    const realtime = sections.includes('realtime')
      ? await runRealtimeBench({ settings: realtimeRunSettings, redis, redisUrl })
      : undefined;
    const mcp = sections.includes('mcp')
      ? await runMcpBench({ settings: mcpSettings(process.env), redis, redisUrl })
      : undefined;
    const promptCache = sections.includes('prompt-cache') ? await runPromptCacheBench(redisUrl, redis) : undefined;

    const bars = [
      ...(overhead?.bars ?? []),
      ...(burst?.configs ?? []).flatMap((c) => c.bars),
      ...(scheduler?.bars ?? []),
      ...(streams?.bars ?? []),
      ...(cache?.bars ?? []),
      ...(batches?.bars ?? []),
      ...(openAIBatches?.bars ?? []),
    ].filter((b) => !b.informational);
    const results: RunResults = {
      startedAt,
      finishedAt: new Date().toISOString(),
      machine: { ...machine, loadAverageAtEnd: loadavg() },
      sections,
      ...(overhead ? { overhead } : {}),
      ...(burst ? { burst } : {}),
      ...(translation ? { translation } : {}),
      ...(scheduler ? { scheduler } : {}),
      ...(streams ? { streams } : {}),
      ...(cache ? { cache } : {}),
      ...(batches ? { batches } : {}),
      ...(openAIBatches ? { 'openai-batches': openAIBatches } : {}),
      ...(speech ? { speech } : {}),
      ...(realtime ? { realtime } : {}),
      ...(mcp ? { mcp } : {}),
      ...(promptCache ? { 'prompt-cache': promptCache } : {}),
      passed: bars.every((b) => b.pass),
    };
    const outDir = join(root, 'bench', 'results');
    mkdirSync(outDir, { recursive: true });
    const file = fullRun ? 'latest.json' : `latest-${sections.join('-')}.json`;
    writeFileSync(join(outDir, file), `${JSON.stringify(results, null, 2)}\n`);
    if (scheduler && file !== 'latest-scheduler.json') {
      // The scheduler's figures also stand alone, as a BENCH_ONLY=scheduler run writes them.
      const passed = scheduler.bars.filter((b) => !b.informational).every((b) => b.pass);
      const alone: Results = {
        startedAt: results.startedAt,
        finishedAt: results.finishedAt,
        machine: results.machine,
        sections: ['scheduler'],
        scheduler,
        passed,
      };
      writeFileSync(join(outDir, 'latest-scheduler.json'), `${JSON.stringify(alone, null, 2)}\n`);
    }
    if (streams && file !== 'latest-streams.json') {
      const passed = streams.bars.filter((b) => !b.informational).every((b) => b.pass);
      const alone: RunResults = {
        startedAt: results.startedAt,
        finishedAt: results.finishedAt,
        machine: results.machine,
        sections: ['streams'],
        streams,
        passed,
      };
      writeFileSync(join(outDir, 'latest-streams.json'), `${JSON.stringify(alone, null, 2)}\n`);
    }
    if (cache && file !== 'latest-cache.json') {
      const passed = cache.bars.filter((b) => !b.informational).every((b) => b.pass);
      const alone: RunResults = {
        startedAt: results.startedAt,
        finishedAt: results.finishedAt,
        machine: results.machine,
        sections: ['cache'],
        cache,
        passed,
      };
      writeFileSync(join(outDir, 'latest-cache.json'), `${JSON.stringify(alone, null, 2)}\n`);
    }
    if (batches && file !== 'latest-batches.json') {
      const passed = batches.bars.filter((b) => !b.informational).every((b) => b.pass);
      const alone: RunResults = {
        startedAt: results.startedAt,
        finishedAt: results.finishedAt,
        machine: results.machine,
        sections: ['batches'],
        batches,
        passed,
      };
      writeFileSync(join(outDir, 'latest-batches.json'), `${JSON.stringify(alone, null, 2)}\n`);
    }
    // report.ts renders its own sections (and their bars); the streams, cache and batches sections follow with theirs.
    const {
      streams: _streams,
      cache: _cache,
      batches: _batches,
      'openai-batches': _openAIBatches,
      speech: _speech,
      realtime: _realtime,
      mcp: _mcp,
      'prompt-cache': _promptCache,
      ...reported
    } = results;
    const rendered = render({
      ...reported,
      sections: results.sections.filter(
        (s): s is Section =>
          s !== 'streams' &&
          s !== 'cache' &&
          s !== 'batches' &&
          s !== 'openai-batches' &&
          s !== 'speech' &&
          s !== 'realtime' &&
          s !== 'mcp' &&
          s !== 'prompt-cache',
      ),
    });
    process.stdout.write(
      `\n${rendered}${streams ? `\n\n${renderStreams(streams)}` : ''}${cache ? `\n\n${renderCache(cache)}` : ''}${batches ? `\n\n${renderBatches(batches)}` : ''}${openAIBatches ? `\n\n${renderOpenAIBatches(openAIBatches)}` : ''}${speech ? `\n\n${renderSpeech(speech)}` : ''}${realtime ? `\n\n${renderRealtime(realtime)}` : ''}${mcp ? `\n\n${renderMcp(mcp)}` : ''}${promptCache ? `\n\n${promptCacheTable(promptCache)}` : ''}\n\nResults written to bench/results/${file}\n`,
    );
    if (process.env.BENCH_STRICT === '1' && !results.passed) process.exitCode = 1;
  } finally {
    await stopAll();
    await redis.flushdb().catch(() => undefined);
    redis.disconnect();
  }
}

main().catch(async (error: Error) => {
  process.stderr.write(`bench failed: ${error.stack ?? error.message}\n`);
  await stopAll().catch(() => undefined);
  process.exit(1);
});
