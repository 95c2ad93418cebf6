import { constants, createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, readdir, realpath, rm, rmdir, stat, type FileHandle } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { BlobRef } from '../shared/blobs.js';
import { GatewayError } from '../shared/errors.js';
import type { BlobListing, BlobStore } from './blob-store.js';

const keyPattern = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,255}$/;
const prefixPattern = /^[A-Za-z0-9._/-]{0,256}$/;
const metaSuffix = '.meta.json';

/**
 * Blobs as files under one directory (`BLOB_DIR`); metadata beside each as
 * JSON. The operator's alone, whatever the umask: folders 0700, files 0600.
 * No symbolic link is followed below the directory itself: a file is opened
 * with O_NOFOLLOW, in a folder whose real path must be where its key says
 * (a link planted anywhere below makes the read or write fail, never go
 * elsewhere).
 */
export class LocalBlobStore implements BlobStore {
  private readonly root: string;
  private realRoot: Promise<string> | undefined;

  constructor(root: string) {
    this.root = resolve(root);
  }

  /** The blob directory's own real path (it may itself be a link the operator chose), made when missing. */
  private async real(): Promise<string> {
    this.realRoot ??= mkdir(this.root, { recursive: true, mode: 0o700 }).then(() => realpath(this.root));
    try {
      return await this.realRoot;
    } catch (error) {
      this.realRoot = undefined;
      throw error;
    }
  }

  /** Opens a file below the root, its folder where the key says it is and the file itself no link. */
  private async openInside(path: string, flags: number): Promise<FileHandle> {
    const inside = relative(this.root, dirname(path));
    const expected = inside ? join(await this.real(), inside) : await this.real();
    if ((await realpath(dirname(path))) !== expected)
      throw new GatewayError(400, 'Invalid blob key.', { code: 'invalid_blob_key' });
    return open(path, flags | constants.O_NOFOLLOW, 0o600);
  }

  private async writeInside(path: string, data: Buffer | string): Promise<void> {
    const file = await this.openInside(path, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC);
    try {
      await file.writeFile(data);
    } finally {
      await file.close();
    }
  }

  private async readInside(path: string): Promise<Buffer> {
    const file = await this.openInside(path, constants.O_RDONLY);
    try {
      return await file.readFile();
    } finally {
      await file.close();
    }
  }

  private path(key: string): string {
    if (!keyPattern.test(key) || key.includes('..'))
      throw new GatewayError(400, 'Invalid blob key.', { code: 'invalid_blob_key' });
    const path = resolve(join(this.root, key));
    if (!path.startsWith(this.root + sep))
      throw new GatewayError(400, 'Invalid blob key.', { code: 'invalid_blob_key' });
    return path;
  }

