import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type { Redis } from 'ioredis';
import { GatewayError } from '../../shared/errors.js';
import { expiringFilesKey, fileUploadsKey } from '../../shared/redis-keys.js';
import { AccountFileStore, fileBlobKey, isFileId, newFileId } from '../../storage/account-files.js';
import type { BlobStore } from '../../storage/blob-store.js';
import { LocalBlobStore } from '../../storage/local-blob-store.js';
import { S3BlobStore } from '../../storage/s3-blob-store.js';
import { freshRedis } from '../support/gateway.js';
import { startS3 } from '../support/s3-server.js';

/** A body of `size` bytes in chunks of 64 KiB, made as it is read (never all in memory at once). */
function generated(size: number, seed = 7): Readable {
  let sent = 0;
  return new Readable({
    read() {
      if (sent >= size) return void this.push(null);
      const chunk = Buffer.alloc(Math.min(65_536, size - sent), (sent / 65_536 + seed) % 251);
      sent += chunk.length;
      this.push(chunk);
    },
  });
}

async function digest(stream: AsyncIterable<Buffer | string>): Promise<{ sha: string; bytes: number }> {
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of stream) {
    hash.update(chunk);
    bytes += Buffer.byteLength(chunk);
  }
  return { sha: hash.digest('hex'), bytes };
}

async function text(stream: Readable | undefined): Promise<string | undefined> {
  if (!stream) return undefined;
  let out = '';
  for await (const chunk of stream) out += String(chunk);
  return out;
}

async function keysUnder(blobs: BlobStore, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  for await (const blob of blobs.list(prefix)) keys.push(blob.key);
  return keys;
}

const lines = (n: number) => Array.from({ length: n }, (_, i) => `{"custom_id":"r${i}"}\n`).join('');

describe('file ids', () => {
  it('are file- and 22 letters and digits, each new', () => {
    const ids = new Set(Array.from({ length: 1000 }, newFileId));
    assert.equal(ids.size, 1000);
    for (const id of ids) assert.match(id, /^file-[A-Za-z0-9]{22}$/);
    assert.ok(isFileId('file-abc123'));
    assert.ok(!isFileId('file-../x') && !isFileId('images/a.png') && !isFileId('file-'));
    assert.equal(fileBlobKey('acct_1', 'file-x'), 'files/acct_1/file-x');
    assert.equal(fileBlobKey('a b/../', 'file-x'), `files/x${Buffer.from('a b/../').toString('hex')}/file-x`);
  });
});

