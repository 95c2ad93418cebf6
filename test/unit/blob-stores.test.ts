import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { freePort } from '../../bin/local-redis.js';
import { loadConfig } from '../../shared/config.js';
import { createBlobStore, type ServingBlobStore } from '../../storage/create-blob-store.js';
import { checkBlobSignature, signBlobUrl } from '../../storage/blob-urls.js';
import { LocalBlobStore } from '../../storage/local-blob-store.js';
import { S3BlobStore } from '../../storage/s3-blob-store.js';
import type { BlobListing, BlobStore } from '../../storage/blob-store.js';
import { startS3 } from '../support/s3-server.js';

async function listed(store: BlobStore, prefix: string): Promise<BlobListing[]> {
  const out: BlobListing[] = [];
  for await (const blob of store.list(prefix)) out.push(blob);
  return out.sort((a, b) => (a.key < b.key ? -1 : 1));
}
const keysOf = (blobs: BlobListing[]) => blobs.map((b) => b.key);

// One contract, both stores: the local directory and S3-compatible storage.
for (const kind of ['local', 's3'] as const) {
  describe(`${kind} blob store`, () => {
    let store: ServingBlobStore;
    let s3: Awaited<ReturnType<typeof startS3>> | undefined;

    before(async () => {
      const dir = mkdtempSync(join(tmpdir(), 'sy-blobs-'));
      s3 = kind === 's3' ? await startS3() : undefined;
      store = createBlobStore(loadConfig({ BLOB_DIR: dir, ...(s3?.env ?? {}) }));
    });

    after(async () => {
      (store as { close?: () => void }).close?.();
      await s3?.close();
    });

    it('stores bytes exactly, with their type and name, and streams them back', async () => {
      const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      const ref = await store.put('uploads/req_1/0-photo.png', bytes, 'image/png', 'photo ü.png');
      assert.deepEqual(ref, {
        key: 'uploads/req_1/0-photo.png',
        contentType: 'image/png',
        size: 256,
        filename: 'photo ü.png',
      });
      assert.deepEqual(await store.get(ref.key), bytes);
      const chunks: Buffer[] = [];
      for await (const chunk of await store.stream(ref.key)) chunks.push(chunk as Buffer);
      assert.deepEqual(Buffer.concat(chunks), bytes);
      assert.deepEqual(await store.meta(ref.key), ref);
    });

    it('answers 404 for a missing blob, and deletes', async () => {
      await assert.rejects(store.get('nothing/here'), (error: Error & { status?: number }) => error.status === 404);
      await store.put('tmp/x.bin', Buffer.from('x'), 'application/octet-stream');
      await store.delete('tmp/x.bin');
      await assert.rejects(store.meta('tmp/x.bin'), (error: Error & { status?: number }) => error.status === 404);
    });

    it('lists every blob under a prefix, nested keys included, with when it was written', async () => {
      const keys = ['list/a/1.bin', 'list/a/2/deep.bin', 'list/ab.bin', 'list/b/3.bin'];
      for (const key of [...keys, 'other/x.bin'])
        await store.put(key, Buffer.from(key), 'application/octet-stream', 'name.bin');
      const all = await listed(store, 'list/');
      assert.deepEqual(keysOf(all), keys);
      for (const blob of all) {
        assert.ok(blob.modified instanceof Date);
        assert.ok(
          Math.abs(blob.modified.getTime() - Date.now()) < 60_000,
          `${blob.key} written just now: ${blob.modified.toISOString()}`,
        );
        // The listed key is the key `put` returned: get and meta take it as it is.
        assert.deepEqual(await store.get(blob.key), Buffer.from(blob.key));
        assert.equal((await store.meta(blob.key)).key, blob.key);
      }
      assert.deepEqual(keysOf(await listed(store, 'list/a/')), ['list/a/1.bin', 'list/a/2/deep.bin']);
      // A prefix is a string prefix, as on S3, not a folder.
      assert.deepEqual(keysOf(await listed(store, 'list/a')), ['list/a/1.bin', 'list/a/2/deep.bin', 'list/ab.bin']);
      assert.deepEqual(keysOf(await listed(store, 'list/a/2/deep.bin')), ['list/a/2/deep.bin']);
      assert.deepEqual(await listed(store, 'nothing/'), []);
      assert.ok(keysOf(await listed(store, '')).includes('other/x.bin'));

      await store.delete('list/a/2/deep.bin');
      await store.delete('list/b/3.bin');
      assert.deepEqual(keysOf(await listed(store, 'list/')), ['list/a/1.bin', 'list/ab.bin']);
    });
  });
}

