import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { mkdir, mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import { shardQueueName } from '../../shared/queues.js';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

const tinyPng = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==',
  'base64',
);

// Blobs end: a job's uploads when it ends for good, expired blobs when a worker sweeps.
describe('blob lifecycle (mock vendor, local blobs)', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let redisUrl: string;
  let client: OpenAI;
  let blobDir: string;
  let audioQueue: Queue;
  let queueConnection: Redis;
  let key: string;

  const transcribe = (prompt: string, signal?: AbortSignal) => {
    const form = new FormData();
    form.set('model', 'mock-transcribe');
    form.set('prompt', prompt);
    form.set('file', new Blob([Buffer.alloc(2000)], { type: 'audio/wav' }), 'talk.wav');
    return fetch(`${gateway.url}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
      body: form,
      signal,
    });
  };

  const uploadsOf = (requestId: string) => join(blobDir, 'uploads', requestId);
  const files = (dir: string) => (existsSync(dir) ? readdirSync(dir) : []);

  before(async () => {
    const fresh = await freshRedis(10);
    redis = fresh.redis;
    redisUrl = fresh.url;
    const apiKey = (await createKey(redis)).key;
    blobDir = await mkdtemp(join(tmpdir(), 'sy-lifecycle-'));
    // Written before the gateway starts: an image whose link expired hours ago, and a fresh one.
    for (const [key, ageSeconds] of [
      ['images/req_stale/0.png', 3 * 3600],
      ['images/req_fresh/0.png', 60],
    ] as const) {
      await mkdir(join(blobDir, key, '..'), { recursive: true });
      await writeFile(join(blobDir, key), tinyPng);
      await writeFile(
        join(blobDir, `${key}.meta.json`),
        JSON.stringify({ key, contentType: 'image/png', size: tinyPng.length }),
      );
      const when = new Date(Date.now() - ageSeconds * 1000);
      await utimes(join(blobDir, key), when, when);
    }
    gateway = await startGateway({
      // Two attempts, retried after 0.75-1.5 s: long enough to look at a job waiting for its retry.
      // One audio job at a time, so a second one can be caught waiting.
      env: {
        REDIS_URL: redisUrl,
        BLOB_DIR: blobDir,
        JOB_ATTEMPTS: '2',
        RETRY_BASE_MS: '1500',
        WORKER_CONCURRENCY_AUDIO: '1',
      },
    });
    client = gateway.client(apiKey, { timeout: 30_000 });
    key = apiKey;
    queueConnection = redis.duplicate();
    audioQueue = new Queue(shardQueueName('audio', 0), { connection: queueConnection });
  });

  after(async () => {
    await gateway?.stop();
    await audioQueue?.close();
    queueConnection?.disconnect();
    redis?.disconnect();
    if (blobDir) await rm(blobDir, { recursive: true, force: true });
  });

  it('sweeps expired blobs when a worker starts, and keeps fresh ones', async () => {
    await waitFor(() => !existsSync(join(blobDir, 'images/req_stale')), 10_000, 'the stale image swept');
    assert.ok(existsSync(join(blobDir, 'images/req_fresh/0.png')));
    // The report is logged when the whole sweep ends, a moment after this image went.
    await waitFor(
      () => gateway.logs.some((line) => line.includes('"msg":"blob sweep"')),
      5000,
      'the sweep report logged',
    );
  });

  it('deletes a transcription upload once the job completes, not before', async () => {
    const request = client.audio.transcriptions
      .create({
        model: 'mock-transcribe',
        file: await toFile(Buffer.alloc(2000), 'talk.wav'),
        prompt: 'slowly [mock:slow:1000]',
      })
      .withResponse();
    // While the job runs, its upload is there for the worker to read.
    let running: string | undefined;
    await waitFor(
      async () => {
        const [job] = await audioQueue.getJobs(['active']);
        running = job?.id;
        return running !== undefined;
      },
      5000,
      'the job running',
    );
    assert.equal(files(uploadsOf(running!)).filter((name) => !name.endsWith('.meta.json')).length, 1);

    const { data, response } = await request;
    assert.match(data.text, /talk\.wav/);
    const requestId = response.headers.get('x-request-id')!;
    assert.equal(requestId, running);
    await waitFor(() => !existsSync(uploadsOf(requestId)), 5000, `uploads/${requestId}/ deleted`);
  });

  it("deletes an image edit's images and mask once it completes", async () => {
    const { response } = await client.images
      .edit({
        model: 'mock-image',
        image: [
          await toFile(tinyPng, 'a.png', { type: 'image/png' }),
          await toFile(tinyPng, 'b.png', { type: 'image/png' }),
        ],
        mask: await toFile(tinyPng, 'mask.png', { type: 'image/png' }),
        prompt: 'add a hat',
        size: '256x256',
        response_format: 'b64_json',
      })
      .withResponse();
    const requestId = response.headers.get('x-request-id')!;
    await waitFor(() => !existsSync(uploadsOf(requestId)), 5000, `uploads/${requestId}/ deleted`);
  });

  it('keeps the upload of a job waiting for its retry; deletes it when the job fails for good', async () => {
    const request = client.audio.transcriptions
      .create({
        model: 'mock-transcribe',
        file: await toFile(Buffer.alloc(2000), 'flaky.wav'),
        prompt: '[mock:error:503]',
      })
      .then(
        () => assert.fail('the vendor fails every attempt'),
        (error: unknown) => error,
      );
    let waiting: string | undefined;
    await waitFor(
      async () => {
        const [job] = await audioQueue.getJobs(['delayed']);
        waiting = job?.id;
        return waiting !== undefined;
      },
      5000,
      'the first attempt failed, a retry scheduled',
    );
    // The failed attempt's cleanup ran (or would have) by now; the retry still needs the file.
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(await (await audioQueue.getJob(waiting!))?.getState(), 'delayed');
    assert.equal(
      files(uploadsOf(waiting!)).filter((name) => !name.endsWith('.meta.json')).length,
      1,
      'the upload is kept for the retry',
    );

    const error = await request;
    assert.ok(error instanceof OpenAI.APIError && error.status === 503, String(error));
    await waitFor(() => !existsSync(uploadsOf(waiting!)), 5000, `uploads/${waiting}/ deleted after the final failure`);
  });
  it('deletes the uploads of a refused request at once', async () => {
    const form = new FormData();
    form.set('model', 'gpt-image-1');
    form.set('prompt', 'x');
    form.set('image', new Blob([Buffer.from('not an image at all')], { type: 'image/png' }), 'fake.png');
    const res = await fetch(`${gateway.url}/v1/images/edits`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
      body: form,
    });
    assert.equal(res.status, 400);
    const requestId = res.headers.get('x-request-id')!;
    assert.equal(files(uploadsOf(requestId)).length, 0);
  });

  it('deletes the upload of a job removed while it waited (the client left)', async () => {
    const busy = transcribe('hold the only slot [mock:slow:3000]');
    await waitFor(async () => (await audioQueue.getJobs(['active'])).length === 1, 5000, 'the first job running');
    const leaving = new AbortController();
    const left = transcribe('never runs', leaving.signal).catch((error: unknown) => error);
    let waiting: string | undefined;
    await waitFor(
      async () => {
        waiting = (await audioQueue.getJobs(['waiting', 'prioritized']))[0]?.id;
        return waiting !== undefined;
      },
      5000,
      'the second job waiting',
    );
    assert.equal(files(uploadsOf(waiting!)).filter((name) => !name.endsWith('.meta.json')).length, 1);
    leaving.abort();
    await left;
    await waitFor(
      () => !existsSync(uploadsOf(waiting!)) || files(uploadsOf(waiting!)).length === 0,
      5000,
      `uploads/${waiting}/ deleted`,
    );
    assert.equal(await audioQueue.getJob(waiting!), undefined, 'the job was removed, not run');
    assert.equal((await busy).status, 200);
  });
});
