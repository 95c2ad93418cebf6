import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { hashSecret, KeyStore } from '../../api/accounts/key-store.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { recordUrlFor, testRecord } from '../support/record.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));

describe('deadlines and keep-alives', () => {
  let fake: FakeOpenAI;
  let redis: Redis;
  let apiKey: string;
  let gateway: GatewayProcess;
  let apiOnly: GatewayProcess;

  before(async () => {
    fake = await startFakeOpenAI();
    const fresh = await freshRedis(7);
    redis = fresh.redis;
    apiKey = (await createKey(redis)).key;
    const env = {
      REDIS_URL: fresh.url,
      OPENAI_API_KEY: 'sk-vendor',
      OPENAI_BASE_URL: fake.url,
      REQUEST_DEADLINE_MS_CHAT: '1500',
      SSE_KEEPALIVE_MS: '200',
    };
    gateway = await startGateway({ env });
    apiOnly = await startGateway({ role: 'api', env: { ...env, REDIS_URL: fresh.url.replace(/\/7$/, '/8') } });
  });

  after(async () => {
    await Promise.all([gateway?.stop(), apiOnly?.stop()]);
    await fake?.close();
    redis?.disconnect();
  });

  it('answers 504 when the vendor does not answer by the deadline, and aborts the vendor call', async () => {
    fake.enqueue({ hang: true });
    const started = Date.now();
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hang' }] }),
    });
    assert.equal(res.status, 504);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'timeout');
    assert.ok(Date.now() - started < 4000);
    await waitFor(() => fake.abortedRequests === 1, 2000, 'the vendor call aborted');
  });

  it('keeps a waiting stream alive with SSE comments, then ends it with a timeout event', async () => {
    // This api has no worker behind it (its Redis database has none), so the job only waits.
    const other = await freshRedis(8);
    const otherKey = (await createKey(other.redis)).key;
    other.redis.disconnect();
    const res = await fetch(`${apiOnly.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${otherKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'wait' }], stream: true }),
    });
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.match(text, /^: keep-alive\n\n/);
    const last = text.trim().split('\n\n').at(-1)!;
    assert.equal((JSON.parse(last.slice('data: '.length)) as { error: { code: string } }).error.code, 'timeout');
  });
});

describe('npm run keys', () => {
  it('creates, lists and revokes keys in the Redis the gateway uses', async () => {
    const { url, redis } = await freshRedis(9);
    try {
      const env = { ...process.env, REDIS_URL: url, DATABASE_URL: await recordUrlFor(url) };
      const created = await run(process.execPath, ['--import', 'tsx', 'bin/keys.ts', 'create', '--name', 'cli test'], {
        cwd: root,
        env,
      });
      const key = created.stdout.trim();
      assert.match(key, /^sy-[\w-]{40,}$/);
      const store = new KeyStore(redis, await testRecord(redis));
      const id = await store.lookup(hashSecret(key));
      assert.ok(id);
      const listed = await run(process.execPath, ['--import', 'tsx', 'bin/keys.ts', 'list'], { cwd: root, env });
      assert.match(listed.stdout, new RegExp(`${id}\\t.*\\tcli test`));
      assert.ok(!listed.stdout.includes(key));
      await run(process.execPath, ['--import', 'tsx', 'bin/keys.ts', 'revoke', id], { cwd: root, env });
      assert.equal(await store.lookup(hashSecret(key)), undefined);
      await assert.rejects(
        () => run(process.execPath, ['--import', 'tsx', 'bin/keys.ts', 'create'], { cwd: root, env }),
        /needs --name/,
      );
    } finally {
      redis.disconnect();
    }
  });
});
