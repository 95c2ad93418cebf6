import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import { pino } from 'pino';
import { loadCatalog } from '../../shared/catalog.js';
import { LocalBlobStore } from '../../storage/local-blob-store.js';
import type { BlobRef, ImageGenerationInput, MediaContext } from '../../workers/vendors/types.js';
import type { ImageEditInput } from '../../shared/schemas/media-inputs.js';
import { encodeGradientPng } from '../../workers/vendors/mock/png.js';
import { openaiAdapter } from '../../workers/vendors/openai/index.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import {
  createFakeOpenAIImages,
  FAKE_IMAGE_B64,
  FAKE_IMAGE_PNG,
  FAKE_IMAGE_USAGE,
  fakeRevisedPrompt,
  readFakeMultipart,
} from '../support/fake-openai-images.js';
import { gatewayError } from '../support/assertions.js';
import { loadConfig } from '../../shared/config.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';

const http = createVendorHttp(loadConfig({}));

const KEY = 'sk-test-images-key-0123456789';
const log = pino({ level: 'silent' });
const catalog = loadCatalog();

let fake: FakeOpenAI;
let blobDir: string;
let blobs: LocalBlobStore;

interface ContextOptions {
  upstreamModel: string;
  modelId?: string;
  signal?: AbortSignal;
  progress?: (percent: number) => Promise<void>;
}

function context(options: ContextOptions): MediaContext {
  return {
    requestId: 'req_images',
    signal: options.signal ?? new AbortController().signal,
    channel: { vendor: 'openai', baseUrl: fake.url, apiKey: KEY },
    upstreamModel: options.upstreamModel,
    model: catalog.get(options.modelId ?? 'dall-e-3')!,
    log,
    http,
    blobs,
    progress: options.progress ?? (async () => {}),
    checkpoint: { read: () => undefined, write: async () => {} },
  };
}

const generation = (fields: Record<string, unknown>) =>
  ({ model: 'dall-e-3', prompt: 'a red fox', ...fields }) as ImageGenerationInput;
const edit = (fields: Record<string, unknown>, images: BlobRef[], mask?: BlobRef) =>
  ({ model: 'gpt-image-1', prompt: 'add a hat', ...fields, images, ...(mask ? { mask } : {}) }) as ImageEditInput;

const lastRequest = () => fake.requests[fake.requests.length - 1]!;

/** Scripts the next upstream answer as an OpenAI error body. */
function enqueueVendorError(
  status: number,
  error: { message: string; type: string; code: string | null },
  headers?: Record<string, string>,
) {
  fake.enqueue({ status, ...(headers ? { headers } : {}), json: { error: { param: null, ...error } } });
}

