import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../shared/config.js';
import { createBlobStore, type ServingBlobStore } from '../../storage/create-blob-store.js';
import { checkBlobSignature, signBlobUrl } from '../../storage/blob-urls.js';
import { startS3 } from '../support/s3-server.js';

// One contract, both stores: the local directory and S3-compatible storage.
for (const kind of ['local', 's3'] as const) {
  describe(`${kind} blob store`, () => {
    let store: ServingBlobStore;
    let s3: Awaited<ReturnType<typeof startS3>> | undefined;

    before(async () => {
      const dir = mkdtempSync(join(tmpdir(), 'sy-blobs-'));
      s3 = kind === 's3' ? await startS3() : undefined;
      store = createBlobStore(loadConfig({ BLOB_DIR: dir }), s3?.env ?? {});
    });

    after(async () => {
      (store as { close?: () => void }).close?.();
      await s3?.close();
    });

    it('stores bytes exactly, with their type and name, and streams them back', async () => {
      const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      const ref = await store.put('uploads/req_1/0-photo.png', bytes, 'image/png', 'photo ü.png');
      assert.deepEqual(ref, { key: 'uploads/req_1/0-photo.png', contentType: 'image/png', size: 256, filename: 'photo ü.png' });
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
  });
}

describe('signed blob URLs', () => {
  it('accept their own signature until they expire, and nothing else', () => {
    const url = new URL(signBlobUrl('http://gw.example', 'secret', 'images/a/0.png', 60));
    assert.equal(url.pathname, '/v1/files/images/a/0.png');
    const expires = url.searchParams.get('expires')!;
    const signature = url.searchParams.get('signature')!;
    assert.equal(checkBlobSignature('secret', 'images/a/0.png', expires, signature), 'ok');
    assert.equal(checkBlobSignature('other', 'images/a/0.png', expires, signature), 'invalid');
    assert.equal(checkBlobSignature('secret', 'images/a/1.png', expires, signature), 'invalid');
    assert.equal(checkBlobSignature('secret', 'images/a/0.png', String(Number(expires) + 1), signature), 'invalid');
    const old = new URL(signBlobUrl('http://gw.example', 'secret', 'k', -10));
    assert.equal(checkBlobSignature('secret', 'k', old.searchParams.get('expires')!, old.searchParams.get('signature')!), 'expired');
  });
});
