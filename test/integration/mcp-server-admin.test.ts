import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { startFakeMcp, type FakeMcp } from '../support/fake-mcp.js';
import { adminClient } from '../support/admin-client.js';
import { testRecord } from '../support/record.js';
import { SecretBox } from '../../shared/secret-box.js';
import { insertServer, serverOfRow } from '../../storage/record/mcp-servers.js';
import { createMcpServerSchema } from '../../shared/mcp/servers.js';
import type { RecordDb } from '../../storage/record/database.js';

const adminToken = 'mcp-server-admin-token';
const upstreamToken = 'kb-upstream-secret-93f1c2';
const secretsKey = 'an-mcp-secrets-key-for-the-tests-0123456789';

const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `probe` until it answers true, for at most `ms`; answers how long it took. */
async function within(ms: number, probe: () => Promise<boolean>, what: string): Promise<number> {
  const started = Date.now();
  for (;;) {
    if (await probe()) return Date.now() - started;
    assert.ok(Date.now() - started < ms, what);
    await wait(50);
  }
}

// Servers an admin adds through the admin API, served by an api and a worker in processes of their own: heard by
// both within a second, their headers sealed in the record and never shown, every change in the audit log.
describe('MCP servers added by an admin', () => {
  let redis: Redis;
  let record: RecordDb;
  let api: GatewayProcess;
  let worker: GatewayProcess;
  let kb: FakeMcp;
  let dir: string;
  const clients: Client[] = [];

  before(async () => {
    kb = await startFakeMcp({ token: upstreamToken });
    dir = mkdtempSync(join(tmpdir(), 'mcp-admin-'));
    const file = join(dir, 'mcp.json');
    // One server of the file, which the admin API may not change.
    writeFileSync(
      file,
      JSON.stringify({ servers: { fixed: { url: kb.url, headers: { Authorization: `Bearer ${upstreamToken}` } } } }),
    );
    let url: string;
    ({ redis, url } = await freshRedis(10));
    record = await testRecord(redis);
    const env = {
      REDIS_URL: url,
      ADMIN_TOKEN: adminToken,
      MOCK_VENDOR: 'on',
      MCP_SERVERS_FILE: file,
      MCP_CHECK_INTERVAL_MS: '60000',
      SECRETS_KEY: secretsKey,
    };
    [api, worker] = await Promise.all([startGateway({ role: 'api', env }), startGateway({ role: 'worker', env })]);
  });

  after(async () => {
    await Promise.allSettled(clients.map((client) => client.close()));
    await Promise.allSettled([api?.stop(), worker?.stop()]);
    await kb?.close();
    await record?.destroy();
    redis?.disconnect();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const { admin } = adminClient(() => api.url, adminToken);

  async function creditedKey(email: string): Promise<{ accountId: string; secret: string }> {
    const account = await admin('POST', '/admin/accounts', { email });
    await admin('POST', `/admin/accounts/${account.json.id}/credits`, { amount_usd: 1 });
    const key = await admin('POST', '/admin/keys', { name: 'agent', account_id: account.json.id });
    assert.equal(key.status, 201, JSON.stringify(key.json));
    return { accountId: String(account.json.id), secret: String(key.json.key) };
  }

  async function connect(secret: string, path: string): Promise<Client> {
    const client = new Client({ name: 'test-agent', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${api.url}${path}`), {
        requestInit: { headers: { authorization: `Bearer ${secret}` } },
      }),
    );
    clients.push(client);
    return client;
  }

  const balanceOf = async (accountId: string) =>
    Number((await admin('GET', `/admin/accounts/${accountId}`)).json.balance_usd);
  const served = async (name: string) =>
    ((await admin('GET', '/admin/mcp/servers')).json.data as Array<{ name: string; status: string }>).find(
      (server) => server.name === name,
    );

  it('adds a server that the api and the workers serve at once, with its headers sealed and never shown', async () => {
    const { accountId, secret } = await creditedKey('adds@example.com');
    const added = await admin('POST', '/admin/mcp/servers', {
      name: 'kb',
      url: `${kb.url}?tenant=acme`,
      headers: { Authorization: `Bearer ${upstreamToken}` },
      max_concurrency: 3,
      timeout_ms: 5000,
      price_per_call_usd: '0.0025',
    });
    assert.equal(added.status, 201, JSON.stringify(added.json));
    assert.equal(added.json.source, 'admin');
    assert.deepEqual(added.json.header_names, ['Authorization']);
    assert.equal(added.json.url, kb.url, 'shown without its query');
    assert.ok(
      !JSON.stringify(added.json).includes(upstreamToken) && !JSON.stringify(added.json).includes('tenant=acme'),
    );
    // A worker checks it at once (no round is due for a minute): its tools are listed within a few seconds.
    await within(10_000, async () => (await served('kb'))?.status === 'ok', 'the new server is checked at once');
    const listing = JSON.stringify((await admin('GET', '/admin/mcp/servers')).json);
    assert.ok(!listing.includes(upstreamToken), 'the list never shows a header');
    // In the record: the URL as shown, the header's name, and a sealed secret that holds neither value in clear.
    const row = await record.selectFrom('mcp_servers').selectAll().where('name', '=', 'kb').executeTakeFirstOrThrow();
    assert.equal(row.url, kb.url);
    assert.equal(row.header_names, '["Authorization"]');
    assert.match(row.secret ?? '', /^v1\./);
    assert.ok(
      !row.secret!.includes(upstreamToken) &&
        !Buffer.from(row.secret!.split('.')[2]!, 'base64url').toString('latin1').includes(upstreamToken),
    );
    // Called through the gateway: the upstream got the sealed header and the URL's query; billed the server's price.
    const before = await balanceOf(accountId);
    const client = await connect(secret, '/mcp/kb');
    assert.deepEqual((await client.callTool({ name: 'search', arguments: { word: 'queue' } })).content, [
      { type: 'text', text: 'notes with queue: 2' },
    ]);
    assert.ok(kb.seen.length > 0 && kb.seen.every((request) => request.authorization === `Bearer ${upstreamToken}`));
    assert.equal(Math.round((before - (await balanceOf(accountId))) * 1e6), 2500);
    // On /mcp beside the file's server.
    const all = await connect(secret, '/mcp');
    const names = (await all.listTools()).tools.map((tool) => tool.name);
    assert.ok(names.includes('kb__search') && names.includes('fixed__search'), names.join());
  });

  it('changes a server for every process within a second: its price, its cap, its headers', async () => {
    const { accountId, secret } = await creditedKey('changes@example.com');
    const client = await connect(secret, '/mcp/kb');
    // A call running while the server changes finishes (its connection is kept: only price and cap change here).
    const running = client.callTool({ name: 'slow', arguments: { ms: 1500 } });
    await within(5000, async () => kb.slow.running === 1, 'the slow call runs');
    const patched = await admin('PATCH', '/admin/mcp/servers/kb', { price_per_call_usd: '0.004', max_concurrency: 1 });
    assert.equal(patched.status, 200, JSON.stringify(patched.json));
    assert.deepEqual((await running).content, [{ type: 'text', text: 'slept 1500 ms' }]);
    assert.equal(patched.json.price_per_call_usd, '0.004000');
    assert.equal(patched.json.max_concurrency, 1);
    // The worker settles at the new price (it reads the server as it is now).
    await wait(1000);
    const before = await balanceOf(accountId);
    await client.callTool({ name: 'search', arguments: { word: 'x' } });
    assert.equal(Math.round((before - (await balanceOf(accountId))) * 1e6), 4000);
    // The cap of 1 holds across the worker: two slow calls run one after the other.
    kb.slow.most = 0;
    await Promise.all([
      client.callTool({ name: 'slow', arguments: { ms: 300 } }),
      client.callTool({ name: 'slow', arguments: { ms: 300 } }),
    ]);
    assert.equal(kb.slow.most, 1);
    // Headers replaced by wrong ones: the upstream refuses the next call (the worker connects again with them).
    const wrong = await admin('PATCH', '/admin/mcp/servers/kb', { headers: { Authorization: 'Bearer not-the-token' } });
    assert.equal(wrong.status, 200, JSON.stringify(wrong.json));
    await wait(1000);
    await assert.rejects(
      client.callTool({ name: 'search', arguments: { word: 'x' } }),
      /MCP server kb failed|401|Unauthorized/i,
    );
    const right = await admin('PATCH', '/admin/mcp/servers/kb', {
      headers: { Authorization: `Bearer ${upstreamToken}` },
      max_concurrency: 3,
    });
    assert.equal(right.status, 200);
    await wait(1000);
    assert.deepEqual((await client.callTool({ name: 'search', arguments: { word: 'queue' } })).content, [
      { type: 'text', text: 'notes with queue: 2' },
    ]);
  });

  it('refuses what an admin may not do here, each with its reason', async () => {
    const fromFile = await admin('PATCH', '/admin/mcp/servers/fixed', { max_concurrency: 2 });
    assert.equal(fromFile.status, 409);
    assert.equal(fromFile.json.error.code, 'mcp_server_from_file');
    assert.equal((await admin('DELETE', '/admin/mcp/servers/fixed')).json.error.code, 'mcp_server_from_file');
    const taken = await admin('POST', '/admin/mcp/servers', { name: 'fixed', url: kb.url });
    assert.equal(taken.status, 409);
    assert.equal(taken.json.error.code, 'mcp_server_exists');
    assert.equal((await admin('POST', '/admin/mcp/servers', { name: 'kb', url: kb.url })).status, 409);
    const command = await admin('POST', '/admin/mcp/servers', {
      name: 'local',
      command: '/bin/sh',
      args: ['-c', 'id'],
    });
    assert.equal(command.status, 400);
    assert.match(command.json.error.message, /MCP_SERVERS_FILE only/);
    for (const body of [
      { name: 'Bad Name', url: kb.url },
      { name: 'a__b', url: kb.url },
      { name: 'ftp', url: 'ftp://example.com/mcp' },
      { name: 'nourl' },
      { name: 'crlf', url: kb.url, headers: { 'x-a': 'one\r\nx-b: two' } },
      { name: 'cap', url: kb.url, max_concurrency: 0 },
      { name: 'price', url: kb.url, price_per_call_usd: '0.0000001' },
      { name: 'extra', url: kb.url, colour: 'red' },
      { name: 7, url: kb.url },
      { name: 'js', url: 'javascript:alert(1)' },
      { name: 'spaces', url: kb.url, headers: { 'X Token': 'v' } },
      { name: 'array', url: kb.url, headers: ['Authorization: x'] },
      {
        name: 'many',
        url: kb.url,
        headers: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`x-h${i}`, 'v'])),
      },
      { name: 'negative', url: kb.url, price_per_call_usd: -1 },
      { name: 'float', url: kb.url, timeout_ms: 1500.5 },
      { name: 'ünicode', url: kb.url },
      { name: 'x'.repeat(64), url: kb.url },
      { name: 'long', url: `${kb.url}?${'q'.repeat(9000)}` },
    ]) {
      const refused = await admin('POST', '/admin/mcp/servers', body);
      assert.equal(refused.status, 400, JSON.stringify(body));
    }
    assert.equal((await admin('PATCH', '/admin/mcp/servers/kb', {})).status, 400);
    assert.equal(
      (await admin('PATCH', '/admin/mcp/servers/kb', { name: 'renamed' })).status,
      400,
      'a server is not renamed',
    );
    assert.equal((await admin('POST', '/admin/mcp/servers', '{"name": "broken", ')).status, 400, 'not JSON');
    assert.equal(
      (await admin('POST', '/admin/mcp/servers', [{ name: 'list', url: kb.url }])).status,
      400,
      'not an object',
    );
    const huge = await fetch(`${api.url}/admin/mcp/servers`, {
      method: 'POST',
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'huge', url: kb.url, headers: { 'x-pad': 'p'.repeat(70_000) } }),
    });
    assert.equal(huge.status, 413);
    // Without the admin token, nothing.
    assert.equal(
      (
        await fetch(`${api.url}/admin/mcp/servers`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ name: 'anon', url: kb.url }),
        })
      ).status,
      401,
    );
    assert.equal((await admin('PATCH', '/admin/mcp/servers/nope', { max_concurrency: 2 })).status, 404);
    assert.equal((await admin('DELETE', '/admin/mcp/servers/nope')).status, 404);
    // Nothing refused was kept.
    assert.deepEqual(
      (await record.selectFrom('mcp_servers').select('name').execute()).map((row) => row.name),
      ['kb'],
    );
  });

  it('removes a server: not served within a second, its health gone, every change in the audit log without a secret', async () => {
    const { secret } = await creditedKey('removes@example.com');
    const removed = await admin('DELETE', '/admin/mcp/servers/kb');
    assert.deepEqual(removed.json, { object: 'mcp.server', name: 'kb', deleted: true });
    const took = await within(
      1500,
      async () =>
        (
          await fetch(`${api.url}/mcp/kb`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${secret}`,
              'content-type': 'application/json',
              accept: 'application/json, text/event-stream',
            },
            body: '{}',
          })
        ).status === 404,
      '/mcp/kb is gone',
    );
    assert.ok(took < 1500);
    const all = await connect(secret, '/mcp');
    assert.ok(!(await all.listTools()).tools.some((tool) => tool.name.startsWith('kb__')));
    assert.equal(await served('kb'), undefined);
    const audit = await record
      .selectFrom('audit_log')
      .select(['action', 'target', 'before', 'after'])
      .where('action', 'like', 'mcp_server.%')
      .orderBy('id')
      .execute();
    assert.deepEqual(
      audit.map((row) => [row.action, row.target]),
      [
        ['mcp_server.created', 'kb'],
        ['mcp_server.updated', 'kb'],
        ['mcp_server.updated', 'kb'],
        ['mcp_server.updated', 'kb'],
        ['mcp_server.deleted', 'kb'],
      ],
    );
    assert.ok(!JSON.stringify(audit).includes(upstreamToken) && !JSON.stringify(audit).includes('not-the-token'));
    assert.deepEqual(audit[1]!.after, { max_concurrency: 1, price_per_call_micros: 4000 });
    assert.equal((audit[2]!.after as Record<string, unknown>).sealed_url_and_headers, 'replaced');
  });
});