describe('local blob store directories', () => {
  it('removes the directories a delete leaves empty, but not the top-level folder', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sy-blobs-'));
    const store = new LocalBlobStore(dir);
    await store.put('uploads/req_1/0-a.wav', Buffer.from('a'), 'audio/wav');
    await store.put('uploads/req_1/1-b.wav', Buffer.from('b'), 'audio/wav');
    await store.put('uploads/req_2/nested/c.wav', Buffer.from('c'), 'audio/wav');
    await store.delete('uploads/req_1/0-a.wav');
    assert.ok(existsSync(join(dir, 'uploads/req_1')), 'still holds a blob');
    await store.delete('uploads/req_1/1-b.wav');
    await store.delete('uploads/req_2/nested/c.wav');
    assert.ok(!existsSync(join(dir, 'uploads/req_1')));
    assert.ok(!existsSync(join(dir, 'uploads/req_2')));
    assert.ok(existsSync(join(dir, 'uploads')));
    // A put into a directory that is gone makes it again.
    await store.put('uploads/req_1/2-c.wav', Buffer.from('c'), 'audio/wav');
    assert.deepEqual(keysOf(await listed(store, 'uploads/')), ['uploads/req_1/2-c.wav']);
  });
});

/**
 * s3rver in its own process: its continuation tokens are DES-encrypted, which
 * OpenSSL 3 offers only with the legacy provider, so paging needs that flag.
 */
async function startPagingS3(bucket = 'paging') {
  const port = await freePort();
  const options = {
    port,
    address: '127.0.0.1',
    silent: true,
    directory: mkdtempSync(join(tmpdir(), 'sy-s3-')),
    configureBuckets: [{ name: bucket }],
  };
  const script = `new (require('s3rver'))(${JSON.stringify(options)}).run().then(() => console.log('ready'))`;
  const child = spawn(process.execPath, ['--openssl-legacy-provider', '-e', script], {
    cwd: fileURLToPath(new URL('../..', import.meta.url)),
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const [data] = (await Promise.race([once(child.stdout!, 'data'), once(child, 'exit')])) as [Buffer | number | null];
  if (!Buffer.isBuffer(data) || !data.toString().includes('ready'))
    throw new Error(`s3rver did not start (${String(data)})`);
  return {
    env: {
      S3_BUCKET: bucket,
      S3_ENDPOINT: `http://127.0.0.1:${port}`,
      S3_ACCESS_KEY_ID: 'S3RVER',
      S3_SECRET_ACCESS_KEY: 'S3RVER',
    },
    async close() {
      child.kill();
      if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
    },
  };
}

describe('local blob store and what it trusts', () => {
  it('writes its folders 0700 and its files 0600, whatever the umask', async () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'sy-blob-modes-')), 'blobs');
    const previous = process.umask(0);
    try {
      await new LocalBlobStore(dir).put('images/2026/a.png', Buffer.from('png'), 'image/png');
    } finally {
      process.umask(previous);
    }
    const modes = (at: string): string[] =>
      readdirSync(at, { withFileTypes: true }).flatMap((entry) => {
        const path = join(at, entry.name);
        const mode = `${entry.name} ${(lstatSync(path).mode & 0o777).toString(8)}`;
        return entry.isDirectory() ? [mode, ...modes(path)] : [mode];
      });
    assert.equal(lstatSync(dir).mode & 0o777, 0o700);
    assert.deepEqual(modes(dir).sort(), ['2026 700', 'a.png 600', 'a.png.meta.json 600', 'images 700']);
  });

  it('follows no link planted below its folder: a write or read through one fails and touches nothing elsewhere', async () => {
    const base = mkdtempSync(join(tmpdir(), 'sy-blob-links-'));
    const dir = join(base, 'blobs');
    const elsewhere = join(base, 'elsewhere');
    mkdirSync(elsewhere);
    writeFileSync(join(elsewhere, 'secret.txt'), 'not a blob');
    const store = new LocalBlobStore(dir);
    await store.put('images/kept.png', Buffer.from('png'), 'image/png');
    // A folder replaced by a link, and a file that is one.
    symlinkSync(elsewhere, join(dir, 'uploads'));
    symlinkSync(join(elsewhere, 'secret.txt'), join(dir, 'images', 'secret.txt'));
    await assert.rejects(store.put('uploads/x.png', Buffer.from('png'), 'image/png'));
    await assert.rejects(store.put('images/secret.txt', Buffer.from('overwritten'), 'text/plain'));
    assert.deepEqual(readdirSync(elsewhere), ['secret.txt'], 'nothing written through the folder link');
    await assert.rejects(store.get('images/secret.txt'), (error: Error & { status?: number }) => error.status === 404);
    await assert.rejects(
      store.stream('images/secret.txt'),
      (error: Error & { status?: number }) => error.status === 404,
    );
    assert.equal((await store.get('images/kept.png')).toString(), 'png');
  });
});

