import { randomBytes } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { Redis } from 'ioredis';
import { GatewayError, invalidRequest } from '../shared/errors.js';
import type {
  AccountFiles,
  FileEntry,
  FileFilter,
  FileListQuery,
  FileObject,
  FileOwnership,
  FilePurpose,
  NewFile,
} from '../shared/files.js';
import {
  accountFileKey,
  accountFilesKey,
  accountFilesSeqKey,
  expiringFilesKey,
  fileMember,
  fileUploadsKey,
} from '../shared/redis-keys.js';
import type { BlobStore } from './blob-store.js';

/**
 * An account's files (shared/files.ts): the bytes in the blob store under `files/<account>/<file id>`, streamed in
 * (`BlobStore.putStream`) and out, never whole in memory; the file object in Redis beside the account's batches.
 *
 * Why Redis and not the record: the files are the batch engine's inputs and outputs, and that engine keeps every
 * batch in Redis (shared/batches/); a batch and its files are written and read by the same processes, live as long
 * as each other (a batch's output files expire with its retention) and need no second store to be reachable. Redis
 * lists them well: each account has a counter and sorted sets (all its files, and one per purpose) scored by a place
 * that grows with creation, so a page after any id, in either order, is one O(log n) range read, under the account's
 * own hash tag (one slot on a Cluster). The file objects are small (a hash of eight fields) and persist as Redis does
 * (its append-only file); what would be lost with a flushed Redis is the index, not the bytes, which the blob janitor
 * only deletes when a file expires or an upload was abandoned.
 *
 * Each file names the key that made it (`key`: the one that uploaded it, or made the batch that wrote it), a batch's
 * output or error file its batch and that batch's models (`batch`, `batch_models`), and an input file the batches
 * made from it (a set beside it, `fileBatchesKey`): who of its account sees it is decided from those
 * (api/files/key-scope.ts).
 *
 * A deleted file keeps its place (not its object) for a day, so a client deleting the files it pages through goes on
 * paging. Expired files answer as missing at once and are deleted by the blob janitor (`sweepExpired`); the bytes of
 * an upload whose api died before its file was recorded are deleted by it too (`sweepAbandonedUploads`).
 */

const idAlphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const fileIdPattern = /^file-[A-Za-z0-9]{1,64}$/;
/** File objects read per round trip of a list. */
const listRound = 1000;
/** How long a deleted file's place stays known to list cursors. */
const deletedPlaceSeconds = 86_400;
/** An upload still unrecorded this long after it began is abandoned (its api died): its bytes are swept. */
export const abandonedUploadMs = 6 * 3600_000;

/** A file's id as OpenAI writes them: `file-` and 22 letters and digits. */
export function newFileId(): string {
  let id = 'file-';
  // Unique, not secret: the slight lean of a byte modulo 62 toward the first letters costs it nothing.
  for (const byte of randomBytes(22)) id += idAlphabet[byte % 62];
  return id;
}

/** Whether a string could be a file id at all (anything else is a 404 without a lookup). */
export const isFileId = (id: string): boolean => fileIdPattern.test(id);

/** Where a file's bytes are: under its account's folder (an id that is not key-safe is written in hex). */
export function fileBlobKey(accountId: string, fileId: string): string {
  const folder = /^[A-Za-z0-9_-]{1,100}$/.test(accountId)
    ? accountId
    : `x${Buffer.from(accountId).toString('hex').slice(0, 200)}`;
  return `files/${folder}/${fileId}`;
}

/** The batches made from a file (a set, under the account's hash tag as the file is). */
export const fileBatchesKey = (accountId: string, fileId: string) => `${accountFileKey(accountId, fileId)}:batches`;

export const fileTooLarge = (limit: number) =>
  new GatewayError(413, `File too large: the limit is ${limit} bytes (${Math.round(limit / 1024 / 1024)} MB).`, {
    code: 'file_too_large',
  });

/** A file's bytes stored, its object not yet recorded (`AccountFileStore.stage`). */
export interface StagedFile {
  accountId: string;
  id: string;
  blobKey: string;
  filename: string;
  bytes: number;
  keyId?: string;
  batch?: { id: string; models: readonly string[] | null };
}

