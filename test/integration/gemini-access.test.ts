import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { GoogleGenAI } from '@google/genai';
import { paidAccountKey, type GatewayProcess } from '../support/gateway.js';
import type { FakeOpenAI } from '../support/fake-openai.js';
import { geminiError, type FakeGemini } from '../support/fake-gemini.js';
import { startVendorGateway, type VendorGateway } from '../support/vendor-gateway.js';
import {
  assertGoogleError,
  assertShape,
  generateContentResponseShape,
  listModelsResponseShape,
  modelShape,
  retryInfoShape,
} from '../support/gemini-shapes.js';

/**
 * Who may call Google's Gemini API on the gateway, and what a refusal looks like: the key in each form Google's
 * clients send it (`x-goog-api-key`, `?key=`, `Authorization: Bearer`), the model list Google's SDK pages through,
 * and every error status a client of Google's reads (400 INVALID_ARGUMENT, 401/403, 404 NOT_FOUND, 429
 * RESOURCE_EXHAUSTED with its RetryInfo, 503 UNAVAILABLE), each body checked against Google's published error shape.
 * The vendors behind are the strict fakes; generation itself is `gemini.test.ts`.
 */

const GEMINI_KEY = 'gemini-test-key';
const ask = (text: string) => [{ role: 'user', parts: [{ text }] }];

