import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { startFakeOpenAI, type FakeHandler, type FakeOpenAI } from '../support/fake-openai.js';
import { createFakeOpenAIImages } from '../support/fake-openai-images.js';
import { createFakeOpenAIMedia, type FakeOpenAIMedia } from '../support/fake-openai-media.js';
import { toFile } from 'openai';
import { createFakePng, encodeTestPng, startFakeBfl, type FakeBfl } from '../support/fake-bfl.js';
import { startFakeGemini } from '../support/fake-gemini.js';
import { installGeminiImages } from '../support/fake-gemini-images.js';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

const pngSignature = '89504e470d0a1a0a';

/** Every image family through the official client, against strict fake vendors; and a worker killed mid-poll. */
describe('image families behind their vendors', () => {
  let openai: FakeOpenAI;
  let bfl: FakeBfl;
  let gemini: Awaited<ReturnType<typeof startFakeGemini>>;
  let redis: Redis;
  let api: GatewayProcess;
  const workers: GatewayProcess[] = [];
  let client: OpenAI;
  let env: Record<string, string>;
  let media: FakeOpenAIMedia;
  let openaiDefault: FakeHandler;

  before(async () => {
    [openai, bfl, gemini] = await Promise.all([startFakeOpenAI(), startFakeBfl(), startFakeGemini()]);
    const images = createFakeOpenAIImages();
    media = createFakeOpenAIMedia({ pollsToComplete: 30 });
    // One fake OpenAI serves both: image routes first, then transcriptions and videos.
    openaiDefault = async (request) =>
      request.path.includes('/images') || request.path.startsWith('/fake-images')
        ? images(request)
        : media.handler(request);
    openai.setDefault(openaiDefault);
    installGeminiImages(gemini);
    const fresh = await freshRedis(2);
    redis = fresh.redis;
    env = {
      REDIS_URL: fresh.url,
      OPENAI_API_KEY: 'sk-images',
      OPENAI_BASE_URL: openai.url,
      BFL_API_KEY: 'bfl-key',
      BFL_BASE_URL: bfl.url,
      GEMINI_API_KEY: 'gemini-key',
      GEMINI_BASE_URL: gemini.url,
      BFL_POLL_INTERVAL_MS: '50',
      VIDEO_POLL_INTERVAL_MS: '50',
      RETRY_BASE_MS: '20',
      CHANNEL_FAILURE_THRESHOLD: '100',
      WORKER_LOCK_MS: '2000',
    };
    api = await startGateway({ role: 'api', env });
    workers.push(await startGateway({ role: 'worker', env }));
    client = api.client((await createKey(redis)).key, { timeout: 30_000 });
  });

  after(async () => {
    await Promise.all([api?.stop(), ...workers.map((w) => w.stop('SIGKILL'))]);
    await Promise.all([openai?.close(), bfl?.close(), gemini?.close(), media?.close()]);
    redis?.disconnect();
  });

  const families: Array<{ family: string; model: string; good: string; bad: string }> = [
    { family: 'A (dall-e-3)', model: 'dall-e-3', good: '1792x1024', bad: '512x512' },
    { family: 'B (dall-e-2)', model: 'dall-e-2', good: '512x512', bad: '1792x1024' },
    { family: 'C (gpt-image-1)', model: 'gpt-image-1', good: '1536x1024', bad: '256x256' },
    { family: 'D (flux-pro-1.1)', model: 'flux-pro-1.1', good: '1024x768', bad: '1792x1024' },
    { family: 'E (gemini image)', model: 'gemini-2.5-flash-image', good: '1024x1024', bad: '256x256' },
  ];

  for (const { family, model, good, bad } of families) {
    it(`family ${family}: generates, and refuses a size it does not take`, async () => {
      const result = await client.images.generate({
        model,
        prompt: 'a lighthouse at dusk',
        size: good as '1024x1024',
        response_format: 'b64_json',
      });
      const bytes = Buffer.from(result.data![0]!.b64_json!, 'base64');
      assert.equal(bytes.subarray(0, 8).toString('hex'), pngSignature);
      await assert.rejects(
        client.images.generate({ model, prompt: 'x', size: bad as '1024x1024' }),
        (error: unknown) =>
          error instanceof OpenAI.BadRequestError && error.param === 'size' && error.message.includes(good),
      );
    });
  }

  it('dall-e-3 makes one image per request', async () => {
    await assert.rejects(
      client.images.generate({ model: 'dall-e-3', prompt: 'two please', n: 2 }),
      (error: unknown) => error instanceof OpenAI.BadRequestError && error.param === 'n',
    );
  });

  it('returns the gateway URL for a URL answer, and the link serves the image', async () => {
    const result = await client.images.generate({
      model: 'dall-e-2',
      prompt: 'fox',
      size: '256x256',
      response_format: 'url',
    });
    const url = result.data![0]!.url!;
    assert.ok(url.startsWith(`${api.url}/v1/blobs/`), url);
    const res = await fetch(url);
    assert.equal(res.status, 200);
    assert.equal(
      Buffer.from(await res.arrayBuffer())
        .subarray(0, 8)
        .toString('hex'),
      pngSignature,
    );
  });

  it('downloads an image the vendor answered with a URL, and fails clearly when that URL is gone', async () => {
    const origin = openai.url.replace(/\/v1$/, '');
    openai.enqueue({ json: { created: 1, data: [{ url: `${origin}/fake-images/0.png` }] } });
    const result = await client.images.generate({
      model: 'dall-e-2',
      prompt: 'by url',
      size: '256x256',
      response_format: 'b64_json',
    });
    assert.equal(Buffer.from(result.data![0]!.b64_json!, 'base64').subarray(0, 8).toString('hex'), pngSignature);

    // Every attempt gets a link that no longer serves the image.
    openai.setDefault((request) =>
      request.method === 'POST'
        ? { json: { created: 1, data: [{ url: `${origin}/no-such-image.png` }] } }
        : { status: 404, json: { error: { message: 'gone', type: 'invalid_request_error', param: null, code: null } } },
    );
    try {
      await assert.rejects(
        client.images.generate({ model: 'dall-e-2', prompt: 'by url', size: '256x256', response_format: 'b64_json' }),
        (error: unknown) => error instanceof OpenAI.APIError && error.status === 502,
      );
    } finally {
      openai.setDefault(openaiDefault);
    }
  });

  it('maps a moderated Flux task to 400 with the vendor reason', async () => {
    bfl.scriptOutcomes({ status: 'Content Moderated', details: { 'Moderation Reasons': ['Violence'] } } as never);
    await assert.rejects(
      client.images.generate({ model: 'flux-pro-1.1', prompt: 'something bad', size: '1024x768' }),
      (error: unknown) => error instanceof OpenAI.BadRequestError && error.code === 'content_policy_violation',
    );
  });

  it('edits through FLUX Kontext and FLUX Fill: uploads as base64, a Fill edit without a mask refused', async () => {
    bfl.reset();
    const photo = createFakePng([180, 120, 60], 8);
    const kontext = await client.images.edit({
      model: 'flux-kontext-pro',
      image: await toFile(photo, 'photo.png', { type: 'image/png' }),
      prompt: 'make it night',
      response_format: 'b64_json',
    });
    assert.equal(Buffer.from(kontext.data![0]!.b64_json!, 'base64').subarray(0, 8).toString('hex'), pngSignature);
    const [kontextSubmit] = bfl.requests.filter((request) => request.method === 'POST');
    assert.equal(kontextSubmit!.path, '/v1/flux-kontext-pro');
    assert.deepEqual(kontextSubmit!.body, {
      prompt: 'make it night',
      input_image: photo.toString('base64'),
      output_format: 'png',
    });

    bfl.reset();
    // OpenAI's form: the transparent top half is the area to edit.
    const mask = encodeTestPng({ width: 8, height: 8, colourType: 6, pixel: (_x, y) => [0, 0, 0, y < 4 ? 0 : 255] });
    const fill = await client.images.edit({
      model: 'flux-pro-1.0-fill',
      image: await toFile(photo, 'photo.png', { type: 'image/png' }),
      mask: await toFile(mask, 'mask.png', { type: 'image/png' }),
      prompt: 'a clear blue sky',
      response_format: 'b64_json',
    });
    assert.equal(Buffer.from(fill.data![0]!.b64_json!, 'base64').subarray(0, 8).toString('hex'), pngSignature);
    const [fillSubmit] = bfl.requests.filter((request) => request.method === 'POST');
    assert.equal(fillSubmit!.path, '/v1/flux-pro-1.0-fill');
    const body = fillSubmit!.body as Record<string, string>;
    assert.deepEqual(Object.keys(body).sort(), ['image', 'mask', 'output_format', 'prompt']);
    assert.equal(body.image, photo.toString('base64'));
    assert.equal(Buffer.from(body.mask!, 'base64').subarray(0, 8).toString('hex'), pngSignature);
    assert.notEqual(body.mask, mask.toString('base64'), 'the OpenAI mask was turned into a black-and-white one');

    await assert.rejects(
      client.images.edit({
        model: 'flux-pro-1.0-fill',
        image: await toFile(photo, 'photo.png', { type: 'image/png' }),
        prompt: 'no mask',
      }),
      (error: unknown) => error instanceof OpenAI.BadRequestError && error.param === 'mask',
    );
    assert.equal(bfl.submissions, 1, 'the refused edit reached no vendor');
  });

  it('finishes a Flux job whose worker was killed while polling, without a second submission', async () => {
    bfl.reset();
    bfl.pollsUntilReady = 30; // about 1.5 s of polling at 50 ms
    const pending = client.images.generate({
      model: 'flux-pro-1.1',
      prompt: 'resume me',
      size: '1024x768',
      response_format: 'b64_json',
    });
    await waitFor(() => bfl.polls >= 3, 10_000, 'the worker to be polling');
    for (const worker of workers.splice(0)) await worker.stop('SIGKILL');
    workers.push(await startGateway({ role: 'worker', env }));
    const result = await pending;
    assert.equal(Buffer.from(result.data![0]!.b64_json!, 'base64').subarray(0, 8).toString('hex'), pngSignature);
    assert.equal(bfl.submissions, 1, 'the vendor task was resumed, not submitted again');
  });

  it('transcribes through the OpenAI protocol, passing the vendor body through', async () => {
    const file = await toFile(Buffer.from('RIFF....WAVEfmt '), 'clip.wav', { type: 'audio/wav' });
    const srt = await client.audio.transcriptions.create({ model: 'whisper-1', file, response_format: 'srt' });
    assert.match(String(srt), /-->/);
    await assert.rejects(
      client.audio.transcriptions.create({ model: 'gpt-4o-transcribe', file, response_format: 'srt' }),
      (error: unknown) => error instanceof OpenAI.BadRequestError && error.param === 'response_format',
    );
  });

  it('finishes a sora video whose worker was killed while polling, without creating it twice', async () => {
    media.reset();
    const created = await client.videos.create({ model: 'sora-2-landscape' as 'sora-2', prompt: 'a harbour at dawn' });
    assert.equal(created.size, '1280x720', 'the landscape variant brings its default size');
    await waitFor(() => media.polls >= 3, 10_000, 'the worker to be polling the vendor');
    for (const worker of workers.splice(0)) await worker.stop('SIGKILL');
    workers.push(await startGateway({ role: 'worker', env }));
    let video = created;
    await waitFor(
      async () => {
        video = await client.videos.retrieve(created.id);
        return video.status === 'completed' || video.status === 'failed';
      },
      20_000,
      'the video',
    );
    assert.equal(video.status, 'completed');
    const content = Buffer.from(await (await client.videos.downloadContent(created.id)).arrayBuffer());
    assert.ok(content.length > 0);
    assert.equal(media.created, 1, 'the vendor job was resumed, not created again');
  });
});
