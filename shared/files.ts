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

/** What a file is for: uploaded for a batch (`batch`), or for another use (`user_data`); written by a batch (`batch_output`). */
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
}

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
  list(accountId: string, query: FileListQuery): Promise<{ data: FileObject[]; has_more: boolean }>;
  /** Whether it existed (and is now gone). */
  delete(accountId: string, fileId: string): Promise<boolean>;
}
