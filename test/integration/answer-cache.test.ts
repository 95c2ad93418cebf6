import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { freshRedis, paidAccountKey, requestRecord, startGateway, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { chatStreamSse } from '../support/fake-openai-defaults.js';
import { createFakeOpenAIImages } from '../support/fake-openai-images.js';
import { createFakeOpenAIMedia, type FakeOpenAIMedia } from '../support/fake-openai-media.js';
import { startFakeAnthropic, type FakeAnthropic } from '../support/fake-anthropic.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';
import { cacheBytesKey, cacheEntryKey } from '../../shared/redis-keys.js';
import { readEntry, requestHash } from '../../shared/cache/index.js';

const model = 'gpt-4o-mini';
const cached = (maxAge: number | string) => ({
  headers: { 'cache-control': typeof maxAge === 'number' ? `max-age=${maxAge}` : maxAge },
});

describe('the response cache, and identical requests in flight sharing one vendor call', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let media: FakeOpenAIMedia;
  let gatewayEnv: Record<string, string>;
  let key: string;
  let account: string;
  let client: OpenAI;
  const adminToken = 'admin-cache-test';

  before(async () => {
    [openai, anthropic] = await Promise.all([startFakeOpenAI(), startFakeAnthropic()]);
    media = createFakeOpenAIMedia();
    const fresh = await freshRedis(13);
    redis = fresh.redis;
    ({ key, account } = await paidAccountKey(redis, 50_000_000));
    gatewayEnv = {
      REDIS_URL: fresh.url,
      OPENAI_API_KEY: 'sk-openai-test',
      OPENAI_BASE_URL: openai.url,
      ANTHROPIC_API_KEY: 'sk-ant-test',
      ANTHROPIC_BASE_URL: anthropic.url,
      ADMIN_TOKEN: adminToken,
    };
    gateway = await startGateway({ env: gatewayEnv });
    client = gateway.client(key);
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), anthropic?.close(), media?.close()]);
    redis?.disconnect();
  });

  const calls = () => openai.requests.filter((request) => request.path.endsWith('/chat/completions')).length;
  const ask = (content: string, extra: Record<string, unknown> = {}) => ({
    model,
    max_tokens: 16,
    messages: [{ role: 'user' as const, content }],
    ...extra,
  });

  it(
    'answers the same request again from the cache: one vendor call, the same body, Cache-Status and Age, billed ' +
      'nothing, logged as a hit',
    async () => {
      openai.reset();
      const first = await client.chat.completions
        .create(ask('Cache me', { temperature: 0 }), cached(60))
        .withResponse();
      assert.equal(first.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
      // The same request with its keys in another order and other whitespace: the same answer.
      const again = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'cache-control': 'max-age=60' },
        body:
          `{ "temperature": 0, "messages": [ {"content": "Cache me", "role": "user"} ], "max_tokens": 16, "model": ` +
          `"${model}", "user": "someone" }`,
      });
      assert.equal(again.status, 200);
      assert.match(again.headers.get('cache-status') ?? '', /^Switchyard; hit; ttl=\d+$/);
      assert.match(again.headers.get('age') ?? '', /^\d+$/);
      const body = (await again.json()) as Record<string, unknown>;
      // The same answer, under an id and a time of its own (a miss's would be: api/cache/answer-echo.ts).
      assert.deepEqual(
        { ...body, id: '', created: 0 },
        { ...(first.data as unknown as Record<string, unknown>), id: '', created: 0 },
      );
      assert.notEqual(body.id, first.data.id);
      assert.equal(calls(), 1, 'one vendor call');
      const record = await requestRecord(gateway.url, key, again.headers.get('x-request-id')!);
      assert.equal(record.cache, 'hit');
      assert.equal(record.cost_micros, 0, 'CACHE_HIT_PRICE 0: free');
      assert.ok(record.saved_micros > 0, 'the price the hit saved');
      const miss = await requestRecord(gateway.url, key, first.response.headers.get('x-request-id')!);
      assert.equal(miss.cache, 'miss');
    },
  );

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
    const { data: stream, response } = await client.chat.completions
      .create({ ...ask('Plain first'), stream: true, stream_options: { include_usage: true } }, cached(60))
      .withResponse();
    for await (const chunk of stream) chunks.push(chunk);
    assert.match(response.headers.get('cache-status') ?? '', /hit/);
    for (const chunk of chunks) assertMatchesSchema('CreateChatCompletionStreamResponse', chunk, 'a replayed chunk');
    assert.equal(
      chunks.map((chunk) => chunk.choices[0]?.delta.content ?? '').join(''),
      plain.choices[0]!.message.content,
    );
    assert.ok(chunks.at(-1)!.usage, 'the usage chunk, as asked');
    // The reverse: a stream first, then the body.
    const streamed: string[] = [];
    for await (const chunk of await client.chat.completions.create(
      { ...ask('Stream first'), stream: true },
      cached(60),
    ))
      streamed.push(chunk.choices[0]?.delta.content ?? '');
    const body = await client.chat.completions.create(ask('Stream first'), cached(60)).withResponse();
    assert.match(body.response.headers.get('cache-status') ?? '', /hit/);
    assertMatchesSchema('CreateChatCompletionResponse', body.data, 'a body from a stored stream');
    assert.equal(body.data.choices[0]!.message.content, streamed.join(''));
    assert.equal(calls(), 2);
  });

  it(
    'asks the vendor again for no-cache (and stores it), and neither reads nor writes for no-store; a request ' +
      'without Cache-Control is not cached',
    async () => {
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
    },
  );

  it('takes max-age as the oldest answer that will do, and keeps an answer as long as its max-age', async () => {
    openai.reset();
    await client.chat.completions.create(ask('Short lived'), cached(1));
    const hash = requestHash({ endpoint: 'chat.completions', payload: ask('Short lived') as never }, model);
    const entry = await readEntry(redis, account, hash);
    assert.ok(entry && entry.expires - entry.created === 1000, 'served for its max-age');
    assert.ok(
      (await redis.pttl(cacheEntryKey(account, hash))) <= 30_000,
      'kept no longer than the requests sharing its call need',
    );
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
        ? client.chat.completions
            .create(ask('All at once'), cached(60))
            .withResponse()
            .then(({ data, response }) => ({
              text: data.choices[0]!.message.content,
              status: response.headers.get('cache-status'),
            }))
        : client.chat.completions
            .create({ ...ask('All at once'), stream: true }, cached(60))
            .withResponse()
            .then(async ({ data, response }) => {
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

  it('streams a running call to an identical streamed request as it comes, from its first token', async () => {
    openai.reset();
    const pieces = ['one', ' two', ' three', ' four', ' five', ' six', ' seven', ' eight'];
    openai.enqueue({ sse: chatStreamSse(pieces, { model, usage: true }), chunkDelayMs: 200 });
    const started = Date.now();
    const read = async (stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>, onFirst?: () => void) => {
      let text = '';
      let first: number | undefined;
      for await (const chunk of stream) {
        assertMatchesSchema('CreateChatCompletionStreamResponse', chunk, 'a followed chunk');
        const piece = chunk.choices[0]?.delta.content ?? '';
        if (piece !== '' && first === undefined) {
          first = Date.now() - started;
          onFirst?.();
        }
        text += piece;
      }
      return { text, first: first ?? Number.NaN, end: Date.now() - started };
    };
    let leaderStarted!: () => void;
    const leaderFirst = new Promise<void>((resolve) => (leaderStarted = resolve));
    const leaderCall = await client.chat.completions
      .create({ ...ask('Follow me'), stream: true }, cached(60))
      .withResponse();
    const leader = read(leaderCall.data, leaderStarted);
    await leaderFirst;
    const followerCall = await client.chat.completions
      .create({ ...ask('Follow me'), stream: true }, cached(60))
      .withResponse();
    assert.equal(followerCall.response.headers.get('cache-status'), 'Switchyard; fwd=miss; collapsed');
    const [led, followed] = await Promise.all([leader, read(followerCall.data)]);
    assert.equal(followed.text, pieces.join(''));
    assert.equal(led.text, followed.text);
    assert.equal(calls(), 1);
    // The leader's stream takes 1.8 s; the follower joined after its first token and had its own at once, not at the
    // end.
    assert.ok(
      followed.first < led.end - 800,
      `follower's first token at ${followed.first} ms, the stream ended at ${led.end} ms`,
    );
    const record = await requestRecord(gateway.url, key, followerCall.response.headers.get('x-request-id')!);
    assert.equal(record.cache, 'coalesced');
  });

  it('keeps a followed stream running when its own client leaves', async () => {
    openai.reset();
    const pieces = ['a', 'b', 'c', 'd', 'e', 'f'];
    openai.enqueue({ sse: chatStreamSse(pieces, { model, usage: true }), chunkDelayMs: 200 });
    const leaving = new AbortController();
    const leader = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'cache-control': 'max-age=60' },
      body: JSON.stringify({ ...ask('Leave me'), stream: true }),
      signal: leaving.signal,
    });
    const reader = leader.body!.getReader();
    await reader.read();
    const followerCall = await client.chat.completions
      .create({ ...ask('Leave me'), stream: true }, cached(60))
      .withResponse();
    let text = '';
    const following = (async () => {
      for await (const chunk of followerCall.data) text += chunk.choices[0]?.delta.content ?? '';
    })();
    await new Promise((resolve) => setTimeout(resolve, 300));
    leaving.abort();
    await following;
    assert.equal(text, pieces.join(''), 'the follower got the whole answer');
    assert.equal(calls(), 1);
    assert.equal(openai.requests.at(-1)!.aborted, false, 'the vendor call was not cut');
  });

  it('lets the requests sharing a call that failed run their own', async () => {
    openai.reset();
    openai.enqueue({
      delayMs: 500,
      status: 400,
      json: { error: { message: 'nope', type: 'invalid_request_error', param: null, code: null } },
    });
    const results = await Promise.allSettled(
      Array.from({ length: 4 }, () => client.chat.completions.create(ask('Fails first'), cached(60))),
    );
    const failed = results.filter((result) => result.status === 'rejected');
    assert.equal(failed.length, 1, 'the first call’s own request gets its failure');
    assert.equal(results.filter((result) => result.status === 'fulfilled').length, 3);
    assert.ok(calls() >= 2 && calls() <= 4, `calls ${calls()}`);
  });

  it('caches the Messages API, Anthropic’s own events replayed to a stream', async () => {
    anthropic.reset();
    const sdk = new Anthropic({ apiKey: key, baseURL: gateway.url, maxRetries: 0 });
    const params = {
      model: 'claude-sonnet-4-6',
      max_tokens: 64,
      messages: [{ role: 'user' as const, content: 'Cache this message' }],
    };
    const first = await sdk.messages.create(params, cached(60));
    const stream = sdk.messages.stream(params, cached(60));
    const replayed = await stream.finalMessage();
    assert.deepEqual(replayed.content, first.content);
    assert.equal(anthropic.requests.length, 1);
  });

  it(
    'caches a Responses request that is neither stored nor background, replayed as a valid stream; a stored one is ' +
      'not cached',
    async () => {
      openai.reset();
      const params = { model, input: 'Respond once', store: false, max_output_tokens: 32 };
      const first = await client.responses.create(params, cached(60)).withResponse();
      assert.equal(first.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
      const replay = await client.responses.create({ ...params, stream: true }, cached(60)).withResponse();
      assert.match(replay.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
      let completed: OpenAI.Responses.Response | undefined;
      for await (const event of replay.data) {
        assertMatchesSchema('ResponseStreamEvent', event, 'a replayed Responses event');
        if (event.type === 'response.completed') completed = event.response;
      }
      // The same output, its items under ids of this response's own.
      const withoutIds = (output: readonly unknown[] | undefined) =>
        output?.map((item) => ({ ...(item as Record<string, unknown>), id: '' }));
      assert.deepEqual(withoutIds(completed?.output), withoutIds(first.data.output));
      assert.equal(calls(), 1);
      const stored = await client.responses.create({ ...params, store: true }, cached(60)).withResponse();
      assert.equal(stored.response.headers.get('cache-status'), null, 'a stored response is never cached');
      assert.equal(calls(), 2);
    },
  );

  it(
    'caches a transcription by its file’s bytes, in the form asked, and an image generation unless it links its ' +
      'files',
    async () => {
      openai.reset();
      const images = createFakeOpenAIImages();
      openai.setDefault(async (request) =>
        request.path.includes('/images') ? images(request) : media.handler(request),
      );
      const vendorCalls = (path: string) => openai.requests.filter((request) => request.path.startsWith(path)).length;
      const speech = (fill: number) => toFile(Buffer.alloc(32_000, fill), 'speech.wav', { type: 'audio/wav' });
      const first = await client.audio.transcriptions
        .create({ model: 'whisper-1', file: await speech(1), response_format: 'json' }, cached(60))
        .withResponse();
      assert.equal(first.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
      // The same bytes under another name: the same request.
      const again = await client.audio.transcriptions
        .create(
          {
            model: 'whisper-1',
            file: await toFile(Buffer.alloc(32_000, 1), 'other-name.wav', { type: 'audio/wav' }),
            response_format: 'json',
          },
          cached(60),
        )
        .withResponse();
      assert.match(again.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
      assert.deepEqual(again.data, first.data);
      assert.equal(vendorCalls('/v1/audio/transcriptions'), 1);
      // Other bytes, or another form of the answer: another request.
      const other = await client.audio.transcriptions
        .create({ model: 'whisper-1', file: await speech(2), response_format: 'json' }, cached(60))
        .withResponse();
      assert.equal(other.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
      const asText = async () => {
        const form = new FormData();
        form.set('model', 'whisper-1');
        form.set('response_format', 'text');
        form.set('file', new Blob([Buffer.alloc(32_000, 1)], { type: 'audio/wav' }), 'speech.wav');
        return fetch(`${gateway.url}/v1/audio/transcriptions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'cache-control': 'max-age=60' },
          body: form,
        });
      };
      const text = await asText();
      assert.match(text.headers.get('cache-status') ?? '', /fwd=miss/);
      const textHit = await asText();
      assert.match(textHit.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
      assert.match(textHit.headers.get('content-type') ?? '', /^text\/plain/);
      assert.equal(await textHit.text(), await text.text());
      assert.equal(vendorCalls('/v1/audio/transcriptions'), 3);

      const picture = { model: 'gpt-image-1', prompt: 'a lighthouse, cached', size: '1024x1024' as const };
      const drawn = await client.images.generate(picture, cached(60)).withResponse();
      const redrawn = await client.images.generate(picture, cached(60)).withResponse();
      assert.match(redrawn.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
      assert.equal(redrawn.data.data![0]!.b64_json, drawn.data.data![0]!.b64_json);
      assert.equal(vendorCalls('/v1/images/generations'), 1);
      // Rendered as links to the gateway's files, which expire: asked again, never kept.
      const linked = {
        model: 'dall-e-2',
        prompt: 'a lighthouse, linked',
        size: '256x256' as const,
        response_format: 'url' as const,
      };
      await client.images.generate(linked, cached(60));
      const relinked = await client.images.generate(linked, cached(60)).withResponse();
      assert.match(relinked.response.headers.get('cache-status') ?? '', /fwd=miss/);
      assert.equal(vendorCalls('/v1/images/generations'), 3);
    },
  );

  it('caches a key’s requests by its default TTL, and bounds or forbids caching by an admin’s cap on the account', async () => {
    openai.reset();
    const own = await paidAccountKey(redis, 5_000_000);
    const mine = gateway.client(own.key);
    const admin = async (path: string, body: unknown) => {
      const response = await fetch(`${gateway.url}${path}`, {
        method: 'PATCH',
        headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      assert.equal(response.status, 200, await response.text());
      // Every api drops the key's cached access when it hears the change.
      await new Promise((resolve) => setTimeout(resolve, 200));
    };
    const status = async (content: string, options?: { headers: Record<string, string> }) =>
      (await mine.chat.completions.create(ask(content), options).withResponse()).response.headers.get('cache-status');
    const keptMs = async (content: string) => {
      const entry = await readEntry(
        redis,
        own.account,
        requestHash({ endpoint: 'chat.completions', payload: ask(content) } as never, model),
      );
      return entry ? entry.expires - entry.created : undefined;
    };

    await admin(`/admin/keys/${own.id}`, { cache_ttl_s: 120 });
    // No Cache-Control: the key's default opts in, as max-age=120.
    assert.equal(await status('By default'), 'Switchyard; fwd=miss; stored');
    assert.match((await status('By default')) ?? '', /^Switchyard; hit; ttl=1[01]\d$/);
    assert.equal(await keptMs('By default'), 120_000);
    // A request's own Cache-Control wins over the key's: no-store neither reads nor writes.
    assert.equal(await status('By default', { headers: { 'cache-control': 'no-store' } }), null);
    assert.equal(calls(), 2);

    // The account's cap bounds what is kept and how old an answer may be, whatever the key or the request asks.
    await admin(`/admin/accounts/${own.account}`, { cache_max_ttl_s: 5 });
    assert.equal(
      await status('Capped', { headers: { 'cache-control': 'max-age=600' } }),
      'Switchyard; fwd=miss; stored',
    );
    assert.equal(await keptMs('Capped'), 5_000);
    assert.match((await status('Capped')) ?? '', /^Switchyard; hit; ttl=[0-5]$/);

    // 0 forbids it: every request goes to the vendor, and nothing is stored.
    await admin(`/admin/accounts/${own.account}`, { cache_max_ttl_s: 0 });
    const before = calls();
    assert.equal(await status('Forbidden', { headers: { 'cache-control': 'max-age=60' } }), null);
    assert.equal(await status('Forbidden', { headers: { 'cache-control': 'max-age=60' } }), null);
    assert.equal(calls(), before + 2);
    assert.equal(await keptMs('Forbidden'), undefined);
    // Lifted: the key's default applies again.
    await admin(`/admin/accounts/${own.account}`, { cache_max_ttl_s: null });
    assert.equal(await status('Forbidden'), 'Switchyard; fwd=miss; stored');
  });

  it('bills a hit CACHE_HIT_PRICE of the stored answer’s price, as configured, and logs what it saved', async () => {
    openai.reset();
    // A second api and worker on the same Redis, pricing hits at a quarter.
    const priced = await startGateway({ env: { ...gatewayEnv, CACHE_HIT_PRICE: '0.25' } });
    try {
      const own = await paidAccountKey(redis, 5_000_000);
      const payer = priced.client(own.key);
      const first = await payer.chat.completions.create(ask('Priced hit'), cached(60)).withResponse();
      const missed = await requestRecord(priced.url, own.key, first.response.headers.get('x-request-id')!);
      assert.ok(missed.cost_micros > 0);
      const hit = await payer.chat.completions.create(ask('Priced hit'), cached(60)).withResponse();
      assert.match(hit.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
      const record = await requestRecord(priced.url, own.key, hit.response.headers.get('x-request-id')!);
      assert.equal(record.cache, 'hit');
      assert.equal(record.cost_micros, Math.ceil(missed.cost_micros * 0.25));
      assert.equal(record.saved_micros, missed.cost_micros - record.cost_micros);
      assert.equal(record.input_tokens, 0, 'no tokens: a hit takes nothing of the token rate');
      assert.equal(calls(), 1);
    } finally {
      await priced.stop();
    }
  });

  it('purges an account’s entries for an admin, by model or all', async () => {
    await client.chat.completions.create(ask('Purge me'), cached(60));
    assert.ok(Number(await redis.get(cacheBytesKey(account))) > 0);
    const purge = (query: string) =>
      fetch(`${gateway.url}/admin/cache?${query}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${adminToken}` },
      });
    const none = (await (await purge(`account_id=${account}&model=no-such-model`)).json()) as { purged: number };
    assert.equal(none.purged, 0);
    // By key: another key's answers go, this one's stay.
    const other = await paidAccountKey(redis, 1_000_000);
    await gateway.client(other.key).chat.completions.create(ask('Purge me too'), cached(60));
    const byKey = (await (await purge(`account_id=${other.account}&key_id=${other.id}`)).json()) as { purged: number };
    assert.equal(byKey.purged, 1);
    assert.equal(
      ((await (await purge(`account_id=${account}&key_id=${other.id}`)).json()) as { purged: number }).purged,
      0,
    );
    const all = (await (await purge(`account_id=${account}`)).json()) as { purged: number };
    assert.ok(all.purged >= 1);
    assert.equal(Number(await redis.get(cacheBytesKey(account))), 0);
    openai.reset();
    const after = await client.chat.completions.create(ask('Purge me'), cached(60)).withResponse();
    assert.match(after.response.headers.get('cache-status') ?? '', /fwd=miss/);
    assert.equal((await purge('model=')).status, 400);
  });
});
