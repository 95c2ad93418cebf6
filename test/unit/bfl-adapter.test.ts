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
  BFL_CHECKPOINT_KEY,
  bflImages,
  bflPollUrl,
  buildBflRequest,
  convertSizeToAspectRatio,
  mapBflError,
  normaliseBflProgress,
  readBflPollAnswer,
} from '../../workers/vendors/bfl/index.js';
import { closeVendorAgent } from '../../workers/vendors/http.js';
import type { ImageGenerationInput, ImageResult, MediaContext } from '../../workers/vendors/media-types.js';
import { FAKE_BFL_PNG, startFakeBfl, type FakeBfl } from '../support/fake-bfl.js';
import { gatewayError } from '../support/assertions.js';

type Json = Record<string, any>;
const KEY = 'bfl-test-key-0123456789abcdef';
const catalog = loadCatalog();
const blobDir = mkdtempSync(join(tmpdir(), 'bfl-adapter-'));
const generate = bflImages.generateImages!;

let fake: FakeBfl;

interface Harness {
  ctx: MediaContext;
  progress: number[];
  /** Each checkpoint write, with how many polls the fake had seen at that moment. */
  writes: Array<{ state: Json; pollsAtWrite: number }>;
  store: { state: Json | undefined };
}

function harness(options: { model?: string; signal?: AbortSignal; store?: Harness['store']; apiKey?: string; baseUrl?: string; onWrite?: () => void } = {}): Harness {
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
    blobs: new LocalBlobStore(blobDir),
    progress: async (percent) => void progress.push(percent),
    checkpoint: {
      read: <T extends Record<string, unknown>>() => (store.state === undefined ? undefined : (structuredClone(store.state) as T)),
      write: async (state) => {
        writes.push({ state: structuredClone(state), pollsAtWrite: fake.polls });
        store.state = structuredClone(state);
        options.onWrite?.();
      },
    },
  };
  return { ctx, progress, writes, store };
}

const image = (extra: Json = {}): ImageGenerationInput => ({ model: 'flux-pro-1.1', prompt: 'A lighthouse at dusk', ...extra }) as ImageGenerationInput;
const posts = () => fake.requests.filter((request) => request.method === 'POST');


before(async () => {
  process.env.BFL_POLL_INTERVAL_MS = '20';
  fake = await startFakeBfl({ apiKey: KEY });
});
after(async () => {
  delete process.env.BFL_POLL_INTERVAL_MS;
  await closeVendorAgent();
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
    await generate(image({ model: 'flux-pro-1.1-ultra', size: '2752x1536', quality: 'hd' }), harness({ model: 'flux-pro-1.1-ultra' }).ctx);
    const result = await generate(image({ model: 'flux-kontext-pro', size: '1184x880', output_format: 'jpeg' }), harness({ model: 'flux-kontext-pro' }).ctx);
    const [ultra, kontext] = posts();
    assert.equal(ultra!.path, '/v1/flux-pro-1.1-ultra');
    assert.deepEqual(ultra!.body, { prompt: 'A lighthouse at dusk', aspect_ratio: '16:9', output_format: 'png', raw: true });
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
    assert.deepEqual(buildBflRequest(image({ model: 'flux-2-pro', size: '1040x1040', output_format: 'webp' }), 'flux-2-pro'), {
      prompt: 'A lighthouse at dusk', width: 1040, height: 1040, output_format: 'webp',
    });
  });

  it('sends the key only to polling URLs on the channel origin or on BFL hosts over https', () => {
    const base = 'https://api.bfl.ai';
    const task = (pollingUrl?: string) => ({ id: 'abc', polling_url: pollingUrl });
    assert.equal(bflPollUrl(base, task('https://api.eu.bfl.ai/v1/get_result?id=abc')), 'https://api.eu.bfl.ai/v1/get_result?id=abc');
    assert.equal(bflPollUrl(base, task('https://api.bfl.ai/v1/get_result?id=abc')), 'https://api.bfl.ai/v1/get_result?id=abc');
    for (const foreign of ['http://api.eu.bfl.ai/v1/get_result?id=abc', 'https://evilbfl.ai/x', 'https://api.bfl.ai.evil.example/x', 'not a url', undefined]) {
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
    assert.deepEqual(writes[0]!.state, { [BFL_CHECKPOINT_KEY]: [{ id, polling_url: `${fake.url}/v1/get_result?id=${id}` }] });
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
    assert.deepEqual(writes.map((write) => write.state[BFL_CHECKPOINT_KEY].length), [1, 2]);
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
    assert.ok(Date.now() - abortedAt < 200, `took ${Date.now() - abortedAt} ms`);
    const polls = fake.polls;
    await sleep(80);
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
    const store = { state: { [BFL_CHECKPOINT_KEY]: [{ id: 'gone', polling_url: `${fake.url}/v1/get_result?id=gone` }] } };
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
    fake.failSubmits({ status: 429, json: { detail: 'You have exceeded the number of active tasks.' }, headers: { 'retry-after': '3' } });
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
      bodyText: JSON.stringify({ detail: [{ loc: ['body', 'width'], msg: 'Input should be a multiple of 32', type: 'multiple_of' }] }),
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
