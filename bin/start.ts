import { fork, type ChildProcess } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { loadConfig, type Config } from '../shared/config.js';
import { createLogger, type Logger } from '../shared/logger.js';
import { createApiServer } from '../api/server.js';
import { startWorkers } from '../workers/worker.js';
import { isMockStandingIn } from '../shared/vendors.js';
import { locateRedis } from './local-redis.js';
import { startIdleCollector } from '../shared/idle-gc.js';

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
  // Where Redis is stays local-redis.ts's decision: REDIS_URL when set, else the default or a private one.
  const redis = await locateRedis(process.env, !child);
  const config = { ...configured, redisUrl: redis.url };
  const log = createLogger(config.logLevel, `switchyard-${role}`);
  if (redis.source === 'started') {
    log.warn({ redis: redis.url }, `no Redis was running: started a private redis-server under ./.data/ at ${redis.url}`);
  } else if (redis.source === 'private' && !child) {
    log.info({ redis: redis.url }, 'using the private Redis under ./.data/');
  }

  if (isMockStandingIn(config) && !child) {
    log.warn('no vendor key is set: running offline, the mock vendor answers for every model (set a vendor key to reach real vendors)');
  }

  startIdleCollector();
  const ownProcess = role === 'all' && (config.workerProcess === 'on' || (config.workerProcess === 'auto' && availableParallelism() > 1));
  const cleanups: Array<() => Promise<void>> = [];
  if (role !== 'worker') {
    const api = await createApiServer(config, log);
    const port = await api.listen(config.port, config.host);
    log.info({ port, instance: api.instanceId }, `gateway listening on http://localhost:${port}/v1`);
    cleanups.push(() => api.shutdown());
  }
  if (ownProcess) {
    const workers = superviseWorkerProcess(config, log);
    cleanups.push(() => workers.stop());
  } else if (role !== 'api') {
    const workers = await startWorkers(config, log);
    cleanups.push(() => workers.close());
  }

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'draining: no new requests; finishing those in flight');
    // The api drains first so its requests can still be served by the workers.
    void (async () => {
      for (const cleanup of cleanups) await cleanup().catch((error) => log.error({ err: error }, 'shutdown step failed'));
      log.info('stopped');
      process.exit(0);
    })();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  if (child) {
    // A terminal's Ctrl-C reaches the whole process group: the parent decides when the workers stop.
    process.on('SIGINT', () => undefined);
    // The parent is gone (killed, crashed): its workers go with it, as they would in one process.
    process.on('disconnect', () => process.exit(1));
  } else {
    process.on('SIGINT', () => stop('SIGINT'));
  }
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
function superviseWorkerProcess(config: Config, log: Logger): { stop(): Promise<void> } {
  const script = fileURLToPath(import.meta.url);
  let current: ChildProcess | undefined;
  let stopping = false;
  const crashes: number[] = [];
  const launch = () => {
    const proc = fork(script, ['--role=worker', childFlag], {
      // The Redis the api uses (possibly a private one it found or started), whatever REDIS_URL said.
      env: { ...process.env, REDIS_URL: config.redisUrl },
      execArgv: process.execArgv,
      stdio: 'inherit',
    });
    current = proc;
    proc.once('exit', (code, signal) => {
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
    async stop() {
      stopping = true;
      const proc = current;
      if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = once(proc, 'exit');
      proc.kill('SIGTERM');
      await exited;
    },
  };
}

main().catch((error: Error) => {
  console.error(`switchyard: ${error.message}`);
  process.exit(1);
});