// The record's seal on its own: without SECRETS_KEY nothing secret is kept; a secret sealed under one key does not
// open under another, nor under another server's name.
describe('MCP server secrets in the record', () => {
  let redis: Redis;
  let record: RecordDb;

  before(async () => {
    ({ redis } = await freshRedis(11));
    record = await testRecord(redis);
  });

  after(async () => {
    await record?.destroy();
    redis?.disconnect();
  });

  const body = (fields: Record<string, unknown>) =>
    createMcpServerSchema.parse({ url: 'http://127.0.0.1:9/mcp', ...fields });

  it('keeps no header or URL secret without SECRETS_KEY, and a plain server as it is', async () => {
    await assert.rejects(
      insertServer(record, body({ name: 'h', headers: { Authorization: 'Bearer x' } }), undefined),
      /SECRETS_KEY/,
    );
    await assert.rejects(
      insertServer(record, body({ name: 'q', url: 'http://127.0.0.1:9/mcp?token=x' }), undefined),
      /SECRETS_KEY/,
    );
    await assert.rejects(
      insertServer(record, body({ name: 'u', url: 'http://user:pw@127.0.0.1:9/mcp' }), undefined),
      /SECRETS_KEY/,
    );
    const plain = await insertServer(record, body({ name: 'plain' }), undefined);
    assert.equal(plain?.secret, null);
    assert.deepEqual(serverOfRow(plain!, undefined), {
      name: 'plain',
      source: 'admin',
      transport: 'streamable-http',
      url: 'http://127.0.0.1:9/mcp',
      headers: {},
      maxConcurrency: 20,
      timeoutMs: 60_000,
      pricePerCallMicros: 0,
      keepArguments: false,
    });
  });

  it('opens a secret only with its key and for its server', async () => {
    const box = new SecretBox(secretsKey);
    const row = (await insertServer(record, body({ name: 'sealed', headers: { 'X-Token': 't0p' } }), box))!;
    assert.deepEqual(serverOfRow(row, box).headers, { 'X-Token': 't0p' });
    assert.equal(serverOfRow(row, box).unusable, undefined);
    const other = serverOfRow(row, new SecretBox('another-key-another-key-another-key-0000'));
    assert.match(other.unusable ?? '', /another SECRETS_KEY/);
    assert.deepEqual(other.headers, { 'X-Token': '' });
    assert.match(serverOfRow(row, undefined).unusable ?? '', /no SECRETS_KEY/);
    // Copied onto another server's row, it does not open.
    assert.match(serverOfRow({ ...row, name: 'thief' }, box).unusable ?? '', /another SECRETS_KEY/);
    // Altered, it does not open.
    const altered = row.secret!.slice(0, -2) + (row.secret!.endsWith('A') ? 'B' : 'A') + row.secret!.slice(-1);
    assert.ok(serverOfRow({ ...row, secret: altered }, box).unusable !== undefined);
  });
});

