import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import { PNG } from 'pngjs';
import { readKeySpend } from '../../shared/money/billing.js';
import { loadCatalog } from '../../shared/catalog.js';
import { PriceList } from '../../shared/money/pricing.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { createFakeOpenAIImages, readFakeMultipart } from '../support/fake-openai-images.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';
import { createKey, freshRedis, paidAccountKey, startGateway, type GatewayProcess } from '../support/gateway.js';
import { waitForUsage } from '../support/record.js';

/*
 * POST /v1/images/variations: one square PNG in, n images of a size out,
 * through the image queue, for dall-e-2 (behind the strict fake OpenAI) and
 * the mock; billed as dall-e-2 generations of that size; refused, naming
 * `model`, for a model without variations.
 */

const prices = new PriceList(loadCatalog().all());

function png(width: number, height: number): Buffer {
  const image = new PNG({ width, height });
  image.data.fill(200);
  return PNG.sync.write(image);
}

const pngSize = (bytes: Buffer) => ({ width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) });

function expectBadRequest(error: unknown, param: string): void {
  assert.ok(error instanceof OpenAI.BadRequestError, String(error));
  assert.equal(error.status, 400);
  assert.equal(error.param, param, error.message);
}

/** A request's usage record, once its worker has settled it. */
async function usageOf(redis: Redis, requestId: string): Promise<{ cost_micros: number; images: number }> {
  return waitForUsage(redis, (r) => r.request_id === requestId, 5000);
}

