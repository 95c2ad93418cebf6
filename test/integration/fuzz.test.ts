import { after, before, describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { createKey, freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import {
  describeCase,
  jsonCase,
  knownCases,
  knownMultipartCases,
  knownRawCases,
  limits,
  multipartCase,
  rawCase,
  readCase,
  streamCase,
  type FuzzCase,
} from '../support/fuzz-arbitraries.js';
import {
  HealthPoller,
  judge,
  readLoopStall,
  sendCase,
  type Problem,
  type ProblemKind,
} from '../support/fuzz-harness.js';

/*
 * Property-based fuzzing of every endpoint of one running gateway (role all,
 * mock vendor). Every generated request must get a 2xx, or a 4xx with an
 * OpenAI-shaped error body, within REQUEST_TIMEOUT_MS; never a 5xx, an empty
 * reply or a dropped connection. While it runs, the process must stay up and
 * its event loop free: /readyz's event_loop_max_ms is read after every request
 * and a poller thread GETs /healthz every 50 ms.
 *
 * Replay: every run prints its seed. FUZZ_SEED=<seed> runs the same requests;
 * add FUZZ_PATH=<path> (printed with a failure) and --test-name-pattern to go
 * straight to a counterexample. FUZZ_TIME_SCALE=<n> gives every property n
 * times its time budget. FUZZ_EXAMPLES=0 leaves out the known regressions
 * that otherwise run first, to see what the generators find on their own.
 * FUZZ_DEBUG=1 prints every request with its status, stall and /healthz time.
 */

// `npm test` replays one known seed, so CI judges the gateway, not the luck of the draw; FUZZ_SEED=random explores.
const seed =
  process.env.FUZZ_SEED === 'random'
    ? (Math.random() * 2 ** 31) | 0
    : process.env.FUZZ_SEED
      ? Number(process.env.FUZZ_SEED)
      : 797150082;
if (!Number.isInteger(seed)) throw new Error(`FUZZ_SEED must be an integer, got "${process.env.FUZZ_SEED}"`);
const replayPath = process.env.FUZZ_PATH || undefined;
const timeScale = Number(process.env.FUZZ_TIME_SCALE ?? 1) || 1;
const withExamples = process.env.FUZZ_EXAMPLES !== '0';

/**
 * No answer may take longer. A 130 k-character tokenizer stall took about 16 s; this still reports it, as a stall,
 * rather than as a hang.
 */
const REQUEST_TIMEOUT_MS = 20_000;
/** /readyz event_loop_max_ms: the worst stall of the gateway's event loop since the previous read. */
const LOOP_LIMIT_MS = 200;
/**
 * /healthz must answer within 100 ms. The margin: the poller, the gateway,
 * Redis and this test share two cores with other test runs, and an idle
 * gateway's /healthz was measured at up to ~40 ms there under such load (the
 * OS scheduling one process out for a few time slices); a real stall shows up
 * as hundreds of ms or more, and is confirmed by a second try (see exercise()).
 * The file runs alone (bin/test.mjs): beside another file, or just after one
 * in the same process round, a 3 MB chat body of 99,990 content parts (refused
 * by the shape scan in under 20 ms) was seen at 146-174 ms; alone the slowest
 * /healthz of the whole run was 44 ms.
 */
const HEALTH_LIMIT_MS = 100 + 50;
/** A stall below this is tried a second time before it counts: a one-off is the shared machine, not the gateway. */
const CONFIRM_BELOW_MS = 1_000;

/** Kinds after which the gateway cannot be trusted for later runs: it is gone, or still busy with this one. */
const poisoning = new Set<ProblemKind>(['crash', 'unresponsive', 'no-answer']);
const stallKinds = new Set<ProblemKind>(['loop-stall', 'health-stall']);

const clip = (text: string, max: number) =>
  text.length > max ? `${text.slice(0, max)}… (${text.length} chars)` : text;

describe('fuzz: generated input at every endpoint', { timeout: 15 * 60_000 }, () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let poller: HealthPoller;
  let blobDir: string;
  let env: Record<string, string>;
  const secrets: Record<string, string> = { ADMIN: 'fuzz-admin-token-0123456789' };
  /** Why the gateway had to be restarted between properties (each one a failure of some property). */
  const restarts: string[] = [];
  const worst = { loopMs: 0, loopCase: '', healthMs: 0, healthCase: '' };
  /**
   * The slowest /healthz during a short stall the same request did not repeat: the shared machine's, not the gateway's.
   */
  let forgivenHealthMs = 0;
  let cases = 0;

  async function start(): Promise<void> {
    gateway = await startGateway({ env });
    // A few requests of each kind first: the first calls load code and tables, which is not what is measured.
    const key = secrets.KEY!;
    const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${gateway.url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      }).then(async (res) => ({ status: res.status, body: (await res.json()) as { id?: string } }));
    for (let i = 0; i < 2; i++) {
      await post('/v1/chat/completions', {
        model: 'mock-chat',
        messages: [{ role: 'user', content: `warm up ${'a'.repeat(500)} ${'word '.repeat(500)}` }],
      });
      await post('/v1/embeddings', { model: 'mock-embedding', input: ['warm', 'up'] });
      await post('/v1/completions', { model: 'mock-instruct', prompt: 'warm up' });
      await post('/v1/images/generations', {
        model: 'mock-image',
        prompt: 'warm up',
        size: '256x256',
        response_format: 'b64_json',
      });
    }
    const video = await post('/v1/videos', {
      model: 'mock-video',
      prompt: 'a warm cat',
      seconds: '4',
      size: '720x1280',
    });
    const job = await post(
      '/v1/chat/completions',
      { model: 'mock-chat', messages: [{ role: 'user', content: 'later' }] },
      { prefer: 'respond-async' },
    );
    assert.equal(video.status, 200, JSON.stringify(video.body));
    assert.equal(job.status, 202, JSON.stringify(job.body));
    secrets.VIDEO = video.body.id!;
    secrets.JOB = job.body.id!;
    // Another key's video: reading or deleting it with ours must be a 404, not someone else's data.
    const other = await fetch(`${gateway.url}/v1/videos`, {
      method: 'POST',
      headers: { authorization: `Bearer ${secrets.OTHER_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-video', prompt: 'not yours', seconds: '4' }),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    secrets.OTHER_VIDEO = ((await other.json()) as { id: string }).id;
    await new Promise((resolve) => setTimeout(resolve, 300));
    await readLoop(5_000);
  }

  const exited = () => gateway.proc.exitCode !== null || gateway.proc.signalCode !== null;

  let lastLoopRead = 0;
  /** GET /readyz's event_loop_max_ms (which also resets it). */
  async function readLoop(timeoutMs: number) {
    const result = await readLoopStall(gateway.url, timeoutMs);
    lastLoopRead = Date.now();
    return result;
  }

  /**
   * /readyz resets the gateway's delay histogram, and the first delay after a
   * reset is not recorded: a stall that starts within one 10 ms tick of a
   * /readyz read would go unseen. So no request starts sooner than that.
   */
  async function afterLoopReadSettles(): Promise<void> {
    const wait = lastLoopRead + 25 - Date.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  }

  /** Kills the gateway (it may be frozen, SIGTERM would wait) and starts a fresh one on the same Redis. */
  async function restart(reason: string): Promise<void> {
    restarts.push(reason);
    await poller.pause();
    if (!exited()) {
      gateway.proc.kill('SIGKILL');
      await once(gateway.proc, 'exit');
    }
    await start();
    poller.setUrl(gateway.url);
    poller.resume();
  }

  /** Before each property: a gateway that answers, and a clean event-loop reading. */
  async function ensureHealthy(property: string): Promise<void> {
    let healthy = !exited();
    if (healthy) {
      try {
        healthy = (await fetch(`${gateway.url}/healthz`, { signal: AbortSignal.timeout(2_000) })).ok;
      } catch {
        healthy = false;
      }
    }
    if (!healthy)
      await restart(`before "${property}": the gateway was ${exited() ? 'gone' : 'not answering /healthz within 2 s'}`);
    await readLoop(10_000);
    poller.resetWindow();
  }

  function logTail(lines = 25): string {
    return gateway.logs
      .slice(-lines)
      .map((line) => `    | ${clip(line, 600)}`)
      .join('\n');
  }

  /** Sends one case and checks the answer and the process's vitals. Returns every problem found. */
  async function exercise(c: FuzzCase, stop: AbortSignal, retry = false): Promise<Problem[]> {
    await afterLoopReadSettles();
    poller.resetWindow();
    const outcome = await sendCase(c, new URL(gateway.url), secrets, REQUEST_TIMEOUT_MS, stop);
    if (outcome.kind === 'cancelled') return [];
    cases++;
    const problems = judge(c, outcome);

    // /readyz also gives a crash that follows the answer (an unhandled error a tick later) the time to happen.
    // After a request that got no answer the gateway is likely frozen: no need to wait the full bound again.
    const loop = await readLoop(outcome.kind === 'timeout' ? 2_000 : REQUEST_TIMEOUT_MS);
    if (!loop.ok) {
      if (!exited())
        await Promise.race([once(gateway.proc, 'exit'), new Promise((resolve) => setTimeout(resolve, 1_000))]);
      if (exited()) {
        problems.push({
          kind: 'crash',
          text:
            `the gateway process exited (code ${gateway.proc.exitCode}, signal ${gateway.proc.signalCode}); its ` +
            `last log lines:\n${logTail()}`,
        });
      } else problems.push({ kind: 'unresponsive', text: `GET /readyz after the request failed: ${loop.error}` });
      return problems;
    }
    const healthMs = await poller.windowMaxMs(REQUEST_TIMEOUT_MS);
    if (exited()) {
      problems.push({
        kind: 'crash',
        text:
          `the gateway process exited (code ${gateway.proc.exitCode}, signal ${gateway.proc.signalCode}); its last ` +
          `log lines:\n${logTail()}`,
      });
      return problems;
    }
    if (process.env.FUZZ_DEBUG) {
      const status = outcome.kind === 'answer' ? outcome.status : outcome.kind;
      console.error(
        `fuzz: ${status} in ${'ms' in outcome ? outcome.ms : '?'} ms, loop ${loop.ms} ms, healthz ${Math.round(healthMs)} ms: ${clip(describeCase(c), 300)}`,
      );
    }
    const stalls: Problem[] = [];
    if (loop.ms >= LOOP_LIMIT_MS)
      stalls.push({
        kind: 'loop-stall',
        text: `the event loop stalled ${loop.ms} ms (/readyz event_loop_max_ms; limit ${LOOP_LIMIT_MS})`,
      });
    if (healthMs >= HEALTH_LIMIT_MS)
      stalls.push({
        kind: 'health-stall',
        text: `GET /healthz took ${Math.round(healthMs)} ms during this request (limit ${HEALTH_LIMIT_MS})`,
      });
    if (stalls.length > 0 && problems.length === 0 && !retry && Math.max(loop.ms, healthMs) < CONFIRM_BELOW_MS) {
      // A short stall alone may be the shared machine: it counts only if the same request stalls again.
      const again = await exercise(c, stop, true);
      const repeated = again.filter((p) => stallKinds.has(p.kind));
      if (repeated.length === 0) {
        // Not repeated: the run's worst is the second try's (recorded by it), this one forgiven.
        forgivenHealthMs = Math.max(forgivenHealthMs, healthMs);
        return again;
      }
      const confirmed = stalls.map((p) => ({
        ...p,
        text: `${p.text}; second try: ${repeated.find((r) => r.kind === p.kind)?.text ?? 'under the limit'}`,
      }));
      noteWorst(loop.ms, healthMs, c);
      return [
        ...confirmed,
        ...repeated.filter((r) => !stalls.some((p) => p.kind === r.kind)),
        ...again.filter((p) => !stallKinds.has(p.kind)),
      ];
    }
    noteWorst(loop.ms, healthMs, c);
    return [...problems, ...stalls];
  }

  function noteWorst(loopMs: number, healthMs: number, c: FuzzCase): void {
    if (loopMs > worst.loopMs) Object.assign(worst, { loopMs, loopCase: describeCase(c) });
    if (healthMs > worst.healthMs) Object.assign(worst, { healthMs, healthCase: describeCase(c) });
  }

  /**
   * Runs one property for its time budget. A failing case is shrunk while it
   * fails the same way (another failure met while shrinking is noted, not
   * followed); once the gateway is down or frozen, later runs are not judged,
   * so the case that did it stays the counterexample.
   */
  async function runProperty(
    t: TestContext,
    name: string,
    arbitrary: fc.Arbitrary<FuzzCase>,
    budgetMs: number,
    examples: FuzzCase[],
  ): Promise<void> {
    await ensureHealthy(name);
    const budget = Math.round(budgetMs * timeScale);
    let poisoned = false;
    let firstKinds: Set<ProblemKind> | undefined;
    const alsoSeen: string[] = [];
    let inFlight: Promise<unknown> = Promise.resolve();
    let calls = 0;
    let runs = 0;
    /** The first failing run: fast-check does not see it when its time limit fell while the run was under way. */
    let late: { c: FuzzCase; problems: Problem[]; path: string } | undefined;
    const startedAt = Date.now();

    const property = fc.asyncProperty(arbitrary, async (c) => {
      const index = calls++;
      if (poisoned) return;
      runs++;
      // Runs are not cut at the time limit: a 16 s stall that outlasts the budget must still fail.
      const run = exercise(c, t.signal);
      inFlight = run.catch(() => undefined);
      const problems = await run;
      if (problems.length === 0) return;
      const kinds = new Set(problems.map((p) => p.kind));
      if (problems.some((p) => poisoning.has(p.kind))) poisoned = true;
      if (!firstKinds) late ??= { c, problems, path: String(index) };
      if (firstKinds && ![...kinds].some((k) => firstKinds!.has(k))) {
        alsoSeen.push(
          `${[...kinds].join(', ')}: ${clip(describeCase(c), 600)}\n      ${problems.map((p) => clip(p.text, 600)).join('\n      ')}`,
        );
        return;
      }
      firstKinds ??= kinds;
      throw new Error(problems.map((p) => `[${p.kind}] ${p.text}`).join('\n'));
    });

    const details = await fc.check(property, {
      seed,
      ...(replayPath ? { path: replayPath } : {}),
      numRuns: 100_000,
      interruptAfterTimeLimit: budget,
      examples: withExamples ? examples.map((e): [FuzzCase] => [e]) : [],
    });
    await inFlight;
    const summary = `${name}: ${runs} requests judged in ${((Date.now() - startedAt) / 1000).toFixed(1)} s (seed ${seed})`;
    t.diagnostic(summary);
    if (poisoned) await restart(`"${name}" left the gateway down or frozen`);
    // Interrupted before any run finished counts as failed in fast-check's report, with no counterexample: not ours to
    // report.
    const shrunk = details.failed && details.counterexample !== null;
    if (!shrunk && !late) return;

    const failure = shrunk
      ? {
          c: details.counterexample?.[0],
          path: details.counterexamplePath ?? '',
          what: `failed after ${details.numRuns} runs (${details.numShrinks} shrinks)`,
          problems: String((details.errorInstance as Error | undefined)?.message ?? details.errorInstance),
        }
      : {
          c: late!.c,
          path: late!.path,
          what: 'failed on the run under way when its time budget ran out (not shrunk)',
          problems: late!.problems.map((p) => `[${p.kind}] ${p.text}`).join('\n'),
        };
    // Regex characters in the title become '.', not escapes: a backslash would not survive the TAP output it is copied
    // from.
    const pattern = `^${t.name.replace(/[.*+?^${}()|[\]\\]/g, '.')}$`;
    const replay = `FUZZ_SEED=${seed} FUZZ_PATH=${failure.path}${withExamples ? '' : ' FUZZ_EXAMPLES=0'} node --import tsx --test --test-name-pattern='${pattern}' test/integration/fuzz.test.ts`;
    const message = [
      `property "${name}" ${failure.what}`,
      `  seed ${seed}, path ${failure.path}`,
      `  replay: ${replay}`,
      `  counterexample: ${failure.c ? clip(describeCase(failure.c), 2_000) : '(none)'}`,
      `  problems:\n    ${clip(failure.problems, 6_000).replaceAll('\n', '\n    ')}`,
      ...(alsoSeen.length
        ? [`  also seen while shrinking (other failures, not followed):\n    ${alsoSeen.slice(0, 5).join('\n    ')}`]
        : []),
    ].join('\n');
    console.error(message);
    assert.fail(message);
  }

  before(async () => {
    console.log(`fuzz seed: ${seed} (replay with FUZZ_SEED=${seed})`);
    const fresh = await freshRedis(15);
    redis = fresh.redis;
    secrets.KEY = (await createKey(redis, 'fuzz')).key;
    secrets.OTHER_KEY = (await createKey(redis, 'fuzz-other')).key;
    blobDir = mkdtempSync(join(tmpdir(), 'sy-fuzz-blobs-'));
    env = {
      REDIS_URL: fresh.url,
      ADMIN_TOKEN: secrets.ADMIN!,
      BLOB_DIR: blobDir,
      MAX_BODY_BYTES: String(limits.bodyBytes),
      MAX_IMAGE_BYTES: String(limits.fileBytes),
      MAX_AUDIO_BYTES: String(limits.fileBytes),
      MOCK_VIDEO_MS: '100',
      // A frozen or crashed gateway is killed, not drained: no grace period to wait out.
      SHUTDOWN_GRACE_MS: '1000',
    };
    await start();
    poller = new HealthPoller(gateway.url);
    // "Before": an idle gateway, warmed up, must already be within the stall bound.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const idle = await readLoop(5_000);
    assert.ok(idle.ok, `GET /readyz before the run: ${!idle.ok ? idle.error : ''}`);
    assert.ok(idle.ms < LOOP_LIMIT_MS, `the idle gateway's event loop already stalls ${idle.ms} ms`);
  });

  after(async () => {
    await poller?.stop();
    if (gateway && !exited()) {
      gateway.proc.kill('SIGTERM');
      const stopped = await Promise.race([
        once(gateway.proc, 'exit').then(() => true),
        new Promise((resolve) => setTimeout(() => resolve(false), 5_000)),
      ]);
      if (!stopped) {
        gateway.proc.kill('SIGKILL');
        await once(gateway.proc, 'exit');
      }
    }
    redis?.disconnect();
    if (blobDir) rmSync(blobDir, { recursive: true, force: true });
  });

  it('JSON bodies: wrong types, extreme numbers, missing, unknown and prototype keys', async (t) => {
    await runProperty(t, 'JSON fields', jsonCase('fields'), 8_000, []);
  });

  it('JSON bodies: nesting up to 6,000 levels in free-form fields', async (t) => {
    await runProperty(t, 'JSON nesting', jsonCase('nesting'), 5_000, [knownCases.deepNesting, knownCases.deepContent]);
  });

  it('JSON bodies: huge strings, arrays and objects', async (t) => {
    await runProperty(t, 'JSON huge', jsonCase('huge'), 10_000, [
      knownCases.longRun,
      knownCases.manyInputs,
      knownCases.manyParts,
      knownCases.manyPartsServed,
    ]);
  });

  it('JSON bodies: unicode, raw bytes, invalid JSON, non-object bodies, content types', async (t) => {
    await runProperty(t, 'JSON encoding', jsonCase('encoding'), 6_000, []);
  });

  it('streams: a complete event stream or an OpenAI-shaped 4xx; Connection: close honoured', async (t) => {
    await runProperty(t, 'streams', streamCase(), 5_000, [knownCases.streamClose]);
  });

  it('multipart: bodies cut short (with or without the socket closing) and random bytes', async (t) => {
    await runProperty(t, 'multipart cut', multipartCase('cut'), 5_000, [knownMultipartCases.truncated]);
  });

  it('multipart: files past the size limit, more than 20 files, more than 150 fields', async (t) => {
    await runProperty(t, 'multipart limits', multipartCase('limits'), 5_000, [
      knownMultipartCases.tooManyFiles,
      knownMultipartCases.tooManyFields,
    ]);
  });

  it('multipart: number fields, duplicates, files for text and text for files, part headers, boundaries', async (t) => {
    await runProperty(t, 'multipart fields', multipartCase('fields'), 6_000, [
      knownMultipartCases.numberInfinite,
      knownMultipartCases.numberText,
      knownMultipartCases.numberNaN,
    ]);
  });

  it('reads, deletes and admin: ids, queries, methods and keys', async (t) => {
    await runProperty(t, 'reads', readCase(), 4_000, []);
  });

  it('raw HTTP: huge headers and URLs, malformed requests, bodies cut off mid-way', async (t) => {
    await runProperty(t, 'raw HTTP', rawCase(), 6_000, [knownRawCases.bigHeader, knownRawCases.bigUrl]);
  });

  it('stays up and responsive for the whole run, and still answers a plain chat afterwards', async (t) => {
    const loop = await readLoop(10_000);
    const health = poller.stats();
    t.diagnostic(
      `${cases} requests; /healthz probes ${health.probes} (failed ${health.failures}), slowest ` +
        `${Math.round(health.maxMs)} ms (in a stall not repeated: ${Math.round(forgivenHealthMs)} ms); ` +
        `worst event-loop stall after one request ${worst.loopMs} ms; seed ${seed}`,
    );
    assert.ok(loop.ok, `GET /readyz after the run: ${!loop.ok ? loop.error : ''}`);
    assert.deepEqual(
      restarts,
      [],
      'the gateway had to be restarted (it crashed or froze; the property that did it failed above)',
    );
    assert.ok(loop.ms < LOOP_LIMIT_MS, `event loop stalled ${loop.ms} ms at the end of the run`);
    assert.equal(health.failures, 0, `${health.failures} /healthz probes failed during the run`);
    // The rule the cases follow holds for the run too: a slowest probe that fell in a short stall the same request
    // did not repeat is the shared machine's; every request's own worst must be under the limit still.
    const slowestCounted = health.maxMs <= forgivenHealthMs ? worst.healthMs : health.maxMs;
    assert.ok(
      slowestCounted < HEALTH_LIMIT_MS,
      `the slowest /healthz took ${Math.round(health.maxMs)} ms (limit ${HEALTH_LIMIT_MS}; ` +
        `${Math.round(forgivenHealthMs)} ms in a stall not repeated); the worst single case: ` +
        `${Math.round(worst.healthMs)} ms during ${clip(worst.healthCase, 800)}`,
    );
    const chat = await gateway
      .client(secrets.KEY!)
      .chat.completions.create({ model: 'mock-chat', messages: [{ role: 'user', content: 'still there?' }] });
    assert.equal(chat.object, 'chat.completion');
    assert.match(chat.choices[0]?.message.content ?? '', /still there/);
  });
});
