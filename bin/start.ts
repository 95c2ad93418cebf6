import { fork, type ChildProcess } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig, type Config } from '../shared/config.js';
import { createLogger, type Logger } from '../shared/logger.js';
import { createApiServer } from '../api/server.js';
import { startWorkers } from '../workers/worker.js';
import { isMockEnabled, isMockStandingIn, resolveChannels } from '../shared/vendors.js';
import { locateRedis } from './local-redis.js';
import { reachRedis, redisAddresses } from '../shared/redis.js';
import { reachRecord, recordAddress } from './cli.js';
import { startIdleCollector } from '../shared/idle-gc.js';
import { setMetricsPeer } from '../shared/metrics.js';
import { answerMetricsOverIpc, startMetricsListener, WorkerProcessMetrics } from '../shared/metrics-process.js';
import { startTracing, type Tracing, type TracingRole } from '../shared/tracing.js';
import { embeddedRecordIn, locateRecord } from '../storage/record/embedded.js';
import { redactDatabaseUrl } from '../storage/record/database.js';
import { closeMarginMs, settledBy } from '../shared/stop-deadline.js';

/** Given to the worker process `npm start` forks: it ends when its parent does, however that ends. */
const childFlag = '--worker-of-parent';

/**
 * `npm start` runs the api and the workers; `--role=api` or `--role=worker`
 * runs one half (any number of each may share a Redis). Without a role the
 * workers get their own process (and event loop) when more than one core is
 * there to run it (`WORKER_PROCESS`), else they share the api's.
 */
