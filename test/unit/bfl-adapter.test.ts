import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { PNG } from 'pngjs';
import { loadCatalog } from '../../shared/catalog.js';
import { loadConfig } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import { LocalBlobStore } from '../../storage/local-blob-store.js';
import {
  BFL_CHECKPOINT_KEY,
  bflAdapter,
  bflPollUrl,
  buildBflEditRequest,
  buildBflRequest,
  convertOpenAIMaskToBfl,
  convertSizeToAspectRatio,
  mapBflError,
  normaliseBflProgress,
  readBflPollAnswer,
} from '../../workers/vendors/bfl/index.js';
import type { BlobRef, ImageGenerationInput, ImageResult, MediaContext } from '../../workers/vendors/types.js';
import type { ImageEditInput } from '../../shared/schemas/media-inputs.js';
import {
  createFakePng,
  encodeTestPng,
  FAKE_BFL_PNG,
  startFakeBfl,
  type FakeBfl,
  type TestPngOptions,
} from '../support/fake-bfl.js';
import { gatewayError } from '../support/assertions.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';

const http = createVendorHttp(loadConfig({ BFL_POLL_INTERVAL_MS: '20' }));

type Json = Record<string, any>;
const KEY = 'bfl-test-key-0123456789abcdef';
const catalog = loadCatalog();
const blobDir = mkdtempSync(join(tmpdir(), 'bfl-adapter-'));
const generate = bflAdapter.generateImages!;
const editImages = bflAdapter.editImages!;
const blobs = new LocalBlobStore(blobDir);

let fake: FakeBfl;

interface Harness {
  ctx: MediaContext;
  progress: number[];
  /** Each checkpoint write, with how many polls the fake had seen at that moment. */
  writes: Array<{ state: Json; pollsAtWrite: number }>;
  store: { state: Json | undefined };
}

function harness(
  options: {
    model?: string;
    signal?: AbortSignal;
    store?: Harness['store'];
    apiKey?: string;
    baseUrl?: string;
    onWrite?: () => void;
  } = {},
): Harness {
  const model = options.model ?? 'flux-pro-1.1';
  const store = options.store ?? { state: undefined };
  const progress: number[] = [];
  const writes: Harness['writes'] = [];
  const ctx: MediaContext = {
    requestId: 'req_bfl',
    signal: options.signal ?? new AbortController().signal,
    channel: { vendor: 'bfl', baseUrl: options.baseUrl ?? fake.url, apiKey: options.apiKey ?? KEY },
    upstreamModel: model,
    model: catalog.get(model)!,
    log: pino({ level: 'silent' }),
    http,
    blobs: new LocalBlobStore(blobDir),
    progress: async (percent) => void progress.push(percent),
    checkpoint: {
      read: <T extends Record<string, unknown>>() =>
        store.state === undefined ? undefined : (structuredClone(store.state) as T),
      write: async (state) => {
        writes.push({ state: structuredClone(state), pollsAtWrite: fake.polls });
        store.state = structuredClone(state);
        options.onWrite?.();
      },
    },
  };
  return { ctx, progress, writes, store };
}

const image = (extra: Json = {}): ImageGenerationInput =>
  ({ model: 'flux-pro-1.1', prompt: 'A lighthouse at dusk', ...extra }) as ImageGenerationInput;
const posts = () => fake.requests.filter((request) => request.method === 'POST');
const edit = (extra: Json, images: BlobRef[], mask?: BlobRef): ImageEditInput =>
  ({
    model: 'flux-kontext-pro',
    prompt: 'Make it night',
    ...extra,
    images,
    ...(mask ? { mask } : {}),
  }) as ImageEditInput;
let uploads = 0;
/** Stores an upload as the api does, under a fresh key. */
const upload = (bytes: Buffer, contentType = 'image/png') =>
  blobs.put(`uploads/bfl${++uploads}/image-0`, bytes, contentType);
/** A reference to an upload that is not in the store: reading it would fail. */
const absent = (): BlobRef => ({ key: `uploads/absent${++uploads}/image-0`, contentType: 'image/png', size: 1 });
const b64 = (bytes: Buffer) => bytes.toString('base64');

before(async () => {
  fake = await startFakeBfl({ apiKey: KEY });
});
after(async () => {
  await http.close();
  await fake.close();
  rmSync(blobDir, { recursive: true, force: true });
});
beforeEach(() => fake.reset());

