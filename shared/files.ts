import type { Readable } from 'node:stream';

/**
 * An account's files (OpenAI's Files API, `/v1/files`): what a client uploads for a batch, and the output and error
 * files a batch writes. The bytes live in the blob store (local or S3, as images do), streamed in and out, never whole
 * in memory; what the file is (its object) is kept beside them. Another account's id is unknown here: every call
 * names the account, and a file of another answers as missing.
 *
 * The api serves `/v1/files` (api/files/) and reads a batch's input from here; a worker writes a batch's output and
 * error files here. The implementation is `storage/account-files.ts`.
 */

/**
 * What a file is for: uploaded for a batch (`batch`), or for another use (`user_data`); written by a batch
 * (`batch_output`).
 */
export type FilePurpose = 'batch' | 'batch_output' | 'user_data';

/** OpenAI's file object. */
export interface FileObject {
  id: string;
  object: 'file';
  bytes: number;
  /** Epoch seconds. */
  created_at: number;
  /** Epoch seconds, or null when it does not expire. */
  expires_at: number | null;
  filename: string;
  purpose: FilePurpose;
  /** OpenAI's deprecated field, still sent: always `processed` here once stored. */
  status: 'processed';
}

export interface NewFile {
  purpose: FilePurpose;
  filename: string;
  /** The bytes, streamed (a multipart part, or lines a worker writes). */
  body: Readable | AsyncIterable<Buffer | string>;
  /** Epoch seconds after which the file is deleted; absent: kept until deleted. */
  expiresAt?: number;
  /** Refuse (and remove what was written) past this many bytes. */
  maxBytes?: number;
  /** The key that made it: the one that uploaded it, or that made the batch that wrote it. */
  keyId?: string;
  /** A batch's output or error file: the batch that wrote it, and the models that batch used (null: not known). */
  batch?: { id: string; models: readonly string[] | null };
}

/**
 * Who made a file, and the batches it belongs to, beside its object: what decides which keys of its account see it
 * (api/files/key-scope.ts).
 */
export interface FileOwnership {
  /** The key that uploaded it, or made the batch that wrote it; null for a file stored before that was recorded. */
  keyId: string | null;
  /** A batch's output or error file: that batch, and its models (null: not known). */
  batch: { id: string; models: string[] | null } | null;
  /** The batches made from it (an input file), by id, those still known. */
  inputOf: string[];
}

/** A file with its ownership. */
export interface FileEntry {
  file: FileObject;
  owner: FileOwnership;
}

/** Whether the caller sees each of these files (in order): the others are as if they did not exist. */
export type FileFilter = (entries: readonly FileEntry[]) => Promise<boolean[]>;

export interface FileListQuery {
  purpose?: FilePurpose;
  /** A file id: the page starts after it. */
  after?: string;
  /** 1 to 10,000. */
  limit: number;
  order: 'asc' | 'desc';
}

export interface AccountFiles {
  /** Stores a file for the account; throws a GatewayError 413 (and keeps nothing) past `maxBytes`. */
  put(accountId: string, file: NewFile): Promise<FileObject>;
  get(accountId: string, fileId: string): Promise<FileObject | undefined>;
  /** The file's bytes as a stream, or undefined when the account has no such file. */
  read(accountId: string, fileId: string): Promise<Readable | undefined>;
  /** The file and who made it, or undefined when the account has no such file. */
  entry(accountId: string, fileId: string): Promise<FileEntry | undefined>;
  /** A page of the account's files; with `sees`, of those it lets through only (a page is filled from them alone). */
  list(accountId: string, query: FileListQuery, sees?: FileFilter): Promise<{ data: FileObject[]; has_more: boolean }>;
  /** Notes that a batch was made from the file (its input): a key that may not see that batch does not see the file. */
  tieBatch(accountId: string, fileId: string, batchId: string): Promise<void>;
  /** Whether it existed (and is now gone). */
  delete(accountId: string, fileId: string): Promise<boolean>;
}
