import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { locateRedis } from '../../bin/local-redis.js';
import { freePort } from '../support/redis-server.js';

describe('locateRedis (how npm start and the keys CLI find Redis)', () => {
  it('uses REDIS_URL as given', async () => {
    assert.deepEqual(await locateRedis({ REDIS_URL: 'redis://example:1' }, true), { url: 'redis://example:1', source: 'REDIS_URL' });
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
