import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { paidAccountKey, waitFor, type GatewayProcess } from '../support/gateway.js';
import type { FakeOpenAI, FakeResponse, RecordedRequest } from '../support/fake-openai.js';
import { startVendorGateway, type VendorGateway } from '../support/vendor-gateway.js';
import { startFakeMcp, type FakeMcp } from '../support/fake-mcp.js';
import { settledToolCalls } from '../support/record.js';
import { agentBin, agentDir, geminiCliHome, openaiToolCall, runCodex, runGeminiCli } from '../support/agents.js';

const run = promisify(execFile);
const bin = agentBin;
const adminToken = 'agents-mcp-admin';
const upstreamToken = 'notes-upstream-secret';

/**
 * The fake OpenAI's answer to a turn that offers the notes server's `search` (under whatever name the agent gives an
 * MCP tool: Claude Code's `mcp__<server>__<tool>`, Gemini CLI's own) and ends with the user's words: a call of it.
 * A tool's result last falls through to the fake's default answer, `Tool said: <result>`.
 */
function openaiSearchesTheNotes(request: RecordedRequest): FakeResponse | undefined {
  const body = request.body as Record<string, any> | undefined;
  const tool = body?.tools?.find((candidate: Record<string, any>) =>
    /notes__search$/.test(String(candidate.function?.name)),
  );
  if (!tool) return undefined;
  // (Claude Code's environment comes after the user's words, as a system message.)
  const last = body!.messages
    .filter((message: Record<string, unknown>) => message.role !== 'system' && message.role !== 'developer')
    .at(-1);
  if (last?.role !== 'user') return undefined;
  return openaiToolCall(
    body!,
    { id: 'call_search_01', name: tool.function.name, arguments: JSON.stringify({ word: 'pelican' }) },
    { prompt_tokens: 700, completion_tokens: 9 },
  );
}

/**
 * The agents, unchanged, given the gateway's `/mcp` as a remote MCP server (their own MCP config, the Switchyard key
 * as a header) and a model served through the gateway: the model (the fake OpenAI) calls the notes server's
 * `search`, the agent calls it through the gateway (a job on the server's queue, billed at its price), and the
 * tool's answer comes back in the model's.
 */
