import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import { pino } from 'pino';
import {
  checkImageRequest,
  checkVariable,
  checkVariationUpload,
  variationMaxBytes,
} from '../../api/requests/image-rules.js';
import { parseBody } from '../../api/http/request-body.js';
import { loadCatalog } from '../../shared/catalog.js';
import type { EndpointRequest } from '../../shared/endpoints.js';
import { GatewayError } from '../../shared/errors.js';
import { PriceList } from '../../shared/money/pricing.js';
import {
  imageGenerationRequestSchema,
  imageVariationFieldsSchema,
  variationSizes,
} from '../../shared/schemas/images.js';
import type { ImageVariationInput } from '../../shared/schemas/media-inputs.js';
import { LocalBlobStore } from '../../storage/local-blob-store.js';
import { uploadKeys } from '../../storage/upload-keys.js';
import { Meter, meter } from '../../workers/settlement.js';
import { mockAdapter } from '../../workers/vendors/mock/index.js';
import { encodeGradientPng } from '../../workers/vendors/mock/png.js';
import { openaiAdapter } from '../../workers/vendors/openai/index.js';
import { adapters } from '../../workers/vendors/registry.js';
import type { BlobRef, MediaContext } from '../../workers/vendors/types.js';
import { gatewayError } from '../support/assertions.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { createFakeOpenAIImages, FAKE_IMAGE_PNG, readFakeMultipart } from '../support/fake-openai-images.js';
import { loadConfig } from '../../shared/config.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';

const http = createVendorHttp(loadConfig({}));

/*
 * The pure parts of POST /v1/images/variations: its fields, its upload rules,
 * its price, the OpenAI and mock adapters, and the fake OpenAI's own
 * strictness (the integration test trusts the fake to refuse what OpenAI would).
 */

const KEY = 'sk-test-variations-0123456789';
const log = pino({ level: 'silent' });
const catalog = loadCatalog();
const prices = new PriceList(catalog.all());
const model = (id: string) => catalog.get(id)!;

const square = encodeGradientPng(8, 8, [
  [255, 0, 0],
  [0, 255, 0],
  [0, 0, 255],
  [9, 9, 9],
]);
const other = encodeGradientPng(8, 8, [
  [1, 2, 3],
  [4, 5, 6],
  [7, 8, 9],
  [200, 100, 50],
]);
const wide = encodeGradientPng(16, 8, [
  [0, 0, 0],
  [0, 0, 0],
  [0, 0, 0],
  [0, 0, 0],
]);
const jpeg = Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 16, 0x4a, 0x46, 0x49, 0x46, 0, 1]);
const webp = Buffer.from('RIFF\u0000\u0000\u0000\u0000WEBPVP8 ', 'latin1');

/** An upload as the multipart reader hands it over: its field, first bytes and length. */
const upload = (field: string, bytes: Buffer, length = bytes.length) => ({
  field,
  head: bytes.subarray(0, 32),
  bytes: length,
});

function refusal(check: () => unknown): GatewayError {
  try {
    check();
  } catch (error) {
    assert.ok(error instanceof GatewayError, String(error));
    assert.equal(error.status, 400);
    return error;
  }
  assert.fail('expected a refusal');
}

let fake: FakeOpenAI;
let blobDir: string;
let blobs: LocalBlobStore;

function context(upstreamModel: string, modelId = 'dall-e-2', vendor: 'openai' | 'mock' = 'openai'): MediaContext {
  return {
    requestId: 'req_variations',
    signal: new AbortController().signal,
    channel:
      vendor === 'openai'
        ? { vendor: 'openai', baseUrl: fake.url, apiKey: KEY }
        : { vendor: 'mock', baseUrl: 'http://mock.invalid/v1', apiKey: '' },
    upstreamModel,
    model: model(modelId),
    log,
    http,
    blobs,
    progress: async () => {},
    checkpoint: { read: () => undefined, write: async () => {} },
  };
}

const variation = (fields: Record<string, unknown>, image: BlobRef): ImageVariationInput => ({
  ...imageVariationFieldsSchema.parse(fields),
  image,
});

