import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { FAKE_ANTHROPIC_USAGE, startFakeAnthropic, type FakeAnthropic } from '../support/fake-anthropic.js';
import { startFakeGemini, type FakeGemini } from '../support/fake-gemini.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { freshRedis, paidAccountKey, startGateway, type GatewayProcess } from '../support/gateway.js';
import { waitForUsage } from '../support/record.js';

type Json = Record<string, any>;

/**
 * The vendors' published list prices, USD per 1M tokens (uncached input, cache reads, cache writes, output), as their
 * pricing pages give them: what the record must charge, to the micro-dollar.
 */
const published = {
  'gpt-4o-mini': { input: 0.15, cached: 0.075, write: 0.15, output: 0.6 },
  'claude-haiku-4-5': { input: 1, cached: 0.1, write: 1.25, output: 5 },
  'gemini-2.5-flash': { input: 0.3, cached: 0.03, write: 0.3, output: 2.5 },
} as const;
type Model = keyof typeof published;

/**
 * What each vendor's fake says it read and wrote: prompt tokens in all, of them read from the cache and written to it,
 * and output.
 */
const told: Record<Model, { prompt: number; cached: number; write: number; output: number }> = {
  'gpt-4o-mini': { prompt: 2_345, cached: 1_920, write: 0, output: 7 },
  // The fake Anthropic's own counts: input (uncached) 20, cache writes 3, cache reads 5; its output is the reply's
  // length.
  'claude-haiku-4-5': {
    prompt:
      FAKE_ANTHROPIC_USAGE.input_tokens +
      FAKE_ANTHROPIC_USAGE.cache_creation_input_tokens +
      FAKE_ANTHROPIC_USAGE.cache_read_input_tokens,
    cached: FAKE_ANTHROPIC_USAGE.cache_read_input_tokens,
    write: FAKE_ANTHROPIC_USAGE.cache_creation_input_tokens,
    output: -1,
  },
  'gemini-2.5-flash': { prompt: 41_003, cached: 32_768, write: 0, output: 11 },
};

/**
 * ceil(tokens × USD per 1M) in micro-dollars, each part apart, as the record charges (exact: prices scaled to
 * integers).
 */
function micros(tokens: number, usdPer1m: number): number {
  const scaled = BigInt(Math.round(usdPer1m * 1_000_000));
  return Number((BigInt(tokens) * scaled + 999_999n) / 1_000_000n);
}
function listPrice(model: Model, used: { prompt: number; cached: number; write: number; output: number }): number {
  const price = published[model];
  return (
    micros(used.prompt - used.cached - used.write, price.input) +
    micros(used.cached, price.cached) +
    micros(used.write, price.write) +
    micros(used.output, price.output)
  );
}

const dialects = ['chat', 'responses', 'messages', 'gemini'] as const;
type Dialect = (typeof dialects)[number];

/**
 * Cached and cache-write tokens as each vendor reports them (`prompt_tokens_details.cached_tokens`,
 * `cache_read_input_tokens` and `cache_creation_input_tokens`, `cachedContentTokenCount`) come back in each dialect's
 * own fields whatever the vendor, and the record charges them at the vendor's cached prices to the micro-dollar.
 */
