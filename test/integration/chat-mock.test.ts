import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import type OpenAI from 'openai';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

// The offline path a fresh checkout gets: no vendor keys, the mock vendor serves everything.
describe('gateway with the built-in mock vendor', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let client: OpenAI;
  let apiKey: string;

  before(async () => {
    const fresh = await freshRedis(1);
    redis = fresh.redis;
    apiKey = (await createKey(redis)).key;
    gateway = await startGateway({ env: { REDIS_URL: fresh.url } });
    client = gateway.client(apiKey);
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it('lists the mock models, each owned by its vendor in lower case', async () => {
    const page = await client.models.list();
    const ids = page.data.map((m) => m.id);
    assert.ok(ids.includes('mock-chat') && ids.includes('mock-embedding') && ids.includes('mock-instruct'));
    // Offline, the mock stands in for every vendor: the real ids are listed too, owned by their vendor.
    assert.ok(
      ids.includes('gpt-4o-mini') && ids.includes('claude-sonnet-4-5') && ids.includes('text-embedding-3-small'),
    );
    assert.equal(page.data.find((m) => m.id === 'claude-sonnet-4-5')!.owned_by, 'anthropic');
    for (const model of page.data) {
      assert.equal(model.object, 'model');
      assert.equal(typeof model.created, 'number');
      assert.equal(model.owned_by, model.owned_by.toLowerCase());
    }
    const one = await client.models.retrieve('mock-chat');
    assert.deepEqual(one, { id: 'mock-chat', object: 'model', created: one.created, owned_by: 'mock' });
  });

  it('answers a multi-turn chat with a chat.completion and real token counts', async () => {
    const { data: completion, response } = await client.chat.completions
      .create({
        model: 'mock-chat',
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'developer', content: [{ type: 'text', text: 'Answer in English.' }] },
          { role: 'user', content: 'Hello there' },
          { role: 'assistant', content: 'Hi.' },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What is in this picture?' },
              { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
            ],
          },
        ],
        temperature: 0.5,
        top_p: 0.9,
        max_completion_tokens: 200,
        seed: 7,
        presence_penalty: 0.1,
        frequency_penalty: 0.1,
        user: 'u-1',
        response_format: { type: 'text' },
      })
      .withResponse();
    assert.match(response.headers.get('x-request-id') ?? '', /^req_[0-9a-f]{32}$/);
    assert.equal(completion.object, 'chat.completion');
    assert.equal(completion.model, 'mock-chat');
    assert.equal(completion.choices.length, 1);
    const choice = completion.choices[0]!;
    assert.equal(choice.message.role, 'assistant');
    assert.match(choice.message.content ?? '', /What is in this picture\?/);
    assert.equal(choice.finish_reason, 'stop');
    assert.ok(completion.usage!.prompt_tokens > 10);
    assert.ok(completion.usage!.completion_tokens > 0);
    assert.equal(completion.usage!.total_tokens, completion.usage!.prompt_tokens + completion.usage!.completion_tokens);
  });

  it('accepts a JSON body of 40 MB (three images inline, each under the 20 MB an image may be)', async () => {
    const image = `data:image/png;base64,${Buffer.alloc(10 * 1024 * 1024, 7).toString('base64')}`;
    const completion = await client.chat.completions.create({
      model: 'mock-chat',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Describe these' },
            ...[1, 2, 3].map(() => ({ type: 'image_url' as const, image_url: { url: image } })),
          ],
        },
      ],
    });
    assert.match(completion.choices[0]!.message.content ?? '', /Describe these/);
  });

  it('honours n and max_tokens', async () => {
    const completion = await client.chat.completions.create({
      model: 'mock-chat',
      messages: [{ role: 'user', content: 'Tell me a long story about a very patient queue' }],
      n: 2,
      max_tokens: 3,
    });
    assert.equal(completion.choices.length, 2);
    assert.deepEqual(
      completion.choices.map((c) => c.index),
      [0, 1],
    );
    for (const choice of completion.choices) assert.equal(choice.finish_reason, 'length');
    assert.ok(completion.usage!.completion_tokens <= 6);
  });

  it('streams chunks in order with one id, usage only when asked, ending with [DONE]', async () => {
    const stream = await client.chat.completions.create({
      model: 'mock-chat',
      messages: [{ role: 'user', content: 'Stream me something' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.ok(chunks.length >= 4);
    assert.equal(new Set(chunks.map((c) => c.id)).size, 1);
    assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
    assert.equal(chunks[0]!.choices[0]!.delta.role, 'assistant');
    const text = chunks.flatMap((c) => c.choices.map((x) => x.delta.content ?? '')).join('');
    assert.match(text, /Stream me something/);
    const usageChunk = chunks.at(-1)!;
    assert.deepEqual(usageChunk.choices, []);
    assert.ok(usageChunk.usage!.completion_tokens > 0);
    assert.equal(chunks.at(-2)!.choices[0]!.finish_reason, 'stop');

    const withoutUsage = await client.chat.completions.create({
      model: 'mock-chat',
      messages: [{ role: 'user', content: 'Stream me something' }],
      stream: true,
    });
    const plain: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const chunk of withoutUsage) plain.push(chunk);
    assert.ok(
      plain.every((c) => c.choices.length === 1 && !c.usage),
      'no usage chunk unless asked',
    );
  });

  it('ends the raw SSE body with data: [DONE]', async () => {
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: 'hi' }], stream: true }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    assert.ok(res.headers.get('x-request-id'));
    const body = await res.text();
    assert.ok(body.endsWith('data: [DONE]\n\n'));
    const frames = body.trim().split('\n\n');
    // Every chunk is numbered for a resume (Last-Event-ID); the trailer is not.
    frames.slice(0, -1).forEach((frame, n) => assert.match(frame, new RegExp(`^id: ${n}\ndata: \\{`)));
    assert.equal(frames.at(-1), 'data: [DONE]');
  });

  it('runs a tool call round trip, plain and streamed', async () => {
    const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Weather for a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
      },
    ];
    const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
      { role: 'user', content: 'Please call get_weather for Oslo' },
    ];
    const first = await client.chat.completions.create({
      model: 'mock-chat',
      messages,
      tools,
      tool_choice: 'auto',
      parallel_tool_calls: true,
    });
    const call = first.choices[0]!.message.tool_calls?.[0];
    assert.equal(first.choices[0]!.finish_reason, 'tool_calls');
    assert.ok(call && call.type === 'function');
    assert.equal(call.function.name, 'get_weather');
    assert.equal(typeof JSON.parse(call.function.arguments).city, 'string');

    const stream = await client.chat.completions.create({
      model: 'mock-chat',
      messages,
      tools,
      tool_choice: 'required',
      stream: true,
    });
    let args = '';
    let name = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        for (const fragment of choice.delta.tool_calls ?? []) {
          name ||= fragment.function?.name ?? '';
          args += fragment.function?.arguments ?? '';
        }
        finish = choice.finish_reason ?? finish;
      }
    }
    assert.equal(name, 'get_weather');
    assert.equal(finish, 'tool_calls');
    assert.equal(typeof JSON.parse(args).city, 'string');

    const second = await client.chat.completions.create({
      model: 'mock-chat',
      tools,
      messages: [
        ...messages,
        first.choices[0]!.message,
        { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' },
      ],
    });
    assert.equal(second.choices[0]!.finish_reason, 'stop');
    assert.ok(second.choices[0]!.message.content);
  });

  it('accepts legacy functions', async () => {
    const completion = await client.chat.completions.create({
      model: 'mock-chat',
      messages: [{ role: 'user', content: 'call lookup' }],
      functions: [{ name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } }],
      function_call: { name: 'lookup' },
    });
    assert.equal(completion.choices[0]!.message.function_call?.name, 'lookup');
  });

  it('serves legacy completions, plain and streamed', async () => {
    const plain = await client.completions.create({
      model: 'mock-instruct',
      prompt: 'Say this is a test',
      max_tokens: 50,
    });
    assert.equal(plain.object, 'text_completion');
    assert.ok(plain.choices[0]!.text.length > 0);
    assert.ok(plain.usage!.prompt_tokens > 0);

    const stream = await client.completions.create({
      model: 'mock-instruct',
      prompt: ['Say this is a test'],
      max_tokens: 50,
      stream: true,
    });
    let text = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'text_completion');
      text += chunk.choices[0]?.text ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, plain.choices[0]!.text);
    assert.ok(finish);
  });

  it('returns a result of several megabytes (it travels beside the reply message, not inside it)', async () => {
    const input = Array.from({ length: 600 }, (_, i) => `sentence number ${i}`);
    const { data: result, response } = await client.embeddings
      .create({ model: 'mock-embedding', input, encoding_format: 'float' })
      .withResponse();
    assert.equal(result.data.length, 600);
    assert.deepEqual(
      result.data.map((d) => d.index),
      input.map((_, i) => i),
    );
    assert.equal(result.data[599]!.embedding.length, 256);
    // The job is marked done once its settlement is written too, which may be just after the answer.
    const jobKey = `bull:{embeddings}:${response.headers.get('x-request-id')}`;
    await waitFor(async () => (await redis.hget(jobKey, 'returnvalue')) !== null, 5000, 'the job to complete');
    const job = await redis.hget(jobKey, 'returnvalue');
    assert.match(job ?? '', /"bodyRef":"sy:result:req_/, 'the job kept a reference, not the body');
  });

  it('embeds strings, arrays and token arrays as floats or base64', async () => {
    const floats = await client.embeddings.create({
      model: 'mock-embedding',
      input: ['hello', 'world'],
      encoding_format: 'float',
    });
    assert.equal(floats.object, 'list');
    assert.equal(floats.data.length, 2);
    assert.deepEqual(
      floats.data.map((d) => d.index),
      [0, 1],
    );
    const norm = Math.hypot(...floats.data[0]!.embedding);
    assert.ok(Math.abs(norm - 1) < 1e-6);
    assert.ok(floats.usage.prompt_tokens >= 2);

    // The official client asks for base64 by default and decodes it back to floats.
    const decoded = await client.embeddings.create({ model: 'mock-embedding', input: 'hello' });
    decoded.data[0]!.embedding.forEach((value, i) => assert.ok(Math.abs(value - floats.data[0]!.embedding[i]!) < 1e-6));

    const raw = await fetch(`${gateway.url}/v1/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mock-embedding',
        input: [
          [1, 2, 3],
          [4, 5],
        ],
        encoding_format: 'base64',
        dimensions: 64,
      }),
    });
    const body = (await raw.json()) as { data: Array<{ embedding: string }> };
    assert.equal(body.data.length, 2);
    assert.equal(Buffer.from(body.data[0]!.embedding, 'base64').length, 64 * 4);
  });
  it('answers real model ids offline, as a client would call them for real', async () => {
    for (const model of ['gpt-4o-mini', 'claude-sonnet-4-5', 'deepseek-chat']) {
      const completion = await client.chat.completions.create({
        model,
        messages: [{ role: 'user', content: 'Hello offline' }],
      });
      assert.equal(completion.model, model);
      assert.match(completion.choices[0]!.message.content ?? '', /Hello offline/);
    }
    const embedded = await client.embeddings.create({
      model: 'text-embedding-3-small',
      input: 'hello',
      encoding_format: 'float',
    });
    assert.equal(embedded.data[0]!.embedding.length, 1536, "the model's own dimensions");
  });
});