describe('image variations', () => {
  let redis: Redis;
  let fake: FakeOpenAI;
  let gateway: GatewayProcess;
  let offline: GatewayProcess;
  let client: OpenAI;
  let mockClient: OpenAI;
  let keyId: string;
  let accountId: string;
  const keySpend = async () => (await readKeySpend(redis, accountId, keyId))!;

  before(async () => {
    fake = await startFakeOpenAI();
    fake.setDefault(createFakeOpenAIImages({ apiKey: 'sk-variations-vendor' }));
    const fresh = await freshRedis(8);
    redis = fresh.redis;
    const key = await paidAccountKey(redis, 10_000_000);
    keyId = key.id;
    accountId = key.account;
    // The offline gateway has a Redis database of its own: on a shared one its workers would take the other's jobs.
    const apart = await freshRedis(9);
    const offlineKey = (await createKey(apart.redis, 'variations-offline')).key;
    apart.redis.disconnect();
    [gateway, offline] = await Promise.all([
      startGateway({
        env: {
          REDIS_URL: fresh.url,
          OPENAI_API_KEY: 'sk-variations-vendor',
          OPENAI_BASE_URL: fake.url,
          MOCK_VENDOR: 'on',
        },
      }),
      startGateway({ env: { REDIS_URL: apart.url } }),
    ]);
    client = gateway.client(key.key, { timeout: 30_000 });
    mockClient = offline.client(offlineKey, { timeout: 30_000 });
  });

  after(async () => {
    await Promise.all([gateway?.stop(), offline?.stop()]);
    await fake?.close();
    redis?.disconnect();
  });

  it('varies a PNG with dall-e-2: the vendor gets its exact multipart request, the client an ImagesResponse', async () => {
    const before = fake.requests.length;
    const answer = await client.images.createVariation({
      image: await toFile(png(64, 64), 'photo.png', { type: 'image/png' }),
      model: 'dall-e-2',
      n: 2,
      size: '256x256',
      response_format: 'b64_json',
      user: 'u-7',
    });
    assert.equal(answer.data!.length, 2);
    for (const image of answer.data!)
      assert.equal(Buffer.from(image.b64_json!, 'base64').subarray(1, 4).toString('latin1'), 'PNG');
    assertMatchesSchema('ImagesResponse', answer, 'variation');
    const sent = fake.requests.slice(before).find((request) => request.path === '/v1/images/variations');
    assert.ok(sent, 'the vendor was asked for variations');
    const form = await readFakeMultipart(sent);
    assert.deepEqual(
      [form.get('model'), form.get('n'), form.get('size'), form.get('user'), form.get('response_format')],
      ['dall-e-2', '2', '256x256', 'u-7', 'b64_json'],
    );
    const image = form.get('image') as File;
    assert.equal(image.type, 'image/png');
    assert.deepEqual(pngSize(Buffer.from(await image.arrayBuffer())), { width: 64, height: 64 });
  });

  it('answers a signed URL the client can fetch', async () => {
    const answer = await client.images.createVariation({
      image: await toFile(png(32, 32), 'a.png', { type: 'image/png' }),
      model: 'dall-e-2',
      response_format: 'url',
    });
    const url = answer.data![0]!.url!;
    assert.match(url, /\/v1\/blobs\//);
    const file = await fetch(url);
    assert.equal(file.status, 200);
    assert.equal(file.headers.get('content-type'), 'image/png');
  });

  it('bills a variation as dall-e-2 generations of its size, once', async () => {
    const answer = await fetch(`${gateway.url}/v1/images/variations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${(client as unknown as { apiKey: string }).apiKey}` },
      body: (() => {
        const form = new FormData();
        form.set('image', new Blob([new Uint8Array(png(16, 16))], { type: 'image/png' }), 'x.png');
        form.set('model', 'dall-e-2');
        form.set('n', '3');
        form.set('size', '512x512');
        form.set('response_format', 'b64_json');
        return form;
      })(),
    });
    assert.equal(answer.status, 200, await answer.clone().text());
    const record = await usageOf(redis, answer.headers.get('x-request-id')!);
    const generation = prices.costMicros('dall-e-2', {
      inputTokens: 0,
      cachedTokens: 0,
      outputTokens: 0,
      images: 3,
      audioSeconds: 0,
      videoSeconds: 0,
      imageSize: '512x512',
    });
    assert.equal(generation, 3 * 18_000);
    assert.deepEqual([record.images, record.cost_micros], [3, generation]);
    assert.equal((await keySpend()).reservedMicros, 0, 'nothing left reserved');
  });

  it('an unsized variation is the 1024x1024 OpenAI makes, billed and spent as a dall-e-2 generation of it', async () => {
    const spentBefore = (await keySpend()).spentMicros;
    const before = fake.requests.length;
    const varied = await client.images
      .createVariation({ image: await toFile(png(24, 24), 'a.png', { type: 'image/png' }), n: 2 })
      .withResponse();
    const sent = fake.requests.slice(before).find((request) => request.path === '/v1/images/variations')!;
    const form = await readFakeMultipart(sent);
    assert.deepEqual([form.get('model'), form.get('size'), form.get('n')], ['dall-e-2', '1024x1024', '2']);
    const generated = await client.images
      .generate({ model: 'dall-e-2', prompt: 'a lighthouse', n: 2, size: '1024x1024' })
      .withResponse();
    const [variation, generation] = await Promise.all([
      usageOf(redis, varied.response.headers.get('x-request-id')!),
      usageOf(redis, generated.response.headers.get('x-request-id')!),
    ]);
    assert.equal(variation.images, 2);
    assert.equal(variation.cost_micros, 2 * 20_000);
    assert.equal(variation.cost_micros, generation.cost_micros);
    assert.equal((await keySpend()).spentMicros - spentBefore, variation.cost_micros + generation.cost_micros);
    assert.equal((await keySpend()).reservedMicros, 0, 'nothing left reserved');
  });

  it('serves the mock offline, dall-e-2 too, deterministic per upload', async () => {
    const image = png(40, 40);
    const first = await mockClient.images.createVariation({
      image: await toFile(image, 'a.png', { type: 'image/png' }),
      model: 'mock-image',
      size: '512x512',
      response_format: 'b64_json',
    });
    const again = await mockClient.images.createVariation({
      image: await toFile(image, 'a.png', { type: 'image/png' }),
      model: 'mock-image',
      size: '512x512',
      response_format: 'b64_json',
    });
    const bytes = Buffer.from(first.data![0]!.b64_json!, 'base64');
    assert.deepEqual(pngSize(bytes), { width: 512, height: 512 });
    assert.equal(first.data![0]!.b64_json, again.data![0]!.b64_json);
    const standIn = await mockClient.images.createVariation({
      image: await toFile(image, 'a.png', { type: 'image/png' }),
      model: 'dall-e-2',
      n: 2,
    });
    assert.equal(standIn.data!.length, 2);
    assert.ok(standIn.data![0]!.url, 'dall-e-2 answers URLs by default');
  });

  it('refuses a model without variations, naming model, before any vendor call', async () => {
    const before = fake.requests.length;
    for (const model of ['dall-e-3', 'gpt-image-1', 'gpt-4o-mini']) {
      const error = await client.images
        .createVariation({ image: await toFile(png(16, 16), 'a.png', { type: 'image/png' }), model })
        .catch((caught: unknown) => caught);
      expectBadRequest(error, 'model');
    }
    const unknown = await client.images
      .createVariation({ image: await toFile(png(16, 16), 'a.png', { type: 'image/png' }), model: 'no-such-model' })
      .catch((caught: unknown) => caught);
    assert.ok(unknown instanceof OpenAI.NotFoundError);
    assert.equal(fake.requests.length, before);
  });

  it(
    'refuses what the endpoint does not take: a JPEG, a non-square PNG, a wrong size, n past 10, n of 0, 4 MB, no ' +
      'image, a bad response_format, a mask, two images',
    async () => {
      const sentBefore = fake.requests.filter((request) => request.path === '/v1/images/variations').length;
      const jpeg = Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 16, 0x4a, 0x46, 0x49, 0x46, 0, 1]);
      expectBadRequest(
        await client.images
          .createVariation({ image: await toFile(jpeg, 'a.jpg', { type: 'image/jpeg' }), model: 'dall-e-2' })
          .catch((e: unknown) => e),
        'image',
      );
      expectBadRequest(
        await client.images
          .createVariation({ image: await toFile(png(32, 16), 'a.png', { type: 'image/png' }), model: 'dall-e-2' })
          .catch((e: unknown) => e),
        'image',
      );
      expectBadRequest(
        await client.images
          .createVariation({
            image: await toFile(png(16, 16), 'a.png', { type: 'image/png' }),
            model: 'dall-e-2',
            size: '1792x1024' as '1024x1024',
          })
          .catch((e: unknown) => e),
        'size',
      );
      expectBadRequest(
        await client.images
          .createVariation({
            image: await toFile(png(16, 16), 'a.png', { type: 'image/png' }),
            model: 'dall-e-2',
            n: 11,
          })
          .catch((e: unknown) => e),
        'n',
      );
      expectBadRequest(
        await client.images
          .createVariation({
            image: await toFile(png(16, 16), 'a.png', { type: 'image/png' }),
            model: 'dall-e-2',
            n: 0,
          })
          .catch((e: unknown) => e),
        'n',
      );
      const fourMegabytes = Buffer.concat([png(16, 16), Buffer.alloc(4 * 1024 * 1024)]).subarray(0, 4 * 1024 * 1024);
      const large = await client.images
        .createVariation({ image: await toFile(fourMegabytes, 'a.png', { type: 'image/png' }), model: 'dall-e-2' })
        .catch((e: unknown) => e);
      expectBadRequest(large, 'image');
      assert.equal((large as InstanceType<typeof OpenAI.BadRequestError>).code, 'image_too_large');
      const form = new FormData();
      form.set('model', 'dall-e-2');
      const post = async (body: FormData) => {
        const answer = await fetch(`${gateway.url}/v1/images/variations`, {
          method: 'POST',
          headers: { authorization: `Bearer ${(client as unknown as { apiKey: string }).apiKey}` },
          body,
        });
        assert.equal(answer.status, 400);
        return ((await answer.json()) as { error: { param: string } }).error.param;
      };
      assert.equal(await post(form), 'image');
      const part = () => new Blob([new Uint8Array(png(16, 16))], { type: 'image/png' });
      form.append('image', part(), 'a.png');
      form.set('response_format', 'png');
      assert.equal(await post(form), 'response_format');
      form.delete('response_format');
      form.append('mask', part(), 'mask.png');
      assert.equal(await post(form), 'mask', 'a variation takes no mask');
      form.delete('mask');
      form.append('image', part(), 'b.png');
      assert.equal(await post(form), 'image', 'one image, not two');
      assert.equal(
        fake.requests.filter((request) => request.path === '/v1/images/variations').length,
        sentBefore,
        'none reached the vendor',
      );
    },
  );

  it('passes a vendor refusal through as the vendor said it', async () => {
    fake.enqueue({
      status: 400,
      json: {
        error: {
          message: 'Your request was rejected as a result of our safety system.',
          type: 'invalid_request_error',
          param: null,
          code: 'content_policy_violation',
        },
      },
    });
    const error = await client.images
      .createVariation({ image: await toFile(png(16, 16), 'a.png', { type: 'image/png' }), model: 'dall-e-2' })
      .catch((caught: unknown) => caught);
    assert.ok(error instanceof OpenAI.BadRequestError, String(error));
    assert.equal(error.code, 'content_policy_violation');
  });

  it(
    "passes the vendor's own 400 through with its param: a field the gateway forwards as sent and OpenAI does not " +
      'take',
    async () => {
      const before = fake.requests.length;
      const form = new FormData();
      form.set('image', new Blob([new Uint8Array(png(16, 16))], { type: 'image/png' }), 'x.png');
      form.set('prompt', 'a cat');
      const answer = await fetch(`${gateway.url}/v1/images/variations`, {
        method: 'POST',
        headers: { authorization: `Bearer ${(client as unknown as { apiKey: string }).apiKey}` },
        body: form,
      });
      assert.equal(answer.status, 400);
      const { error } = (await answer.json()) as { error: { param: string; type: string } };
      assert.deepEqual([error.type, error.param], ['invalid_request_error', 'prompt']);
      assert.equal(
        fake.requests.slice(before).filter((request) => request.path === '/v1/images/variations').length,
        1,
        'a 400 is not retried',
      );
    },
  );

  it('is listed among the catalog capabilities of dall-e-2 and the mock only', () => {
    const varying = loadCatalog()
      .all()
      .filter((model) => model.supports_variations)
      .map((model) => model.id)
      .sort();
    assert.deepEqual(varying, ['dall-e-2', 'mock-image']);
  });
});
