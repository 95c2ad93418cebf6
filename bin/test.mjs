// The test files behind `npm test`, after its set-up and the type check, in two rounds of `node --test`. Most files
// run side by side (each has its own redis-server, its own databases and free ports); then the files that time the
// machine, or stop and restart servers on a fixed port, run one at a time with nothing beside them. TEST_CONCURRENCY
// sets how many run side by side (default 2); options are passed to both rounds (`npm test -- --test-reporter=dot`).
import { spawnSync } from 'node:child_process';
import { existsSync, globSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { prepareTests } from './test-setup.mjs';

const startedAt = performance.now();

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
const files = globSync(
  (folders.length ? folders : ['unit', 'integration', 'browser']).map((folder) => `test/${folder}/*.test.ts`),
).sort();
const missing = alone.filter((file) => !existsSync(file));
if (missing.length) throw new Error(`bin/test.mjs names files that are not there: ${missing.join(', ')}`);
// Each file's time in the last runs (bin/test-timings.mjs), kept beside the install: the slowest files start first,
// so the last ones to end are short ones, and a file never timed (a new one) counts as slow.
const root = resolve(dirname(new URL(import.meta.url).pathname), '..');
const cacheDir = join(root, 'node_modules', '.cache', 'switchyard');
const timingsFile = join(cacheDir, 'test-timings.json');
/** @type {Record<string, number>} */
let timings = {};
try {
  timings = JSON.parse(readFileSync(timingsFile, 'utf8'));
} catch {
  // none yet: every file counts as slow, in name order
}
const slowestFirst = (list) =>
  [...list].sort((a, b) => (timings[b] ?? Infinity) - (timings[a] ?? Infinity) || a.localeCompare(b));
const together = slowestFirst(files.filter((file) => !alone.includes(file)));
const apart = files.filter((file) => alone.includes(file));
// On a Redis the tests were told to use (TEST_REDIS_URL), every file picks its databases from the same 1–15 and
// flushes them: there the files run one at a time.
const sharedRedis = process.env.TEST_REDIS_URL || process.env.TEST_REDIS_HOST || process.env.TEST_REDIS_PORT;
const concurrency = sharedRedis ? '1' : process.env.TEST_CONCURRENCY || '2';

// Before any test: the test tools, the programs the tests start and a PostgreSQL, brought or named
// (bin/test-setup.mjs).
const prepared = await prepareTests();

// Beside the reporter people read (spec, unless options name their own), the files' times go to a file of this run.
const timed = !options.some((option) => option.startsWith('--test-reporter'));
const scratch = mkdtempSync(join(tmpdir(), 'switchyard-test-'));
/** @type {Array<{ what: string; files: number; ms: number }>} */
const rounds = [];
/** @type {Record<string, number>} */
const measured = {};
const counts = { passed: 0, failed: 0 };

function round(what, list, n) {
  if (list.length === 0) return 0;
  console.log(`\n${list.length} test files ${what}\n`);
  const destination = join(scratch, `round-${rounds.length}.json`);
  const reporters = timed
    ? [
        '--test-reporter=spec',
        '--test-reporter-destination=stdout',
        `--test-reporter=${join(root, 'bin', 'test-timings.mjs')}`,
        `--test-reporter-destination=${destination}`,
      ]
    : [];
  const started = performance.now();
  const run = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--test', `--test-concurrency=${n}`, ...reporters, ...options, ...list],
    { stdio: 'inherit', env: prepared.env },
  );
  rounds.push({ what, files: list.length, ms: performance.now() - started });
  if (timed && existsSync(destination)) {
    const report = JSON.parse(readFileSync(destination, 'utf8') || '{}');
    for (const [file, ms] of Object.entries(report.files ?? {})) measured[relative(root, file)] = ms;
    counts.passed += report.passed ?? 0;
    counts.failed += report.failed ?? 0;
  }
  return run.status ?? 1;
}

const minutes = (ms) => `${Math.floor(ms / 60_000)}:${String(Math.round((ms % 60_000) / 1000)).padStart(2, '0')}`;

/** The run's wall time, each round's, and the ten slowest files; their times kept for the next run's order. */
function summary(startedAt) {
  if (Object.keys(measured).length > 0) {
    const slowest = Object.entries(measured)
      .sort(([, a], [, b]) => b - a)
      .slice(0, 10);
    console.log('\nthe ten slowest test files:');
    for (const [file, ms] of slowest) console.log(`  ${minutes(ms).padStart(6)}  ${file}`);
    try {
      mkdirSync(dirname(timingsFile), { recursive: true });
      writeFileSync(timingsFile, JSON.stringify({ ...timings, ...measured }));
    } catch {
      // a read-only install: the next run starts in name order
    }
  }
  for (const { what, files: count, ms } of rounds) console.log(`round: ${count} test files ${what} in ${minutes(ms)}`);
  console.log(`npm test: ${minutes(performance.now() - startedAt)} in all, set-up and type check included`);
  // Both rounds' counts, last: the line a reader of the run's end (or CI) finds.
  if (rounds.length > 0 && timed) console.log(`tests: ${counts.passed} passed, ${counts.failed} failed`);
}
try {
  // The whole suite type-checks first (the test files' own imports included, now that their tools are installed).
  if (folders.length === 0 && spawnSync('npm', ['run', '--silent', 'typecheck'], { stdio: 'inherit' }).status !== 0) {
    process.exitCode = 1;
  } else if (spawnSync(process.execPath, ['bin/build.mjs'], { cwd: root, stdio: 'inherit' }).status !== 0) {
    // dist/, as `npm start` builds it: the gateway processes the tests start run from it, not compiled each time.
    process.exitCode = 1;
  } else {
    prepared.env.SWITCHYARD_TEST_FROM_DIST = '1';
    // V8's code cache for every Node process of the run (the test files, the gateways they start, their tools), kept
    // beside the install: a process loads a module compiled by an earlier one without compiling it again.
    prepared.env.NODE_COMPILE_CACHE ??= join(cacheDir, 'compile-cache');
    const failed = [round(`${concurrency} at a time`, together, concurrency), round('one at a time', apart, 1)].some(
      (status) => status !== 0,
    );
    process.exitCode = failed ? 1 : 0;
  }
} finally {
  await prepared.close();
  rmSync(scratch, { recursive: true, force: true });
  summary(startedAt);
}