/** Counts a body's bytes as they pass, throwing 413 past `maxBytes` (the store then keeps nothing). */
async function* capped(
  body: Readable | AsyncIterable<Buffer | string>,
  maxBytes: number | undefined,
): AsyncIterable<Buffer> {
  let total = 0;
  for await (const chunk of body as AsyncIterable<Buffer | string>) {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    total += bytes.length;
    if (maxBytes !== undefined && total > maxBytes) throw fileTooLarge(maxBytes);
    yield bytes;
  }
}

function toFileObject(fields: Record<string, string>, nowMs: number): FileObject | undefined {
  if (!fields.id || fields.deleted === '1') return undefined;
  const expiresAt = fields.expires_at ? Number(fields.expires_at) : null;
  if (expiresAt !== null && expiresAt * 1000 <= nowMs) return undefined;
  return {
    id: fields.id,
    object: 'file',
    bytes: Number(fields.bytes),
    created_at: Number(fields.created_at),
    expires_at: expiresAt,
    filename: fields.filename ?? '',
    purpose: fields.purpose as FilePurpose,
    status: 'processed',
  };
}

function ownershipOf(fields: Record<string, string>, inputOf: readonly string[]): FileOwnership {
  let models: string[] | null = null;
  try {
    models = fields.batch_models ? (JSON.parse(fields.batch_models) as string[]) : null;
  } catch {
    models = null;
  }
  return {
    keyId: fields.key || null,
    batch: fields.batch ? { id: fields.batch, models } : null,
    inputOf: [...inputOf],
  };
}

/** The one account and file a member of the gateway-wide sets names (account ids hold no space). */
function parseMember(member: string): { accountId: string; fileId: string } {
  const at = member.lastIndexOf(' ');
  return { accountId: member.slice(0, at), fileId: member.slice(at + 1) };
}

export class AccountFileStore implements AccountFiles {
  constructor(
    private readonly redis: Redis,
    private readonly blobs: BlobStore,
  ) {}

  async put(accountId: string, file: NewFile): Promise<FileObject> {
    const staged = await this.stage(accountId, file);
    try {
      return await this.commit(staged, file.purpose, file.expiresAt);
    } catch (error) {
      await this.discard(staged).catch(() => undefined);
      throw error;
    }
  }

  /**
   * Stores a file's bytes before its purpose is known (a multipart body may send the file before the `purpose`
   * field): `commit` records it, `discard` removes it. Throws 413 (keeping nothing) past `maxBytes`.
   */
  async stage(
    accountId: string,
    file: Pick<NewFile, 'filename' | 'body' | 'maxBytes' | 'keyId' | 'batch'>,
  ): Promise<StagedFile> {
    const id = newFileId();
    const blobKey = fileBlobKey(accountId, id);
    const member = fileMember(accountId, id);
    await this.redis.zadd(fileUploadsKey, Date.now(), member);
    try {
      const ref = await this.blobs.putStream(
        blobKey,
        capped(file.body, file.maxBytes),
        'application/octet-stream',
        file.filename || undefined,
      );
      return {
        accountId,
        id,
        blobKey,
        filename: file.filename,
        bytes: ref.size,
        ...(file.keyId ? { keyId: file.keyId } : {}),
        ...(file.batch ? { batch: file.batch } : {}),
      };
    } catch (error) {
      await this.redis.zrem(fileUploadsKey, member).catch(() => undefined);
      throw error;
    }
  }

