import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { defaultAccountId } from '../../shared/accounts.js';
import { accountKey } from '../../shared/redis-keys.js';
import { ConsoleClient } from '../support/console-client.js';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { adminClient, expectAdminError, type ErrorBody, type Json } from '../support/admin-client.js';

/*
 * Who spends without a balance: the default account, and admin accounts
 * unless a balance is set for them. Members start at $0 (or the sign-up
 * credit) and spend what they are credited. Offline, the mock serves
 * gpt-4o-mini at its real price, so a $0 balance is refused.
 */

const adminToken = 'admin-balances-token';
const adminEmail = 'first-admin@example.com';
const adminPassword = 'first-admin-password';

describe('admin balances', () => {
  let redis: Redis;
  let api: GatewayProcess;
  let env: Record<string, string>;

  before(async () => {
    const fresh = await freshRedis(5);
    redis = fresh.redis;
    env = { REDIS_URL: fresh.url, ADMIN_TOKEN: adminToken, ADMIN_EMAIL: adminEmail, ADMIN_PASSWORD: adminPassword };
    api = await startGateway({ env });
  });

  after(async () => {
    await api?.stop();
    redis?.disconnect();
  });

  const { admin } = adminClient(() => api.url, adminToken);
  const expectError = expectAdminError;

  it(
    'the first admin, made from ADMIN_EMAIL as the README says, signs in, makes a key in the console, and the ' +
      'first call is served',
    async () => {
      const console = new ConsoleClient(api.url);
      const signedIn = await console.signIn(adminEmail, adminPassword);
      assert.equal(signedIn.status, 200, JSON.stringify(signedIn.json));
      const account = (signedIn.json as { account: Json }).account;
      assert.deepEqual([account.role, account.balance_usd, account.unlimited], ['admin', null, true]);
      const made = await console.request<{ key: string }>('POST', '/console/api/keys', { name: 'first' });
      assert.equal(made.status, 201, JSON.stringify(made.json));
      const answer = await fetch(`${api.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${made.json.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] }),
      });
      assert.equal(answer.status, 200, await answer.clone().text());
      // A gateway upgraded from before: the admin has no choice recorded; ADMIN_EMAIL at start gives it the admin's
      // default.
      await redis.hdel(accountKey(String(account.id)), 'unlimited');
      await api.stop();
      api = await startGateway({ env });
      assert.equal(await redis.hget(accountKey(String(account.id)), 'unlimited'), '1');
    },
  );

  it('admins spend without a balance unless one is set for them; members start at $0', async () => {
    const keyFor = async (accountId: unknown) => {
      const made = await admin('POST', '/admin/keys', { name: 'spend', account_id: accountId });
      assert.equal(made.status, 201, JSON.stringify(made.json));
      return String(made.json.key);
    };
    const chat = (key: string) =>
      fetch(`${api.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
      });
    const operator = (await admin('POST', '/admin/accounts', { email: 'operator@example.com', role: 'admin' })).json;
    assert.deepEqual([operator.balance_usd, operator.unlimited], [null, true]);
    const operatorKey = await keyFor(operator.id);
    assert.equal((await chat(operatorKey)).status, 200, "an admin's first key works");
    await expectError(admin('POST', `/admin/accounts/${operator.id}/credits`, { amount_usd: 5 }), 400, {
      code: 'unlimited_balance',
    });

    // A balance set for an admin: from then on it spends within it.
    const metered = await admin('PATCH', `/admin/accounts/${operator.id}`, { unlimited: false });
    assert.deepEqual([metered.json.balance_usd, metered.json.unlimited], [0, false]);
    await waitForStatusOf(() => chat(operatorKey), 429);
    assert.equal(
      (await admin('POST', `/admin/accounts/${operator.id}/credits`, { amount_usd: 1 })).json.balance_usd,
      1,
    );
    assert.equal((await chat(operatorKey)).status, 200);
    // Naming the role it already has keeps the balance an operator chose (as ADMIN_EMAIL does at every start).
    assert.equal(
      (await admin('PATCH', `/admin/accounts/${operator.id}`, { role: 'admin', name: 'Ops' })).json.unlimited,
      false,
    );

    const member = (await admin('POST', '/admin/accounts', { email: 'member-spend@example.com' })).json;
    assert.deepEqual([member.role, member.balance_usd, member.unlimited], ['member', 0, false]);
    const memberKey = await keyFor(member.id);
    const refused = await chat(memberKey);
    assert.equal(refused.status, 429);
    assert.equal(((await refused.json()) as ErrorBody).error.code, 'insufficient_quota');
    // Promoted, a member takes the admin's default; demoted back, the member's.
    assert.equal((await admin('PATCH', `/admin/accounts/${member.id}`, { role: 'admin' })).json.unlimited, true);
    await waitForStatusOf(() => chat(memberKey), 200);
    assert.equal((await admin('PATCH', `/admin/accounts/${member.id}`, { role: 'member' })).json.unlimited, false);
    // An account made unlimited explicitly whatever its role, and the default account never metered.
    assert.equal(
      (await admin('POST', '/admin/accounts', { email: 'vip@example.com', unlimited: true })).json.balance_usd,
      null,
    );
    await expectError(admin('PATCH', `/admin/accounts/${defaultAccountId}`, { unlimited: false }), 400, {
      code: 'default_account',
      param: 'unlimited',
    });
  });

  /** Polls until a call answers `status` (a change reaches the api's key cache through its change message). */
  async function waitForStatusOf(call: () => Promise<Response>, status: number): Promise<void> {
    const until = Date.now() + 5000;
    let last = 0;
    while (Date.now() < until) {
      const res = await call();
      last = res.status;
      await res.arrayBuffer();
      if (last === status) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.fail(`still ${last}, expected ${status}`);
  }
});