describe('bfl adapter: outgoing requests', () => {
  it('submits size as width/height to /v1/<endpoint> with x-key, polls with x-key, downloads without it', async () => {
    const { ctx } = harness();
    await generate(image({ size: '1344x768' }), ctx);
    const [submit] = posts();
    assert.equal(submit!.path, '/v1/flux-pro-1.1');
    assert.equal(submit!.headers['x-key'], KEY);
    assert.match(String(submit!.headers['content-type']), /^application\/json/);
    assert.deepEqual(submit!.body, { prompt: 'A lighthouse at dusk', width: 1344, height: 768, output_format: 'png' });
    const polls = fake.requests.filter((request) => request.path.startsWith('/v1/get_result'));
    assert.ok(polls.length > 0 && polls.every((request) => request.headers['x-key'] === KEY));
    const download = fake.requests.find((request) => request.path.startsWith('/samples/'));
    assert.equal(download!.headers['x-key'], undefined);
  });

  it('sends aspect ratios to ultra (with raw for quality hd) and Kontext, and honours jpeg', async () => {
    await generate(
      image({ model: 'flux-pro-1.1-ultra', size: '2752x1536', quality: 'hd' }),
      harness({ model: 'flux-pro-1.1-ultra' }).ctx,
    );
    const result = await generate(
      image({ model: 'flux-kontext-pro', size: '1184x880', output_format: 'jpeg' }),
      harness({ model: 'flux-kontext-pro' }).ctx,
    );
    const [ultra, kontext] = posts();
    assert.equal(ultra!.path, '/v1/flux-pro-1.1-ultra');
    assert.deepEqual(ultra!.body, {
      prompt: 'A lighthouse at dusk',
      aspect_ratio: '16:9',
      output_format: 'png',
      raw: true,
    });
    assert.equal(kontext!.path, '/v1/flux-kontext-pro');
    assert.deepEqual(kontext!.body, { prompt: 'A lighthouse at dusk', aspect_ratio: '4:3', output_format: 'jpeg' });
    assert.equal(result.images[0]!.contentType, 'image/jpeg');
  });

  it('leaves the size to BFL for auto or no size', async () => {
    await generate(image({ size: 'auto' }), harness().ctx);
    assert.deepEqual(posts()[0]!.body, { prompt: 'A lighthouse at dusk', output_format: 'png' });
  });

  it('refuses what BFL would refuse, before submitting anything', async () => {
    const cases: Array<[Json, string, string]> = [
      [{ size: '1000x1000' }, 'flux-pro-1.1', 'size'],
      [{ size: '2048x2048' }, 'flux-pro-1.1', 'size'],
      [{ size: '128x128' }, 'flux-dev', 'size'],
      [{ size: 'big' }, 'flux-pro-1.1', 'size'],
      [{ size: '3072x1024' }, 'flux-pro-1.1-ultra', 'size'],
      [{ output_format: 'webp' }, 'flux-pro-1.1', 'output_format'],
      [{}, 'flux-pro-1.0-fill', 'model'],
    ];
    for (const [extra, model, param] of cases) {
      const error = await gatewayError(generate(image({ model, ...extra }), harness({ model }).ctx));
      assert.equal(error.status, 400, JSON.stringify(extra));
      assert.equal(error.param, param, JSON.stringify(extra));
    }
    assert.equal(fake.requests.length, 0);
  });

  it('maps sizes to named ratios when close, else to the reduced ratio', () => {
    assert.equal(convertSizeToAspectRatio(1024, 1024), '1:1');
    assert.equal(convertSizeToAspectRatio(1536, 2752), '9:16');
    assert.equal(convertSizeToAspectRatio(2368, 1792), '4:3');
    assert.equal(convertSizeToAspectRatio(1392, 752), '16:9');
    assert.equal(convertSizeToAspectRatio(1568, 672), '21:9');
    assert.equal(convertSizeToAspectRatio(1000, 1900), '10:19');
    assert.deepEqual(
      buildBflRequest(image({ model: 'flux-2-pro', size: '1040x1040', output_format: 'webp' }), 'flux-2-pro'),
      {
        prompt: 'A lighthouse at dusk',
        width: 1040,
        height: 1040,
        output_format: 'webp',
      },
    );
  });

  it('sends the key only to polling URLs on the channel origin or on BFL hosts over https', () => {
    const base = 'https://api.bfl.ai';
    const task = (pollingUrl?: string) => ({ id: 'abc', polling_url: pollingUrl });
    assert.equal(
      bflPollUrl(base, task('https://api.eu.bfl.ai/v1/get_result?id=abc')),
      'https://api.eu.bfl.ai/v1/get_result?id=abc',
    );
    assert.equal(
      bflPollUrl(base, task('https://api.bfl.ai/v1/get_result?id=abc')),
      'https://api.bfl.ai/v1/get_result?id=abc',
    );
    for (const foreign of [
      'http://api.eu.bfl.ai/v1/get_result?id=abc',
      'https://evilbfl.ai/x',
      'https://api.bfl.ai.evil.example/x',
      'not a url',
      undefined,
    ]) {
      assert.equal(bflPollUrl(base, task(foreign)), 'https://api.bfl.ai/v1/get_result?id=abc', String(foreign));
    }
  });
});

