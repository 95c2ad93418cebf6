import { loadConfig } from '../shared/config.js';
import { createLogger } from '../shared/logger.js';
import { createApiServer } from '../api/server.js';
import { startWorkers } from '../workers/worker.js';
import { isMockStandingIn } from '../shared/vendors.js';
import { locateRedis } from './local-redis.js';

/**
 * `npm start` runs the api and the workers in one process; `--role=api` or
 * `--role=worker` runs one half (any number of each may share a Redis).
 */
async function main(): Promise<void> {
  const role = process.argv.find((a) => a.startsWith('--role='))?.slice('--role='.length) ?? 'all';
  if (!['all', 'api', 'worker'].includes(role)) throw new Error(`--role must be all, api or worker, not "${role}"`);
  // The whole environment is read and checked first, so a bad value stops the start before anything runs.
  const configured = loadConfig(process.env);
  // Where Redis is stays local-redis.ts's decision: REDIS_URL when set, else the default or a private one.
  const redis = await locateRedis(process.env, true);
  const config = { ...configured, redisUrl: redis.url };
  const log = createLogger(config.logLevel, `switchyard-${role}`);
  if (redis.source === 'started') {
    log.warn({ redis: redis.url }, `no Redis was running: started a private redis-server under ./.data/ at ${redis.url}`);
  } else if (redis.source === 'private') {
    log.info({ redis: redis.url }, 'using the private Redis under ./.data/');
  }

  if (isMockStandingIn(config)) {
    log.warn('no vendor key is set: running offline, the mock vendor answers for every model (set a vendor key to reach real vendors)');
  }

  const cleanups: Array<() => Promise<void>> = [];
  if (role !== 'worker') {
    const api = await createApiServer(config, log);
    const port = await api.listen(config.port, config.host);
    log.info({ port, instance: api.instanceId }, `gateway listening on http://localhost:${port}/v1`);
    cleanups.push(() => api.shutdown());
  }
  if (role !== 'api') {
    const workers = await startWorkers(config, log);
    cleanups.push(() => workers.close());
  }

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'draining: no new requests; finishing those in flight');
    // The api drains first so its requests can still be served by this process's workers.
    void (async () => {
      for (const cleanup of cleanups) await cleanup().catch((error) => log.error({ err: error }, 'shutdown step failed'));
      log.info('stopped');
      process.exit(0);
    })();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main().catch((error: Error) => {
  console.error(`switchyard: ${error.message}`);
  process.exit(1);
});
