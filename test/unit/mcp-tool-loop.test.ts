import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { createLogger } from '../../shared/logger.js';
import { GatewayError } from '../../shared/errors.js';
import { McpRegistry } from '../../shared/mcp/registry.js';
import type { McpServer } from '../../shared/mcp/servers.js';
import { needsApproval, requestAllows } from '../../shared/mcp/tool-loop.js';
import { messagesLoopPlan, responsesLoopPlan } from '../../api/mcp/loop-plan.js';
import { outcomeOf } from '../../workers/mcp/loop-calls.js';
import { addUsage } from '../../workers/mcp/tool-loop.js';

const server = (name: string, url: string): McpServer => ({
  name,
  source: 'file',
  transport: 'streamable-http',
  url,
  headers: {},
  maxConcurrency: 4,
  timeoutMs: 1000,
  pricePerCallMicros: 0,
  keepArguments: false,
});

/** The registry as the file gives it (never started: nothing is read from Redis). */
const registry = new McpRegistry({
  redis: undefined as unknown as Redis,
  log: createLogger('silent', 'test'),
  file: [server('notes', 'https://notes.internal/mcp'), server('crm', 'https://crm.internal/mcp')],
  added: async () => [],
});

/** The refusal a plan throws: its status, the field it names, and its code. */
function refusal(run: () => unknown): {
  status: number;
  param: string | null | undefined;
  code: string | null | undefined;
} {
  try {
    run();
  } catch (error) {
    assert.ok(error instanceof GatewayError, String(error));
    return { status: error.status, param: error.param, code: error.code };
  }
  assert.fail('not refused');
}

describe('the tool loop plan of a Responses request', () => {
  const plan = (tools: Array<Record<string, unknown>>, rules = {}) =>
    responsesLoopPlan(tools, undefined, false, [], rules, registry);

  it("takes the gateway's servers by label, with their allowed tools and approvals (asked by default)", () => {
    assert.equal(plan([{ type: 'function', name: 'f' }]), undefined);
    const made = plan([
      { type: 'mcp', server_label: 'notes', server_url: 'https://gw.example/mcp/notes/' },
      {
        type: 'mcp',
        server_label: 'crm',
        server_url: 'https://crm.internal/mcp',
        allowed_tools: { tool_names: ['find'], read_only: true },
        require_approval: { never: { tool_names: ['find'] } },
      },
    ])!;
    assert.deepEqual(made.uses, [
      { server: 'notes', approval: { default: 'always' } },
      { server: 'crm', allowedTools: ['find'], readOnly: true, approval: { default: 'always', never: ['find'] } },
    ]);
    assert.equal(needsApproval(made.uses[0]!, 'search'), true);
    assert.equal(needsApproval(made.uses[1]!, 'find'), false);
    assert.equal(needsApproval({ server: 'x', approval: { default: 'never' } }, 'any'), false);
    assert.equal(requestAllows(made.uses[1]!, 'find', true), true);
    assert.equal(requestAllows(made.uses[1]!, 'find', false), false);
    assert.equal(requestAllows(made.uses[1]!, 'other', true), false);
    assert.equal(
      responsesLoopPlan([{ type: 'mcp', server_label: 'notes' }], 99, true, [], {}, registry)!.maxToolCalls,
      32,
    );
  });

  it(
    'refuses, naming the field: an unknown server, another URL, a connector, a server named twice, a server the ' +
      'key may not reach, hostile shapes',
    () => {
      assert.deepEqual(
        refusal(() => plan([{ type: 'mcp', server_label: 'nowhere' }])),
        { status: 400, param: 'tools[0].server_label', code: 'invalid_value' },
      );
      assert.deepEqual(
        refusal(() => plan([{ type: 'mcp', server_label: 'notes', server_url: 'http://169.254.169.254/latest' }])),
        { status: 400, param: 'tools[0].server_url', code: 'invalid_value' },
      );
      assert.deepEqual(
        refusal(() => plan([{ type: 'mcp', server_label: 'notes', server_url: 'not a url' }])),
        { status: 400, param: 'tools[0].server_url', code: 'invalid_value' },
      );
      assert.equal(
        refusal(() => plan([{ type: 'mcp', server_label: 'notes', connector_id: 'connector_gmail' }])).param,
        'tools[0].connector_id',
      );
      assert.equal(
        refusal(() =>
          plan([
            { type: 'mcp', server_label: 'notes' },
            { type: 'mcp', server_label: 'notes' },
          ]),
        ).param,
        'tools[1].server_label',
      );
      assert.deepEqual(
        refusal(() => plan([{ type: 'mcp', server_label: 'notes' }], { mcpTools: ['crm/*'] })),
        { status: 403, param: 'tools[0].server_label', code: 'tool_not_allowed' },
      );
      for (const bad of [
        { server_label: 'x'.repeat(65) },
        { server_label: 7 },
        { server_label: 'notes', allowed_tools: 'all' },
        { server_label: 'notes', require_approval: 'sometimes' },
        { server_label: 'notes', require_approval: { maybe: {} } },
      ]) {
        assert.equal(refusal(() => plan([{ type: 'mcp', ...bad }])).status, 400, JSON.stringify(bad));
      }
      assert.equal(
        refusal(() =>
          responsesLoopPlan(
            [],
            undefined,
            false,
            [{ requestId: 'mcpr_1', server: 'notes', tool: 'search', arguments: '{}', approve: true }],
            {},
            registry,
          ),
        ).status,
        400,
      );
    },
  );
});