describe('bfl adapter: polling and the checkpoint', () => {
  it('polls until Ready, reports progress, and returns the downloaded bytes', async () => {
    fake.pollsUntilReady = 3;
    const { ctx, progress } = harness();
    const result: ImageResult = await generate(image(), ctx);
    assert.equal(result.images.length, 1);
    assert.deepEqual(result.images[0]!.bytes, FAKE_BFL_PNG);
    assert.equal(result.images[0]!.contentType, 'image/png');
    assert.deepEqual(progress, [25, 50, 75]);
    assert.equal(fake.polls, 4);
    assert.equal(fake.downloads, 1);
  });

  it('reads progress given on a 0–100 scale as a percentage', async () => {
    const hundred = await startFakeBfl({ apiKey: KEY, progressScale: 100, pollsUntilReady: 1 });
    try {
      const { ctx, progress } = harness({ baseUrl: hundred.url });
      await generate(image(), ctx);
      assert.deepEqual(progress, [50]);
    } finally {
      await hundred.close();
    }
    assert.equal(normaliseBflProgress(0.425), 42);
    assert.equal(normaliseBflProgress(1), 99, 'not done until Ready');
    assert.equal(normaliseBflProgress(-1), undefined);
    assert.equal(normaliseBflProgress('half'), undefined);
  });

  it('writes the task to the checkpoint right after the submit, before the first poll', async () => {
    const { ctx, writes } = harness();
    await generate(image(), ctx);
    assert.equal(writes.length, 1);
    assert.equal(writes[0]!.pollsAtWrite, 0);
    const [id] = [...fake.tasks.keys()];
    assert.deepEqual(writes[0]!.state, {
      [BFL_CHECKPOINT_KEY]: [{ id, polling_url: `${fake.url}/v1/get_result?id=${id}` }],
    });
  });

  it('a restarted worker resumes the recorded task: no second submission, same image', async () => {
    fake.pollsUntilReady = 4;
    const crashed = new AbortController();
    const store: Harness['store'] = { state: undefined };
    // The first worker dies the moment its checkpoint is written.
    const first = harness({ store, signal: crashed.signal, onWrite: () => crashed.abort(new Error('worker died')) });
    await assert.rejects(generate(image(), first.ctx), /worker died/);
    assert.equal(fake.submissions, 1);

    const second = harness({ store });
    const result = await generate(image(), second.ctx);
    assert.equal(fake.submissions, 1);
    assert.equal(posts().length, 1);
    assert.equal(second.writes.length, 0);
    assert.deepEqual(result.images[0]!.bytes, FAKE_BFL_PNG);
  });

  it('n=2 submits two tasks, checkpointing each, and returns both images', async () => {
    const { ctx, writes } = harness();
    const result = await generate(image({ n: 2 }), ctx);
    assert.equal(fake.submissions, 2);
    assert.deepEqual(
      writes.map((write) => write.state[BFL_CHECKPOINT_KEY].length),
      [1, 2],
    );
    assert.equal(result.images.length, 2);
  });

  it('submits only the tasks a dead attempt had not yet submitted', async () => {
    const store: Harness['store'] = { state: undefined };
    await generate(image(), harness({ store }).ctx);
    const result = await generate(image({ n: 2 }), harness({ store }).ctx);
    assert.equal(fake.submissions, 2);
    assert.equal(result.images.length, 2);
    assert.equal(store.state![BFL_CHECKPOINT_KEY].length, 2);
  });

  it('polls the channel origin when the polling URL names a foreign host', async () => {
    const foreign = await startFakeBfl({ apiKey: KEY, pollingOrigin: 'https://collector.example.com' });
    try {
      const result = await generate(image(), harness({ baseUrl: foreign.url }).ctx);
      assert.equal(result.images.length, 1);
      assert.ok(foreign.polls > 0);
    } finally {
      await foreign.close();
    }
  });

  it('stops polling promptly when the signal fires', async () => {
    fake.pollsUntilReady = 10_000;
    const controller = new AbortController();
    const promise = generate(image(), harness({ signal: controller.signal }).ctx);
    await sleep(120);
    const reason = new Error('client gone');
    const abortedAt = Date.now();
    controller.abort(reason);
    await assert.rejects(promise, (error) => error === reason);
    assert.ok(Date.now() - abortedAt < 1000, `took ${Date.now() - abortedAt} ms`);
    // A poll already on the wire when the abort fired may still reach the fake; none may start after.
    await sleep(50);
    const polls = fake.polls;
    await sleep(150);
    assert.equal(fake.polls, polls, 'no poll after the abort');
  });

  it('aborts a poll the vendor never answers', async () => {
    fake.hang.poll = true;
    const controller = new AbortController();
    const promise = generate(image(), harness({ signal: controller.signal }).ctx);
    await sleep(100);
    controller.abort(new Error('deadline'));
    await assert.rejects(promise, /deadline/);
    await sleep(30);
    assert.equal(fake.abortedRequests, 1);
  });
});

