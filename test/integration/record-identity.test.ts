import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { promisify } from 'node:util';
import pg from 'pg';
import {
  billingBucket,
  recordEpochKey,
  recordLoadedKey,
  usageSetAsideKey,
  usageStreamKey,
} from '../../shared/redis-keys.js';
import { openRecord } from '../../storage/record/database.js';
import { HotState } from '../../storage/record/hot-state.js';
import { adminClient } from '../support/admin-client.js';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { startPrivatePostgres } from '../support/postgres-server.js';
import { freshDatabase, onDatabase, testDatabaseServer } from '../support/record.js';

/*
 * Redis's hot state (keys, balances) is stamped with the record it came from.
 * A gateway that finds Redis loaded from another record, or from its own
 * record before a restore, drops it and loads it from the record it uses now:
 * the record wins, and the log says what changed.
 */

const adminToken = 'record-identity-admin';
const model = 'gpt-4o-mini';
const run = promisify(execFile);

const recordId = (url: string) =>
  onDatabase(url, async (c) => (await c.query<{ id: string }>('select id from record_identity')).rows[0]!.id);
const databaseName = (url: string) => new URL(url).pathname.slice(1);
const serverAdmin = <T>(work: (client: pg.Client) => Promise<T>) => onDatabase(testDatabaseServer, work);

/** Status of a request made with a key (GET /v1/models needs a valid key). */
async function keyStatus(gateway: GatewayProcess, key: string): Promise<number> {
  const res = await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  await res.arrayBuffer();
  return res.status;
}

/** The gateway's log lines (JSON) whose message matches. */
const logLines = (gateway: GatewayProcess, match: RegExp) =>
  gateway.logs.flatMap((line) => {
    try {
      const parsed = JSON.parse(line) as { msg?: string; level?: number | string } & Record<string, unknown>;
      return typeof parsed.msg === 'string' && match.test(parsed.msg) ? [parsed] : [];
    } catch {
      return [];
    }
  });

