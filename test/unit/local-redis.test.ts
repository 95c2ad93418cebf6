import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { locateRedis } from '../../bin/local-redis.js';
import { freePort, processPrivateRedis } from '../support/redis-server.js';

describe('locateRedis (how npm start and the keys CLI find Redis)', () => {
  it('uses REDIS_URL as given when it answers', async () => {
    const { url } = await processPrivateRedis();
    const named = `${url}/3`;
    assert.deepEqual(await locateRedis({ REDIS_URL: named }, true), { url: named, source: 'REDIS_URL' });
  });

  it('ends in one line naming host and port, never the password, when REDIS_URL does not answer', async () => {
    const port = await freePort();
    await assert.rejects(
      () => locateRedis({ REDIS_URL: `redis://user:s3cret-pw@127.0.0.1:${port}` }, true),
      (error: Error) => error.message === `cannot reach Redis at 127.0.0.1:${port} (REDIS_URL): start it, or point REDIS_URL at one that runs.`,
    );
  });

  it('fails with one line naming the three ways out when nothing answers and redis-server is missing', async () => {
    const closed = `redis://127.0.0.1:${await freePort()}`;
    const dataDir = mkdtempSync(join(tmpdir(), 'sy-data-'));
    await assert.rejects(
      () => locateRedis({ PATH: '/nonexistent' }, true, { defaultUrl: closed, dataDir }),
      (error: Error) =>
        !error.message.includes('\n') &&
        error.message.includes('REDIS_URL') &&
        error.message.includes('redis-server') &&
        error.message.includes('docker compose up'),
    );
  });

  it('starts a private redis-server under the data dir, and finds it again later', async () => {
    const closed = `redis://127.0.0.1:${await freePort()}`;
    const dataDir = mkdtempSync(join(tmpdir(), 'sy-data-'));
    const env = { PATH: process.env.PATH };
    const first = await locateRedis(env, true, { defaultUrl: closed, dataDir });
    try {
      assert.equal(first.source, 'started');
      assert.equal(readFileSync(join(dataDir, 'redis.url'), 'utf8').trim(), first.url);
      const again = await locateRedis(env, false, { defaultUrl: closed, dataDir });
      assert.deepEqual(again, { url: first.url, source: 'private' });
    } finally {
      process.kill(Number(readFileSync(join(dataDir, 'redis.pid'), 'utf8')), 'SIGKILL');
    }
  });
});
