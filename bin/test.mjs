// The test files behind `npm test`, after its set-up and the type check, in two rounds of `node --test`. Most files
// run side by side (each has its own redis-server, its own databases and free ports); then the files that time the
// machine, or stop and restart servers on a fixed port, run one at a time with nothing beside them. TEST_CONCURRENCY
// sets how many run side by side (default 2); options are passed to both rounds (`npm test -- --test-reporter=dot`).
import { spawnSync } from 'node:child_process';
import { existsSync, globSync } from 'node:fs';
import { prepareTests } from './test-setup.mjs';

const alone = [
  // /healthz under hostile bodies, with a 250 ms bar and event-loop stall limits.
  'test/integration/fuzz.test.ts',
  // Event-loop stalls of megabyte bodies, best of three rounds under 200 ms.
  'test/integration/hostile-input.test.ts',
  // Lays out the Activity page at 1280 px holding the latencies of its own requests: slower ones, beside another
  // file, widened a table past its box.
  'test/browser/console.test.ts',
  // A whole start through tsx, refused by a Redis that wants a password, within 4 s.
  'test/integration/operator-signposts.test.ts',
  // A vendor call aborted within a second of its client leaving (1.0 s once, beside another file).
  'test/integration/openai-upstream.test.ts',
  // Processes killed or shut down under load, every answer within a bound.
  'test/integration/fault-kill.test.ts',
  'test/integration/fault-shutdown.test.ts',
  // Redis stopped and started again on its port (free for anyone while it is down), under load.
  'test/integration/fault-redis-restart.test.ts',
  'test/integration/redis-outage.test.ts',
  'test/integration/billing-faults.test.ts',
  // PostgreSQL stopped for 2 s and started again on its port, under load.
  'test/integration/record.test.ts',
  // Six to nine redis-servers each, failovers within a bound, nodes restarted on their ports.
  'test/integration/redis-cluster.test.ts',
  'test/integration/redis-sentinel.test.ts',
  'test/integration/redis-topologies.test.ts',
];

// `node bin/test.mjs unit` runs one folder's files (`npm run test:unit`); options go on to node --test.
const folders = process.argv.slice(2).filter((arg) => !arg.startsWith('-'));
const options = process.argv.slice(2).filter((arg) => arg.startsWith('-'));
const files = globSync((folders.length ? folders : ['unit', 'integration', 'browser']).map((folder) => `test/${folder}/*.test.ts`)).sort();
const missing = alone.filter((file) => !existsSync(file));
if (missing.length) throw new Error(`bin/test.mjs names files that are not there: ${missing.join(', ')}`);
const together = files.filter((file) => !alone.includes(file));
const apart = files.filter((file) => alone.includes(file));
// On a Redis the tests were told to use (TEST_REDIS_URL), every file picks its databases from the same 1–15 and
// flushes them: there the files run one at a time.
const sharedRedis = process.env.TEST_REDIS_URL || process.env.TEST_REDIS_HOST || process.env.TEST_REDIS_PORT;
const concurrency = sharedRedis ? '1' : process.env.TEST_CONCURRENCY || '2';

// Before any test: the test tools, the programs the tests start and a PostgreSQL, brought or named (bin/test-setup.mjs).
const prepared = await prepareTests();

function round(what, list, n) {
  if (list.length === 0) return 0;
  console.log(`\n${list.length} test files ${what}\n`);
  const run = spawnSync(process.execPath, ['--import', 'tsx', '--test', `--test-concurrency=${n}`, ...options, ...list], { stdio: 'inherit', env: prepared.env });
  return run.status ?? 1;
}

try {
  // The whole suite type-checks first (the test files' own imports included, now that their tools are installed).
  if (folders.length === 0 && spawnSync('npm', ['run', '--silent', 'typecheck'], { stdio: 'inherit' }).status !== 0) {
    process.exitCode = 1;
  } else {
    const failed = [round(`${concurrency} at a time`, together, concurrency), round('one at a time', apart, 1)].some((status) => status !== 0);
    process.exitCode = failed ? 1 : 0;
  }
} finally {
  await prepared.close();
}
