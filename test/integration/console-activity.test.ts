import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { ConsoleClient, type ConsoleResponse } from '../support/console-client.js';
import { testRecord, usageRows } from '../support/record.js';
import { writeLog, type LogRow } from '../../storage/record/usage-writer.js';
import type { RequestView } from '../../shared/money/usage.js';
import type { ActivityPage, ModelLatency } from '../../shared/console-api.js';

/*
 * The console's Activity API (the request log as a signed-in person reads it)
 * and the usage report's latency, against a real gateway: members and an
 * admin signed in through the console, requests made with their keys against
 * the built-in mock vendor, and rows with older times written to the record
 * the way the usage writer writes the api's log events.
 */

const adminEmail = 'root@activity.test';
const adminPassword = 'root-password-1';
const model = 'gpt-4o-mini';

type Key = { id: string; key: string };
type Account = { id: string };
type Row = RequestView;
type Page = ActivityPage;
interface Histogram {
  object: 'histogram';
  bucket_seconds: number;
  since: number;
  until: number;
  data: Array<{ start: number; requests: number; errors: number }>;
}
type Latency = ModelLatency;

function expectError(res: ConsoleResponse<object>, status: number, code: string | null, param?: string): void {
  assert.equal(res.status, status, JSON.stringify(res.json));
  assert.equal(res.json.error?.code, code, JSON.stringify(res.json));
  assert.equal(typeof res.json.error?.message, 'string');
  assert.ok(res.json.error!.message.length > 0);
  assert.ok('param' in res.json.error! && 'type' in res.json.error!);
  if (param !== undefined) assert.equal(res.json.error!.param, param, JSON.stringify(res.json));
}

const ids = (rows: Row[]) => rows.map((row) => row.id).sort();

