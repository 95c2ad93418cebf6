import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import type OpenAI from 'openai';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { startFakeAnthropic, type FakeAnthropic } from '../support/fake-anthropic.js';
import { adminClient } from '../support/admin-client.js';
import { freshRedis, paidAccountKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { openRecord } from '../../storage/record/database.js';
import { bandStart, readBacklog } from '../../shared/scheduling/index.js';
import { recordUrlFor } from '../support/record.js';

/*
 * The scheduler through real gateway processes: a capped vendor's flood waits
 * in its own lane, so a request to another vendor is not held behind it, and
 * another account's request to the same vendor is served next, not after the
 * flood; an admin's weight is kept and shown; the wait is seen per tier and
 * account in /metrics.
 */

const adminToken = 'scheduler-admin-token';
const openaiModel = 'gpt-4o-mini';
const anthropicModel = 'claude-sonnet-4-6';

describe('the scheduler through the gateway', () => {
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let redis: Redis;
  let url: string;
  let gateway: GatewayProcess;

  before(async () => {
    [openai, anthropic] = await Promise.all([startFakeOpenAI({ latencyMs: 250 }), startFakeAnthropic()]);
    const fresh = await freshRedis(11);
    redis = fresh.redis;
    url = fresh.url;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        ADMIN_TOKEN: adminToken,
        OPENAI_API_KEY: 'sk-capped',
        OPENAI_BASE_URL: openai.url,
        OPENAI_MAX_CONCURRENCY: '2',
        ANTHROPIC_API_KEY: 'sk-ant-free',
        ANTHROPIC_BASE_URL: anthropic.url,
        // The per-account wait in /metrics is an operator's choice (off by default).
        METRICS_PER_ACCOUNT: 'on',
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), anthropic?.close()]);
    redis?.disconnect();
  });

  const ask = (client: OpenAI, model: string) =>
    client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 16 });

  it('a flood to a capped vendor holds up neither another vendor nor another account of the same vendor', async () => {
    const flooder = await paidAccountKey(redis, 'unlimited');
    const quiet = await paidAccountKey(redis, 'unlimited');
    const other = await paidAccountKey(redis, 'unlimited');
    const done: string[] = [];
    // 24 calls at 2 at a time, 250 ms each: the flood takes about 3 s to drain.
    const flood = Array.from({ length: 24 }, () =>
      ask(gateway.client(flooder.key), openaiModel).then(() => void done.push('flood')),
    );
    await waitFor(
      async () => (await redis.zcard('bull:{lane@openai}:prioritized')) >= 12,
      10_000,
      'the flood to wait in the OpenAI lane',
    );
    const floodDoneBefore = done.length;
    const quietCall = ask(gateway.client(quiet.key), openaiModel).then(() => void done.push('quiet-openai'));
    const otherCall = ask(gateway.client(other.key), anthropicModel).then(() => void done.push('other-anthropic'));
    await Promise.all([...flood, quietCall, otherCall]);

    const otherAt = done.indexOf('other-anthropic');
    assert.ok(
      otherAt - floodDoneBefore <= 2,
      `the Anthropic request waited behind ${otherAt - floodDoneBefore} OpenAI calls: ${done.join(' ')}`,
    );
    const quietAt = done.indexOf('quiet-openai');
    // The two calls in flight and at most one taken with it before it, and one more when a call ended (and the next
    // was taken) while the quiet request was on its way to the queue: it is served next, not after the other 12+.
    assert.ok(
      quietAt - floodDoneBefore <= 5,
      `the quiet OpenAI request waited behind ${quietAt - floodDoneBefore} of the flood's calls: ${done.join(' ')}`,
    );
    assert.ok(openai.maxInFlight <= 2, `the vendor saw ${openai.maxInFlight} calls at once`);
  });

  it('where nothing waits (an uncapped vendor, idle workers), a job goes untagged to the head of its tier’s band', async () => {
    const account = await paidAccountKey(redis, 'unlimited');
    const client = gateway.client(account.key);
    for (const tier of ['flex', 'priority'] as const) {
      const answer = await client.chat.completions
        .create({
          model: anthropicModel,
          messages: [{ role: 'user', content: tier }],
          service_tier: tier,
        } as OpenAI.ChatCompletionCreateParamsNonStreaming)
        .withResponse();
      const id = answer.response.headers.get('x-request-id')!;
      const [priority, data] = await redis.hmget(`bull:{chat}:${id}`, 'priority', 'data');
      assert.equal(Number(priority), bandStart(tier), `a ${tier} job waits at its band's head`);
      assert.equal(
        (JSON.parse(data!) as { contended?: boolean }).contended,
        undefined,
        'not placed among waiting work',
      );
    }
    // Counted while it waited, uncounted once taken.
    await waitFor(
      async () => (await readBacklog(redis, '{chat}')).length === 0,
      5_000,
      'the backlog to be empty again',
    );
  });

  it('shows the wait per tier and account in /metrics', async () => {
    const account = await paidAccountKey(redis, 'unlimited');
    await gateway.client(account.key).chat.completions.create({
      model: openaiModel,
      messages: [{ role: 'user', content: 'flex' }],
      service_tier: 'flex',
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    await waitFor(
      async () =>
        (await (await fetch(`${gateway.url}/metrics`)).text()).includes(
          `switchyard_queue_wait_seconds_count{queue="chat",tier="flex",account="${account.account}"} 1`,
        ),
      10_000,
      'the flex wait of the account in /metrics',
    );
  });

  it('keeps an admin’s weight in the record and shows it; refuses one out of range', async () => {
    const { admin } = adminClient(() => gateway.url, adminToken);
    const account = (await admin('POST', '/admin/accounts', { email: 'weighted@example.com' })).json as unknown as {
      id: string;
      weight: number;
    };
    assert.equal(account.weight, 1, 'the default weight');
    const patched = await admin('PATCH', `/admin/accounts/${account.id}`, { weight: 3 });
    assert.equal(patched.status, 200);
    assert.equal(patched.json.weight, 3);
    assert.equal((await admin('GET', `/admin/accounts/${account.id}`)).json.weight, 3);
    assert.equal((await admin('PATCH', `/admin/accounts/${account.id}`, { weight: 0 })).status, 400);
    assert.equal((await admin('PATCH', `/admin/accounts/${account.id}`, { weight: 101 })).status, 400);
    const record = await openRecord(await recordUrlFor(url), { max: 1, migrate: false });
    try {
      const row = await record
        .selectFrom('accounts')
        .select('weight')
        .where('id', '=', account.id)
        .executeTakeFirstOrThrow();
      assert.equal(row.weight, 3, 'kept in the record');
    } finally {
      await record.destroy();
    }
  });
});