before(async () => {
  fake = await startFakeOpenAI({ apiKey: KEY });
  blobDir = await mkdtemp(join(tmpdir(), 'switchyard-images-'));
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

describe('openai images: generations', () => {
  it('sends the client fields with the upstream model and asks dall-e for b64_json whatever the client asked', async () => {
    const ctx = context({ upstreamModel: 'dall-e-3' });
    const result = await openaiAdapter.generateImages!(
      generation({
        model: 'my-dalle',
        n: 1,
        size: '1792x1024',
        quality: 'hd',
        style: 'natural',
        response_format: 'url',
        user: 'u1',
      }),
      ctx,
    );
    const request = lastRequest();
    assert.equal(request.path, '/v1/images/generations');
    assert.equal(request.headers.authorization, `Bearer ${KEY}`);
    assert.equal(request.headers['content-type'], 'application/json');
    assert.deepEqual(request.body, {
      model: 'dall-e-3',
      prompt: 'a red fox',
      n: 1,
      size: '1792x1024',
      quality: 'hd',
      style: 'natural',
      response_format: 'b64_json',
      user: 'u1',
    });
    assert.equal(result.images.length, 1);
    assert.deepEqual(result.images[0], {
      bytes: FAKE_IMAGE_PNG,
      contentType: 'image/png',
      revised_prompt: fakeRevisedPrompt('a red fox'),
    });
    assert.equal(result.usage, undefined);
    assert.equal(result.extra, undefined);
  });

  it('never sends response_format (nor stream fields) to GPT image models, and maps usage and the top-level fields', async () => {
    const ctx = context({ upstreamModel: 'gpt-image-1', modelId: 'gpt-image-1' });
    const result = await openaiAdapter.generateImages!(
      generation({
        model: 'gpt-image-1',
        n: 2,
        size: '1536x1024',
        quality: 'low',
        response_format: 'b64_json',
        stream: true,
        partial_images: 2,
      }),
      ctx,
    );
    assert.deepEqual(lastRequest().body, {
      model: 'gpt-image-1',
      prompt: 'a red fox',
      n: 2,
      size: '1536x1024',
      quality: 'low',
    });
    assert.equal(result.images.length, 2);
    for (const image of result.images) assert.deepEqual(image, { bytes: FAKE_IMAGE_PNG, contentType: 'image/png' });
    assert.deepEqual(result.usage, FAKE_IMAGE_USAGE);
    assert.deepEqual(result.extra, { background: 'opaque', output_format: 'png', size: '1536x1024', quality: 'low' });
  });

  it('drops a null response_format too, and labels bytes with the output_format the model used', async () => {
    const ctx = context({ upstreamModel: 'gpt-image-1-mini', modelId: 'gpt-image-1-mini' });
    const result = await openaiAdapter.generateImages!(
      generation({ response_format: null, output_format: 'webp' }),
      ctx,
    );
    assert.equal('response_format' in (lastRequest().body as object), false);
    assert.equal(result.images[0]!.contentType, 'image/webp');
    assert.equal(result.extra!.output_format, 'webp');
  });

  it('keeps url answers as URLs, with the revised prompt', async () => {
    const data = [{ url: 'https://images.example/1.png', revised_prompt: 'revised' }, { b64_json: FAKE_IMAGE_B64 }];
    fake.enqueue({ json: { created: 1, data } });
    const result = await openaiAdapter.generateImages!(generation({}), context({ upstreamModel: 'dall-e-3' }));
    assert.deepEqual(result.images, [
      { url: 'https://images.example/1.png', revised_prompt: 'revised' },
      { bytes: FAKE_IMAGE_PNG, contentType: 'image/png' },
    ]);
  });

  it("passes the vendor's own request errors on (the fake checks n and size per family)", async () => {
    const tooMany = await gatewayError(
      openaiAdapter.generateImages!(generation({ n: 2 }), context({ upstreamModel: 'dall-e-3' })),
    );
    assert.equal(tooMany.status, 400);
    assert.equal(tooMany.param, 'n');
    assert.equal(tooMany.retryable, false);
    const badSize = await gatewayError(
      openaiAdapter.generateImages!(
        generation({ size: '1792x1024' }),
        context({ upstreamModel: 'dall-e-2', modelId: 'dall-e-2' }),
      ),
    );
    assert.equal(badSize.status, 400);
    assert.equal(badSize.param, 'size');
  });
});

describe('openai images: errors', () => {
  const run = () => openaiAdapter.generateImages!(generation({}), context({ upstreamModel: 'dall-e-3' }));

  it('a dall-e safety refusal is a 400 content_policy_violation with the vendor reason', async () => {
    const reason =
      'Your request was rejected as a result of our safety system. Your prompt may contain text that is not ' +
      'allowed by our safety system.';
    enqueueVendorError(400, { message: reason, type: 'invalid_request_error', code: 'content_policy_violation' });
    const error = await gatewayError(run());
    assert.equal(error.status, 400);
    assert.equal(error.code, 'content_policy_violation');
    assert.equal(error.type, 'invalid_request_error');
    assert.equal(error.message, reason);
    assert.equal(error.retryable, false);
  });

  it('a GPT image moderation block is a content_policy_violation too', async () => {
    const reason = 'Your request was rejected by the safety system. safety_violations=[violence].';
    enqueueVendorError(400, { message: reason, type: 'image_generation_user_error', code: 'moderation_blocked' });
    const error = await gatewayError(run());
    assert.equal(error.status, 400);
    assert.equal(error.code, 'content_policy_violation');
    assert.equal(error.message, reason);
  });

  it('a vendor 5xx is a retryable 500 server_error advising a retry, possibly with a changed prompt', async () => {
    enqueueVendorError(500, { message: `boom ${KEY}`, type: 'server_error', code: null }, { 'retry-after': '3' });
    const error = await gatewayError(run());
    assert.equal(error.status, 500);
    assert.equal(error.type, 'server_error');
    assert.equal(error.code, 'server_error');
    assert.match(error.message, /retry/i);
    assert.match(error.message, /prompt/i);
    assert.ok(!error.message.includes(KEY));
    assert.equal(error.retryable, true);
    assert.equal(error.retryAfterMs, 3000);
  });

  it('a 200 without images, or with an error body, is a failed generation', async () => {
    fake.enqueue({ json: { created: 1, data: [] } });
    const empty = await gatewayError(run());
    assert.equal(empty.status, 500);
    assert.equal(empty.code, 'server_error');
    fake.enqueue({ json: { error: { message: 'internal failure', type: 'server_error' } } });
    assert.equal((await gatewayError(run())).status, 500);
    fake.enqueue({ json: { error: { message: 'Rejected by our safety system.', code: 'content_policy_violation' } } });
    assert.equal((await gatewayError(run())).code, 'content_policy_violation');
  });

  it('429 stays a retryable rate limit; a bad vendor key is our fault (5xx)', async () => {
    const rateLimit = {
      message: 'Rate limit reached for images per minute.',
      type: 'requests',
      code: 'rate_limit_exceeded',
    };
    enqueueVendorError(429, rateLimit, { 'retry-after': '2' });
    const limited = await gatewayError(run());
    assert.equal(limited.status, 429);
    assert.equal(limited.retryable, true);
    assert.equal(limited.retryAfterMs, 2000);
    enqueueVendorError(401, {
      message: 'Incorrect API key provided.',
      type: 'invalid_request_error',
      code: 'invalid_api_key',
    });
    const auth = await gatewayError(run());
    assert.equal(auth.status, 502);
    assert.equal(auth.code, 'vendor_auth_failed');
  });

  it('a non-JSON 200 is a malformed (retryable) answer', async () => {
    fake.enqueue({ status: 200, text: '<html>oops</html>' });
    const error = await gatewayError(run());
    assert.equal(error.code, 'vendor_bad_response');
    assert.equal(error.retryable, true);
  });

  it('aborting the call ends the upstream request and rejects with the abort reason', async () => {
    fake.enqueue({ hang: true });
    const controller = new AbortController();
    const pending = openaiAdapter.generateImages!(
      generation({}),
      context({ upstreamModel: 'dall-e-3', signal: controller.signal }),
    );
    setTimeout(() => controller.abort(new Error('client gone')), 50);
    await assert.rejects(pending, /client gone/);
    for (let i = 0; i < 50 && fake.abortedRequests === 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(fake.abortedRequests, 1);
  });
});

describe('openai images: edits', () => {
  const pngA = encodeGradientPng(8, 8, [
    [255, 0, 0],
    [0, 255, 0],
    [0, 0, 255],
    [9, 9, 9],
  ]);
  const pngB = encodeGradientPng(8, 8, [
    [1, 2, 3],
    [4, 5, 6],
    [7, 8, 9],
    [200, 100, 50],
  ]);
  const maskPng = encodeGradientPng(8, 8, [
    [0, 0, 0],
    [0, 0, 0],
    [0, 0, 0],
    [0, 0, 0],
  ]);

  async function fileBytes(value: FormDataEntryValue | null): Promise<Buffer> {
    assert.ok(value !== null && typeof value !== 'string', 'expected a file part');
    return Buffer.from(await value.arrayBuffer());
  }

  it('one image: an `image` part, the mask, text fields; no response_format for GPT image models', async () => {
    const image = await blobs.put('uploads/req1/image-0', pngA, 'image/png', 'cat.png');
    const mask = await blobs.put('uploads/req1/mask', maskPng, 'image/png');
    const ctx = context({ upstreamModel: 'gpt-image-1', modelId: 'gpt-image-1' });
    const result = await openaiAdapter.editImages!(
      edit(
        {
          model: 'gpt-image-1',
          n: 2,
          size: '1024x1536',
          quality: 'high',
          response_format: 'b64_json',
          input_fidelity: 'high',
        },
        [image],
        mask,
      ),
      ctx,
    );
    const request = lastRequest();
    assert.equal(request.path, '/v1/images/edits');
    assert.equal(request.headers.authorization, `Bearer ${KEY}`);
    assert.match(String(request.headers['content-type']), /^multipart\/form-data; boundary=/);
    const form = await readFakeMultipart(request);
    assert.deepEqual([...form.keys()], ['model', 'prompt', 'n', 'size', 'quality', 'input_fidelity', 'image', 'mask']);
    assert.equal(form.get('model'), 'gpt-image-1');
    assert.equal(form.get('prompt'), 'add a hat');
    assert.equal(form.get('n'), '2');
    assert.equal(form.get('size'), '1024x1536');
    const imagePart = form.get('image') as File;
    assert.equal(imagePart.name, 'cat.png');
    assert.equal(imagePart.type, 'image/png');
    assert.deepEqual(await fileBytes(imagePart), pngA);
    assert.equal((form.get('mask') as File).name, 'mask.png');
    assert.deepEqual(await fileBytes(form.get('mask')), maskPng);

    assert.equal(result.images.length, 2);
    assert.deepEqual(result.images[0], { bytes: FAKE_IMAGE_PNG, contentType: 'image/png' });
    assert.deepEqual(result.usage, FAKE_IMAGE_USAGE);
    assert.deepEqual(result.extra, { background: 'opaque', output_format: 'png', size: '1024x1536', quality: 'high' });
  });

  it('several images: `image[]` parts in order, each with a filename carrying its type', async () => {
    const first = await blobs.put('uploads/req2/image-0', pngA, 'image/png', 'a.png');
    const second = await blobs.put('uploads/req2/image-1', pngB, 'image/webp');
    await openaiAdapter.editImages!(
      edit({}, [first, second]),
      context({ upstreamModel: 'gpt-image-1', modelId: 'gpt-image-1' }),
    );
    const form = await readFakeMultipart(lastRequest());
    assert.equal(form.get('image'), null);
    const parts = form.getAll('image[]') as File[];
    assert.deepEqual(
      parts.map((part) => [part.name, part.type]),
      [
        ['a.png', 'image/png'],
        ['image-2.webp', 'image/webp'],
      ],
    );
    assert.deepEqual(await fileBytes(parts[0]!), pngA);
    assert.deepEqual(await fileBytes(parts[1]!), pngB);
  });

  it('dall-e-2 edits ask for b64_json whatever the client asked', async () => {
    const image = await blobs.put('uploads/req3/image-0', pngA, 'image/png', 'in.png');
    const result = await openaiAdapter.editImages!(
      edit({ model: 'dall-e-2', response_format: 'url', size: '512x512' }, [image]),
      context({ upstreamModel: 'dall-e-2', modelId: 'dall-e-2' }),
    );
    const form = await readFakeMultipart(lastRequest());
    assert.equal(form.get('response_format'), 'b64_json');
    assert.equal(form.get('model'), 'dall-e-2');
    assert.deepEqual(result.images, [{ bytes: FAKE_IMAGE_PNG, contentType: 'image/png' }]);
  });

  it('edit errors map like generation errors', async () => {
    const image = await blobs.put('uploads/req4/image-0', pngA, 'image/png', 'in.png');
    const message = 'Your input image may contain content that is not allowed by our safety system.';
    enqueueVendorError(400, { message, type: 'invalid_request_error', code: 'content_policy_violation' });
    const ctx = context({ upstreamModel: 'gpt-image-1', modelId: 'gpt-image-1' });
    assert.equal(
      (await gatewayError(openaiAdapter.editImages!(edit({}, [image]), ctx))).code,
      'content_policy_violation',
    );
    fake.enqueue({ status: 502, text: 'bad gateway' });
    assert.equal((await gatewayError(openaiAdapter.editImages!(edit({}, [image]), ctx))).status, 500);
  });
});

describe('fake openai images', () => {
  const post = (path: string, body: unknown) =>
    fetch(`${fake.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it('refuses response_format for GPT image models and answers dall-e urls it serves itself', async () => {
    const refused = await post('/images/generations', { model: 'gpt-image-1', prompt: 'x', response_format: 'url' });
    assert.equal(refused.status, 400);
    assert.deepEqual(((await refused.json()) as { error: unknown }).error, {
      message: "Unknown parameter: 'response_format'.",
      type: 'invalid_request_error',
      param: 'response_format',
      code: 'unknown_parameter',
    });
    const generated = await post('/images/generations', { model: 'dall-e-2', prompt: 'x', n: 2 });
    const answer = (await generated.json()) as { data: Array<{ url: string }> };
    assert.equal(answer.data.length, 2);
    const download = await fetch(answer.data[0]!.url);
    assert.equal(download.headers.get('content-type'), 'image/png');
    assert.deepEqual(Buffer.from(await download.arrayBuffer()), FAKE_IMAGE_PNG);
    assert.equal((await post('/images/generations', { model: 'dall-e-3' })).status, 400);
  });

  it('edits need an image and a prompt', async () => {
    const form = new FormData();
    form.append('model', 'gpt-image-1');
    form.append('prompt', 'x');
    const missing = await fetch(`${fake.url}/images/edits`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}` },
      body: form,
    });
    assert.equal(missing.status, 400);
    assert.equal(((await missing.json()) as { error: { param: string } }).error.param, 'image');
  });
});
