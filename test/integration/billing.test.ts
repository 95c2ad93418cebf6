import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { settledKey } from '../../shared/redis-keys.js';
import { readBill, readKeySpend } from '../../shared/money/billing.js';
import type { KeyLimits } from '../../api/accounts/key-store.js';
import { loadCatalog } from '../../shared/catalog.js';
import { PriceList } from '../../shared/money/pricing.js';
import { countChatPromptTokensAsync } from '../../shared/tokens.js';
import type { ChatCompletionRequest } from '../../shared/schemas/chat.js';
import {
  createKey,
  freshRedis,
  paidAccountKey,
  startGateway,
  testKeyStore,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';
import { testRecord, waitForUsage } from '../support/record.js';

// Offline the mock serves gpt-4o-mini at gpt-4o-mini's prices: real money, no vendor.
const model = 'gpt-4o-mini';
const prices = new PriceList(loadCatalog().all());

async function worstCase(request: OpenAI.ChatCompletionCreateParamsNonStreaming): Promise<number> {
  const payload = request as unknown as ChatCompletionRequest;
  const promptTokens = await countChatPromptTokensAsync(payload.messages, null);
  return prices.worstCaseMicros(model, { endpoint: 'chat.completions', payload }, promptTokens).micros;
}

const small = (content = 'Say hi.'): OpenAI.ChatCompletionCreateParamsNonStreaming => ({
  model,
  messages: [{ role: 'user', content }],
  max_tokens: 1,
});

describe('billing through the gateway', () => {
  let redis: Redis;
  let url: string;
  let gateway: GatewayProcess;

  before(async () => {
    ({ redis, url } = await freshRedis(12));
    // A stream whose client leaves is cancelled once this short resume grace has passed with nobody resuming it.
    gateway = await startGateway({ env: { REDIS_URL: url, STREAM_RESUME_GRACE_MS: '300' } });
  });
  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });
  beforeEach(() => gateway.logs.splice(0));

  /**
   * A key with `limits` on its own account holding `balance` micros (or unlimited), made through the stores as the
   * admin API makes them.
   */
  async function paidKey(
    balance: number | 'unlimited',
    limits: KeyLimits = {},
  ): Promise<{ id: string; key: string; account: string }> {
    return paidAccountKey(redis, balance, limits);
  }

  const chatRequests = () =>
    gateway.logs.filter((line) => line.includes('"path":"/v1/chat/completions"') && line.includes('"msg":"request"'))
      .length;
  const spent = async (account: string, keyId: string) => (await readKeySpend(redis, account, keyId))?.spentMicros ?? 0;
  const keyReserved = async (account: string, keyId: string) =>
    (await readKeySpend(redis, account, keyId))?.reservedMicros ?? 0;
  const balance = async (account: string) => (await readBill(redis, account))?.balanceMicros ?? 0;
  const accountReserved = async (account: string) => (await readBill(redis, account))?.reservedMicros ?? 0;

  it(
    'answers 429 insufficient_quota when the balance cannot cover the worst case, and the official client does not ' +
      'retry it',
    async () => {
      const { key } = await paidKey(1);
      const client = new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 2 });
      const error = await client.chat.completions.create(small()).then(
        () => assert.fail('expected a 429'),
        (caught: unknown) => caught,
      );
      assert.ok(error instanceof OpenAI.RateLimitError);
      assert.equal(error.status, 429);
      assert.equal(error.code, 'insufficient_quota');
      assert.equal(error.type, 'insufficient_quota');
      assert.equal(error.headers?.get('x-should-retry'), 'false');
      // The refusal and the enqueue travel together: the job never entered the queue, and nothing is left under its id.
      const requestId = error.headers?.get('x-request-id');
      assert.ok(requestId);
      assert.equal(await redis.exists(`bull:{chat}:${requestId}`), 0);
      assert.equal(await redis.zcard('bull:{chat}:prioritized'), 0);
      // Every attempt the client made ended before it gave up; their access-log lines may reach us just after.
      await waitFor(() => chatRequests() >= 1, 5000, 'the access log line');
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(chatRequests(), 1, 'x-should-retry: false: no retries');
    },
  );

  it('settles a served request at its actual cost, once, and records its usage', async () => {
    const { id, account, key } = await paidKey(1_000_000);
    const client = new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
    const request = small('Tell me about billing.');
    const completion = await client.chat.completions.create(request);
    const expected = prices.costMicros(model, {
      inputTokens: completion.usage!.prompt_tokens,
      cachedTokens: 0,
      outputTokens: completion.usage!.completion_tokens,
      images: 0,
      audioSeconds: 0,
      videoSeconds: 0,
    });
    assert.ok(expected > 0);
    await waitFor(async () => (await spent(account, id)) === expected, 5000, 'settlement');
    assert.equal(await keyReserved(account, id), 0);
    assert.equal(await accountReserved(account), 0);
    assert.equal(await balance(account), 1_000_000 - expected);
    const record = await waitForUsage(redis, (r) => r.key_id === id);
    assert.equal(record.cost_micros, expected);
    assert.equal(record.status, 'completed');
    assert.equal(record.input_tokens, completion.usage!.prompt_tokens);
    assert.equal(record.output_tokens, completion.usage!.completion_tokens);
    // The mark that stops a second attempt from billing again is kept a minute once the job has completed (past any
    // failover that could bring the job back), not until 15 min past its deadline: few keys per request in flight.
    await waitFor(
      async () => {
        const ttl = await redis.pttl(settledKey(account, record.request_id as string));
        return ttl > 0 && ttl <= 60_000;
      },
      5000,
      'the settled mark to be shortened',
    );
  });

  it('reserves a stored Responses request once: nothing stays held once it is served and settled', async () => {
    const { id, account, key } = await paidKey(1_000_000);
    const client = new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
    const response = await client.responses.create({ model, input: 'Reserve me once.' });
    assert.equal(response.status, 'completed');
    await waitFor(async () => (await spent(account, id)) > 0, 5000, 'settlement');
    await waitFor(async () => (await keyReserved(account, id)) === 0, 5000, 'the key to hold nothing');
    assert.equal(await accountReserved(account), 0);
    assert.equal(await balance(account), 1_000_000 - (await spent(account, id)));
  });

  it('limits requests per minute with OpenAI headers, and the official client retry succeeds once the window allows', async () => {
    const { key } = await paidKey('unlimited', { rpm: 60 });
    const raw = async () =>
      fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(small()),
      });
    const started = Date.now();
    const first = await raw();
    assert.equal(first.status, 200);
    assert.equal(first.headers.get('x-ratelimit-limit-requests'), '60');
    assert.equal(first.headers.get('x-ratelimit-remaining-requests'), '59');
    assert.match(first.headers.get('x-ratelimit-reset-requests')!, /^\d+(\.\d)?s$|^\d+ms$/);
    const burst = await Promise.all(
      Array.from({ length: 59 }, () => raw().then(async (r) => (await r.text(), r.status))),
    );
    assert.ok(
      burst.every((status) => status === 200),
      "a minute's worth comes at once",
    );
    // A request a second comes back as the minute goes by (GCRA): on a slow machine the burst may have taken
    // longer than a second, and then one more is owed per second elapsed, and no more.
    let limited = await raw();
    for (let owed = 0; limited.status === 200;) {
      await limited.text();
      owed++;
      assert.ok(
        owed <= Math.ceil((Date.now() - started) / 1000),
        `admitted ${owed} past the minute's worth within ${Date.now() - started} ms`,
      );
      limited = await raw();
    }
    assert.equal(limited.status, 429);
    const body = (await limited.json()) as { error: { type: string; code: string } };
    assert.deepEqual([body.error.type, body.error.code], ['requests', 'rate_limit_exceeded']);
    assert.equal(limited.headers.get('retry-after'), '1');
    assert.ok(
      Number(limited.headers.get('retry-after-ms')) > 0 && Number(limited.headers.get('retry-after-ms')) <= 1000,
    );
    assert.equal(limited.headers.get('x-ratelimit-remaining-requests'), '0');

    const client = new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 3 });
    const completion = await client.chat.completions.create(small());
    assert.equal(completion.object, 'chat.completion');
  });

  it('sends the rate-limit headers on a streamed answer too', async () => {
    const { key } = await paidKey('unlimited', { rpm: 100, tpm: 100_000 });
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...small(), stream: true }),
    });
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /text\/event-stream/);
    assert.equal(response.headers.get('x-ratelimit-limit-requests'), '100');
    assert.equal(response.headers.get('x-ratelimit-remaining-requests'), '99');
    assert.equal(response.headers.get('x-ratelimit-limit-tokens'), '100000');
    assert.ok(Number(response.headers.get('x-ratelimit-remaining-tokens')) < 100_000);
    assert.match(await response.text(), /data: \[DONE\]/);
  });

  it('refuses a model the key may not use with 403 model_not_allowed', async () => {
    const { key } = await paidKey('unlimited', { models: ['mock-chat'] });
    const client = new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
    const error = await client.chat.completions.create(small()).catch((caught: unknown) => caught);
    assert.ok(error instanceof OpenAI.PermissionDeniedError);
    assert.equal(error.code, 'model_not_allowed');
    assert.equal((await client.chat.completions.create({ ...small(), model: 'mock-chat' })).object, 'chat.completion');
  });

  it('bills a stream the client left (and did not resume within the grace) for what the vendor produced', async () => {
    const { id: keyId, key, account } = await paidKey(10_000_000);
    const controller = new AbortController();
    const stream = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      signal: controller.signal,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model,
        stream: true,
        messages: [{ role: 'user', content: 'Write a long story [mock:slow:100]' }],
      }),
    });
    const reader = stream.body!.getReader();
    let seen = '';
    while ((seen.match(/"content":"[^"]+"/g) ?? []).length < 3)
      seen += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    const requestId = stream.headers.get('x-request-id')!;
    await waitFor(
      async () => (await redis.exists(settledKey(account, requestId))) === 1,
      10_000,
      'the cancelled stream to be settled',
    );
    const record = await waitForUsage(redis, (r) => r.request_id === requestId);
    assert.equal(record.status, 'cancelled');
    assert.ok(Number(record.output_tokens) >= 3, `output tokens counted: ${record.output_tokens}`);
    assert.ok(Number(record.cost_micros) > 0);
    assert.equal(await spent(account, keyId), Number(record.cost_micros));
    assert.equal(await keyReserved(account, keyId), 0);
  });
});

