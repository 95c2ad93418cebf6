import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import Anthropic from '@anthropic-ai/sdk';
import { paidAccountKey, requestRecord, waitFor, type GatewayProcess } from '../support/gateway.js';
import type { FakeOpenAI } from '../support/fake-openai.js';
import {
  FAKE_THINKING_SIGNATURE,
  FAKE_THINKING_TEXT,
  FAKE_ANTHROPIC_USAGE,
  anthropicError,
  fakeTokenCount,
  type FakeAnthropic,
} from '../support/fake-anthropic.js';
import { FAKE_GEMINI_TEXT, type FakeGemini } from '../support/fake-gemini.js';
import { startVendorGateway, type VendorGateway } from '../support/vendor-gateway.js';
import { assertMessagesStream, parseMessagesFrames } from '../support/anthropic-stream.js';
import { waitForUsage } from '../support/record.js';
import { loadCatalog } from '../../shared/catalog.js';

/** What Claude Code sends on every turn: three system blocks (cached), its tools, adaptive thinking, betas. */
const claudeCodeTools = [
  'Bash',
  'Read',
  'Edit',
  'Write',
  'Glob',
  'Grep',
  'Task',
  'TodoWrite',
  'WebFetch',
  'NotebookEdit',
  'mcp__ide__getDiagnostics',
  'ExitPlanMode',
].map((name) => ({
  name,
  description: `The ${name} tool.`,
  input_schema: {
    type: 'object' as const,
    properties: { city: { type: 'string' } },
    additionalProperties: false,
    $schema: 'http://json-schema.org/draft-07/schema#',
  },
})) satisfies Anthropic.Tool[];
const claudeCodeSystem = [
  { type: 'text' as const, text: 'x-anthropic-billing-header: cc_version=2.1' },
  { type: 'text' as const, text: 'You are Claude Code.', cache_control: { type: 'ephemeral' as const } },
  { type: 'text' as const, text: 'Work in /tmp/project.', cache_control: { type: 'ephemeral' as const } },
];
const betas = 'claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27';