describe('prompt-cache tokens: read from every vendor, told in every dialect, billed at the cached prices', () => {
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let gemini: FakeGemini;
  let gateway: GatewayProcess;
  let redis: Redis;
  let redisUrl: string;
  let key: string;

  before(async () => {
    [openai, anthropic, gemini] = await Promise.all([startFakeOpenAI(), startFakeAnthropic(), startFakeGemini()]);
    const used = told['gpt-4o-mini'];
    openai.setDefault((request) => {
      const body = request.body as Json;
      if (!request.path.endsWith('/chat/completions')) return undefined;
      const usage = {
        prompt_tokens: used.prompt,
        completion_tokens: used.output,
        total_tokens: used.prompt + used.output,
        prompt_tokens_details: { cached_tokens: used.cached, audio_tokens: 0 },
      };
      const base = { id: 'chatcmpl-cached1', created: Math.floor(Date.now() / 1000), model: body.model };
      if (!body.stream)
        return {
          json: {
            ...base,
            object: 'chat.completion',
            choices: [
              {
                index: 0,
                message: { role: 'assistant', content: 'Read from cache.', refusal: null },
                logprobs: null,
                finish_reason: 'stop',
              },
            ],
            usage,
          },
        };
      const chunk = (rest: Json) =>
        `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', ...rest })}\n\n`;
      return {
        sse: [
          chunk({
            choices: [
              {
                index: 0,
                delta: { role: 'assistant', content: 'Read from cache.' },
                logprobs: null,
                finish_reason: null,
              },
            ],
          }),
          chunk({ choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }] }),
          chunk({ choices: [], usage }),
          'data: [DONE]\n\n',
        ].join(''),
      };
    });
    const g = told['gemini-2.5-flash'];
    gemini.setDefault((request) => {
      const usageMetadata = {
        promptTokenCount: g.prompt,
        cachedContentTokenCount: g.cached,
        candidatesTokenCount: g.output,
        totalTokenCount: g.prompt + g.output,
      };
      const candidate = {
        content: { role: 'model', parts: [{ text: 'Read from cache.' }] },
        finishReason: 'STOP',
        index: 0,
      };
      const envelope = { modelVersion: 'gemini-2.5-flash', responseId: 'fake-cached' };
      if (request.path.includes(':streamGenerateContent'))
        return { chunks: [{ candidates: [candidate], usageMetadata, ...envelope }] };
      if (request.path.includes(':generateContent'))
        return { json: { candidates: [candidate], usageMetadata, ...envelope } };
      return undefined;
    });
    const fresh = await freshRedis(6);
    redis = fresh.redis;
    redisUrl = fresh.url;
    key = (await paidAccountKey(redis, 50_000_000)).key;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: 'sk-openai-test',
        OPENAI_BASE_URL: openai.url,
        ANTHROPIC_API_KEY: 'sk-ant-test',
        ANTHROPIC_BASE_URL: anthropic.url,
        GEMINI_API_KEY: 'gemini-test-key',
        GEMINI_BASE_URL: gemini.url,
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), anthropic?.close(), gemini?.close()]);
    redis?.disconnect();
  });

  /**
   * One call in a dialect, plain or streamed; returns the answer's usage as the dialect writes it and the request's id.
   */
  async function call(dialect: Dialect, model: Model, stream: boolean): Promise<{ usage: Json; requestId: string }> {
    const text = 'What does the cached prefix say?';
    const request: Record<Dialect, { path: string; headers: Record<string, string>; body: Json }> = {
      chat: {
        path: '/v1/chat/completions',
        headers: { authorization: `Bearer ${key}` },
        body: {
          model,
          messages: [{ role: 'user', content: text }],
          stream,
          ...(stream ? { stream_options: { include_usage: true } } : {}),
        },
      },
      responses: {
        path: '/v1/responses',
        headers: { authorization: `Bearer ${key}` },
        body: { model, input: text, stream },
      },
      messages: {
        path: '/v1/messages',
        headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01' },
        body: { model, max_tokens: 64, messages: [{ role: 'user', content: text }], stream },
      },
      gemini: {
        path: `/v1beta/models/${model}:${stream ? 'streamGenerateContent?alt=sse' : 'generateContent'}`,
        headers: { 'x-goog-api-key': key },
        body: { contents: [{ role: 'user', parts: [{ text }] }] },
      },
    };
    const { path, headers, body: sent } = request[dialect];
    const response = await fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify(sent),
    });
    const body = await response.text();
    assert.equal(response.status, 200, `${dialect} ${model}: ${body.slice(0, 400)}`);
    const requestId = response.headers.get('x-request-id')!;
    if (!stream) {
      const json = JSON.parse(body) as Json;
      return { usage: dialect === 'gemini' ? json.usageMetadata : json.usage, requestId };
    }
    const events = body
      .split('\n')
      .filter((line) => line.startsWith('data: ') && line !== 'data: [DONE]')
      .map((line) => JSON.parse(line.slice(6)) as Json);
    const last = (has: (event: Json) => unknown) => [...events].reverse().find(has);
    const usage =
      dialect === 'chat'
        ? last((event) => event.usage)?.usage
        : dialect === 'responses'
          ? events.find((event) => event.type === 'response.completed')?.response.usage
          : dialect === 'messages'
            ? {
                ...events.find((event) => event.type === 'message_start')?.message.usage,
                ...last((event) => event.type === 'message_delta')?.usage,
              }
            : last((event) => event.usageMetadata)?.usageMetadata;
    assert.ok(usage, `${dialect} ${model} streamed a usage`);
    return { usage, requestId };
  }

  /**
   * What the vendor said, as the dialect tells it: prompt tokens in all (or uncached, where the dialect counts so),
   * cached, written, output.
   */
  function read(
    dialect: Dialect,
    usage: Json,
  ): { prompt: number; cached: number; write: number | undefined; output: number } {
    switch (dialect) {
      case 'chat':
        return {
          prompt: usage.prompt_tokens,
          cached: usage.prompt_tokens_details?.cached_tokens ?? 0,
          write: undefined,
          output: usage.completion_tokens,
        };
      case 'responses':
        return {
          prompt: usage.input_tokens,
          cached: usage.input_tokens_details.cached_tokens,
          write: usage.input_tokens_details.cache_write_tokens,
          output: usage.output_tokens,
        };
      case 'messages':
        // Anthropic's `input_tokens` are the uncached ones: the prompt is their sum with the cache's two counts.
        return {
          prompt: usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens,
          cached: usage.cache_read_input_tokens,
          write: usage.cache_creation_input_tokens,
          output: usage.output_tokens,
        };
      case 'gemini':
        return {
          prompt: usage.promptTokenCount,
          cached: usage.cachedContentTokenCount ?? 0,
          write: undefined,
          output: usage.candidatesTokenCount,
        };
    }
  }

  for (const stream of [false, true]) {
    it(`${stream ? 'streamed' : 'plain'}: each vendor's cached tokens in each dialect's fields, and the record at the cached prices`, async () => {
      for (const model of Object.keys(published) as Model[]) {
        for (const dialect of dialects) {
          const { usage, requestId } = await call(dialect, model, stream);
          const said = read(dialect, usage);
          const vendor = told[model];
          const where = `${model} in ${dialect}${stream ? ' (streamed)' : ''}: ${JSON.stringify(usage)}`;
          assert.equal(said.prompt, vendor.prompt, where);
          assert.equal(said.cached, vendor.cached, where);
          if (said.write !== undefined) assert.equal(said.write, vendor.write, where);
          if (vendor.output >= 0) assert.equal(said.output, vendor.output, where);
          const row = await waitForUsage(redisUrl, (candidate) => candidate.request_id === requestId);
          assert.equal(Number(row.input_tokens), vendor.prompt, where);
          assert.equal(Number(row.cached_tokens), vendor.cached, where);
          const output = Number(row.output_tokens);
          assert.equal(
            Number(row.cost_micros),
            listPrice(model, { ...vendor, output }),
            `${where}: cost ${row.cost_micros} for ${output} output tokens`,
          );
        }
      }
    });
  }
});
