import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import {
  freshRedis,
  paidAccountKey,
  requestRecord,
  startGateway,
  testKeyStore,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { startFakeAnthropic, type FakeAnthropic } from '../support/fake-anthropic.js';
import { testRecord } from '../support/record.js';
import { readBill, readKeySpend } from '../../shared/money/billing.js';
import { cacheBytesKey } from '../../shared/redis-keys.js';

/**
 * A hit and a shared call are requests like any other (issue 58): the key's rate of requests and the money hold
 * for them; a leader that goes away frees the requests waiting on it; what decides a body's size is what was read;
 * every header that changes an answer is in its key; `max-age=0` shortens nobody's entry.
 */
const model = 'gpt-4o-mini';
const deadlineMs = 8000;

describe('the response cache passes admission, and frees the requests waiting on a leader that went away', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;

  before(async () => {
    [openai, anthropic] = await Promise.all([startFakeOpenAI(), startFakeAnthropic()]);
    const fresh = await freshRedis(12);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: 'sk-openai-test',
        OPENAI_BASE_URL: openai.url,
        ANTHROPIC_API_KEY: 'sk-ant-test',
        ANTHROPIC_BASE_URL: anthropic.url,
        // Hits and shared calls cost the stored answer's full price: the money rules are seen.
        CACHE_HIT_PRICE: '1',
        CACHE_MAX_REQUEST_BYTES: '4096',
        // One chat job at a time: a request queued behind a slow one stays queued, deterministically.
        WORKER_CONCURRENCY_CHAT: '1',
        REQUEST_DEADLINE_MS_CHAT: String(deadlineMs),
        FLEX_DEADLINE_MS: String(4 * deadlineMs),
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), anthropic?.close()]);
    redis?.disconnect();
  });

  const calls = () => openai.requests.filter((request) => request.path.endsWith('/chat/completions')).length;
  const body = (content: string, extra: Record<string, unknown> = {}) =>
    JSON.stringify({ model, max_tokens: 16, messages: [{ role: 'user', content }], ...extra });
  const post = (
    key: string,
    text: string,
    headers: Record<string, string> = { 'cache-control': 'max-age=600' },
    signal?: AbortSignal,
  ) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
      body: text,
      ...(signal ? { signal } : {}),
    });
  const answered = async (response: Response) => ({
    status: response.status,
    cache: response.headers.get('cache-status'),
    body: (await response.json()) as { error?: { code?: string; type?: string } },
  });

  it('counts a hit against the key’s requests per minute: past it, 429 rate_limit_exceeded', async () => {
    openai.reset();
    const { key } = await paidAccountKey(redis, 50_000_000, { rpm: 3 });
    const text = body('Rate me');
    const seen = [];
    for (let i = 0; i < 5; i++) seen.push(await answered(await post(key, text)));
    assert.deepEqual(
      seen.map((answer) => [answer.status, answer.cache?.replace(/; ttl=\d+/, '') ?? null]),
      [
        [200, 'Switchyard; fwd=miss; stored'],
        [200, 'Switchyard; hit'],
        [200, 'Switchyard; hit'],
        [429, null],
        [429, null],
      ],
    );
    assert.equal(seen[3]!.body.error?.code, 'rate_limit_exceeded');
    assert.equal(calls(), 1);
  });

  it('refuses a hit past the key’s rate on /v1/messages in Anthropic’s dialect', async () => {
    anthropic.reset();
    const { key } = await paidAccountKey(redis, 50_000_000, { rpm: 2 });
    const ask = () =>
      fetch(`${gateway.url}/v1/messages`, {
        method: 'POST',
        headers: {
          'x-api-key': key,
          'anthropic-version': '2023-06-01',
          'content-type': 'application/json',
          'cache-control': 'max-age=600',
        },
        body: JSON.stringify({
          model: 'claude-sonnet-4-5',
          max_tokens: 16,
          messages: [{ role: 'user', content: 'Rate my messages' }],
        }),
      });
    const first = await ask();
    const second = await ask();
    const third = await ask();
    assert.deepEqual([first.status, second.status, third.status], [200, 200, 429]);
    assert.match(second.headers.get('cache-status') ?? '', /hit/);
    const refused = (await third.json()) as {
      type: string;
      error: { type: string; message: string };
      request_id: string;
    };
    assert.equal(refused.type, 'error');
    assert.equal(refused.error.type, 'rate_limit_error');
    assert.match(refused.error.message, /Rate limit reached for this API key: 2 requests per minute/);
    assert.equal(refused.request_id, third.headers.get('request-id'));
    assert.ok(Number(third.headers.get('retry-after')) >= 1);
  });

  it('counts a request sharing another’s call against the key’s requests per minute', async () => {
    openai.reset();
    openai.enqueue({ delayMs: 800 });
    const { key } = await paidAccountKey(redis, 50_000_000, { rpm: 2 });
    const text = body('Share me');
    const all = await Promise.all(Array.from({ length: 5 }, () => post(key, text).then(answered)));
    const statuses = all.map((answer) => answer.status).sort();
    assert.deepEqual(statuses, [200, 200, 429, 429, 429]);
    for (const refused of all.filter((answer) => answer.status === 429))
      assert.equal(refused.body.error?.code, 'rate_limit_exceeded');
    assert.deepEqual(
      all
        .filter((answer) => answer.status === 200)
        .map((answer) => answer.cache)
        .sort(),
      ['Switchyard; fwd=miss; collapsed', 'Switchyard; fwd=miss; stored'],
    );
    assert.equal(calls(), 1);
  });

  it(
    'refuses a request waiting on another’s call whose key is revoked meanwhile: 401, its price given back, ' +
      'nothing billed',
    async () => {
      openai.reset();
      openai.enqueue({ delayMs: 1200 });
      const leader = await paidAccountKey(redis, 50_000_000);
      const keys = await testKeyStore(redis);
      // A second key of the same account: an identical request of it follows the first's call.
      const follower = await keys.create('follower', { accountId: leader.account });
      const text = body('Wait for me, then find my key gone');
      const led = post(leader.key, text).then(answered);
      await waitFor(() => calls() === 1, 5000, 'the leader at the vendor');
      const followed = post(follower.key, text).then(answered);
      // The follower is admitted and waiting when its key is revoked.
      await waitFor(
        async () =>
          (await readBill(redis, leader.account))!.reservedMicros > 0 &&
          ((await readKeySpend(redis, leader.account, follower.id))?.reservedMicros ?? 0) > 0,
        5000,
        'the follower admitted',
      );
      assert.equal(await keys.revoke(follower.id), true);
      const [lead, refused] = await Promise.all([led, followed]);
      assert.equal(lead.status, 200);
      assert.equal(refused.status, 401, JSON.stringify(refused.body));
      assert.equal(refused.body.error?.code, 'invalid_api_key');
      assert.equal(calls(), 1, 'the follower made no call of its own');
      await waitFor(
        async () => (await readBill(redis, leader.account))!.reservedMicros === 0,
        5000,
        'every reservation given back or settled',
      );
      const spend = await readKeySpend(redis, leader.account, follower.id);
      assert.equal(spend?.spentMicros ?? 0, 0, 'the revoked key spent nothing');
    },
  );

  it(
    'serves the streams admitted when the leader they set out to follow is refused: one of them runs the call, the ' +
      'other follows it',
    async () => {
      openai.reset();
      openai.enqueue({ delayMs: 800 });
      const { key } = await paidAccountKey(redis, 50_000_000, { rpm: 2 });
      const text = body('Stream and share me', { stream: true });
      const all = await Promise.all(
        Array.from({ length: 5 }, () =>
          post(key, text).then(async (response) => ({
            status: response.status,
            cache: response.headers.get('cache-status'),
            text: await response.text(),
          })),
        ),
      );
      assert.deepEqual(all.map((answer) => answer.status).sort(), [200, 200, 429, 429, 429]);
      const served = all.filter((answer) => answer.status === 200);
      for (const answer of served) {
        assert.match(answer.text, /data: \[DONE\]\n\n$/, 'a whole stream');
        assert.doesNotMatch(answer.text, /shared_call_failed|"error"/);
      }
      assert.equal(calls(), 1, 'one vendor call for the two admitted');
    },
  );

  it(
    'with CACHE_HIT_PRICE=1, refuses a hit that a key’s limit or the balance cannot pay, and no balance or spend ' +
      'passes its limit (the record agrees)',
    async () => {
      openai.reset();
      const keys = await testKeyStore(redis);
      const { key: primer, account } = await paidAccountKey(redis, 50_000_000);
      const text = body('Pay for me');
      const first = await post(primer, text);
      assert.equal(first.status, 200);
      const price = (await requestRecord(gateway.url, primer, first.headers.get('x-request-id')!)).cost_micros;
      assert.ok(price > 0, 'the answer has a price');

      // A key of the same account that may spend two and a half answers: two hits, then 429 insufficient_quota.
      const limited = await keys.create('limited', { accountId: account, limitMicros: Math.floor(price * 2.5) });
      const byLimited = [];
      for (let i = 0; i < 4; i++) byLimited.push(await answered(await post(limited.key, text)));
      assert.deepEqual(
        byLimited.map((answer) => answer.status),
        [200, 200, 429, 429],
      );
      assert.equal(byLimited[2]!.body.error?.code, 'insufficient_quota');
      assert.equal((await readKeySpend(redis, account, limited.id))!.spentMicros, 2 * price);

      // The account's balance brought down to two and a half answers: two hits, then 429 insufficient_quota.
      const before = (await readBill(redis, account))!.balanceMicros!;
      await keys.accounts.credit(account, Math.floor(price * 2.5) - before, 'test: down to 2.5 answers');
      const byPrimer = [];
      for (let i = 0; i < 4; i++) byPrimer.push(await answered(await post(primer, text)));
      assert.deepEqual(
        byPrimer.map((answer) => answer.status),
        [200, 200, 429, 429],
      );
      assert.equal(byPrimer[3]!.body.error?.code, 'insufficient_quota');
      const bill = (await readBill(redis, account))!;
      assert.equal(bill.balanceMicros, Math.floor(price * 2.5) - 2 * price);
      assert.equal(bill.reservedMicros, 0);
      assert.equal(calls(), 1, 'every other answer was a hit');

      // The record: one row per answer served (1 miss + 4 hits), its sum what the balance moved by, never below zero.
      const record = await testRecord(redis);
      let rows: Array<{ key_id: string; cost_micros: number | string; cache: string | null }> = [];
      await waitFor(
        async () => {
          rows = await record
            .selectFrom('usage')
            .select(['key_id', 'cost_micros', 'cache'])
            .where('account_id', '=', account)
            .where('status', '=', 'completed')
            .execute();
          return rows.length >= 5;
        },
        15_000,
        'the usage rows to reach the record',
      );
      assert.equal(rows.length, 5);
      assert.equal(rows.filter((row) => row.cache === 'hit').length, 4);
      const spent = rows.reduce((sum, row) => sum + Number(row.cost_micros), 0);
      assert.equal(spent, 5 * price);
      const accountRow = await record
        .selectFrom('accounts')
        .select(['credits_micros'])
        .where('id', '=', account)
        .executeTakeFirstOrThrow();
      assert.ok(
        Number(accountRow.credits_micros) - spent >= 0,
        `credits ${accountRow.credits_micros} less usage ${spent} never below zero`,
      );
      assert.equal(Number(accountRow.credits_micros) - spent, bill.balanceMicros);
      const limitedSpent = rows
        .filter((row) => row.key_id === limited.id)
        .reduce((sum, row) => sum + Number(row.cost_micros), 0);
      assert.ok(limitedSpent <= Math.floor(price * 2.5));
    },
  );

  it('refuses a request that would share a call when its price held cannot be paid, with no reservation left behind', async () => {
    openai.reset();
    openai.enqueue({ delayMs: 800 });
    const keys = await testKeyStore(redis);
    const { key: rich, account } = await paidAccountKey(redis, 50_000_000);
    const poor = await keys.create('poor', { accountId: account, limitMicros: 1 });
    const text = body('Share if you can');
    const leader = post(rich, text).then(answered);
    await waitFor(() => calls() === 1, 5000, 'the leader’s call');
    const follower = await answered(await post(poor.key, text));
    assert.equal(follower.status, 429);
    assert.equal(follower.body.error?.code, 'insufficient_quota');
    assert.equal((await leader).status, 200);
    assert.equal((await readKeySpend(redis, account, poor.id))!.reservedMicros, 0);
    assert.equal((await readBill(redis, account))!.reservedMicros, 0);
  });

  /** Keeps the one chat worker busy for `ms` with a call of its own (not cached). */
  const occupy = (key: string, ms: number, extra: Record<string, unknown> = {}) => {
    openai.setDefault((request) => (JSON.stringify(request.body).includes('Occupy') ? { delayMs: ms } : undefined));
    return post(key, body(`Occupy ${Math.random()}`, extra), {}).then(answered);
  };

  it('lets an identical request run at once when the queued leader’s client leaves', async () => {
    openai.reset();
    const { key } = await paidAccountKey(redis, 50_000_000);
    const busy = occupy(key, 3000);
    await waitFor(() => calls() === 1, 5000, 'the worker to be busy');
    const text = body('Leader leaves');
    const leaving = new AbortController();
    const leader = post(key, text, undefined, leaving.signal).catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 700));
    leaving.abort();
    await leader;
    await new Promise((resolve) => setTimeout(resolve, 300));
    const again = await answered(await post(key, text));
    assert.equal(again.status, 200, 'answered, not left waiting on a job that was taken out');
    assert.equal(again.cache, 'Switchyard; fwd=miss; stored', 'its own call');
    assert.equal((await busy).status, 200);
  });

  it('wakes the identical request waiting on a queued leader when the leader’s deadline passes: it runs its own call', async () => {
    openai.reset();
    const { key } = await paidAccountKey(redis, 50_000_000);
    // A flex call (its own, longer deadline) holds the one worker past the leader's deadline.
    const busy = occupy(key, deadlineMs + 1000, { service_tier: 'flex' });
    await waitFor(() => calls() === 1, 5000, 'the worker to be busy');
    const text = body('Leader expires');
    const leader = post(key, text).then(answered);
    await new Promise((resolve) => setTimeout(resolve, deadlineMs / 2));
    // Identical, sent while the leader waits: it waits on the leader's call (its own deadline is half a deadline
    // later).
    const follower = post(key, text).then(answered);
    assert.equal((await leader).status, 504, 'the leader waited in the queue past its deadline');
    const followed = await follower;
    assert.equal(
      followed.status,
      200,
      'woken when the leader was taken out, it ran its own call once the worker was free',
    );
    assert.equal(followed.cache, 'Switchyard; fwd=miss; stored');
    assert.equal((await busy).status, 200);
  });

  it(
    'lets an identical request run when the leader is refused, and the requests waiting on a leader whose call ' +
      'failed run their own',
    async () => {
      openai.reset();
      const keys = await testKeyStore(redis);
      const { key, account } = await paidAccountKey(redis, 50_000_000);
      const refusedKey = await keys.create('refused', { accountId: account, limitMicros: 1 });
      const text = body('Leader refused');
      const refused = await answered(await post(refusedKey.key, text));
      assert.equal(refused.status, 429);
      const after = await answered(await post(key, text));
      assert.equal(after.status, 200);
      assert.equal(after.cache, 'Switchyard; fwd=miss; stored');

      // A leader whose vendor call fails: the one waiting on it runs its own, admitted and billed once.
      openai.reset();
      openai.enqueue({
        delayMs: 600,
        status: 400,
        json: { error: { message: 'bad', type: 'invalid_request_error', param: null, code: null } },
      });
      const failing = body('Leader fails');
      const leader = post(key, failing).then(answered);
      await waitFor(() => calls() === 1, 5000, 'the leader’s call');
      const follower = await answered(await post(key, failing));
      assert.equal((await leader).status, 400);
      assert.equal(follower.status, 200);
      assert.equal(follower.cache, 'Switchyard; fwd=miss; stored');
      assert.equal(
        (await readBill(redis, account))!.reservedMicros,
        0,
        'its shared reservation given back, its own settled',
      );
    },
  );

  it('does not store a chunked body larger than CACHE_MAX_REQUEST_BYTES, as it does not store one with a length', async () => {
    openai.reset();
    const { key, account } = await paidAccountKey(redis, 50_000_000);
    const large = body(`Large ${'x'.repeat(6000)}`);
    const chunked = () =>
      fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'cache-control': 'max-age=600' },
        body: new ReadableStream({
          start(controller) {
            const bytes = new TextEncoder().encode(large);
            for (let at = 0; at < bytes.length; at += 1000) controller.enqueue(bytes.subarray(at, at + 1000));
            controller.close();
          },
        }),
        duplex: 'half',
      } as RequestInit);
    const first = await chunked();
    assert.equal(first.status, 200);
    assert.equal(first.headers.get('cache-status'), null, 'not cached: no Cache-Status');
    assert.equal(await redis.exists(cacheBytesKey(account)), 0, 'nothing stored for the account');
    const second = await chunked();
    assert.equal(second.headers.get('cache-status'), null);
    assert.equal(calls(), 2);
    // A small chunked body is cached as any other.
    const small = body('Small chunked');
    const send = () => post(key, small);
    await send();
    assert.match((await send()).headers.get('cache-status') ?? '', /hit/);
  });

  it('keeps apart answers made under different anthropic-beta flags, whatever their order and spacing', async () => {
    anthropic.reset();
    const { key } = await paidAccountKey(redis, 50_000_000);
    const ask = (beta?: string) =>
      fetch(`${gateway.url}/v1/messages`, {
        method: 'POST',
        headers: {
          'x-api-key': key,
          'anthropic-version': '2023-06-01',
          'content-type': 'application/json',
          'cache-control': 'max-age=600',
          ...(beta === undefined ? {} : { 'anthropic-beta': beta }),
        },
        body: JSON.stringify({
          model: 'claude-sonnet-4-5',
          max_tokens: 16,
          messages: [{ role: 'user', content: 'Beta or not' }],
        }),
      });
    const statuses = [];
    for (const beta of [
      undefined,
      'output-128k-2025-02-19',
      'interleaved-thinking-2025-05-14,output-128k-2025-02-19',
      ' output-128k-2025-02-19 , interleaved-thinking-2025-05-14',
      undefined,
    ]) {
      const response = await ask(beta);
      assert.equal(response.status, 200);
      statuses.push((response.headers.get('cache-status') ?? '').replace(/; ttl=\d+/, ''));
    }
    assert.deepEqual(statuses, [
      'Switchyard; fwd=miss; stored',
      'Switchyard; fwd=miss; stored',
      'Switchyard; fwd=miss; stored',
      'Switchyard; hit',
      'Switchyard; hit',
    ]);
    const vendorBetas = anthropic.requests
      .filter((request) => request.path.endsWith('/messages'))
      .map((request) => request.headers['anthropic-beta'] ?? '');
    assert.deepEqual(vendorBetas, [
      '',
      'output-128k-2025-02-19',
      'interleaved-thinking-2025-05-14,output-128k-2025-02-19',
    ]);
  });

  it('leaves a fresh entry alone when a request with max-age=0 asks the vendor', async () => {
    openai.reset();
    const { key } = await paidAccountKey(redis, 50_000_000);
    const text = body('Zero age');
    const seen = [];
    for (const age of [3600, 3600, 0, 3600])
      seen.push(
        ((await post(key, text, { 'cache-control': `max-age=${age}` })).headers.get('cache-status') ?? '').replace(
          /; ttl=\d+/,
          '',
        ),
      );
    assert.deepEqual(seen, [
      'Switchyard; fwd=miss; stored',
      'Switchyard; hit',
      'Switchyard; fwd=miss',
      'Switchyard; hit',
    ]);
    assert.equal(calls(), 2);
  });
});
