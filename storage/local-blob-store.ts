import { createReadStream } from 'node:fs';
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import type { Readable } from 'node:stream';
import type { BlobRef } from '../shared/blobs.js';
import { GatewayError } from '../shared/errors.js';
import type { BlobStore } from '../workers/vendors/media-types.js';

const keyPattern = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,255}$/;

/** Blobs as files under one directory (`BLOB_DIR`); metadata beside each as JSON. */
export class LocalBlobStore implements BlobStore {
  private readonly root: string;

  constructor(root: string) {
    this.root = resolve(root);
  }

  private path(key: string): string {
    if (!keyPattern.test(key) || key.includes('..')) throw new GatewayError(400, 'Invalid blob key.', { code: 'invalid_blob_key' });
    const path = resolve(join(this.root, key));
    if (!path.startsWith(this.root + sep)) throw new GatewayError(400, 'Invalid blob key.', { code: 'invalid_blob_key' });
    return path;
  }

  async put(key: string, data: Buffer, contentType: string, filename?: string): Promise<BlobRef> {
    const path = this.path(key);
    await mkdir(dirname(path), { recursive: true });
    const ref: BlobRef = { key, contentType, size: data.length, ...(filename ? { filename } : {}) };
    await writeFile(path, data);
    await writeFile(`${path}.meta.json`, JSON.stringify(ref));
    return ref;
  }

  async get(key: string): Promise<Buffer> {
    try {
      return await readFile(this.path(key));
    } catch (error) {
      throw notFound(key, error);
    }
  }

  async stream(key: string): Promise<Readable> {
    const path = this.path(key);
    await stat(path).catch((error: unknown) => {
      throw notFound(key, error);
    });
    return createReadStream(path);
  }

  async meta(key: string): Promise<BlobRef> {
    try {
      return JSON.parse(await readFile(`${this.path(key)}.meta.json`, 'utf8')) as BlobRef;
    } catch (error) {
      throw notFound(key, error);
    }
  }

  async delete(key: string): Promise<void> {
    const path = this.path(key);
    await rm(path, { force: true });
    await rm(`${path}.meta.json`, { force: true });
  }
}

function notFound(key: string, cause: unknown): GatewayError {
  return new GatewayError(404, `No such file: ${key}.`, { code: 'not_found', cause });
}
