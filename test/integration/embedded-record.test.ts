import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { lstatSync, readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { adminClient, type Json } from '../support/admin-client.js';
import { cleanupsAfter } from '../support/cleanups.js';
import { ConsoleClient } from '../support/console-client.js';
import { startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startPrivateRedis } from '../support/redis-server.js';

/*
 * The embedded default record (no DATABASE_URL): every session its own under
 * load from the api, the worker process and the admin API at once; its files
 * the operator's alone whatever the umask; a second gateway in the same
 * DATA_DIR says whose record it uses and takes it over when that one stops;
 * a second gateway on the same port stops before it changes anything.
 */

const adminToken = 'embedded-admin-token';
const model = 'gpt-4o-mini';

describe('the embedded record', () => {
  const { defer, tempDir } = cleanupsAfter();

  async function embeddedGateway(
    env: Record<string, string> = {},
  ): Promise<{ gateway: GatewayProcess; dataDir: string; redisUrl: string }> {
    const redis = await startPrivateRedis({ aof: false });
    defer(() => redis.remove());
    const dataDir = env.DATA_DIR ?? tempDir('sy-emb-');
    const gateway = await startGateway({
      env: { DATABASE_URL: '', DATA_DIR: dataDir, REDIS_URL: redis.url, ADMIN_TOKEN: adminToken, ...env },
    });
    defer(() => gateway.stop('SIGKILL'));
    return { gateway, dataDir, redisUrl: redis.url };
  }

  it('keeps every session apart: members reading their own requests while chatting, and 40 concurrent credits', async () => {
    const { gateway } = await embeddedGateway();
    const { admin } = adminClient(() => gateway.url, adminToken);
    const members: Array<{ account: string; key: string }> = [];
    for (const name of ['ada', 'bob']) {
      const account = String(
        (await admin('POST', '/admin/accounts', { email: `${name}@example.com`, name, role: 'member' })).json.id,
      );
      assert.equal(
        (await admin('POST', `/admin/accounts/${account}/credits`, { amount_usd: 50, note: 'start' })).status,
        200,
      );
      members.push({
        account,
        key: String((await admin('POST', '/admin/keys', { name, account_id: account })).json.key),
      });
    }
    const bank = String(
      (await admin('POST', '/admin/accounts', { email: 'bank@example.com', name: 'bank', role: 'member' })).json.id,
    );

    const counts = { reads: 0, foreign: 0, errors500: 0, failures: [] as string[] };
    const note = (what: string) => counts.failures.length < 10 && counts.failures.push(what);
    const read = async (member: { account: string; key: string }, id: string) => {
      const res = await fetch(`${gateway.url}/v1/generation?id=${encodeURIComponent(id)}`, {
        headers: { authorization: `Bearer ${member.key}` },
        signal: AbortSignal.timeout(60_000),
      });
      const body = (await res.json()) as { data?: Json };
      counts.reads++;
      if (res.status >= 500) {
        counts.errors500++;
        note(`read ${res.status} ${JSON.stringify(body)}`);
      } else if (res.status === 200 && (body.data?.account_id !== member.account || body.data?.id !== id)) {
        counts.foreign++;
        note(`asked ${id} of ${member.account}, got ${String(body.data?.id)} of ${String(body.data?.account_id)}`);
      }
    };
    const lane = async (member: { account: string; key: string }, lane: number) => {
      const mine: string[] = [];
      for (let i = 0; i < 12; i++) {
        const id = `req_${member.account.slice(-6)}_${lane}_${i}_${randomBytes(4).toString('hex')}`;
        mine.push(id);
        const chat = fetch(`${gateway.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${member.key}`, 'content-type': 'application/json', 'x-request-id': id },
          body: JSON.stringify({ model, messages: [{ role: 'user', content: `hello ${i}` }] }),
          signal: AbortSignal.timeout(60_000),
        }).then(async (res) => {
          if (res.status >= 500) {
            counts.errors500++;
            note(`chat ${res.status} ${await res.text()}`);
          } else await res.arrayBuffer();
        });
        await Promise.all([chat, ...mine.slice(-4).map((own) => read(member, own))]);
      }
    };
    const credits = Array.from({ length: 40 }, async (_, i) => {
      const res = await fetch(`${gateway.url}/admin/accounts/${bank}/credits`, {
        method: 'POST',
        headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ amount_usd: (i + 1) / 100, note: `credit ${i}` }),
        signal: AbortSignal.timeout(60_000),
      });
      if (res.status !== 200) {
        if (res.status >= 500) counts.errors500++;
        note(`credit ${res.status} ${await res.text()}`);
      }
    });
    await Promise.all([
      ...members.flatMap((member) => Array.from({ length: 6 }, (_, n) => lane(member, n))),
      ...credits,
    ]);

    const summary = `${counts.reads} reads: ${counts.foreign} foreign rows, ${counts.errors500} HTTP 5xx; ${counts.failures.join(' | ')}`;
    console.log(`interleaving: ${summary}`);
    assert.equal(counts.foreign, 0, summary);
    assert.equal(counts.errors500, 0, summary);
    // Every credit is in the ledger once, each with the balance right after it, and the balance is their exact sum.
    const ledger = (await admin('GET', `/admin/accounts/${bank}/ledger?limit=1000`)).json.data as Json[];
    assert.equal(ledger.length, 40);
    const cents = ledger.map((entry) => Math.round(Number(entry.amount_usd) * 100)).sort((a, b) => a - b);
    assert.deepEqual(
      cents,
      Array.from({ length: 40 }, (_, i) => i + 1),
    );
    for (const entry of ledger)
      assert.equal(typeof entry.balance_usd, 'number', `ledger entry ${JSON.stringify(entry)} has its balance`);
    const oldestFirst = [...ledger].reverse();
    let running = 0;
    for (const entry of oldestFirst) {
      running += Math.round(Number(entry.amount_usd) * 1e6);
      assert.equal(
        Math.round(Number(entry.balance_usd) * 1e6),
        running,
        "each entry's balance counts every earlier one",
      );
    }
    assert.equal(Math.round(Number((await admin('GET', `/admin/accounts/${bank}`)).json.balance_usd) * 1e6), 8_200_000);
  });

  it(
    "keeps DATA_DIR the operator's alone under umask 000: the folder 0700, no file or folder under it open to " +
      'others',
    async () => {
      const previous = process.umask(0);
      let started: Awaited<ReturnType<typeof embeddedGateway>>;
      try {
        started = await embeddedGateway();
      } finally {
        process.umask(previous);
      }
      const { gateway, dataDir } = started;
      const { admin } = adminClient(() => gateway.url, adminToken);
      assert.equal((await admin('POST', '/admin/accounts', { email: 'perm@example.com', name: 'perm' })).status, 201);
      assert.equal(lstatSync(dataDir).mode & 0o777, 0o700);
      const open: string[] = [];
      let files = 0;
      const walk = (dir: string) => {
        for (const entry of readdirSync(dir, { withFileTypes: true })) {
          const at = join(dir, entry.name);
          if (entry.isSymbolicLink()) continue;
          files++;
          if ((lstatSync(at).mode & 0o077) !== 0) open.push(`${at} ${(lstatSync(at).mode & 0o777).toString(8)}`);
          if (entry.isDirectory()) walk(at);
        }
      };
      walk(dataDir);
      assert.ok(files > 100, `the record's files are under DATA_DIR (${files})`);
      assert.deepEqual(open.slice(0, 10), [], `${open.length} of ${files} entries open to group or others`);
    },
  );

  it('a second gateway on the same port stops before it touches anything, and says why', async () => {
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as { port: number };
        probe.close(() => resolve(port));
      });
    });
    const env = { PORT: String(port), ADMIN_EMAIL: 'owner@example.com', ADMIN_PASSWORD: 'first-password' };
    const { gateway, dataDir, redisUrl } = await embeddedGateway(env);
    const second = await startGateway({
      env: {
        ...env,
        ADMIN_PASSWORD: 'second-password',
        DATABASE_URL: '',
        DATA_DIR: dataDir,
        REDIS_URL: redisUrl,
        ADMIN_TOKEN: adminToken,
      },
    }).then(
      (proc) => {
        defer(() => proc.stop('SIGKILL'));
        return undefined;
      },
      (error: Error) => error.message,
    );
    assert.ok(second, 'the second gateway does not start');
    assert.match(second, new RegExp(`port ${port} .*in use`));
    assert.doesNotMatch(second, /console admin from ADMIN_EMAIL/, 'the admin was not touched');
    // The first still signs its admin in with its own password.
    const signin = await new ConsoleClient(gateway.url).signIn('owner@example.com', 'first-password');
    assert.equal(signin.status, 200, JSON.stringify(signin.json));
  });

  it('a second gateway in the same DATA_DIR says whose record it uses, and takes it over when that one stops', async () => {
    const { gateway: first, dataDir, redisUrl } = await embeddedGateway();
    const { admin: firstAdmin } = adminClient(() => first.url, adminToken);
    const account = String(
      (await firstAdmin('POST', '/admin/accounts', { email: 'kept@example.com', name: 'kept' })).json.id,
    );
    assert.equal(
      (await firstAdmin('POST', `/admin/accounts/${account}/credits`, { amount_usd: 3, note: 'before' })).status,
      200,
    );
    const key = String((await firstAdmin('POST', '/admin/keys', { name: 'kept', account_id: account })).json.key);

    const second = await startGateway({
      env: { DATABASE_URL: '', DATA_DIR: dataDir, REDIS_URL: redisUrl, ADMIN_TOKEN: adminToken },
    });
    defer(() => second.stop('SIGKILL'));
    const firstPid = first.proc.pid!;
    assert.ok(
      second.logs.some((line) => line.includes(`served by another process (pid ${firstPid})`)),
      `the second names the owner:\n${second.logs.join('\n')}`,
    );
    assert.ok(
      first.logs.some((line) => line.includes(`served by this process (pid ${firstPid})`)),
      'the first says it serves it',
    );

    assert.equal(await first.stop(), 0);
    await waitFor(
      () => second.logs.some((line) => line.includes(`owns the embedded record now`)),
      20_000,
      'the takeover in the log',
    );
    assert.ok(
      second.logs.some((line) => line.includes(`(pid ${firstPid}) has stopped`)),
      'it says the owner stopped',
    );
    // The record answers through the second gateway: a key, a chat, a credit.
    const { admin } = adminClient(() => second.url, adminToken);
    const answer = await second
      .client(key)
      .chat.completions.create({ model, messages: [{ role: 'user', content: 'after the owner left' }] });
    assert.ok(answer.choices[0]!.message.content);
    assert.equal(
      (await admin('POST', `/admin/accounts/${account}/credits`, { amount_usd: 1, note: 'after' })).status,
      200,
    );
    const ledger = (await admin('GET', `/admin/accounts/${account}/ledger`)).json.data as Json[];
    assert.deepEqual(
      ledger.map((entry) => entry.note),
      ['after', 'before'],
    );
    assert.equal(second.proc.exitCode, null, 'the second gateway runs on');
    assert.ok(
      !second.logs.some((line) => /worker process (crashed|exited)/.test(line)),
      `no worker crash:\n${second.logs.join('\n')}`,
    );
    assert.equal(await second.stop(), 0);
  });
});