describe('S3 blob store listing', () => {
  let s3: Awaited<ReturnType<typeof startPagingS3>>;
  before(async () => {
    s3 = await startPagingS3();
  });
  after(async () => {
    await s3?.close();
  });

  it('pages through ListObjectsV2 and hides the configured key prefix', async () => {
    const settings = {
      bucket: s3.env.S3_BUCKET,
      endpoint: s3.env.S3_ENDPOINT,
      region: 'us-east-1',
      accessKeyId: s3.env.S3_ACCESS_KEY_ID,
      secretAccessKey: s3.env.S3_SECRET_ACCESS_KEY,
      forcePathStyle: true,
    };
    const store = new S3BlobStore({ ...settings, prefix: 'tenant/', listPageSize: 2 });
    const keys = ['images/r1/0.png', 'images/r1/1.png', 'images/r2/0.png', 'images/r3/0.png', 'images/r4/0.png'];
    for (const key of keys) await store.put(key, Buffer.from(key), 'image/png');
    await new S3BlobStore({ ...settings, prefix: '' }).put(
      'images/outside-the-prefix.png',
      Buffer.from('x'),
      'image/png',
    );

    // The server really splits this listing into pages of two.
    const client = new S3Client({
      ...settings,
      credentials: { accessKeyId: settings.accessKeyId, secretAccessKey: settings.secretAccessKey },
    });
    const first = await client.send(
      new ListObjectsV2Command({ Bucket: settings.bucket, Prefix: 'tenant/images/', MaxKeys: 2 }),
    );
    assert.equal(first.Contents?.length, 2);
    assert.equal(first.IsTruncated, true);
    client.destroy();

    assert.deepEqual(keysOf(await listed(store, 'images/')), keys);
    assert.deepEqual(keysOf(await listed(store, 'images/r1/')), keys.slice(0, 2));
    store.close();
  });
});

describe('signed blob URLs', () => {
  it('accept their own signature until they expire, and nothing else', () => {
    const url = new URL(signBlobUrl('http://gw.example', 'secret', 'images/a/0.png', 60));
    assert.equal(url.pathname, '/v1/blobs/images/a/0.png');
    const expires = url.searchParams.get('expires')!;
    const signature = url.searchParams.get('signature')!;
    assert.equal(checkBlobSignature('secret', 'images/a/0.png', expires, signature), 'ok');
    assert.equal(checkBlobSignature('other', 'images/a/0.png', expires, signature), 'invalid');
    assert.equal(checkBlobSignature('secret', 'images/a/1.png', expires, signature), 'invalid');
    assert.equal(checkBlobSignature('secret', 'images/a/0.png', String(Number(expires) + 1), signature), 'invalid');
    const old = new URL(signBlobUrl('http://gw.example', 'secret', 'k', -10));
    assert.equal(
      checkBlobSignature('secret', 'k', old.searchParams.get('expires')!, old.searchParams.get('signature')!),
      'expired',
    );
  });
});
