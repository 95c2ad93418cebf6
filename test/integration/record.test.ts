import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { sql } from 'kysely';
import { defaultAccountId, utcDay } from '../../shared/accounts.js';
import {
  accountKey,
  accountsIndexKey,
  apiKeyHashesKey,
  apiKeyIdsKey,
  apiKeyRecordKey,
  ledgerKey,
  legacyUsageStreamKey,
  usageDayKey,
  usageStreamKeys,
} from '../../shared/redis-keys.js';
import { readBill, readKeySpend } from '../../shared/money/billing.js';
import { startPrivatePostgres } from '../support/postgres-server.js';
import { hashSecret } from '../../api/accounts/key-store.js';
import { adminClient, type Json } from '../support/admin-client.js';
import { startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { freshDatabase, onDatabase } from '../support/record.js';
import { startPrivateRedis } from '../support/redis-server.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { openRecord } from '../../storage/record/database.js';

/*
 * PostgreSQL is the record; Redis is the hot path and can be rebuilt. A
 * gateway stopped, its Redis flushed and started again finds every account,
 * key, balance, ledger entry and usage row where it was — on a PostgreSQL
 * server and on the embedded default — and a database outage delays usage
 * history, never answers, and loses no row.
 */

const adminToken = 'record-admin-token';
// Entries waiting in the usage streams, by kind: a settlement ('usage') or the api's request-log event ('log').
const bufferedEntries = async (redis: Redis) => {
  const counts = { usage: 0, log: 0 };
  for (const stream of usageStreamKeys) {
    for (const [, fields] of await redis.xrange(stream, '-', '+')) {
      if (fields[0] === 'usage' || fields[0] === 'log') counts[fields[0]]++;
    }
  }
  return counts;
};
/** Usage records waiting in Redis, over every bucket's stream. */
const bufferedRecords = async (redis: Redis) => {
  let total = 0;
  for (const stream of usageStreamKeys) total += await redis.xlen(stream);
  return total;
};
const root = fileURLToPath(new URL('../..', import.meta.url));
const run = promisify(execFile);
const model = 'gpt-4o-mini';

describe('the record survives a flushed Redis', () => {
  const cleanups: Array<() => Promise<unknown> | unknown> = [];
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  });

  async function scenario(env: Record<string, string>, redisUrl: string): Promise<void> {
    let gateway: GatewayProcess = await startGateway({ env: { ...env, REDIS_URL: redisUrl, ADMIN_TOKEN: adminToken } });
    cleanups.push(() => gateway.stop('SIGKILL'));
    const { admin } = adminClient(() => gateway.url, adminToken);

    const { json: account } = await admin('POST', '/admin/accounts', { email: 'durable@example.com', name: 'Durable' });
    const accountId = String(account.id);
    assert.equal(
      (await admin('POST', `/admin/accounts/${accountId}/credits`, { amount_usd: 5, note: 'first' })).status,
      200,
    );
    assert.equal(
      (await admin('POST', `/admin/accounts/${accountId}/credits`, { amount_usd: -1.5, note: 'correction' })).status,
      200,
    );
    // The response cache's settings come back too: the key's default TTL, and the account's cap at 0 (caching
    // forbidden, which must not come back as "no cap"), so the key's default changes nothing of what is counted below.
    assert.equal(
      (await admin('PATCH', `/admin/accounts/${accountId}`, { cache_max_ttl_s: 0 })).json.cache_max_ttl_s,
      0,
    );
    const kept = (
      await admin('POST', '/admin/keys', {
        name: 'kept',
        account_id: accountId,
        limit_usd: 2,
        rpm: 1000,
        cache_ttl_s: 900,
      })
    ).json;
    assert.equal(kept.cache_ttl_s, 900);
    const revoked = (await admin('POST', '/admin/keys', { name: 'revoked', account_id: accountId })).json;
    assert.equal((await admin('DELETE', `/admin/keys/${revoked.id}`)).status, 200);

    if (env.DATA_DIR) {
      // The CLI beside the live gateway reaches the embedded record through the gateway's socket (never opening it
      // twice).
      const listed = await run(process.execPath, ['--import', 'tsx', 'bin/keys.ts', 'list', '--account', accountId], {
        cwd: root,
        env: {
          PATH: process.env.PATH ?? '',
          HOME: process.env.HOME ?? '/root',
          REDIS_URL: redisUrl,
          DATA_DIR: env.DATA_DIR,
        },
      });
      assert.match(listed.stdout, new RegExp(String(kept.id)));
      assert.doesNotMatch(listed.stdout, new RegExp(String(revoked.id)));
    }
    const client = gateway.client(String(kept.key));
    for (let i = 0; i < 4; i++)
      await client.chat.completions.create({ model, messages: [{ role: 'user', content: `hello ${i}` }] });
    const stream = await client.chat.completions.create({
      model,
      stream: true,
      messages: [{ role: 'user', content: 'a stream' }],
    });
    for await (const _ of stream);

    // Every settled request reaches the record (the usage writer runs beside the workers).
    const usage = async () =>
      ((await admin('GET', `/admin/usage?account_id=${accountId}`)).json.data as Json[])[0] as Json | undefined;
    await waitFor(async () => (await usage())?.requests === 5, 10_000, 'five usage rows in the record');
    const before = {
      account: (await admin('GET', `/admin/accounts/${accountId}`)).json,
      key: (await admin('GET', `/admin/keys/${kept.id}`)).json,
      ledger: (await admin('GET', `/admin/accounts/${accountId}/ledger`)).json.data,
      usage: await usage(),
    };
    assert.ok(Number(before.key.spent_usd) > 0, 'the key spent something');
    assert.ok(Number(before.account.balance_usd) < 3.5, 'the balance went down');

    await gateway.stop();
    const redis = new Redis(redisUrl);
    await redis.flushall();
    await redis.quit();

    gateway = await startGateway({ env: { ...env, REDIS_URL: redisUrl, ADMIN_TOKEN: adminToken } });
    cleanups.push(() => gateway.stop('SIGKILL'));
    const after = {
      account: (await admin('GET', `/admin/accounts/${accountId}`)).json,
      key: (await admin('GET', `/admin/keys/${kept.id}`)).json,
      ledger: (await admin('GET', `/admin/accounts/${accountId}/ledger`)).json.data,
      usage: await usage(),
    };
    // When the key was last used is the newest usage row's time (settlement's second, not admission's).
    const { last_used_at: usedBefore, ...keyBefore } = before.key;
    const { last_used_at: usedAfter, ...keyAfter } = after.key;
    assert.ok(
      Math.abs(Number(usedAfter) - Number(usedBefore)) <= 2,
      `last used ${String(usedAfter)} ≈ ${String(usedBefore)}`,
    );
    assert.deepEqual(
      { ...after, key: keyAfter },
      { ...before, key: keyBefore },
      'account, balance, key spend, ledger and usage as they were',
    );
    assert.deepEqual(
      [after.account.cache_max_ttl_s, after.key.cache_ttl_s, after.key.rpm],
      [0, 900, 1000],
      'the cache settings with the limits',
    );

    // The key still works and spends from where it was; the revoked one stays revoked.
    const again = gateway.client(String(kept.key));
    await again.chat.completions.create({ model, messages: [{ role: 'user', content: 'after the flush' }] });
    const refused = await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${revoked.key}` } });
    assert.equal(refused.status, 401);
    await waitFor(async () => (await usage())?.requests === 6, 10_000, 'the sixth usage row');
    const spentAfter = Number((await admin('GET', `/admin/keys/${kept.id}`)).json.spent_usd);
    assert.ok(spentAfter > Number(before.key.spent_usd), 'the key spends on from what it had spent');
    await gateway.stop();
  }

  it('on a PostgreSQL server: keys, spend, balance, ledger and usage are kept, a revoked key stays revoked', async () => {
    const redis = await startPrivateRedis({ aof: false });
    cleanups.push(() => redis.remove());
    await scenario({ DATABASE_URL: await freshDatabase('flush_pg') }, redis.url);
  });

  it('on the embedded default (DATABASE_URL unset): the same, and npm run keys reaches it beside the live gateway', async () => {
    const redis = await startPrivateRedis({ aof: false });
    cleanups.push(() => redis.remove());
    const dataDir = mkdtempSync(join(tmpdir(), 'sy-rec-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    await scenario({ DATABASE_URL: '', DATA_DIR: dataDir }, redis.url);
  });
});

describe('a database outage', () => {
  it('delays usage history, never answers, and loses no row when the database comes back', async () => {
    const redis = await startPrivateRedis({ aof: false });
    const databaseUrl = await freshDatabase('outage');
    const proxy = await startTcpProxy(5432);
    const viaProxy = new URL(databaseUrl);
    viaProxy.port = String(proxy.port);
    const gateway = await startGateway({
      env: { REDIS_URL: redis.url, DATABASE_URL: viaProxy.toString(), ADMIN_TOKEN: adminToken },
    });
    const record = await openRecord(databaseUrl, { max: 2, migrate: false });
    const buffered = new Redis(redis.url);
    try {
      const { admin } = adminClient(() => gateway.url, adminToken);
      const key = (await admin('POST', '/admin/keys', { name: 'outage' })).json;
      const client = gateway.client(String(key.key));
      await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'before' }] });
      const rows = async () =>
        Number(
          (
            await record
              .selectFrom('usage')
              .select((eb) => eb.fn.countAll().as('n'))
              .executeTakeFirstOrThrow()
          ).n,
        );
      // The first row, both halves: the worker's settlement and the api's log event (which comes after the answer).
      await waitFor(async () => (await rows()) === 1, 10_000, 'the first row');
      const merged = async () =>
        Number(
          (
            await record
              .selectFrom('usage')
              .select((eb) => eb.fn.countAll().as('n'))
              .where('http_status', 'is not', null)
              .where('settled', '=', true)
              .executeTakeFirstOrThrow()
          ).n,
        );
      await waitFor(async () => (await merged()) === 1, 10_000, "the first row's request-log half");

      proxy.block();
      // Answers go on; their usage waits in Redis.
      for (let i = 0; i < 20; i++)
        await client.chat.completions.create({ model, messages: [{ role: 'user', content: `during ${i}` }] });
      await waitFor(
        async () => (await bufferedEntries(buffered)).usage === 20,
        5000,
        'twenty settlements buffered in Redis',
      );
      await waitFor(
        async () => (await bufferedEntries(buffered)).log === 20,
        5000,
        'and their twenty request-log events',
      );
      assert.equal(await rows(), 1, 'nothing reached the record while it was away');

      proxy.unblock();
      await waitFor(async () => (await rows()) === 21, 30_000, 'every buffered row written once the database is back');
      await waitFor(async () => (await merged()) === 21, 10_000, 'each with both its halves');
      await waitFor(async () => (await bufferedRecords(buffered)) === 0, 5000, 'the buffer emptied');
      const spent = Number(
        (
          await record
            .selectFrom('api_keys')
            .select('spent_micros')
            .where('id', '=', String(key.id))
            .executeTakeFirstOrThrow()
        ).spent_micros,
      );
      const sum = Number(
        (
          await record
            .selectFrom('usage')
            .select((eb) => eb.fn.sum('cost_micros').as('s'))
            .executeTakeFirstOrThrow()
        ).s,
      );
      assert.equal(spent, sum, "the key's spend in the record is the sum of its rows");
      assert.equal(
        (await readKeySpend(buffered, defaultAccountId, String(key.id)))?.spentMicros,
        sum,
        "and equals Redis's, to the micro-dollar",
      );
    } finally {
      buffered.disconnect();
      await gateway.stop('SIGKILL');
      await record.destroy();
      await proxy.close();
      await redis.remove();
    }
  });
});

describe('a connection the server ends while it is checked out', () => {
  it('fails the transaction that held it, and the process lives on with a pool that connects again', async () => {
    const url = await freshDatabase('ended');
    const db = await openRecord(url, { max: 2 });
    try {
      // Between two statements of a transaction no query is active, so the server's end of the connection is an
      // 'error' event on the client: with nothing listening, the whole process would exit (the worker did,
      // mid-restart).
      const transaction = db.transaction().execute(async (trx) => {
        const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(trx);
        await onDatabase(url, (client) => client.query('select pg_terminate_backend($1)', [rows[0]!.pid]));
        await new Promise((resolve) => setTimeout(resolve, 300));
        await sql`select 1`.execute(trx);
      });
      await assert.rejects(transaction);
      const { rows } = await sql<{ one: number }>`select 1 as one`.execute(db);
      assert.equal(rows[0]!.one, 1, 'the pool serves again on a new connection');
    } finally {
      await db.destroy();
    }
  });
});

describe('a PostgreSQL restart under load', () => {
  it('answers every request while the record is down, and loses no usage row: the record ends equal to Redis', async () => {
    const redis = await startPrivateRedis({ aof: false });
    const postgres = await startPrivatePostgres();
    const gateway = await startGateway({
      env: { REDIS_URL: redis.url, DATABASE_URL: postgres.url, ADMIN_TOKEN: adminToken },
    });
    const hot = new Redis(redis.url);
    let record: Awaited<ReturnType<typeof openRecord>> | undefined;
    try {
      const { admin } = adminClient(() => gateway.url, adminToken);
      const account = (await admin('POST', '/admin/accounts', { email: 'restart@example.com' })).json;
      await admin('POST', `/admin/accounts/${account.id}/credits`, { amount_usd: 100 });
      const key = (await admin('POST', '/admin/keys', { name: 'restart', account_id: account.id, limit_usd: 50 })).json;
      const served: string[] = [];
      const failed: number[] = [];
      let running = true;
      const lane = async () => {
        while (running) {
          const answer = await fetch(`${gateway.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${String(key.key)}`, 'content-type': 'application/json' },
            body: JSON.stringify({ model, messages: [{ role: 'user', content: 'during the restart' }] }),
          });
          await answer.arrayBuffer();
          if (answer.status === 200) served.push(answer.headers.get('x-request-id')!);
          else failed.push(answer.status);
        }
      };
      const lanes = [lane(), lane(), lane(), lane()];
      await new Promise((resolve) => setTimeout(resolve, 1500));
      const before = served.length;
      // As a crash: every backend ends at once, mid-transaction for the usage writer; down for 2 s, then recovered from
      // its WAL.
      await postgres.restart(2000);
      const during = served.length - before;
      await new Promise((resolve) => setTimeout(resolve, 1500));
      running = false;
      await Promise.all(lanes);
      assert.deepEqual(failed, [], 'no request failed while the record was down');
      assert.ok(during > 0, 'requests were served while it was down');

      record = await openRecord(postgres.url, { max: 2, migrate: false });
      const rows = async () =>
        await record!
          .selectFrom('usage')
          .select(['request_id', 'cost_micros'])
          .where('account_id', '=', String(account.id))
          .execute();
      await waitFor(
        async () => (await rows()).length === served.length,
        30_000,
        `all ${served.length} usage rows in the record`,
      );
      const ids = new Set((await rows()).map((row) => row.request_id));
      assert.deepEqual(
        served.filter((id) => !ids.has(id)),
        [],
        'every served request has its row',
      );
      const sum = (await rows()).reduce((total, row) => total + row.cost_micros, 0);
      const redisSpent = (await readKeySpend(hot, String(account.id), String(key.id)))!.spentMicros;
      assert.equal(sum, redisSpent, "the rows add up to the key's spend in Redis");
      const keyRow = await record
        .selectFrom('api_keys')
        .select('spent_micros')
        .where('id', '=', String(key.id))
        .executeTakeFirstOrThrow();
      const accountRow = await record
        .selectFrom('accounts')
        .select(['credits_micros', 'settled_micros'])
        .where('id', '=', String(account.id))
        .executeTakeFirstOrThrow();
      assert.equal(keyRow.spent_micros, redisSpent);
      assert.equal(
        accountRow.credits_micros - accountRow.settled_micros,
        (await readBill(hot, String(account.id)))!.balanceMicros,
        "the record's balance is Redis's, to the micro-dollar",
      );
    } finally {
      hot.disconnect();
      await gateway.stop('SIGKILL');
      await record?.destroy();
      await postgres.remove();
      await redis.remove();
    }
  });
});

describe('the upgrade from a Redis-only gateway', () => {
  it('imports accounts, keys, ledgers, usage and day totals once, balances to the micro-dollar', async () => {
    const redisServer = await startPrivateRedis({ aof: false });
    const redis = new Redis(redisServer.url);
    // What the gateway before the record kept in Redis.
    const secret = 'sy-legacy-secret-0123456789abcdefghijklmnopqrstuvwxyz';
    await redis.hset(accountKey('acct_old'), {
      id: 'acct_old',
      email: 'old@example.com',
      name: 'Old',
      role: 'member',
      created: 1700000000,
      balance: 2_500_000,
      reserved: 0,
      unlimited: '0',
    });
    await redis.zadd(accountsIndexKey, 1700000000, 'acct_old');
    await redis.xadd(
      ledgerKey('acct_old'),
      '*',
      'amount',
      3_000_000,
      'balance',
      3_000_000,
      'note',
      'opening',
      'time',
      1700000000,
    );
    await redis.hset(apiKeyRecordKey('key_old'), {
      id: 'key_old',
      name: 'old key',
      created: 1700000000,
      hash: hashSecret(secret),
      hint: 'sy-lega…',
      account: 'acct_old',
      limit: '',
      rpm: '',
      tpm: '',
      models: '',
      expires: '',
      spent: 500_000,
      reserved: 0,
    });
    await redis.hset(apiKeyHashesKey, hashSecret(secret), 'key_old');
    await redis.sadd(apiKeyIdsKey, 'key_old');
    // An hour old: inside the usage rows' retention (older rows are the retention's to delete).
    const settledAt = Math.floor(Date.now() / 1000) - 3600;
    const day = utcDay(settledAt * 1000);
    const record1 = {
      request_id: 'req_old_1',
      key_id: 'key_old',
      account_id: 'acct_old',
      model,
      vendor: 'openai',
      input_tokens: 10,
      cached_tokens: 0,
      output_tokens: 5,
      images: 0,
      audio_seconds: 0,
      video_seconds: 0,
      cost_micros: 500_000,
      status: 'completed',
      created: settledAt,
      duration_ms: 5,
    };
    await redis.xadd(legacyUsageStreamKey, '*', 'usage', JSON.stringify(record1));
    await redis.hset(usageDayKey(day), {
      'acct_old|key_old|gpt-4o-mini|requests': 1,
      'acct_old|key_old|gpt-4o-mini|cost_micros': 500_000,
    });

    const databaseUrl = await freshDatabase('upgrade');
    const gateway = await startGateway({
      env: { REDIS_URL: redisServer.url, DATABASE_URL: databaseUrl, ADMIN_TOKEN: adminToken },
    });
    try {
      const record = await openRecord(databaseUrl, { max: 2, migrate: false });
      const account = await record
        .selectFrom('accounts')
        .selectAll()
        .where('id', '=', 'acct_old')
        .executeTakeFirstOrThrow();
      assert.equal(
        account.credits_micros - account.settled_micros,
        2_500_000,
        "the record's balance is the one Redis held",
      );
      assert.equal(
        (await record.selectFrom('api_keys').selectAll().where('id', '=', 'key_old').executeTakeFirstOrThrow())
          .spent_micros,
        500_000,
      );
      assert.equal(
        (await record.selectFrom('ledger').selectAll().where('account_id', '=', 'acct_old').execute()).length,
        1,
      );
      await waitFor(
        async () => (await record.selectFrom('usage').select('request_id').execute()).length === 1,
        5000,
        'the usage row',
      );
      const { admin } = adminClient(() => gateway.url, adminToken);
      const usage = (await admin('GET', `/admin/usage?from=${day}&to=${day}&account_id=acct_old`)).json.data as Json[];
      assert.equal(usage[0]!.requests, 1);
      assert.equal(usage[0]!.cost_usd, 0.5);

      // Redis lost after the import: rebuilt from the record, the balance is still 2.5 USD and the key works.
      await gateway.stop();
      await redis.flushall();
      const again = await startGateway({
        env: { REDIS_URL: redisServer.url, DATABASE_URL: databaseUrl, ADMIN_TOKEN: adminToken },
      });
      const { admin: admin2 } = adminClient(() => again.url, adminToken);
      assert.equal((await admin2('GET', '/admin/accounts/acct_old')).json.balance_usd, 2.5);
      assert.equal((await again.client(secret).models.list()).data.length > 0, true);
      // Imported once: a second start adds nothing twice.
      assert.equal(
        (await record.selectFrom('ledger').selectAll().where('account_id', '=', 'acct_old').execute()).length,
        1,
      );
      await again.stop();
      await record.destroy();
    } finally {
      await gateway.stop('SIGKILL');
      redis.disconnect();
      await redisServer.remove();
    }
  });
});
