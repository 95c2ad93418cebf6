import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { Redis } from 'ioredis';
import { billKey } from '../../shared/redis-keys.js';
import { waitFor, type GatewayProcess } from '../support/gateway.js';
import type { FakeOpenAI, FakeResponse, RecordedRequest } from '../support/fake-openai.js';
import { startVendorGateway, type VendorGateway } from '../support/vendor-gateway.js';
import { startFakeMcp, type FakeMcp } from '../support/fake-mcp.js';
import { settledToolCalls, usageRows } from '../support/record.js';
import { openaiToolCall } from '../support/agents.js';
import { adminClient } from '../support/admin-client.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';

const adminToken = 'tool-loop-admin';
const upstreamToken = 'notes-upstream-secret';

/**
 * The fake OpenAI as a model that uses the notes server: offered `notes__search` with the user's words last, it calls
 * it (`{"word": "pelican"}`); given the tool's result, it says `Tool said: <result>` (the fake's own default).
 */
function searchesTheNotes(request: RecordedRequest): FakeResponse | undefined {
  const body = request.body as Record<string, any> | undefined;
  const last = body?.messages
    .filter((message: Record<string, unknown>) => message.role !== 'system' && message.role !== 'developer')
    .at(-1);
  if (last?.role !== 'user') return undefined;
  // "use <tool> <json>" in the user's words: that tool, when it is offered.
  const words =
    typeof last.content === 'string'
      ? last.content
      : (last.content as Array<{ text?: string }>).map((part) => part.text ?? '').join('');
  const asked = /use (\S+) (\{.*\})/.exec(words);
  const offered = (name: string) =>
    body!.tools?.some((candidate: Record<string, any>) => candidate.function?.name === name);
  const call =
    asked && offered(asked[1]!)
      ? { name: asked[1]!, arguments: asked[2]! }
      : offered('notes__search')
        ? { name: 'notes__search', arguments: JSON.stringify({ word: 'pelican' }) }
        : undefined;
  if (!call) return undefined;
  return openaiToolCall(
    body!,
    { id: `call_${(body!.messages as unknown[]).length}`, ...call },
    { prompt_tokens: 700, completion_tokens: 9 },
  );
}

/**
 * The Responses API's `mcp` tool and the Messages API's `mcp_servers` on a chat model of another vendor (the fake
 * OpenAI): the gateway runs the tool loop, each call a job on the server's queue billed at its price, and writes the
 * calls in each dialect's own items and blocks, streamed and not, through the official SDKs.
 */