// `mcp` is a worker capability of its own (WORKER_QUEUES): a chat worker leaves tool calls queued, an mcp worker
// runs them, and the api counts them as the mcp capability's depth on /metrics (what its autoscaler reads).
describe('the mcp worker capability', () => {
  let redis: Redis;
  let api: GatewayProcess;
  let chatWorker: GatewayProcess;
  let mcpWorker: GatewayProcess | undefined;
  let notes: FakeMcp;
  let dir: string;
  let client: Client | undefined;
  let env: Record<string, string>;

  before(async () => {
    notes = await startFakeMcp({ token: upstreamToken });
    dir = mkdtempSync(join(tmpdir(), 'mcp-capability-'));
    const file = join(dir, 'mcp.json');
    writeFileSync(
      file,
      JSON.stringify({ servers: { notes: { url: notes.url, headers: { Authorization: `Bearer ${upstreamToken}` } } } }),
    );
    let url: string;
    ({ redis, url } = await freshRedis(12));
    env = {
      REDIS_URL: url,
      ADMIN_TOKEN: adminToken,
      MOCK_VENDOR: 'on',
      MCP_SERVERS_FILE: file,
      MCP_CHECK_INTERVAL_MS: '1000',
    };
    [api, chatWorker] = await Promise.all([
      startGateway({ role: 'api', env }),
      startGateway({ role: 'worker', env: { ...env, WORKER_QUEUES: 'chat' } }),
    ]);
    mcpWorker = undefined;
    // Checked by the chat worker (every worker checks the servers, whatever it serves).
    await within(
      30_000,
      async () =>
        (
          (await adminClient(() => api.url, adminToken).admin('GET', '/admin/mcp/servers')).json.data as Array<{
            status: string;
          }>
        )[0]?.status === 'ok',
      'the server checked',
    );
  });

  after(async () => {
    await client?.close().catch(() => undefined);
    await Promise.allSettled([api?.stop(), chatWorker?.stop(), mcpWorker?.stop()]);
    await notes?.close();
    redis?.disconnect();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const depth = async (state: string): Promise<number> => {
    const text = await (await fetch(`${api.url}/metrics`)).text();
    const line = new RegExp(`^switchyard_queue_jobs\\{queue="mcp",state="${state}"\\} (\\d+)$`, 'm').exec(text);
    assert.ok(line, `switchyard_queue_jobs{queue="mcp",state="${state}"} on /metrics`);
    return Number(line[1]);
  };

  it('leaves a tool call queued on chat workers, counted on /metrics, until an mcp worker runs it', async () => {
    const { admin } = adminClient(() => api.url, adminToken);
    const account = await admin('POST', '/admin/accounts', { email: 'capability@example.com' });
    await admin('POST', `/admin/accounts/${account.json.id}/credits`, { amount_usd: 1 });
    const key = await admin('POST', '/admin/keys', { name: 'agent', account_id: account.json.id });
    client = new Client({ name: 'test-agent', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${api.url}/mcp/notes`), {
        requestInit: { headers: { authorization: `Bearer ${key.json.key}` } },
      }),
    );
    assert.equal(await depth('waiting'), 0);
    let answered = false;
    const call = client
      .callTool({ name: 'search', arguments: { word: 'queue' } }, undefined, { timeout: 60_000 })
      .finally(() => (answered = true));
    await within(5000, async () => (await depth('waiting')) === 1, 'the call counted as waiting');
    await wait(1000);
    assert.equal(answered, false, 'no chat worker runs it');
    mcpWorker = await startGateway({ role: 'worker', env: { ...env, WORKER_QUEUES: 'mcp' } });
    assert.deepEqual((await call).content, [{ type: 'text', text: 'notes with queue: 2' }]);
    await within(5000, async () => (await depth('waiting')) === 0 && (await depth('active')) === 0, 'nothing left');
  });
});