async function main(): Promise<void> {
  const role = process.argv.find((a) => a.startsWith('--role='))?.slice('--role='.length) ?? 'all';
  if (!['all', 'api', 'worker'].includes(role)) throw new Error(`--role must be all, api or worker, not "${role}"`);
  const child = process.argv.includes(childFlag);
  // The whole environment is read and checked first, so a bad value stops the start before anything runs.
  const configured = loadConfig(process.env);
  const log = createLogger(configured.logLevel, `switchyard-${role}`, configured.logFormat);
  // A port another process holds stops the start here, before Redis, the record or any account is touched.
  if (role !== 'worker' && !child) await ensurePortFree(configured.port, configured.host);
  // A PostgreSQL server named and not answering: one line now, not a driver's error from the migrations later.
  if (configured.databaseUrl && !child) await reachRecord(configured.databaseUrl);
  // Where one Redis is stays local-redis.ts's decision (the CLIs share it): REDIS_URL when set, else the private one
  // under DATA_DIR (started here if none runs). A Cluster or Sentinels are named outright, and used as named once they
  // answer.
  const redis =
    configured.redis.kind === 'single'
      ? await locateRedis(process.env, !child, { dataDir: configured.dataDir })
      : await reachRedis(configured.redis).then(() => ({
          url: configured.redisUrl,
          source: 'configured' as const,
          described: `Redis: the ${configured.redis.kind === 'cluster' ? 'Cluster' : 'primary the Sentinels name'} at ${redisAddresses(configured.redis)}`,
          warning: false,
          release: async () => 'not ours' as const,
        }));
  // A start that fails from here on stops the private redis-server it started (unless another process uses it).
  releaseRedis = () => redis.release();
  // The first start makes the embedded record's cluster (initdb): said first, not seconds of silence.
  if (!configured.databaseUrl && !child && !embeddedRecordIn(configured.dataDir)) {
    log.info(
      { dataDir: configured.dataDir },
      `making the embedded record (PostgreSQL) under ${resolve(configured.dataDir)}: a first start takes a few ` +
        `seconds more`,
    );
  }
  // The record: DATABASE_URL, else the embedded PostgreSQL under DATA_DIR, which this process owns (starts and
  // stops) or another process of this DATA_DIR owns; a process whose owner stops takes it over.
  const record = await locateRecord(configured.databaseUrl, configured.dataDir, { log, watchMs: child ? 0 : 2000 });
  const config: Config = {
    ...configured,
    redisUrl: redis.url,
    redis: configured.redis.kind === 'single' ? { kind: 'single', url: redis.url } : configured.redis,
    databaseUrl: record.url,
  };
  // Signals are heard from here on. One that comes while the gateway is still starting (an orchestrator's
  // SIGTERM, the parent stopping its worker process just after it started) stops it as soon as it has started,
  // the usual way; a second Ctrl-C meanwhile exits at once.
  let requested: string | undefined;
  // A worker process is told its parent's stop deadline just before its SIGTERM: both end by the same time.
  let stopDeadline: number | undefined;
  let stop = (signal: string): void => {
    if (requested && signal === 'SIGINT') process.exit(130);
    requested ??= signal;
    log.info(
      { signal },
      `stopping as soon as the start is done${signal === 'SIGINT' ? ' (Ctrl-C again to exit now)' : ''}`,
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  if (child) {
    // A terminal's Ctrl-C reaches the whole process group: the parent decides when the workers stop.
    process.on('SIGINT', () => undefined);
    process.on('message', (message: unknown) => {
      if ((message as StopBy | null)?.type === stopByMessage) stopDeadline = (message as StopBy).until;
    });
    // The parent is gone (killed, crashed): its workers go with it, as they would in one process.
    process.on('disconnect', () => process.exit(1));
    // Gone already, before this listener was there (killed while this process was still finding Redis and the record).
    if (!process.connected) process.exit(1);
  } else {
    process.on('SIGINT', () => echoOfCtrlC() || stop('SIGINT'));
  }
  if (!child) {
    // Which record and which Redis, and who started them: the first lines a person reads.
    if (record.source !== 'configured') {
      log.info({ dataDir: configured.dataDir, owner: record.owner }, record.described);
    } else {
      log.info(
        { database: redactDatabaseUrl(record.url) },
        `the record is in PostgreSQL at ${recordAddress(record.url)} (DATABASE_URL)`,
      );
      if (record.notice) log.warn({ dataDir: configured.dataDir }, record.notice);
    }
    if (redis.warning) log.warn({ redis: redisAddresses(redis.url) }, redis.described);
    else log.info({ redis: redisAddresses(redis.url), source: redis.source }, redis.described);
  }

  if (isMockStandingIn(config) && !child) {
    log.warn(
      `no vendor key is set: running offline, the mock vendor answers for every model, ${mockPrice(config)}; set ` +
        `a vendor key to reach real vendors`,
    );
  } else if (isMockEnabled(config) && !child) {
    log.info(`MOCK_VENDOR=on: the mock vendor serves its own models (mock-chat, …), ${mockPrice(config)}`);
  } else if (resolveChannels(config).size === 0 && !child) {
    log.error(
      'no vendor key is set and the mock is off (NODE_ENV=production turns MOCK_VENDOR=auto off): every model ' +
        'answers 404 and /readyz says not ready; set a vendor key (OPENAI_API_KEY, …), or MOCK_VENDOR=on to serve ' +
        'the mock models',
    );
  }

  startIdleCollector();
  const ownProcess =
    role === 'all' &&
    (config.workerProcess === 'on' || (config.workerProcess === 'auto' && availableParallelism() > 1));
  // Tracing first: the api and the workers install their hooks only when it is on. With the workers
  // in their own process, this one is the api (the child traces as a worker).
  const tracing = await startTracing(config.tracing, ownProcess ? 'api' : (role as TracingRole), { log });
  if (tracing)
    log.info({ collector: new URL(config.tracing.endpoint!).origin }, 'tracing on: spans are exported over OTLP/HTTP');
  // Each runs with the stop's deadline (epoch ms): the end of SHUTDOWN_GRACE_MS, after which nothing is waited for.
  const cleanups: Array<{ what: string; run: (until: number) => Promise<void> }> = [];
  let inFlight = () => 0;
  // Ready (/readyz, and the "gateway ready" line) means its workers take jobs: `npm start`'s own, in their process or
  // this one, say when they run. With `--role=api` they are elsewhere: ready once the api is up.
  let workersRunning = role === 'api';
  let announceReady = (): void => undefined;
  const workersStarted = (running: boolean) => {
    workersRunning = running;
    if (running) announceReady();
  };
  // The worker process starts first, its start beside the api's: the first request used to wait for all of it.
  const workerProcess = ownProcess
    ? superviseWorkerProcess(config, log, new WorkerProcessMetrics(), workersStarted)
    : undefined;
  if (workerProcess) setMetricsPeer(() => workerProcess.metrics.collect());
  if (role !== 'worker') {
    const api = await createApiServer(config, log, { workersReady: () => workersRunning });
    const port = await api.listen(config.port, config.host);
    const base = `http://${displayHost(config.host)}:${port}`;
    log.info(
      { port, host: config.host, instance: api.instanceId, ready: workersRunning },
      `gateway listening on ${base}/v1${workersRunning ? '' : '; ready once its workers take jobs'}`,
    );
    let announced = false;
    announceReady = () => {
      if (announced) return;
      announced = true;
      log.info({ port, host: config.host }, `gateway ready: its workers take jobs at ${base}/v1`);
    };
    if (workersRunning && role !== 'api') announceReady();
    const admin = config.console.adminEmail;
    log.info(
      { console: `${base}/console`, ...(admin ? { admin } : {}) },
      `console at ${base}/console${admin ? ` (sign in as ${admin})` : ': to sign in, start with ADMIN_EMAIL and ADMIN_PASSWORD set (the first admin is made from them)'}`,
    );
    if (role === 'all') {
      log.info(
        { cli: 'npm run keys -- create --name NAME' },
        `API keys: make one in the console${admin ? '' : ' (once an admin signs in)'} or with \`npm run keys -- create --name NAME\` (shown once); clients call ${base}/v1 with it as a Bearer token`,
      );
    }
    inFlight = () => api.inFlight;
    cleanups.push({ what: 'the api', run: (until) => api.shutdown(until) });
  }
  if (workerProcess) {
    // The api's /metrics asks the worker process for its metrics over the IPC channel and serves both merged.
    cleanups.push({ what: 'the worker process', run: (until) => workerProcess.stop(until) });
  } else if (role !== 'api') {
    // The worker process of `npm start` answers its parent's metrics requests over their IPC channel.
    if (child) answerMetricsOverIpc();
    const workers = await startWorkers(config, log);
    // Its parent (or this process's api) is told: it reports ready from now on.
    if (child) process.send?.({ type: workersRunningMessage }, () => undefined);
    else if (role === 'all') workersStarted(true);
    cleanups.push({ what: 'the workers', run: (until) => workers.close(until) });
    if (!child && role === 'worker' && config.metrics.port !== undefined) {
      // A worker process has no HTTP server of its own: METRICS_PORT gives it one for GET /metrics.
      // And GET /readyz: 200 while this worker reaches Redis (compose's worker health checks probe it).
      const listener = await startMetricsListener(config.metrics.port, config.host, log, config.metrics.token, {
        redis: config.redis,
      });
      cleanups.push({
        what: 'the metrics listener',
        run: (until) => settledBy(listener.close(), until + closeMarginMs).then(() => undefined),
      });
    }
  }
  // A start that fails exits, and the embedded database's lock goes with the process (embedded.ts). Last: the api and
  // the workers are done with the embedded database before it stops.
  cleanups.push({
    what: 'the record',
    run: (until) => settledBy(record.close(), Math.max(until, Date.now()) + closeMarginMs).then(() => undefined),
  });

  const logDrain = (signal: string) => {
    const seconds = Math.round(config.shutdownGraceMs / 100) / 10;
    log.info(
      { signal, inFlight: inFlight(), graceMs: config.shutdownGraceMs },
      `draining ${inFlight()} request${inFlight() === 1 ? '' : 's'}, up to ${seconds} s; new requests get a 503${signal === 'SIGINT' ? ' (Ctrl-C again to exit now)' : ''}`,
    );
  };
  let stopping = false;
  stop = (signal: string) => {
    if (stopping) {
      // A second Ctrl-C: the person at the terminal does not want to wait for the drain.
      if (signal === 'SIGINT') {
        log.warn('second interrupt: exiting now, without waiting for the requests in flight');
        process.exit(130);
      }
      return;
    }
    stopping = true;
    if (role === 'worker') {
      // A worker process has no requests of its own: it lets the jobs it runs finish.
      log.info({ signal }, 'stopping: the jobs running here finish first, new ones are left to other workers');
    } else {
      logDrain(signal);
    }
    // The grace is a hard deadline: a parent that stops its worker process hands it its own deadline first.
    const until = stopDeadline ?? Date.now() + config.shutdownGraceMs;
    let step = 'the start of the stop';
    // Every step is bounded (a dead Redis would hold BullMQ's close or a QUIT for ever); this is the last word
    // if one is not: past the deadline and the margin to close, the process exits, saying what it gave up.
    setTimeout(
      () => {
        log.error(
          { step, graceMs: config.shutdownGraceMs },
          `the stop did not end within the grace period and the margin to close; exiting, given up: ${step}`,
        );
        process.exit(1);
      },
      until + closeMarginMs + (ownProcess ? 2 : 1) * exitMarginMs - Date.now(),
    );
    // The api drains first so its requests can still be served by the workers.
    void (async () => {
      for (const cleanup of cleanups) {
        step = cleanup.what;
        await cleanup.run(until).catch((error) => log.error({ err: error }, 'shutdown step failed'));
      }
      step = 'exporting the last spans';
      // The spans still buffered go out, for a few seconds at most (an unreachable collector does not hold the exit).
      if (tracing) await flushTracing(tracing, log);
      // Last: the private redis-server, once nothing here uses it (another gateway of this DATA_DIR may: then it runs
      // on).
      step = 'the private redis-server';
      if (!child) {
        const released = await redis.release().catch(() => 'kept' as const);
        if (released === 'stopped')
          log.info({ redis: redisAddresses(redis.url) }, 'stopped the private redis-server (nothing else used it)');
        else if (released === 'kept')
          log.info(
            { redis: redisAddresses(redis.url) },
            'the private redis-server runs on: another process of this DATA_DIR still uses it',
          );
      }
      log.info('stopped');
      process.exit(0);
    })();
  };
  if (requested) stop(requested);
}

/** Fails the start, in one clear sentence, when another process listens on the port (PORT=0 picks a free one). */
async function ensurePortFree(port: number, host: string): Promise<void> {
  if (port === 0) return;
  const probe = createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once('error', reject);
      probe.listen(port, host, () => resolve());
    });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE') {
      throw new Error(
        `port ${port} on ${displayHost(host)} is in use (another gateway?): stop it, or set PORT to a free port ` +
          `(PORT=${port === 65535 ? port - 1 : port + 1} npm start); nothing was started`,
      );
    }
    if (code === 'EACCES')
      throw new Error(
        `port ${port} on ${displayHost(host)} needs privileges this process lacks: set PORT to 1024 or above; ` +
          `nothing was started`,
      );
    throw error;
  }
  await new Promise((resolve) => probe.close(resolve));
}