before(async () => {
  fake = await startFakeOpenAI({ apiKey: KEY });
  blobDir = await mkdtemp(join(tmpdir(), 'switchyard-variations-'));
  blobs = new LocalBlobStore(blobDir);
});

after(async () => {
  await http.close();
  await fake.close();
  await rm(blobDir, { recursive: true, force: true });
});

beforeEach(() => {
  fake.reset();
  fake.setDefault(createFakeOpenAIImages({ apiKey: KEY }));
});

describe('variation fields', () => {
  it(
    'defaults as the spec does: model dall-e-2, size 1024x1024 (made explicit, so it is what is billed); numbers ' +
      'from form text',
    () => {
      assert.deepEqual(imageVariationFieldsSchema.parse({}), { model: 'dall-e-2', size: '1024x1024' });
      assert.equal(imageVariationFieldsSchema.parse({ size: null }).size, '1024x1024');
      assert.deepEqual(
        imageVariationFieldsSchema.parse({
          model: 'mock-image',
          n: '3',
          size: '256x256',
          response_format: 'b64_json',
          user: 'u',
        }),
        {
          model: 'mock-image',
          n: 3,
          size: '256x256',
          response_format: 'b64_json',
          user: 'u',
        },
      );
    },
  );

  it('refuses, naming the field, an n outside 1–10, a size other than the three, an unknown response_format', () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ n: '0' }, 'n'],
      [{ n: '11' }, 'n'],
      [{ n: '1.5' }, 'n'],
      [{ n: 'two' }, 'n'],
      [{ size: '1792x1024' }, 'size'],
      [{ size: 'auto' }, 'size'],
      [{ response_format: 'png' }, 'response_format'],
      [{ model: '' }, 'model'],
    ];
    for (const [fields, param] of cases) {
      assert.equal(refusal(() => parseBody(imageVariationFieldsSchema, fields)).param, param, JSON.stringify(fields));
    }
  });
});

describe('variation models', () => {
  it('dall-e-2 and the mock make variations; dall-e-3 and GPT image models are refused naming model', () => {
    checkVariable(model('dall-e-2'));
    checkVariable(model('mock-image'));
    for (const id of ['dall-e-3', 'gpt-image-1', 'gpt-image-1-mini', 'flux-kontext-pro']) {
      const error = refusal(() => checkVariable(model(id)));
      assert.equal(error.param, 'model');
      assert.equal(error.code, 'model_not_supported');
      assert.match(error.message, new RegExp(id));
    }
  });

  it(
    'the catalog lists variations for dall-e-2 and mock-image only, each taking every spec size, on a vendor that ' +
      'varies images',
    () => {
      const varying = catalog.all().filter((entry) => entry.supports_variations);
      assert.deepEqual(varying.map((entry) => entry.id).sort(), ['dall-e-2', 'mock-image']);
      for (const entry of varying) {
        assert.equal(entry.capability, 'image');
        for (const size of variationSizes) checkImageRequest(entry, { size, n: 10 });
        for (const route of entry.routes ?? [])
          assert.ok(adapters[route.vendor as keyof typeof adapters]?.varyImages, `${entry.id} → ${route.vendor}`);
      }
    },
  );
});

