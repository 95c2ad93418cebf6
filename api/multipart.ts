import type { IncomingMessage } from 'node:http';
import { randomUUID } from 'node:crypto';
import busboy from 'busboy';
import type { BlobRef } from '../shared/blobs.js';
import { GatewayError, invalidRequest } from '../shared/errors.js';
import type { BlobStore } from '../workers/vendors/media-types.js';

export interface MultipartForm {
  /** Text fields; a field sent several times (or as `name[]`) is an array. */
  fields: Record<string, string | string[]>;
  /** Uploaded files by field name (`image[]` is filed under `image[]`), stored in the blob store. */
  files: UploadedFile[];
}

export interface UploadedFile {
  field: string;
  ref: BlobRef;
  /** The file's first bytes (up to 32), enough to tell its format and a PNG's dimensions. */
  head: Buffer;
  bytes: number;
}

export const uploadTooLarge = (limit: number) =>
  new GatewayError(413, `Uploaded file too large: the limit is ${Math.round(limit / 1024 / 1024)} MB.`, { code: 'file_too_large' });

/**
 * Parses a multipart/form-data request. Each file is stored in the blob store
 * under `uploads/<request id>/…`; a file past `maxFileBytes` stops the upload
 * at once with 413 (the rest of the body is not read).
 */
export function readMultipart(
  req: IncomingMessage,
  blobs: BlobStore,
  requestId: string,
  maxFileBytes: number,
): Promise<MultipartForm> {
  const type = req.headers['content-type'] ?? '';
  if (!/^multipart\/form-data/i.test(type)) {
    return Promise.reject(invalidRequest(`Send this request as multipart/form-data, not '${type.split(';')[0] || 'nothing'}'.`));
  }
  return new Promise((resolve, reject) => {
    let parser: busboy.Busboy;
    try {
      parser = busboy({ headers: req.headers, limits: { fileSize: maxFileBytes, files: 20, fields: 100, fieldSize: 1024 * 1024 } });
    } catch (error) {
      reject(invalidRequest(`Malformed multipart body: ${(error as Error).message}.`));
      return;
    }
    const fields: MultipartForm['fields'] = {};
    // Slots keep the parts' order (the first image is the one a mask applies to), whatever order the stores finish in.
    const slots: Array<MultipartForm['files'][number] | undefined> = [];
    const stores: Promise<void>[] = [];
    let failed = false;
    const fail = (error: unknown) => {
      if (failed) return;
      failed = true;
      req.unpipe(parser);
      req.resume();
      reject(error);
    };

    parser.on('field', (name, value) => {
      const existing = fields[name];
      if (existing === undefined) fields[name] = name.endsWith('[]') ? [value] : value;
      else fields[name] = Array.isArray(existing) ? [...existing, value] : [existing, value];
    });
    parser.on('file', (field, stream, info) => {
      const slot = slots.push(undefined) - 1;
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('limit', () => fail(uploadTooLarge(maxFileBytes)));
      stream.on('end', () => {
        if (failed) return;
        const safeName = (info.filename || 'upload').replace(/[^A-Za-z0-9._-]/g, '_').slice(-100);
        const bytes = Buffer.concat(chunks);
        stores.push(
          blobs
            .put(`uploads/${requestId}/${slot}-${randomUUID().slice(0, 8)}-${safeName}`, bytes, info.mimeType || 'application/octet-stream', info.filename)
            .then((ref) => {
              slots[slot] = { field, ref, head: Buffer.from(bytes.subarray(0, 32)), bytes: bytes.length };
            }),
        );
      });
    });
    parser.on('error', (error: Error) => fail(invalidRequest(`Malformed multipart body: ${error.message}.`)));
    parser.on('close', () => {
      if (failed) return;
      Promise.all(stores).then(() => resolve({ fields, files: slots.filter((f) => f !== undefined) }), fail);
    });
    req.on('error', fail);
    req.pipe(parser);
  });
}

/**
 * Runs a multipart request's checks; when they refuse it, the files already
 * stored for it are deleted at once (no job will ever read them).
 */
export async function refusingDeletesUploads<T>(form: MultipartForm, blobs: BlobStore, checks: () => T | Promise<T>): Promise<T> {
  try {
    return await checks();
  } catch (error) {
    await Promise.allSettled(form.files.map((file) => blobs.delete(file.ref.key)));
    throw error;
  }
}