describe("Google's Gemini API: keys, the model list and errors", () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let key: { id: string; key: string };
  let openai: FakeOpenAI;
  let gemini: FakeGemini;
  let vendorGateway: VendorGateway;
  let ai: GoogleGenAI;
  let aiBeta: GoogleGenAI;
  /** The text of the last answer the SDK got, as it came over the wire. */
  let lastText: Promise<string> = Promise.resolve('');
  let lastUrl = '';

  before(async () => {
    vendorGateway = await startVendorGateway({
      db: 10,
      gemini: { apiKey: GEMINI_KEY },
      env: { JOB_ATTEMPTS: '1' },
      prepare: async (ready) => {
        ({ openai, gemini, redis } = ready);
        key = await paidAccountKey(redis, 50_000_000);
      },
    });
    gateway = vendorGateway.gateway;
    const recordingFetch: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      lastUrl = String(input instanceof Request ? input.url : input);
      lastText = response.clone().text();
      return response;
    };
    const options = { baseUrl: gateway.url, fetch: recordingFetch, timeout: 20_000 };
    ai = new GoogleGenAI({ apiKey: key.key, httpOptions: options });
    aiBeta = new GoogleGenAI({ apiKey: key.key, apiVersion: 'v1beta', httpOptions: options });
  });

  after(async () => {
    await vendorGateway?.close();
  });

  const post = (path: string, body: unknown, headers: Record<string, string> = { 'x-goog-api-key': key.key }) =>
    fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
  const lastWire = async () => ({ url: lastUrl, text: await lastText });

  it('models.list pages through the catalog in Google’s shape, and models.get names one model', async () => {
    for (const client of [ai, aiBeta]) {
      const names: string[] = [];
      const pager = await client.models.list({ config: { pageSize: 40 } });
      for await (const model of pager) names.push(model.name!);
      const wire = await lastWire();
      assert.match(new URL(wire.url).pathname, /^\/v1(beta)?\/models$/);
      assertShape(listModelsResponseShape, JSON.parse(wire.text), 'a models page');
      assert.ok(names.length > 40, `more than one page: ${names.length}`);
      assert.equal(new Set(names).size, names.length, 'no model twice across pages');
      for (const name of [
        'models/gpt-4o-mini',
        'models/claude-sonnet-4-6',
        'models/gemini-2.5-flash',
        'models/gemini-embedding-001',
      ])
        assert.ok(names.includes(name), name);
      const one = await client.models.get({ model: 'gemini-2.5-flash' });
      const body = assertShape(modelShape, JSON.parse((await lastWire()).text), 'a model');
      assert.equal(body.name, 'models/gemini-2.5-flash');
      assert.equal(one.name, 'models/gemini-2.5-flash');
      assert.ok(body.supportedGenerationMethods?.includes('generateContent'));
    }
    const missing = await fetch(`${gateway.url}/v1beta/models/no-such-model`, {
      headers: { 'x-goog-api-key': key.key },
    });
    await assertGoogleError(missing, 404, 'NOT_FOUND');
  });

  it('takes the key as x-goog-api-key, as ?key= and as Authorization: Bearer', async () => {
    const body = { contents: ask('Hello') };
    for (const [what, path, headers] of [
      ['x-goog-api-key', '/v1beta/models/gpt-4o-mini:generateContent', { 'x-goog-api-key': key.key }],
      ['?key=', `/v1beta/models/gpt-4o-mini:generateContent?key=${encodeURIComponent(key.key)}`, {}],
      ['Bearer', '/v1beta/models/gpt-4o-mini:generateContent', { authorization: `Bearer ${key.key}` }],
      ['?key= on /v1', `/v1/models/gpt-4o-mini:generateContent?key=${encodeURIComponent(key.key)}`, {}],
    ] as const) {
      const response = await post(path, body, headers);
      assert.equal(response.status, 200, `${what}: ${await response.clone().text()}`);
      assert.equal(assertShape(generateContentResponseShape, await response.json()).modelVersion, 'gpt-4o-mini', what);
    }
    // To Gemini goes the gateway's key, never the client's, nor its ?key=.
    assert.equal(
      (await post(`/v1beta/models/gemini-2.5-flash:generateContent?key=${encodeURIComponent(key.key)}`, body, {}))
        .status,
      200,
    );
    const forwarded = gemini.requests.at(-1)!;
    assert.equal(forwarded.headers['x-goog-api-key'], GEMINI_KEY);
    assert.ok(!forwarded.path.includes('key=') && !forwarded.rawBody.includes(key.key), forwarded.path);
    const listed = await fetch(`${gateway.url}/v1/models?pageSize=5`, { headers: { 'x-goog-api-key': key.key } });
    assertShape(listModelsResponseShape, await listed.json(), 'GET /v1/models with x-goog-api-key');
  });

  it('400 INVALID_ARGUMENT: a body Google would refuse, and Gemini’s own refusal relayed', async () => {
    await assertGoogleError(
      await post('/v1beta/models/gpt-4o-mini:generateContent', { contents: 'hello' }),
      400,
      'INVALID_ARGUMENT',
    );
    await assertGoogleError(
      await post('/v1beta/models/gpt-4o-mini:generateContent', { generationConfig: { temperature: 0.5 } }),
      400,
      'INVALID_ARGUMENT',
    );
    await assertGoogleError(
      await post('/v1beta/models/gemini-2.5-flash:generateContent', {
        contents: ask('x'),
        generationConfig: { temperature: 'hot' },
      }),
      400,
      'INVALID_ARGUMENT',
    );
    gemini.enqueue({
      status: 400,
      json: geminiError(400, 'INVALID_ARGUMENT', 'Request contains an invalid argument.'),
    });
    const relayed = await assertGoogleError(
      await post('/v1beta/models/gemini-2.5-flash:generateContent', { contents: ask('x') }),
      400,
      'INVALID_ARGUMENT',
    );
    assert.match(relayed.message, /Request contains an invalid argument/);
    // The SDK reads it as its ApiError.
    await assert.rejects(
      ai.models.generateContent({ model: 'gpt-4o-mini', contents: [{ role: 'user', parts: [] }] }),
      (error: { status?: number }) => error.status === 400,
    );
  });

  it(
    '401 UNAUTHENTICATED or 403 PERMISSION_DENIED without a key or with a wrong one, and 403 PERMISSION_DENIED for ' +
      'a model the key may not use',
    async () => {
      const body = { contents: ask('Hello') };
      // A key missing or unknown: Google's clients take either refusal (Google itself answers a missing key 403).
      for (const headers of [
        {},
        { 'x-goog-api-key': 'sk-not-a-key' },
        { authorization: 'Bearer sk-not-a-key' },
      ] as Array<Record<string, string>>) {
        const refused = await post('/v1beta/models/gpt-4o-mini:generateContent', body, headers);
        if (refused.status === 401) await assertGoogleError(refused, 401, 'UNAUTHENTICATED');
        else await assertGoogleError(refused, 403, 'PERMISSION_DENIED');
      }
      const limited = await paidAccountKey(redis, 1_000_000, { models: ['gpt-4o-mini'] });
      await assertGoogleError(
        await post('/v1beta/models/claude-sonnet-4-6:generateContent', body, { 'x-goog-api-key': limited.key }),
        403,
        'PERMISSION_DENIED',
      );
    },
  );

  it(
    '404 NOT_FOUND for a model the gateway does not serve, a method Google does not have, or a model of another ' +
      'kind',
    async () => {
      const body = { contents: ask('Hello') };
      const unknown = await assertGoogleError(
        await post('/v1beta/models/no-such-model:generateContent', body),
        404,
        'NOT_FOUND',
      );
      assert.match(unknown.message, /models\/no-such-model/);
      await assertGoogleError(await post('/v1beta/models/gpt-4o-mini:fooBar', body), 404, 'NOT_FOUND');
      await assertGoogleError(
        await post('/v1beta/models/text-embedding-3-small:generateContent', body),
        404,
        'NOT_FOUND',
      );
      await assert.rejects(
        ai.models.generateContent({ model: 'no-such-model', contents: ask('x') }),
        (error: { status?: number }) => error.status === 404,
      );
    },
  );

  it('429 RESOURCE_EXHAUSTED past the key’s rate, with a RetryInfo retryDelay, and past the balance', async () => {
    const body = { contents: ask('Hello') };
    const slow = await paidAccountKey(redis, 1_000_000, { rpm: 1 });
    assert.equal(
      (await post('/v1beta/models/gpt-4o-mini:generateContent', body, { 'x-goog-api-key': slow.key })).status,
      200,
    );
    const limited = await post('/v1beta/models/gpt-4o-mini:generateContent', body, { 'x-goog-api-key': slow.key });
    const retryAfter = limited.headers.get('retry-after');
    const error = await assertGoogleError(limited, 429, 'RESOURCE_EXHAUSTED');
    const retry = error.details?.find((detail) => detail['@type'] === 'type.googleapis.com/google.rpc.RetryInfo');
    const info = assertShape(retryInfoShape, retry, 'the RetryInfo detail');
    assert.ok(retryAfter !== null, 'Retry-After too');
    assert.equal(info.retryDelay, `${retryAfter}s`);
    const broke = await paidAccountKey(redis, 0);
    await assertGoogleError(
      await post('/v1beta/models/gpt-4o-mini:generateContent', body, { 'x-goog-api-key': broke.key }),
      429,
      'RESOURCE_EXHAUSTED',
    );
  });

  it('503 UNAVAILABLE when the vendor behind the model has no quota left', async () => {
    openai.enqueue({
      status: 429,
      json: {
        error: {
          message: 'You exceeded your current quota.',
          type: 'insufficient_quota',
          param: null,
          code: 'insufficient_quota',
        },
      },
    });
    await assertGoogleError(
      await post('/v1beta/models/gpt-4o-mini:generateContent', { contents: ask('Hello') }),
      503,
      'UNAVAILABLE',
    );
  });
});