for (const storage of ['local', 's3'] as const) {
  describe(`AccountFileStore (${storage} blobs, real Redis)`, () => {
    let redis: Redis;
    let dir: string;
    let s3: Awaited<ReturnType<typeof startS3>> | undefined;
    let blobs: LocalBlobStore | S3BlobStore;
    let files: AccountFileStore;

    before(async () => {
      ({ redis } = await freshRedis(storage === 'local' ? 6 : 7));
      dir = await mkdtemp(join(tmpdir(), 'sy-files-'));
      if (storage === 's3') {
        s3 = await startS3();
        // Parts of S3's least size, so a file of tens of MB is a multipart upload of several parts.
        blobs = new S3BlobStore({
          bucket: s3.env.S3_BUCKET,
          endpoint: s3.env.S3_ENDPOINT,
          region: 'us-east-1',
          accessKeyId: 'S3RVER',
          secretAccessKey: 'S3RVER',
          forcePathStyle: true,
          prefix: '',
          partBytes: 5 * 1024 * 1024,
        });
      } else blobs = new LocalBlobStore(dir);
      files = new AccountFileStore(redis, blobs);
    });

    beforeEach(async () => {
      await redis.flushdb();
      for (const key of await keysUnder(blobs, '')) await blobs.delete(key);
    });

    after(async () => {
      if (blobs instanceof S3BlobStore) blobs.close();
      await s3?.close();
      redis.disconnect();
      await rm(dir, { recursive: true, force: true });
    });

    it('stores a file, tells it, streams it back, lists it and deletes it', async () => {
      const made = await files.put('acct_a', {
        purpose: 'batch',
        filename: 'input.jsonl',
        body: Readable.from([lines(3)]),
      });
      assert.match(made.id, /^file-[A-Za-z0-9]{22}$/);
      assert.deepEqual(
        { ...made, id: '', created_at: 0 },
        {
          id: '',
          object: 'file',
          bytes: lines(3).length,
          created_at: 0,
          expires_at: null,
          filename: 'input.jsonl',
          purpose: 'batch',
          status: 'processed',
        },
      );
      assert.ok(Math.abs(made.created_at - Date.now() / 1000) < 60);
      assert.deepEqual(await files.get('acct_a', made.id), made);
      assert.equal(await text(await files.read('acct_a', made.id)), lines(3));
      assert.deepEqual(await files.list('acct_a', { limit: 10, order: 'desc' }), { data: [made], has_more: false });

      assert.equal(await files.delete('acct_a', made.id), true);
      assert.equal(await files.get('acct_a', made.id), undefined);
      assert.equal(await files.read('acct_a', made.id), undefined);
      assert.deepEqual(await files.list('acct_a', { limit: 10, order: 'desc' }), { data: [], has_more: false });
      assert.deepEqual(await keysUnder(blobs, 'files/'), [], 'its bytes are gone');
      assert.equal(await files.delete('acct_a', made.id), false, 'a second delete finds nothing');
    });

    it("answers another account's file as missing, and leaves it whole", async () => {
      const made = await files.put('acct_a', {
        purpose: 'user_data',
        filename: 'notes.txt',
        body: Readable.from(['hello']),
      });
      assert.equal(await files.get('acct_b', made.id), undefined);
      assert.equal(await files.read('acct_b', made.id), undefined);
      assert.equal(await files.delete('acct_b', made.id), false);
      assert.deepEqual((await files.list('acct_b', { limit: 10, order: 'asc' })).data, []);
      assert.equal(await text(await files.read('acct_a', made.id)), 'hello');
      assert.equal(await files.get('acct_a', 'not-a-file-id'), undefined);
    });

    it('refuses a file past maxBytes with 413 and keeps nothing', async () => {
      await assert.rejects(
        files.put('acct_a', { purpose: 'batch', filename: 'big.jsonl', body: generated(300_000), maxBytes: 200_000 }),
        (error: unknown) => error instanceof GatewayError && error.status === 413 && error.code === 'file_too_large',
      );
      assert.deepEqual(await keysUnder(blobs, 'files/'), []);
      assert.deepEqual((await files.list('acct_a', { limit: 10, order: 'asc' })).data, []);
      assert.equal(await redis.zcard(fileUploadsKey), 0, 'no upload left marked under way');
      // Exactly at the limit is taken.
      const exact = await files.put('acct_a', {
        purpose: 'batch',
        filename: 'exact.jsonl',
        body: generated(200_000),
        maxBytes: 200_000,
      });
      assert.equal(exact.bytes, 200_000);
    });

    it('keeps nothing of a body that fails midway', async () => {
      async function* broken() {
        yield Buffer.alloc(100_000, 1);
        throw new Error('client went away');
      }
      await assert.rejects(
        files.put('acct_a', { purpose: 'batch', filename: 'cut.jsonl', body: broken() }),
        /client went away/,
      );
      assert.deepEqual(await keysUnder(blobs, 'files/'), []);
      assert.equal(await redis.zcard(fileUploadsKey), 0);
    });

    it('streams a file of tens of MB in and out whole (several parts on S3)', async () => {
      const size = 23 * 1024 * 1024 + 123;
      const expected = await digest(generated(size, 3));
      const made = await files.put('acct_a', { purpose: 'user_data', filename: 'large.bin', body: generated(size, 3) });
      assert.equal(made.bytes, size);
      assert.deepEqual(await digest((await files.read('acct_a', made.id))!), expected);
    });

    it('pages by after, limit and order, by purpose, and past a file just deleted', async () => {
      const made = [];
      for (let i = 0; i < 7; i++) {
        made.push(
          await files.put('acct_a', {
            purpose: i % 3 === 2 ? 'user_data' : 'batch',
            filename: `f${i}.jsonl`,
            body: Readable.from([`${i}`]),
          }),
        );
      }
      const ids = made.map((file) => file.id);
      const page = (query: Parameters<AccountFileStore['list']>[1]) =>
        files.list('acct_a', query).then((p) => ({ ids: p.data.map((f) => f.id), more: p.has_more }));
      assert.deepEqual(await page({ limit: 3, order: 'asc' }), { ids: ids.slice(0, 3), more: true });
      assert.deepEqual(await page({ limit: 3, order: 'asc', after: ids[2] }), { ids: ids.slice(3, 6), more: true });
      assert.deepEqual(await page({ limit: 3, order: 'asc', after: ids[5] }), { ids: ids.slice(6), more: false });
      assert.deepEqual(await page({ limit: 3, order: 'desc' }), { ids: ids.slice(4).reverse(), more: true });
      assert.deepEqual(await page({ limit: 10, order: 'desc', after: ids[4] }), {
        ids: ids.slice(0, 4).reverse(),
        more: false,
      });
      assert.deepEqual(await page({ limit: 10, order: 'asc', purpose: 'user_data' }), {
        ids: [ids[2], ids[5]],
        more: false,
      });
      assert.deepEqual(await page({ limit: 1, order: 'desc', purpose: 'batch' }), { ids: [ids[6]], more: true });
      assert.deepEqual(await page({ limit: 10, order: 'asc', purpose: 'batch_output' }), { ids: [], more: false });

      // A client deleting what it pages through goes on from the file it just deleted.
      await files.delete('acct_a', ids[2]!);
      assert.deepEqual(await page({ limit: 2, order: 'asc', after: ids[2] }), { ids: ids.slice(3, 5), more: true });
      assert.deepEqual(await page({ limit: 10, order: 'asc' }), {
        ids: ids.filter((id) => id !== ids[2]),
        more: false,
      });
      await assert.rejects(
        page({ limit: 2, order: 'asc', after: newFileId() }),
        (error: unknown) => error instanceof GatewayError && error.status === 400 && error.param === 'after',
      );
      // Another account's id is no cursor here either.
      const other = await files.put('acct_b', { purpose: 'batch', filename: 'b.jsonl', body: Readable.from(['b']) });
      await assert.rejects(
        page({ limit: 2, order: 'asc', after: other.id }),
        (error: unknown) => error instanceof GatewayError && error.param === 'after',
      );
    });

    it('hides an expired file at once; the sweep deletes its bytes and nothing else', async () => {
      const now = Math.floor(Date.now() / 1000);
      const lasting = await files.put('acct_a', {
        purpose: 'batch',
        filename: 'later.jsonl',
        body: Readable.from(['later']),
        expiresAt: now + 3600,
      });
      const expired = await files.put('acct_a', {
        purpose: 'batch_output',
        filename: 'out.jsonl',
        body: Readable.from(['out']),
        expiresAt: now - 1,
      });
      const kept = await files.put('acct_a', {
        purpose: 'user_data',
        filename: 'kept.txt',
        body: Readable.from(['kept']),
      });
      assert.equal(lasting.expires_at, now + 3600);
      assert.equal(await files.get('acct_a', expired.id), undefined);
      assert.equal(await files.read('acct_a', expired.id), undefined);
      assert.deepEqual(
        (await files.list('acct_a', { limit: 10, order: 'asc' })).data.map((f) => f.id),
        [lasting.id, kept.id],
      );
      assert.equal(await redis.zcard(expiringFilesKey), 2);

      assert.deepEqual(await files.sweepExpired(), { deleted: 1, failed: 0 });
      assert.deepEqual(
        (await keysUnder(blobs, 'files/')).sort(),
        [fileBlobKey('acct_a', lasting.id), fileBlobKey('acct_a', kept.id)].sort(),
      );
      assert.equal(await redis.zcard(expiringFilesKey), 1);
      // An hour on, the other one goes too.
      assert.deepEqual(await files.sweepExpired(Date.now() + 3601_000), { deleted: 1, failed: 0 });
      assert.deepEqual(await keysUnder(blobs, 'files/'), [fileBlobKey('acct_a', kept.id)]);
      assert.equal(await files.get('acct_a', lasting.id), undefined);
    });

    it('deletes the bytes of an upload never recorded (its api died), not those of a recorded one', async () => {
      const abandoned = await files.stage('acct_a', { filename: 'half.jsonl', body: Readable.from(['half']) });
      const recorded = await files.put('acct_a', {
        purpose: 'batch',
        filename: 'whole.jsonl',
        body: Readable.from(['whole']),
      });
      assert.deepEqual(
        await files.sweepAbandonedUploads(Date.now() - 60_000),
        { deleted: 0, failed: 0 },
        'a recent upload may still be under way',
      );
      assert.deepEqual(await files.sweepAbandonedUploads(Date.now() + 1000), { deleted: 1, failed: 0 });
      assert.deepEqual(await keysUnder(blobs, 'files/'), [fileBlobKey('acct_a', recorded.id)]);
      assert.equal(await redis.zcard(fileUploadsKey), 0);
      assert.equal(await files.get('acct_a', abandoned.id), undefined);
    });
  });
}

