import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import {
  freshRedis,
  onLines,
  spawnGateway,
  startGateway,
  waitFor,
  createKey,
  type GatewayProcess,
} from '../support/gateway.js';
import { freePort } from '../support/redis-server.js';
import { freshDatabase, recordUrlFor } from '../support/record.js';
import { prettyLine } from '../../shared/logger.js';
import { processAlive } from '../../storage/record/embedded-engine.js';

/*
 * What `npm start` says when it starts and stops (issue 37, item 7): for a
 * person (LOG_FORMAT=pretty, as a terminal gets) short lines naming the URL,
 * the console, how to get a key, the record and the Redis and who started
 * them; JSON lines for machines; a port in use or a PostgreSQL that is not
 * there told in one line before anything starts; the private redis-server
 * under DATA_DIR shared with the keys CLI and stopped with the gateway;
 * DATA_DIR holding the private Redis and the blobs.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const baseEnv = () => ({
  PATH: process.env.PATH ?? '',
  HOME: process.env.HOME ?? '/root',
  HOST: '127.0.0.1',
  MOCK_STREAM_DELAY_MS: '5',
});

/** Runs a `bin/` script through tsx in an environment holding only `env`; its output, both streams, and its exit. */
async function runScript(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number | null; stdout: string; output: string; ms: number }> {
  const started = Date.now();
  const proc = spawn(process.execPath, ['--import', 'tsx', ...args], {
    cwd: root,
    env: { ...baseEnv(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let output = '';
  proc.stdout.on('data', (d: Buffer) => ((stdout += d.toString()), (output += d.toString())));
  proc.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const [code] = (await once(proc, 'close')) as [number | null];
  return { code, stdout, output, ms: Date.now() - started };
}

/** Collects a process's lines, both streams, as they come. */
function collectLines(proc: ChildProcess): string[] {
  const lines: string[] = [];
  onLines(proc, (line) => {
    lines.push(line);
    if (process.env.TEST_GATEWAY_LOGS) process.stderr.write(`[start] ${line}\n`);
  });
  return lines;
}

describe('npm start with nothing named but DATA_DIR, as a person sees it (LOG_FORMAT=pretty)', () => {
  let dataDir: string;
  let databaseUrl: string;
  let proc: ChildProcess;
  let lines: string[];
  let base: string;
  let redisPid: number;

  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'sy-start-'));
    databaseUrl = await freshDatabase('start_lines');
    // No REDIS_URL: the start finds (here: starts) the private redis-server under DATA_DIR, whatever answers on 6379.
    // npm_lifecycle_event: as `npm start` runs it (npm forwards the SIGINT a terminal also sends).
    proc = await spawnGateway('all', {
      LOG_FORMAT: 'pretty',
      DATA_DIR: dataDir,
      DATABASE_URL: databaseUrl,
      ADMIN_EMAIL: 'lines@example.com',
      ADMIN_PASSWORD: 'lines-password-1',
      npm_lifecycle_event: 'start',
    });
    lines = collectLines(proc);
    await waitFor(
      () => lines.some((l) => l.includes('gateway ready')),
      60_000,
      `the gateway ready line:\n${lines.join('\n')}`,
    );
    base = /gateway listening on (http:\/\/127\.0\.0\.1:\d+)\/v1/.exec(lines.join('\n'))![1]!;
    redisPid = Number(readFileSync(join(dataDir, 'redis.pid'), 'utf8'));
  });

  after(() => {
    if (proc && proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    if (redisPid && processAlive(redisPid)) process.kill(redisPid, 'SIGKILL');
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it(
    'says in short lines where to go: the URL, the console, how to get a key, the record, the Redis and who ' +
      'started it',
    () => {
      const text = lines.join('\n');
      assert.ok(
        lines.every((l) => !l.startsWith('{')),
        `no JSON line:\n${text}`,
      );
      // `HH:MM:SS LEVEL message`, nothing else before the message.
      const say = (pattern: RegExp) =>
        assert.ok(
          lines.some((l) => /^\d\d:\d\d:\d\d (INFO |WARN ) /.test(l) && pattern.test(l)),
          `${pattern}:\n${text}`,
        );
      say(new RegExp(`gateway listening on ${base}/v1`));
      say(new RegExp(`console at ${base}/console \\(sign in as lines@example\\.com\\)`));
      say(
        new RegExp(`API keys: make one in the console or with \`npm run keys -- create --name NAME\`.*call ${base}/v1`),
      );
      const port = new URL(databaseUrl).port || '5432';
      say(
        new RegExp(
          `the record is in PostgreSQL at 127\\.0\\.0\\.1:${port}/${new URL(databaseUrl).pathname.slice(1)} ` +
            `\\(DATABASE_URL\\)`,
        ),
      );
      say(
        new RegExp(
          `Redis: started a private redis-server under ${dataDir} at 127\\.0\\.0\\.1:\\d+ \\(pid ${redisPid}\\); ` +
            `it stops when this process stops`,
        ),
      );
      say(/gateway ready/);
    },
  );

  it('the keys CLI, with the same DATA_DIR, uses the same Redis and leaves it running for the gateway', async () => {
    const made = await runScript(['bin/keys.ts', 'create', '--name', 'from the cli'], {
      DATA_DIR: dataDir,
      DATABASE_URL: databaseUrl,
    });
    assert.equal(made.code, 0, made.output);
    const key = made.stdout.trim();
    assert.ok(processAlive(redisPid), 'the private redis-server still runs');
    // The key the CLI made is one the gateway knows at once: one Redis (and one record) between them.
    const res = await fetch(`${base}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(res.status, 200);

    // DATA_DIR holds the blobs too: an image answered by URL is kept under DATA_DIR/blobs.
    const image = await fetch(`${base}/v1/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-image', prompt: 'a fox', size: '256x256', response_format: 'url' }),
    });
    assert.equal(image.status, 200, await image.clone().text());
    const imagesDir = join(dataDir, 'blobs', 'images');
    await waitFor(
      () => existsSync(imagesDir) && readdirSync(imagesDir).length > 0,
      5000,
      'the image under DATA_DIR/blobs',
    );
    assert.ok(!existsSync(join(root, '.data', 'blobs', 'images', readdirSync(imagesDir)[0]!)), 'not under ./.data');
  });

  it(
    'Ctrl-C drains and stops the gateway and its private redis-server; the keys CLI then starts it for its command ' +
      'and stops it after',
    async () => {
      const closed = once(proc, 'close');
      // Under npm, a terminal's Ctrl-C reaches the gateway twice, from the terminal and forwarded by npm, milliseconds
      // apart: one Ctrl-C, a drain (not exit 130).
      proc.kill('SIGINT');
      await new Promise((r) => setTimeout(r, 30));
      proc.kill('SIGINT');
      const [code] = (await closed) as [number | null];
      assert.equal(code, 0, lines.join('\n'));
      assert.ok(
        lines.some((l) => l.includes('draining 0 requests')) && !lines.some((l) => l.includes('second interrupt')),
        lines.join('\n'),
      );
      assert.ok(
        lines.some((l) => l.includes('stopped the private redis-server (nothing else used it)')),
        lines.join('\n'),
      );
      await waitFor(() => !processAlive(redisPid), 5000, 'the private redis-server gone');
      assert.ok(!existsSync(join(dataDir, 'redis.url')), 'no stale address left');
      // Its data stays under DATA_DIR (append-only file), for the next start.
      assert.ok(existsSync(join(dataDir, 'appendonlydir')), readdirSync(dataDir).join(', '));

      const listed = await runScript(['bin/keys.ts', 'list'], { DATA_DIR: dataDir, DATABASE_URL: databaseUrl });
      assert.equal(listed.code, 0, listed.output);
      assert.match(listed.stdout, /\tfrom the cli$/m);
      // Its own redis-server under DATA_DIR (the gateway's second start of it there), stopped when the command ended.
      const redisLog = readFileSync(join(dataDir, 'redis.log'), 'utf8');
      assert.equal(redisLog.match(/Ready to accept connections/g)?.length, 2, redisLog);
      assert.equal(redisLog.match(/ready to exit, bye bye/g)?.length, 2, redisLog);
      assert.ok(
        !existsSync(join(dataDir, 'redis.url')) && !existsSync(join(dataDir, 'redis.pid')),
        readdirSync(dataDir).join(', '),
      );
    },
  );
});

describe('npm start for machines, and the starts that cannot start', () => {
  let redis: Redis;
  let url: string;
  let gateway: GatewayProcess;

  before(async () => {
    ({ redis, url } = await freshRedis(11));
    // Not a terminal and LOG_FORMAT unset: JSON, as a container or a log collector gets.
    gateway = await startGateway({ env: { REDIS_URL: url } });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it('every line is JSON, and names the record (no password) and the Redis', async () => {
    const entries = gateway.logs.map((line) => {
      try {
        return JSON.parse(line) as { msg: string; level: number; redis?: string; source?: string; database?: string };
      } catch {
        return assert.fail(`not JSON: ${line}`);
      }
    });
    const record = new URL(await recordUrlFor(url));
    assert.ok(
      entries.some(
        (e) =>
          e.msg ===
          `the record is in PostgreSQL at ${record.hostname}:${record.port || 5432}${record.pathname} (DATABASE_URL)`,
      ),
      gateway.logs.join('\n'),
    );
    const port = new URL(url).port;
    assert.ok(
      entries.some(
        (e) =>
          e.source === 'REDIS_URL' &&
          e.redis === `127.0.0.1:${port}` &&
          e.msg === `Redis at 127.0.0.1:${port} (REDIS_URL)`,
      ),
      gateway.logs.join('\n'),
    );
    assert.ok(entries.some((e) => e.msg.startsWith('API keys: ')));
  });

  it('a request refused while draining is logged as a warning, without a stack', async () => {
    const { key } = await createKey(redis);
    // A slow request keeps the drain open while a new one is refused.
    const slow = fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mock-chat',
        messages: [{ role: 'user', content: 'take your time [mock:slow:2500]' }],
      }),
    });
    await waitFor(() => gateway.logs.length > 0, 1000);
    await new Promise((r) => setTimeout(r, 300));
    const stopped = gateway.stop('SIGTERM');
    await waitFor(() => gateway.logs.some((l) => l.includes('draining')), 5000, 'the drain');
    const refused = await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(refused.status, 503);
    assert.equal((await slow).status, 200);
    assert.equal(await stopped, 0);
    const line = gateway.logs.find((l) => l.includes('The server is shutting down'));
    assert.ok(line, gateway.logs.join('\n'));
    const entry = JSON.parse(line) as { level: number; err?: unknown; code?: string };
    assert.equal(entry.level, 40, line);
    assert.equal(entry.err, undefined, line);
    assert.ok(!line.includes('stack'), line);
  });

  it('a port in use ends the start at once, in one line naming PORT, before Redis or the record is touched', async () => {
    const holder: Server = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', () => resolve()));
    const port = (holder.address() as { port: number }).port;
    const dataDir = mkdtempSync(join(tmpdir(), 'sy-busy-'));
    try {
      // No REDIS_URL, no DATABASE_URL: anything it started would show under DATA_DIR.
      const result = await runScript(['bin/start.ts'], { PORT: String(port), DATA_DIR: dataDir });
      assert.equal(result.code, 1, result.output);
      const lines = result.output.trim().split('\n');
      assert.equal(lines.length, 1, result.output);
      assert.match(
        lines[0]!,
        new RegExp(
          `^switchyard: port ${port} on 127\\.0\\.0\\.1 is in use \\(another gateway\\?\\): stop it, or set PORT ` +
            `to a free port \\(PORT=${port + 1} npm start\\); nothing was started$`,
        ),
      );
      assert.deepEqual(readdirSync(dataDir), [], 'no Redis started, no record made');
      // Loosely quick: no Redis started, no record opened (a full start takes several seconds more).
      assert.ok(result.ms < 30_000, `${result.ms} ms`);
    } finally {
      holder.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('a PostgreSQL that is not there ends npm start, a worker and the CLIs in one line, never the password', async () => {
    const port = await freePort();
    const databaseUrl = `postgres://gateway:pg-secret-41@127.0.0.1:${port}/switchyard`;
    const says = new RegExp(
      `^switchyard( keys| accounts)?: cannot reach PostgreSQL at 127\\.0\\.0\\.1:${port}/switchyard ` +
        `\\(DATABASE_URL\\): connection refused — is it running\\?$`,
    );
    for (const args of [
      ['bin/start.ts'],
      ['bin/start.ts', '--role=worker'],
      ['bin/keys.ts', 'list'],
      ['bin/accounts.ts', 'list'],
    ]) {
      const result = await runScript(args, {
        PORT: '0',
        REDIS_URL: url,
        DATABASE_URL: databaseUrl,
        LOG_FORMAT: 'json',
      });
      assert.equal(result.code, 1, `${args.join(' ')}: ${result.output}`);
      const lines = result.output.trim().split('\n');
      assert.equal(lines.length, 1, result.output);
      assert.match(lines[0]!, says, args.join(' '));
      assert.ok(!result.output.includes('pg-secret-41'), 'no password');
    }
  });
});

describe('a pretty line (LOG_FORMAT=pretty)', () => {
  const at = new Date(2026, 0, 2, 3, 4, 5).getTime();
  it('is the time, the level, the message and only the fields it does not already say', () => {
    const line = prettyLine(
      JSON.stringify({
        level: 30,
        time: at,
        pid: 1,
        name: 'switchyard-all',
        port: 8080,
        host: '127.0.0.1',
        instance: 'api-1',
        msg: 'gateway listening on http://127.0.0.1:8080/v1',
      }),
    );
    assert.equal(line, '03:04:05 INFO  gateway listening on http://127.0.0.1:8080/v1  instance=api-1');
    assert.equal(
      prettyLine(JSON.stringify({ level: 40, time: at, msg: 'slow', ms: 12, path: '/v1/x y' }), '[worker] '),
      '03:04:05 WARN  [worker] slow  ms=12 path="/v1/x y"',
    );
  });

  it(
    "says an error's message on the line, and its stack below only from ERROR up; a line that is not JSON is kept " +
      'as it is',
    () => {
      const err = { type: 'Error', message: 'connect ECONNREFUSED', stack: 'Error: connect ECONNREFUSED\n    at here' };
      assert.equal(
        prettyLine(JSON.stringify({ level: 40, time: at, msg: 'retrying', err })),
        '03:04:05 WARN  retrying: connect ECONNREFUSED',
      );
      assert.equal(
        prettyLine(JSON.stringify({ level: 50, time: at, msg: 'failed', err })),
        '03:04:05 ERROR failed: connect ECONNREFUSED\n    Error: connect ECONNREFUSED\n        at here',
      );
      assert.equal(prettyLine('not json\n'), 'not json');
    },
  );
});