describe('billing across two api and two worker processes', () => {
  let redis: Redis;
  const processes: GatewayProcess[] = [];

  before(async () => {
    const fresh = await freshRedis(13);
    redis = fresh.redis;
    for (const role of ['api', 'api', 'worker', 'worker'] as const)
      processes.push(await startGateway({ role, env: { REDIS_URL: fresh.url } }));
  });
  after(async () => {
    await Promise.all(processes.map((p) => p.stop()));
    redis?.disconnect();
  });

  it('serves at most what the key limit covers when 1,000 requests race, and never spends past it', async () => {
    const apis = processes.filter((p) => p.logs.some((l) => l.includes('gateway listening')));
    assert.equal(apis.length, 2);
    const request = small();
    const send = (key: string, api: GatewayProcess) => raceRequest(key, api, request);
    // What one such request really costs: the limit covers exactly 100 of them.
    const probe = await send((await createKey(redis, 'probe')).key, apis[0]!);
    const actual = prices.costMicros(model, {
      inputTokens: probe.usage!.prompt_tokens,
      cachedTokens: 0,
      outputTokens: probe.usage!.completion_tokens,
      images: 0,
      audioSeconds: 0,
      videoSeconds: 0,
    });
    assert.ok(actual > 0 && actual <= (await worstCase(request)));
    const limit = 100 * actual;

    const created = await paidAccountKey(redis, 10 ** 9, { limitMicros: limit });
    const { account } = created;
    const results = await Promise.all(Array.from({ length: 1000 }, (_, i) => send(created.key, apis[i % 2]!)));
    const served = results.filter((r) => r.status === 'ok').length;
    assert.ok(served <= 100 && served >= 1, `served ${served}`);
    assert.deepEqual(
      [...new Set(results.filter((r) => r.status !== 'ok').map((r) => r.status))],
      ['insufficient_quota'],
    );
    await waitFor(
      async () => (await readKeySpend(redis, account, created.id))?.reservedMicros === 0,
      10_000,
      'every reservation settled',
    );
    const spent = (await readKeySpend(redis, account, created.id))!.spentMicros;
    assert.ok(spent <= limit, `spent ${spent} of ${limit}`);
    assert.equal(spent, served * actual, 'each served request billed once, at its actual cost');
    await assertRecordMatches(redis, account, [created.id], served);
  });

  it('never takes an account below zero when 1,000 requests on two of its keys race', async () => {
    const apis = processes.filter((p) => p.logs.some((l) => l.includes('gateway listening')));
    const request = small('Share the balance.');
    const probe = await raceRequest((await createKey(redis, 'probe')).key, apis[0]!, request);
    const actual = prices.costMicros(model, {
      inputTokens: probe.usage!.prompt_tokens,
      cachedTokens: 0,
      outputTokens: probe.usage!.completion_tokens,
      images: 0,
      audioSeconds: 0,
      videoSeconds: 0,
    });
    const balance = 100 * actual;
    const first = await paidAccountKey(redis, balance);
    const { account } = first;
    const keys = [first, await (await testKeyStore(redis)).create('two', { accountId: account })];
    const results = await Promise.all(
      Array.from({ length: 1000 }, (_, i) => raceRequest(keys[i % 2]!.key, apis[(i >> 1) % 2]!, request)),
    );
    const served = results.filter((r) => r.status === 'ok').length;
    assert.ok(served <= 100 && served >= 1, `served ${served}`);
    await waitFor(
      async () => (await readBill(redis, account))?.reservedMicros === 0,
      10_000,
      'every reservation settled',
    );
    const left = (await readBill(redis, account))!.balanceMicros!;
    assert.ok(left >= 0, `balance ${left}`);
    assert.equal(left, balance - served * actual);
    let spent = 0;
    for (const k of keys) spent += (await readKeySpend(redis, account, k.id))!.spentMicros;
    assert.equal(spent, served * actual);
    await assertRecordMatches(
      redis,
      account,
      keys.map((k) => k.id),
      served,
    );
  });

  /**
   * The record agrees with Redis to the micro-dollar once the writer caught up: one usage row per served request,
   * each key's spend and the account's settled total equal to what Redis counted.
   */
  async function assertRecordMatches(redis: Redis, account: string, keyIds: string[], served: number): Promise<void> {
    const record = await testRecord(redis);
    const redisSpent = new Map<string, number>();
    for (const id of keyIds) redisSpent.set(id, (await readKeySpend(redis, account, id))!.spentMicros);
    const total = [...redisSpent.values()].reduce((a, b) => a + b, 0);
    await waitFor(
      async () => {
        const row = await record
          .selectFrom('usage')
          .select((eb) => [eb.fn.countAll<number>().as('rows'), eb.fn.sum<number>('cost_micros').as('sum')])
          .where('account_id', '=', account)
          .where('cost_micros', '>', 0)
          .executeTakeFirstOrThrow();
        return Number(row.rows) === served && Number(row.sum) === total;
      },
      15_000,
      'the usage rows to reach the record',
    );
    const keysRows = await record
      .selectFrom('api_keys')
      .select(['id', 'spent_micros'])
      .where('id', 'in', keyIds)
      .execute();
    for (const row of keysRows)
      assert.equal(row.spent_micros, redisSpent.get(row.id), `key ${row.id}: the record's spend is Redis's`);
    const accountRow = await record
      .selectFrom('accounts')
      .select(['credits_micros', 'settled_micros'])
      .where('id', '=', account)
      .executeTakeFirstOrThrow();
    assert.equal(accountRow.settled_micros, total, "the account's settled total is what its keys spent");
    assert.equal(
      accountRow.credits_micros - accountRow.settled_micros,
      (await readBill(redis, account))!.balanceMicros,
      "the record's balance is Redis's",
    );
  }

  async function raceRequest(key: string, api: GatewayProcess, request: OpenAI.ChatCompletionCreateParamsNonStreaming) {
    const response = await fetch(`${api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(request),
    });
    const body = (await response.json()) as {
      error?: { code: string };
      usage?: { prompt_tokens: number; completion_tokens: number };
    };
    return {
      status: response.status === 200 ? 'ok' : (body.error?.code ?? String(response.status)),
      usage: body.usage,
    };
  }
});