describe('bfl adapter: failures', () => {
  it('moderation is a 400 content_policy_violation with the vendor reason', async () => {
    fake.scriptOutcomes(
      { status: 'Content Moderated', details: { 'Moderation Reasons': ['Derivative Works'] } },
      { status: 'Request Moderated', afterPolls: 1 },
    );
    const content = await gatewayError(generate(image(), harness().ctx));
    assert.equal(content.status, 400);
    assert.equal(content.code, 'content_policy_violation');
    assert.match(content.message, /Derivative Works/);
    const request = await gatewayError(generate(image(), harness().ctx));
    assert.equal(request.code, 'content_policy_violation');
    assert.equal(request.status, 400);
  });

  it('Error and Failed are a 500 advising a retry, not retried by the job', async () => {
    fake.scriptOutcomes({ status: 'Error' }, { status: 'Failed' });
    for (let attempt = 0; attempt < 2; attempt += 1) {
      const error = await gatewayError(generate(image(), harness().ctx));
      assert.equal(error.status, 500);
      assert.equal(error.type, 'server_error');
      assert.equal(error.retryable, false);
      assert.match(error.message, /retry/i);
      assert.match(error.message, /prompt/i);
    }
  });

  it('a task the vendor no longer knows is a 500, with no silent resubmit', async () => {
    const store = {
      state: { [BFL_CHECKPOINT_KEY]: [{ id: 'gone', polling_url: `${fake.url}/v1/get_result?id=gone` }] },
    };
    const error = await gatewayError(generate(image(), harness({ store }).ctx));
    assert.equal(error.status, 500);
    assert.equal(error.code, 'vendor_task_lost');
    assert.equal(fake.submissions, 0);
    assert.equal(fake.polls, 3);
  });

  it('an expired sample link is a 502 that is not retried', async () => {
    fake.scriptOutcomes({ status: 'Ready', sampleExpired: true });
    const error = await gatewayError(generate(image(), harness().ctx));
    assert.equal(error.code, 'vendor_result_expired');
    assert.equal(error.retryable, false);
  });

  it('429 on submit is retryable with the vendor wait, and records no task', async () => {
    fake.failSubmits({
      status: 429,
      json: { detail: 'You have exceeded the number of active tasks.' },
      headers: { 'retry-after': '3' },
    });
    const { ctx, writes } = harness();
    const error = await gatewayError(generate(image(), ctx));
    assert.equal(error.status, 429);
    assert.equal(error.retryable, true);
    assert.equal(error.retryAfterMs, 3000);
    assert.equal(writes.length, 0);
  });

  it('429 and 5xx while polling are retryable, and the retry resumes the same task', async () => {
    const store: Harness['store'] = { state: undefined };
    fake.failPolls({ status: 429, json: { detail: 'Too many requests' }, headers: { 'retry-after': '1' } });
    const limited = await gatewayError(generate(image(), harness({ store }).ctx));
    assert.equal(limited.status, 429);
    assert.equal(limited.retryable, true);
    fake.failPolls({ status: 503, json: { detail: 'Service unavailable' } });
    const unavailable = await gatewayError(generate(image(), harness({ store }).ctx));
    assert.equal(unavailable.status, 502);
    assert.equal(unavailable.retryable, true);
    const result = await generate(image(), harness({ store }).ctx);
    assert.equal(result.images.length, 1);
    assert.equal(fake.submissions, 1);
  });

  it('5xx on submit is retryable', async () => {
    fake.failSubmits({ status: 500, json: { detail: 'Internal Server Error' } });
    const error = await gatewayError(generate(image(), harness().ctx));
    assert.equal(error.status, 502);
    assert.equal(error.retryable, true);
  });

  it('a rejected key is the gateway’s misconfiguration, and the key never shows', async () => {
    const error = await gatewayError(generate(image(), harness({ apiKey: 'wrong-key-0123456789' }).ctx));
    assert.equal(error.status, 502);
    assert.equal(error.code, 'vendor_auth_failed');
    assert.equal(error.retryable, false);
    assert.ok(!error.message.includes('wrong-key'));
  });

  it('402 (out of credits) is an exhausted quota, never retried', async () => {
    fake.failSubmits({ status: 402, json: { detail: 'Insufficient credits' } });
    const error = await gatewayError(generate(image(), harness().ctx));
    assert.equal(error.code, 'vendor_quota_exhausted');
    assert.equal(error.retryable, false);
  });

  it('a 422 from BFL is the client’s 400 with the vendor message and the OpenAI parameter', async () => {
    const error = await gatewayError(generate(image({ prompt: '   ' }), harness().ctx));
    assert.equal(error.status, 400);
    assert.equal(error.param, 'prompt');
    assert.match(error.message, /prompt: Field required/);
    const mapped = mapBflError({
      status: 422,
      headers: {},
      bodyText: JSON.stringify({
        detail: [{ loc: ['body', 'width'], msg: 'Input should be a multiple of 32', type: 'multiple_of' }],
      }),
    });
    assert.equal(mapped.status, 400);
    assert.equal(mapped.param, 'size');
    assert.equal(mapped.message, 'width: Input should be a multiple of 32');
  });

  it('reads `state` for `status`, and Task not found in a 200', () => {
    assert.deepEqual(readBflPollAnswer({ state: 'Pending', progress: 0.3 }), { kind: 'pending', progress: 30 });
    assert.deepEqual(readBflPollAnswer({ status: 'Task not found' }), { kind: 'not_found' });
    assert.throws(() => readBflPollAnswer({ status: 'Ready', result: {} }), GatewayError);
    assert.throws(() => readBflPollAnswer({}), GatewayError);
  });
});

