import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { loadCatalog } from '../../shared/catalog.js';
import { GatewayError } from '../../shared/errors.js';
import { LocalBlobStore } from '../../storage/local-blob-store.js';
import {
  buildGeminiImageRequest,
  convertSizeToGeminiAspectRatio,
  convertSizeToGeminiImageSize,
} from '../../workers/vendors/gemini/build-gemini-image-request.js';
import { geminiAdapter } from '../../workers/vendors/gemini/index.js';
import type { ImageGenerationInput, MediaContext } from '../../workers/vendors/types.js';
import { geminiError, startFakeGemini, type FakeGemini } from '../support/fake-gemini.js';
import { FAKE_GEMINI_IMAGE, installGeminiImages, type FakeGeminiImages } from '../support/fake-gemini-images.js';
import { gatewayError } from '../support/assertions.js';
import { loadConfig } from '../../shared/config.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';

const http = createVendorHttp(loadConfig({}));

type Json = Record<string, any>;
const KEY = 'AIzaSyTestKey0123456789abcdefghijklmno';
const catalog = loadCatalog();
const blobDir = mkdtempSync(join(tmpdir(), 'gemini-images-'));
const generate = geminiAdapter.generateImages!;

let fake: FakeGemini;
let images: FakeGeminiImages;

function context(options: { model?: string; signal?: AbortSignal; progress?: number[] } = {}): MediaContext {
  const model = options.model ?? 'gemini-2.5-flash-image';
  const state: { value?: Record<string, unknown> } = {};
  return {
    requestId: 'req_gemini_image',
    signal: options.signal ?? new AbortController().signal,
    channel: { vendor: 'google', baseUrl: fake.url, apiKey: KEY },
    upstreamModel: model,
    model: catalog.get(model)!,
    log: pino({ level: 'silent' }),
    http,
    blobs: new LocalBlobStore(blobDir),
    progress: async (percent) => void options.progress?.push(percent),
    checkpoint: {
      read: <T extends Record<string, unknown>>() => state.value as T | undefined,
      write: async (value) => void (state.value = value),
    },
  };
}

const image = (extra: Json = {}): ImageGenerationInput =>
  ({ model: 'gemini-2.5-flash-image', prompt: 'A red fox in snow', ...extra }) as ImageGenerationInput;
const sent = (index = 0) => fake.requests[index]!.body as Json;

before(async () => {
  fake = await startFakeGemini({ apiKey: KEY });
});
after(async () => {
  await http.close();
  await fake.close();
  rmSync(blobDir, { recursive: true, force: true });
});
beforeEach(() => {
  fake.reset();
  images = installGeminiImages(fake);
});

describe('gemini images: outgoing requests', () => {
  it('calls generateContent with the key header, both modalities and the nearest aspect ratio', async () => {
    await generate(image({ size: '1344x768' }), context());
    assert.equal(fake.requests[0]!.path, '/v1beta/models/gemini-2.5-flash-image:generateContent');
    assert.equal(fake.requests[0]!.headers['x-goog-api-key'], KEY);
    assert.deepEqual(sent(), {
      contents: [{ role: 'user', parts: [{ text: 'A red fox in snow' }] }],
      generationConfig: { responseModalities: ['TEXT', 'IMAGE'], imageConfig: { aspectRatio: '16:9' } },
    });
  });

  it('sends no image config without a size, none to 2.0, and a resolution class to Gemini 3', async () => {
    await generate(image({ size: 'auto' }), context());
    await generate(
      image({ model: 'gemini-2.0-flash-preview-image-generation', size: '1024x1024' }),
      context({ model: 'gemini-2.0-flash-preview-image-generation' }),
    );
    await generate(
      image({ model: 'gemini-3-pro-image-preview', size: '2048x2048' }),
      context({ model: 'gemini-3-pro-image-preview' }),
    );
    assert.deepEqual(sent(0).generationConfig, { responseModalities: ['TEXT', 'IMAGE'] });
    assert.deepEqual(sent(1).generationConfig, { responseModalities: ['TEXT', 'IMAGE'] });
    assert.deepEqual(sent(2).generationConfig, {
      responseModalities: ['TEXT', 'IMAGE'],
      imageConfig: { aspectRatio: '1:1', imageSize: '2K' },
    });
  });

  it('maps every catalog size of the 2.5 image model to its documented ratio', () => {
    const expected: Record<string, string> = {
      '1024x1024': '1:1',
      '832x1248': '2:3',
      '1248x832': '3:2',
      '864x1184': '3:4',
      '1184x864': '4:3',
      '896x1152': '4:5',
      '1152x896': '5:4',
      '768x1344': '9:16',
      '1344x768': '16:9',
      '1536x672': '21:9',
    };
    for (const size of catalog.get('gemini-2.5-flash-image')!.image_sizes!) {
      const [width, height] = size.split('x').map(Number) as [number, number];
      assert.equal(convertSizeToGeminiAspectRatio(width, height), expected[size], size);
    }
    assert.equal(convertSizeToGeminiImageSize(1024, 1024), '1K');
    assert.equal(convertSizeToGeminiImageSize(4096, 4096), '4K');
    assert.throws(
      () => buildGeminiImageRequest(image({ size: 'huge' }), 'gemini-2.5-flash-image'),
      (error: GatewayError) => error.param === 'size',
    );
  });
});