describe('the Messages API (/v1/messages) with the official Anthropic SDK against strict vendor fakes', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let redisUrl: string;
  let apiKey: string;
  let client: Anthropic;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let gemini: FakeGemini;
  let vendorGateway: VendorGateway;

  before(async () => {
    vendorGateway = await startVendorGateway({
      db: 15,
      env: {
        MOCK_VENDOR: 'on',
        MODEL_ALIASES: 'claude-sonnet-4-5=gpt-4o-mini,claude-haiku-4-5=mock-chat',
      },
      prepare: async (ready) => {
        ({ openai, anthropic, gemini, redis, redisUrl } = ready);
        apiKey = (await paidAccountKey(redis, 50_000_000)).key;
      },
    });
    gateway = vendorGateway.gateway;
    client = new Anthropic({ apiKey, baseURL: gateway.url, maxRetries: 0, timeout: 20_000 });
  });

  after(async () => {
    await vendorGateway?.close();
  });

  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: {
        'x-api-key': apiKey,
        'anthropic-version': '2023-06-01',
        'content-type': 'application/json',
        ...headers,
      },
      body: JSON.stringify(body),
    });

  it('answers a plain request on an OpenAI model in Anthropic’s shape, billed and logged under /v1/messages', async () => {
    const { data: message, response } = await client.messages
      .create({
        model: 'gpt-4o-mini',
        max_tokens: 64,
        system: 'Be brief.',
        messages: [{ role: 'user', content: 'Hello' }],
      })
      .withResponse();
    assert.match(message.id, /^msg_/);
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.equal(message.model, 'gpt-4o-mini');
    assert.equal(message.content[0]!.type, 'text');
    assert.ok((message.content[0] as Anthropic.TextBlock).text.length > 0);
    assert.equal(message.stop_reason, 'end_turn');
    assert.ok(message.usage.input_tokens > 0 && message.usage.output_tokens > 0);
    const requestId = response.headers.get('request-id')!;
    assert.match(requestId, /^req_/);
    const sent = openai.requests.at(-1)!.body as Record<string, any>;
    assert.deepEqual(sent.messages[0], { role: 'system', content: 'Be brief.' });
    assert.equal(sent.max_completion_tokens, 64);
    const record = await requestRecord(gateway.url, apiKey, requestId);
    assert.equal(record.endpoint, 'messages');
    assert.equal(record.status, 'completed');
    assert.ok(record.cost_micros! > 0, 'billed');
  });

  it(
    'streams tool calls from an OpenAI model as tool_use blocks, each event in Anthropic’s order, input usage in ' +
      'message_start',
    async () => {
      const stream = client.messages.stream({
        model: 'gpt-4o-mini',
        max_tokens: 256,
        tools: claudeCodeTools.slice(0, 3),
        messages: [{ role: 'user', content: 'Weather in Oslo?' }],
      });
      const events: Array<Record<string, any>> = [];
      // Copied as they come: the SDK builds its message on the object message_start carried.
      stream.on('streamEvent', (event) => events.push(structuredClone(event) as unknown as Record<string, any>));
      const final = await stream.finalMessage();
      assertMessagesStream(events.map((data) => ({ event: data.type, data })));
      assert.ok(
        events[0]!.message.usage.input_tokens > 50,
        'the prompt with its tools is counted before the vendor answers',
      );
      const tool = final.content.find((block) => block.type === 'tool_use') as Anthropic.ToolUseBlock;
      assert.equal(tool.name, 'Bash');
      assert.deepEqual(tool.input, { city: 'Oslo' });
      assert.equal(final.stop_reason, 'tool_use');
      // The round trip: the result goes back as a tool_result, and the vendor sees a tool message.
      const answer = await client.messages.create({
        model: 'gpt-4o-mini',
        max_tokens: 256,
        tools: claudeCodeTools.slice(0, 3),
        messages: [
          { role: 'user', content: 'Weather in Oslo?' },
          { role: 'assistant', content: final.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: tool.id, content: 'sunny, 21 C' }] },
        ],
      });
      assert.equal(answer.stop_reason, 'end_turn');
      const sent = openai.requests.at(-1)!.body as Record<string, any>;
      assert.equal(sent.messages.at(-1).role, 'tool');
      assert.equal(sent.messages.at(-1).tool_call_id, tool.id);
    },
  );

  it(
    'passes a Claude Code turn to Anthropic as written: system blocks with cache_control, thinking, betas, unknown ' +
      'fields; relays thinking and its signature',
    async () => {
      anthropic.reset();
      const body = {
        model: 'claude-sonnet-4-6',
        max_tokens: 32_000,
        system: claudeCodeSystem,
        tools: claudeCodeTools,
        metadata: { user_id: 'user_abc' },
        thinking: { type: 'adaptive', display: 'omitted' },
        context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
        output_config: { effort: 'high' },
        stream: true,
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'Weather in Oslo?', cache_control: { type: 'ephemeral' } }] },
        ],
      };
      const res = await post('/v1/messages?beta=true', body, { 'anthropic-beta': betas });
      assert.equal(res.status, 200);
      const frames = parseMessagesFrames(await res.text());
      const events = assertMessagesStream(frames);
      const sent = anthropic.requests.at(-1)!;
      assert.equal(sent.headers['anthropic-beta'], betas);
      const upstream = sent.body as Record<string, any>;
      assert.deepEqual(upstream.system, claudeCodeSystem);
      assert.deepEqual(upstream.thinking, body.thinking);
      assert.deepEqual(upstream.context_management, body.context_management);
      assert.deepEqual(upstream.messages, body.messages);
      assert.equal(upstream.tools.length, 12);
      assert.ok(upstream.max_tokens <= 64_000, 'max_tokens within the model’s output limit');
      // Anthropic's own usage, cached counts apart, in message_start.
      assert.equal(events[0]!.data.message.usage.input_tokens, FAKE_ANTHROPIC_USAGE.input_tokens);
      assert.equal(events[0]!.data.message.usage.cache_read_input_tokens, FAKE_ANTHROPIC_USAGE.cache_read_input_tokens);
      assert.equal(events[0]!.data.message.model, 'claude-sonnet-4-6');
      const thinking = events.filter(
        (frame) => frame.event === 'content_block_delta' && frame.data.delta.type === 'thinking_delta',
      );
      const signature = events.find(
        (frame) => frame.event === 'content_block_delta' && frame.data.delta.type === 'signature_delta',
      );
      assert.equal(thinking.map((frame) => frame.data.delta.thinking).join(''), FAKE_THINKING_TEXT);
      assert.equal(signature?.data.delta.signature, FAKE_THINKING_SIGNATURE);
      // The next turn replays the thinking block unchanged with the tool result: the fake checks the signature.
      const toolUse = events.find(
        (frame) => frame.event === 'content_block_start' && frame.data.content_block.type === 'tool_use',
      )!.data.content_block;
      const next = await client.messages.create({
        model: 'claude-sonnet-4-6',
        max_tokens: 32_000,
        tools: claudeCodeTools,
        thinking: { type: 'enabled', budget_tokens: 2048 },
        messages: [
          { role: 'user', content: 'Weather in Oslo?' },
          {
            role: 'assistant',
            content: [
              { type: 'thinking', thinking: FAKE_THINKING_TEXT, signature: FAKE_THINKING_SIGNATURE },
              { type: 'tool_use', id: toolUse.id, name: toolUse.name, input: { city: 'Oslo' } },
            ],
          },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: toolUse.id, content: 'sunny' }] },
        ],
      });
      assert.equal(next.content[0]!.type, 'thinking');
      assert.equal((next.content[0] as Anthropic.ThinkingBlock).signature, FAKE_THINKING_SIGNATURE);
      assert.equal((next.content.at(-1) as Anthropic.TextBlock).text, 'Tool said: sunny');
      const row = await waitForUsage(
        redisUrl,
        (usage) => usage.model === 'claude-sonnet-4-6' && usage.output_tokens > 0,
      );
      // Billed as Anthropic counted it: every input token, cached ones included, and the output.
      assert.equal(
        row.input_tokens,
        FAKE_ANTHROPIC_USAGE.input_tokens +
          FAKE_ANTHROPIC_USAGE.cache_creation_input_tokens +
          FAKE_ANTHROPIC_USAGE.cache_read_input_tokens,
      );
      assert.equal(row.cached_tokens, FAKE_ANTHROPIC_USAGE.cache_read_input_tokens);
      assert.equal(row.cache_write_tokens, FAKE_ANTHROPIC_USAGE.cache_creation_input_tokens);
      // What the prompt cache saved, to the micro-dollar, from claude-sonnet-4-6's published prices ($ per 1M tokens: 3
      // input, 0.30 a cache read, 3.75 a cache write) and the billing's rule, each component rounded up to a whole
      // micro-dollar (`costMicros`): the prompt at the input price, less the prompt as billed (the output, the same in
      // both, cancels out). 20 + 3 + 5 tokens: ⌈28 × 3⌉ = 84 less ⌈20 × 3⌉ + ⌈5 × 0.3⌉ + ⌈3 × 3.75⌉ = 60 + 2 + 12 = 74.
      const perMillion = { input: 3, cached: 0.3, write: 3.75 };
      assert.deepEqual(
        (loadCatalog()
          .all()
          .find((entry) => entry.id === 'claude-sonnet-4-6')?.pricing as Record<string, unknown>) ?? {},
        {
          input_per_1m: perMillion.input,
          output_per_1m: 15,
          cached_input_per_1m: perMillion.cached,
          cache_write_per_1m: perMillion.write,
        },
        'the prices this test reckons with',
      );
      const micros = (tokens: number, usd: number) => Math.ceil(tokens * usd - 1e-9);
      const {
        input_tokens: plain,
        cache_creation_input_tokens: written,
        cache_read_input_tokens: read,
      } = FAKE_ANTHROPIC_USAGE;
      const uncached = micros(plain + written + read, perMillion.input);
      const billed =
        micros(plain, perMillion.input) + micros(read, perMillion.cached) + micros(written, perMillion.write);
      assert.deepEqual([uncached, billed], [84, 74]);
      assert.equal(row.prompt_cache_saved_micros, uncached - billed);
      assert.equal(row.cost_micros, billed + micros(row.output_tokens, 15));
    },
  );

  it('leaves Anthropic-only fields and thinking blocks out for another vendor, and answers a Gemini model', async () => {
    const message = await client.messages.create({
      model: 'gemini-2.5-flash',
      max_tokens: 100_000,
      thinking: { type: 'enabled', budget_tokens: 4096 },
      messages: [
        { role: 'user', content: 'Hi' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'hmm', signature: 'sig' },
            { type: 'text', text: 'Hello.' },
          ],
        },
        { role: 'user', content: 'Say it again' },
      ],
    });
    assert.equal((message.content[0] as Anthropic.TextBlock).text, FAKE_GEMINI_TEXT);
    const sent = gemini.requests.at(-1)!.body as Record<string, any>;
    assert.equal(JSON.stringify(sent).includes('hmm'), false, 'the thinking block is not sent to another vendor');
    assert.ok(sent.generationConfig.maxOutputTokens <= 65_536, 'max_tokens clamped to the model’s output limit');
  });

  it('counts tokens: Anthropic’s own count for its models, the gateway’s for the others; nothing billed', async () => {
    const params = {
      model: 'claude-sonnet-4-6',
      system: claudeCodeSystem,
      tools: claudeCodeTools,
      messages: [{ role: 'user' as const, content: 'How long is this?' }],
    };
    const counted = await client.messages.countTokens(params);
    assert.equal(counted.input_tokens, fakeTokenCount(params as unknown as Record<string, unknown>));
    const sent = anthropic.requests.at(-1)!;
    assert.equal(sent.path.split('?')[0], '/v1/messages/count_tokens');
    assert.equal((sent.body as Record<string, unknown>).max_tokens, undefined);
    const local = await client.messages.countTokens({ ...params, model: 'gpt-4o-mini' });
    assert.ok(local.input_tokens > 100, `counted ${local.input_tokens}`);
    const small = await client.messages.countTokens({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'Hi' }],
    });
    assert.ok(small.input_tokens < local.input_tokens);
  });

  it('serves an alias under the name the client sent, and lists models in Anthropic’s shape for an Anthropic client', async () => {
    const message = await client.messages.create({
      model: 'claude-sonnet-4-5',
      max_tokens: 32,
      messages: [{ role: 'user', content: 'Hello' }],
    });
    assert.equal(message.model, 'claude-sonnet-4-5');
    assert.equal((openai.requests.at(-1)!.body as Record<string, unknown>).model, 'gpt-4o-mini');
    const page = await client.models.list({ limit: 2 });
    assert.equal(page.data.length, 2);
    assert.equal(page.data[0]!.type, 'model');
    assert.match(page.data[0]!.created_at, /^\d{4}-\d\d-\d\dT/);
    const all: string[] = [];
    for await (const model of client.models.list({ limit: 50 })) all.push(model.id);
    assert.ok(all.includes('claude-sonnet-4-6') && all.includes('gpt-4o-mini'));
    assert.equal(new Set(all).size, all.length, 'paging repeats no model');
    const one = await client.models.retrieve('gpt-4o-mini');
    assert.equal(one.id, 'gpt-4o-mini');
  });

  it(
    'answers errors as Anthropic does: its body and types, 401 for a bad key, 404 for an unknown model, 400 for a ' +
      'bad body',
    async () => {
      const bad = new Anthropic({ apiKey: 'sk-wrong', baseURL: gateway.url, maxRetries: 0 });
      await assert.rejects(
        bad.messages.create({ model: 'gpt-4o-mini', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }),
        (error: any) => {
          assert.ok(error instanceof Anthropic.AuthenticationError);
          const body = error.error as Record<string, any>;
          assert.equal(body.type, 'error');
          assert.equal(body.error.type, 'authentication_error');
          return true;
        },
      );
      await assert.rejects(
        client.messages.create({ model: 'no-such-model', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }),
        (error: any) => {
          assert.ok(error instanceof Anthropic.NotFoundError);
          assert.equal((error.error as Record<string, any>).error.type, 'not_found_error');
          assert.match(String(error.requestID), /^req_/);
          return true;
        },
      );
      const missing = await post('/v1/messages', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x' }] });
      assert.equal(missing.status, 400);
      const body = (await missing.json()) as Record<string, any>;
      assert.equal(body.type, 'error');
      assert.equal(body.error.type, 'invalid_request_error');
      assert.match(body.error.message, /max_tokens/);
      // Odd spellings of the path answer the same dialect.
      const odd = await fetch(`${gateway.url}//v1/./messages/`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      assert.equal(odd.status, 401);
      assert.equal(((await odd.json()) as Record<string, any>).error.type, 'authentication_error');
      // Bearer works as well as x-api-key (Anthropic's 2026 SDK sends it).
      const bearer = await fetch(`${gateway.url}/v1/messages`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${apiKey}`,
          'anthropic-version': '2026-10-21',
          'content-type': 'application/json',
        },
        body: JSON.stringify({ model: 'mock-chat', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }),
      });
      assert.equal(bearer.status, 200);
    },
  );

  it(
    'ends a stream that fails after its start with an error event, and maps a vendor refusal to Anthropic’s status ' +
      'and type',
    async () => {
      anthropic.enqueue({
        status: 400,
        json: anthropicError('invalid_request_error', 'prompt is too long: 300000 tokens > 200000 maximum'),
      });
      const refused = await post('/v1/messages', {
        model: 'claude-sonnet-4-6',
        max_tokens: 32,
        messages: [{ role: 'user', content: 'x' }],
      });
      assert.equal(refused.status, 400);
      const refusal = (await refused.json()) as Record<string, any>;
      assert.equal(refusal.type, 'error');
      assert.equal(refusal.error.type, 'invalid_request_error');
      assert.match(refusal.error.message, /prompt is too long/);
      anthropic.reset();
      anthropic.enqueue({
        events: [
          {
            type: 'message_start',
            message: {
              id: 'msg_cut',
              type: 'message',
              role: 'assistant',
              model: 'x',
              content: [],
              stop_reason: null,
              stop_sequence: null,
              usage: { input_tokens: 5, output_tokens: 1 },
            },
          },
          { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
          { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Half' } },
          { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } },
        ],
      });
      const res = await post('/v1/messages', {
        model: 'claude-sonnet-4-6',
        max_tokens: 32,
        stream: true,
        messages: [{ role: 'user', content: 'x' }],
      });
      assert.equal(res.status, 200);
      const events = assertMessagesStream(parseMessagesFrames(await res.text()), { endsWithError: true });
      assert.equal(events.at(-1)!.data.type, 'error');
    },
  );

  it('runs as an async job (Prefer: respond-async) whose result is the message', async () => {
    const res = await post(
      '/v1/messages',
      { model: 'gpt-4o-mini', max_tokens: 32, messages: [{ role: 'user', content: 'Later' }] },
      { prefer: 'respond-async' },
    );
    assert.equal(res.status, 202);
    const { id } = (await res.json()) as { id: string };
    let job: Record<string, any> = {};
    await waitFor(
      async () => {
        job = (await (
          await fetch(`${gateway.url}/v1/jobs/${id}`, { headers: { 'x-api-key': apiKey } })
        ).json()) as Record<string, any>;
        return job.status === 'completed';
      },
      10_000,
      'the async message',
    );
    assert.equal(job.result.type, 'message');
    assert.match(job.result.id, /^msg_/);
    assert.equal(job.result.content[0].type, 'text');
  });

  it('applies the key’s rate limit with Anthropic’s 429 and retry-after', async () => {
    const limited = (await paidAccountKey(redis, 5_000_000, { rpm: 1 })).key;
    const send = () =>
      fetch(`${gateway.url}/v1/messages`, {
        method: 'POST',
        headers: { 'x-api-key': limited, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mock-chat', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }),
      });
    assert.equal((await send()).status, 200);
    let refused: Response | undefined;
    await waitFor(
      async () => {
        const res = await send();
        if (res.status === 200) return false;
        refused = res;
        return true;
      },
      5_000,
      'a refusal',
    );
    assert.equal(refused!.status, 429);
    assert.ok(refused!.headers.get('retry-after'));
    assert.equal(((await refused!.json()) as Record<string, any>).error.type, 'rate_limit_error');
  });
});