  async put(key: string, data: Buffer, contentType: string, filename?: string): Promise<BlobRef> {
    const path = this.path(key);
    const ref: BlobRef = { key, contentType, size: data.length, ...(filename ? { filename } : {}) };
    // A delete or sweep may remove the (then empty) directory between mkdir and the write: make it again.
    for (let attempt = 1; ; attempt++) {
      try {
        await mkdir(dirname(path), { recursive: true, mode: 0o700 });
        await this.writeInside(path, data);
        await this.writeInside(`${path}${metaSuffix}`, JSON.stringify(ref));
        return ref;
      } catch (error) {
        if (attempt >= 3 || (error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      }
    }
  }

  async putStream(
    key: string,
    body: AsyncIterable<Buffer | string>,
    contentType: string,
    filename?: string,
  ): Promise<BlobRef> {
    const path = this.path(key);
    let file: FileHandle | undefined;
    for (let attempt = 1; !file; attempt++) {
      try {
        await mkdir(dirname(path), { recursive: true, mode: 0o700 });
        file = await this.openInside(path, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC);
      } catch (error) {
        if (attempt >= 3 || (error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      }
    }
    let size = 0;
    async function* counted() {
      for await (const chunk of body) {
        const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
        size += bytes.length;
        yield bytes;
      }
    }
    try {
      // The stream owns the handle from here: it closes it when done or failed.
      await pipeline(counted(), createWriteStream('', { fd: file }));
      const ref: BlobRef = { key, contentType, size, ...(filename ? { filename } : {}) };
      await this.writeInside(`${path}${metaSuffix}`, JSON.stringify(ref));
      return ref;
    } catch (error) {
      await this.delete(key).catch(() => undefined);
      throw error;
    }
  }

  async get(key: string): Promise<Buffer> {
    const path = this.path(key);
    try {
      return await this.readInside(path);
    } catch (error) {
      throw notFound(key, error);
    }
  }

  async stream(key: string): Promise<Readable> {
    const path = this.path(key);
    const file = await this.openInside(path, constants.O_RDONLY).catch((error: unknown) => {
      throw notFound(key, error);
    });
    return createReadStream('', { fd: file });
  }

  async meta(key: string): Promise<BlobRef> {
    const path = this.path(key);
    try {
      return JSON.parse((await this.readInside(`${path}${metaSuffix}`)).toString('utf8')) as BlobRef;
    } catch (error) {
      throw notFound(key, error);
    }
  }

  async delete(key: string): Promise<void> {
    const path = this.path(key);
    await rm(path, { force: true });
    await rm(`${path}${metaSuffix}`, { force: true });
    await this.removeEmptyParents(dirname(path));
  }

  /** Directories left empty by a delete go too, up to (not including) the top-level folder. */
  private async removeEmptyParents(dir: string): Promise<void> {
    const top = join(this.root, relative(this.root, dir).split(sep)[0]!);
    while (dir.startsWith(top + sep)) {
      try {
        await rmdir(dir);
      } catch {
        return; // not empty (or already gone)
      }
      dir = dirname(dir);
    }
  }

  async *list(prefix: string): AsyncIterable<BlobListing> {
    const base = prefix.slice(0, prefix.lastIndexOf('/') + 1);
    yield* this.walk(this.directory(prefix, base), base, prefix);
  }

  /** Walks one directory, descending only into folders that can hold keys under `prefix`. */
  private async *walk(dir: string, base: string, prefix: string): AsyncIterable<BlobListing> {
    const entries = await readdir(dir, { withFileTypes: true }).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT' || error.code === 'ENOTDIR') return [];
      throw error;
    });
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const names = new Set(entries.map((entry) => entry.name));
    for (const entry of entries) {
      if (entry.isDirectory()) {
        const folder = `${base}${entry.name}/`;
        if (folder.startsWith(prefix) || prefix.startsWith(folder))
          yield* this.walk(join(dir, entry.name), folder, prefix);
        continue;
      }
      if (!entry.isFile()) continue;
      // A metadata file stands for its blob only when the blob itself is missing (a delete cut short).
      const name = entry.name.endsWith(metaSuffix) ? entry.name.slice(0, -metaSuffix.length) : entry.name;
      if (name !== entry.name && names.has(name)) continue;
      const key = `${base}${name}`;
      if (!key.startsWith(prefix)) continue;
      const info = await stat(join(dir, entry.name)).catch(() => undefined); // deleted meanwhile
      if (info) yield { key, modified: info.mtime };
    }
  }

  async removeEmptyDirectories(prefix: string, olderThan: Date): Promise<number> {
    const base = prefix.slice(0, prefix.lastIndexOf('/') + 1);
    return this.prune(this.directory(prefix, base), base, prefix, olderThan.getTime());
  }

  /** Removes the empty directories below `dir` (keys `base…`) under `prefix`, deepest first. */
  private async prune(dir: string, base: string, prefix: string, olderThanMs: number): Promise<number> {
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    let removed = 0;
    for (const entry of entries) {
      if (!entry.isDirectory()) continue;
      const folder = `${base}${entry.name}/`;
      if (!folder.startsWith(prefix) && !prefix.startsWith(folder)) continue;
      const path = join(dir, entry.name);
      removed += await this.prune(path, folder, prefix, olderThanMs);
      // Top-level folders (uploads/, images/ …) stay: puts write into them all the time.
      if (base === '' || !folder.startsWith(prefix)) continue;
      try {
        // A directory changed recently may be about to receive a put.
        if ((await stat(path)).mtimeMs >= olderThanMs) continue;
        await rmdir(path);
        removed++;
      } catch {
        // not empty, or already gone
      }
    }
    return removed;
  }

  /** The directory holding the keys under `prefix` (`base`: the prefix up to its last `/`). */
  private directory(prefix: string, base: string): string {
    if (!prefixPattern.test(prefix) || prefix.includes('..'))
      throw new GatewayError(400, 'Invalid blob prefix.', { code: 'invalid_blob_key' });
    const dir = resolve(join(this.root, base));
    if (dir !== this.root && !dir.startsWith(this.root + sep))
      throw new GatewayError(400, 'Invalid blob prefix.', { code: 'invalid_blob_key' });
    return dir;
  }
}

function notFound(key: string, cause: unknown): GatewayError {
  return new GatewayError(404, `No such file: ${key}.`, { code: 'not_found', cause });
}
