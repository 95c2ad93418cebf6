import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { locateRedis } from '../../bin/local-redis.js';
import { freePort, processPrivateRedis } from '../support/redis-server.js';
import { processAlive } from '../../storage/record/embedded-engine.js';

async function gone(pid: number): Promise<boolean> {
  for (let i = 0; i < 100 && processAlive(pid); i++) await new Promise((r) => setTimeout(r, 50));
  return !processAlive(pid);
}

const made: string[] = [];
/** A data dir of its own, removed when the tests are done. */
function tempDataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'sy-data-'));
  made.push(dir);
  return dir;
}

describe('locateRedis (how npm start and the keys CLI find Redis)', () => {
  after(() => made.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

  it('uses REDIS_URL as given when it answers, and never stops it', async () => {
    const { url } = await processPrivateRedis();
    const named = `${url}/3`;
    const located = await locateRedis({ REDIS_URL: named }, true);
    assert.equal(located.url, named);
    assert.equal(located.source, 'REDIS_URL');
    assert.match(located.described, /\(REDIS_URL\)$/);
    assert.equal(await located.release(), 'not ours');
    const client = new Redis(url);
    assert.equal(await client.ping(), 'PONG');
    client.disconnect();
  });

  it('ends in one line naming host and port, never the password, when REDIS_URL does not answer', async () => {
    const port = await freePort();
    await assert.rejects(
      () => locateRedis({ REDIS_URL: `redis://user:s3cret-pw@127.0.0.1:${port}` }, true),
      (error: Error) =>
        error.message ===
        `cannot reach Redis at 127.0.0.1:${port} (REDIS_URL): start it, or point REDIS_URL at one that runs.`,
    );
  });

  it('fails with one line naming the three ways out when nothing answers and redis-server is missing', async () => {
    const closed = `redis://127.0.0.1:${await freePort()}`;
    const dataDir = tempDataDir();
    await assert.rejects(
      () => locateRedis({ PATH: '/nonexistent' }, true, { defaultUrl: closed, dataDir }),
      (error: Error) =>
        !error.message.includes('\n') &&
        error.message.includes('REDIS_URL') &&
        error.message.includes('redis-server') &&
        error.message.includes('docker compose up'),
    );
  });

  it('starts a private redis-server under the data dir, finds it again, and the last user stops it', async () => {
    const closed = `redis://127.0.0.1:${await freePort()}`;
    const dataDir = tempDataDir();
    const env = { PATH: process.env.PATH };
    const first = await locateRedis(env, true, { defaultUrl: closed, dataDir });
    const pid = Number(readFileSync(join(dataDir, 'redis.pid'), 'utf8'));
    try {
      assert.equal(first.source, 'started');
      assert.match(first.described, new RegExp(`started a private redis-server under ${dataDir} .*\\(pid ${pid}\\)`));
      assert.equal(readFileSync(join(dataDir, 'redis.url'), 'utf8').trim(), first.url);
      // A second user (another gateway, a CLI) finds the same one, and while it holds a connection the first leaves it
      // running.
      const again = await locateRedis(env, false, { defaultUrl: closed, dataDir });
      assert.equal(again.url, first.url);
      assert.equal(again.source, 'private');
      const user = new Redis(again.url);
      await user.ping();
      assert.equal(await first.release(), 'kept');
      assert.ok(processAlive(pid), 'still running for the other user');
      user.disconnect();
      // The last user stops it, and the next start does not look for it at the old address.
      assert.equal(await again.release(), 'stopped');
      assert.ok(await gone(pid), 'redis-server stopped');
      assert.ok(!existsSync(join(dataDir, 'redis.url')));
    } finally {
      if (processAlive(pid)) process.kill(pid, 'SIGKILL');
    }
  });

  it('prefers its private redis-server to a Redis that merely answers at the default address, and says so', async () => {
    const other = await processPrivateRedis();
    const dataDir = tempDataDir();
    const located = await locateRedis({ PATH: process.env.PATH }, true, { defaultUrl: other.url, dataDir });
    const pid = Number(readFileSync(join(dataDir, 'redis.pid'), 'utf8'));
    try {
      assert.equal(located.source, 'started');
      assert.notEqual(located.url, other.url);
      assert.ok(
        located.described.includes(
          `a Redis also answers at 127.0.0.1:${new URL(other.url).port}: set REDIS_URL to use that one instead`,
        ),
        located.described,
      );
    } finally {
      await located.release();
      if (processAlive(pid)) process.kill(pid, 'SIGKILL');
    }
  });

  it('uses a Redis at the default address only when no private one can run, as a warning naming it', async () => {
    const other = await processPrivateRedis();
    const dataDir = tempDataDir();
    const located = await locateRedis({ PATH: '/nonexistent' }, true, { defaultUrl: other.url, dataDir });
    assert.equal(located.source, 'default');
    assert.equal(located.warning, true);
    assert.ok(
      located.described.includes(`the Redis that answers at 127.0.0.1:${new URL(other.url).port} (its database 0)`),
      located.described,
    );
    assert.match(located.described, /set REDIS_URL/);
    assert.equal(await located.release(), 'not ours', 'a Redis it did not start is never stopped');
  });
});
