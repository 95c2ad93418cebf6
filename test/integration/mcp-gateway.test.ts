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

const adminToken = 'mcp-gateway-test-token';
const upstreamToken = 'upstream-token-7d21';

// Agents' tools through the gateway, driven by the official MCP SDK's client: every tools/call a job on its server's
// queue, billed at the server's price per call, counted by the key's limits, capped at the server's concurrency.
describe('MCP through the gateway: tools listed and called with a Switchyard key', () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let notes: FakeMcp;
  let dir: string;
  const clients: Client[] = [];

  before(async () => {
    notes = await startFakeMcp({ token: upstreamToken });
    dir = mkdtempSync(join(tmpdir(), 'mcp-gateway-'));
    const file = join(dir, 'mcp.json');
    writeFileSync(
      file,
      JSON.stringify({
        servers: {
          notes: {
            url: notes.url,
            headers: { Authorization: `Bearer ${upstreamToken}` },
            max_concurrency: 2,
            timeout_ms: 5000,
            price_per_call_usd: '0.0015',
          },
          quick: {
            url: notes.url,
            headers: { Authorization: `Bearer ${upstreamToken}` },
            max_concurrency: 4,
            timeout_ms: 500,
            price_per_call_usd: '0.002',
            keep_arguments: true,
          },
        },
      }),
    );
    let url: string;
    ({ redis, url } = await freshRedis(8));
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_TOKEN: adminToken,
        MOCK_VENDOR: 'on',
        MCP_SERVERS_FILE: file,
        MCP_CHECK_INTERVAL_MS: '1000',
      },
    });
    // The tools are listed once a worker has checked the server.
    const deadline = Date.now() + 30_000;
    for (;;) {
      const servers = (await (
        await fetch(`${gateway.url}/admin/mcp/servers`, { headers: { authorization: `Bearer ${adminToken}` } })
      ).json()) as { data: Array<{ status: string }> };
      if (servers.data.every((server) => server.status === 'ok')) break;
      assert.ok(Date.now() < deadline, 'the server is checked');
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  });

  after(async () => {
    await Promise.allSettled(clients.map((client) => client.close()));
    await gateway?.stop();
    await notes?.close();
    redis?.disconnect();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const { admin } = adminClient(() => gateway.url, adminToken);

  async function creditedKey(
    email: string,
    limits: Record<string, unknown> = {},
  ): Promise<{ accountId: string; secret: string; keyId: string }> {
    const account = await admin('POST', '/admin/accounts', { email });
    assert.equal(account.status, 201, JSON.stringify(account.json));
    const credited = await admin('POST', `/admin/accounts/${account.json.id}/credits`, { amount_usd: 1 });
    assert.ok(credited.status < 300, JSON.stringify(credited.json));
    const key = await admin('POST', '/admin/keys', { name: 'agent', account_id: account.json.id, ...limits });
    assert.equal(key.status, 201, JSON.stringify(key.json));
    return { accountId: String(account.json.id), secret: String(key.json.key), keyId: String(key.json.id) };
  }

  async function connect(secret: string, path = '/mcp'): Promise<Client> {
    const client = new Client({ name: 'test-agent', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${gateway.url}${path}`), {
        requestInit: { headers: { authorization: `Bearer ${secret}` } },
      }),
    );
    clients.push(client);
    return client;
  }

  const balanceOf = async (accountId: string) =>
    Number((await admin('GET', `/admin/accounts/${accountId}`)).json.balance_usd);

  it("lists every server's tools as <server>__<tool> on /mcp, and one server's unchanged on /mcp/{server}", async () => {
    const { secret } = await creditedKey('lists@example.com');
    const all = await connect(secret);
    assert.equal(all.getServerVersion()?.name, 'switchyard');
    const listed = await all.listTools();
    assert.deepEqual(listed.tools.map((tool) => tool.name).sort(), [
      'notes__add',
      'notes__count',
      'notes__crash',
      'notes__search',
      'notes__slow',
      'quick__add',
      'quick__count',
      'quick__crash',
      'quick__search',
      'quick__slow',
    ]);
    const search = listed.tools.find((tool) => tool.name === 'notes__search')!;
    assert.deepEqual(Object.keys(search.inputSchema.properties ?? {}), ['word']);
    const one = await connect(secret, '/mcp/notes');
    assert.deepEqual((await one.listTools()).tools.map((tool) => tool.name).sort(), [
      'add',
      'count',
      'crash',
      'search',
      'slow',
    ]);
  });

  it("calls a tool through its server's queue, bills the server's price once, and logs the call", async () => {
    const { accountId, secret } = await creditedKey('calls@example.com');
    const before = await balanceOf(accountId);
    const client = await connect(secret);
    const result = await client.callTool({ name: 'notes__search', arguments: { word: 'queue' } });
    assert.deepEqual(result.content, [{ type: 'text', text: 'notes with queue: 2' }]);
    const scoped = await connect(secret, '/mcp/notes');
    assert.deepEqual((await scoped.callTool({ name: 'add', arguments: { text: 'hi' } })).content, [
      { type: 'text', text: 'added' },
    ]);
    // The upstream got the file's header, never the client's key.
    assert.ok(notes.seen.every((request) => request.authorization === `Bearer ${upstreamToken}`));
    assert.ok(!notes.seen.some((request) => request.authorization?.includes(secret)));
    // Billed 2 × $0.0015, to the micro-dollar, and logged (the record's writer lingers a little).
    assert.equal(Math.round((before - (await balanceOf(accountId))) * 1e6), 3000);
    const deadline = Date.now() + 10_000;
    let rows: Array<Record<string, unknown>> = [];
    while (Date.now() < deadline) {
      rows =
        ((await admin('GET', `/admin/requests?account_id=${accountId}`)).json.data as Array<Record<string, unknown>>) ??
        [];
      if (rows.length === 2 && rows.every((row) => row.status === 'completed' && row.http_status === 200)) break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    assert.deepEqual(rows.map((row) => [row.model, row.endpoint, row.status, row.cost_usd, row.vendor]).sort(), [
      ['notes/add', 'mcp.tools/call', 'completed', 0.0015, 'mcp'],
      ['notes/search', 'mcp.tools/call', 'completed', 0.0015, 'mcp'],
    ]);
    // Bytes sent to the server and answered; the arguments not kept (`notes` is not set to keep them).
    const search = rows.find((row) => row.model === 'notes/search')!;
    assert.equal(search.bytes_in, Buffer.byteLength(JSON.stringify({ name: 'search', arguments: { word: 'queue' } })));
    assert.equal(search.bytes_out, Buffer.byteLength(JSON.stringify({ jsonrpc: '2.0', id: 1, result })));
    assert.equal(search.arguments, null);
  });

  it('answers an unknown tool, a tool of no server, and a bad call with JSON-RPC errors, billing nothing', async () => {
    const { accountId, secret } = await creditedKey('unknown@example.com');
    const client = await connect(secret);
    const before = await balanceOf(accountId);
    await assert.rejects(client.callTool({ name: 'notes__nope', arguments: {} }), /Unknown tool: notes__nope/);
    await assert.rejects(
      client.callTool({ name: 'search', arguments: {} }),
      /Unknown tool: search\. Tools here are named <server>__<tool>/,
    );
    await assert.rejects(client.callTool({ name: 'elsewhere__search', arguments: {} }), /Unknown tool/);
    assert.equal(await balanceOf(accountId), before);
  });

  it("holds the server's concurrency cap across calls, whatever arrives at once", async () => {
    const { secret } = await creditedKey('cap@example.com');
    const client = await connect(secret);
    notes.slow.most = 0;
    const results = await Promise.all(
      Array.from({ length: 6 }, () => client.callTool({ name: 'notes__slow', arguments: { ms: 300 } })),
    );
    for (const result of results) assert.deepEqual(result.content, [{ type: 'text', text: 'slept 300 ms' }]);
    assert.equal(notes.slow.most, 2, 'never more than max_concurrency calls at the server');
  });

  it("counts tool calls in the key's rate limit", async () => {
    const { secret } = await creditedKey('rpm@example.com', { rpm: 1 });
    const client = await connect(secret);
    await client.callTool({ name: 'notes__search', arguments: { word: 'a' } });
    await assert.rejects(
      client.callTool({ name: 'notes__search', arguments: { word: 'b' } }),
      /rate limit|Rate limit/i,
    );
  });

  it('refuses a call whose key was revoked, within a second, and a request with no key or a wrong one', async () => {
    const { secret, keyId } = await creditedKey('revoked@example.com');
    const client = await connect(secret);
    await client.callTool({ name: 'notes__search', arguments: { word: 'a' } });
    assert.equal((await admin('DELETE', `/admin/keys/${keyId}`)).status < 300, true);
    const deadline = Date.now() + 1000;
    let refused = false;
    while (!refused && Date.now() < deadline) {
      refused = await client.callTool({ name: 'notes__search', arguments: { word: 'b' } }).then(
        () => false,
        () => true,
      );
    }
    assert.ok(refused, 'refused within a second of the revocation');
    for (const headers of [{}, { authorization: 'Bearer sk-not-a-key' }] as Array<Record<string, string>>) {
      const response = await fetch(`${gateway.url}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
      });
      assert.equal(response.status, 401);
      assert.match(response.headers.get('www-authenticate') ?? '', /^Bearer/);
      const body = (await response.json()) as { jsonrpc: string; error: { code: number } };
      assert.equal(body.jsonrpc, '2.0');
    }
  });

  /** The request log's rows of an account once the record has them (its writer lingers a little). */
  async function logged(accountId: string, count: number): Promise<Array<Record<string, unknown>>> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const rows =
        ((await admin('GET', `/admin/requests?account_id=${accountId}`)).json.data as Array<Record<string, unknown>>) ??
        [];
      if (
        (rows.length >= count && rows.every((row) => row.status !== null && row.cost_usd !== null)) ||
        Date.now() > deadline
      )
        return rows;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }

  it(
    'a call the server drops fails with the server named, billed nothing; one past its timeout is cut off upstream ' +
      'and billed',
    async () => {
      const { accountId, secret } = await creditedKey('failures@example.com');
      const client = await connect(secret);
      const before = await balanceOf(accountId);
      await assert.rejects(
        client.callTool({ name: 'notes__crash', arguments: {} }),
        /The MCP server notes failed the call/,
      );
      assert.equal(await balanceOf(accountId), before, 'a call that did not run is not billed');
      // The connection is made again for the next call.
      assert.deepEqual((await client.callTool({ name: 'notes__search', arguments: { word: 'again' } })).content, [
        { type: 'text', text: 'notes with again: 2' },
      ]);
      const cancelledBefore = notes.slow.cancelled;
      const started = Date.now();
      await assert.rejects(
        client.callTool({ name: 'quick__slow', arguments: { ms: 3000 } }),
        /did not answer within 500 ms/,
      );
      assert.ok(Date.now() - started < 2500, "answered at the server's timeout");
      const until = Date.now() + 2000;
      while (notes.slow.cancelled === cancelledBefore && Date.now() < until)
        await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(notes.slow.cancelled, cancelledBefore + 1, 'the upstream was told to stop');
      // search 0.0015 + the cut-off call's 0.002: it ran at the server.
      assert.equal(Math.round((before - (await balanceOf(accountId))) * 1e6), 3500);
      const rows = await logged(accountId, 3);
      assert.deepEqual(rows.map((row) => [row.model, row.status, row.error_code]).sort(), [
        ['notes/crash', 'failed', 'upstream_error'],
        ['notes/search', 'completed', null],
        ['quick/slow', 'failed', 'timeout'],
      ]);
    },
  );

  it('a call the client cancels is stopped at the server and still billed', async () => {
    const { accountId, secret } = await creditedKey('cancels@example.com');
    const client = await connect(secret);
    const before = await balanceOf(accountId);
    const cancelledBefore = notes.slow.cancelled;
    const controller = new AbortController();
    const call = client.callTool({ name: 'notes__slow', arguments: { ms: 4000 } }, undefined, {
      signal: controller.signal,
    });
    await new Promise((resolve) => setTimeout(resolve, 400));
    controller.abort();
    await assert.rejects(call);
    const until = Date.now() + 2000;
    while (notes.slow.cancelled === cancelledBefore && Date.now() < until)
      await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(notes.slow.cancelled, cancelledBefore + 1, 'the upstream call was cancelled');
    const billedBy = Date.now() + 2000;
    while ((await balanceOf(accountId)) === before && Date.now() < billedBy)
      await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(Math.round((before - (await balanceOf(accountId))) * 1e6), 1500, 'what the client cut off is billed');
    const rows = await logged(accountId, 1);
    assert.deepEqual(
      rows.map((row) => [row.model, row.status]),
      [['notes/slow', 'cancelled']],
    );
  });

  it('answers hostile requests in JSON-RPC with the right status, and never crashes', async () => {
    const { secret } = await creditedKey('hostile@example.com');
    const post = (body: string, path = '/mcp', headers: Record<string, string> = {}) =>
      fetch(`${gateway.url}${path}`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          authorization: `Bearer ${secret}`,
          ...headers,
        },
        body,
      });
    const cases: Array<[Promise<Response>, number, number]> = [
      [post('{not json'), 400, -32700],
      [post(JSON.stringify({ jsonrpc: '1.0', id: 1, method: 'ping' })), 400, -32600],
      [post(JSON.stringify([{ jsonrpc: '2.0', id: 1, method: 'ping' }])), 400, -32700],
      [post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'resources/nope' })), 200, -32601],
      [post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 7 } })), 200, -32602],
      [post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }), '/mcp/nowhere'), 404, -32600],
      [post(' '.repeat(5 * 1024 * 1024)), 413, -32700],
      [fetch(`${gateway.url}/mcp`, { headers: { authorization: `Bearer ${secret}` } }), 405, -32600],
      // Reads and prompts: a URI missing, not a string, or past 8 KiB; one of no server or of one that does not exist.
      [post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'resources/read', params: {} })), 200, -32602],
      [
        post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'resources/read', params: { uri: ['notes://today'] } })),
        200,
        -32602,
      ],
      [
        post(
          JSON.stringify({
            jsonrpc: '2.0',
            id: 1,
            method: 'resources/read',
            params: { uri: `notes://${'x'.repeat(9000)}` },
          }),
          '/mcp/notes',
        ),
        200,
        -32602,
      ],
      [
        post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'resources/read', params: { uri: 'switchyard-mcp://' } })),
        200,
        -32002,
      ],
      [
        post(
          JSON.stringify({
            jsonrpc: '2.0',
            id: 1,
            method: 'resources/read',
            params: { uri: 'switchyard-mcp://nowhere/notes://today' },
          }),
        ),
        200,
        -32002,
      ],
      [
        post(
          JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'resources/subscribe', params: { uri: 'notes://today' } }),
          '/mcp/notes',
        ),
        200,
        -32601,
      ],
      [
        post(
          JSON.stringify({
            jsonrpc: '2.0',
            id: 1,
            method: 'prompts/get',
            params: { name: 'notes__summarize', arguments: { topic: 7 } },
          }),
        ),
        200,
        -32602,
      ],
      [post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'prompts/get', params: {} }), '/mcp/notes'), 200, -32602],
      [
        post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'prompts/get', params: { name: 'nowhere__summarize' } })),
        200,
        -32602,
      ],
    ];
    for (const [response, status, code] of cases) {
      const answered = await response;
      assert.equal(answered.status, status, `${answered.url}: ${status}`);
      const body = (await answered.json()) as { jsonrpc: string; error: { code: number } };
      assert.equal(body.jsonrpc, '2.0');
      assert.equal(body.error.code, code);
    }
    // A progress token that is no string or number asks for nothing: the answer is one JSON body.
    const odd = await post(
      JSON.stringify({
        jsonrpc: '2.0',
        id: 9,
        method: 'tools/call',
        params: { name: 'notes__search', arguments: { word: 'x' }, _meta: { progressToken: { a: 1 } } },
      }),
    );
    assert.match(odd.headers.get('content-type') ?? '', /^application\/json/);
    assert.equal(((await odd.json()) as { id: number }).id, 9);
    // A notification is taken and not answered.
    const notification = await post(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    assert.equal(notification.status, 202);
    // The gateway still serves.
    const client = await connect(secret);
    assert.ok((await client.listTools()).tools.length > 0);
  });

  it(
    "lists and calls only the tools the key's and its team's mcp_tools allow; a change holds on an open session " +
      'within a second, and is audited',
    async () => {
      const { accountId, secret, keyId } = await creditedKey('rules@example.com', {
        mcp_tools: ['notes/search', 'quick/*'],
      });
      const before = await balanceOf(accountId);
      const client = await connect(secret);
      const names = async (c: Client) => (await c.listTools()).tools.map((tool) => tool.name).sort();
      assert.deepEqual(await names(client), [
        'notes__search',
        'quick__add',
        'quick__count',
        'quick__crash',
        'quick__search',
        'quick__slow',
      ]);
      assert.deepEqual(await names(await connect(secret, '/mcp/notes')), ['search']);
      await assert.rejects(client.callTool({ name: 'notes__add', arguments: { text: 'x' } }), (error: Error) => {
        assert.match(
          error.message,
          /may not use the tool `notes\/add`: the key allows only `notes\/search`, `quick\/\*`/,
        );
        assert.equal((error as { code?: number }).code, -32000);
        return true;
      });
      assert.deepEqual((await client.callTool({ name: 'notes__search', arguments: { word: 'q' } })).content, [
        { type: 'text', text: 'notes with q: 2' },
      ]);
      // The team narrows every key of it: heard by the open session within a second.
      const changed = Date.now();
      const team = await admin('PATCH', `/admin/accounts/${accountId}`, { mcp_tools: ['quick/add', 'quick/add'] });
      assert.equal(team.status, 200, JSON.stringify(team.json));
      assert.deepEqual(team.json.mcp_tools, ['quick/add']);
      let listed: string[] = [];
      while (Date.now() - changed < 1000) {
        listed = await names(client);
        if (listed.length === 1) break;
      }
      assert.deepEqual(listed, ['quick__add'], "the team's rule listed within a second");
      await assert.rejects(
        client.callTool({ name: 'notes__search', arguments: { word: 'q' } }),
        /may not use the tool `notes\/search`: its team allows only `quick\/add`/,
      );
      // A server none of whose tools the key may use is not served to it.
      const scoped = await fetch(`${gateway.url}/mcp/notes`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          authorization: `Bearer ${secret}`,
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
      });
      assert.equal(scoped.status, 403);
      assert.equal(
        ((await scoped.json()) as { error: { data: { type: string } } }).error.data.type,
        'tool_not_allowed',
      );
      // Nothing refused was billed; each refusal has its row in the request log.
      assert.deepEqual((await client.callTool({ name: 'quick__add', arguments: { text: 'y' } })).content, [
        { type: 'text', text: 'added' },
      ]);
      assert.equal(Math.round((before - (await balanceOf(accountId))) * 1e6), 1500 + 2000);
      const deadline = Date.now() + 10_000;
      let refused: Array<Record<string, unknown>> = [];
      while (Date.now() < deadline) {
        const rows =
          ((await admin('GET', `/admin/requests?account_id=${accountId}`)).json.data as Array<
            Record<string, unknown>
          >) ?? [];
        refused = rows.filter((row) => row.status === 'refused');
        if (refused.length === 2) break;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      assert.deepEqual(refused.map((row) => [row.model, row.error_code, row.cost_usd]).sort(), [
        ['notes/add', 'tool_not_allowed', 0],
        ['notes/search', 'tool_not_allowed', 0],
      ]);
      // Lifted (null): every tool again. Each change is in the audit log, with what it was and what it became.
      assert.equal((await admin('PATCH', `/admin/accounts/${accountId}`, { mcp_tools: null })).json.mcp_tools, null);
      const key = await admin('PATCH', `/admin/keys/${keyId}`, { mcp_tools: null });
      assert.equal(key.json.mcp_tools, null);
      const lifted = Date.now();
      while (Date.now() - lifted < 1000 && (await names(client)).length < 10);
      assert.equal((await names(client)).length, 10);
      const record = await testRecord(redis);
      const audit = await record
        .selectFrom('audit_log')
        .select(['action', 'target', 'before', 'after'])
        .where('target', 'in', [accountId, keyId])
        .orderBy('id')
        .execute();
      const moves = audit
        .filter((row) => (row.after as { mcp_tools?: unknown } | null)?.mcp_tools !== undefined)
        .map((row) => [
          row.action,
          row.target,
          (row.before as { mcp_tools?: unknown } | null)?.mcp_tools,
          (row.after as { mcp_tools?: unknown }).mcp_tools,
        ]);
      assert.deepEqual(moves, [
        ['account.created', accountId, undefined, null],
        ['key.created', keyId, undefined, ['notes/search', 'quick/*']],
        ['account.updated', accountId, null, ['quick/add']],
        ['account.updated', accountId, ['quick/add'], null],
        ['key.updated', keyId, ['notes/search', 'quick/*'], null],
      ]);
    },
  );

  it('refuses a tool pattern it cannot read, on a key and on a team', async () => {
    const { accountId } = await creditedKey('patterns@example.com');
    for (const bad of [['notes'], ['/tool'], ['notes/'], ['no tes/x'], 'notes/*', [''], [42]]) {
      const refused = await admin('POST', '/admin/keys', { name: 'bad', account_id: accountId, mcp_tools: bad });
      assert.equal(refused.status, 400, `${JSON.stringify(bad)}: ${JSON.stringify(refused.json)}`);
      assert.equal(
        (refused.json.error as { param?: string }).param?.startsWith('mcp_tools'),
        true,
        JSON.stringify(refused.json),
      );
      assert.equal((await admin('PATCH', `/admin/accounts/${accountId}`, { mcp_tools: bad })).status, 400);
    }
    for (const good of [['*'], ['github/create_*', '*/read_*', 'notes/*'], []]) {
      const made = await admin('POST', '/admin/keys', { name: 'good', account_id: accountId, mcp_tools: good });
      assert.equal(made.status, 201, JSON.stringify(made.json));
      assert.deepEqual(made.json.mcp_tools, good);
    }
  });

  it('a call queued before its tool was taken away is refused by the worker that takes it, billed nothing', async () => {
    const busy = await creditedKey('busy@example.com');
    const late = await creditedKey('late@example.com');
    const busyClient = await connect(busy.secret);
    const lateClient = await connect(late.secret);
    // The server's two slots held, so the next call waits in the queue.
    const holding = Array.from({ length: 2 }, () =>
      busyClient.callTool({ name: 'notes__slow', arguments: { ms: 1500 } }),
    );
    const waitStart = Date.now();
    while (notes.slow.running < 2 && Date.now() - waitStart < 5000)
      await new Promise((resolve) => setTimeout(resolve, 20));
    const before = await balanceOf(late.accountId);
    const queued = lateClient.callTool({ name: 'notes__search', arguments: { word: 'w' } });
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal((await admin('PATCH', `/admin/keys/${late.keyId}`, { mcp_tools: ['quick/*'] })).status, 200);
    await assert.rejects(queued, /may not use the tool `notes\/search`: the key allows only `quick\/\*`/);
    await Promise.all(holding);
    assert.equal(await balanceOf(late.accountId), before);
  });

  it(
    "serves resources and prompts: one server's as they are on /mcp/{server}, every server's named with it on " +
      '/mcp, read through the queue unbilled',
    async () => {
      const { accountId, secret } = await creditedKey('resources@example.com');
      const before = await balanceOf(accountId);
      const one = await connect(secret, '/mcp/notes');
      assert.deepEqual(one.getServerCapabilities()?.resources, { subscribe: false, listChanged: false });
      assert.deepEqual((await one.listResources()).resources, [
        { uri: 'notes://today', name: 'today', title: 'Today', mimeType: 'text/plain' },
      ]);
      assert.deepEqual((await one.listResourceTemplates()).resourceTemplates, [
        { uriTemplate: 'notes://day/{date}', name: 'day', title: 'A day', mimeType: 'text/plain' },
      ]);
      assert.deepEqual((await one.readResource({ uri: 'notes://today' })).contents, [
        { uri: 'notes://today', mimeType: 'text/plain', text: 'buy milk' },
      ]);
      assert.deepEqual((await one.readResource({ uri: 'notes://day/2026-11-29' })).contents, [
        { uri: 'notes://day/2026-11-29', mimeType: 'text/plain', text: 'notes of 2026-11-29' },
      ]);
      assert.deepEqual(
        (await one.listPrompts()).prompts.map((prompt) => [prompt.name, prompt.arguments?.map((a) => a.name)]),
        [['summarize', ['topic']]],
      );
      assert.deepEqual((await one.getPrompt({ name: 'summarize', arguments: { topic: 'queues' } })).messages, [
        { role: 'user', content: { type: 'text', text: 'Summarize my notes on queues.' } },
      ]);
      // The server's own error (a resource it has not) is relayed as it gave it.
      await assert.rejects(one.readResource({ uri: 'notes://nowhere' }), (error: Error & { code?: number }) => {
        // (The SDK's server says so with -32602.)
        assert.deepEqual(
          [error.code, error.message],
          [-32602, 'MCP error -32602: Resource not found: notes://nowhere'],
        );
        return true;
      });

      const all = await connect(secret);
      assert.deepEqual((await all.listResources()).resources.map((resource) => resource.uri).sort(), [
        'switchyard-mcp://notes/notes://today',
        'switchyard-mcp://quick/notes://today',
      ]);
      assert.deepEqual(
        (await all.listResourceTemplates()).resourceTemplates.map((template) => template.uriTemplate).sort(),
        ['switchyard-mcp://notes/notes://day/{date}', 'switchyard-mcp://quick/notes://day/{date}'],
      );
      assert.deepEqual((await all.readResource({ uri: 'switchyard-mcp://quick/notes://day/1999-12-31' })).contents, [
        { uri: 'switchyard-mcp://quick/notes://day/1999-12-31', mimeType: 'text/plain', text: 'notes of 1999-12-31' },
      ]);
      assert.deepEqual((await all.listPrompts()).prompts.map((prompt) => prompt.name).sort(), [
        'notes__summarize',
        'quick__summarize',
      ]);
      assert.equal(
        (
          (await all.getPrompt({ name: 'notes__summarize', arguments: { topic: 'tea' } })).messages[0]!.content as {
            text: string;
          }
        ).text,
        'Summarize my notes on tea.',
      );
      await assert.rejects(
        all.readResource({ uri: 'notes://today' }),
        /Resource not found: notes:\/\/today\. Resources here are named switchyard-mcp:\/\/<server>\/<uri>/,
      );
      await assert.rejects(all.getPrompt({ name: 'summarize' }), /Unknown prompt: summarize/);

      // The admin sees how many of each the check found.
      const servers = (await admin('GET', '/admin/mcp/servers')).json.data as Array<Record<string, unknown>>;
      assert.deepEqual(
        servers.map((server) => [server.name, server.resources, server.resource_templates, server.prompts]),
        [
          ['notes', 1, 1, 1],
          ['quick', 1, 1, 1],
        ],
      );
      // Reads are counted and logged, never priced.
      assert.equal(await balanceOf(accountId), before);
      const deadline = Date.now() + 10_000;
      let rows: Array<Record<string, unknown>> = [];
      while (Date.now() < deadline) {
        rows =
          ((await admin('GET', `/admin/requests?account_id=${accountId}`)).json.data as Array<
            Record<string, unknown>
          >) ?? [];
        if (rows.length >= 6) break;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      assert.deepEqual(rows.map((row) => [row.endpoint, row.model, row.status]).sort(), [
        ['mcp.prompts/get', 'notes/summarize', 'completed'],
        ['mcp.prompts/get', 'notes/summarize', 'completed'],
        ['mcp.resources/read', 'notes/notes://day/2026-11-29', 'completed'],
        ['mcp.resources/read', 'notes/notes://nowhere', 'failed'],
        ['mcp.resources/read', 'notes/notes://today', 'completed'],
        ['mcp.resources/read', 'quick/notes://day/1999-12-31', 'completed'],
      ]);

      // A key that may use no tool of a server sees none of its resources or prompts either.
      const narrow = await creditedKey('resources-narrow@example.com', { mcp_tools: ['quick/*'] });
      const narrowAll = await connect(narrow.secret);
      assert.deepEqual(
        (await narrowAll.listResources()).resources.map((resource) => resource.uri),
        ['switchyard-mcp://quick/notes://today'],
      );
      assert.deepEqual(
        (await narrowAll.listPrompts()).prompts.map((prompt) => prompt.name),
        ['quick__summarize'],
      );
      await assert.rejects(
        narrowAll.readResource({ uri: 'switchyard-mcp://notes/notes://today' }),
        /may not use the MCP server notes/,
      );
    },
  );

  it(
    "relays a tool's progress to the client as it comes, then its answer; a call cut off after progress began ends " +
      'with its error',
    async () => {
      const { accountId, secret } = await creditedKey('progress@example.com');
      const before = await balanceOf(accountId);
      const client = await connect(secret);
      const progress: Array<{ progress: number; total?: number; message?: string; at: number }> = [];
      const result = await client.callTool({ name: 'notes__count', arguments: { to: 3, ms: 250 } }, undefined, {
        onprogress: (step) => void progress.push({ ...step, at: Date.now() }),
      });
      const answered = Date.now();
      assert.deepEqual(result.content, [{ type: 'text', text: 'counted to 3' }]);
      assert.deepEqual(
        progress.map(({ at: _at, ...step }) => step),
        [
          { progress: 1, total: 3, message: 'step 1' },
          { progress: 2, total: 3, message: 'step 2' },
          { progress: 3, total: 3, message: 'step 3' },
        ],
      );
      assert.ok(
        answered - progress[0]!.at >= 400,
        `the first step was relayed as it came (${answered - progress[0]!.at} ms before the answer)`,
      );
      // The same call without a progress callback is answered as JSON, as before.
      assert.deepEqual((await client.callTool({ name: 'notes__count', arguments: { to: 2, ms: 0 } })).content, [
        { type: 'text', text: 'counted to 2' },
      ]);
      // `quick` cuts a call off at 500 ms: after two steps went out, the call ends with its timeout, billed (it ran).
      const cut: number[] = [];
      await assert.rejects(
        client.callTool({ name: 'quick__count', arguments: { to: 10, ms: 200 } }, undefined, {
          onprogress: (step) => void cut.push(step.progress),
        }),
        /did not answer within 500 ms/,
      );
      assert.deepEqual(cut, [1, 2]);
      assert.equal(Math.round((before - (await balanceOf(accountId))) * 1e6), 2 * 1500 + 2000);
      // `quick` keeps its calls' arguments; the bytes out of a stream count its progress events.
      const deadline = Date.now() + 10_000;
      let rows: Array<Record<string, unknown>> = [];
      while (Date.now() < deadline) {
        rows =
          ((await admin('GET', `/admin/requests?account_id=${accountId}`)).json.data as Array<
            Record<string, unknown>
          >) ?? [];
        if (rows.length === 3 && rows.every((row) => row.settled)) break;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      const kept = rows.find((row) => row.model === 'quick/count')!;
      assert.deepEqual(
        [kept.status, kept.arguments],
        ['failed', JSON.stringify({ name: 'count', arguments: { to: 10, ms: 200 } })],
      );
      const streamed = rows
        .filter((row) => row.model === 'notes/count')
        .sort((a, b) => Number(b.bytes_out) - Number(a.bytes_out));
      assert.deepEqual(
        streamed.map((row) => row.arguments),
        [null, null],
      );
      assert.ok(
        Number(streamed[0]!.bytes_out) > 3 * 100 && Number(streamed[1]!.bytes_out) < 150,
        JSON.stringify(streamed.map((row) => row.bytes_out)),
      );
    },
  );

  it('ends a session on DELETE: its id is not taken again', async () => {
    const { secret } = await creditedKey('session@example.com');
    const client = await connect(secret);
    const transport = client.transport as StreamableHTTPClientTransport;
    const session = transport.sessionId!;
    assert.match(session, /^mcp_[0-9a-f]{32}$/);
    await transport.terminateSession();
    const response = await fetch(`${gateway.url}/mcp`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${secret}`,
        'mcp-session-id': session,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
    });
    assert.equal(response.status, 404);
  });
});

// A worker that dies mid-call: the call is not run again (a tool may not be safe to repeat), its client is told,
// and nothing is billed for it.
describe('MCP through the gateway: a worker killed mid-call', () => {
  let redis: Redis;
  let api: GatewayProcess;
  let worker: GatewayProcess;
  let spare: GatewayProcess | undefined;
  let notes: FakeMcp;
  let dir: string;
  let workerEnv: Record<string, string>;

  before(async () => {
    notes = await startFakeMcp({ token: upstreamToken });
    dir = mkdtempSync(join(tmpdir(), 'mcp-kill-'));
    const file = join(dir, 'mcp.json');
    writeFileSync(
      file,
      JSON.stringify({
        servers: {
          notes: {
            url: notes.url,
            headers: { Authorization: `Bearer ${upstreamToken}` },
            timeout_ms: 30_000,
            price_per_call_usd: '0.01',
          },
        },
      }),
    );
    let url: string;
    ({ redis, url } = await freshRedis(9));
    const env = {
      REDIS_URL: url,
      ADMIN_TOKEN: adminToken,
      MOCK_VENDOR: 'on',
      MCP_SERVERS_FILE: file,
      MCP_CHECK_INTERVAL_MS: '1000',
      WORKER_LOCK_MS: '2000',
    };
    workerEnv = env;
    [api, worker] = await Promise.all([startGateway({ role: 'api', env }), startGateway({ role: 'worker', env })]);
    const deadline = Date.now() + 30_000;
    for (;;) {
      const servers = (await (
        await fetch(`${api.url}/admin/mcp/servers`, { headers: { authorization: `Bearer ${adminToken}` } })
      ).json()) as { data: Array<{ status: string }> };
      if (servers.data[0]?.status === 'ok') break;
      assert.ok(Date.now() < deadline, 'the server is checked');
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  });

  after(async () => {
    await Promise.allSettled([api?.stop(), worker?.stop(), spare?.stop()]);
    await notes?.close();
    redis?.disconnect();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it(
    'fails the call cleanly, does not run it again, and bills nothing for it; a tool marked idempotent runs once ' +
      'more, billed once',
    async () => {
      const { admin } = adminClient(() => api.url, adminToken);
      const account = await admin('POST', '/admin/accounts', { email: 'killed@example.com' });
      await admin('POST', `/admin/accounts/${account.json.id}/credits`, { amount_usd: 1 });
      const key = await admin('POST', '/admin/keys', { name: 'agent', account_id: account.json.id });
      const client = new Client({ name: 'test-agent', version: '1.0.0' });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${api.url}/mcp`), {
          requestInit: { headers: { authorization: `Bearer ${key.json.key}` } },
        }),
      );
      try {
        const balance = async () => Number((await admin('GET', `/admin/accounts/${account.json.id}`)).json.balance_usd);
        const before = await balance();
        // The one worker runs the call; a second starts (its stalled check will find the call), then the first dies.
        const call = client.callTool({ name: 'notes__slow', arguments: { ms: 25_000 } });
        const until = Date.now() + 5000;
        while (notes.slow.running === 0 && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 20));
        assert.equal(notes.slow.running, 1);
        spare = await startGateway({ role: 'worker', env: workerEnv });
        worker.proc.kill('SIGKILL');
        const started = Date.now();
        const answered = await call.then(
          () => undefined,
          (error: unknown) => error as Error,
        );
        assert.ok(answered, 'the call fails');
        assert.match(answered.message, /worker was lost/);
        assert.ok(Date.now() - started < 15_000, "answered within the lock's time and the stalled check");
        await new Promise((resolve) => setTimeout(resolve, 3000));
        assert.equal(notes.slow.started, 1, 'the call was not run again');
        assert.equal(await balance(), before, 'a lost call is not billed');

        // A tool marked idempotent is run once more by the worker that finds its call lost, and billed once.
        const repeat = client.callTool({ name: 'notes__count', arguments: { to: 3, ms: 1000 } });
        const until2 = Date.now() + 5000;
        while (notes.counted.started === 0 && Date.now() < until2)
          await new Promise((resolve) => setTimeout(resolve, 20));
        assert.equal(notes.counted.started, 1);
        const last = spare;
        spare = await startGateway({ role: 'worker', env: workerEnv });
        last.proc.kill('SIGKILL');
        assert.deepEqual((await repeat).content, [{ type: 'text', text: 'counted to 3' }]);
        assert.equal(notes.counted.started, 2, 'run once more');
        assert.equal(Math.round((before - (await balance())) * 1e6), 10_000, 'billed once');
      } finally {
        await client.close().catch(() => undefined);
      }
    },
  );
});