describe('variation uploads', () => {
  const dalle2 = model('dall-e-2');

  it('takes one square PNG under 4 MB', () => {
    checkVariationUpload(dalle2, [upload('image', square)]);
    checkVariationUpload(dalle2, [upload('image', square, variationMaxBytes - 1)]);
  });

  it('refuses no image, two images, and any other file, naming the part', () => {
    const none = refusal(() => checkVariationUpload(dalle2, []));
    assert.deepEqual([none.param, none.code], ['image', 'missing_required_parameter']);
    assert.equal(
      refusal(() => checkVariationUpload(dalle2, [upload('image', square), upload('image', other)])).param,
      'image',
    );
    assert.equal(
      refusal(() => checkVariationUpload(dalle2, [upload('image', square), upload('mask', other)])).param,
      'mask',
    );
    assert.equal(
      refusal(() => checkVariationUpload(dalle2, [upload('image[]', square)])).param,
      'image',
      'image[] is not image: none was sent',
    );
  });

  it('refuses a JPEG, a WebP, bytes that are no image, a PNG without its header, by content and naming image', () => {
    for (const [bytes, code] of [
      [jpeg, 'invalid_image_format'],
      [webp, 'invalid_image_format'],
      [Buffer.from('not an image at all'), 'invalid_image_format'],
      [square.subarray(0, 12), 'invalid_image'],
    ] as const) {
      const error = refusal(() => checkVariationUpload(dalle2, [upload('image', bytes)]));
      assert.deepEqual([error.param, error.code], ['image', code]);
    }
    assert.match(
      refusal(() => checkVariationUpload(dalle2, [upload('image', jpeg)])).message,
      /a JPEG image; `dall-e-2` makes variations of PNG images only/,
    );
  });

  it('refuses 4 MB and more ("less than 4MB"), and a PNG that is not square', () => {
    const large = refusal(() => checkVariationUpload(dalle2, [upload('image', square, variationMaxBytes)]));
    assert.deepEqual([large.param, large.code], ['image', 'image_too_large']);
    const oblong = refusal(() => checkVariationUpload(dalle2, [upload('image', wide)]));
    assert.deepEqual([oblong.param, oblong.code], ['image', 'invalid_image_dimensions']);
    assert.match(oblong.message, /16x8; a variation's image must be square/);
  });
});

describe('variation billing', () => {
  const blob: BlobRef = { key: 'uploads/r/0-a.png', contentType: 'image/png', size: 10 };
  const vary = (fields: Record<string, unknown>): EndpointRequest => ({
    endpoint: 'images.variations',
    payload: variation(fields, blob),
  });
  const generate = (fields: Record<string, unknown>): EndpointRequest => ({
    endpoint: 'images.generations',
    payload: imageGenerationRequestSchema.parse({ model: 'dall-e-2', prompt: 'p', ...fields }),
  });

  it('reserves exactly what dall-e-2 generations of the same size and n reserve', () => {
    for (const size of variationSizes) {
      for (const n of [1, 2, 10]) {
        assert.deepEqual(
          prices.worstCaseMicros('dall-e-2', vary({ size, n }), 0),
          prices.worstCaseMicros('dall-e-2', generate({ size, n }), 0),
          `${size} × ${n}`,
        );
      }
    }
    assert.equal(prices.worstCaseMicros('dall-e-2', vary({ n: '2', size: '512x512' }), 0).micros, 36_000);
    assert.equal(prices.worstCaseMicros('dall-e-2', vary({}), 0).micros, 20_000, 'no size: 1024x1024');
    assert.equal(prices.worstCaseMicros('mock-image', vary({ n: 4 }), 0).micros, 0);
  });

  it('settles the images made at the generation price of the size; no size is billed as the 1024x1024 made', async () => {
    const made = new Meter();
    made.images = 3;
    const metered = await meter(vary({ n: 3, size: '256x256' }), made);
    assert.equal(metered.imageSize, '256x256');
    assert.equal(prices.costMicros('dall-e-2', metered), 3 * 16_000);
    const unsized = await meter(vary({}), made);
    assert.equal(unsized.imageSize, '1024x1024');
    assert.equal(prices.costMicros('dall-e-2', unsized), 3 * 20_000);
    // What a generation of the same size and count settles at.
    assert.equal(prices.costMicros('dall-e-2', await meter(generate({ size: '1024x1024', n: 3 }), made)), 3 * 20_000);
    // An unsized generation is the 1024x1024 the vendor makes too (the catalog's default_size), not the cheapest
    // 256x256.
    assert.equal(prices.costMicros('dall-e-2', await meter(generate({ n: 3 }), made)), 3 * 20_000);
  });

  it("the uploaded image is one of the job's uploads, deleted with it", () => {
    assert.deepEqual(uploadKeys(vary({}).payload), ['uploads/r/0-a.png']);
  });
});

describe('openai variations adapter', () => {
  it(
    'sends the fields with the upstream model, b64_json whatever the client asked, and the image as an `image` ' +
      'file part',
    async () => {
      const image = await blobs.put('uploads/req1/0-photo.png', square, 'image/png', 'photo.png');
      const result = await openaiAdapter.varyImages!(
        variation({ model: 'my-dalle', n: '2', size: '512x512', response_format: 'url', user: 'u-1' }, image),
        context('dall-e-2'),
      );
      const request = fake.requests.at(-1)!;
      assert.equal(request.path, '/v1/images/variations');
      assert.equal(request.headers.authorization, `Bearer ${KEY}`);
      assert.match(String(request.headers['content-type']), /^multipart\/form-data; boundary=/);
      const form = await readFakeMultipart(request);
      assert.deepEqual([...form.keys()], ['model', 'n', 'size', 'response_format', 'user', 'image']);
      assert.deepEqual(
        ['model', 'n', 'size', 'response_format', 'user'].map((name) => form.get(name)),
        ['dall-e-2', '2', '512x512', 'b64_json', 'u-1'],
      );
      const part = form.get('image') as File;
      assert.deepEqual([part.name, part.type], ['photo.png', 'image/png']);
      assert.deepEqual(Buffer.from(await part.arrayBuffer()), square);
      assert.deepEqual(result.images, [
        { bytes: FAKE_IMAGE_PNG, contentType: 'image/png' },
        { bytes: FAKE_IMAGE_PNG, contentType: 'image/png' },
      ]);
    },
  );

  it('names an unnamed upload image.png, and sends the default size', async () => {
    const image = await blobs.put('uploads/req2/0-upload', square, 'image/png');
    await openaiAdapter.varyImages!(variation({}, image), context('dall-e-2'));
    const form = await readFakeMultipart(fake.requests.at(-1)!);
    assert.equal((form.get('image') as File).name, 'image.png');
    assert.equal(form.get('size'), '1024x1024');
    assert.equal(form.get('n'), null);
  });

  it(
    "maps the vendor's refusals: a safety refusal stays a 400 with its reason, a 5xx is a retryable 500, the " +
      "fake's own 400 keeps its param",
    async () => {
      const image = await blobs.put('uploads/req3/0-a.png', square, 'image/png', 'a.png');
      const ctx = context('dall-e-2');
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
      const policy = await gatewayError(openaiAdapter.varyImages!(variation({}, image), ctx));
      assert.deepEqual([policy.status, policy.code, policy.retryable], [400, 'content_policy_violation', false]);
      fake.enqueue({ status: 502, text: 'bad gateway' });
      const failed = await gatewayError(openaiAdapter.varyImages!(variation({}, image), ctx));
      assert.deepEqual([failed.status, failed.retryable], [500, true]);
      // A field the gateway passes through as sent, which OpenAI does not take on this endpoint.
      const unknown = await gatewayError(
        openaiAdapter.varyImages!({ ...variation({}, image), prompt: 'a cat' } as ImageVariationInput, ctx),
      );
      assert.deepEqual([unknown.status, unknown.param], [400, 'prompt']);
    },
  );
});

describe('mock variations', () => {
  const pngSize = (bytes: Buffer) => [bytes.readUInt32BE(16), bytes.readUInt32BE(20)];

  it('n PNGs of the size (1024x1024 by default), the same for the same upload and different for another', async () => {
    const first = await blobs.put('uploads/m1/0-a.png', square, 'image/png');
    const second = await blobs.put('uploads/m2/0-b.png', other, 'image/png');
    const ctx = context('mock-image', 'mock-image', 'mock');
    const a = await mockAdapter.varyImages!(variation({ n: 2, size: '256x256' }, first), ctx);
    assert.equal(a.images.length, 2);
    assert.deepEqual(pngSize(a.images[0]!.bytes!), [256, 256]);
    assert.notDeepEqual(a.images[0]!.bytes, a.images[1]!.bytes);
    const again = await mockAdapter.varyImages!(variation({ n: 2, size: '256x256' }, first), ctx);
    assert.deepEqual(again.images[0]!.bytes, a.images[0]!.bytes);
    const b = await mockAdapter.varyImages!(variation({ n: 2, size: '256x256' }, second), ctx);
    assert.notDeepEqual(b.images[0]!.bytes, a.images[0]!.bytes);
    const unsized = await mockAdapter.varyImages!(variation({}, first), ctx);
    assert.deepEqual(pngSize(unsized.images[0]!.bytes!), [1024, 1024]);
    assert.equal(unsized.usage, undefined, 'a dall-e-2-like answer: priced per image, no token usage');
  });

  it('an upload that is gone is a 404, as for an edit', async () => {
    const gone: BlobRef = { key: 'uploads/none/0-a.png', contentType: 'image/png', size: 1 };
    assert.equal(
      (await gatewayError(mockAdapter.varyImages!(variation({}, gone), context('mock-image', 'mock-image', 'mock'))))
        .status,
      404,
    );
  });
});

describe('fake openai variations (what OpenAI refuses)', () => {
  const post = (form: FormData | string, key = KEY) =>
    fetch(`${fake.url}/images/variations`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${key}`,
        ...(typeof form === 'string' ? { 'content-type': 'application/json' } : {}),
      },
      body: form,
    });
  const formWith = (fields: Record<string, string>, image: Buffer | null = square, field = 'image') => {
    const form = new FormData();
    for (const [name, value] of Object.entries(fields)) form.append(name, value);
    if (image) form.append(field, new Blob([new Uint8Array(image)], { type: 'image/png' }), 'a.png');
    return form;
  };
  async function refused(answer: Response, param: string | null) {
    assert.equal(answer.status, 400);
    const body = (await answer.json()) as { error: { param: string | null; type: string } };
    assert.equal(body.error.type, 'invalid_request_error');
    assert.equal(body.error.param, param);
  }

  it('answers an ImagesResponse: urls by default, b64_json when asked, n of them', async () => {
    const urls = (await (await post(formWith({ n: '3' }))).json()) as {
      created: number;
      data: Array<{ url?: string }>;
    };
    assert.equal(urls.data.length, 3);
    assert.ok(urls.data.every((item) => typeof item.url === 'string'));
    const b64 = (await (
      await post(formWith({ model: 'dall-e-2', response_format: 'b64_json', size: '256x256' }))
    ).json()) as { data: Array<{ b64_json?: string }> };
    assert.deepEqual(Buffer.from(b64.data[0]!.b64_json!, 'base64'), FAKE_IMAGE_PNG);
  });

  it('refuses a wrong key, a JSON body, no image, two images, image[], a JPEG, a non-square PNG, 4 MB', async () => {
    assert.equal((await post(formWith({}), 'sk-wrong')).status, 401);
    await refused(await post(JSON.stringify({ model: 'dall-e-2' })), null);
    await refused(await post(formWith({}, null)), 'image');
    const two = formWith({});
    two.append('image', new Blob([new Uint8Array(square)], { type: 'image/png' }), 'b.png');
    await refused(await post(two), 'image');
    await refused(await post(formWith({}, square, 'image[]')), 'image');
    await refused(await post(formWith({}, jpeg)), 'image');
    await refused(await post(formWith({}, wide)), 'image');
    const padded = Buffer.concat([square, Buffer.alloc(variationMaxBytes - square.length)]);
    await refused(await post(formWith({}, padded)), 'image');
  });

  it('refuses a model other than dall-e-2, n outside 1–10, another size, a prompt, a bad response_format', async () => {
    for (const [fields, param] of [
      [{ model: 'dall-e-3' }, 'model'],
      [{ model: 'gpt-image-1' }, 'model'],
      [{ n: '0' }, 'n'],
      [{ n: '11' }, 'n'],
      [{ size: '1792x1024' }, 'size'],
      [{ size: '128x128' }, 'size'],
      [{ prompt: 'a cat' }, 'prompt'],
      [{ response_format: 'png' }, 'response_format'],
    ] as const) {
      await refused(await post(formWith(fields as Record<string, string>)), param);
    }
  });
});
