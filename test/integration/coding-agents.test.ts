import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Redis } from 'ioredis';
import { freshRedis, paidAccountKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { startFakeAnthropic, type FakeAnthropic } from '../support/fake-anthropic.js';
import { usageRows } from '../support/record.js';

const run = promisify(execFile);
// The agents are test tools (test/tools), installed by npm test, not with the gateway.
const bin = (name: string) => join(process.cwd(), 'test', 'tools', 'node_modules', '.bin', name);

/**
 * The coding agents themselves, unchanged, pointed at the gateway: Claude Code (`claude -p`) on the Messages
 * API, Codex (`codex exec`) on the Responses API, each on an OpenAI model and on an Anthropic model, against the
 * strict vendor fakes. Each fake answers a request that offers tools by calling the first one, and a tool's
 * result with text: so each run is a tool round trip, two requests at least, billed and logged.
 */
describe('Claude Code and Codex through the gateway', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let redisUrl: string;
  let apiKey: string;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let home: string;

  before(async () => {
    [openai, anthropic] = await Promise.all([startFakeOpenAI(), startFakeAnthropic()]);
    const fresh = await freshRedis(14);
    redis = fresh.redis;
    redisUrl = fresh.url;
    apiKey = (await paidAccountKey(redis, 50_000_000)).key;
    home = await mkdtemp(join(tmpdir(), 'sy-agents-'));
    gateway = await startGateway({
      env: { REDIS_URL: fresh.url, OPENAI_API_KEY: 'sk-openai-test', OPENAI_BASE_URL: openai.url, ANTHROPIC_API_KEY: 'sk-ant-test', ANTHROPIC_BASE_URL: anthropic.url },
    });
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), anthropic?.close()]);
    redis?.disconnect();
    if (home) await rm(home, { recursive: true, force: true });
  });

  /** Waits for at least `count` settled rows of this model and endpoint in the record. */
  async function billed(model: string, endpoint: string, count: number) {
    let rows: Awaited<ReturnType<typeof usageRows>> = [];
    await waitFor(async () => {
      rows = (await usageRows(redisUrl)).filter((row) => row.model === model && row.endpoint === endpoint && row.settled);
      return rows.length >= count;
    }, 10_000, `${count} settled ${endpoint} rows of ${model}`);
    return rows;
  }

  /** `claude -p … --output-format json` in a home of its own, with nothing but the gateway to talk to. */
  async function claude(model: string): Promise<Record<string, any>> {
    const dir = await mkdtemp(join(home, 'claude-'));
    const { stdout } = await run(bin('claude'), ['-p', 'What is the weather in Oslo? Use a tool.', '--output-format', 'json', '--model', model], {
      cwd: dir,
      timeout: 120_000,
      env: { PATH: process.env.PATH, HOME: dir, ANTHROPIC_BASE_URL: gateway.url, ANTHROPIC_API_KEY: apiKey, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1' },
    });
    return JSON.parse(stdout) as Record<string, any>;
  }

  /** `codex exec` with a model provider whose base URL is the gateway, speaking the Responses API. */
  async function codex(model: string): Promise<string> {
    const dir = await mkdtemp(join(home, 'codex-'));
    const config = [
      `model = "${model}"`,
      'model_provider = "switchyard"',
      '[model_providers.switchyard]',
      'name = "Switchyard"',
      `base_url = "${gateway.url}/v1"`,
      'env_key = "SWITCHYARD_API_KEY"',
      'wire_api = "responses"',
      '',
    ].join('\n');
    await writeFile(join(dir, 'config.toml'), config);
    const child = run(bin('codex'), ['exec', '--skip-git-repo-check', 'What is the weather in Oslo? Use a tool.'], {
      cwd: dir,
      timeout: 120_000,
      env: { PATH: process.env.PATH, HOME: dir, CODEX_HOME: dir, SWITCHYARD_API_KEY: apiKey },
    });
    child.child.stdin?.end();
    const { stdout, stderr } = await child;
    if (process.env.TEST_AGENT_LOGS) process.stderr.write(`${stdout}\n${stderr}\n`);
    return stdout;
  }

  it('runs Claude Code on an OpenAI model: a tool round trip through /v1/messages, billed and logged', async () => {
    openai.reset();
    const result = await claude('gpt-4o-mini');
    assert.equal(result.is_error, false, JSON.stringify(result));
    const chats = openai.requests.filter((request) => request.path.endsWith('/chat/completions'));
    assert.ok(chats.length >= 2, `requests: ${chats.length}`);
    const last = chats.at(-1)!.body as Record<string, any>;
    assert.ok(last.messages.some((message: Record<string, unknown>) => message.role === 'tool'), 'the tool result went back');
    assert.ok(last.tools.length > 5, 'Claude Code’s tools went to the vendor');
    const rows = await billed('gpt-4o-mini', 'messages', 2);
    assert.ok(rows.every((row) => row.cost_micros > 0), 'each request billed');
  });

  it('runs Claude Code on an Anthropic model: its requests passed through, thinking and betas included', async () => {
    anthropic.reset();
    const result = await claude('claude-sonnet-4-6');
    assert.equal(result.is_error, false, JSON.stringify(result));
    assert.match(result.result, /Tool said/);
    const sent = anthropic.requests.filter((request) => request.path.startsWith('/v1/messages'));
    assert.ok(sent.length >= 2);
    const first = sent.find((request) => (request.body as Record<string, any>)?.stream === true)!;
    assert.match(String(first.headers['anthropic-beta']), /claude-code-/);
    assert.ok((first.body as Record<string, any>).context_management !== undefined, 'fields the gateway does not know reach Anthropic');
    await billed('claude-sonnet-4-6', 'messages', 2);
  });

  it('runs Codex on an OpenAI model and on an Anthropic model through /v1/responses, namespace and web_search tools in its request', async () => {
    for (const [model, fake] of [['gpt-4o-mini', openai], ['claude-sonnet-4-6', anthropic]] as const) {
      fake.reset();
      const output = await codex(model);
      assert.match(output, /Tool said/, `${model}: the answer to the tool's result`);
      await billed(model, 'responses', 2);
      const bodies = fake.requests.map((request) => request.body as Record<string, any>).filter(Boolean);
      assert.ok(bodies.length >= 2, `${model}: a tool round trip`);
      const names = JSON.stringify(bodies[0]!.tools);
      assert.match(names, /multi_agent/, `${model}: the namespace's tools are offered under flat names`);
      // Codex's web_search: Anthropic's own search tool for a Claude model; declined for gpt-4o-mini, which has no search.
      if (model === 'claude-sonnet-4-6') assert.ok(bodies[0]!.tools.some((tool: Record<string, unknown>) => tool.type === 'web_search_20250305'), names);
      else assert.equal(bodies[0]!.web_search_options, undefined);
    }
  });
});