describe('gemini images: answers', () => {
  it('returns the inline image bytes and MIME type, skipping draft (thought) images', async () => {
    images.script({ kind: 'image', withDraft: true, mimeType: 'image/png' });
    const result = await generate(image(), context());
    assert.equal(result.images.length, 1);
    assert.deepEqual(result.images[0]!.bytes, FAKE_GEMINI_IMAGE);
    assert.equal(result.images[0]!.contentType, 'image/png');
    assert.deepEqual(result.usage, { input_tokens: 7, output_tokens: 1290, total_tokens: 1297 });
  });

  it('n=3 is three calls, three images, with progress between them', async () => {
    const progress: number[] = [];
    images.script({ kind: 'image' }, { kind: 'image', mimeType: 'image/jpeg' }, { kind: 'image' });
    const result = await generate(image({ n: 3 }), context({ progress }));
    assert.equal(images.calls, 3);
    assert.deepEqual(
      result.images.map((one) => one.contentType),
      ['image/png', 'image/jpeg', 'image/png'],
    );
    assert.deepEqual(progress, [33, 66]);
    assert.equal(result.usage!.total_tokens, 3 * 1297);
  });

  it('a blocked prompt is a 400 content_policy_violation', async () => {
    images.script({ kind: 'blocked', blockReason: 'PROHIBITED_CONTENT' });
    const error = await gatewayError(generate(image(), context()));
    assert.equal(error.status, 400);
    assert.equal(error.code, 'content_policy_violation');
    assert.match(error.message, /PROHIBITED_CONTENT/);
  });

  it('an image stopped by a safety filter is a 400 content_policy_violation', async () => {
    images.script({ kind: 'no_image', finishReason: 'IMAGE_SAFETY' });
    const error = await gatewayError(generate(image(), context()));
    assert.equal(error.status, 400);
    assert.equal(error.code, 'content_policy_violation');
  });

  it('an answer in words only is a 500 advising a retry, quoting the model', async () => {
    images.script({ kind: 'no_image', finishReason: 'STOP', text: 'I can only describe foxes today.' });
    const error = await gatewayError(generate(image(), context()));
    assert.equal(error.status, 500);
    assert.equal(error.type, 'server_error');
    assert.match(error.message, /retry/i);
    assert.match(error.message, /describe foxes/);
  });

  it('vendor errors go through the Gemini mapping: 429 waits as long as RetryInfo says', async () => {
    fake.enqueue({
      status: 429,
      json: geminiError(429, 'RESOURCE_EXHAUSTED', 'Quota exceeded.', [
        { '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '2s' },
      ]),
    });
    const error = await gatewayError(generate(image(), context()));
    assert.equal(error.status, 429);
    assert.equal(error.retryable, true);
    assert.equal(error.retryAfterMs, 2000);
  });

  it('a rejected key is the gateway’s misconfiguration, and the key never shows', async () => {
    const ctx = context();
    ctx.channel = { ...ctx.channel, apiKey: 'AIzaSyWrongKey0123456789abcdefghijklmn' };
    const error = await gatewayError(generate(image(), ctx));
    assert.equal(error.code, 'vendor_auth_failed');
    assert.ok(!error.message.includes('AIzaSyWrong'));
  });

  it('refuses Imagen models (another API) before calling out', async () => {
    const error = await gatewayError(
      generate(image({ model: 'imagen-4.0-generate-001' }), context({ model: 'imagen-4.0-generate-001' })),
    );
    assert.equal(error.status, 400);
    assert.equal(error.param, 'model');
    assert.equal(fake.requests.length, 0);
  });

  it('stops when the signal fires', async () => {
    fake.enqueue({ hang: true });
    const controller = new AbortController();
    const promise = generate(image(), context({ signal: controller.signal }));
    await sleep(50);
    controller.abort(new Error('client gone'));
    await assert.rejects(promise, /client gone/);
  });
});
