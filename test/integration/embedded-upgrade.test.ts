import assert from 'node:assert/strict';
import { existsSync, lstatSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import { hashSecret } from '../../api/accounts/key-store.js';
import { adminClient, type Json } from '../support/admin-client.js';
import { cleanupsAfter } from '../support/cleanups.js';
import { startGateway } from '../support/gateway.js';
import { startPrivateRedis } from '../support/redis-server.js';

/*
 * A DATA_DIR an older gateway made (its record in PGlite under DATA_DIR/pg,
 * its first migration only) is upgraded on the first start: every account, key,
 * credit and usage row is in the new embedded PostgreSQL, the old folder is
 * kept renamed, and the log says so. While an older gateway still holds the
 * folder, the start refuses and changes nothing.
 */

const adminToken = 'upgrade-admin-token';
const secret = `sy-${'u'.repeat(43)}`;

/**
 * An older gateway's record, as it left it: the schema of its first migration only (before the request log,
 * the admin limits and the record's identity) and the migrator's note of it, one member with credits, a key, usage.
 */
async function makePgliteRecord(folder: string): Promise<void> {
  const db = new PGlite(folder);
  // Used an hour ago (usage pages show recent days).
  const used = Math.floor(Date.now() / 1000) - 3600;
  const day = new Date(used * 1000).toISOString().slice(0, 10);
  await db.exec(`
    create table accounts (
      id text primary key, email text not null default '', name text not null default '', role text not null default 'member',
      created bigint not null, password text not null default '', unlimited boolean not null default false,
      disabled boolean not null default false, deleted boolean not null default false,
      credits_micros bigint not null default 0, settled_micros bigint not null default 0, playground_key text);
    create unique index accounts_email on accounts (lower(email)) where email <> '' and not deleted;
    create table api_keys (
      id text primary key, account_id text not null references accounts (id), name text not null default '', created bigint not null,
      hash text not null unique, hint text not null default '', limit_micros bigint, rpm integer, tpm integer, models text,
      expires bigint, spent_micros bigint not null default 0, last_used bigint, revoked bigint);
    create table ledger (
      id bigserial primary key, account_id text not null references accounts (id), amount_micros bigint not null,
      balance_micros bigint, note text not null default '', time bigint not null);
    create table usage (
      request_id text primary key, account_id text not null, key_id text not null, model text not null, vendor text not null default '',
      input_tokens bigint not null default 0, cached_tokens bigint not null default 0, output_tokens bigint not null default 0,
      images integer not null default 0, audio_seconds double precision not null default 0, video_seconds double precision not null default 0,
      cost_micros bigint not null default 0, status text not null, created bigint not null, duration_ms integer not null default 0);
    create index usage_account_created on usage (account_id, created desc);
    create index usage_created on usage (created);
    create table usage_daily (
      day date not null, account_id text not null, key_id text not null, model text not null, requests bigint not null default 0,
      input_tokens bigint not null default 0, cached_tokens bigint not null default 0, output_tokens bigint not null default 0,
      images bigint not null default 0, audio_seconds bigint not null default 0, video_seconds bigint not null default 0,
      cost_micros bigint not null default 0, primary key (account_id, day, key_id, model));
    create table record_meta (name text primary key, value text not null);
    create table record_migrations (name varchar(255) not null primary key, timestamp varchar(255) not null);
    insert into record_migrations values ('0001_record', '2023-11-14T00:00:00.000Z');
    insert into accounts (id, email, name, role, created, password, credits_micros, settled_micros)
      values ('acct_old', 'old@example.com', 'Old', 'member', 1700000000, '', 12345678, 1234567);
    insert into api_keys (id, account_id, name, created, hash, hint, spent_micros, last_used)
      values ('key_old', 'acct_old', 'old key', 1700000000, '${hashSecret(secret)}', 'sy-uuuu…', 1234567, ${used});
    insert into ledger (account_id, amount_micros, balance_micros, note, time) values
      ('acct_old', 10000000, 10000000, 'first', 1700000100), ('acct_old', 2345678, 12345678, 'second', 1700000200);
    insert into usage (request_id, account_id, key_id, model, vendor, input_tokens, output_tokens, cost_micros, status, created, duration_ms) values
      ('req_old_1', 'acct_old', 'key_old', 'gpt-4o-mini', 'mock', 10, 20, 1000000, 'completed', ${used - 60}, 5),
      ('req_old_2', 'acct_old', 'key_old', 'gpt-4o-mini', 'mock', 3, 4, 234567, 'completed', ${used}, 5);
    insert into usage_daily (day, account_id, key_id, model, requests, input_tokens, output_tokens, cost_micros)
      values ('${day}', 'acct_old', 'key_old', 'gpt-4o-mini', 2, 13, 24, 1234567);`);
  await db.close();
}

describe('a DATA_DIR of the PGlite embedded record', () => {
  const { defer, tempDir } = cleanupsAfter();

  it(
    'is refused while an older gateway holds it, then upgraded on the first start: keys, balances, ledger and ' +
      'usage kept, the folder kept renamed',
    async () => {
      const dataDir = tempDir('sy-upg-');
      await makePgliteRecord(join(dataDir, 'pg'));
      const redis = await startPrivateRedis({ aof: false });
      defer(() => redis.remove());
      const env = { DATABASE_URL: '', DATA_DIR: dataDir, REDIS_URL: redis.url, ADMIN_TOKEN: adminToken };

      // An older gateway (this live process, as far as the lock says) still serves the folder.
      writeFileSync(join(dataDir, 'pg.lock'), String(process.pid));
      const refused = await startGateway({ env }).then(
        (gateway) => {
          defer(() => gateway.stop('SIGKILL'));
          return '';
        },
        (error: Error) => error.message,
      );
      assert.match(refused, /older gateway that still runs \(pid \d+/);
      assert.ok(existsSync(join(dataDir, 'pg', 'PG_VERSION')), 'the old record is where it was');
      rmSync(join(dataDir, 'pg.lock'));

      const gateway = await startGateway({ env });
      defer(() => gateway.stop('SIGKILL'));
      assert.ok(
        gateway.logs.some((line) => line.includes('upgraded the embedded record')),
        gateway.logs.join('\n'),
      );
      assert.ok(
        gateway.logs.some((line) => line.includes('pg.pglite-backup')),
        'the log names the backup',
      );
      assert.ok(!existsSync(join(dataDir, 'pg')), 'the old folder is renamed');
      const backup = join(dataDir, 'pg.pglite-backup');
      assert.ok(existsSync(join(backup, 'PG_VERSION')), 'and kept');
      assert.equal(lstatSync(backup).mode & 0o777, 0o700);
      assert.ok(
        readdirSync(backup).every((name) => (lstatSync(join(backup, name)).mode & 0o077) === 0),
        "the backup is the operator's alone",
      );

      const { admin } = adminClient(() => gateway.url, adminToken);
      const account = (await admin('GET', '/admin/accounts/acct_old')).json;
      assert.equal(account.email, 'old@example.com');
      assert.equal(account.balance_usd, 11.111111);
      const ledger = (await admin('GET', '/admin/accounts/acct_old/ledger')).json.data as Json[];
      assert.deepEqual(
        ledger.map((entry) => [entry.amount_usd, entry.balance_usd, entry.note]),
        [
          [2.345678, 12.345678, 'second'],
          [10, 10, 'first'],
        ],
      );
      const key = (await admin('GET', '/admin/keys/key_old')).json;
      assert.equal(key.spent_usd, 1.234567);
      const usage = ((await admin('GET', '/admin/usage?account_id=acct_old')).json.data as Json[])[0];
      assert.equal(usage?.requests, 2);

      // The key authenticates and spends; a new credit takes the next ledger id (the sequence went on).
      const answer = await gateway
        .client(secret)
        .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'still here' }] });
      assert.ok(answer.choices[0]!.message.content);
      assert.equal(
        (await admin('POST', '/admin/accounts/acct_old/credits', { amount_usd: 1, note: 'third' })).status,
        200,
      );
      const after = (await admin('GET', '/admin/accounts/acct_old/ledger')).json.data as Json[];
      assert.equal(after[0]!.note, 'third');
      assert.ok(Number(after[0]!.id) > Number(after[1]!.id));
      assert.equal(await gateway.stop(), 0);

      // A second start finds nothing left to upgrade.
      const again = await startGateway({ env });
      defer(() => again.stop('SIGKILL'));
      assert.ok(!again.logs.some((line) => line.includes('upgrad')), again.logs.join('\n'));
      assert.equal(
        (await adminClient(() => again.url, adminToken).admin('GET', '/admin/accounts/acct_old')).json.email,
        'old@example.com',
      );
    },
  );
});
