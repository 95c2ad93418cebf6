import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { adminClient, type Json } from '../support/admin-client.js';
import { cleanupsAfter } from '../support/cleanups.js';
import { startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { freshDatabase } from '../support/record.js';
import { startPrivateRedis } from '../support/redis-server.js';

/*
 * Moving the embedded record to a PostgreSQL server: `npm run record -- copy
 * --to URL` copies it whole into an empty database (and refuses a database
 * that holds accounts already, or a record a gateway is using); a gateway
 * started on that database, its Redis flushed, has every account, key,
 * balance, ledger entry and usage row.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const adminToken = 'move-admin-token';
const model = 'gpt-4o-mini';

function recordCommand(args: string[], env: Record<string, string>): Promise<{ code: number; stderr: string }> {
  return promisify(execFile)(process.execPath, ['--import', 'tsx', 'bin/record.ts', ...args], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root', ...env },
  }).then(
    ({ stderr }) => ({ code: 0, stderr }),
    (error: { code: number; stderr: string }) => ({ code: error.code, stderr: error.stderr }),
  );
}

describe('npm run record -- copy', () => {
  const { defer, tempDir } = cleanupsAfter();

  it(
    'moves the embedded record to a server: accounts, keys, balances, ledger and usage survive a start there and a ' +
      'Redis flush',
    async () => {
      const redis = await startPrivateRedis({ aof: false });
      defer(() => redis.remove());
      const dataDir = tempDir('sy-mov-');
      const target = await freshDatabase('record_move');
      const env = { REDIS_URL: redis.url, ADMIN_TOKEN: adminToken };

      let gateway: GatewayProcess = await startGateway({ env: { ...env, DATABASE_URL: '', DATA_DIR: dataDir } });
      defer(() => gateway.stop('SIGKILL'));
      const { admin } = adminClient(() => gateway.url, adminToken);
      const account = String(
        (await admin('POST', '/admin/accounts', { email: 'mover@example.com', name: 'Mover' })).json.id,
      );
      assert.equal(
        (await admin('POST', `/admin/accounts/${account}/credits`, { amount_usd: 7.654321, note: 'first' })).status,
        200,
      );
      assert.equal(
        (await admin('POST', `/admin/accounts/${account}/credits`, { amount_usd: -0.5, note: 'correction' })).status,
        200,
      );
      const key = (await admin('POST', '/admin/keys', { name: 'moved', account_id: account })).json;
      for (let i = 0; i < 3; i++)
        await gateway
          .client(String(key.key))
          .chat.completions.create({ model, messages: [{ role: 'user', content: `hello ${i}` }] });
      const usage = async () =>
        ((await admin('GET', `/admin/usage?account_id=${account}`)).json.data as Json[])[0] as Json | undefined;
      await waitFor(async () => (await usage())?.requests === 3, 10_000, 'three usage rows');

      // Refused while the gateway uses the record.
      const busy = await recordCommand(['copy', '--to', target], { DATA_DIR: dataDir });
      assert.equal(busy.code, 1);
      assert.match(busy.stderr, /stop the gateway first/);

      const before = {
        account: (await admin('GET', `/admin/accounts/${account}`)).json,
        key: (await admin('GET', `/admin/keys/${key.id}`)).json,
        ledger: (await admin('GET', `/admin/accounts/${account}/ledger`)).json.data,
        usage: await usage(),
      };
      assert.equal(await gateway.stop(), 0);

      const copied = await recordCommand(['copy', '--to', target], { DATA_DIR: dataDir });
      assert.equal(copied.code, 0, copied.stderr);
      for (const copiedRows of [/\b2 accounts\b/, /\b1 api_keys\b/, /\b2 ledger\b/, /\b3 usage\b/])
        assert.match(copied.stderr, copiedRows);
      // A second copy finds the target holding a record: refused, nothing changed.
      const again = await recordCommand(['copy', '--to', target], { DATA_DIR: dataDir });
      assert.equal(again.code, 1);
      assert.match(again.stderr, /already holds \d+ rows .*copy into an empty database/);
      const nothing = await recordCommand(['copy', '--to', target], { DATA_DIR: join(dataDir, 'none') });
      assert.equal(nothing.code, 1);
      assert.match(nothing.stderr, /no embedded record under/);

      const flush = new Redis(redis.url);
      await flush.flushall();
      await flush.quit();
      gateway = await startGateway({ env: { ...env, DATABASE_URL: target, DATA_DIR: dataDir } });
      defer(() => gateway.stop('SIGKILL'));
      assert.ok(
        gateway.logs.some((line) => line.includes('DATA_DIR also holds an embedded record')),
        'the log says the embedded record is left behind',
      );
      const after = {
        account: (await admin('GET', `/admin/accounts/${account}`)).json,
        key: (await admin('GET', `/admin/keys/${key.id}`)).json,
        ledger: (await admin('GET', `/admin/accounts/${account}/ledger`)).json.data,
        usage: await usage(),
      };
      assert.deepEqual(after, before, 'account, balance, key spend, ledger and usage as they were');
      const answer = await gateway
        .client(String(key.key))
        .chat.completions.create({ model, messages: [{ role: 'user', content: 'on the server' }] });
      assert.ok(answer.choices[0]!.message.content);
      assert.equal(
        (await admin('POST', `/admin/accounts/${account}/credits`, { amount_usd: 1, note: 'after the move' })).status,
        200,
      );
      assert.equal(await gateway.stop(), 0);
    },
  );
});
