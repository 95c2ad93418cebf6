import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { sql } from 'kysely';
import { billingBucket, usageDeadLetterKey, usageStreamKey, usageStreamKeys } from '../../shared/redis-keys.js';
import { initMetrics } from '../../shared/metrics.js';
import { appendRequestLog } from '../../shared/request-log.js';
import { openRecord, type RecordDb } from '../../storage/record/database.js';
import { ensureUsageGroup, refusedData, usageGroup, UsageWriter } from '../../storage/record/usage-writer.js';
import {
  freshRedis,
  paidAccountKey,
  requestRecord,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';
import { testRecord } from '../support/record.js';
import { ConsoleClient, type ConsoleResponse } from '../support/console-client.js';
import { freePort } from '../support/redis-server.js';

/*
 * One NUL byte must not stop the usage writer for everyone. At the edge,
 * every id, model, name, note and filter that reaches the record refuses a
 * NUL with an OpenAI-shaped 400 naming the field (on 85c5a1f: 404s and 500s,
 * and a request-log event the record could not store). In the writer, an
 * entry the record refuses (put straight into a usage stream, in the
 * writer's own encoding, as one that slipped past the edge would be) is
 * isolated: the rest of its batch and every other bucket are written, it is
 * tried again alone, then moved to its stream's dead-letter stream, counted
 * and logged; written again by the operator it is settled exactly once.
 */

const nul = 'x\u0000y';
const adminToken = 'usage-poison-admin-token';
const adminEmail = 'root@poison.test';
const adminPassword = 'root-password-1';

type ErrorJson = { error?: { message: string; type: string; param: string | null; code: string | null } };

function expect400(what: string, status: number, json: ErrorJson, param: string | null): void {
  assert.equal(status, 400, `${what}: ${JSON.stringify(json)}`);
  assert.equal(json.error?.type, 'invalid_request_error', `${what}: ${JSON.stringify(json)}`);
  assert.equal(json.error?.param, param, `${what}: ${JSON.stringify(json)}`);
  assert.match(json.error!.message, /NUL/, what);
  assert.ok('code' in json.error!, what);
}

describe('NUL at the edge: a 400 naming the field, never a 500 or an entry the record refuses', () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let key: string;
  let accountId: string;
  let keyId: string;
  let console: ConsoleClient;

  before(async () => {
    let url: string;
    ({ redis, url } = await freshRedis(1));
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_TOKEN: adminToken,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        CONSOLE_SIGNUP: 'open',
        TRUST_PROXY: 'on',
      },
    });
    ({ key, account: accountId, id: keyId } = await paidAccountKey(redis, 5_000_000));
    console = new ConsoleClient(gateway.url, '203.0.113.7');
    const signedIn = await console.signIn(adminEmail, adminPassword);
    assert.equal(signedIn.status, 200, JSON.stringify(signedIn.json));
  });
  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  const call = async (method: string, path: string, body?: unknown, auth = `Bearer ${key}`) => {
    const res = await fetch(`${gateway.url}${path}`, {
      method,
      headers: { authorization: auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as ErrorJson, id: res.headers.get('x-request-id') };
  };
  const admin = (method: string, path: string, body?: unknown) => call(method, path, body, `Bearer ${adminToken}`);
  const inConsole = async (method: string, path: string, body?: unknown): Promise<ConsoleResponse> =>
    console.request(method, path, body);

  it('refuses a NUL in the model of every /v1 body, and logs the refusal as text the record can keep', async () => {
    const bodies: Array<[string, Record<string, unknown>]> = [
      ['/v1/chat/completions', { model: nul, messages: [{ role: 'user', content: 'hi' }] }],
      ['/v1/completions', { model: nul, prompt: 'hi' }],
      ['/v1/embeddings', { model: nul, input: 'hi' }],
      ['/v1/responses', { model: nul, input: 'hi' }],
      ['/v1/images/generations', { model: nul, prompt: 'a cat' }],
      ['/v1/videos', { model: nul, prompt: 'a cat' }],
    ];
    let chatId: string | null = null;
    for (const [path, body] of bodies) {
      const { status, json, id } = await call('POST', path, body);
      expect400(`POST ${path}`, status, json, 'model');
      if (path === '/v1/chat/completions') chatId = id;
    }
    // The refusal is in the log, its model as text PostgreSQL stores (the NUL as U+FFFD), and nothing waits in a
    // dead-letter stream.
    const record = await requestRecord(gateway.url, key, chatId!, false);
    assert.equal(record.status, 'refused');
    assert.equal(record.http_status, 400);
    assert.equal(record.model, 'x\uFFFDy');
    for (const stream of usageStreamKeys) assert.equal(await redis.xlen(usageDeadLetterKey(stream)), 0);
  });

  it('stores a lone surrogate as U+FFFD (the driver writes it so): an unknown model, a 404, its refusal in the log', async () => {
    const { status, json, id } = await call('POST', '/v1/chat/completions', {
      model: '\ud800',
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(status, 404, JSON.stringify(json));
    assert.equal(json.error?.param, 'model');
    const record = await requestRecord(gateway.url, key, id!, false);
    assert.equal(record.model, '\uFFFD');
    assert.equal(record.status, 'refused');
  });

  it('refuses a NUL in the ids and filters of /v1/generation and the admin API', async () => {
    const cases: Array<[string, string, string]> = [
      ['GET', `/v1/generation?id=${encodeURIComponent(nul)}`, 'id'],
      ['GET', '/v1/generation?id=%00', 'id'],
    ];
    for (const [method, path, param] of cases) {
      const { status, json } = await call(method, path);
      expect400(`${method} ${path}`, status, json, param);
    }
    // An id in the path: the path check refuses a NUL escape before any route (param null).
    const adminCases: Array<[string, string, string | null, unknown?]> = [
      ['GET', '/admin/requests?model=%00', 'model'],
      ['GET', '/admin/requests?account_id=%00', 'account_id'],
      ['GET', '/admin/requests?key_id=a%00', 'key_id'],
      ['GET', '/admin/usage?model=%00', 'model'],
      ['GET', '/admin/usage?account_id=%00', 'account_id'],
      ['GET', '/admin/usage?key_id=%00', 'key_id'],
      ['GET', '/admin/keys?account_id=%00', 'account_id'],
      ['GET', '/admin/accounts/a%00', null],
      ['PATCH', '/admin/accounts/%00', null, { name: 'n' }],
      ['DELETE', '/admin/accounts/%00', null],
      ['GET', '/admin/accounts/%00/ledger', null],
      ['POST', '/admin/accounts/%00/credits', null, { amount_usd: 1 }],
      ['GET', '/admin/keys/%00', null],
      ['PATCH', '/admin/keys/%00', null, { rpm: 5 }],
      ['DELETE', '/admin/keys/%00', null],
      ['POST', '/admin/accounts', 'email', { email: `a${nul}@poison.test` }],
      ['POST', '/admin/accounts', 'name', { email: 'named@poison.test', name: nul }],
      ['PATCH', `/admin/accounts/${accountId}`, 'name', { name: nul }],
      ['PATCH', `/admin/accounts/${accountId}`, 'email', { email: `b${nul}@poison.test` }],
      ['POST', `/admin/accounts/${accountId}/credits`, 'note', { amount_usd: 1, note: nul }],
      ['POST', '/admin/keys', 'name', { name: nul, account_id: accountId }],
      ['POST', '/admin/keys', 'account_id', { name: 'k', account_id: nul }],
      ['POST', '/admin/keys', 'models[0]', { name: 'k', account_id: accountId, models: [nul] }],
      ['PATCH', `/admin/keys/${keyId}`, 'name', { name: nul }],
      ['PATCH', `/admin/keys/${keyId}`, 'models[0]', { models: [nul] }],
    ];
    for (const [method, path, param, body] of adminCases) {
      const { status, json } = await admin(method, path, body);
      expect400(`${method} ${path} ${JSON.stringify(body) ?? ''}`, status, json, param);
    }
    // Nothing was changed by a refused call: the balance is what it was, no account was made.
    const account = await admin('GET', `/admin/accounts/${accountId}`);
    assert.equal((account.json as { balance_usd?: number }).balance_usd, 5);
    const accounts = (await admin('GET', '/admin/accounts')).json as unknown as {
      data: Array<{ email: string | null }>;
    };
    assert.ok(!accounts.data.some((a) => a.email === 'named@poison.test'));
  });

  it('refuses a NUL in the console: sign-in, sign-up, keys, usage and activity filters, admin pages', async () => {
    const anonymous = new ConsoleClient(gateway.url, '203.0.113.8');
    await anonymous.open();
    const signIn = await anonymous.request('POST', '/console/api/session', {
      email: nul,
      password: 'whatever-password',
    });
    expect400('sign-in email', signIn.status, signIn.json, 'email');
    const signUp = await anonymous.request('POST', '/console/api/signup', {
      email: 'new@poison.test',
      password: 'member-password',
      name: nul,
    });
    expect400('sign-up name', signUp.status, signUp.json, 'name');
    const cases: Array<[string, string, string | null, unknown?]> = [
      ['POST', '/console/api/keys', 'name', { name: nul }],
      ['PATCH', '/console/api/keys/%00', null, { name: 'k' }],
      ['DELETE', '/console/api/keys/%00', null],
      ['GET', '/console/api/usage?model=%00', 'model'],
      ['GET', '/console/api/usage?key_id=%00', 'key_id'],
      ['GET', '/console/api/usage.csv?model=%00', 'model'],
      ['GET', '/console/api/requests?model=%00', 'model'],
      ['GET', '/console/api/requests?key_id=%00', 'key_id'],
      ['GET', '/console/api/requests/histogram?model=%00', 'model'],
      ['POST', '/console/api/admin/accounts', 'name', { email: 'console-made@poison.test', name: nul }],
      ['PATCH', '/console/api/admin/accounts/%00', null, { name: 'n' }],
      ['PATCH', `/console/api/admin/accounts/${accountId}`, 'name', { name: nul }],
      ['POST', '/console/api/admin/accounts/%00/credits', null, { amount_usd: 1 }],
      ['POST', `/console/api/admin/accounts/${accountId}/credits`, 'note', { amount_usd: 1, note: nul }],
    ];
    for (const [method, path, param, body] of cases) {
      const res = await inConsole(method, path, body);
      expect400(`console ${method} ${path}`, res.status, res.json, param);
    }
  });

  it('keeps writing: a request after all of these is settled in the record', async () => {
    const { response } = await gateway
      .client(key)
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'after' }], max_tokens: 5 })
      .withResponse();
    const record = await requestRecord(gateway.url, key, response.headers.get('x-request-id')!);
    assert.equal(record.settled, true);
    assert.equal(record.status, 'completed');
  });
});