describe('Claude Code, Gemini CLI and Codex use an MCP server through the gateway', () => {
  let gateway: GatewayProcess;
  let vendorGateway: VendorGateway;
  let openai: FakeOpenAI;
  let notes: FakeMcp;
  let redisUrl: string;
  let apiKey: string;
  let keyId: string;
  let home: string;

  before(async () => {
    notes = await startFakeMcp({ token: upstreamToken });
    home = await mkdtemp(join(tmpdir(), 'sy-agents-mcp-'));
    const file = join(home, 'mcp.json');
    await writeFile(
      file,
      JSON.stringify({
        servers: {
          notes: { url: notes.url, headers: { Authorization: `Bearer ${upstreamToken}` }, price_per_call_usd: '0.01' },
        },
      }),
    );
    vendorGateway = await startVendorGateway({
      db: 13,
      env: { ADMIN_TOKEN: adminToken, MCP_SERVERS_FILE: file, MCP_CHECK_INTERVAL_MS: '1000' },
      prepare: async (ready) => {
        ({ openai, redisUrl } = ready);
        ({ key: apiKey, id: keyId } = await paidAccountKey(ready.redis, 50_000_000));
      },
    });
    gateway = vendorGateway.gateway;
    await waitFor(
      async () => {
        const listed = (await (
          await fetch(`${gateway.url}/admin/mcp/servers`, { headers: { authorization: `Bearer ${adminToken}` } })
        ).json()) as { data: Array<{ status: string }> };
        return listed.data[0]?.status === 'ok';
      },
      30_000,
      'the notes server checked',
    );
  });

  after(async () => {
    await vendorGateway?.close();
    await notes?.close();
    if (home) await rm(home, { recursive: true, force: true });
  });

  /** The tool calls the record has of the key: settled, billed at the server's price. */
  const toolCalls = (count: number) => settledToolCalls(redisUrl, keyId, count);

  it(
    'runs Claude Code with the gateway as its MCP server: the model asks for the tool, Claude Code calls it ' +
      'through /mcp',
    async () => {
      openai.reset();
      openai.setDefault(openaiSearchesTheNotes);
      const dir = await mkdtemp(join(home, 'claude-'));
      const mcpConfig = {
        mcpServers: {
          switchyard: { type: 'http', url: `${gateway.url}/mcp`, headers: { Authorization: `Bearer ${apiKey}` } },
        },
      };
      const { stdout } = await run(
        bin('claude'),
        [
          '-p',
          'How many of my notes mention pelican? Use the notes search tool.',
          '--output-format',
          'json',
          '--model',
          'gpt-4o-mini',
          '--mcp-config',
          JSON.stringify(mcpConfig),
          '--strict-mcp-config',
          '--allowedTools',
          'mcp__switchyard__notes__search',
        ],
        {
          cwd: dir,
          timeout: 120_000,
          // ENABLE_TOOL_SEARCH=false: Claude Code offers the MCP tools themselves, not behind its tool search (which the
          // fake model would not use).
          env: {
            PATH: process.env.PATH,
            HOME: dir,
            ANTHROPIC_BASE_URL: gateway.url,
            ANTHROPIC_API_KEY: apiKey,
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
            DISABLE_AUTOUPDATER: '1',
            ENABLE_TOOL_SEARCH: 'false',
          },
        },
      );
      const result = JSON.parse(stdout) as Record<string, any>;
      assert.equal(result.is_error, false, stdout);
      assert.match(String(result.result), /Tool said: .*notes with pelican: 2/, stdout);
      // The call went through the gateway: the upstream got the file's header (never the key), and it was billed once.
      assert.ok(
        notes.seen.some((request) => request.method === 'POST') &&
          notes.seen.every((request) => request.authorization === `Bearer ${upstreamToken}`),
      );
      const [row] = await toolCalls(1);
      assert.deepEqual([row!.model, row!.status, Number(row!.cost_micros)], ['notes/search', 'completed', 10_000]);
    },
  );

  it('runs Gemini CLI with the gateway as its MCP server, on a model served through the gateway', async () => {
    openai.reset();
    openai.setDefault(openaiSearchesTheNotes);
    // The gateway as a remote MCP server, the key as a header; trusted, so its tools run without asking.
    const { home: userHome, workspace } = await geminiCliHome(await agentDir(home, 'gemini'), {
      mcpServers: {
        switchyard: { httpUrl: `${gateway.url}/mcp`, headers: { Authorization: `Bearer ${apiKey}` }, trust: true },
      },
    });
    const result = await runGeminiCli(
      ['-p', 'How many of my notes mention pelican? Use the notes search tool.', '-m', 'gpt-4o-mini'],
      { home: userHome, workspace },
      {
        GOOGLE_GEMINI_BASE_URL: gateway.url,
        GEMINI_API_KEY: apiKey,
      },
    );
    const stdout = JSON.stringify(result);
    // (Gemini CLI gives a remote tool's answer to the model marked as untrusted.)
    assert.match(String(result.response), /Tool said: [\s\S]*notes with pelican: 2/, stdout);
    assert.equal(result.stats.tools.totalCalls, 1, JSON.stringify(result.stats.tools));
    const rows = await toolCalls(2);
    assert.ok(rows.every((row) => row.model === 'notes/search' && row.status === 'completed'));
  });

  it('runs Codex with the gateway as its MCP server, on a model served through the gateway', async () => {
    openai.reset();
    openai.setDefault(openaiSearchesTheNotes);
    const dir = await mkdtemp(join(home, 'codex-'));
    // Codex's own config: the gateway as its model provider (the Responses API) and as a remote MCP server, the key
    // from the environment as the bearer token.
    const config = [
      'model = "gpt-4o-mini"',
      'model_provider = "switchyard"',
      'approval_policy = "never"',
      '[model_providers.switchyard]',
      'name = "Switchyard"',
      `base_url = "${gateway.url}/v1"`,
      'env_key = "SWITCHYARD_API_KEY"',
      'wire_api = "responses"',
      '[mcp_servers.switchyard]',
      `url = "${gateway.url}/mcp"`,
      'bearer_token_env_var = "SWITCHYARD_API_KEY"',
      '',
    ].join('\n');
    const { stdout, stderr } = await runCodex(
      dir,
      config,
      'How many of my notes mention pelican? Use the notes search tool.',
      { SWITCHYARD_API_KEY: apiKey },
    );
    assert.match(stdout, /Tool said: [\s\S]*notes with pelican: 2/, `${stdout}\n${stderr}`);
    const rows = await toolCalls(3);
    assert.ok(rows.every((row) => row.model === 'notes/search' && row.status === 'completed'));
  });
});