  /** Records a staged file: from now on it is listed and readable. */
  async commit(staged: StagedFile, purpose: FilePurpose, expiresAt?: number): Promise<FileObject> {
    const { accountId, id } = staged;
    const member = fileMember(accountId, id);
    const created = Math.floor(Date.now() / 1000);
    // Known to the sweep before it exists: a process dying in between leaves an entry that deletes nothing, never a
    // file that never expires.
    if (expiresAt !== undefined) await this.redis.zadd(expiringFilesKey, expiresAt * 1000, member);
    const seq = await this.redis.incr(accountFilesSeqKey(accountId));
    await this.redis
      .multi()
      .hset(accountFileKey(accountId, id), {
        id,
        bytes: staged.bytes,
        created_at: created,
        expires_at: expiresAt ?? '',
        filename: staged.filename,
        purpose,
        seq,
        blob: staged.blobKey,
        key: staged.keyId ?? '',
        batch: staged.batch?.id ?? '',
        batch_models: staged.batch?.models ? JSON.stringify(staged.batch.models) : '',
      })
      .zadd(accountFilesKey(accountId), seq, id)
      .zadd(accountFilesKey(accountId, purpose), seq, id)
      .exec();
    await this.redis.zrem(fileUploadsKey, member);
    return {
      id,
      object: 'file',
      bytes: staged.bytes,
      created_at: created,
      expires_at: expiresAt ?? null,
      filename: staged.filename,
      purpose,
      status: 'processed',
    };
  }

  /** Removes a staged file's bytes (its purpose or size was refused). */
  async discard(staged: StagedFile): Promise<void> {
    await this.blobs.delete(staged.blobKey);
    await this.redis.zrem(fileUploadsKey, fileMember(staged.accountId, staged.id));
  }

  async get(accountId: string, fileId: string): Promise<FileObject | undefined> {
    if (!isFileId(fileId)) return undefined;
    return toFileObject(await this.redis.hgetall(accountFileKey(accountId, fileId)), Date.now());
  }

  async entry(accountId: string, fileId: string): Promise<FileEntry | undefined> {
    if (!isFileId(fileId)) return undefined;
    const [[, fields], [, inputOf]] = (await this.redis
      .multi()
      .hgetall(accountFileKey(accountId, fileId))
      .smembers(fileBatchesKey(accountId, fileId))
      .exec()) as [[unknown, Record<string, string>], [unknown, string[]]];
    const file = toFileObject(fields, Date.now());
    return file ? { file, owner: ownershipOf(fields, inputOf) } : undefined;
  }

  async tieBatch(accountId: string, fileId: string, batchId: string): Promise<void> {
    if (!isFileId(fileId)) return;
    await this.redis.sadd(fileBatchesKey(accountId, fileId), batchId);
  }

  async read(accountId: string, fileId: string): Promise<Readable | undefined> {
    if (!isFileId(fileId)) return undefined;
    const fields = await this.redis.hgetall(accountFileKey(accountId, fileId));
    if (!toFileObject(fields, Date.now()) || !fields.blob) return undefined;
    try {
      return await this.blobs.stream(fields.blob);
    } catch (error) {
      // Deleted (or expired and swept) between the two reads.
      if (error instanceof GatewayError && error.status === 404) return undefined;
      throw error;
    }
  }

  async list(
    accountId: string,
    query: FileListQuery,
    sees?: FileFilter,
  ): Promise<{ data: FileObject[]; has_more: boolean }> {
    const index = accountFilesKey(accountId, query.purpose);
    const desc = query.order === 'desc';
    let bound = desc ? '+inf' : '-inf';
    if (query.after !== undefined) {
      let place = isFileId(query.after) ? await this.redis.hget(accountFileKey(accountId, query.after), 'seq') : null;
      // A file the caller may not see is no place to list after, as one that never was (a deleted one still is).
      if (place !== null && sees) {
        const entry = await this.entry(accountId, query.after);
        if (entry && !(await sees([entry]))[0]) place = null;
      }
      if (place === null) throw invalidRequest(`No file '${query.after.slice(0, 80)}' to list after.`, 'after');
      bound = `(${place}`;
    }
    const data: FileObject[] = [];
    const now = Date.now();
    // Expired files not swept yet are skipped, so a page may read past `limit` entries to fill itself. Read a
    // thousand at a time: a page of 10,000 is ten short turns of the loop, not one long one.
    for (;;) {
      // With a filter, whole rounds: how many of them it lets through is not known before they are read.
      const want = sees ? listRound : Math.min(listRound, query.limit + 1 - data.length);
      const range = desc
        ? await this.redis.zrange(index, bound, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, want, 'WITHSCORES')
        : await this.redis.zrange(index, bound, '+inf', 'BYSCORE', 'LIMIT', 0, want, 'WITHSCORES');
      if (range.length === 0) break;
      const ids = range.filter((_, i) => i % 2 === 0);
      const pipeline = this.redis.pipeline();
      for (const id of ids) pipeline.hgetall(accountFileKey(accountId, id));
      if (sees) for (const id of ids) pipeline.smembers(fileBatchesKey(accountId, id));
      const replies = (await pipeline.exec()) ?? [];
      const entries = ids.flatMap((_, i): FileEntry[] => {
        const fields = (replies[i]?.[1] ?? {}) as Record<string, string>;
        const file = toFileObject(fields, now);
        return file
          ? [{ file, owner: ownershipOf(fields, sees ? ((replies[ids.length + i]?.[1] ?? []) as string[]) : []) }]
          : [];
      });
      const seen = sees ? await sees(entries) : entries.map(() => true);
      entries.forEach(({ file }, i) => {
        if (seen[i] && data.length <= query.limit) data.push(file);
      });
      bound = `(${range.at(-1)!}`;
      if (data.length > query.limit || ids.length < want) break;
    }
    const hasMore = data.length > query.limit;
    if (hasMore) data.length = query.limit;
    return { data, has_more: hasMore };
  }