/** A settlement's entry as `settle` appends it (the `usage` field's JSON). */
function usageJson(
  accountId: string,
  keyId: string,
  costMicros: number,
  model = 'gpt-4o-mini',
): { requestId: string; json: string } {
  const requestId = `req_${randomBytes(12).toString('hex')}`;
  const fields = {
    request_id: requestId,
    key_id: keyId,
    account_id: accountId,
    model,
    vendor: 'mock',
    input_tokens: 10,
    cached_tokens: 0,
    output_tokens: 5,
    images: 0,
    audio_seconds: 0,
    video_seconds: 0,
    cost_micros: costMicros,
    status: 'completed',
    created: Math.floor(Date.now() / 1000),
    duration_ms: 12,
    endpoint: 'chat.completions',
    attempts: 1,
  };
  return { requestId, json: JSON.stringify(fields) };
}

describe('the usage writer: one entry the record refuses holds back nothing', () => {
  let redis: Redis;
  let conn: Redis;
  let record: RecordDb;
  const lines: string[] = [];
  const log = pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) });
  const metrics = initMetrics({ perKey: false });
  /** Accounts with a key each: two in one bucket, one in another. */
  const people: Array<{ account: string; key: string; bucket: number }> = [];
  let writer: UsageWriter | undefined;

  before(async () => {
    let url: string;
    ({ redis, url } = await freshRedis(2));
    conn = new Redis(url);
    record = await testRecord(redis);
    await ensureUsageGroup(redis);
    const byBucket = new Map<number, Array<{ account: string; key: string; bucket: number }>>();
    while (![...byBucket.values()].some((list) => list.length >= 2) || byBucket.size < 2) {
      const { account, id } = await paidAccountKey(redis, 1_000_000);
      const bucket = billingBucket(account);
      byBucket.set(bucket, [...(byBucket.get(bucket) ?? []), { account, key: id, bucket }]);
    }
    const pair = [...byBucket.values()].find((list) => list.length >= 2)!;
    const other = [...byBucket.values()].find((list) => list[0]!.bucket !== pair[0]!.bucket)!;
    people.push(pair[0]!, pair[1]!, other[0]!);
  });
  after(async () => {
    await writer?.close();
    conn?.disconnect();
    redis?.disconnect();
  });

  const settledMicros = async (account: string) =>
    Number(
      (await record.selectFrom('accounts').select('settled_micros').where('id', '=', account).executeTakeFirstOrThrow())
        .settled_micros,
    );
  const row = (requestId: string) =>
    record.selectFrom('usage').selectAll().where('request_id', '=', requestId).executeTakeFirst();
  const pendingCount = async (stream: string) => Number(((await redis.xpending(stream, usageGroup)) as [number])[0]);
  const deadLetterCount = () => metrics.usageDeadLetters.get().then((value) => value.values[0]?.value ?? 0);

  it('tells a refusal of the data from the record being away', async () => {
    const refused = await sql`select ${nul}::text as t`.execute(record).then(
      () => undefined,
      (error: unknown) => error,
    );
    assert.ok(refusedData(refused), String(refused));
    const away = await openRecord(`postgres://postgres@127.0.0.1:${await freePort()}/none`, { max: 1, migrate: false });
    const unanswered = await sql`select 1`.execute(away).then(
      () => undefined,
      (error: unknown) => error,
    );
    assert.ok(unanswered, 'a record nobody serves fails');
    assert.equal(refusedData(unanswered), false);
    await away.destroy();
  });

  it(
    'writes the rest of the batch and the other bucket, tries the bad entry alone, then moves it to the ' +
      'dead-letter stream',
    async () => {
      const [p, q, r] = people as [(typeof people)[0], (typeof people)[0], (typeof people)[0]];
      const stream = usageStreamKey(p.bucket);
      const otherStream = usageStreamKey(r.bucket);
      const before = {
        p: await settledMicros(p.account),
        q: await settledMicros(q.account),
        r: await settledMicros(r.account),
      };
      // One batch in p's bucket: a good settlement of q's, a poisoned settlement of p's (a NUL in its model), a good one
      // of p's, and the api's log event with the raw NUL model (what 85c5a1f appended for `{"model":"x\u0000y"}`); a good
      // one in r's bucket.
      const good1 = usageJson(q.account, q.key, 1_234);
      const poisoned = usageJson(p.account, p.key, 700, nul);
      const good2 = usageJson(p.account, p.key, 55);
      const good3 = usageJson(r.account, r.key, 4_321);
      await redis.xadd(stream, '*', 'usage', good1.json);
      const poisonId = (await redis.xadd(stream, '*', 'usage', poisoned.json))!;
      await redis.xadd(stream, '*', 'usage', good2.json);
      const logRequest = `req_${randomBytes(12).toString('hex')}`;
      await appendRequestLog(
        redis,
        {
          request_id: logRequest,
          account_id: p.account,
          key_id: p.key,
          endpoint: 'chat.completions',
          model: nul,
          stream: false,
          status: 'refused',
          http_status: 404,
          error_code: 'model_not_found',
          latency_ms: 3,
          ttft_ms: null,
          created: Math.floor(Date.now() / 1000),
        },
        1_000_000,
      );
      await redis.xadd(otherStream, '*', 'usage', good3.json);

      // Tries spaced 1.5 s then 3 s: the good entries are written long before the bad one is given up.
      writer = new UsageWriter({
        redis: conn,
        record,
        log,
        consumer: 'poison-test',
        lingerMs: 0,
        blockMs: 100,
        deadLetterAfter: 3,
        retryMs: 1_500,
      });
      writer.start();
      await waitFor(
        async () =>
          !!(await row(good1.requestId))?.settled &&
          !!(await row(good2.requestId))?.settled &&
          !!(await row(good3.requestId))?.settled,
        10_000,
        'the good entries written',
      );
      // Written while the bad ones still wait: they held back neither their batch nor the other bucket.
      assert.equal(await pendingCount(stream), 2, 'the two refused entries wait, alone');
      assert.equal(await redis.xlen(usageDeadLetterKey(stream)), 0);
      assert.equal(await settledMicros(q.account), before.q + 1_234);
      assert.equal(await settledMicros(p.account), before.p + 55);
      assert.equal(await settledMicros(r.account), before.r + 4_321);
      // A later entry in the poisoned bucket is written too while they wait.
      const later = usageJson(q.account, q.key, 10);
      await redis.xadd(stream, '*', 'usage', later.json);
      await waitFor(async () => !!(await row(later.requestId))?.settled, 10_000, 'a later entry in the same bucket');
      assert.equal(await pendingCount(stream), 2);

      // After 3 refusals each: both moved, with their fields as they were, counted and logged.
      await waitFor(async () => (await redis.xlen(usageDeadLetterKey(stream))) === 2, 20_000, 'the dead letters');
      assert.equal(await pendingCount(stream), 0);
      assert.equal(await redis.xlen(stream), 0);
      const dead = (await redis.xrange(usageDeadLetterKey(stream), '-', '+')) as Array<[string, string[]]>;
      const fieldsOf = (entry: string[]) =>
        Object.fromEntries(entry.flatMap((value, i) => (i % 2 === 0 ? [[value, entry[i + 1]!]] : [])));
      const moved = dead.map(([, fields]) => fieldsOf(fields));
      const usageDead = moved.find((fields) => fields.usage !== undefined)!;
      assert.equal(usageDead.usage, poisoned.json);
      assert.equal(usageDead.stream, stream);
      assert.equal(usageDead.entry, poisonId);
      assert.equal(usageDead.tries, '3');
      assert.match(usageDead.error!, /0x00/);
      assert.ok(
        moved.some(
          (fields) =>
            fields.log !== undefined && (JSON.parse(fields.log) as { request_id: string }).request_id === logRequest,
        ),
      );
      assert.equal(await deadLetterCount(), 2);
      const errors = lines
        .map((line) => JSON.parse(line) as { level: number; msg: string; requestId?: string; entry?: string })
        .filter((line) => line.level >= 50);
      assert.ok(
        errors.some(
          (line) => line.requestId === poisoned.requestId && line.entry === poisonId && /dead-letter/.test(line.msg),
        ),
        JSON.stringify(errors),
      );
      // The refused spend is not in the record (it waits in the dead-letter stream), nothing was written twice.
      assert.equal(await settledMicros(p.account), before.p + 55);
      assert.equal(await settledMicros(q.account), before.q + 1_234 + 10);
      assert.equal(await row(poisoned.requestId), undefined);

      // The operator writes it again, mended (docs/operating.md), twice by mistake: settled once.
      const mended = JSON.stringify({ ...(JSON.parse(poisoned.json) as object), model: 'xy' });
      await redis.xadd(stream, '*', 'usage', mended);
      await redis.xadd(stream, '*', 'usage', mended);
      await waitFor(
        async () => !!(await row(poisoned.requestId))?.settled && (await redis.xlen(stream)) === 0,
        10_000,
        'the mended entry',
      );
      assert.equal(await settledMicros(p.account), before.p + 55 + 700);
      const daily = await record
        .selectFrom('usage_daily')
        .select(sql<number>`sum(cost_micros)`.as('cost'))
        .where('account_id', '=', p.account)
        .executeTakeFirstOrThrow();
      assert.equal(Number(daily.cost), 55 + 700);
      assert.equal(await deadLetterCount(), 2);
    },
  );

  it('dead-letters nothing while the record is away, and writes it all once it is back', async () => {
    await writer?.close();
    writer = undefined;
    const [p] = people as [(typeof people)[0]];
    const stream = usageStreamKey(p.bucket);
    const before = await settledMicros(p.account);
    const deadBefore = await redis.xlen(usageDeadLetterKey(stream));
    const entry = usageJson(p.account, p.key, 321);
    await redis.xadd(stream, '*', 'usage', entry.json);
    const away = await openRecord(`postgres://postgres@127.0.0.1:${await freePort()}/none`, { max: 1, migrate: false });
    const failures = (await metrics.usageWriteFailures.get()).values[0]?.value ?? 0;
    const blind = new UsageWriter({
      redis: conn,
      record: away,
      log,
      consumer: 'poison-test',
      lingerMs: 0,
      blockMs: 100,
      deadLetterAfter: 1,
      retryMs: 10,
    });
    blind.start();
    // Three failed writes with a writer that would dead-letter a refused entry at once.
    await waitFor(
      async () => ((await metrics.usageWriteFailures.get()).values[0]?.value ?? 0) >= failures + 3,
      20_000,
      'three failed writes',
    );
    await blind.close();
    await away.destroy();
    assert.equal(await redis.xlen(usageDeadLetterKey(stream)), deadBefore);
    assert.equal(await deadLetterCount(), 2);
    assert.equal(await pendingCount(stream), 1);
    writer = new UsageWriter({ redis: conn, record, log, consumer: 'poison-test', lingerMs: 0, blockMs: 100 });
    writer.start();
    await waitFor(
      async () => !!(await row(entry.requestId))?.settled,
      10_000,
      'the entry written once the record is back',
    );
    assert.equal(await settledMicros(p.account), before + 321);
    assert.equal(await pendingCount(stream), 0);
  });
});