describe('the tool loop plan of a Messages request', () => {
  it('takes mcp_servers by name, with tool_configuration or a toolset, and asks no approvals', () => {
    assert.equal(messagesLoopPlan(undefined, [], false, {}, registry), undefined);
    const made = messagesLoopPlan(
      [
        {
          type: 'url',
          url: 'https://gw.example/mcp/notes',
          name: 'notes',
          tool_configuration: { allowed_tools: ['search'] },
        },
        { type: 'url', url: 'https://crm.internal/mcp', name: 'crm' },
      ],
      [{ type: 'mcp_toolset', mcp_server_name: 'crm', configs: { delete: { enabled: false } } }],
      true,
      {},
      registry,
    )!;
    assert.deepEqual(made, {
      uses: [
        { server: 'notes', approval: { default: 'never' }, allowedTools: ['search'] },
        { server: 'crm', approval: { default: 'never' }, excludedTools: ['delete'] },
      ],
      requireCall: true,
    });
    assert.equal(requestAllows(made.uses[1]!, 'delete', false), false);
    assert.deepEqual(
      messagesLoopPlan(
        [{ type: 'url', url: 'https://gw.example/mcp/notes', name: 'notes', tool_configuration: { enabled: false } }],
        [],
        false,
        {},
        registry,
      )!.uses[0]!.allowedTools,
      [],
    );
  });

  it('refuses another URL, an unknown server, a toolset of a server not named, and entries that are not objects', () => {
    assert.deepEqual(
      refusal(() =>
        messagesLoopPlan([{ type: 'url', url: 'https://evil.example/mcp', name: 'notes' }], [], false, {}, registry),
      ),
      { status: 400, param: 'mcp_servers[0].url', code: 'invalid_value' },
    );
    assert.equal(
      refusal(() => messagesLoopPlan([{ type: 'url', url: 'https://gw/mcp/x', name: 'x' }], [], false, {}, registry))
        .param,
      'mcp_servers[0].name',
    );
    assert.equal(
      refusal(() =>
        messagesLoopPlan(
          [{ type: 'url', url: 'https://gw/mcp/notes', name: 'notes' }],
          [{ type: 'mcp_toolset', mcp_server_name: 'crm' }],
          false,
          {},
          registry,
        ),
      ).status,
      400,
    );
    for (const bad of ['notes', null, 3, { type: 'stdio', name: 'notes' }])
      assert.equal(refusal(() => messagesLoopPlan([bad], [], false, {}, registry)).status, 400, JSON.stringify(bad));
  });
});

describe("a call's outcome and the loop's usage", () => {
  it("reads the server's answer: text, the tool's own error, a JSON-RPC error, something that is not JSON", () => {
    assert.deepEqual(
      outcomeOf(
        JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          result: {
            content: [
              { type: 'text', text: 'a' },
              { type: 'image', data: 'x', mimeType: 'image/png' },
            ],
          },
        }),
      ),
      {
        output: 'a\n{"type":"image","data":"x","mimeType":"image/png"}',
        content: [
          { type: 'text', text: 'a' },
          { type: 'image', data: 'x', mimeType: 'image/png' },
        ],
      },
    );
    assert.deepEqual(
      outcomeOf(JSON.stringify({ result: { content: [{ type: 'text', text: 'no' }], isError: true } })).error,
      { type: 'mcp_tool_execution_error', content: [{ type: 'text', text: 'no' }] },
    );
    assert.deepEqual(outcomeOf(JSON.stringify({ error: { code: -32602, message: 'Unknown tool' } })).error, {
      type: 'mcp_protocol_error',
      code: -32602,
      message: 'Unknown tool',
    });
    assert.deepEqual(
      outcomeOf(JSON.stringify({ result: { content: [], structuredContent: { n: 2 } } })).output,
      '{"n":2}',
    );
    assert.equal(outcomeOf('<html>').error?.type, 'http_error');
  });

  it('adds up the turns, their token details included', () => {
    const one = {
      prompt_tokens: 10,
      completion_tokens: 2,
      total_tokens: 12,
      prompt_tokens_details: { cached_tokens: 4 },
    };
    const two = {
      prompt_tokens: 20,
      completion_tokens: 3,
      total_tokens: 23,
      prompt_tokens_details: { cached_tokens: 6 },
      completion_tokens_details: { reasoning_tokens: 1 },
    };
    assert.deepEqual(addUsage(addUsage(undefined, one), two), {
      prompt_tokens: 30,
      completion_tokens: 5,
      total_tokens: 35,
      prompt_tokens_details: { cached_tokens: 10 },
      completion_tokens_details: { reasoning_tokens: 1 },
    });
    assert.equal(addUsage(undefined, undefined), undefined);
    assert.deepEqual(addUsage(one, undefined), one);
  });
});
