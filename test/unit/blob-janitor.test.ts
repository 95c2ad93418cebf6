import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { loadConfig } from '../../shared/config.js';
import { LocalBlobStore } from '../../storage/local-blob-store.js';
import type { BlobStore } from '../../storage/blob-store.js';
import { uploadKeys } from '../../storage/upload-keys.js';
import { janitorLockKey } from '../../shared/redis-keys.js';
import { BlobJanitor, retentionRules, type JanitorDeps } from '../../workers/blob-janitor.js';
import { freshRedis, waitFor } from '../support/gateway.js';

const hour = 3600;
const day = 24 * hour;

/** A logger whose lines the test reads. */
function capturingLogger() {
  const lines: Array<Record<string, unknown>> = [];
  const log = pino(
    { level: 'info' },
    { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) },
  );
  return { log, lines, sweeps: () => lines.filter((line) => line.msg === 'blob sweep') };
}

// Against a real Redis (the lock must hold across processes) and a local store in a temp dir.
describe('BlobJanitor', () => {
  let url: string;
  let redis: Redis;
  let dir: string;
  let blobs: LocalBlobStore;
  const janitors: BlobJanitor[] = [];
  const extraConnections: Redis[] = [];

  before(async () => {
    ({ url, redis } = await freshRedis(14));
  });

  after(async () => {
    redis.disconnect();
    for (const connection of extraConnections) connection.disconnect();
  });

  beforeEach(async () => {
    await redis.del(janitorLockKey);
    dir = await mkdtemp(join(tmpdir(), 'sy-janitor-'));
    blobs = new LocalBlobStore(dir);
  });

  afterEach(async () => {
    await Promise.all(janitors.splice(0).map((janitor) => janitor.close()));
    await rm(dir, { recursive: true, force: true });
  });

  const janitor = (env: Record<string, string> = {}, deps: Partial<JanitorDeps> = {}) => {
    const created = new BlobJanitor({ redis, blobs, log: pino({ level: 'silent' }), config: loadConfig(env), ...deps });
    janitors.push(created);
    return created;
  };

  /** Stores a blob written `ageSeconds` ago. */
  const blob = async (key: string, ageSeconds: number) => {
    await blobs.put(key, Buffer.from(key), 'application/octet-stream');
    const when = new Date(Date.now() - ageSeconds * 1000);
    await utimes(join(dir, key), when, when);
  };
  const exists = (key: string) => existsSync(join(dir, key));

  it('deletes each kind of blob past its retention and keeps the rest', async () => {
    // Defaults: BLOB_URL_TTL_S 3600, ASYNC_RESULT_TTL_S 86400, plus 10 min for images, videos and results.
    await blob('uploads/req_old/0-a.wav', day + 60);
    await blob('uploads/req_new/0-a.wav', day - 60);
    await blob('images/req_old/0.png', hour + 600 + 60);
    await blob('images/req_old/1.png', hour + 600 + 60);
    await blob('images/req_new/0.png', hour + 300); // its link has expired, the grace has not
    await blob('videos/video_old/video.mp4', day + 600 + 60);
    await blob('videos/video_old/thumbnail.webp', day + 600 + 60);
    await blob('videos/video_new/video.mp4', day + 300);
    await blob('results/req_old.json', day + 600 + 60);
    await blob('results/req_new.json', 0);
    // The input of a large stored response lives RESPONSE_TTL_S (30 days) + 10 min.
    await blob('responses/resp_old/input.json', 30 * day + 600 + 60);
    await blob('responses/resp_new/input.json', 29 * day);
    // An OpenAI batch's parts outlive its run (BATCH_DEADLINE_S, a day) by an hour and 10 min.
    await blob('batch-parts/batch_old/0-output.jsonl', day + hour + 600 + 60);
    await blob('batch-parts/batch_new/0-output.jsonl', day + 600);
    await blob('elsewhere/old.bin', 10 * day); // no rule: kept
    // Directories left empty earlier (e.g. by a crash): old ones go, a fresh one may be about to receive a put.
    await mkdir(join(dir, 'uploads/req_gone'));
    await utimes(join(dir, 'uploads/req_gone'), new Date(Date.now() - hour * 1000), new Date(Date.now() - hour * 1000));
    await mkdir(join(dir, 'uploads/req_starting'));

    const report = await janitor().sweep();
    assert.ok(report, 'swept');
    assert.deepEqual(report.deleted, {
      'uploads/': 1,
      'images/': 2,
      'videos/': 2,
      'results/': 1,
      'responses/': 1,
      'batch-parts/': 1,
    });
    assert.equal(report.failed, 0);
    assert.equal(report.directories, 1);

    for (const gone of [
      'uploads/req_old',
      'images/req_old',
      'videos/video_old',
      'results/req_old.json',
      'uploads/req_gone',
      'responses/resp_old/input.json',
      'batch-parts/batch_old/0-output.jsonl',
    ]) {
      assert.ok(!exists(gone), `${gone} is gone`);
    }
    for (const kept of [
      'uploads/req_new/0-a.wav',
      'images/req_new/0.png',
      'videos/video_new/video.mp4',
      'results/req_new.json',
      'responses/resp_new/input.json',
      'batch-parts/batch_new/0-output.jsonl',
      'elsewhere/old.bin',
      'uploads/req_starting',
    ]) {
      assert.ok(exists(kept), `${kept} is kept`);
    }
    // Metadata goes with its blob; the top-level folders stay.
    assert.ok(!exists('results/req_old.json.meta.json'));
    for (const top of ['uploads', 'images', 'videos', 'results']) assert.ok(exists(top), `${top}/ stays`);
  });

  it('keeps uploads at least as long as a request may run', () => {
    const rules = retentionRules(loadConfig({ ASYNC_RESULT_TTL_S: '60' }));
    const uploads = rules.find((rule) => rule.prefix === 'uploads/')!;
    // The video deadline (an hour) outlasts a one-minute result TTL.
    assert.equal(uploads.maxAgeMs, 3_600_000 + 600_000);
    assert.equal(rules.find((rule) => rule.prefix === 'images/')!.maxAgeMs, 3_600_000 + 600_000);
    assert.equal(rules.find((rule) => rule.prefix === 'results/')!.maxAgeMs, 60_000 + 600_000);
    // A large stored response's input lives as long as the response.
    assert.equal(rules.find((rule) => rule.prefix === 'responses/')!.maxAgeMs, 30 * 86_400_000 + 600_000);
    // An OpenAI batch's parts outlive the batch's run (BATCH_DEADLINE_S) and the sweep that finalizes it after.
    assert.equal(
      retentionRules(loadConfig({ BATCH_DEADLINE_S: '7200' })).find((rule) => rule.prefix === 'batch-parts/')!.maxAgeMs,
      7_200_000 + 3_600_000 + 600_000,
    );
  });

  it('sweeps once per interval when two processes race for it', async () => {
    await blob('images/req_old/0.png', 2 * hour);
    // Two "processes": separate connections, separate janitors.
    const other = new Redis(url);
    extraConnections.push(other);
    const a = janitor();
    const b = janitor({}, { redis: other });
    const reports = await Promise.all([a.sweep(), b.sweep()]);
    assert.equal(reports.filter(Boolean).length, 1, 'exactly one of them swept');
    assert.equal(reports.find(Boolean)!.deleted['images/'], 1);
    // The lock lasts (nearly) the interval: nobody sweeps again before the next one.
    const ttl = await redis.pttl(janitorLockKey);
    assert.ok(ttl > 500_000 && ttl <= 600_000, `lock ttl ${ttl}`);
    await blob('images/req_old2/0.png', 2 * hour);
    assert.equal(await a.sweep(), undefined);
    assert.equal(await b.sweep(), undefined);
    assert.ok(exists('images/req_old2/0.png'));
  });

  it('started in two processes, sweeps at once in one of them', async () => {
    await blob('videos/video_old/video.mp4', 2 * day);
    const first = capturingLogger();
    const second = capturingLogger();
    const other = new Redis(url);
    extraConnections.push(other);
    janitor({ BLOB_SWEEP_INTERVAL_S: '600' }, { log: first.log }).start();
    janitor({ BLOB_SWEEP_INTERVAL_S: '600' }, { log: second.log, redis: other }).start();
    await waitFor(() => first.sweeps().length + second.sweeps().length > 0, 5000, 'a sweep');
    await new Promise((resolve) => setTimeout(resolve, 200));
    const sweeps = [...first.sweeps(), ...second.sweeps()];
    assert.equal(sweeps.length, 1);
    assert.equal(sweeps[0]!.level, 30, 'logged at info');
    assert.deepEqual(sweeps[0]!.deleted, {
      'uploads/': 0,
      'images/': 0,
      'videos/': 1,
      'results/': 0,
      'responses/': 0,
      'batch-parts/': 0,
    });
    assert.ok(!exists('videos/video_old'));
  });

  it('does nothing when disabled', async () => {
    await blob('uploads/req_old/0-a.wav', 30 * day);
    const disabled = janitor({ BLOB_SWEEP_INTERVAL_S: '0' });
    assert.equal(disabled.enabled, false);
    disabled.start();
    assert.equal(await disabled.sweep(), undefined);
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.ok(exists('uploads/req_old/0-a.wav'));
    assert.equal(await redis.exists(janitorLockKey), 0, 'it never took the lock');
  });

  it('logs a store that fails and sweeps the other prefixes', async () => {
    await blob('uploads/req_old/0-a.wav', 2 * day);
    await blob('images/req_old/0.png', 2 * hour);
    await blob('images/req_old/1.png', 2 * hour);
    // The real store, except that listing results fails and one delete is refused.
    const failing: BlobStore = {
      put: (...args) => blobs.put(...args),
      putStream: (...args) => blobs.putStream(...args),
      get: (key) => blobs.get(key),
      stream: (key) => blobs.stream(key),
      delete: async (key) => {
        if (key === 'images/req_old/1.png') throw new Error('permission denied');
        await blobs.delete(key);
      },
      list: (prefix) => {
        if (prefix === 'results/') throw new Error('bucket unreachable');
        return blobs.list(prefix);
      },
    };
    const { log, lines } = capturingLogger();
    const report = await janitor({}, { blobs: failing, log }).sweep();
    assert.ok(report);
    assert.equal(report.failed, 2);
    assert.deepEqual(report.deleted, {
      'uploads/': 1,
      'images/': 1,
      'videos/': 0,
      'results/': 0,
      'responses/': 0,
      'batch-parts/': 0,
    });
    assert.ok(lines.some((line) => line.msg === 'could not sweep blobs' && line.prefix === 'results/'));
    assert.ok(
      lines.some((line) => line.msg === 'could not delete an expired blob' && line.key === 'images/req_old/1.png'),
    );
  });

  it('survives Redis refusing the lock: the error is logged, the process goes on', async () => {
    const broken = new Redis(url);
    await broken.quit();
    const { log, lines } = capturingLogger();
    const unlucky = janitor({}, { redis: broken, log });
    await assert.rejects(unlucky.sweep());
    unlucky.start();
    await waitFor(() => lines.some((line) => line.msg === 'blob sweep failed'), 2000, 'the failure logged');
  });
});

describe('uploadKeys', () => {
  it('finds every upload a media payload references, and nothing else', () => {
    const ref = (key: string) => ({ key, contentType: 'image/png', size: 1 });
    assert.deepEqual(
      uploadKeys({
        prompt: 'x',
        images: [ref('uploads/r/0-a.png'), ref('uploads/r/1-b.png')],
        mask: ref('uploads/r/2-m.png'),
      }),
      ['uploads/r/0-a.png', 'uploads/r/1-b.png', 'uploads/r/2-m.png'],
    );
    assert.deepEqual(uploadKeys({ file: ref('uploads/r/0-a.wav'), response_format: 'json' }), ['uploads/r/0-a.wav']);
    assert.deepEqual(uploadKeys({ prompt: 'x', input_reference: ref('uploads/r/0-ref.png') }), ['uploads/r/0-ref.png']);
    // Only blobs under uploads/ are a job's own.
    assert.deepEqual(uploadKeys({ file: ref('videos/v/video.mp4'), images: ['uploads/r/not-a-ref'], mask: null }), []);
    assert.deepEqual(uploadKeys({ model: 'gpt-4o', messages: [] }), []);
  });
});
