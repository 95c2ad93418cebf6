import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Redis } from 'ioredis';
import { paidAccountKey, waitFor, type GatewayProcess } from '../support/gateway.js';
import type { FakeOpenAI, FakeResponse, RecordedRequest } from '../support/fake-openai.js';
import type { FakeAnthropic } from '../support/fake-anthropic.js';
import type { FakeGemini } from '../support/fake-gemini.js';
import { startVendorGateway, type VendorGateway } from '../support/vendor-gateway.js';
import { usageRows } from '../support/record.js';
import { agentBin, agentDir, geminiCliHome, openaiToolCall, runCodex, runGeminiCli } from '../support/agents.js';

const run = promisify(execFile);
const bin = agentBin;

/** The file Gemini CLI is asked about, and what it says: the answer shows the CLI read it. */
const NOTE = { file: 'note.txt', text: 'The secret word is pelican.' };
const READ_NOTE = { file_path: NOTE.file };

/**
 * The fake OpenAI's answer to a request offering `read_file` whose last turn is the user's: a call of it on the
 * note (the default call's `{"city":"Oslo"}` is no argument read_file takes). A tool result last falls through to
 * the default answer, `Tool said: <result>`.
 */
function openaiReadsTheNote(request: RecordedRequest): FakeResponse | undefined {
  const body = request.body as Record<string, any> | undefined;
  if (
    !body?.tools?.some((tool: Record<string, any>) => tool.function?.name === 'read_file') ||
    body.messages.at(-1)?.role !== 'user'
  )
    return undefined;
  return openaiToolCall(
    body,
    { id: 'call_read_01', name: 'read_file', arguments: JSON.stringify(READ_NOTE) },
    { prompt_tokens: 900, completion_tokens: 9 },
  );
}

/** The fake Anthropic's streamed call of `read_file` on the note (queued: the CLI's first turn streams). */
const anthropicReadsTheNote = (model: string) => ({
  events: [
    {
      type: 'message_start',
      message: {
        id: 'msg_read_01',
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 900, output_tokens: 1 },
      },
    },
    {
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'tool_use', id: 'toolu_read_01', name: 'read_file', input: {} },
    },
    {
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'input_json_delta', partial_json: JSON.stringify(READ_NOTE) },
    },
    { type: 'content_block_stop', index: 0 },
    { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 12 } },
    { type: 'message_stop' },
  ],
});

/**
 * The coding agents themselves, unchanged, pointed at the gateway: Claude Code (`claude -p`) on the Messages
 * API, Codex (`codex exec`) on the Responses API, each on an OpenAI model and on an Anthropic model, and Gemini
 * CLI (`gemini -p`) on Google's Gemini API on an OpenAI, an Anthropic and a Gemini model, against the strict vendor
 * fakes. Each fake answers a request that offers tools by calling the first one, and a tool's result with text: so
 * each run is a tool round trip, two requests at least, billed and logged. Gemini CLI is offered only its
 * `read_file` tool (which runs without asking), and the fakes call it on a file of its workspace: the file's
 * words reach the vendor in the tool's result and come back in the answer.
 */
