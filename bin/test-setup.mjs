// What `npm test` needs before its first test, checked and, where it can, brought: the test tools (test/tools: the real
// coding agents and a peer gateway, programs the tests run; never part of the gateway's own install), the system
// programs the tests start (redis-server and redis-cli, Debian's chromium, nginx, kubectl), and a PostgreSQL for the
// record's tests (the one at TEST_DATABASE_URL, else the embedded one the gateway ships). As root with apt-get, missing
// programs are installed from Debian's packages (kubectl from a Kubernetes apt repository, where apt has one);
// otherwise it stops before any test with one line naming what is missing and the command that installs it. `node
// bin/test-setup.mjs` runs the checks alone (exit 1 when something is missing); with `--tools`, only the test tools
// (what `npm run bench` needs).
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const toolsDir = join(root, 'test', 'tools');

/**
 * The programs the tests start, each with the apt package that brings it: Debian's, unless `from` names the apt
 * repository that has it (then it installs only where that repository is configured).
 */
export const systemParts = [
  { program: 'redis-server', package: 'redis-server', why: 'each test file starts its own Redis' },
  {
    program: 'redis-cli',
    package: 'redis-tools',
    why: 'the Cluster and Sentinel tests build their topologies with it',
  },
  { program: 'chromium', package: 'chromium', why: 'the console’s browser tests' },
  { program: 'nginx', package: 'nginx-light', why: 'the compose balancer’s test' },
  {
    program: 'kubectl',
    package: 'kubectl',
    why: 'the Kubernetes manifests’ test renders them with kubectl kustomize',
    from:
      'an apt repository that carries it, the Kubernetes project’s (pkgs.k8s.io) or the Google Cloud SDK’s: ' +
      'Debian’s kubernetes-client is too old to render them',
  },
];

/** Whether `program` is an executable file on PATH. */
export function onPath(program, path = process.env.PATH ?? '') {
  return path
    .split(delimiter)
    .filter((dir) => dir !== '')
    .some((dir) => {
      try {
        accessSync(join(dir, program), constants.X_OK);
        return true;
      } catch {
        return false;
      }
    });
}

/** The system parts not on PATH. */
export function missingParts(path = process.env.PATH) {
  return systemParts.filter((part) => !onPath(part.program, path));
}

/** The test tools are installed as their lockfile pins them (npm's own record of what it installed agrees). */
function toolsInstalled() {
  const installed = join(toolsDir, 'node_modules', '.package-lock.json');
  if (!existsSync(installed)) return false;
  const want = JSON.parse(readFileSync(join(toolsDir, 'package-lock.json'), 'utf8')).packages ?? {};
  const have = JSON.parse(readFileSync(installed, 'utf8')).packages ?? {};
  return Object.entries(want).every(
    ([path, entry]) => path === '' || entry.optional || have[path]?.version === entry.version,
  );
}

function run(command, args, options = {}) {
  const result = spawnSync(command, args, { stdio: 'inherit', ...options });
  return result.status === 0;
}

/** Installs the test tools from their lockfile when they are missing or not as it pins them. */
function installTools() {
  if (toolsInstalled()) return true;
  console.log(
    'npm test: installing the test tools (test/tools: Claude Code, Codex, Gemini CLI, Portkey) from ' +
      'test/tools/package-lock.json',
  );
  return run('npm', ['ci', '--prefix', toolsDir, '--no-audit', '--no-fund', '--loglevel=error']);
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/** Installs Debian packages as root with apt-get; false where it cannot (not root, or no apt-get on PATH). */
function installPackages(packages) {
  if (!isRoot() || !onPath('apt-get')) return false;
  console.log(`npm test: installing ${packages.join(', ')} from Debian's packages`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  return (
    run('apt-get', ['update', '-qq'], { env }) &&
    run('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...packages], { env })
  );
}

/** The one line that says what is missing and the command that installs it. */
export function missingLine(parts) {
  const packages = [...new Set(parts.map((part) => part.package))];
  const elsewhere = parts.filter((part) => part.from).map((part) => `${part.package} from ${part.from}`);
  return `npm test needs ${parts.map((part) => `${part.program} (${part.why})`).join(', ')}; install ${parts.length === 1 ? 'it' : 'them'} with: sudo apt-get install -y ${packages.join(' ')}${elsewhere.length > 0 ? ` (${elsewhere.join('; ')})` : ''}`;
}

export const defaultTestDatabase = 'postgres://postgres@127.0.0.1:5432/postgres';

/**
 * The PostgreSQL the record's tests use: TEST_DATABASE_URL's (default the local server's) when it answers, else the
 * embedded server the gateway ships, started for this run under .data/test-record and stopped with it.
 */
async function testDatabase() {
  // The record's own code, from its sources (the runner is plain JavaScript): whether a server answers, and the
  // embedded one.
  const { register } = await import('tsx/esm/api');
  register();
  const source = (file) => import(pathToFileURL(join(root, 'storage', 'record', file)).href);
  const { serverAnswers } = await source('embedded-engine.ts');
  const url = process.env.TEST_DATABASE_URL || defaultTestDatabase;
  if (await serverAnswers(url)) return { url, close: async () => undefined };
  if (process.env.TEST_DATABASE_URL) throw new Error(`npm test: no PostgreSQL answers at TEST_DATABASE_URL (${url})`);
  console.log(`npm test: no PostgreSQL answers at ${url}: starting the embedded one under .data/test-record`);
  const { locateRecord } = await source('embedded.ts');
  const record = await locateRecord(undefined, join(root, '.data', 'test-record'), { watchMs: 0 });
  return { url: record.url, close: () => record.close() };
}

/**
 * Everything `npm test` needs, brought or named: resolves to the environment the tests run with (TEST_DATABASE_URL
 * set) and a `close` for what it started, or exits the process with the line naming what is missing.
 */
export async function prepareTests() {
  if (!installTools()) {
    console.error('npm test: could not install the test tools (npm ci --prefix test/tools); see the lines above');
    process.exit(1);
  }
  let missing = missingParts();
  // Debian's packages in one go; one from another repository apart, so its absence does not stop Debian's installing.
  const debian = missing.filter((part) => !part.from);
  const other = missing.filter((part) => part.from);
  if (missing.length > 0) {
    if (debian.length > 0) installPackages([...new Set(debian.map((part) => part.package))]);
    if (other.length > 0) installPackages([...new Set(other.map((part) => part.package))]);
    missing = missingParts();
  }
  if (missing.length > 0) {
    console.error(missingLine(missing));
    process.exit(1);
  }
  const database = await testDatabase();
  return { env: { ...process.env, TEST_DATABASE_URL: database.url }, close: database.close };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  if (process.argv.includes('--tools')) {
    // The benchmarks need only the tools (Portkey): `npm run bench`.
    if (!installTools()) process.exit(1);
  } else {
    const prepared = await prepareTests();
    await prepared.close();
    console.log('npm test: everything the tests need is here');
  }
}
