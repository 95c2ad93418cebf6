import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { freshRedis, paidAccountKey, requestRecord, startGateway, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { startFakeAnthropic, type FakeAnthropic } from '../support/fake-anthropic.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';
import { cacheBytesKey, cacheEntryKey } from '../../shared/redis-keys.js';
import { readEntry, requestHash } from '../../shared/cache.js';

const model = 'gpt-4o-mini';
const cached = (maxAge: number | string) => ({ headers: { 'cache-control': typeof maxAge === 'number' ? `max-age=${maxAge}` : maxAge } });

describe('the response cache, and identical requests in flight sharing one vendor call', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let key: string;
  let account: string;
  let client: OpenAI;
  const adminToken = 'admin-cache-test';

  before(async () => {
    [openai, anthropic] = await Promise.all([startFakeOpenAI(), startFakeAnthropic()]);
    const fresh = await freshRedis(13);
    redis = fresh.redis;
    ({ key, account } = await paidAccountKey(redis, 50_000_000));
    gateway = await startGateway({
      env: { REDIS_URL: fresh.url, OPENAI_API_KEY: 'sk-openai-test', OPENAI_BASE_URL: openai.url, ANTHROPIC_API_KEY: 'sk-ant-test', ANTHROPIC_BASE_URL: anthropic.url, ADMIN_TOKEN: adminToken },
    });
    client = gateway.client(key);
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), anthropic?.close()]);
    redis?.disconnect();
  });

  const calls = () => openai.requests.filter((request) => request.path.endsWith('/chat/completions')).length;
  const ask = (content: string, extra: Record<string, unknown> = {}) => ({ model, max_tokens: 16, messages: [{ role: 'user' as const, content }], ...extra });

  it('answers the same request again from the cache: one vendor call, the same body, Cache-Status and Age, billed nothing, logged as a hit', async () => {
    openai.reset();
    const first = await client.chat.completions.create(ask('Cache me', { temperature: 0 }), cached(60)).withResponse();
    assert.equal(first.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
    // The same request with its keys in another order and other whitespace: the same answer.
    const again = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'cache-control': 'max-age=60' },
      body: `{ "temperature": 0, "messages": [ {"content": "Cache me", "role": "user"} ], "max_tokens": 16, "model": "${model}", "user": "someone" }`,
    });
    assert.equal(again.status, 200);
    assert.match(again.headers.get('cache-status') ?? '', /^Switchyard; hit; ttl=\d+$/);
    assert.match(again.headers.get('age') ?? '', /^\d+$/);
    const body = (await again.json()) as Record<string, unknown>;
    assert.deepEqual(body, first.data as unknown as Record<string, unknown>);
    assert.equal(calls(), 1, 'one vendor call');
    const record = await requestRecord(gateway.url, key, again.headers.get('x-request-id')!);
    assert.equal(record.cache, 'hit');
    assert.equal(record.cost_micros, 0, 'CACHE_HIT_PRICE 0: free');
    assert.ok(record.saved_micros > 0, 'the price the hit saved');
    const miss = await requestRecord(gateway.url, key, first.response.headers.get('x-request-id')!);
    assert.equal(miss.cache, 'miss');
  });

  it('never answers another account from this one’s entries', async () => {
    openai.reset();
    const other = gateway.client((await paidAccountKey(redis, 5_000_000)).key);
    await client.chat.completions.create(ask('Mine alone'), cached(60));
    const theirs = await other.chat.completions.create(ask('Mine alone'), cached(60)).withResponse();
    assert.equal(theirs.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
    assert.equal(calls(), 2);
  });

  it('replays a stored plain answer as a stream, and a streamed answer as a body, both valid', async () => {
    openai.reset();
    const plain = await client.chat.completions.create(ask('Plain first'), cached(60));
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    const { data: stream, response } = await client.chat.completions.create({ ...ask('Plain first'), stream: true, stream_options: { include_usage: true } }, cached(60)).withResponse();
    for await (const chunk of stream) chunks.push(chunk);
    assert.match(response.headers.get('cache-status') ?? '', /hit/);
    for (const chunk of chunks) assertMatchesSchema('CreateChatCompletionStreamResponse', chunk, 'a replayed chunk');
    assert.equal(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? '').join(''), plain.choices[0]!.message.content);
    assert.ok(chunks.at(-1)!.usage, 'the usage chunk, as asked');
    // The reverse: a stream first, then the body.
    const streamed: string[] = [];
    for await (const chunk of await client.chat.completions.create({ ...ask('Stream first'), stream: true }, cached(60))) streamed.push(chunk.choices[0]?.delta.content ?? '');
    const body = await client.chat.completions.create(ask('Stream first'), cached(60)).withResponse();
    assert.match(body.response.headers.get('cache-status') ?? '', /hit/);
    assertMatchesSchema('CreateChatCompletionResponse', body.data, 'a body from a stored stream');
    assert.equal(body.data.choices[0]!.message.content, streamed.join(''));
    assert.equal(calls(), 2);
  });

  it('asks the vendor again for no-cache (and stores it), and neither reads nor writes for no-store; a request without Cache-Control is not cached', async () => {
    openai.reset();
    await client.chat.completions.create(ask('Directives'), cached(60));
    const fresh = await client.chat.completions.create(ask('Directives'), cached('no-cache')).withResponse();
    assert.equal(fresh.response.headers.get('cache-status'), 'Switchyard; fwd=request; stored');
    const bypass = await client.chat.completions.create(ask('Directives'), cached('no-store')).withResponse();
    assert.equal(bypass.response.headers.get('cache-status'), null);
    await client.chat.completions.create(ask('Directives'));
    assert.equal(calls(), 4);
    const hit = await client.chat.completions.create(ask('Directives'), cached(60)).withResponse();
    assert.match(hit.response.headers.get('cache-status') ?? '', /hit/);
    assert.equal(calls(), 4);
  });

  it('takes max-age as the oldest answer that will do, and keeps an answer as long as its max-age', async () => {
    openai.reset();
    await client.chat.completions.create(ask('Short lived'), cached(1));
    const hash = requestHash({ endpoint: 'chat.completions', payload: ask('Short lived') as never }, model);
    const entry = await readEntry(redis, account, hash);
    assert.ok(entry && entry.expires - entry.created === 1000, 'served for its max-age');
    assert.ok((await redis.pttl(cacheEntryKey(account, hash))) <= 30_000, 'kept no longer than the requests sharing its call need');
    await new Promise((resolve) => setTimeout(resolve, 1200));
    const later = await client.chat.completions.create(ask('Short lived'), cached(60)).withResponse();
    assert.match(later.response.headers.get('cache-status') ?? '', /fwd=miss/);
    assert.equal(calls(), 2);
    // An answer kept for a minute is too old for a request that takes none older than 0 seconds.
    const zero = await client.chat.completions.create(ask('Short lived'), cached(0)).withResponse();
    assert.match(zero.response.headers.get('cache-status') ?? '', /fwd=miss/);
  });

  it('runs one vendor call for identical requests in flight, streamed and not; the rest share it', async () => {
    openai.reset();
    openai.enqueue({ delayMs: 1000 });
    const many = Array.from({ length: 12 }, (_, i) =>
      i % 2 === 0
        ? client.chat.completions.create(ask('All at once'), cached(60)).withResponse().then(({ data, response }) => ({ text: data.choices[0]!.message.content, status: response.headers.get('cache-status') }))
        : client.chat.completions.create({ ...ask('All at once'), stream: true }, cached(60)).withResponse().then(async ({ data, response }) => {
            let text = '';
            for await (const chunk of data) text += chunk.choices[0]?.delta.content ?? '';
            return { text, status: response.headers.get('cache-status') };
          }),
    );
    const answers = await Promise.all(many);
    assert.equal(calls(), 1, 'one vendor call for twelve requests');
    assert.equal(new Set(answers.map((answer) => answer.text)).size, 1, 'every caller got the same answer');
    assert.equal(answers.filter((answer) => answer.status === 'Switchyard; fwd=miss; stored').length, 1);
    assert.equal(answers.filter((answer) => answer.status === 'Switchyard; fwd=miss; collapsed').length, 11);
  });

  it('lets the requests sharing a call that failed run their own', async () => {
    openai.reset();
    openai.enqueue({ delayMs: 500, status: 400, json: { error: { message: 'nope', type: 'invalid_request_error', param: null, code: null } } });
    const results = await Promise.allSettled(Array.from({ length: 4 }, () => client.chat.completions.create(ask('Fails first'), cached(60))));
    const failed = results.filter((result) => result.status === 'rejected');
    assert.equal(failed.length, 1, 'the first call’s own request gets its failure');
    assert.equal(results.filter((result) => result.status === 'fulfilled').length, 3);
    assert.ok(calls() >= 2 && calls() <= 4, `calls ${calls()}`);
  });

  it('caches the Messages API, Anthropic’s own events replayed to a stream', async () => {
    anthropic.reset();
    const sdk = new Anthropic({ apiKey: key, baseURL: gateway.url, maxRetries: 0 });
    const params = { model: 'claude-sonnet-4-6', max_tokens: 64, messages: [{ role: 'user' as const, content: 'Cache this message' }] };
    const first = await sdk.messages.create(params, cached(60));
    const stream = sdk.messages.stream(params, cached(60));
    const replayed = await stream.finalMessage();
    assert.deepEqual(replayed.content, first.content);
    assert.equal(anthropic.requests.length, 1);
  });

  it('purges an account’s entries for an admin, by model or all', async () => {
    await client.chat.completions.create(ask('Purge me'), cached(60));
    assert.ok(Number(await redis.get(cacheBytesKey(account))) > 0);
    const purge = (query: string) => fetch(`${gateway.url}/admin/cache?${query}`, { method: 'DELETE', headers: { authorization: `Bearer ${adminToken}` } });
    const none = (await (await purge(`account_id=${account}&model=no-such-model`)).json()) as { purged: number };
    assert.equal(none.purged, 0);
    const all = (await (await purge(`account_id=${account}`)).json()) as { purged: number };
    assert.ok(all.purged >= 1);
    assert.equal(Number(await redis.get(cacheBytesKey(account))), 0);
    openai.reset();
    const after = await client.chat.completions.create(ask('Purge me'), cached(60)).withResponse();
    assert.match(after.response.headers.get('cache-status') ?? '', /fwd=miss/);
    assert.equal((await purge('model=')).status, 400);
  });
});