describe('Claude Code, Codex and Gemini CLI through the gateway', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let redisUrl: string;
  let apiKey: string;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let gemini: FakeGemini;
  let vendorGateway: VendorGateway;
  let home: string;
  let keyId: string;

  before(async () => {
    vendorGateway = await startVendorGateway({
      db: 14,
      gemini: { apiKey: 'gemini-test-key', toolArguments: { read_file: READ_NOTE } },
      prepare: async (ready) => {
        ({ openai, anthropic, gemini, redis, redisUrl } = ready);
        ({ key: apiKey, id: keyId } = await paidAccountKey(redis, 50_000_000));
        home = await mkdtemp(join(tmpdir(), 'sy-agents-'));
      },
    });
    gateway = vendorGateway.gateway;
  });

  after(async () => {
    await vendorGateway?.close();
    if (home) await rm(home, { recursive: true, force: true });
  });

  /** Waits for at least `count` settled rows of this model and endpoint in the record. */
  async function billed(model: string, endpoint: string, count: number) {
    let rows: Awaited<ReturnType<typeof usageRows>> = [];
    await waitFor(
      async () => {
        rows = (await usageRows(redisUrl)).filter(
          // Both halves of each row: the worker's settlement and the api's log event, which may come second.
          (row) =>
            row.model === model &&
            row.endpoint === endpoint &&
            row.settled &&
            row.http_status !== null &&
            row.key_id === keyId,
        );
        return rows.length >= count;
      },
      10_000,
      `${count} settled ${endpoint} rows of ${model}`,
    );
    return rows;
  }

  /** `claude -p … --output-format json` in a home of its own, with nothing but the gateway to talk to. */
  async function claude(model: string): Promise<Record<string, any>> {
    const dir = await mkdtemp(join(home, 'claude-'));
    const { stdout } = await run(
      bin('claude'),
      ['-p', 'What is the weather in Oslo? Use a tool.', '--output-format', 'json', '--model', model],
      {
        cwd: dir,
        timeout: 120_000,
        env: {
          PATH: process.env.PATH,
          HOME: dir,
          ANTHROPIC_BASE_URL: gateway.url,
          ANTHROPIC_API_KEY: apiKey,
          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
          DISABLE_AUTOUPDATER: '1',
        },
      },
    );
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
    return (await runCodex(dir, config, 'What is the weather in Oslo? Use a tool.', { SWITCHYARD_API_KEY: apiKey }))
      .stdout;
  }

  /**
   * `gemini -p … -m <model> -o json` with a home of its own (api-key auth selected, as 0.61 needs for `-p`; no
   * telemetry, update check or IDE; only `read_file` offered; one attempt, so a refusal ends the run at once) and a
   * workspace holding the note. Stdin closed, a deadline on the process.
   */
  async function geminiCli(model: string): Promise<Record<string, any>> {
    const { home: userHome, workspace } = await geminiCliHome(await agentDir(home, 'gemini'), {
      tools: { core: ['read_file'] },
    });
    await writeFile(join(workspace, NOTE.file), `${NOTE.text}\n`);
    return runGeminiCli(
      ['-p', `What does ${NOTE.file} say? Use a tool.`, '-m', model],
      { home: userHome, workspace },
      { GOOGLE_GEMINI_BASE_URL: gateway.url, GEMINI_API_KEY: apiKey },
    );
  }

  /**
   * What every Gemini CLI run shows: the note read by its tool, the answer to the note, two requests billed and logged.
   */
  async function assertReadTheNote(result: Record<string, any>, model: string) {
    assert.match(result.response, new RegExp(`Tool said: .*${NOTE.text}`), JSON.stringify(result));
    assert.equal(result.stats.tools.totalCalls, 1, JSON.stringify(result.stats.tools));
    assert.equal(result.stats.tools.byName.read_file?.success, 1, 'read_file ran, without asking');
    const rows = await billed(model, 'gemini.generate', 2);
    assert.ok(
      rows.every((row) => row.cost_micros > 0 && row.stream === true && row.http_status === 200),
      'each streamed turn billed and logged',
    );
  }

  it('runs Claude Code on an OpenAI model: a tool round trip through /v1/messages, billed and logged', async () => {
    openai.reset();
    const result = await claude('gpt-4o-mini');
    assert.equal(result.is_error, false, JSON.stringify(result));
    const chats = openai.requests.filter((request) => request.path.endsWith('/chat/completions'));
    assert.ok(chats.length >= 2, `requests: ${chats.length}`);
    const last = chats.at(-1)!.body as Record<string, any>;
    assert.ok(
      last.messages.some((message: Record<string, unknown>) => message.role === 'tool'),
      'the tool result went back',
    );
    assert.ok(last.tools.length > 5, 'Claude Code’s tools went to the vendor');
    const rows = await billed('gpt-4o-mini', 'messages', 2);
    assert.ok(
      rows.every((row) => row.cost_micros > 0),
      'each request billed',
    );
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
    assert.ok(
      (first.body as Record<string, any>).context_management !== undefined,
      'fields the gateway does not know reach Anthropic',
    );
    await billed('claude-sonnet-4-6', 'messages', 2);
  });

  it(
    'runs Codex on an OpenAI model and on an Anthropic model through /v1/responses, namespace and web_search tools ' +
      'in its request',
    async () => {
      for (const [model, fake] of [
        ['gpt-4o-mini', openai],
        ['claude-sonnet-4-6', anthropic],
      ] as const) {
        fake.reset();
        const output = await codex(model);
        assert.match(output, /Tool said/, `${model}: the answer to the tool's result`);
        await billed(model, 'responses', 2);
        const bodies = fake.requests.map((request) => request.body as Record<string, any>).filter(Boolean);
        assert.ok(bodies.length >= 2, `${model}: a tool round trip`);
        const names = JSON.stringify(bodies[0]!.tools);
        assert.match(names, /multi_agent/, `${model}: the namespace's tools are offered under flat names`);
        // Codex's web_search: Anthropic's own search tool for a Claude model; declined for gpt-4o-mini, which has no
        // search.
        if (model === 'claude-sonnet-4-6')
          assert.ok(
            bodies[0]!.tools.some((tool: Record<string, unknown>) => tool.type === 'web_search_20250305'),
            names,
          );
        else assert.equal(bodies[0]!.web_search_options, undefined);
      }
    },
  );

  it(
    'runs Gemini CLI on an OpenAI model: a tool round trip through streamGenerateContent, its file read, billed ' +
      'and logged',
    async () => {
      openai.reset();
      openai.setDefault(openaiReadsTheNote);
      const result = await geminiCli('gpt-4o-mini');
      const chats = openai.requests
        .filter((request) => request.path.endsWith('/chat/completions'))
        .map((request) => request.body as Record<string, any>);
      assert.ok(chats.length >= 2, `requests: ${chats.length}`);
      assert.deepEqual(
        chats[0]!.tools.map((tool: Record<string, any>) => tool.function.name),
        ['read_file'],
      );
      const [call, toolMessage] = chats.at(-1)!.messages.slice(-2);
      assert.equal(call.tool_calls[0].id, 'call_read_01');
      assert.equal(
        toolMessage.tool_call_id,
        'call_read_01',
        'the CLI answered the call under the id the vendor gave it',
      );
      assert.match(JSON.stringify(toolMessage.content), /pelican/);
      await assertReadTheNote(result, 'gpt-4o-mini');
    },
  );

  it('runs Gemini CLI on an Anthropic model: the tool_use and its result under one id, billed and logged', async () => {
    anthropic.reset();
    anthropic.enqueue(anthropicReadsTheNote('claude-sonnet-4-6'));
    const result = await geminiCli('claude-sonnet-4-6');
    const sent = anthropic.requests
      .filter((request) => request.path.startsWith('/v1/messages'))
      .map((request) => request.body as Record<string, any>);
    assert.ok(sent.length >= 2, `requests: ${sent.length}`);
    assert.equal(sent[0]!.stream, true);
    const [assistant, user] = sent.at(-1)!.messages.slice(-2);
    assert.equal(
      assistant.content.find((block: Record<string, unknown>) => block.type === 'tool_use').id,
      'toolu_read_01',
    );
    const toolResult = user.content.find((block: Record<string, unknown>) => block.type === 'tool_result');
    assert.equal(toolResult.tool_use_id, 'toolu_read_01');
    assert.match(JSON.stringify(toolResult.content), /pelican/);
    await assertReadTheNote(result, 'claude-sonnet-4-6');
  });

  it(
    'runs Gemini CLI on a Gemini 3 model: its requests passed through, the thought signature and the CLI’s own ' +
      'call id kept',
    async () => {
      gemini.reset();
      // The CLI sends gemini-3-pro-preview as gemini-3.1-pro-preview; it is named as sent.
      const model = 'gemini-3.1-pro-preview';
      const result = await geminiCli(model);
      const sent = gemini.requests.filter(
        (request) => request.path === `/v1beta/models/${model}:streamGenerateContent?alt=sse`,
      );
      assert.equal(sent.length, 2, gemini.requests.map((request) => request.path).join(', '));
      assert.equal(sent[0]!.headers['x-goog-api-key'], 'gemini-test-key', 'the gateway’s key, never the client’s');
      const body = sent[1]!.body as {
        contents: Array<{ role: string; parts: Array<Record<string, any>> }>;
        generationConfig: Record<string, unknown>;
      };
      assert.deepEqual(Object.keys(body).sort(), ['contents', 'generationConfig', 'systemInstruction', 'tools']);
      assert.deepEqual(
        body.generationConfig.thinkingConfig,
        { includeThoughts: true, thinkingLevel: 'HIGH' },
        'the CLI’s thinking config as it wrote it',
      );
      const callPart = body.contents.at(-2)!.parts.find((part) => part.functionCall)!;
      const responsePart = body.contents.at(-1)!.parts.find((part) => part.functionResponse)!;
      assert.ok(
        gemini.issuedSignatures.has(callPart.thoughtSignature),
        'the signature Gemini issued came back with the call',
      );
      // Gemini gives its calls no id: the CLI names one, and it reaches Gemini on both the call and the response.
      assert.match(callPart.functionCall.id, /^read_file_\d+_0$/);
      assert.equal(responsePart.functionResponse.id, callPart.functionCall.id);
      assert.match(JSON.stringify(responsePart.functionResponse.response), /pelican/);
      await assertReadTheNote(result, model);
    },
  );
});