describe('bfl adapter: edits', () => {
  it('Kontext: the upload goes as input_image, base64 without a data: prefix', async () => {
    const photo = createFakePng([200, 40, 40], 4);
    const result = await editImages(edit({}, [await upload(photo)]), harness({ model: 'flux-kontext-pro' }).ctx);
    const [submit] = posts();
    assert.equal(submit!.path, '/v1/flux-kontext-pro');
    assert.equal(submit!.headers['x-key'], KEY);
    assert.deepEqual(submit!.body, { prompt: 'Make it night', input_image: b64(photo), output_format: 'png' });
    assert.equal(result.images.length, 1);
    assert.deepEqual(result.images[0]!.bytes, FAKE_BFL_PNG);
  });

  it('Kontext: further uploads go as input_image_2…, in order, and size as aspect_ratio', async () => {
    const photos = [
      createFakePng([1, 2, 3]),
      createFakePng([4, 5, 6]),
      createFakePng([7, 8, 9]),
      createFakePng([10, 11, 12]),
    ];
    const refs = await Promise.all(photos.map((photo) => upload(photo)));
    const ctx = harness({ model: 'flux-kontext-max' }).ctx;
    const result = await editImages(
      edit({ model: 'flux-kontext-max', size: '1392x752', output_format: 'jpeg' }, refs),
      ctx,
    );
    const [submit] = posts();
    assert.equal(submit!.path, '/v1/flux-kontext-max');
    assert.deepEqual(submit!.body, {
      prompt: 'Make it night',
      input_image: b64(photos[0]!),
      input_image_2: b64(photos[1]!),
      input_image_3: b64(photos[2]!),
      input_image_4: b64(photos[3]!),
      aspect_ratio: '16:9',
      output_format: 'jpeg',
    });
    assert.equal(result.images[0]!.contentType, 'image/jpeg');
  });

  it('Fill: image and mask as base64, the OpenAI mask turned into BFL black and white', async () => {
    const photo = createFakePng([90, 90, 90], 4);
    // OpenAI's form: the left half transparent (to edit), the right half opaque (to keep).
    const mask = encodeTestPng({ width: 4, height: 4, colourType: 6, pixel: (x) => [0, 0, 0, x < 2 ? 0 : 255] });
    const result = await editImages(
      edit({ model: 'flux-pro-1.0-fill', prompt: 'A red door' }, [await upload(photo)], await upload(mask)),
      harness({ model: 'flux-pro-1.0-fill' }).ctx,
    );
    const [submit] = posts();
    assert.equal(submit!.path, '/v1/flux-pro-1.0-fill');
    const body = submit!.body as Json;
    assert.deepEqual(Object.keys(body).sort(), ['image', 'mask', 'output_format', 'prompt']);
    assert.deepEqual(
      { ...body, mask: '…' },
      { prompt: 'A red door', image: b64(photo), mask: '…', output_format: 'png' },
    );
    assert.deepEqual(readGreyPng(Buffer.from(body.mask, 'base64')), {
      width: 4,
      height: 4,
      pixels: Array.from({ length: 16 }, (_, i) => (i % 4 < 2 ? 255 : 0)),
    });
    assert.equal(result.images.length, 1);

    // A mask that is black and white already (no transparency) goes as it came.
    fake.reset();
    const blackAndWhite = encodeTestPng({
      width: 4,
      height: 4,
      colourType: 0,
      pixel: (x) => (x < 2 ? [255, 255, 255, 255] : [0, 0, 0, 255]),
    });
    await editImages(
      edit({ model: 'flux-pro-1.0-fill' }, [await upload(photo)], await upload(blackAndWhite)),
      harness({ model: 'flux-pro-1.0-fill' }).ctx,
    );
    assert.equal((posts()[0]!.body as Json).mask, b64(blackAndWhite));
  });

  it('maps the short endpoint names BFL also lists', () => {
    const fields = (endpoint: string, images: number, mask: boolean) =>
      buildBflEditRequest(
        edit({}, Array.from({ length: images }, absent), mask ? absent() : undefined),
        endpoint,
      ).uploads.map((item) => item.field);
    assert.deepEqual(fields('flux-fill', 1, true), ['image', 'mask']);
    assert.deepEqual(fields('flux-kontext', 2, false), ['input_image', 'input_image_2']);
  });

  it('refuses what the endpoint cannot take with a 400, before reading an upload or submitting', async () => {
    const cases: Array<[string, Json, number, boolean, string]> = [
      ['flux-kontext-pro', {}, 1, true, 'mask'],
      ['flux-kontext-pro', {}, 5, false, 'image'],
      ['flux-kontext-pro', {}, 0, false, 'image'],
      ['flux-kontext-pro', { size: '3072x1024' }, 1, false, 'size'],
      ['flux-kontext-pro', { output_format: 'webp' }, 1, false, 'output_format'],
      ['flux-pro-1.0-fill', {}, 1, false, 'mask'],
      ['flux-pro-1.0-fill', {}, 2, true, 'image'],
      ['flux-pro-1.0-fill', { size: '1024x1024' }, 1, true, 'size'],
      ['flux-pro-1.1', {}, 1, false, 'model'],
      ['flux-pro-1.0-expand', {}, 1, true, 'model'],
    ];
    for (const [model, extra, images, withMask, param] of cases) {
      const label = `${model} ${JSON.stringify(extra)} images=${images} mask=${withMask}`;
      const input = edit({ model, ...extra }, Array.from({ length: images }, absent), withMask ? absent() : undefined);
      const error = await gatewayError(editImages(input, harness({ model }).ctx));
      assert.equal(error.status, 400, label);
      assert.equal(error.type, 'invalid_request_error', label);
      assert.equal(error.param, param, label);
    }
    const fill = await gatewayError(
      editImages(edit({ model: 'flux-pro-1.0-fill' }, [absent()]), harness({ model: 'flux-pro-1.0-fill' }).ctx),
    );
    assert.match(fill.message, /mask/);
    assert.equal(fill.code, 'missing_required_parameter');
    const kontext = await gatewayError(
      editImages(edit({}, [absent()], absent()), harness({ model: 'flux-kontext-pro' }).ctx),
    );
    assert.match(kontext.message, /no mask/);
    assert.equal(fake.requests.length, 0);
  });

  it('refuses a mask that claims to be a PNG but cannot be read, submitting nothing', async () => {
    const broken = encodeTestPng({ width: 4, height: 4, colourType: 6, pixel: () => [0, 0, 0, 0] }).subarray(0, 40);
    const error = await gatewayError(
      editImages(
        edit({ model: 'flux-pro-1.0-fill' }, [await upload(createFakePng())], await upload(broken)),
        harness({ model: 'flux-pro-1.0-fill' }).ctx,
      ),
    );
    assert.equal(error.status, 400);
    assert.equal(error.param, 'mask');
    assert.equal(fake.requests.length, 0);
  });

  it(
    'checkpoints the edit task before the first poll; a restarted attempt polls it without submitting or reading ' +
      'the uploads again',
    async () => {
      fake.pollsUntilReady = 4;
      const photo = createFakePng([5, 6, 7], 4);
      const ref = await upload(photo);
      const crashed = new AbortController();
      const store: Harness['store'] = { state: undefined };
      const first = harness({
        model: 'flux-kontext-pro',
        store,
        signal: crashed.signal,
        onWrite: () => crashed.abort(new Error('worker died')),
      });
      await assert.rejects(editImages(edit({}, [ref]), first.ctx), /worker died/);
      assert.equal(fake.submissions, 1);
      assert.equal(first.writes.length, 1);
      assert.equal(first.writes[0]!.pollsAtWrite, 0);
      const [id] = [...fake.tasks.keys()];
      assert.deepEqual(first.writes[0]!.state, {
        [BFL_CHECKPOINT_KEY]: [{ id, polling_url: `${fake.url}/v1/get_result?id=${id}` }],
      });

      // The upload is gone: the resumed attempt needs only its checkpoint.
      await blobs.delete(ref.key);
      const second = harness({ model: 'flux-kontext-pro', store });
      const result = await editImages(edit({}, [ref]), second.ctx);
      assert.equal(fake.submissions, 1);
      assert.equal(posts().length, 1);
      assert.equal(second.writes.length, 0);
      assert.ok(fake.requests.some((request) => request.path === `/v1/get_result?id=${id}`));
      assert.deepEqual(result.images[0]!.bytes, FAKE_BFL_PNG);
    },
  );

  it('n=2 submits two tasks with the same body, checkpointing each', async () => {
    const { ctx, writes } = harness({ model: 'flux-kontext-pro' });
    const result = await editImages(edit({ n: 2 }, [await upload(createFakePng())]), ctx);
    assert.equal(fake.submissions, 2);
    assert.deepEqual(
      writes.map((write) => write.state[BFL_CHECKPOINT_KEY].length),
      [1, 2],
    );
    const [a, b] = posts();
    assert.deepEqual(a!.body, b!.body);
    assert.equal(result.images.length, 2);
  });

  it('the fake answers an incomplete edit the way BFL does, and the 422 names the OpenAI parameter', async () => {
    const submit = async (endpoint: string, body: Json) => {
      const response = await fetch(`${fake.url}/v1/${endpoint}`, {
        method: 'POST',
        headers: { 'x-key': KEY, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return { status: response.status, headers: {}, bodyText: await response.text() };
    };
    const image = b64(createFakePng());
    const cases: Array<[string, Json, string[], string]> = [
      ['flux-pro-1.0-fill', { prompt: 'x', image }, ['body', 'mask'], 'mask'],
      ['flux-pro-1.0-fill', { prompt: 'x', mask: image }, ['body', 'image'], 'image'],
      ['flux-pro-1.0-fill', { prompt: 'x', image, mask: 7 }, ['body', 'mask'], 'mask'],
      [
        'flux-kontext-pro',
        { prompt: 'x', input_image: `data:image/png;base64,${image}` },
        ['body', 'input_image'],
        'image',
      ],
      [
        'flux-kontext-pro',
        { prompt: 'x', input_image: image, input_image_2: null },
        ['body', 'input_image_2'],
        'image',
      ],
      ['flux-kontext-pro', { input_image: image }, ['body', 'prompt'], 'prompt'],
      [
        'flux-kontext-pro',
        { prompt: 'x', input_image: image, input_image_5: image },
        ['body', 'input_image_5'],
        'image',
      ],
    ];
    for (const [endpoint, body, loc, param] of cases) {
      const answer = await submit(endpoint, body);
      const label = `${endpoint} ${Object.keys(body).join(',')}`;
      assert.equal(answer.status, 422, label);
      const detail = JSON.parse(answer.bodyText).detail as Json[];
      assert.deepEqual(detail[0]!.loc, loc, label);
      assert.equal(typeof detail[0]!.msg, 'string', label);
      assert.equal(typeof detail[0]!.type, 'string', label);
      if (loc[1] !== 'input_image_5') assert.equal(mapBflError(answer).param, param, label);
    }
    assert.equal(fake.submissions, 0);
  });
});

/** Reads the gateway's mask: an 8-bit greyscale PNG, unfiltered rows. */
function readGreyPng(png: Buffer): { width: number; height: number; pixels: number[] } {
  assert.equal(png[25], 0, 'written as greyscale');
  const decoded = PNG.sync.read(png);
  const pixels = Array.from({ length: decoded.width * decoded.height }, (_, i) => decoded.data[i * 4]!);
  return { width: decoded.width, height: decoded.height, pixels };
}

describe('OpenAI masks to BFL masks', () => {
  const width = 13;
  const height = 11;
  const hole = (x: number, y: number) => (x * 3 + y * 5) % 7 < 3;
  const expected = {
    width,
    height,
    pixels: Array.from({ length: width * height }, (_, i) => (hole(i % width, Math.floor(i / width)) ? 255 : 0)),
  };
  const shape = { width, height };

  const variants: Array<[string, TestPngOptions]> = [
    // Alpha 1 is not fully transparent: only alpha 0 marks the area to edit.
    ['RGBA', { ...shape, colourType: 6, pixel: (x, y) => [10, 20, 30, hole(x, y) ? 0 : x % 2 ? 1 : 255] }],
    ['grey+alpha', { ...shape, colourType: 4, pixel: (x, y) => [x * 9, x * 9, x * 9, hole(x, y) ? 0 : 200] }],
  ];
  for (const [name, options] of variants) {
    it(`reads transparency from ${name}`, () => {
      assert.deepEqual(readGreyPng(convertOpenAIMaskToBfl(encodeTestPng(options))), expected);
    });
  }

  it('sends masks with no transparent pixel, and non-PNG masks, as they came', async () => {
    const unchanged = [
      encodeTestPng({ ...shape, colourType: 2, pixel: (x, y) => (hole(x, y) ? [255, 255, 255, 255] : [0, 0, 0, 255]) }),
      encodeTestPng({ ...shape, colourType: 6, pixel: (x, y) => (hole(x, y) ? [255, 255, 255, 255] : [0, 0, 0, 255]) }),
      Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0x10, 0x4a, 0x46, 0x49, 0x46, 0, 0xff, 0xd9]),
    ];
    for (const mask of unchanged) assert.equal(convertOpenAIMaskToBfl(mask), mask);
  });

  it('refuses unreadable or oversized PNG masks as a 400 on mask', async () => {
    const good = encodeTestPng({ ...shape, colourType: 6, pixel: () => [0, 0, 0, 0] });
    const huge = Buffer.from(good);
    huge.writeUInt32BE(100_000, 16); // IHDR width; the CRC is not checked, the size is
    const corrupt = Buffer.from(good);
    corrupt.fill(0x55, 45, 60); // inside the compressed data
    for (const mask of [good.subarray(0, 30), huge, corrupt]) {
      const error = await gatewayError(Promise.resolve().then(() => convertOpenAIMaskToBfl(mask)));
      assert.equal(error.status, 400);
      assert.equal(error.param, 'mask');
    }
  });
});