  async delete(accountId: string, fileId: string): Promise<boolean> {
    if (!isFileId(fileId)) return false;
    const key = accountFileKey(accountId, fileId);
    const fields = await this.redis.hgetall(key);
    if (!fields.id || fields.deleted === '1') return false;
    // The bytes first: a failure here leaves the file whole, to be deleted again.
    if (fields.blob) await this.blobs.delete(fields.blob);
    const replies = await this.redis
      .multi()
      .hget(key, 'deleted')
      .del(key)
      .hset(key, { seq: fields.seq ?? '0', deleted: '1' })
      .expire(key, deletedPlaceSeconds)
      .zrem(accountFilesKey(accountId), fileId)
      .zrem(accountFilesKey(accountId, fields.purpose), fileId)
      .del(fileBatchesKey(accountId, fileId))
      .exec();
    await this.redis.zrem(expiringFilesKey, fileMember(accountId, fileId));
    // Two deletes at once: the one that found it whole is the one that deleted it.
    const wasDeleted = replies?.[0]?.[1] === '1';
    return !wasDeleted && toFileObject(fields, Date.now()) !== undefined;
  }

  /**
   * Deletes the files expired by `nowMs` (the blob janitor's sweep). One whose bytes cannot be deleted now is left for
   * the next sweep and passed over in this one. Returns how many were deleted and how many failed.
   */
  async sweepExpired(nowMs = Date.now(), pageSize = 500): Promise<{ deleted: number; failed: number }> {
    let deleted = 0;
    let failed = 0;
    for (;;) {
      const due = await this.redis.zrangebyscore(expiringFilesKey, '-inf', nowMs, 'LIMIT', failed, pageSize);
      for (const member of due) {
        const { accountId, fileId } = parseMember(member);
        try {
          await this.delete(accountId, fileId);
          await this.redis.zrem(expiringFilesKey, member);
          deleted += 1;
        } catch {
          failed += 1;
        }
      }
      if (due.length < pageSize) return { deleted, failed };
    }
  }

  /**
   * Deletes the bytes of uploads begun before `beganBeforeMs` and never recorded (their api died); returns how many.
   */
  async sweepAbandonedUploads(
    beganBeforeMs = Date.now() - abandonedUploadMs,
    pageSize = 500,
  ): Promise<{ deleted: number; failed: number }> {
    let deleted = 0;
    let failed = 0;
    for (;;) {
      const stale = await this.redis.zrangebyscore(fileUploadsKey, '-inf', beganBeforeMs, 'LIMIT', failed, pageSize);
      for (const member of stale) {
        const { accountId, fileId } = parseMember(member);
        try {
          // Recorded after all (its api died between the record and this entry's removal): the file is whole.
          if ((await this.redis.exists(accountFileKey(accountId, fileId))) === 0) {
            await this.blobs.delete(fileBlobKey(accountId, fileId));
            deleted += 1;
          }
          await this.redis.zrem(fileUploadsKey, member);
        } catch {
          failed += 1;
        }
      }
      if (stale.length < pageSize) return { deleted, failed };
    }
  }
}
