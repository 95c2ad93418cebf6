import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { startVendorFakes } from '../support/vendor-fakes.js';
import { createKey, freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';

/**
 * The same conversation, through the official client, against one model of
 * each vendor behind its own strict fake: every answer must have the same
 * OpenAI shape, whatever the vendor's wire format.
 */
type Closer = { close(): Promise<void> };
const vendors: Array<{ vendor: string; model: string; images: boolean }> = [
  { vendor: 'openai', model: 'gpt-4o-mini', images: true },
  { vendor: 'anthropic', model: 'claude-sonnet-4-5', images: true },
  { vendor: 'google', model: 'gemini-2.5-flash', images: true },
  { vendor: 'deepseek', model: 'deepseek-chat', images: false },
  { vendor: 'xai', model: 'grok-4', images: true },
];

const weatherTool: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const image =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

function assertCompletionShape(completion: OpenAI.Chat.Completions.ChatCompletion, model: string) {
  assert.match(completion.id, /^chatcmpl-/);
  assert.equal(completion.object, 'chat.completion');
  assert.equal(typeof completion.created, 'number');
  assert.equal(completion.model.length > 0, true);
  assert.equal(completion.choices.length, 1);
  const choice = completion.choices[0]!;
  assert.equal(choice.index, 0);
  assert.equal(choice.message.role, 'assistant');
  assert.ok('content' in choice.message && 'refusal' in choice.message, `${model}: content and refusal present`);
  assert.ok(['stop', 'tool_calls'].includes(choice.finish_reason));
  assert.ok(
    completion.usage &&
      completion.usage.total_tokens === completion.usage.prompt_tokens + completion.usage.completion_tokens,
  );
}

async function collect(stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>) {
  const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  let text = '';
  let finish: string | null = null;
  const calls = new Map<number, { id: string; name: string; args: string }>();
  for (const chunk of chunks) {
    for (const choice of chunk.choices) {
      text += choice.delta.content ?? '';
      finish = choice.finish_reason ?? finish;
      for (const fragment of choice.delta.tool_calls ?? []) {
        const call = calls.get(fragment.index) ?? { id: '', name: '', args: '' };
        call.id ||= fragment.id ?? '';
        call.name += fragment.function?.name ?? '';
        call.args += fragment.function?.arguments ?? '';
        calls.set(fragment.index, call);
      }
    }
  }
  return { chunks, text, finish, calls: [...calls.values()] };
}

describe('every vendor behind one API', () => {
  const closers: Closer[] = [];
  let gateway: GatewayProcess;
  let redis: Redis;
  let client: OpenAI;

  before(async () => {
    const fakes = await startVendorFakes();
    closers.push(fakes);
    const fresh = await freshRedis(10);
    redis = fresh.redis;
    const apiKey = (await createKey(redis)).key;
    gateway = await startGateway({ env: { REDIS_URL: fresh.url, ...fakes.env } });
    client = gateway.client(apiKey);
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all(closers.map((c) => c.close()));
    redis?.disconnect();
  });

  it('lists the models of every configured vendor', async () => {
    const owners = new Set((await client.models.list()).data.map((m) => m.owned_by));
    for (const owner of ['openai', 'anthropic', 'google', 'deepseek', 'xai']) assert.ok(owners.has(owner), owner);
  });

  for (const { vendor, model, images } of vendors) {
    describe(`${vendor} (${model})`, () => {
      it('answers a plain chat', async () => {
        const completion = await client.chat.completions.create({
          model,
          messages: [
            { role: 'system', content: 'Be brief.' },
            { role: 'user', content: 'Hello' },
          ],
          max_tokens: 100,
          temperature: 0.5,
        });
        assertCompletionShape(completion, model);
        assert.equal(completion.choices[0]!.finish_reason, 'stop');
        assert.ok((completion.choices[0]!.message.content ?? '').length > 0);
      });

      it('streams with usage', async () => {
        const { chunks, text, finish } = await collect(
          await client.chat.completions.create({
            model,
            messages: [{ role: 'user', content: 'Hello' }],
            stream: true,
            stream_options: { include_usage: true },
          }),
        );
        assert.equal(new Set(chunks.map((c) => c.id)).size, 1, 'one id across the stream');
        assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
        assert.equal(chunks[0]!.choices[0]!.delta.role, 'assistant');
        assert.ok(text.length > 0);
        assert.equal(finish, 'stop');
        const last = chunks.at(-1)!;
        assert.deepEqual(last.choices, []);
        assert.ok(last.usage && last.usage.total_tokens > 0);
      });

      it('runs a tool round trip, plain and streamed', async () => {
        const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
          { role: 'user', content: 'What is the weather in Oslo?' },
        ];
        const first = await client.chat.completions.create({ model, messages, tools: [weatherTool] });
        assertCompletionShape(first, model);
        assert.equal(first.choices[0]!.finish_reason, 'tool_calls');
        const call = first.choices[0]!.message.tool_calls![0]!;
        assert.ok(call.type === 'function' && call.id);
        assert.equal(call.function.name, 'get_weather');
        assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Oslo' });

        const streamed = await collect(
          await client.chat.completions.create({ model, messages, tools: [weatherTool], stream: true }),
        );
        assert.equal(streamed.finish, 'tool_calls');
        assert.equal(streamed.calls.length, 1);
        assert.equal(streamed.calls[0]!.name, 'get_weather');
        assert.deepEqual(JSON.parse(streamed.calls[0]!.args), { city: 'Oslo' });

        const followUp: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
          ...messages,
          first.choices[0]!.message as OpenAI.Chat.Completions.ChatCompletionMessageParam,
          { role: 'tool', tool_call_id: call.id, content: '{"temperature":21}' },
        ];
        const answer = await client.chat.completions.create({ model, messages: followUp, tools: [weatherTool] });
        assertCompletionShape(answer, model);
        assert.equal(answer.choices[0]!.finish_reason, 'stop');
        assert.match(answer.choices[0]!.message.content ?? '', /21/);
        const answerStream = await collect(
          await client.chat.completions.create({ model, messages: followUp, tools: [weatherTool], stream: true }),
        );
        assert.match(answerStream.text, /21/);
      });

      it(images ? 'takes an image part' : 'refuses an image part (text-only model)', async () => {
        const request = client.chat.completions.create({
          model,
          messages: [
            {
              role: 'user',
              content: [
                { type: 'text', text: 'What is this?' },
                { type: 'image_url', image_url: { url: image } },
              ],
            },
          ],
        });
        if (images) assertCompletionShape(await request, model);
        else
          await assert.rejects(
            request,
            (error: unknown) =>
              error instanceof OpenAI.APIError && error.status === 400 && error.param === 'messages[0].content[1].type',
          );
      });
    });
  }
});