/**
 * What the start line says of the mock's answers and money: billed at the listed prices with MOCK_BILLING=on, else
 * free.
 */
function mockPrice(config: Pick<Config, 'mock'>): string {
  return config.mock.billed ? "billed at each model's listed price (MOCK_BILLING=on)" : 'free (MOCK_BILLING is off)';
}

/** The address to print for a bind address: a wildcard is reached as localhost. */
function displayHost(host: string): string {
  if (host === '0.0.0.0' || host === '::' || host === '') return 'localhost';
  return host.includes(':') ? `[${host}]` : host;
}

const tracingFlushMs = 5000;

async function flushTracing(tracing: Tracing, log: Logger): Promise<void> {
  const exported = tracing
    .shutdown()
    .catch((error: unknown) => log.warn({ err: error }, 'could not export the last spans'));
  if (!(await settledBy(exported, Date.now() + tracingFlushMs)))
    log.warn(`the last spans were not exported within ${tracingFlushMs} ms`);
}

/**
 * Past the margin to close, how much longer a process waits before it exits anyway (a parent: twice, for its worker
 * process's).
 */
const exitMarginMs = 1000;

const stopByMessage = 'switchyard:stop-by';
/** From a worker process to its parent: its workers take jobs. */
const workersRunningMessage = 'switchyard:workers-running';
interface StopBy {
  type: typeof stopByMessage;
  /** The stop's deadline, epoch ms. */
  until: number;
}