describe('the tool loop: MCP servers named by a Responses or Messages request, run by the gateway on any chat model', () => {
  let vendorGateway: VendorGateway;
  let gateway: GatewayProcess;
  let openai: FakeOpenAI;
  let notes: FakeMcp;
  let broken: FakeMcp;
  let redisUrl: string;
  let home: string;
  const { admin } = adminClient(() => gateway.url, adminToken);

  before(async () => {
    notes = await startFakeMcp({ token: upstreamToken });
    broken = await startFakeMcp({ mode: 'fail' });
    home = await mkdtemp(join(tmpdir(), 'sy-tool-loop-'));
    const file = join(home, 'mcp.json');
    await writeFile(
      file,
      JSON.stringify({
        servers: {
          notes: { url: notes.url, headers: { Authorization: `Bearer ${upstreamToken}` }, price_per_call_usd: '0.01' },
          // The same server with a short timeout, and one that answers nothing but errors.
          hasty: {
            url: notes.url,
            headers: { Authorization: `Bearer ${upstreamToken}` },
            timeout_ms: 700,
            price_per_call_usd: '0.002',
          },
          broken: { url: broken.url, price_per_call_usd: '0.002' },
        },
      }),
    );
    vendorGateway = await startVendorGateway({
      db: 12,
      env: { ADMIN_TOKEN: adminToken, MCP_SERVERS_FILE: file, MCP_CHECK_INTERVAL_MS: '1000' },
      prepare: (ready) => {
        ({ openai, redisUrl } = ready);
      },
    });
    gateway = vendorGateway.gateway;
    await waitFor(
      async () => {
        const listed = (await (
          await fetch(`${gateway.url}/admin/mcp/servers`, { headers: { authorization: `Bearer ${adminToken}` } })
        ).json()) as { data: Array<{ status: string }> };
        return listed.data.filter((server) => server.status === 'ok').length === 2;
      },
      30_000,
      'the notes server checked',
    );
    openai.setDefault(searchesTheNotes);
  });

  after(async () => {
    await vendorGateway?.close();
    await notes?.close();
    await broken?.close();
    if (home) await rm(home, { recursive: true, force: true });
  });

  async function creditedKey(
    email: string,
    limits: Record<string, unknown> = {},
  ): Promise<{ secret: string; keyId: string; accountId: string }> {
    const account = await admin('POST', '/admin/accounts', { email });
    assert.equal(account.status, 201, JSON.stringify(account.json));
    await admin('POST', `/admin/accounts/${account.json.id}/credits`, { amount_usd: 5 });
    const key = await admin('POST', '/admin/keys', { name: 'loop', account_id: account.json.id, ...limits });
    assert.equal(key.status, 201, JSON.stringify(key.json));
    return { secret: String(key.json.key), keyId: String(key.json.id), accountId: String(account.json.id) };
  }

  const toolCalls = (keyId: string, count: number) => settledToolCalls(redisUrl, keyId, count);

  const notesTool = (approval: 'never' | 'always' = 'never') => ({
    type: 'mcp' as const,
    server_label: 'notes',
    server_url: `${gateway.url}/mcp/notes`,
    require_approval: approval,
  });

  it(
    'Responses, plain: lists the tools, calls search through the queue, answers with its result; one turn more ' +
      'billed, the call billed at its price',
    async () => {
      const { secret, keyId, accountId } = await creditedKey('responses-plain@example.com');
      const client = new OpenAI({ apiKey: secret, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
      const response = await client.responses.create({
        model: 'gpt-4o-mini',
        input: 'How many of my notes mention pelican?',
        tools: [notesTool()],
      });
      assertMatchesSchema('Response', response, 'the response');
      const types = response.output.map((item) => item.type);
      assert.deepEqual(types, ['mcp_list_tools', 'mcp_call', 'message'], JSON.stringify(response.output));
      const list = response.output[0] as OpenAI.Responses.ResponseOutputItem.McpListTools;
      assert.equal(list.server_label, 'notes');
      assert.ok(list.tools.some((tool) => tool.name === 'search' && typeof tool.input_schema === 'object'));
      const call = response.output[1] as OpenAI.Responses.ResponseOutputItem.McpCall;
      assert.deepEqual(
        [call.server_label, call.name, JSON.parse(call.arguments), call.output, call.status],
        ['notes', 'search', { word: 'pelican' }, 'notes with pelican: 2', 'completed'],
      );
      assert.match(response.output_text, /Tool said: notes with pelican: 2/);
      // Both turns of the model are in the usage: the call's turn (700 in) and the answer's.
      assert.ok(response.usage!.input_tokens > 700, JSON.stringify(response.usage));
      // The second turn gave the model the call and its result.
      const second = openai.requests.filter((request) => request.path.endsWith('/chat/completions')).at(-1)!
        .body as Record<string, any>;
      assert.deepEqual(
        second.messages.slice(-2).map((message: Record<string, unknown>) => message.role),
        ['assistant', 'tool'],
      );
      const [row] = await toolCalls(keyId, 1);
      assert.deepEqual([row!.model, row!.status, Number(row!.cost_micros)], ['notes/search', 'completed', 10_000]);
      // The second turn's reservation was held until the answer was billed, then given back: nothing stays held.
      const redis = new Redis(redisUrl);
      try {
        await waitFor(
          async () => Number(await redis.hget(billKey(accountId), 'reserved')) === 0,
          5000,
          'every reservation of the answer given back',
        );
      } finally {
        redis.disconnect();
      }
    },
  );

  it(
    'Responses, streamed: the mcp_list_tools and mcp_call events in order, each valid, ending with the same items ' +
      'as a plain answer',
    async () => {
      const { secret } = await creditedKey('responses-stream@example.com');
      const client = new OpenAI({ apiKey: secret, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
      const stream = await client.responses.create({
        model: 'gpt-4o-mini',
        input: 'How many of my notes mention pelican?',
        tools: [notesTool()],
        stream: true,
      });
      const events: Array<{ type: string } & Record<string, unknown>> = [];
      for await (const event of stream) events.push(event as never);
      for (const [i, event] of events.entries())
        assertMatchesSchema('ResponseStreamEvent', event, `event ${i} (${event.type})`);
      const types = events.map((event) => event.type);
      const order = [
        'response.mcp_list_tools.in_progress',
        'response.mcp_list_tools.completed',
        'response.mcp_call.in_progress',
        'response.mcp_call_arguments.done',
        'response.mcp_call.completed',
        'response.output_text.delta',
        'response.completed',
      ];
      let at = -1;
      for (const type of order) {
        const next = types.indexOf(type, at + 1);
        assert.ok(next > at, `${type} after the events before it: ${types.join(', ')}`);
        at = next;
      }
      const done = events.at(-1)!.response as OpenAI.Responses.Response;
      assert.deepEqual(
        done.output.map((item) => item.type),
        ['mcp_list_tools', 'mcp_call', 'message'],
      );
      assert.equal((done.output[1] as OpenAI.Responses.ResponseOutputItem.McpCall).output, 'notes with pelican: 2');
    },
  );

  it(
    'Responses, with approval: the call waits as an mcp_approval_request, runs once approved by the next request, ' +
      'and a declined one never runs',
    async () => {
      const { secret, keyId } = await creditedKey('responses-approval@example.com');
      const client = new OpenAI({ apiKey: secret, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
      const before = notes.seen.length;
      const asked = await client.responses.create({
        model: 'gpt-4o-mini',
        input: 'How many of my notes mention pelican?',
        tools: [notesTool('always')],
      });
      assert.deepEqual(
        asked.output.map((item) => item.type),
        ['mcp_list_tools', 'mcp_approval_request'],
      );
      const request = asked.output[1] as OpenAI.Responses.ResponseOutputItem.McpApprovalRequest;
      assert.deepEqual(
        [request.server_label, request.name, JSON.parse(request.arguments)],
        ['notes', 'search', { word: 'pelican' }],
      );
      // Nothing was called: the server saw no tools/call, the record has no call of the key.
      assert.ok(
        notes.seen.slice(before).every((seen) => seen.method !== 'POST') ||
          (await usageRows(redisUrl)).every((row) => row.key_id !== keyId || row.endpoint !== 'mcp.tools/call'),
      );

      const approved = await client.responses.create({
        model: 'gpt-4o-mini',
        previous_response_id: asked.id,
        input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: true }],
        tools: [notesTool('always')],
      });
      assertMatchesSchema('Response', approved, 'the approved response');
      const call = approved.output.find(
        (item) => item.type === 'mcp_call',
      ) as OpenAI.Responses.ResponseOutputItem.McpCall;
      assert.deepEqual(
        [call.approval_request_id, call.output, call.status],
        [request.id, 'notes with pelican: 2', 'completed'],
      );
      assert.match(approved.output_text, /Tool said: notes with pelican: 2/);
      await toolCalls(keyId, 1);

      const again = await client.responses.create({
        model: 'gpt-4o-mini',
        input: 'How many of my notes mention pelican?',
        tools: [notesTool('always')],
      });
      const second = again.output[1] as OpenAI.Responses.ResponseOutputItem.McpApprovalRequest;
      const declined = await client.responses.create({
        model: 'gpt-4o-mini',
        previous_response_id: again.id,
        input: [{ type: 'mcp_approval_response', approval_request_id: second.id, approve: false }],
        tools: [notesTool('always')],
      });
      assert.ok(!declined.output.some((item) => item.type === 'mcp_call'));
      assert.match(declined.output_text, /Tool said: The user declined this tool call/);
      await new Promise((resolve) => setTimeout(resolve, 500));
      assert.equal(
        (await usageRows(redisUrl)).filter((row) => row.key_id === keyId && row.endpoint === 'mcp.tools/call').length,
        1,
      );
    },
  );

  it(
    'Messages, plain and streamed: mcp_tool_use and mcp_tool_result blocks, then the answer, on a model another ' +
      'vendor serves',
    async () => {
      const { secret, keyId } = await creditedKey('messages@example.com');
      const client = new Anthropic({ apiKey: secret, baseURL: gateway.url, maxRetries: 0 });
      const params = {
        model: 'gpt-4o-mini',
        max_tokens: 200,
        messages: [{ role: 'user' as const, content: 'How many of my notes mention pelican?' }],
        mcp_servers: [{ type: 'url' as const, url: `${gateway.url}/mcp/notes`, name: 'notes' }],
        betas: ['mcp-client-2025-04-04' as const],
      };
      const plain = await client.beta.messages.create(params);
      assert.deepEqual(
        plain.content.map((block) => block.type),
        ['mcp_tool_use', 'mcp_tool_result', 'text'],
        JSON.stringify(plain.content),
      );
      const use = plain.content[0] as Anthropic.Beta.BetaMCPToolUseBlock;
      const result = plain.content[1] as Anthropic.Beta.BetaMCPToolResultBlock;
      assert.deepEqual([use.name, use.server_name, use.input], ['search', 'notes', { word: 'pelican' }]);
      assert.deepEqual(
        [result.tool_use_id, result.is_error, result.content],
        [use.id, false, [{ type: 'text', text: 'notes with pelican: 2' }]],
      );
      assert.match((plain.content[2] as Anthropic.Beta.BetaTextBlock).text, /Tool said: notes with pelican: 2/);
      assert.equal(plain.stop_reason, 'end_turn');

      const streamed = await client.beta.messages.stream(params).finalMessage();
      assert.deepEqual(
        streamed.content.map((block) => block.type),
        ['mcp_tool_use', 'mcp_tool_result', 'text'],
      );
      assert.deepEqual((streamed.content[0] as Anthropic.Beta.BetaMCPToolUseBlock).input, { word: 'pelican' });
      const rows = await toolCalls(keyId, 2);
      assert.ok(
        rows.every(
          (row) => row.model === 'notes/search' && row.status === 'completed' && Number(row.cost_micros) === 10_000,
        ),
      );

      // The connector's newer form: an mcp_toolset turning every tool off but search, and a call required.
      const toolset = await fetch(`${gateway.url}/v1/messages`, {
        method: 'POST',
        headers: {
          'x-api-key': secret,
          'content-type': 'application/json',
          'anthropic-version': '2023-06-01',
          'anthropic-beta': 'mcp-client-2025-11-20',
        },
        body: JSON.stringify({
          ...params,
          betas: undefined,
          tools: [
            {
              type: 'mcp_toolset',
              mcp_server_name: 'notes',
              default_config: { enabled: false },
              configs: { search: { enabled: true } },
            },
          ],
          tool_choice: { type: 'any' },
        }),
      });
      const message = (await toolset.json()) as { content: Array<{ type: string }> };
      assert.equal(toolset.status, 200, JSON.stringify(message));
      assert.deepEqual(
        message.content.map((block) => block.type),
        ['mcp_tool_use', 'mcp_tool_result', 'text'],
      );
      const first = openai.requests.filter((request) => request.path.endsWith('/chat/completions')).at(-2)!.body as {
        tools: Array<{ function: { name: string } }>;
        tool_choice?: string;
      };
      assert.deepEqual(
        [first.tools.map((tool) => tool.function.name), first.tool_choice],
        [['notes__search'], 'required'],
      );
    },
  );

  it(
    'Messages on a model Anthropic serves: the loop runs on its chat form, not its own connector; a tool that says ' +
      'isError is a result with is_error',
    async () => {
      const { secret, keyId } = await creditedKey('claude@example.com');
      const client = new Anthropic({ apiKey: secret, baseURL: gateway.url, maxRetries: 0 });
      const before = vendorGateway.anthropic.requests.length;
      const message = await client.beta.messages.create({
        model: 'claude-opus-4-5',
        max_tokens: 200,
        messages: [{ role: 'user', content: 'How many of my notes mention pelican?' }],
        mcp_servers: [
          {
            type: 'url',
            url: `${gateway.url}/mcp/notes`,
            name: 'notes',
            tool_configuration: { allowed_tools: ['search'] },
          },
        ],
        betas: ['mcp-client-2025-04-04'],
      });
      assert.deepEqual(
        message.content.map((block) => block.type),
        ['mcp_tool_use', 'mcp_tool_result', 'text'],
        JSON.stringify(message.content),
      );
      // The fake Anthropic calls the first tool it is offered with its own arguments, which search refuses.
      const result = message.content[1] as Anthropic.Beta.BetaMCPToolResultBlock;
      assert.equal(result.is_error, true);
      assert.match(
        (message.content[2] as Anthropic.Beta.BetaTextBlock).text,
        /^Tool said: Error: .*Input validation error/,
      );
      // Anthropic was asked twice, offered the server's tool as a function, never given mcp_servers.
      const asked = vendorGateway.anthropic.requests
        .slice(before)
        .map((request) => request.body as Record<string, any>);
      assert.equal(asked.length, 2);
      assert.ok(
        asked.every(
          (body) =>
            body.mcp_servers === undefined &&
            body.tools.some((tool: { name: string }) => tool.name === 'notes__search'),
        ),
      );
      const [row] = await toolCalls(keyId, 1);
      assert.deepEqual([row!.model, Number(row!.cost_micros)], ['notes/search', 10_000]);
    },
  );

  it(
    'a call that times out fails as an http_error the model reads (cancelled upstream, billed as it ran); a server ' +
      'that cannot list offers nothing',
    async () => {
      const { secret, keyId } = await creditedKey('faults@example.com');
      const client = new OpenAI({ apiKey: secret, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
      const cancelled = notes.slow.cancelled;
      const response = await client.responses.create({
        model: 'gpt-4o-mini',
        input: 'use hasty__slow {"ms":3000}',
        tools: [
          { type: 'mcp', server_label: 'hasty', require_approval: 'never' },
          { type: 'mcp', server_label: 'broken', require_approval: 'never' },
        ],
      });
      assertMatchesSchema('Response', response, 'the response');
      assert.deepEqual(
        response.output.map((item) => item.type),
        ['mcp_list_tools', 'mcp_list_tools', 'mcp_call', 'message'],
      );
      const down = response.output[1] as OpenAI.Responses.ResponseOutputItem.McpListTools;
      assert.deepEqual(down.tools, []);
      assert.match(String(down.error), /could not be listed/);
      const call = response.output[2] as OpenAI.Responses.ResponseOutputItem.McpCall;
      assert.equal(call.status, 'failed', JSON.stringify(call));
      const error = call.error as unknown as { type: string; code?: number } | null;
      assert.deepEqual([error?.type, error?.code], ['http_error', 504], JSON.stringify(call));
      assert.match(response.output_text, /Tool said: Error: The tool did not answer within 700 ms/);
      await waitFor(() => notes.slow.cancelled > cancelled, 5000, 'the slow call cancelled upstream');
      const [row] = await toolCalls(keyId, 1);
      assert.deepEqual([row!.model, row!.status, Number(row!.cost_micros)], ['hasty/slow', 'failed', 2000]);
    },
  );

  it(
    'a client that leaves during a call: the call is cancelled upstream, and what ran is billed (the turn before ' +
      'it, the call)',
    async () => {
      const { secret, keyId } = await creditedKey('leaves@example.com');
      const client = new OpenAI({ apiKey: secret, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
      const cancelled = notes.slow.cancelled;
      const started = notes.slow.started;
      const controller = new AbortController();
      const stream = await client.responses.create(
        { model: 'gpt-4o-mini', input: 'use notes__slow {"ms":8000}', tools: [notesTool()], stream: true },
        { signal: controller.signal },
      );
      let sawCall = false;
      try {
        for await (const event of stream) {
          if (event.type !== 'response.mcp_call.in_progress') continue;
          sawCall = true;
          // Once the server is running it (a cancel before that stops it before it reaches the server, unbilled).
          await waitFor(() => notes.slow.started > started, 5000, 'the call at the server');
          controller.abort();
        }
      } catch {
        // The SDK's own abort.
      }
      assert.ok(sawCall, 'the call began before the client left');
      await waitFor(() => notes.slow.cancelled > cancelled, 5000, 'the call cancelled upstream');
      let rows: Awaited<ReturnType<typeof usageRows>> = [];
      await waitFor(
        async () => {
          rows = (await usageRows(redisUrl)).filter((row) => row.key_id === keyId && row.settled);
          return rows.length >= 2;
        },
        10_000,
        'the answer and the call settled',
      );
      const answer = rows.find((row) => row.endpoint === 'responses')!;
      const call = rows.find((row) => row.endpoint === 'mcp.tools/call')!;
      assert.equal(answer.status, 'cancelled');
      assert.ok(Number(answer.input_tokens) >= 700 && Number(answer.cost_micros) > 0, JSON.stringify(answer));
      assert.deepEqual([call.status, Number(call.cost_micros)], ['cancelled', 10_000]);
    },
  );

  it(
    'a key revoked while its call runs: the call finishes and is billed, the model is not asked again, the client ' +
      'told why',
    async () => {
      const { secret, keyId } = await creditedKey('revoked@example.com');
      const client = new OpenAI({ apiKey: secret, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
      const asked = () =>
        openai.requests.filter((request) => JSON.stringify(request.body).includes('use notes__slow {\\"ms\\":1500}'))
          .length;
      const started = notes.slow.started;
      const pending = client.responses.create({
        model: 'gpt-4o-mini',
        input: 'use notes__slow {"ms":1500}',
        tools: [notesTool()],
      });
      await waitFor(() => notes.slow.started > started, 5000, 'the call running');
      assert.ok((await admin('DELETE', `/admin/keys/${keyId}`)).status < 300);
      await assert.rejects(pending, (error: unknown) => error instanceof OpenAI.APIError && error.status === 401);
      assert.equal(asked(), 1, 'one turn of the model');
      const [row] = await toolCalls(keyId, 1);
      assert.deepEqual([row!.status, Number(row!.cost_micros)], ['completed', 10_000]);
    },
  );

  it(
    "holds the key's rules: a server it may not reach is refused, a tool it may not use is not offered, a server " +
      "not the gateway's is refused",
    async () => {
      const { secret } = await creditedKey('rules@example.com', { mcp_tools: ['notes/add'] });
      const client = new OpenAI({ apiKey: secret, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
      const response = await client.responses.create({
        model: 'gpt-4o-mini',
        input: 'How many of my notes mention pelican?',
        tools: [notesTool()],
      });
      const list = response.output[0] as OpenAI.Responses.ResponseOutputItem.McpListTools;
      assert.deepEqual(
        list.tools.map((tool) => tool.name),
        ['add'],
      );
      // The model was offered `add` alone (the fake then calls the first tool it has): search was neither offered nor
      // called.
      const offered = openai.requests.filter((request) => request.path.endsWith('/chat/completions')).at(-1)!.body as {
        tools?: Array<{ function: { name: string } }>;
      };
      assert.ok(offered.tools?.every((tool) => tool.function.name !== 'notes__search'));
      assert.ok(response.output.every((item) => item.type !== 'mcp_call' || item.name === 'add'));

      const none = await creditedKey('none@example.com', { mcp_tools: ['other/*'] });
      const refused = await fetch(`${gateway.url}/v1/responses`, {
        method: 'POST',
        headers: { authorization: `Bearer ${none.secret}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', input: 'hi', tools: [notesTool()] }),
      });
      assert.equal(refused.status, 403);
      assert.equal(((await refused.json()) as { error: { code: string } }).error.code, 'tool_not_allowed');

      for (const tool of [
        { type: 'mcp', server_label: 'nowhere' },
        { type: 'mcp', server_label: 'notes', server_url: 'https://attacker.example/mcp' },
        { type: 'mcp', server_label: 'notes', connector_id: 'connector_gmail' },
      ]) {
        const bad = await fetch(`${gateway.url}/v1/responses`, {
          method: 'POST',
          headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'gpt-4o-mini', input: 'hi', tools: [tool] }),
        });
        assert.equal(bad.status, 400, JSON.stringify(tool));
        assert.match(((await bad.json()) as { error: { param: string } }).error.param, /^tools\[0\]\./);
      }
      const anthropic = await fetch(`${gateway.url}/v1/messages`, {
        method: 'POST',
        headers: { 'x-api-key': secret, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
        body: JSON.stringify({
          model: 'gpt-4o-mini',
          max_tokens: 10,
          messages: [{ role: 'user', content: 'hi' }],
          mcp_servers: [{ type: 'url', url: 'https://attacker.example/mcp', name: 'notes' }],
        }),
      });
      assert.equal(anthropic.status, 400);
      assert.equal(((await anthropic.json()) as { error: { type: string } }).error.type, 'invalid_request_error');
    },
  );
});
