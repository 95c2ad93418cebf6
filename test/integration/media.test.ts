import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import WebSocket from 'ws';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startS3 } from '../support/s3-server.js';
import { encodeGradientPng } from '../../workers/vendors/mock/png.js';

/** Width and height from a PNG's IHDR. */
function pngSize(bytes: Buffer): { width: number; height: number } {
  assert.equal(bytes.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'PNG signature');
  return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
}

const tinyPng = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==',
  'base64',
);

/** The events of a job's WebSocket until the server closes it (it must, once the job has ended). */
async function watchToEnd(wsUrl: string, apiKey: string): Promise<Array<{ type: string; status: string }>> {
  const events: Array<{ type: string; status: string }> = [];
  await new Promise<void>((resolve, reject) => {
    const ws = new WebSocket(wsUrl, { headers: { authorization: `Bearer ${apiKey}` } });
    // One left open is a watcher waiting forever.
    const stuck = setTimeout(
      () => reject(new Error(`the socket is still open 15 s on; events: ${JSON.stringify(events)}`)),
      15_000,
    );
    ws.on('message', (data) => events.push(JSON.parse(String(data))));
    ws.on('close', () => {
      clearTimeout(stuck);
      resolve();
    });
    ws.on('error', reject);
  });
  return events;
}

// Images, audio and video through the queue, offline with the mock vendor; the same suite on the
// local blob directory and on S3-compatible storage.
for (const storage of ['local', 's3'] as const)
  describe(`media through the queue (mock vendor, ${storage} blobs)`, () => {
    let gateway: GatewayProcess;
    let s3: Awaited<ReturnType<typeof startS3>> | undefined;
    let redis: Redis;
    let client: OpenAI;
    let apiKey: string;
    let otherKey: string;

    before(async () => {
      const fresh = await freshRedis(1);
      redis = fresh.redis;
      apiKey = (await createKey(redis)).key;
      otherKey = (await createKey(redis, 'other')).key;
      s3 = storage === 's3' ? await startS3() : undefined;
      gateway = await startGateway({ env: { REDIS_URL: fresh.url, MOCK_VIDEO_MS: '600', ...(s3?.env ?? {}) } });
      client = gateway.client(apiKey, { timeout: 30_000 });
    });

    after(async () => {
      await gateway?.stop();
      await s3?.close();
      redis?.disconnect();
    });

    it('generates images of the requested size, as base64 or as a signed URL fetchable without a key', async () => {
      const b64 = await client.images.generate({
        model: 'mock-image',
        prompt: 'a red fox',
        size: '512x512',
        n: 2,
        response_format: 'b64_json',
      });
      assert.equal(b64.data!.length, 2);
      assert.deepEqual(pngSize(Buffer.from(b64.data![0]!.b64_json!, 'base64')), { width: 512, height: 512 });

      const linked = await client.images.generate({
        model: 'mock-image',
        prompt: 'a red fox',
        size: '1792x1024',
        response_format: 'url',
      });
      const url = linked.data![0]!.url!;
      assert.match(url, /\/v1\/blobs\/images\/.+\?expires=\d+&signature=/);
      assert.ok(url.startsWith(`${gateway.url}/v1/blobs/`), `the link points at the gateway the client called: ${url}`);
      const local = url;
      const fetched = await fetch(local);
      assert.equal(fetched.status, 200);
      assert.equal(fetched.headers.get('content-type'), 'image/png');
      assert.deepEqual(pngSize(Buffer.from(await fetched.arrayBuffer())), { width: 1792, height: 1024 });
      assert.equal((await fetch(local.replace(/signature=[^&]+/, 'signature=forged'))).status, 403);
    });

    it('refuses a size the model does not take, naming the allowed sizes', async () => {
      await assert.rejects(
        client.images.generate({ model: 'mock-image', prompt: 'x', size: '999x999' as '1024x1024' }),
        (error: unknown) =>
          error instanceof OpenAI.BadRequestError && error.param === 'size' && /1024x1024/.test(error.message),
      );
    });

    it('holds a slow image request open until the image exists', async () => {
      const started = Date.now();
      const image = await client.images.generate({
        model: 'mock-image',
        prompt: 'slow [mock:slow:4200]',
        size: '256x256',
        response_format: 'b64_json',
      });
      assert.ok(Date.now() - started >= 4000);
      assert.deepEqual(pngSize(Buffer.from(image.data![0]!.b64_json!, 'base64')), { width: 256, height: 256 });
    });

    it('edits an image with a mask; refuses a missing image', async () => {
      const edited = await client.images.edit({
        model: 'mock-image',
        image: await toFile(tinyPng, 'photo.png', { type: 'image/png' }),
        mask: await toFile(tinyPng, 'mask.png', { type: 'image/png' }),
        prompt: 'add a hat',
        size: '256x256',
        response_format: 'b64_json',
      });
      assert.deepEqual(pngSize(Buffer.from(edited.data![0]!.b64_json!, 'base64')), { width: 256, height: 256 });

      const form = new FormData();
      form.set('model', 'mock-image');
      form.set('prompt', 'no image');
      const res = await fetch(`${gateway.url}/v1/images/edits`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}` },
        body: form,
      });
      assert.equal(res.status, 400);
      assert.equal(((await res.json()) as { error: { param: string } }).error.param, 'image');
    });

    it('checks edit uploads against the model before any vendor call', async () => {
      const refused = async (fields: { model: string; image: Buffer; mask?: Buffer }, param: string, code: string) => {
        const request = client.images.edit({
          model: fields.model,
          image: await toFile(fields.image, 'photo.png', { type: 'image/png' }),
          ...(fields.mask ? { mask: await toFile(fields.mask, 'mask.png', { type: 'image/png' }) } : {}),
          prompt: 'add a hat',
        });
        await assert.rejects(request, (error: unknown) => {
          assert.ok(error instanceof OpenAI.BadRequestError, String(error));
          const body = error.error as { param?: string; code?: string; message?: string };
          assert.equal(body.param, param, body.message);
          assert.equal(body.code, code, body.message);
          return true;
        });
      };
      const gray = [
        [0, 0, 0],
        [80, 80, 80],
        [160, 160, 160],
        [255, 255, 255],
      ] as const;
      const wide = encodeGradientPng(4, 2, gray);
      // Named and typed as a PNG, but not one: the content decides.
      await refused(
        { model: 'gpt-image-1', image: Buffer.from('definitely not an image') },
        'image',
        'invalid_image_format',
      );
      // dall-e-2 edits square PNGs only, with a mask of the same size.
      await refused({ model: 'dall-e-2', image: wide }, 'image', 'invalid_image_dimensions');
      await refused(
        { model: 'dall-e-2', image: encodeGradientPng(4, 4, gray), mask: encodeGradientPng(2, 2, gray) },
        'mask',
        'invalid_image_dimensions',
      );
      await refused(
        { model: 'dall-e-2', image: tinyPng, mask: Buffer.from([0xff, 0xd8, 0xff, 0xe0]) },
        'mask',
        'invalid_image_format',
      );
      // A GPT image model takes any shape.
      const edited = await client.images.edit({
        model: 'gpt-image-1',
        image: await toFile(wide, 'wide.png', { type: 'image/png' }),
        prompt: 'x',
      });
      assert.ok(edited.data![0]!.b64_json);
    });

    it('transcribes in every response format', async () => {
      const file = await toFile(Buffer.alloc(48_000, 1), 'speech.wav', { type: 'audio/wav' });
      const json = await client.audio.transcriptions.create({
        model: 'mock-transcribe',
        file,
        response_format: 'json',
      });
      assert.match(json.text, /speech\.wav/);
      const text = await client.audio.transcriptions.create({
        model: 'mock-transcribe',
        file,
        response_format: 'text',
      });
      assert.equal(typeof text, 'string');
      const srt = await client.audio.transcriptions.create({ model: 'mock-transcribe', file, response_format: 'srt' });
      assert.match(String(srt), /^1\r?\n00:00:00,000 --> /);
      const vtt = await client.audio.transcriptions.create({ model: 'mock-transcribe', file, response_format: 'vtt' });
      assert.match(String(vtt), /^WEBVTT/);
      const verbose = await client.audio.transcriptions.create({
        model: 'mock-transcribe',
        file,
        response_format: 'verbose_json',
        timestamp_granularities: ['word', 'segment'],
      });
      assert.equal(verbose.text, json.text);
      assert.ok(Array.isArray(verbose.words) && verbose.words.length > 0);
      assert.ok(Array.isArray(verbose.segments) && verbose.segments.length > 0);
    });

    it('refuses a 26 MB upload with 413 and keeps serving', async () => {
      const form = new FormData();
      form.set('model', 'mock-transcribe');
      form.set('file', new Blob([Buffer.alloc(26 * 1024 * 1024, 2)], { type: 'audio/wav' }), 'big.wav');
      const res = await fetch(`${gateway.url}/v1/audio/transcriptions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}` },
        body: form,
      });
      assert.equal(res.status, 413);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'file_too_large');
      const after = await client.audio.transcriptions.create({
        model: 'mock-transcribe',
        file: await toFile(Buffer.alloc(100), 'a.wav'),
      });
      assert.ok(after.text);
    });

    it('answers Prefer: respond-async with 202 and a job whose result is the synchronous body', async () => {
      const res = await fetch(`${gateway.url}/v1/images/generations`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', prefer: 'respond-async' },
        body: JSON.stringify({
          model: 'mock-image',
          prompt: 'async fox',
          size: '256x256',
          response_format: 'b64_json',
        }),
      });
      assert.equal(res.status, 202);
      const accepted = (await res.json()) as { id: string; object: string; status: string };
      assert.equal(accepted.object, 'job');
      assert.equal(res.headers.get('location'), `/v1/jobs/${accepted.id}`);

      let job: { status: string; result: { data: Array<{ b64_json: string }> } | null; error: unknown } | undefined;
      await waitFor(
        async () => {
          const poll = await fetch(`${gateway.url}/v1/jobs/${accepted.id}`, {
            headers: { authorization: `Bearer ${apiKey}` },
          });
          job = (await poll.json()) as typeof job;
          return job!.status === 'completed';
        },
        20_000,
        'the async job',
      );
      assert.equal(job!.error, null);
      assert.deepEqual(pngSize(Buffer.from(job!.result!.data[0]!.b64_json, 'base64')), { width: 256, height: 256 });
      const foreign = await fetch(`${gateway.url}/v1/jobs/${accepted.id}`, {
        headers: { authorization: `Bearer ${otherKey}` },
      });
      assert.equal(foreign.status, 404);
    });

    it('reports a failed async job with the OpenAI-shaped error', async () => {
      const res = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', prefer: 'respond-async' },
        body: JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: 'fail [mock:error:400]' }] }),
      });
      const { id } = (await res.json()) as { id: string };
      let job: { status: string; error: { message: string; type: string } | null } | undefined;
      await waitFor(
        async () => {
          job = (await (
            await fetch(`${gateway.url}/v1/jobs/${id}`, { headers: { authorization: `Bearer ${apiKey}` } })
          ).json()) as typeof job;
          return job!.status === 'failed';
        },
        20_000,
        'the job to fail',
      );
      assert.equal(job!.error!.type, 'invalid_request_error');
    });

    it('streams job events over WebSocket to the owner, and refuses others', async () => {
      const res = await fetch(`${gateway.url}/v1/images/generations`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', prefer: 'respond-async' },
        body: JSON.stringify({ model: 'mock-image', prompt: 'watched [mock:slow:800]', size: '256x256' }),
      });
      const { id } = (await res.json()) as { id: string };
      const wsUrl = `${gateway.url.replace('http', 'ws')}/v1/jobs/${id}/events`;
      const refused = await new Promise<number>((resolve) => {
        const ws = new WebSocket(wsUrl, { headers: { authorization: `Bearer ${otherKey}` } });
        ws.on('unexpected-response', (_req, response) => resolve(response.statusCode ?? 0));
        ws.on('open', () => resolve(101));
      });
      assert.equal(refused, 404);
      const events = await watchToEnd(wsUrl, apiKey);
      const last = events.at(-1)!;
      assert.equal(last.type, 'completed');
      assert.equal(last.status, 'completed');
      assert.ok((last as unknown as { result: { data: unknown[] } }).result.data.length === 1);
    });

    it(
      'a watched async chat job ends with its answer, and a watched failure with its error: the socket closes ' +
        'either way',
      async () => {
        const submit = async (content: string) => {
          const res = await fetch(`${gateway.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', prefer: 'respond-async' },
            body: JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content }] }),
          });
          assert.equal(res.status, 202);
          return `${gateway.url.replace('http', 'ws')}/v1/jobs/${((await res.json()) as { id: string }).id}/events`;
        };
        const [answered, refused] = await Promise.all([
          submit('watched chat [mock:slow:600]').then((url) => watchToEnd(url, apiKey)),
          submit('watched failure [mock:slow:600] [mock:error:400]').then((url) => watchToEnd(url, apiKey)),
        ]);
        assert.equal(answered[0]!.type, 'status', 'the state when the watch began comes first');
        const done = answered.at(-1) as unknown as {
          type: string;
          status: string;
          result: { choices: Array<{ message: { content: string } }> };
        };
        assert.deepEqual([done.type, done.status], ['completed', 'completed']);
        assert.match(done.result.choices[0]!.message.content, /watched chat/);
        const failed = refused.at(-1) as unknown as { type: string; status: string; error: { type: string } };
        assert.deepEqual(
          [failed.type, failed.status, failed.error.type],
          ['failed', 'failed', 'invalid_request_error'],
        );
      },
    );

    it('creates, polls, downloads, lists and deletes a video; another key sees none of it', async () => {
      const created = await client.videos.create({
        model: 'mock-video' as 'sora-2',
        prompt: 'a paper boat',
        seconds: '4',
        size: '1280x720',
      });
      assert.equal(created.object, 'video');
      assert.equal(created.status, 'queued');
      assert.match(created.id, /^video_/);
      let video = created;
      await waitFor(
        async () => {
          video = await client.videos.retrieve(created.id);
          return video.status === 'completed';
        },
        15_000,
        'the video',
      );
      assert.equal(video.progress, 100);
      const content = await client.videos.downloadContent(created.id);
      const bytes = Buffer.from(await content.arrayBuffer());
      assert.equal(bytes.subarray(4, 8).toString('ascii'), 'ftyp');
      const listed = await client.videos.list();
      assert.ok(listed.data.some((v) => v.id === created.id));

      const stranger = gateway.client(otherKey);
      await assert.rejects(
        stranger.videos.retrieve(created.id),
        (error: unknown) => error instanceof OpenAI.NotFoundError,
      );
      assert.equal((await stranger.videos.list()).data.length, 0);

      const deleted = await client.videos.delete(created.id);
      assert.equal(deleted.deleted, true);
      await assert.rejects(
        client.videos.retrieve(created.id),
        (error: unknown) => error instanceof OpenAI.NotFoundError,
      );
    });
    it(
      'lists videos past expired and deleted ones: pages are full, has_more is true only when a later video ' +
        'exists, and the index expires',
      async () => {
        const keyed = await createKey(redis, 'video-pages');
        const videos = gateway.client(keyed.key);
        const made: string[] = [];
        for (let i = 0; i < 7; i++)
          made.push(
            (
              await videos.videos.create({
                model: 'mock-video' as 'sora-2',
                prompt: `boat ${i}`,
                seconds: '4',
                size: '1280x720',
              })
            ).id,
          );
        const index = `sy:videos:${keyed.id}`;
        const ttl = await redis.ttl(index);
        assert.ok(ttl > 0, `the index expires (ttl ${ttl})`);
        // The newest three expire (their records go, as a TTL would take them) and one in the middle is deleted.
        for (const id of made.slice(4)) await redis.del(`sy:async:${id}`);
        await videos.videos.delete(made[1]!);
        // An entry older than any video can live is dropped when the list is read.
        await redis.zadd(index, Date.now() - 10 * 86_400_000, 'video_long_gone');
        const page = async (query: string) =>
          (await (
            await fetch(`${gateway.url}/v1/videos?${query}`, { headers: { authorization: `Bearer ${keyed.key}` } })
          ).json()) as {
            data: Array<{ id: string }>;
            has_more: boolean;
            first_id: string | null;
            last_id: string | null;
          };
        const first = await page('limit=2');
        assert.deepEqual(
          first.data.map((v) => v.id),
          [made[3], made[2]],
        );
        assert.equal(first.has_more, true);
        assert.equal(first.last_id, made[2]);
        const second = await page(`limit=2&after=${first.last_id}`);
        assert.deepEqual(
          second.data.map((v) => v.id),
          [made[0]],
        );
        assert.equal(second.has_more, false);
        const exact = await page('limit=3');
        assert.deepEqual(
          exact.data.map((v) => v.id),
          [made[3], made[2], made[0]],
        );
        assert.equal(exact.has_more, false, 'nothing after the last live video');
        const ascending = await page(`order=asc&limit=5&after=${made[1]}`);
        assert.deepEqual(
          ascending.data.map((v) => v.id),
          [made[2], made[3]],
        );
        const none = await page(`limit=5&after=${made[0]}`);
        assert.deepEqual([none.data, none.has_more, none.last_id], [[], false, null]);
        assert.equal(await redis.zscore(index, 'video_long_gone'), null);
        // Through the official client's auto-pagination too: every live video once.
        const seen: string[] = [];
        for await (const video of videos.videos.list({ limit: 1 })) seen.push(video.id);
        assert.deepEqual(seen, [made[3], made[2], made[0]]);
      },
    );

    it('answers the real model ids offline, the mock standing in for their vendors', async () => {
      const image = await client.images.generate({
        model: 'dall-e-3',
        prompt: 'a lighthouse',
        size: '1792x1024',
        response_format: 'b64_json',
      });
      assert.deepEqual(pngSize(Buffer.from(image.data![0]!.b64_json!, 'base64')), { width: 1792, height: 1024 });
      assert.ok(image.data![0]!.revised_prompt, 'dall-e-3 answers with a revised prompt, as the real one does');
      // The family's size rules still hold.
      await assert.rejects(
        client.images.generate({ model: 'dall-e-3', prompt: 'x', size: '256x256' }),
        (error: unknown) =>
          error instanceof OpenAI.BadRequestError && (error.error as { param?: string }).param === 'size',
      );
      const text = await client.audio.transcriptions.create({
        model: 'whisper-1',
        file: await toFile(Buffer.alloc(2000), 'a.wav'),
        response_format: 'text',
      });
      assert.equal(typeof text, 'string');
      assert.ok(String(text).length > 0);
      const video = await client.videos.create({ model: 'sora-2', prompt: 'a paper boat' });
      assert.equal(video.size, '720x1280', 'sora-2 default size');
      await waitFor(async () => (await client.videos.retrieve(video.id)).status === 'completed', 15_000, 'the video');
    });
  });