describe('console activity API', () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let addressCounter = 0;
  const client = () => new ConsoleClient(gateway.url, `203.0.113.${++addressCounter}`);
  let admin: ConsoleClient;

  interface Person {
    console: ConsoleClient;
    account: Account;
    keys: Key[];
  }
  let alice: Person;
  let bob: Person;
  let carol: Person;
  /** Every request id each made, by key, and the ids that ended other than completed, by status. */
  const made = new Map<string, string[]>();
  const byStatus = new Map<string, string[]>();
  /** Carol's rows, written with times hours ago; `base` is the whole hour they start from. */
  let base = 0;
  let carolRows: LogRow[] = [];

  async function person(email: string, keyNames: string[]): Promise<Person> {
    const created = await admin.request<Account>('POST', '/console/api/admin/accounts', {
      email,
      password: 'member-password',
      role: 'member',
    });
    assert.equal(created.status, 201, JSON.stringify(created.json));
    assert.equal(
      (await admin.request('POST', `/console/api/admin/accounts/${created.json.id}/credits`, { amount_usd: 5 })).status,
      200,
    );
    const console = client();
    assert.equal((await console.signIn(email, 'member-password')).status, 200);
    const keys: Key[] = [];
    for (const name of keyNames) {
      const key = await console.request<Key>('POST', '/console/api/keys', { name });
      assert.equal(key.status, 201);
      keys.push(key.json);
      made.set(key.json.id, []);
    }
    return { console, account: created.json, keys };
  }

  /** A request with a key, its id noted under the key (and under its status when it is not a completion). */
  async function call(key: Key, body: unknown, expected: { status: number; logged?: string }): Promise<void> {
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    await res.arrayBuffer();
    assert.equal(res.status, expected.status);
    const id = res.headers.get('x-request-id')!;
    made.get(key.id)!.push(id);
    if (expected.logged) byStatus.set(expected.logged, [...(byStatus.get(expected.logged) ?? []), id]);
  }

  const list = (who: ConsoleClient, query = '') => who.request<Page>('GET', `/console/api/requests${query}`);
  const histogram = (who: ConsoleClient, query = '') =>
    who.request<Histogram>('GET', `/console/api/requests/histogram${query}`);
  const madeBy = (p: Person) => p.keys.flatMap((key) => made.get(key.id)!).sort();

  before(async () => {
    let url: string;
    ({ redis, url } = await freshRedis(15));
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        TRUST_PROXY: 'on',
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        ADMIN_TOKEN: 'activity-admin-token',
      },
    });
    admin = client();
    assert.equal((await admin.signIn(adminEmail, adminPassword)).status, 200);
    alice = await person('alice@activity.test', ['alice one', 'alice two']);
    bob = await person('bob@activity.test', ['bob one']);
    carol = await person('carol@activity.test', ['carol one']);

    const [a1, a2] = alice.keys as [Key, Key];
    for (let i = 0; i < 3; i++)
      await call(a1, { model, messages: [{ role: 'user', content: `hello ${i}` }], max_tokens: 8 }, { status: 200 });
    await call(
      a1,
      { model, stream: true, messages: [{ role: 'user', content: 'Count slowly [mock:slow:20]' }], max_tokens: 4 },
      { status: 200 },
    );
    await call(a1, { model, messages: 'not a list' }, { status: 400, logged: 'refused' });
    await call(
      a1,
      { model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] },
      { status: 404, logged: 'refused' },
    );
    await call(
      a1,
      { model, messages: [{ role: 'user', content: 'Fail [mock:error:400]' }] },
      { status: 400, logged: 'failed' },
    );
    for (let i = 0; i < 2; i++)
      await call(
        a2,
        { model: 'gpt-4o', messages: [{ role: 'user', content: `second key ${i}` }], max_tokens: 8 },
        { status: 200 },
      );
    for (let i = 0; i < 2; i++)
      await call(
        bob.keys[0]!,
        { model, messages: [{ role: 'user', content: `bob ${i}` }], max_tokens: 8 },
        { status: 200 },
      );

    // Every request's record whole: the api's half (its latency) and, unless it was refused, the worker's.
    const expected = new Set([...made.values()].flat());
    await waitFor(
      async () => {
        const rows = (await usageRows(redis)).filter((row) => expected.has(row.request_id));
        return (
          rows.length === expected.size &&
          rows.every((row) => row.latency_ms !== null && (row.status === 'refused' || row.settled))
        );
      },
      15_000,
      'every request in the record',
    );

    // Carol's, as the writer writes the api's log events: four requests over the last few hours, two not completed.
    base = Math.floor(Date.now() / 1000 / 3600) * 3600 - 5 * 3600;
    const carolKey = carol.keys[0]!.id;
    const row = (n: number, created: number, status: string, http: number): LogRow => ({
      request_id: `req_carol_${n}`,
      account_id: carol.account.id,
      key_id: carolKey,
      model: 'mock-chat',
      endpoint: 'chat.completions',
      stream: false,
      status,
      http_status: http,
      error_code: status === 'completed' ? null : 'invalid_value',
      latency_ms: 100 * n,
      ttft_ms: null,
      created,
    });
    carolRows = [
      row(1, base + 10, 'completed', 200),
      row(2, base + 20, 'refused', 400),
      row(3, base + 3600 + 5, 'failed', 502),
      row(4, base + 3 * 3600, 'completed', 200),
    ];
    const record = await testRecord(redis);
    await record.transaction().execute((tx) => writeLog(tx, carolRows));
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it('answers 401 not_signed_in without a session', async () => {
    const anonymous = client();
    await anonymous.open();
    for (const path of [
      '/console/api/requests',
      '/console/api/requests/histogram',
      `/console/api/requests?account_id=${alice.account.id}`,
    ]) {
      expectError(await anonymous.request('GET', path), 401, 'not_signed_in');
    }
    const stale = await fetch(`${gateway.url}/console/api/requests`, {
      headers: { cookie: 'sy_session=not-a-session' },
    });
    assert.equal(stale.status, 401);
  });

  it('shows a member only their own account’s requests, whatever account_id they pass', async () => {
    const own = await list(alice.console, '?limit=100');
    assert.equal(own.status, 200, JSON.stringify(own.json));
    assert.equal(own.json.object, 'list');
    assert.deepEqual(ids(own.json.data), madeBy(alice));
    assert.ok(own.json.data.every((row) => row.account_id === alice.account.id));
    assert.equal(own.headers.get('cache-control'), 'no-store');
    // Naming another account changes nothing: still only their own.
    const forced = await list(alice.console, `?limit=100&account_id=${bob.account.id}`);
    assert.equal(forced.status, 200);
    assert.deepEqual(ids(forced.json.data), madeBy(alice));
    const bobs = await list(bob.console, `?limit=100&account_id=${alice.account.id}`);
    assert.deepEqual(ids(bobs.json.data), madeBy(bob));
    // Another account's key, or its time range, is not a way in either.
    const aliceKey = await list(bob.console, `?key_id=${alice.keys[0]!.id}`);
    assert.deepEqual(aliceKey.json, {
      object: 'list',
      data: [],
      has_more: false,
      next_cursor: null,
      counts: { requests: 0, completed: 0, failed: 0, cancelled: 0, refused: 0 },
    });
    const carolsHours = await list(
      bob.console,
      `?account_id=${carol.account.id}&since=${base}&until=${base + 4 * 3600}`,
    );
    assert.deepEqual(carolsHours.json.data, []);
    // Their histogram counts theirs only.
    const counted = await histogram(bob.console, `?account_id=${alice.account.id}`);
    assert.equal(
      counted.json.data.reduce((sum, bar) => sum + bar.requests, 0),
      madeBy(bob).length,
    );
  });

  it('shows an admin every account’s requests, and one account’s with account_id', async () => {
    const all = await list(admin, '?limit=100');
    assert.equal(all.status, 200);
    const everyone = [...madeBy(alice), ...madeBy(bob), ...carolRows.map((row) => row.request_id)].sort();
    assert.deepEqual(ids(all.json.data), everyone);
    for (const p of [alice, bob]) {
      const one = await list(admin, `?limit=100&account_id=${p.account.id}`);
      assert.deepEqual(ids(one.json.data), madeBy(p));
    }
    const carols = await list(admin, `?account_id=${carol.account.id}`);
    assert.deepEqual(
      carols.json.data.map((row) => row.id),
      ['req_carol_4', 'req_carol_3', 'req_carol_2', 'req_carol_1'],
    );
    assert.deepEqual((await list(admin, '?account_id=acct_nobody')).json.data, []);
    // The first page counts the whole filter's requests by how each ended, refusals included; a page after it does not.
    const firstTwo = await list(admin, `?account_id=${carol.account.id}&limit=2`);
    assert.deepEqual(firstTwo.json.counts, { requests: 4, completed: 2, failed: 1, cancelled: 0, refused: 1 });
    const lastTwo = await list(
      admin,
      `?account_id=${carol.account.id}&limit=2&cursor=${encodeURIComponent(firstTwo.json.next_cursor!)}`,
    );
    assert.equal(lastTwo.json.counts, undefined);
    assert.deepEqual((await list(admin, `?account_id=${carol.account.id}&status=refused`)).json.counts, {
      requests: 1,
      completed: 0,
      failed: 0,
      cancelled: 0,
      refused: 1,
    });
  });

  it('filters by key, model, status and time', async () => {
    const [a1, a2] = alice.keys as [Key, Key];
    assert.deepEqual(
      ids((await list(alice.console, `?limit=100&key_id=${a2.id}`)).json.data),
      [...made.get(a2.id)!].sort(),
    );
    assert.deepEqual(
      ids((await list(alice.console, `?limit=100&key_id=${a1.id}`)).json.data),
      [...made.get(a1.id)!].sort(),
    );

    const gpt4o = (await list(alice.console, '?limit=100&model=gpt-4o')).json.data;
    assert.deepEqual(ids(gpt4o), [...made.get(a2.id)!].sort());
    const unknownModel = (await list(alice.console, '?model=no-such-model')).json.data;
    assert.equal(unknownModel.length, 1);
    assert.deepEqual([unknownModel[0]!.status, unknownModel[0]!.http_status], ['refused', 404]);

    const refused = (await list(alice.console, '?limit=100&status=refused')).json.data;
    assert.deepEqual(ids(refused), [...byStatus.get('refused')!].sort());
    assert.ok(
      refused.every(
        (row) =>
          row.status === 'refused' && row.http_status! >= 400 && row.error_code && row.cost_usd === 0 && !row.settled,
      ),
    );
    const failed = (await list(alice.console, '?status=failed')).json.data;
    assert.deepEqual(ids(failed), byStatus.get('failed'));
    assert.equal(failed[0]!.error_code, 'mock_error');
    const completed = (await list(alice.console, '?limit=100&status=completed')).json.data;
    assert.equal(completed.length, madeBy(alice).length - 3);
    assert.ok(completed.every((row) => row.settled && row.cost_usd > 0 && row.latency_ms !== null));
    assert.equal(completed.filter((row) => row.ttft_ms !== null).length, 1, 'the one stream has a time to first token');
    // Filters combine.
    assert.deepEqual((await list(alice.console, `?key_id=${a2.id}&status=refused`)).json.data, []);

    // since is inclusive, until exclusive (unix seconds or ISO 8601).
    const hours = (query: string) =>
      list(admin, `?account_id=${carol.account.id}${query}`).then((res) => res.json.data.map((row) => row.id));
    assert.deepEqual(await hours(`&since=${base + 20}`), ['req_carol_4', 'req_carol_3', 'req_carol_2']);
    assert.deepEqual(await hours(`&until=${base + 20}`), ['req_carol_1']);
    assert.deepEqual(await hours(`&since=${base + 20}&until=${base + 3 * 3600}`), ['req_carol_3', 'req_carol_2']);
    const iso = (seconds: number) => new Date(seconds * 1000).toISOString();
    assert.deepEqual(await hours(`&since=${iso(base + 3600)}&until=${iso(base + 3600 + 6)}`), ['req_carol_3']);
    assert.deepEqual(await hours(`&since=${base + 4 * 3600}`), []);
  });

  it('pages newest first by cursor, every row exactly once', async () => {
    const whole = (await list(admin, '?limit=100')).json;
    assert.equal(whole.has_more, false);
    assert.equal(whole.next_cursor, null);
    const order = (a: Row, b: Row) => (a.created !== b.created ? b.created - a.created : a.id < b.id ? 1 : -1);
    assert.deepEqual(whole.data, [...whole.data].sort(order), 'newest first, then by request id');
    for (const size of [1, 2, 3, 5]) {
      const seen: Row[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const page: ConsoleResponse<Page> = await list(
          admin,
          `?limit=${size}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
        );
        assert.equal(page.status, 200, JSON.stringify(page.json));
        assert.ok(page.json.data.length <= size);
        assert.equal(page.json.has_more, page.json.next_cursor !== null);
        seen.push(...page.json.data);
        cursor = page.json.next_cursor;
        pages += 1;
        assert.ok(pages <= whole.data.length + 1, 'the pages end');
      } while (cursor);
      assert.deepEqual(
        seen.map((row) => row.id),
        whole.data.map((row) => row.id),
        `pages of ${size}: no row twice, none left out`,
      );
      assert.equal(pages, Math.ceil(whole.data.length / size));
    }
    // A member's pages stay within their account, filters and all.
    const first = await list(alice.console, '?limit=2&status=completed');
    const second = await list(
      alice.console,
      `?limit=100&status=completed&cursor=${encodeURIComponent(first.json.next_cursor!)}`,
    );
    const completedOfAlice = (await list(alice.console, '?limit=100&status=completed')).json.data.map((row) => row.id);
    assert.deepEqual(
      [...first.json.data, ...second.json.data].map((row) => row.id),
      completedOfAlice,
    );
  });

  it('counts requests and errors per bar of a round size, at most about 120 bars over at most 31 days', async () => {
    // Carol's four rows: 14,400 s at 60 s would be 240 bars, so 300 s each.
    const carols = await histogram(admin, `?account_id=${carol.account.id}&since=${base}&until=${base + 4 * 3600}`);
    assert.equal(carols.status, 200, JSON.stringify(carols.json));
    assert.deepEqual(carols.json, {
      object: 'histogram',
      bucket_seconds: 300,
      since: base,
      until: base + 4 * 3600,
      data: [
        { start: base, requests: 2, errors: 1 },
        { start: base + 3600, requests: 1, errors: 1 },
        { start: base + 3 * 3600, requests: 1, errors: 0 },
      ],
    });
    // Her own session's default range, the last 24 hours, holds the same four in bars of 15 minutes.
    const own = await histogram(carol.console);
    assert.equal(own.json.bucket_seconds, 900);
    assert.equal(own.json.until - own.json.since, 86_400);
    assert.ok(Math.abs(own.json.until - Date.now() / 1000) < 5, 'the range ends now');
    assert.deepEqual(
      own.json.data.map((bar) => [bar.requests, bar.errors]),
      [
        [2, 1],
        [1, 1],
        [1, 0],
      ],
    );
    assert.ok(own.json.data.every((bar) => bar.start % 900 === 0));
    // Filters apply as to the list.
    const failedOnly = await histogram(
      admin,
      `?account_id=${carol.account.id}&since=${base}&until=${base + 4 * 3600}&status=failed`,
    );
    assert.deepEqual(failedOnly.json.data, [{ start: base + 3600, requests: 1, errors: 1 }]);

    // Alice's requests of the last minutes: every one counted, the three not completed as errors.
    const alices = await histogram(alice.console, '?since=' + (Math.floor(Date.now() / 1000) - 3600));
    assert.equal(alices.json.bucket_seconds, 60);
    assert.equal(
      alices.json.data.reduce((sum, bar) => sum + bar.requests, 0),
      madeBy(alice).length,
    );
    assert.equal(
      alices.json.data.reduce((sum, bar) => sum + bar.errors, 0),
      3,
    );
    assert.ok(alices.json.data.length <= 60);

    // The size for each range: the smallest round one with at most 120 bars.
    const now = Math.floor(Date.now() / 1000);
    const sizes: Array<[number, number]> = [
      [3600, 60],
      [7200, 60],
      [7260, 300],
      [10 * 3600, 300],
      [86_400, 900],
      [2 * 86_400, 3600],
      [7 * 86_400, 21_600],
      [30 * 86_400, 21_600],
      // The page's "last 30 days", which ends at the server's now a moment after the page's.
      [30 * 86_400 + 2, 21_600],
      [31 * 86_400, 86_400],
    ];
    for (const [range, size] of sizes) {
      const res = await histogram(admin, `?since=${now - range}&until=${now}`);
      assert.equal(res.status, 200, JSON.stringify(res.json));
      assert.equal(res.json.bucket_seconds, size, `a range of ${range} s`);
      assert.ok(Math.floor(range / size) <= 120);
      assert.ok(res.json.data.every((bar) => bar.start % size === 0 && bar.requests >= bar.errors && bar.requests > 0));
    }
  });

  it('refuses a bad query with an OpenAI-shaped 400', async () => {
    expectError(await list(alice.console, '?status=bogus'), 400, 'invalid_value', 'status');
    expectError(await list(alice.console, '?limit=0'), 400, 'invalid_value', 'limit');
    expectError(await list(alice.console, '?limit=101'), 400, 'invalid_value', 'limit');
    expectError(await list(alice.console, '?since=yesterday'), 400, 'invalid_value', 'since');
    expectError(await list(alice.console, '?colour=blue'), 400, 'unknown_parameter', 'colour');
    expectError(await list(alice.console, '?cursor=not-a-cursor'), 400, null, 'cursor');
    expectError(await list(alice.console, '?model=a&model=b'), 400, 'invalid_type', 'model');
    expectError(await list(alice.console, '?cache=sometimes'), 400, 'invalid_value', 'cache');
    expectError(await histogram(alice.console, '?cache=sometimes'), 400, 'invalid_value', 'cache');
    const now = Math.floor(Date.now() / 1000);
    expectError(await histogram(alice.console, `?since=${now}&until=${now}`), 400, 'invalid_value', 'since');
    expectError(await histogram(alice.console, `?since=${now - 32 * 86_400}`), 400, 'invalid_value', 'since');
    expectError(await histogram(alice.console, '?limit=5'), 400, 'unknown_parameter', 'limit');
    expectError(await histogram(alice.console, '?cursor=abc'), 400, 'unknown_parameter', 'cursor');
    expectError(await histogram(alice.console, '?status=bogus'), 400, 'invalid_value', 'status');
    // A member asking with an admin's parameter is not told anything either way: the same 200 as without it.
    assert.equal((await histogram(alice.console, '?account_id=acct_default')).status, 200);
  });

  it('adds latency, time to first token and error rate per model to the usage report', async () => {
    const report = await alice.console.request<{ latency: Latency[] }>('GET', '/console/api/usage?days=7');
    assert.equal(report.status, 200);
    const byModel = new Map(report.json.latency.map((row) => [row.model, row]));
    // A model no vendor serves is never listed by its name: its refusals are the "Unknown model" row ('').
    assert.deepEqual([...byModel.keys()].sort(), ['', 'gpt-4o', model]);
    const mini = byModel.get(model)!;
    // Three completions, the stream, the invalid body and the vendor's failure.
    assert.deepEqual([mini.requests, mini.errors], [6, 2]);
    assert.equal(mini.error_rate, 2 / 6);
    assert.ok(
      mini.latency_p50_ms !== null && mini.latency_p95_ms !== null && mini.latency_p50_ms <= mini.latency_p95_ms,
    );
    assert.ok(mini.ttft_p50_ms !== null && mini.ttft_p50_ms >= 0, 'the stream gives a time to first token');
    const gpt4o = byModel.get('gpt-4o')!;
    assert.deepEqual([gpt4o.requests, gpt4o.errors, gpt4o.error_rate, gpt4o.ttft_p50_ms], [2, 0, 0, null]);
    assert.deepEqual(
      [
        byModel.get('')!.requests,
        byModel.get('')!.refused,
        byModel.get('')!.error_rate,
        byModel.get('')!.latency_p50_ms,
      ],
      [1, 1, 1, null],
    );
    // The report's filters hold for it too.
    const oneKey = await alice.console.request<{ latency: Latency[] }>(
      'GET',
      `/console/api/usage?days=7&key_id=${alice.keys[1]!.id}`,
    );
    assert.deepEqual(
      oneKey.json.latency.map((row) => [row.model, row.requests]),
      [['gpt-4o', 2]],
    );
    const oneModel = await alice.console.request<{ latency: Latency[] }>(
      'GET',
      `/console/api/usage?days=7&model=${model}`,
    );
    assert.deepEqual(
      oneModel.json.latency.map((row) => row.model),
      [model],
    );
    // Only the account's own: Bob's report has his model alone, with his two.
    const bobs = await bob.console.request<{ latency: Latency[] }>('GET', '/console/api/usage?days=7');
    assert.deepEqual(
      bobs.json.latency.map((row) => [row.model, row.requests, row.errors]),
      [[model, 2, 0]],
    );
  });
});