// The list reads Redis alone: once, over the local store, is enough.
describe('AccountFileStore lists (large pages)', () => {
  let redis: Redis;
  let dir: string;
  let files: AccountFileStore;

  before(async () => {
    ({ redis } = await freshRedis(8));
    dir = await mkdtemp(join(tmpdir(), 'sy-files-list-'));
    files = new AccountFileStore(redis, new LocalBlobStore(dir));
  });

  after(async () => {
    redis.disconnect();
    await rm(dir, { recursive: true, force: true });
  });

  it('fills a page larger than one round of reads (1,000), skipping expired files', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 2105; i++) {
      const expired = i % 500 === 7;
      const file = await files.put('acct_a', {
        purpose: 'batch',
        filename: `${i}.jsonl`,
        body: Readable.from(['x']),
        ...(expired ? { expiresAt: Math.floor(Date.now() / 1000) - 1 } : {}),
      });
      if (!expired) ids.push(file.id);
    }
    const first = await files.list('acct_a', { limit: 2000, order: 'asc' });
    assert.deepEqual(
      first.data.map((f) => f.id),
      ids.slice(0, 2000),
    );
    assert.equal(first.has_more, true);
    const rest = await files.list('acct_a', { limit: 2000, order: 'asc', after: ids[1999] });
    assert.deepEqual(
      rest.data.map((f) => f.id),
      ids.slice(2000),
    );
    assert.equal(rest.has_more, false);
    const newest = await files.list('acct_a', { limit: 1500, order: 'desc' });
    assert.deepEqual(
      newest.data.map((f) => f.id),
      ids.slice(-1500).reverse(),
    );
  });
});
