import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { freshRedis, waitFor } from '../support/gateway.js';
import { freePort } from '../support/redis-server.js';
import { recordUrlFor } from '../support/record.js';
import { onProcessEnd } from '../support/process-end.js';

/**
 * A supervisor (systemd, a container runtime, a process manager) signals the
 * process it started: here `npm run start:api` / `npm run start:worker`. npm
 * forwards SIGTERM and SIGINT to its one child, the shell running the script;
 * the script `exec`s node, so that child is the gateway itself and drains.
 * Without `exec` the shell dies and the gateway is orphaned, serving on.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const scripts = (JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { scripts: Record<string, string> })
  .scripts;

/** Process ids under `pid` (children, theirs, …), from /proc. */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // The fields after the command's closing parenthesis: state, then the parent's pid.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(parent, [...(children.get(parent) ?? []), Number(entry)]);
    } catch {
      // gone meanwhile
    }
  }
  const found: number[] = [];
  const walk = (at: number) => {
    for (const child of children.get(at) ?? []) {
      found.push(child);
      walk(child);
    }
  };
  walk(pid);
  return found;
}

const commandLine = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return [];
  }
};
/** node running the gateway (not the shell whose script names it). */
const isGateway = (pid: number) => {
  const [command, script] = commandLine(pid);
  return /(^|\/)node$/.test(command ?? '') && script === 'dist/bin/start.js';
};

/** Alive and not a zombie waiting to be reaped. */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

const portOpen = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });

/**
 * What npm started (pid → its command line), killed if a test leaves it running; a pid reused since by another command
 * is left alone.
 */
const leftovers = new Map<number, string>();
function killLeftovers(): void {
  for (const [pid, command] of leftovers) {
    leftovers.delete(pid);
    if (!running(pid) || commandLine(pid).join(' ') !== command) continue;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
}
onProcessEnd(killLeftovers);

interface NpmRun {
  npm: ChildProcess;
  logs: string[];
  /** The node process running dist/bin/start.js under npm. */
  gateway: number;
}

/** `npm run <script>` as a supervisor starts it, until its gateway answers `probe` on `port`. */
async function npmRun(script: string, env: Record<string, string>, port: number, probe: string): Promise<NpmRun> {
  const npm = spawn('npm', ['run', script], {
    cwd: root,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '/root',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      SHUTDOWN_GRACE_MS: '5000',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: string[] = [];
  for (const stream of [npm.stdout!, npm.stderr!])
    stream.on('data', (data: Buffer) => logs.push(...data.toString().split('\n').filter(Boolean)));
  let gateway = 0;
  try {
    await waitFor(
      async () => {
        if (npm.exitCode !== null)
          throw new Error(`npm run ${script} exited with ${npm.exitCode}:\n${logs.join('\n')}`);
        const under = descendants(npm.pid!);
        for (const pid of under) if (!leftovers.has(pid)) leftovers.set(pid, commandLine(pid).join(' '));
        gateway ||= under.find(isGateway) ?? 0;
        const res = await fetch(`http://127.0.0.1:${port}${probe}`).catch(() => undefined);
        return gateway > 0 && res?.status === 200;
      },
      60_000,
      `npm run ${script} to answer ${probe}`,
    );
  } catch (error) {
    npm.kill('SIGKILL');
    killLeftovers();
    throw error;
  }
  return { npm, logs, gateway };
}

/**
 * Signals npm alone (as a supervisor does, not the process group as a terminal does) and waits for the gateway to be
 * gone.
 */
async function signalNpm(run: NpmRun, signal: NodeJS.Signals, port: number): Promise<void> {
  const npmExited = new Promise<void>((resolve) => run.npm.once('close', () => resolve()));
  run.npm.kill(signal);
  // The drain has nothing in flight and a 5 s grace: well within this, or it never drains.
  await waitFor(
    () => !running(run.gateway),
    20_000,
    `the gateway (pid ${run.gateway}) to exit after ${signal} to npm`,
  ).catch((error: Error) => {
    throw new Error(`${error.message}; still running: ${commandLine(run.gateway).join(' ')}\n${run.logs.join('\n')}`);
  });
  assert.equal(await portOpen(port), false, `port ${port} closed`);
  await npmExited;
  // Everything npm started is gone with it.
  for (const pid of leftovers.keys()) if (!running(pid)) leftovers.delete(pid);
}

describe('a signal to the npm start scripts reaches the gateway, which drains', () => {
  let redisUrl = '';
  let databaseUrl = '';
  before(async () => {
    const { url, redis } = await freshRedis(14);
    await redis.quit();
    redisUrl = url;
    databaseUrl = await recordUrlFor(url);
  });
  after(killLeftovers);

  it('every start script execs node, so node is the child npm signals', () => {
    for (const name of ['start', 'start:api', 'start:worker']) {
      assert.match(scripts[name] ?? '', /&& exec node dist\/bin\/start\.js\b/, name);
    }
  });

  it('SIGTERM to `npm run start:api`: the api drains, closes its port and exits', async () => {
    const port = await freePort();
    const run = await npmRun(
      'start:api',
      { REDIS_URL: redisUrl, DATABASE_URL: databaseUrl, PORT: String(port) },
      port,
      '/healthz',
    );
    await signalNpm(run, 'SIGTERM', port);
    const text = run.logs.join('\n');
    assert.match(text, /"signal":"SIGTERM"[^\n]*draining 0 requests/, 'the api logged its drain');
    assert.match(text, /"msg":"stopped"/, 'and its clean end');
  });

  it('SIGINT to `npm run start:worker`: the worker stops its jobs and its metrics listener, and exits', async () => {
    const port = await freePort();
    const run = await npmRun(
      'start:worker',
      { REDIS_URL: redisUrl, DATABASE_URL: databaseUrl, METRICS_PORT: String(port), WORKER_QUEUES: 'chat' },
      port,
      '/metrics',
    );
    await signalNpm(run, 'SIGINT', port);
    const text = run.logs.join('\n');
    assert.match(
      text,
      /"signal":"SIGINT"[^\n]*stopping: the jobs running here finish first/,
      'the worker logged its stop',
    );
    assert.match(text, /"msg":"stopped"/, 'and its clean end');
  });
});
