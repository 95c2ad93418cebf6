import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import type { Redis } from 'ioredis';
import {
  freshRedis,
  paidAccountKey,
  requestRecord,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';
import {
  assertShape,
  batchEmbedContentsResponseShape,
  countTokensResponseShape,
  embedContentResponseShape,
  errorBodyShape,
  generateContentResponseShape,
  listModelsResponseShape,
  modelShape,
  type GenerateContentResponse,
  type GoogleErrorBody,
} from '../support/gemini-shapes.js';

/**
 * Google's Gemini API at the HTTP level, against gateways on the mock vendor (no vendor key: the mock stands in
 * for every vendor): both path spellings, each way of sending the key, every error status in Google's shape, the
 * models list and its pages, both stream forms as they go over the wire, and the response cache. A second gateway
 * runs its api alone (no worker takes its jobs), so requests wait: their deadline, a full waiting room, the key's
 * rate, the account's balance and a drain are each seen as a Google client sees them.
 */

const ask = (text: string) => ({ contents: [{ role: 'user', parts: [{ text }] }] });

interface Sent {
  status: number;
  headers: Headers;
  text: string;
}

async function send(
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: unknown } = {},
): Promise<Sent> {
  const res = await fetch(url, {
    method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
    headers: { ...(init.body === undefined ? {} : { 'content-type': 'application/json' }), ...init.headers },
    ...(init.body === undefined ? {} : { body: typeof init.body === 'string' ? init.body : JSON.stringify(init.body) }),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** A Google error answer: its status, Google's status name, and the body in Google's shape. */
function googleError(sent: Sent, status: number, name: string): GoogleErrorBody['error'] {
  assert.equal(sent.status, status, sent.text);
  const body = assertShape(errorBodyShape, JSON.parse(sent.text), 'error body');
  assert.equal(body.error.code, status);
  assert.equal(body.error.status, name);
  return body.error;
}

const retryDelay = (error: GoogleErrorBody['error']) =>
  error.details?.find((detail) => detail['@type'] === 'type.googleapis.com/google.rpc.RetryInfo')?.retryDelay;

/**
 * The `data:` of each SSE frame of a Google stream, checking every frame is exactly `data: <json>` (Gemini CLI's reader
 * takes nothing else).
 */
function sseChunks(text: string): unknown[] {
  const frames = text.split('\n\n').filter((frame) => frame.trim() !== '');
  return frames.map((frame) => {
    const trimmed = frame.replace(/^\n+/, '');
    assert.match(trimmed, /^data: [^\n]+$/, `a frame that is not one data line: ${JSON.stringify(frame)}`);
    return JSON.parse(trimmed.slice('data: '.length));
  });
}

describe("Google's Gemini API over HTTP: paths, keys, errors, models, streams, cache", () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let key: string;

  before(async () => {
    const fresh = await freshRedis(14);
    redis = fresh.redis;
    key = (await paidAccountKey(redis, 'unlimited')).key;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        MODEL_ALIASES: 'my-gemini=gpt-4o-mini',
        MAX_BODY_BYTES: String(256 * 1024),
        SSE_KEEPALIVE_MS: '100',
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  const url = (path: string) => `${gateway.url}${path}`;
  const goog = () => ({ 'x-goog-api-key': key });

  describe('the models list and a model, in Google’s shape', () => {
    it('lists in pages with an opaque token, and gets one model by name or alias', async () => {
      const first = await send(url('/v1beta/models?pageSize=3'), { headers: goog() });
      assert.equal(first.status, 200, first.text);
      const page = assertShape(listModelsResponseShape, JSON.parse(first.text));
      assert.equal(page.models.length, 3);
      assert.ok(page.nextPageToken);
      const second = assertShape(
        listModelsResponseShape,
        JSON.parse(
          (await send(url(`/v1beta/models?pageSize=3&pageToken=${page.nextPageToken}`), { headers: goog() })).text,
        ),
      );
      assert.equal(second.models.length, 3);
      assert.ok(
        second.models.every((model) => !page.models.some((seen) => seen.name === model.name)),
        'the second page goes on from the first',
      );
      const all = assertShape(
        listModelsResponseShape,
        JSON.parse((await send(url('/v1beta/models?pageSize=1000'), { headers: goog() })).text),
      );
      assert.equal(all.nextPageToken, undefined);
      const chat = all.models.find((model) => model.name === 'models/gpt-4o-mini')!;
      assert.deepEqual(chat.supportedGenerationMethods, ['generateContent', 'streamGenerateContent', 'countTokens']);
      const embedder = all.models.find((model) => model.name === 'models/text-embedding-3-small')!;
      assert.deepEqual(embedder.supportedGenerationMethods, ['embedContent', 'batchEmbedContents']);
      assert.equal(all.models.find((model) => model.name === 'models/gemini-2.5-pro')?.thinking, true);
      assert.ok(
        !all.models.some((model) => model.name === 'models/dall-e-3'),
        'no Gemini method serves an image model',
      );
      googleError(await send(url('/v1beta/models?pageToken=nonsense'), { headers: goog() }), 400, 'INVALID_ARGUMENT');

      const one = assertShape(
        modelShape,
        JSON.parse((await send(url('/v1beta/models/gpt-4o-mini'), { headers: goog() })).text),
      );
      assert.equal(one.name, 'models/gpt-4o-mini');
      assert.equal(one.inputTokenLimit, 128000);
      const alias = assertShape(
        modelShape,
        JSON.parse((await send(url('/v1beta/models/my-gemini'), { headers: goog() })).text),
      );
      assert.equal(alias.name, 'models/my-gemini');
      assert.equal(alias.baseModelId, 'gpt-4o-mini');
      const missing = googleError(await send(url('/v1beta/models/nope'), { headers: goog() }), 404, 'NOT_FOUND');
      assert.match(missing.message, /models\/nope is not found for API version v1beta/);
    });

    it('answers /v1/models in Google’s shape when the key comes as x-goog-api-key, in OpenAI’s otherwise', async () => {
      const google = assertShape(
        listModelsResponseShape,
        JSON.parse((await send(url('/v1/models?pageSize=2'), { headers: goog() })).text),
      );
      assert.equal(google.models.length, 2);
      assert.equal(
        assertShape(modelShape, JSON.parse((await send(url('/v1/models/gpt-4o-mini'), { headers: goog() })).text)).name,
        'models/gpt-4o-mini',
      );
      googleError(await send(url('/v1/models/nope'), { headers: goog() }), 404, 'NOT_FOUND');
      const openai = JSON.parse((await send(url('/v1/models'), { headers: { authorization: `Bearer ${key}` } })).text);
      assert.equal(openai.object, 'list');
    });
  });

  describe('the key', () => {
    it('is read from x-goog-api-key, ?key= and Authorization: Bearer on Google’s paths', async () => {
      assert.equal((await send(url('/v1beta/models'), { headers: goog() })).status, 200);
      assert.equal((await send(url(`/v1beta/models?key=${key}`))).status, 200);
      assert.equal((await send(url('/v1beta/models'), { headers: { authorization: `Bearer ${key}` } })).status, 200);
      assert.equal(
        (await send(url(`/v1/models/gpt-4o-mini:countTokens?key=${key}`), { body: ask('hi') })).status !== 401,
        true,
      );
    });

    it(
      'answers a missing key 401 UNAUTHENTICATED and a wrong one 403 PERMISSION_DENIED (API_KEY_INVALID), on both ' +
        'spellings',
      async () => {
        for (const path of ['/v1beta/models/gpt-4o-mini:generateContent', '/v1/models/gpt-4o-mini:generateContent']) {
          const missing = googleError(await send(url(path), { body: ask('hi') }), 401, 'UNAUTHENTICATED');
          assert.match(missing.message, /x-goog-api-key/);
          const wrong = googleError(
            await send(url(path), { body: ask('hi'), headers: { 'x-goog-api-key': 'sk-not-a-key' } }),
            403,
            'PERMISSION_DENIED',
          );
          assert.equal(
            wrong.details?.find((detail) => detail['@type'] === 'type.googleapis.com/google.rpc.ErrorInfo')?.reason,
            'API_KEY_INVALID',
          );
        }
        googleError(await send(url('/v1beta/models?key=sk-not-a-key')), 403, 'PERMISSION_DENIED');
        // x-goog-api-key is Google's header: on an OpenAI path it names no key, and the answer says so.
        const openai = await send(url('/v1/chat/completions'), {
          body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] },
          headers: goog(),
        });
        assert.equal(openai.status, 401);
        assert.match(JSON.parse(openai.text).error.message, /x-goog-api-key is read on Google's paths/);
      },
    );

    it('never writes a ?key= to the logs', async () => {
      const secret = 'sk-secret-in-the-url-0123456789';
      await send(url(`/v1beta/models/gpt-4o-mini:generateContent?key=${secret}`), { body: ask('hi') });
      await send(url(`/v1beta/models/nope:generateContent?alt=sse&key=${key}`), { body: ask('hi') });
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.ok(gateway.logs.length > 0);
      assert.ok(!gateway.logs.some((line) => line.includes(secret) || line.includes(key)), 'a key in the logs');
    });
  });

  describe('errors in Google’s shape', () => {
    it('answers an unknown model, a model of another kind and an unknown method 404 NOT_FOUND', async () => {
      const unknown = googleError(
        await send(url('/v1beta/models/nope:generateContent'), { body: ask('hi'), headers: goog() }),
        404,
        'NOT_FOUND',
      );
      assert.equal(
        unknown.message,
        'models/nope is not found for API version v1beta, or is not supported for generateContent. Call ' +
          'ListModels to see the list of available models and their supported methods.',
      );
      const v1 = googleError(
        await send(url('/v1/models/nope:streamGenerateContent?alt=sse'), { body: ask('hi'), headers: goog() }),
        404,
        'NOT_FOUND',
      );
      assert.match(v1.message, /for API version v1, or is not supported for streamGenerateContent/);
      const kind = googleError(
        await send(url('/v1beta/models/text-embedding-3-small:generateContent'), { body: ask('hi'), headers: goog() }),
        404,
        'NOT_FOUND',
      );
      assert.match(kind.message, /not supported for generateContent/);
      const method = googleError(
        await send(url('/v1beta/models/gpt-4o-mini:predict'), { body: ask('hi'), headers: goog() }),
        404,
        'NOT_FOUND',
      );
      assert.match(
        method.message,
        /generateContent, streamGenerateContent, countTokens, embedContent, batchEmbedContents/,
      );
      googleError(
        await send(url('/v1beta/tunedModels/x:generateContent'), { body: ask('hi'), headers: goog() }),
        404,
        'NOT_FOUND',
      );
      googleError(await send(url('/v1beta/files'), { headers: goog() }), 404, 'NOT_FOUND');
    });

    it('answers another HTTP method on a model’s method 405 in Google’s shape', async () => {
      const sent = await send(url('/v1beta/models/gpt-4o-mini:generateContent'), { headers: goog() });
      const error = googleError(sent, 405, 'INVALID_ARGUMENT');
      assert.match(error.message, /POST/);
      assert.equal(sent.headers.get('allow'), 'POST');
      googleError(
        await send(url('/v1/models/gpt-4o-mini:generateContent'), { method: 'DELETE', headers: goog() }),
        405,
        'INVALID_ARGUMENT',
      );
    });

    it('names the field a body gets wrong by its path in the body, as Google does', async () => {
      const type = googleError(
        await send(url('/v1beta/models/gpt-4o-mini:generateContent'), {
          body: { contents: [{ parts: [{ text: 5 }] }] },
          headers: goog(),
        }),
        400,
        'INVALID_ARGUMENT',
      );
      assert.match(type.message, /^Invalid value at 'contents\[0\]\.parts\[0\]\.text'/);
      const missing = googleError(
        await send(url('/v1beta/models/gpt-4o-mini:generateContent'), { body: {}, headers: goog() }),
        400,
        'INVALID_ARGUMENT',
      );
      assert.match(missing.message, /^Invalid value at 'contents'/);
      const role = googleError(
        await send(url('/v1beta/models/gpt-4o-mini:generateContent'), {
          body: { contents: [{ role: 'assistant', parts: [{ text: 'x' }] }] },
          headers: goog(),
        }),
        400,
        'INVALID_ARGUMENT',
      );
      assert.match(role.message, /^Invalid value at 'contents\[0\]\.role'/);
      const video = googleError(
        await send(url('/v1beta/models/gpt-4o-mini:generateContent'), {
          body: { contents: [{ parts: [{ inlineData: { mimeType: 'video/mp4', data: 'AAAA' } }] }] },
          headers: goog(),
        }),
        400,
        'INVALID_ARGUMENT',
      );
      assert.match(
        video.message,
        /^Invalid value at 'contents\[0\]\.parts\[0\]\.inlineData\.mimeType': inline video\/mp4 is served for Gemini models only/,
      );
      const batch = googleError(
        await send(url('/v1beta/models/text-embedding-3-small:batchEmbedContents'), {
          body: { requests: [{ model: 'models/other', content: { parts: [{ text: 'a' }] } }] },
          headers: goog(),
        }),
        400,
        'INVALID_ARGUMENT',
      );
      assert.match(batch.message, /requests\[0\]\.model/);
    });

    it('refuses a body that is not JSON, one too large, and a chunked one past the limit, in Google’s shape', async () => {
      const json = googleError(
        await send(url('/v1beta/models/gpt-4o-mini:generateContent'), { body: '{"contents": [', headers: goog() }),
        400,
        'INVALID_ARGUMENT',
      );
      assert.match(json.message, /could not parse the JSON body/);
      googleError(
        await send(url('/v1beta/models/gpt-4o-mini:generateContent'), { body: '[1,2]', headers: goog() }),
        400,
        'INVALID_ARGUMENT',
      );
      const large = ask('x'.repeat(300 * 1024));
      googleError(
        await send(url('/v1beta/models/gpt-4o-mini:generateContent'), { body: large, headers: goog() }),
        413,
        'INVALID_ARGUMENT',
      );
      // Chunked (no Content-Length): refused once what arrived passes the limit.
      const chunked = await new Promise<Sent>((resolve, reject) => {
        const target = new URL(url('/v1beta/models/gpt-4o-mini:generateContent'));
        const req = httpRequest(
          {
            host: target.hostname,
            port: target.port,
            path: target.pathname,
            method: 'POST',
            headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked', ...goog() },
          },
          (res) => {
            let text = '';
            res.on('data', (chunk: Buffer) => (text += chunk.toString()));
            res.on('end', () =>
              resolve({ status: res.statusCode!, headers: new Headers(res.headers as Record<string, string>), text }),
            );
          },
        );
        req.on('error', (error) => (/EPIPE|ECONNRESET/.test(String(error)) ? undefined : reject(error)));
        req.write('{"contents":[{"parts":[{"text":"');
        const piece = 'y'.repeat(64 * 1024);
        for (let i = 0; i < 6; i++) req.write(piece);
        req.end('"}]}]}');
      });
      googleError(chunked, 413, 'INVALID_ARGUMENT');
    });
  });

  describe('answers (through the worker)', () => {
    it('answers generateContent on both spellings, the model named as asked, billed and logged as gemini.generate', async () => {
      for (const path of ['/v1beta/models/my-gemini:generateContent', '/v1/models/my-gemini:generateContent']) {
        const sent = await send(url(path), {
          body: { ...ask('Hello'), systemInstruction: { parts: [{ text: 'Be brief.' }] } },
          headers: goog(),
        });
        assert.equal(sent.status, 200, sent.text);
        assert.match(sent.headers.get('content-type') ?? '', /application\/json/);
        const body = assertShape(generateContentResponseShape, JSON.parse(sent.text));
        assert.equal(body.modelVersion, 'my-gemini');
        assert.equal(body.candidates?.[0]?.content?.role, 'model');
        assert.ok((body.candidates?.[0]?.content?.parts?.[0]?.text ?? '').length > 0);
        assert.equal(body.candidates?.[0]?.finishReason, 'STOP');
        assert.ok((body.usageMetadata?.promptTokenCount ?? 0) > 0);
        const record = await requestRecord(gateway.url, key, sent.headers.get('x-request-id')!);
        assert.equal(record.endpoint, 'gemini.generate');
        assert.equal(record.status, 'completed');
        assert.equal(record.model, 'gpt-4o-mini');
      }
      const metrics = await (await fetch(url('/metrics'))).text();
      assert.match(metrics, /route="\/v1beta\/models\/\{model\}:generateContent"/);
      assert.ok(!metrics.includes('my-gemini:generateContent'), 'no raw path as a label');
    });

    it('streams ?alt=sse as data-only frames, Gemini CLI’s form', async () => {
      const sent = await send(url('/v1beta/models/gpt-4o-mini:streamGenerateContent?alt=sse'), {
        body: ask('Tell me a story'),
        headers: goog(),
      });
      assert.equal(sent.status, 200, sent.text);
      assert.match(sent.headers.get('content-type') ?? '', /^text\/event-stream/);
      const chunks = sseChunks(sent.text).map((chunk) => assertShape(generateContentResponseShape, chunk, 'chunk'));
      assert.ok(chunks.length > 1, 'several chunks');
      const text = chunks
        .map((chunk) => chunk.candidates?.[0]?.content?.parts?.map((part) => part.text ?? '').join('') ?? '')
        .join('');
      assert.ok(text.length > 0);
      assert.equal(chunks.at(-1)!.candidates?.[0]?.finishReason, 'STOP');
      assert.ok(chunks.every((chunk) => chunk.modelVersion === 'gpt-4o-mini'));
    });

    it('streams Google’s JSON array by default, on /v1 too', async () => {
      for (const path of [
        '/v1beta/models/gpt-4o-mini:streamGenerateContent',
        '/v1/models/gpt-4o-mini:streamGenerateContent?alt=json',
      ]) {
        const sent = await send(url(path), { body: ask('Tell me a story'), headers: goog() });
        assert.equal(sent.status, 200, sent.text);
        assert.match(sent.headers.get('content-type') ?? '', /^application\/json/);
        const chunks = (JSON.parse(sent.text) as unknown[]).map((chunk) =>
          assertShape(generateContentResponseShape, chunk, 'element'),
        );
        assert.ok(chunks.length > 1);
        assert.equal(chunks.at(-1)!.candidates?.[0]?.finishReason, 'STOP');
      }
    });

    it('counts tokens of contents and of a generateContentRequest', async () => {
      const plain = assertShape(
        countTokensResponseShape,
        JSON.parse(
          (
            await send(url('/v1beta/models/gpt-4o-mini:countTokens'), {
              body: ask('How many tokens is this?'),
              headers: goog(),
            })
          ).text,
        ),
      );
      assert.ok(plain.totalTokens > 0);
      const whole = await send(url('/v1/models/gpt-4o-mini:countTokens'), {
        body: {
          generateContentRequest: {
            model: 'models/gpt-4o-mini',
            ...ask('How many tokens is this?'),
            systemInstruction: { parts: [{ text: 'A long system instruction to count.' }] },
          },
        },
        headers: goog(),
      });
      assert.ok(assertShape(countTokensResponseShape, JSON.parse(whole.text)).totalTokens > plain.totalTokens);
    });

    it('embeds one content and a batch', async () => {
      const one = assertShape(
        embedContentResponseShape,
        JSON.parse(
          (
            await send(url('/v1beta/models/text-embedding-3-small:embedContent'), {
              body: { content: { parts: [{ text: 'Hello' }] } },
              headers: goog(),
            })
          ).text,
        ),
      );
      assert.ok(one.embedding.values.length > 0);
      const batch = await send(url('/v1/models/text-embedding-3-small:batchEmbedContents'), {
        body: {
          requests: ['a', 'b', 'c'].map((text) => ({
            model: 'models/text-embedding-3-small',
            content: { parts: [{ text }] },
            outputDimensionality: 64,
          })),
        },
        headers: goog(),
      });
      const embeddings = assertShape(batchEmbedContentsResponseShape, JSON.parse(batch.text)).embeddings;
      assert.equal(embeddings.length, 3);
      assert.ok(embeddings.every((embedding) => embedding.values.length === 64));
    });

    it('serves a repeated request from the cache in each form, echoing the model as asked', async () => {
      const body = ask(`A cached question ${Date.now()}`);
      const headers = { ...goog(), 'cache-control': 'max-age=600' };
      const miss = await send(url('/v1beta/models/gpt-4o-mini:generateContent'), { body, headers });
      assert.equal(miss.status, 200, miss.text);
      assert.match(miss.headers.get('cache-status') ?? '', /fwd=miss; stored/);
      const first = JSON.parse(miss.text) as GenerateContentResponse;
      await waitFor(
        async () =>
          (await send(url('/v1beta/models/gpt-4o-mini:generateContent'), { body, headers: { ...headers } })).headers
            .get('cache-status')
            ?.includes('hit') ?? false,
        5000,
        'the entry stored',
      );

      const hit = await send(url('/v1beta/models/my-gemini:generateContent'), { body, headers });
      assert.match(hit.headers.get('cache-status') ?? '', /hit/);
      const again = JSON.parse(hit.text) as GenerateContentResponse;
      assert.deepEqual(again.candidates, first.candidates);
      assert.equal(again.modelVersion, 'my-gemini');
      assert.notEqual(again.responseId, first.responseId);

      const sse = await send(url('/v1beta/models/gpt-4o-mini:streamGenerateContent?alt=sse'), { body, headers });
      assert.match(sse.headers.get('cache-status') ?? '', /hit/);
      assert.match(sse.headers.get('content-type') ?? '', /^text\/event-stream/);
      const sseText = sseChunks(sse.text)
        .map(
          (chunk) =>
            (chunk as GenerateContentResponse).candidates?.[0]?.content?.parts
              ?.map((part) => part.text ?? '')
              .join('') ?? '',
        )
        .join('');
      assert.equal(sseText, first.candidates?.[0]?.content?.parts?.map((part) => part.text ?? '').join(''));

      const array = await send(url('/v1beta/models/gpt-4o-mini:streamGenerateContent'), { body, headers });
      assert.match(array.headers.get('cache-status') ?? '', /hit/);
      assert.match(array.headers.get('content-type') ?? '', /^application\/json/);
      const elements = JSON.parse(array.text) as GenerateContentResponse[];
      assert.ok(elements.length > 0);
      assert.ok(elements.every((element) => element.modelVersion === 'gpt-4o-mini'));
    });

    it('lets identical streams share one call, each client in its own form', async () => {
      const body = ask(`A question asked four times at once ${Date.now()}`);
      const headers = { ...goog(), 'cache-control': 'max-age=600' };
      const forms = ['sse', 'array', 'sse', 'array'] as const;
      const sent = await Promise.all(
        forms.map((form) =>
          send(url(`/v1beta/models/gpt-4o-mini:streamGenerateContent${form === 'sse' ? '?alt=sse' : ''}`), {
            body,
            headers,
          }),
        ),
      );
      const texts = sent.map((answer, i) => {
        assert.equal(answer.status, 200, answer.text);
        const chunks = (forms[i] === 'sse' ? sseChunks(answer.text) : (JSON.parse(answer.text) as unknown[])).map(
          (chunk) => assertShape(generateContentResponseShape, chunk, `${forms[i]} chunk`),
        );
        assert.equal(chunks.at(-1)!.candidates?.[0]?.finishReason, 'STOP');
        return chunks
          .map((chunk) => chunk.candidates?.[0]?.content?.parts?.map((part) => part.text ?? '').join('') ?? '')
          .join('');
      });
      assert.ok(
        texts.every((text) => text === texts[0] && text.length > 0),
        'one answer for all',
      );
      const leaders = sent.filter((answer) => /fwd=miss; stored/.test(answer.headers.get('cache-status') ?? ''));
      assert.equal(leaders.length, 1, sent.map((answer) => answer.headers.get('cache-status')).join(' | '));
    });
  });
});

describe('Google’s Gemini API on an api whose jobs wait (no worker): deadlines, limits, drain', () => {
  let api: GatewayProcess;
  let redis: Redis;
  let key: string;

  before(async () => {
    const fresh = await freshRedis(13);
    redis = fresh.redis;
    key = (await paidAccountKey(redis, 'unlimited')).key;
    api = await startGateway({
      role: 'api',
      env: {
        REDIS_URL: fresh.url,
        REQUEST_DEADLINE_MS: '2500',
        SSE_KEEPALIVE_MS: '100',
        QUEUE_MAX_WAITING: '2',
        SHUTDOWN_GRACE_MS: '3000',
      },
    });
  });

  after(async () => {
    await api?.stop();
    redis?.disconnect();
  });

  const url = (path: string) => `${api.url}${path}`;
  const waiting = () =>
    redis.zcard('bull:{chat}:prioritized').then(async (n) => n + (await redis.llen('bull:{chat}:wait')));

  // First: the waiting room counts an account's waiting jobs as of its last reading, and these are the first to wait.
  it(
    'refuses past the waiting room and past the key’s rate 429 RESOURCE_EXHAUSTED with retryDelay and the rate ' +
      'headers',
    async () => {
      const controllers = [new AbortController(), new AbortController()];
      const held = controllers.map((controller) =>
        fetch(url('/v1beta/models/gpt-4o-mini:generateContent'), {
          method: 'POST',
          signal: controller.signal,
          headers: { 'x-goog-api-key': key, 'content-type': 'application/json' },
          body: JSON.stringify(ask('wait')),
        }).catch(() => undefined),
      );
      await waitFor(async () => (await waiting()) === 2, 5000, 'two waiting jobs');
      await new Promise((resolve) => setTimeout(resolve, 800));
      const full = await send(url('/v1beta/models/gpt-4o-mini:generateContent'), {
        body: ask('one too many'),
        headers: { 'x-goog-api-key': key },
      });
      const error = googleError(full, 429, 'RESOURCE_EXHAUSTED');
      assert.equal(full.headers.get('retry-after'), '1');
      assert.equal(retryDelay(error), '1s');
      for (const controller of controllers) controller.abort();
      await Promise.all(held);

      const limited = (await paidAccountKey(redis, 'unlimited', { rpm: 1 })).key;
      const first = new AbortController();
      const waitingOne = fetch(url('/v1beta/models/gpt-4o-mini:generateContent'), {
        method: 'POST',
        signal: first.signal,
        headers: { 'x-goog-api-key': limited, 'content-type': 'application/json' },
        body: JSON.stringify(ask('wait')),
      }).catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, 300));
      const second = await send(url('/v1beta/models/gpt-4o-mini:generateContent'), {
        body: ask('again'),
        headers: { 'x-goog-api-key': limited },
      });
      const rate = googleError(second, 429, 'RESOURCE_EXHAUSTED');
      assert.ok(Number(second.headers.get('retry-after')) >= 1);
      assert.equal(retryDelay(rate), `${second.headers.get('retry-after')}s`);
      assert.equal(second.headers.get('x-ratelimit-limit-requests'), '1');
      first.abort();
      await waitingOne;
    },
  );

  it('answers a request past its deadline 504 DEADLINE_EXCEEDED', async () => {
    googleError(
      await send(url('/v1beta/models/gpt-4o-mini:generateContent'), {
        body: ask('wait'),
        headers: { 'x-goog-api-key': key },
      }),
      504,
      'DEADLINE_EXCEEDED',
    );
  });

  it('keeps a waiting sse stream alive with blank lines, then ends it with a Google error event', async () => {
    const sent = await send(url('/v1beta/models/gpt-4o-mini:streamGenerateContent?alt=sse'), {
      body: ask('wait'),
      headers: { 'x-goog-api-key': key },
    });
    assert.equal(sent.status, 200);
    assert.match(sent.headers.get('content-type') ?? '', /^text\/event-stream/);
    assert.match(sent.text, /^\n+data: \{"error":/);
    const [event] = sseChunks(sent.text) as GoogleErrorBody[];
    assert.equal(assertShape(errorBodyShape, event).error.status, 'DEADLINE_EXCEEDED');
  });

  it('keeps a waiting array stream alive with whitespace, then ends it as an array holding the error', async () => {
    const sent = await send(url('/v1/models/gpt-4o-mini:streamGenerateContent'), {
      body: ask('wait'),
      headers: { 'x-goog-api-key': key },
    });
    assert.equal(sent.status, 200);
    assert.match(sent.headers.get('content-type') ?? '', /^application\/json/);
    assert.match(sent.text, /^\n+\[\{"error":/);
    const [element] = JSON.parse(sent.text) as GoogleErrorBody[];
    assert.equal(assertShape(errorBodyShape, element).error.code, 504);
  });

  it('refuses a request the balance cannot cover 429 RESOURCE_EXHAUSTED with a QuotaFailure', async () => {
    const poor = (await paidAccountKey(redis, 1)).key;
    const error = googleError(
      await send(url('/v1beta/models/gpt-4o-mini:generateContent'), {
        body: { ...ask('hi'), generationConfig: { maxOutputTokens: 1000 } },
        headers: { 'x-goog-api-key': poor },
      }),
      429,
      'RESOURCE_EXHAUSTED',
    );
    assert.ok(error.details?.some((detail) => detail['@type'] === 'type.googleapis.com/google.rpc.QuotaFailure'));
  });

  it('answers 503 UNAVAILABLE while draining, with retryDelay', async () => {
    const controller = new AbortController();
    const inFlight = fetch(url('/v1beta/models/gpt-4o-mini:generateContent'), {
      method: 'POST',
      signal: controller.signal,
      headers: { 'x-goog-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify(ask('wait')),
    }).catch(() => undefined);
    await waitFor(async () => (await waiting()) >= 1, 5000, 'a waiting job');
    api.proc.kill('SIGTERM');
    await new Promise((resolve) => setTimeout(resolve, 300));
    const refused = await send(url('/v1beta/models/gpt-4o-mini:generateContent'), {
      body: ask('during the drain'),
      headers: { 'x-goog-api-key': key },
    });
    const error = googleError(refused, 503, 'UNAVAILABLE');
    assert.equal(retryDelay(error), '1s');
    controller.abort();
    await inFlight;
  });
});