/** Crashes closer together than this count towards giving up. */
const crashWindowMs = 60_000;
const maxCrashes = 5;

/**
 * The workers of `npm start` in a child process: restarted after a crash
 * (the api keeps serving; queued jobs wait), given up after five crashes in
 * a minute (the process exits, for its supervisor to restart). Stopping it
 * lets its running jobs finish, as `--role=worker` does on SIGTERM.
 */
function superviseWorkerProcess(
  config: Config,
  log: Logger,
  metrics: WorkerProcessMetrics,
  running: (running: boolean) => void,
): { metrics: WorkerProcessMetrics; stop(until: number): Promise<void> } {
  const script = fileURLToPath(import.meta.url);
  let current: ChildProcess | undefined;
  let stopping = false;
  const crashes: number[] = [];
  const launch = () => {
    const proc = fork(script, ['--role=worker', childFlag], {
      // The Redis the api uses (possibly a private one it found or started), whatever REDIS_URL said.
      env: {
        ...process.env,
        REDIS_URL: config.redisUrl,
        ...(config.databaseUrl ? { DATABASE_URL: config.databaseUrl } : {}),
      },
      execArgv: process.execArgv,
      stdio: 'inherit',
    });
    current = proc;
    metrics.attach(proc);
    proc.on('message', (message: unknown) => {
      if ((message as { type?: unknown } | null)?.type === workersRunningMessage && current === proc) running(true);
    });
    proc.once('exit', (code, signal) => {
      running(false);
      if (current === proc) current = undefined;
      if (stopping) return;
      const now = Date.now();
      crashes.push(now);
      while (crashes.length > 0 && crashes[0]! < now - crashWindowMs) crashes.shift();
      if (crashes.length >= maxCrashes) {
        log.fatal({ code, signal }, `the worker process crashed ${maxCrashes} times within a minute; exiting`);
        process.exit(1);
      }
      log.error({ code, signal }, 'the worker process exited; restarting it');
      setTimeout(() => !stopping && launch(), 1000).unref();
    });
  };
  launch();
  log.info({ cores: availableParallelism() }, 'workers run in their own process');
  return {
    metrics,
    async stop(until) {
      stopping = true;
      const proc = current;
      if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = once(proc, 'exit');
      proc.send?.({ type: stopByMessage, until } satisfies StopBy, () => undefined);
      proc.kill('SIGTERM');
      // It ends by the same deadline on its own; one that does not is killed.
      if (await settledBy(exited, until + closeMarginMs + exitMarginMs + exitMarginMs / 2)) return;
      log.error(
        { pid: proc.pid },
        'the worker process did not stop in time: killed, its running jobs given up (another worker runs them ' +
          'again once their locks expire)',
      );
      proc.kill('SIGKILL');
      await settledBy(exited, Date.now() + exitMarginMs / 2);
    },
  };
}

/**
 * True for a SIGINT that is the echo of one just heard. A terminal's Ctrl-C
 * reaches the whole foreground process group, and `npm start` (npm run sets
 * npm_lifecycle_event) also forwards the SIGINT it got to the gateway: one
 * keypress arrives twice, within milliseconds, and must not count as the
 * second Ctrl-C that skips the drain. Started otherwise, each SIGINT counts.
 */
let lastInterrupt = 0;
function echoOfCtrlC(): boolean {
  if (!process.env.npm_lifecycle_event) return false;
  const now = Date.now();
  const echo = now - lastInterrupt < ctrlCEchoMs;
  if (!echo) lastInterrupt = now;
  return echo;
}
const ctrlCEchoMs = 500;

/** Stops the private redis-server this start found or started, when the start fails past that point. */
let releaseRedis: (() => Promise<unknown>) | undefined;

main().catch(async (error: Error) => {
  console.error(`switchyard: ${error.message}`);
  await releaseRedis?.().catch(() => undefined);
  process.exit(1);
});
