import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { startFakeMcp, type FakeMcp } from '../support/fake-mcp.js';
import { checkServer } from '../../workers/mcp/server-checks.js';
import { loadMcpServers } from '../../shared/mcp/servers.js';

const adminToken = 'mcp-servers-test-token';
const stdioServer = fileURLToPath(new URL('../support/fake-mcp-stdio.ts', import.meta.url));
const upstreamToken = 'upstream-secret-0f3a9c';

// Upstream MCP servers given by file: a worker connects to each with the official SDK's client, lists its tools and
// keeps what it found in Redis; the admin API shows it (headers by name only) from any api.
describe('MCP servers: configured by file, checked by a worker, shown to admins', () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let notes: FakeMcp;
  let broken: FakeMcp;
  let hanging: FakeMcp;
  let legacy: FakeMcp;
  let dir: string;

  before(async () => {
    [notes, broken, hanging, legacy] = await Promise.all([
      startFakeMcp({ token: upstreamToken }),
      startFakeMcp({ mode: 'fail' }),
      startFakeMcp({ mode: 'hang' }),
      startFakeMcp({ mode: 'sse' }),
    ]);
    dir = mkdtempSync(join(tmpdir(), 'mcp-servers-'));
    const file = join(dir, 'mcp.json');
    writeFileSync(
      file,
      JSON.stringify({
        servers: {
          notes: {
            url: `${notes.url}?tenant=secret-in-query`,
            headers: { Authorization: `Bearer ${upstreamToken}` },
            max_concurrency: 20,
            timeout_ms: 5000,
            price_per_call_usd: '0.0015',
          },
          broken: { url: broken.url, timeout_ms: 5000 },
          hanging: { url: hanging.url, timeout_ms: 700 },
          legacy: { url: legacy.url, transport: 'sse', timeout_ms: 5000 },
          local: {
            command: process.execPath,
            args: ['--import', 'tsx', stdioServer],
            env: { FAKE_MCP_GREETING: 'hello-from-the-file' },
            timeout_ms: 20_000,
          },
        },
      }),
    );
    let url: string;
    ({ redis, url } = await freshRedis(6));
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_TOKEN: adminToken,
        MOCK_VENDOR: 'on',
        MCP_SERVERS_FILE: file,
        MCP_CHECK_INTERVAL_MS: '1000',
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([notes?.close(), broken?.close(), hanging?.close(), legacy?.close()]);
    redis?.disconnect();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const servers = async () => {
    const response = await fetch(`${gateway.url}/admin/mcp/servers`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    assert.equal(response.status, 200);
    return {
      text: await response.clone().text(),
      body: (await response.json()) as { object: string; data: Array<Record<string, unknown>> },
    };
  };

  it("lists each server with its tools once a worker has checked it, and never its headers' values", async () => {
    let seen = await servers();
    const deadline = Date.now() + 40_000;
    while (seen.body.data.some((server) => server.status === 'unchecked') && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      seen = await servers();
    }
    const byName = new Map(seen.body.data.map((server) => [server.name, server]));
    const ok = byName.get('notes')!;
    assert.equal(ok.status, 'ok', JSON.stringify(ok));
    assert.equal(ok.url, notes.url, 'shown without its query');
    assert.deepEqual(ok.header_names, ['Authorization']);
    assert.equal(ok.price_per_call_usd, '0.001500');
    assert.equal(ok.max_concurrency, 20);
    assert.deepEqual(ok.server_info, { name: 'fake-notes', version: '1.2.3' });
    assert.equal(typeof ok.protocol_version, 'string');
    const tools = ok.tools as Array<{
      name: string;
      description?: string;
      inputSchema?: { type: string; properties?: Record<string, unknown> };
      annotations?: Record<string, unknown>;
    }>;
    assert.deepEqual(tools.map((tool) => tool.name).sort(), ['add', 'count', 'crash', 'search', 'slow']);
    // Each tool kept as the server defines it: what clients will be given.
    const search = tools.find((tool) => tool.name === 'search')!;
    assert.deepEqual(search.annotations, { readOnlyHint: true });
    assert.equal(search.description, 'Finds notes that hold a word.');
    assert.equal(search.inputSchema?.type, 'object');
    assert.deepEqual(Object.keys(search.inputSchema?.properties ?? {}), ['word']);
    assert.equal(ok.tools_skipped, 0);
    // A server that speaks only the legacy HTTP+SSE transport.
    const old = byName.get('legacy')!;
    assert.equal(old.status, 'ok', JSON.stringify(old));
    assert.deepEqual(
      (old.tools as Array<{ name: string }>).map((tool) => tool.name),
      ['lookup'],
    );
    assert.deepEqual(old.server_info, { name: 'fake-legacy', version: '0.9.0' });
    // A server the workers run themselves, given the variables the file sets (their values not shown).
    const local = byName.get('local')!;
    assert.equal(local.status, 'ok', JSON.stringify(local));
    assert.equal(local.transport, 'stdio');
    assert.equal(local.url, null);
    assert.equal(local.command, process.execPath);
    assert.deepEqual(local.env_names, ['FAKE_MCP_GREETING']);
    assert.deepEqual(local.server_info, { name: 'fake-local', version: '2.0.0' });
    assert.equal(
      (local.tools as Array<{ description: string }>)[0]!.description,
      'Says which variable it was given: hello-from-the-file.',
    );
    assert.doesNotMatch(seen.text, /"args"|--import/);
    // The upstream got the header the file gives it.
    assert.ok(notes.seen.some((request) => request.authorization === `Bearer ${upstreamToken}`));
    // Secrets stay on the server: not the token, not the URL's query.
    assert.doesNotMatch(seen.text, new RegExp(upstreamToken));
    assert.doesNotMatch(seen.text, /secret-in-query/);

    const failing = byName.get('broken')!;
    assert.equal(failing.status, 'failing');
    assert.deepEqual(failing.tools, []);
    assert.equal(typeof failing.error, 'string');

    const silent = byName.get('hanging')!;
    assert.equal(silent.status, 'failing');
    assert.match(String(silent.error), /no answer within its timeout \(700 ms\)/);
    assert.ok(
      Number(silent.latency_ms) < 700 + 1000,
      `a hanging server is given up at its timeout (${silent.latency_ms} ms)`,
    );
  });

  it('keeps checking: a server that starts failing is shown failing within an interval or two', async () => {
    const before = (await servers()).body.data.find((server) => server.name === 'notes')!;
    await notes.close();
    const deadline = Date.now() + 10_000;
    let now = before;
    while (now.status === 'ok' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      now = (await servers()).body.data.find((server) => server.name === 'notes')!;
    }
    assert.equal(now.status, 'failing');
    assert.ok(Number(now.checked_at) >= Number(before.checked_at));
  });

  it("is the admin token's alone", async () => {
    const response = await fetch(`${gateway.url}/admin/mcp/servers`, {
      headers: { authorization: 'Bearer not-the-token' },
    });
    assert.equal(response.status, 401);
  });
});

describe('MCP servers file', () => {
  const write = (content: string) => {
    const dir = mkdtempSync(join(tmpdir(), 'mcp-file-'));
    const file = join(dir, 'mcp.json');
    writeFileSync(file, content);
    return { file, done: () => rmSync(dir, { recursive: true, force: true }) };
  };

  it('reads servers with their defaults, the price in micro-dollars exactly', () => {
    const { file, done } = write(
      JSON.stringify({
        servers: {
          a: { url: 'https://a.example/mcp', price_per_call_usd: '0.000001' },
          'b-2': { url: 'http://b/sse', transport: 'sse', price_per_call_usd: 1.25 },
        },
      }),
    );
    try {
      const [a, b] = loadMcpServers(file);
      assert.deepEqual(a, {
        name: 'a',
        source: 'file',
        url: 'https://a.example/mcp',
        transport: 'streamable-http',
        headers: {},
        maxConcurrency: 20,
        timeoutMs: 60_000,
        pricePerCallMicros: 1,
        keepArguments: false,
      });
      assert.equal(b!.transport, 'sse');
      assert.equal(b!.pricePerCallMicros, 1_250_000);
      assert.equal(b!.transport, 'sse');
    } finally {
      done();
    }
  });

  it('refuses what it cannot use, in one line that names the file and the field', () => {
    const cases: Array<[string, RegExp]> = [
      ['not json', /is not JSON/],
      [JSON.stringify({ servers: { Bad_Name: { url: 'https://x/mcp' } } }), /servers\.Bad_Name/],
      [JSON.stringify({ servers: { a: { url: 'ftp://x/mcp' } } }), /servers\.a\.url must be an http or https URL/],
      [
        JSON.stringify({ servers: { a: { url: 'https://x/mcp', price_per_call_usd: '0.0000001' } } }),
        /servers\.a\.price_per_call_usd/,
      ],
      [
        JSON.stringify({ servers: { a: { url: 'https://x/mcp', headers: { 'X-A': 'one\r\ntwo' } } } }),
        /servers\.a\.headers\.X-A holds a line break/,
      ],
      [JSON.stringify({ servers: { a: { url: 'https://x/mcp', secret: 'typo' } } }), /servers\.a/],
      [JSON.stringify({ servers: { a: {} } }), /servers\.a needs either a url .* or a command/],
      [
        JSON.stringify({ servers: { a: { url: 'https://x/mcp', command: 'node' } } }),
        /servers\.a needs either a url .* not both/,
      ],
      [
        JSON.stringify({ servers: { a: { command: 'node', headers: { A: 'b' } } } }),
        /servers\.a\.headers is for a server reached by its url/,
      ],
      [
        JSON.stringify({ servers: { a: { url: 'https://x/mcp', env: { A: 'b' } } } }),
        /servers\.a\.env is for a server run by its command/,
      ],
    ];
    for (const [content, message] of cases) {
      const { file, done } = write(content);
      try {
        assert.throws(
          () => loadMcpServers(file),
          (error: Error) =>
            error.message.startsWith('MCP_SERVERS_FILE: ') &&
            message.test(error.message) &&
            !error.message.includes('\n'),
        );
      } finally {
        done();
      }
    }
    assert.throws(
      () => loadMcpServers('/nonexistent/mcp.json'),
      /MCP_SERVERS_FILE: cannot read \/nonexistent\/mcp\.json: ENOENT/,
    );
    assert.deepEqual(loadMcpServers(undefined), []);
  });

  it('stops a start whose file it cannot use, with the line that says why', async () => {
    const { file, done } = write(JSON.stringify({ servers: { a: { url: 'ftp://x/mcp' } } }));
    try {
      const { url, redis } = await freshRedis(7);
      after(() => redis.disconnect());
      await assert.rejects(
        startGateway({ role: 'api', env: { REDIS_URL: url, MOCK_VENDOR: 'on', MCP_SERVERS_FILE: file } }),
        (error: Error) =>
          error.message.includes(`MCP_SERVERS_FILE: ${file}: servers.a.url must be an http or https URL`),
      );
    } finally {
      done();
    }
  });

  it('a check of a stdio server that never answers gives up at its timeout, and its process ends', async () => {
    const { file: pidFile, done } = write('');
    try {
      const started = Date.now();
      const health = await checkServer({
        name: 'h',
        source: 'file',
        transport: 'stdio',
        headers: {},
        command: {
          program: process.execPath,
          args: ['--import', 'tsx', stdioServer],
          env: { FAKE_MCP_MODE: 'hang', FAKE_MCP_PID_FILE: pidFile },
        },
        maxConcurrency: 1,
        timeoutMs: 3000,
        pricePerCallMicros: 0,
        keepArguments: false,
      });
      assert.equal(health.ok, false);
      assert.match(health.error!, /no answer within its timeout/);
      assert.ok(Date.now() - started < 4000);
      const pid = Number(readFileSync(pidFile, 'utf8'));
      assert.ok(pid > 0);
      const gone = Date.now() + 5000;
      const alive = () => {
        try {
          process.kill(pid, 0);
          return true;
        } catch {
          return false;
        }
      };
      while (alive() && Date.now() < gone) await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(alive(), false, 'the server the check ran has ended');
    } finally {
      done();
    }
  });

  it('a check gives up a server that accepts the connection and never answers at its timeout', async () => {
    const hanging = await startFakeMcp({ mode: 'hang' });
    try {
      const started = Date.now();
      const health = await checkServer({
        name: 'h',
        source: 'file',
        url: hanging.url,
        transport: 'streamable-http',
        headers: {},
        maxConcurrency: 1,
        timeoutMs: 300,
        pricePerCallMicros: 0,
        keepArguments: false,
      });
      assert.equal(health.ok, false);
      assert.ok(Date.now() - started < 1300, 'within its timeout and a little');
    } finally {
      await hanging.close();
    }
  });
});

// An admin's "check it now": a worker checks the server at once, whatever the interval, and the answer is what it
// found.
describe("MCP servers: checked now at an admin's asking", () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let notes: FakeMcp;
  let dir: string;

  before(async () => {
    notes = await startFakeMcp({ token: upstreamToken });
    dir = mkdtempSync(join(tmpdir(), 'mcp-check-now-'));
    const file = join(dir, 'mcp.json');
    writeFileSync(
      file,
      JSON.stringify({
        servers: { notes: { url: notes.url, headers: { Authorization: `Bearer ${upstreamToken}` }, timeout_ms: 2000 } },
      }),
    );
    let url: string;
    ({ redis, url } = await freshRedis(7));
    // A check every ten minutes: only the first round runs while the test does.
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_TOKEN: adminToken,
        MOCK_VENDOR: 'on',
        MCP_SERVERS_FILE: file,
        MCP_CHECK_INTERVAL_MS: '600000',
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    await notes?.close();
    redis?.disconnect();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const admin = (method: string, path: string) =>
    fetch(`${gateway.url}${path}`, { method, headers: { authorization: `Bearer ${adminToken}` } });

  it('checks the server at once and answers what it found; an unknown server is a 404', async () => {
    const deadline = Date.now() + 30_000;
    let first: Record<string, unknown> | undefined;
    while (Date.now() < deadline) {
      first = ((await (await admin('GET', '/admin/mcp/servers')).json()) as { data: Array<Record<string, unknown>> })
        .data[0];
      if (first?.status === 'ok') break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    assert.equal(first?.status, 'ok');
    // The server goes away: the next round is ten minutes off, but a check now finds it at once.
    await notes.close();
    const asked = Date.now();
    const checked = await admin('POST', '/admin/mcp/servers/notes/check');
    assert.equal(checked.status, 200);
    const view = (await checked.json()) as Record<string, unknown>;
    assert.equal(view.status, 'failing');
    assert.ok(Number(view.checked_at) >= Math.floor(asked / 1000), JSON.stringify(view));
    assert.ok(Date.now() - asked < 7000, "within the server's timeout and a little");
    assert.equal(
      ((await (await admin('GET', '/admin/mcp/servers')).json()) as { data: Array<Record<string, unknown>> }).data[0]!
        .status,
      'failing',
    );
    const unknown = await admin('POST', '/admin/mcp/servers/nowhere/check');
    assert.equal(unknown.status, 404);
    assert.equal(((await unknown.json()) as { error: { code: string } }).error.code, 'mcp_server_not_found');
    // Without the admin token: refused.
    assert.equal((await fetch(`${gateway.url}/admin/mcp/servers/notes/check`, { method: 'POST' })).status, 401);
  });
});