describe('Redis is stamped with the record its hot state came from', () => {
  const gateways: GatewayProcess[] = [];
  const cleanups: Array<() => Promise<unknown>> = [];
  after(async () => {
    for (const gateway of gateways) await gateway.stop('SIGKILL');
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  });

  async function gatewayOn(databaseUrl: string, redisUrl: string): Promise<GatewayProcess> {
    const gateway = await startGateway({
      env: { REDIS_URL: redisUrl, DATABASE_URL: databaseUrl, ADMIN_TOKEN: adminToken },
    });
    gateways.push(gateway);
    return gateway;
  }

  /** An account with `usd` of credit and a key of its own. */
  async function accountWithKey(
    gateway: GatewayProcess,
    email: string,
    usd: number,
  ): Promise<{ account: string; key: string; keyId: string }> {
    const { admin } = adminClient(() => gateway.url, adminToken);
    const made = await admin('POST', '/admin/accounts', { email, name: email });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const account = String(made.json.id);
    assert.equal(
      (await admin('POST', `/admin/accounts/${account}/credits`, { amount_usd: usd, note: 'start' })).status,
      200,
    );
    const key = (await admin('POST', '/admin/keys', { name: 'k', account_id: account })).json;
    return { account, key: String(key.key), keyId: String(key.id) };
  }

  const balance = async (gateway: GatewayProcess, account: string) =>
    (await adminClient(() => gateway.url, adminToken).admin('GET', `/admin/accounts/${account}`)).json.balance_usd;

  it("a gateway on another record with the same Redis serves that record's keys and balances, not the first's", async () => {
    const { url: redisUrl, redis } = await freshRedis(1);
    cleanups.push(() => redis.quit());
    const recordA = await freshDatabase('ident_a');
    const recordB = await freshDatabase('ident_b');

    // Record B gets an account of its own, through a Redis of its own.
    const { url: otherRedis, redis: other } = await freshRedis(2);
    cleanups.push(() => other.quit());
    let gateway = await gatewayOn(recordB, otherRedis);
    const inB = await accountWithKey(gateway, 'b@example.com', 2);
    await gateway.stop();

    gateway = await gatewayOn(recordA, redisUrl);
    const inA = await accountWithKey(gateway, 'a@example.com', 5);
    await gateway.client(inA.key).chat.completions.create({ model, messages: [{ role: 'user', content: 'on A' }] });
    assert.equal(await keyStatus(gateway, inA.key), 200);
    await gateway.stop();

    // The same Redis, record B.
    gateway = await gatewayOn(recordB, redisUrl);
    assert.equal(await keyStatus(gateway, inA.key), 401, "A's key is not B's");
    const { admin } = adminClient(() => gateway.url, adminToken);
    assert.equal((await admin('GET', `/admin/accounts/${inA.account}`)).status, 404, "A's account is not served");
    const listed = ((await admin('GET', '/admin/accounts')).json.data as Array<{ id: string }>).map((a) => a.id);
    assert.ok(listed.includes(inB.account) && !listed.includes(inA.account), `accounts served: ${listed.join(', ')}`);
    assert.equal(await balance(gateway, inB.account), 2);
    const answer = await gateway
      .client(inB.key)
      .chat.completions.create({ model, messages: [{ role: 'user', content: 'on B' }] });
    assert.ok(answer.choices[0]?.message.content);

    const [said] = logLines(gateway, /different record/);
    assert.ok(said, `the log says the record changed:\n${gateway.logs.join('\n')}`);
    assert.equal(said.level, 40, 'a warning');
    assert.equal((said.from as { record: string }).record, await recordId(recordA));
    assert.equal((said.to as { record: string }).record, await recordId(recordB));
    // The stamp is B's now.
    assert.match((await redis.get(recordLoadedKey)) ?? '', new RegExp(`^${await recordId(recordB)} `));
  });

  it(
    'a record restored into a new database wins over Redis: a key made after the backup is refused, the balance is ' +
      "the backup's, settled usage of the lost timeline is set aside",
    async () => {
      const { url: redisUrl, redis } = await freshRedis(3);
      cleanups.push(() => redis.quit());
      const record = await freshDatabase('ident_restore');
      const backup = `${databaseName(record)}_bak`;
      cleanups.push(() => serverAdmin((c) => c.query(`drop database if exists "${backup}" with (force)`)));

      let gateway = await gatewayOn(record, redisUrl);
      const before = await accountWithKey(gateway, 'restore@example.com', 3);
      await gateway.stop();
      // The backup: a copy of the database taken with the gateway stopped.
      await serverAdmin((c) => c.query(`create database "${backup}" template "${databaseName(record)}"`));

      gateway = await gatewayOn(record, redisUrl);
      const { admin } = adminClient(() => gateway.url, adminToken);
      const later = (await admin('POST', '/admin/keys', { name: 'after the backup', account_id: before.account })).json;
      assert.equal(
        (await admin('POST', `/admin/accounts/${before.account}/credits`, { amount_usd: 10, note: 'after the backup' }))
          .status,
        200,
      );
      assert.equal(await keyStatus(gateway, String(later.key)), 200);
      assert.equal(await balance(gateway, before.account), 13);
      await gateway.stop();
      // A settlement of the lost timeline still waiting in Redis for the record's writer.
      const pending = JSON.stringify({
        request_id: 'req_lost_timeline',
        account_id: before.account,
        key_id: String(later.id),
        model,
        cost_micros: 250_000,
        status: 'completed',
        created: Math.floor(Date.now() / 1000),
      });
      await redis.xadd(usageStreamKey(billingBucket(before.account)), '*', 'usage', pending);

      // The restore: the database dropped and made again from the backup (a new database, the same name).
      await serverAdmin(async (c) => {
        await c.query(`drop database "${databaseName(record)}" with (force)`);
        await c.query(`create database "${databaseName(record)}" template "${backup}"`);
      });

      gateway = await gatewayOn(record, redisUrl);
      assert.equal(
        await keyStatus(gateway, String(later.key)),
        401,
        'the key made after the backup is gone everywhere',
      );
      assert.equal(await keyStatus(gateway, before.key), 200, 'the key in the backup works');
      assert.equal(await balance(gateway, before.account), 3, "the restored ledger's balance");
      const [said] = logLines(gateway, /restored or copied into another database/);
      assert.ok(said, `the log says the record was restored:\n${gateway.logs.join('\n')}`);
      assert.notEqual((said.from as { database: string }).database, (said.to as { database: string }).database);
      assert.deepEqual(said.dropped, { accounts: 2, keys: 2, usage: 1 });

      // The lost timeline's settlement is kept aside, never written to the restored record nor counted.
      const aside = await redis.xrange(usageSetAsideKey, '-', '+');
      assert.equal(aside.length, 1);
      assert.ok(aside[0]![1].includes(pending));
      assert.equal(await redis.xlen(usageStreamKey(billingBucket(before.account))), 0);
      assert.ok((await redis.ttl(usageSetAsideKey)) > 0, 'kept for a while, not for ever');
      const rows = await onDatabase(
        record,
        async (c) =>
          (await c.query(`select count(*)::int as n from usage where request_id = 'req_lost_timeline'`)).rows[0]!.n,
      );
      assert.equal(rows, 0);
      assert.equal(await balance(gateway, before.account), 3);
    },
  );

  it('a record restored into the same database (pg_restore --clean) shows by its high-water mark', async () => {
    const { url: redisUrl, redis } = await freshRedis(4);
    cleanups.push(() => redis.quit());
    const record = await freshDatabase('ident_dump');
    const dir = mkdtempSync(join(tmpdir(), 'sy-dump-'));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    const dump = join(dir, 'record.dump');

    const gateway = await gatewayOn(record, redisUrl);
    const before = await accountWithKey(gateway, 'dump@example.com', 3);
    // The backup, taken while the gateway runs.
    await run('pg_dump', ['--format=custom', `--file=${dump}`, record]);
    const { admin } = adminClient(() => gateway.url, adminToken);
    const later = (await admin('POST', '/admin/keys', { name: 'after the dump', account_id: before.account })).json;
    assert.equal(
      (await admin('POST', `/admin/accounts/${before.account}/credits`, { amount_usd: 10, note: 'after the dump' }))
        .status,
      200,
    );
    await gateway.stop();
    const oid = () =>
      serverAdmin(
        async (c) =>
          (
            await c.query<{ oid: string }>(`select oid::text from pg_database where datname = $1`, [
              databaseName(record),
            ])
          ).rows[0]!.oid,
      );
    const oidBefore = await oid();
    const markBefore = Number(await redis.get(recordEpochKey));

    await run('pg_restore', ['--clean', '--if-exists', '--single-transaction', `--dbname=${record}`, dump]);
    assert.equal(await oid(), oidBefore, 'the same database: only the mark tells');
    const restoredMark = await onDatabase(record, async (c) =>
      Number((await c.query('select epoch from record_identity')).rows[0]!.epoch),
    );
    assert.ok(restoredMark < markBefore, `the restored mark ${restoredMark} is behind Redis's ${markBefore}`);

    const again = await gatewayOn(record, redisUrl);
    assert.equal(await keyStatus(again, String(later.key)), 401);
    assert.equal(await keyStatus(again, before.key), 200);
    assert.equal(await balance(again, before.account), 3);
    const [said] = logLines(again, /restored from a backup/);
    assert.ok(said, `the log says the record was restored:\n${again.logs.join('\n')}`);
    assert.equal((said.from as { epoch: number }).epoch, markBefore);
  });

  it("a copy of the cluster's files put back (the embedded record's backup) shows by the mark", async () => {
    const { redis } = await freshRedis(6);
    cleanups.push(() => redis.quit());
    const server = await startPrivatePostgres();
    cleanups.push(() => server.remove());
    const warnings: Array<{ fields: Record<string, unknown>; msg: string }> = [];
    const log = {
      info() {},
      warn: (fields: Record<string, unknown>, msg: string) => warnings.push({ fields, msg }),
      error() {},
    } as never;
    const open = () => openRecord(server.url, { max: 2 });

    let record = await open();
    await new HotState(redis, record, log).check();
    await record.destroy();
    // The backup: the cluster's folder copied with the server stopped, owner and modes kept.
    await server.stop('SIGINT');
    const backup = `${server.data}.backup`;
    await run('cp', ['-a', server.data, backup]);
    await server.start();
    // The gateway runs on after the backup: its checks raise the mark, in the record and in Redis.
    record = await open();
    const hot = new HotState(redis, record, log);
    await hot.check();
    await hot.check();
    await record.destroy();
    const seen = Number(await redis.get(recordEpochKey));
    // The restore: the folder put back in place, with the server stopped.
    await server.stop('SIGINT');
    await run('rm', ['-rf', server.data]);
    await run('mv', [backup, server.data]);
    await server.start();

    record = await open();
    assert.equal(await new HotState(redis, record, log).check(), true, 'loaded anew');
    await record.destroy();
    const said = warnings.find((w) => /restored from a backup/.test(w.msg));
    assert.ok(said, warnings.map((w) => w.msg).join(' | '));
    assert.equal((said.fields.from as { epoch: number }).epoch, seen);
    assert.ok((said.fields.to as { epoch: number }).epoch < seen);
    assert.deepEqual(
      {
        record: (said.fields.from as { record: string }).record,
        system: (said.fields.from as { system: string }).system,
        database: (said.fields.from as { database: string }).database,
      },
      {
        record: (said.fields.to as { record: string }).record,
        system: (said.fields.to as { system: string }).system,
        database: (said.fields.to as { database: string }).database,
      },
      'the same record, cluster and database',
    );
  });

  it(
    'processes sharing one Redis do not fight: one reloads, the others find the new stamp; a foreign stamp under a ' +
      'running process is said, not fought',
    async () => {
      const { redis } = await freshRedis(5);
      cleanups.push(() => redis.quit());
      const urlA = await freshDatabase('ident_race_a');
      const urlB = await freshDatabase('ident_race_b');
      const a = await openRecord(urlA, { max: 2 });
      const b = await openRecord(urlB, { max: 2 });
      cleanups.push(
        () => a.destroy(),
        () => b.destroy(),
      );
      const warnings: string[] = [];
      const errors: string[] = [];
      const log = {
        info() {},
        warn: (_: unknown, msg: string) => warnings.push(msg),
        error: (_: unknown, msg: string) => errors.push(msg),
      } as never;

      const onA = new HotState(redis, a, log);
      assert.equal(await onA.check(), true, 'an empty Redis is loaded');
      assert.deepEqual(warnings, []);

      // Four processes start on record B at once.
      await Promise.all(Array.from({ length: 4 }, () => new HotState(redis, b, log).check()));
      assert.equal(warnings.filter((m) => /different record/.test(m)).length, 1, `one reload: ${warnings.join(' | ')}`);
      assert.match((await redis.get(recordLoadedKey)) ?? '', new RegExp(`^${await recordId(urlB)} `));

      // The process on A, still running, finds B's stamp: it says so and leaves it.
      assert.equal(await onA.check(), false);
      assert.equal(errors.length, 1);
      assert.match(errors[0]!, /another record/);
      assert.match((await redis.get(recordLoadedKey)) ?? '', new RegExp(`^${await recordId(urlB)} `));
      await onA.check();
      assert.equal(errors.length, 1, 'said once, not every check');

      // A Redis loaded by a version before the stamp (its mark a time) is loaded anew, once; the usage waiting is
      // most likely this record's, and stays for the writer.
      await redis.set(recordLoadedKey, String(Date.now()));
      await redis.xadd(
        usageStreamKey(0),
        '*',
        'usage',
        JSON.stringify({
          request_id: 'req_before_the_stamp',
          account_id: 'acct_x',
          key_id: 'key_x',
          model,
          cost_micros: 1,
          status: 'completed',
          created: 1,
        }),
      );
      await Promise.all([new HotState(redis, b, log).check(), new HotState(redis, b, log).check()]);
      assert.equal(warnings.filter((m) => /no record stamp/.test(m)).length, 1);
      assert.match((await redis.get(recordLoadedKey)) ?? '', new RegExp(`^${await recordId(urlB)} `));
      assert.equal(await redis.xlen(usageStreamKey(0)), 1);
      assert.equal(await redis.exists(usageSetAsideKey), 0);
    },
  );
});
