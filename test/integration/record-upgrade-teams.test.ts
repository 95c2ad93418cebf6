import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { onDatabase, recordUrlFor, waitForUsage } from '../support/record.js';
import { ConsoleClient } from '../support/console-client.js';

/*
 * The record of the release before teams (test/fixtures/record/release-64.sql, made by that release: its header
 * says how), loaded into a fresh database and opened by today's gateway on an empty Redis: the teams migration runs,
 * Redis is loaded from the record, and nothing is lost. Every account is a person owning its own team of one.
 */

const fixture = readFileSync(new URL('../fixtures/record/release-64.sql', import.meta.url), 'utf8');
const secret = (name: string) => new RegExp(`^--   ${name}:\\s+(sy-\\S+)`, 'm').exec(fixture)![1]!;
const alice = 'acct_f6c9c8bc146ab4e0';
const bob = 'acct_d0b552cdf7c5db2f';
const adminToken = 'upgrade-teams-admin-token';

type Row = Record<string, unknown>;
const tables = {
  accounts:
    'select id, email, name, role, password, unlimited, disabled, deleted, credits_micros, settled_micros, weight, service_tiers, cache_max_ttl_s from accounts order by id',
  api_keys:
    'select id, account_id, name, created, hash, limit_micros, rpm, tpm, models, expires, cache_ttl_s, spent_micros, revoked, admin_limit_micros, admin_rpm, admin_tpm, admin_models from api_keys order by id',
  ledger: 'select * from ledger order by id',
  usage: 'select request_id, account_id, key_id, cost_micros, status from usage order by request_id',
  // The columns that release had: those added since are checked apart (what its rows read now).
  usage_daily:
    'select day, account_id, key_id, model, requests, input_tokens, cached_tokens, output_tokens, images, audio_seconds, video_seconds, ' +
    'cost_micros, saved_micros from usage_daily order by day, account_id, key_id, model',
} as const;

describe('record upgrade to teams', () => {
  let redis: Redis;
  let database: string;
  let gateway: GatewayProcess;
  const before_: Record<string, Row[]> = {};
  const read = (sql: string) => onDatabase(database, async (client) => (await client.query(sql)).rows as Row[]);

  before(async () => {
    let url: string;
    ({ redis, url } = await freshRedis(5));
    database = await recordUrlFor(url);
    await onDatabase(database, (client) => client.query(fixture));
    for (const [table, sql] of Object.entries(tables)) before_[table] = await read(sql);
    // The admin, Alice, Bob and the built-in default account.
    assert.equal(before_.accounts!.length, 4);
    gateway = await startGateway({
      env: { REDIS_URL: url, ADMIN_TOKEN: adminToken, MOCK_BILLING: 'on', TRUST_PROXY: 'on' },
    });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it('migrates the record and keeps every row: accounts, keys, ledger, request log, day totals', async () => {
    const migrations = (await read('select name from record_migrations order by name')).map((row) => row.name);
    assert.ok(migrations.includes('0011_teams'), String(migrations));
    for (const [table, sql] of Object.entries(tables)) assert.deepEqual(await read(sql), before_[table], table);
    assert.deepEqual(
      (await read('select distinct kind from accounts')).map((row) => row.kind),
      ['person'],
    );
    assert.deepEqual(await read('select * from team_members'), []);
    assert.deepEqual(
      (await read('select distinct created_by from api_keys')).map((row) => row.created_by),
      [null],
    );
    // What the vendor's prompt cache wrote and saved was not kept then: every row from before reads 0.
    assert.ok(migrations.includes('0017_prompt_cache_saving'), String(migrations));
    for (const table of ['usage', 'usage_daily']) {
      const sums =
        'count(*)::int as n, sum(cache_write_tokens)::int as written, sum(prompt_cache_saved_micros)::int as saved';
      const [kept] = await read(`select ${sums} from ${table}`);
      assert.ok(Number(kept!.n) > 0, `${table} has rows from before`);
      assert.deepEqual([kept!.written, kept!.saved], [0, 0], table);
    }
  });

  it('shows the accounts as before through the admin API: balances, weight, tiers, cache caps', async () => {
    const res = await fetch(`${gateway.url}/admin/accounts`, { headers: { authorization: `Bearer ${adminToken}` } });
    const { data } = (await res.json()) as { data: Array<Row & { id: string }> };
    const byId = new Map(data.map((a) => [a.id, a]));
    for (const row of before_.accounts!) {
      const shown = byId.get(row.id as string)!;
      assert.equal(shown.kind, 'person');
      assert.equal(shown.weight, row.weight);
      assert.equal(
        Math.round((shown.balance_usd as number) * 1e6),
        Number(row.credits_micros) - Number(row.settled_micros),
      );
    }
    assert.deepEqual(byId.get(alice)!.service_tiers, ['priority', 'default']);
    assert.equal(byId.get(alice)!.cache_max_ttl_s, 600);
    assert.deepEqual(byId.get(bob)!.service_tiers, ['flex']);
    assert.equal(byId.get(bob)!.cache_max_ttl_s, 0);
  });

  it('still authenticates and bills the old keys, and refuses the revoked one', async () => {
    const sdk = (key: string) => new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
    const answer = await sdk(secret('alice limited')).chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'after the upgrade' }],
    });
    assert.ok(answer.choices[0]?.message.content);
    const row = await waitForUsage(
      redis,
      (candidate) =>
        candidate.key_id === 'key_a389d015ed58b39f' &&
        !before_.usage!.some((old) => old.request_id === candidate.request_id),
    );
    assert.equal(row.account_id, alice);
    assert.ok(row.cost_micros > 0);
    await assert.rejects(sdk(secret('alice old')).models.list(), OpenAI.AuthenticationError);
    // A model the key does not allow is still refused.
    await assert.rejects(
      sdk(secret('alice limited')).embeddings.create({ model: 'text-embedding-3-small', input: 'x' }),
      (error: unknown) => error instanceof OpenAI.APIError && error.status !== 200,
    );
  });

  it('signs a member in with their old password, in their own account as its owner, their keys theirs', async () => {
    const console = new ConsoleClient(gateway.url, '192.0.2.64');
    assert.equal((await console.signIn('ALICE@release64.test', 'alice-password-64')).status, 200);
    const teams = await console.request<{ data: Array<{ id: string; kind: string; role: string }> }>(
      'GET',
      '/console/api/teams',
    );
    assert.deepEqual(
      teams.json.data.map((t) => [t.id, t.kind, t.role]),
      [[alice, 'person', 'owner']],
    );
    const keys = await console.request<{
      data: Array<{ name: string; rpm: number | null; created_by: { id: string } | null }>;
    }>('GET', '/console/api/keys');
    assert.deepEqual(keys.json.data.map((k) => k.name).sort(), ['alice laptop', 'alice limited']);
    for (const key of keys.json.data) assert.equal(key.created_by?.id, alice);
    assert.equal(keys.json.data.find((k) => k.name === 'alice laptop')?.rpm, 10);
    const requests = await console.request<{ counts: { requests: number } }>('GET', '/console/api/requests');
    assert.ok(requests.json.counts.requests >= 4, JSON.stringify(requests.json.counts));
  });
});
