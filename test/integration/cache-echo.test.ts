import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import type OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { freshRedis, paidAccountKey, startGateway, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { chatStreamSse } from '../support/fake-openai-defaults.js';
import { startFakeAnthropic, type FakeAnthropic } from '../support/fake-anthropic.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';

/*
 * A request answered from the response cache (a hit, or a call it shared) answers as a miss would have answered
 * it: the content and usage are the stored answer's, what echoes the request is its own (api/cache/answer-echo.ts).
 */

const model = 'gpt-4o-mini';
const alias = 'claude-echo-alias';
const claude = 'claude-sonnet-4-6';
const cached = { headers: { 'cache-control': 'max-age=60' } };

describe('a cached answer echoes the request it answers', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let key: string;
  let client: OpenAI;

  before(async () => {
    [openai, anthropic] = await Promise.all([startFakeOpenAI(), startFakeAnthropic()]);
    const fresh = await freshRedis(13);
    redis = fresh.redis;
    ({ key } = await paidAccountKey(redis, 50_000_000));
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: 'sk-openai-test',
        OPENAI_BASE_URL: openai.url,
        ANTHROPIC_API_KEY: 'sk-ant-test',
        ANTHROPIC_BASE_URL: anthropic.url,
        // Every tier granted: a request's own tier is served, not downgraded to `default`.
        SERVICE_TIERS_GRANTED: 'priority,default,flex',
        MODEL_ALIASES: `${alias}=${claude}`,
      },
    });
    client = gateway.client(key);
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), anthropic?.close()]);
    redis?.disconnect();
  });

  const chatCalls = () => openai.requests.filter((request) => request.path.endsWith('/chat/completions')).length;
  const ask = (content: string, extra: Record<string, unknown> = {}) => ({
    model,
    max_tokens: 16,
    messages: [{ role: 'user' as const, content }],
    ...extra,
  });

  it('chat: a hit with another user and another service_tier says its own tier, and has an id of its own', async () => {
    openai.reset();
    const first = await client.chat.completions
      .create(ask('Echo my tier', { user: 'alice', service_tier: 'default' }), cached)
      .withResponse();
    assert.equal(first.data.service_tier, 'default');
    const hit = await client.chat.completions
      .create(ask('Echo my tier', { user: 'bob', service_tier: 'flex' }), cached)
      .withResponse();
    assert.match(hit.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
    assert.equal(chatCalls(), 1, 'one vendor call');
    assertMatchesSchema('CreateChatCompletionResponse', hit.data, 'a hit');
    assert.equal(hit.data.service_tier, 'flex', 'the tier this request is served in, not the first one’s');
    assert.match(hit.data.id, /^chatcmpl-/);
    assert.notEqual(hit.data.id, first.data.id, 'an id of its own');
    assert.ok(hit.data.created >= first.data.created);
    assert.equal(hit.data.choices[0]!.message.content, first.data.choices[0]!.message.content, 'the same answer');
    // The stream form: every chunk says this request's id and tier.
    const streamed = await client.chat.completions
      .create(
        {
          ...ask('Echo my tier', { user: 'carol', service_tier: 'priority' }),
          stream: true,
          stream_options: { include_usage: true },
        },
        cached,
      )
      .withResponse();
    assert.match(streamed.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
    const ids = new Set<string>();
    let text = '';
    for await (const chunk of streamed.data) {
      assertMatchesSchema('CreateChatCompletionStreamResponse', chunk, 'a replayed chunk');
      assert.equal(chunk.service_tier, 'priority');
      ids.add(chunk.id);
      text += chunk.choices[0]?.delta.content ?? '';
    }
    assert.equal(ids.size, 1);
    assert.ok(![first.data.id, hit.data.id].includes([...ids][0]!), 'an id of its own');
    assert.equal(text, first.data.choices[0]!.message.content);
    assert.equal(chatCalls(), 1);
  });

  it('chat: a request following an identical request’s stream gets that stream with its own id and tier', async () => {
    openai.reset();
    const pieces = ['one', ' two', ' three', ' four', ' five', ' six'];
    openai.enqueue({ sse: chatStreamSse(pieces, { model, usage: true }), chunkDelayMs: 150 });
    const read = async (stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>, onFirst?: () => void) => {
      const ids = new Set<string>();
      const tiers = new Set<string | null | undefined>();
      let text = '';
      for await (const chunk of stream) {
        assertMatchesSchema('CreateChatCompletionStreamResponse', chunk, 'a streamed chunk');
        ids.add(chunk.id);
        tiers.add(chunk.service_tier);
        const piece = chunk.choices[0]?.delta.content ?? '';
        if (piece !== '') onFirst?.();
        text += piece;
      }
      return { ids: [...ids], tiers: [...tiers], text };
    };
    let leaderStarted!: () => void;
    const leaderFirst = new Promise<void>((resolve) => (leaderStarted = resolve));
    const leaderCall = await client.chat.completions
      .create({ ...ask('Follow with my tier', { user: 'alice' }), stream: true }, cached)
      .withResponse();
    const leader = read(leaderCall.data, leaderStarted);
    await leaderFirst;
    const followerCall = await client.chat.completions
      .create({ ...ask('Follow with my tier', { user: 'bob', service_tier: 'flex' }), stream: true }, cached)
      .withResponse();
    assert.equal(followerCall.response.headers.get('cache-status'), 'Switchyard; fwd=miss; collapsed');
    const [led, followed] = await Promise.all([leader, read(followerCall.data)]);
    assert.equal(chatCalls(), 1);
    assert.equal(followed.text, pieces.join(''));
    assert.equal(followed.ids.length, 1);
    assert.equal(led.ids.length, 1);
    assert.notEqual(followed.ids[0], led.ids[0], 'the follower’s chunks carry an id of its own');
    assert.deepEqual(led.tiers, ['default']);
    assert.deepEqual(followed.tiers, ['flex'], 'and its own tier');
  });

  it('messages: a request naming an alias is answered naming the alias, body and stream; and the other way round', async () => {
    anthropic.reset();
    const sdk = new Anthropic({ apiKey: key, baseURL: gateway.url, maxRetries: 0 });
    const params = (name: string, content: string) => ({
      model: name,
      max_tokens: 64,
      messages: [{ role: 'user' as const, content }],
    });
    const first = await sdk.messages.create(params(claude, 'Name me as I named you'), cached);
    assert.equal(first.model, claude);
    const hit = await sdk.messages.create(params(alias, 'Name me as I named you'), cached).withResponse();
    assert.match(hit.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
    assert.equal(hit.data.model, alias, 'the name this request sent');
    assert.match(hit.data.id, /^msg_/);
    assert.notEqual(hit.data.id, first.id, 'an id of its own');
    assert.deepEqual(hit.data.content, first.content);
    const stream = sdk.messages.stream(params(alias, 'Name me as I named you'), cached);
    let started: Anthropic.Message | undefined;
    stream.on('streamEvent', (event) => {
      if (event.type === 'message_start') started = event.message;
    });
    const streamed = await stream.finalMessage();
    assert.equal(started?.model, alias, 'message_start names the alias');
    assert.equal(streamed.model, alias);
    assert.notEqual(streamed.id, first.id);
    assert.deepEqual(streamed.content, first.content);
    assert.equal(anthropic.requests.length, 1, 'one vendor call');

    // The other way round: the stream named the alias first, a body naming the model's id hits it.
    const streamedFirst = await sdk.messages.stream(params(alias, 'The other way round'), cached).finalMessage();
    assert.equal(streamedFirst.model, alias);
    const byId = await sdk.messages.create(params(claude, 'The other way round'), cached).withResponse();
    assert.match(byId.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
    assert.equal(byId.data.model, claude, 'the id this request sent, not the alias the first one did');
    assert.notEqual(byId.data.id, streamedFirst.id);
    assert.equal(anthropic.requests.length, 2);
  });

  it('responses (store: false): bob’s hit after alice’s answer says bob, with its own resp_ id, body and stream', async () => {
    openai.reset();
    const params = { model, input: 'Whose response is this?', store: false, max_output_tokens: 32 };
    const first = await client.responses.create({ ...params, user: 'alice' }, cached);
    assert.equal(first.user, 'alice');
    const hit = await client.responses.create({ ...params, user: 'bob' }, cached).withResponse();
    assert.match(hit.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
    assertMatchesSchema('Response', hit.data, 'a hit');
    assert.equal(hit.data.user, 'bob');
    assert.match(hit.data.id, /^resp_/);
    assert.notEqual(hit.data.id, first.id, 'its own id');
    assert.ok(hit.data.created_at >= first.created_at);
    assert.equal(hit.data.output_text, first.output_text);
    assert.notEqual(hit.data.output[0]!.id, first.output[0]!.id, 'its own output item');
    // Streamed: every event's response is bob's, under one id of its own.
    const streamed = await client.responses.create({ ...params, user: 'bob', stream: true }, cached).withResponse();
    assert.match(streamed.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
    const ids = new Set<string>();
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of streamed.data) {
      assertMatchesSchema('ResponseStreamEvent', event, 'a replayed Responses event');
      if ('response' in event) {
        assert.equal(event.response.user, 'bob');
        ids.add(event.response.id);
      }
      if (event.type === 'response.completed') completed = event.response;
    }
    assert.equal(ids.size, 1);
    assert.ok(![first.id, hit.data.id].includes([...ids][0]!), 'an id of its own');
    assert.equal(completed?.output_text, first.output_text);
    assert.equal(chatCalls(), 1, 'one vendor call');
  });
});
