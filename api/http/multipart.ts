import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import { createHash, randomUUID } from 'node:crypto';
import busboy from 'busboy';
import type { BlobRef } from '../../shared/blobs.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import { bodyStalled, watchBodyIdle } from './request-body.js';
import type { BlobStore } from '../../storage/blob-store.js';

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
  new GatewayError(413, `Uploaded file too large: the limit is ${Math.round(limit / 1024 / 1024)} MB.`, {
    code: 'file_too_large',
  });

/** Most files and text fields one multipart body may carry; more is a 400, never a silent drop. */
export const multipartLimits = { files: 20, fields: 150, fieldBytes: 1024 * 1024 } as const;

/** Ends the reading of a body with this error (the first call counts). */
export type FailUpload = (error: unknown) => void;

/** What one reader does with a multipart body's parts (readMultipartBody runs the body and its failures). */
export interface PartSink<T> {
  /** A text field (not called once the body has failed). */
  field(name: string, value: string, info: busboy.FieldInfo): void;
  /** A file part: read `stream` to its end or resume it (not called once the body has failed). */
  file(name: string, stream: Readable, info: busboy.FileInfo): void;
  /** The refusals for more files, or more fields, than the parser's limits. */
  tooManyFiles(): GatewayError;
  tooManyFields(): GatewayError;
  /** The body failed: delete whatever was stored of it, once its writes have settled. */
  discard(): void;
  /** The body has ended whole: the reader's answer (a rejection fails it like any other failure). */
  end(): Promise<T>;
}

const malformedBody = (error: Error) =>
  invalidRequest(`Malformed multipart body: ${error.message}.`, null, 'invalid_multipart');

/**
 * Reads a multipart/form-data request through a sink (see PartSink), the one way both multipart readers read: the
 * content type checked, busboy's parser with `limits`, a 408 once the client goes silent mid-body
 * (BODY_IDLE_TIMEOUT_MS), a 400 for a body cut short or malformed. Any failure stops feeding the parser, keeps reading
 * (and dropping) what the client still sends so it can read the answer, and has the sink discard what it stored.
 */
export function readMultipartBody<T>(
  req: IncomingMessage,
  limits: busboy.Limits,
  makeSink: (fail: FailUpload) => PartSink<T>,
): Promise<T> {
  const type = req.headers['content-type'] ?? '';
  if (!/^multipart\/form-data/i.test(type)) {
    return Promise.reject(
      invalidRequest(`Send this request as multipart/form-data, not '${type.split(';')[0] || 'nothing'}'.`),
    );
  }
  return new Promise((resolve, reject) => {
    let parser: busboy.Busboy;
    try {
      // Filenames as UTF-8 (what browsers, undici's FormData and the SDKs send), not busboy's default Latin-1;
      // an RFC 5987 `filename*=UTF-8''…` is decoded by its own charset either way.
      parser = busboy({ headers: req.headers, limits, defParamCharset: 'utf8' });
    } catch (error) {
      reject(malformedBody(error as Error));
      return;
    }
    let failed = false;
    const idle = watchBodyIdle(req, () => fail(bodyStalled()));
    req.on('data', idle.bytes);
    const fail: FailUpload = (error) => {
      idle.stop();
      if (failed) return;
      failed = true;
      req.unpipe(parser);
      req.resume();
      sink.discard();
      reject(error);
    };
    const malformed = (error: Error) => fail(malformedBody(error));
    const sink = makeSink(fail);
    parser.on('field', (name, value, info) => {
      if (!failed) sink.field(name, value, info);
    });
    parser.on('file', (name, stream, info) => {
      // A body that ends inside a file part makes the file stream fail as well as the parser: both are the same 400.
      stream.on('error', malformed);
      if (failed) return void stream.resume();
      sink.file(name, stream, info);
    });
    parser.on('filesLimit', () => fail(sink.tooManyFiles()));
    parser.on('fieldsLimit', () => fail(sink.tooManyFields()));
    parser.on('error', malformed);
    parser.on('close', () => {
      idle.stop();
      if (failed) return;
      sink.end().then(resolve, fail);
    });
    req.on('error', fail);
    req.on('aborted', () =>
      fail(invalidRequest('The request body ended before it was complete.', null, 'invalid_multipart')),
    );
    req.pipe(parser);
  });
}

/**
 * Parses a multipart/form-data request. Each file is stored in the blob store
 * under `uploads/<request id>/…`; a file past `maxFileBytes` stops the upload
 * at once with 413 (the rest of the body is not read). Any failure (a body cut
 * short, too many parts, a field too long) is an OpenAI-shaped 4xx, and the
 * files already stored for the request are deleted.
 */
export function readMultipart(
  req: IncomingMessage,
  blobs: BlobStore,
  requestId: string,
  maxFileBytes: number,
): Promise<MultipartForm> {
  const limits = {
    fileSize: maxFileBytes,
    files: multipartLimits.files,
    fields: multipartLimits.fields,
    fieldSize: multipartLimits.fieldBytes,
  };
  return readMultipartBody(req, limits, (fail) => {
    // No prototype: a field named `__proto__` or `constructor` is just a field.
    const fields: MultipartForm['fields'] = Object.create(null) as MultipartForm['fields'];
    // Slots keep the parts' order (the first image is the one a mask applies to), whatever order the stores finish in.
    const slots: Array<MultipartForm['files'][number] | undefined> = [];
    const stores: Promise<void>[] = [];
    let failed = false;
    const refuse = (error: GatewayError) => {
      failed = true;
      fail(error);
    };
    const unnamed = () =>
      refuse(
        invalidRequest(
          'A multipart part has no name: every part needs Content-Disposition: form-data; name="…".',
          null,
          'invalid_multipart',
        ),
      );
    return {
      field(name, value, info) {
        if (typeof name !== 'string' || name === '') return unnamed();
        if (info.nameTruncated)
          return refuse(
            invalidRequest(`A multipart field name is longer than the parser accepts.`, null, 'invalid_multipart'),
          );
        if (info.valueTruncated) {
          return refuse(
            invalidRequest(
              `The field '${name}' is too long: at most ${multipartLimits.fieldBytes} bytes.`,
              name,
              'field_too_long',
            ),
          );
        }
        const existing = fields[name];
        if (existing === undefined) fields[name] = name.endsWith('[]') ? [value] : value;
        else fields[name] = Array.isArray(existing) ? [...existing, value] : [existing, value];
      },
      file(field, stream, info) {
        if (typeof field !== 'string' || field === '') {
          stream.resume();
          return unnamed();
        }
        const slot = slots.push(undefined) - 1;
        const chunks: Buffer[] = [];
        // Digested piece by piece as it arrives (never all at once, which would hold the event loop on a large file).
        const digest = createHash('sha256');
        stream.on('data', (chunk: Buffer) => {
          chunks.push(chunk);
          digest.update(chunk);
        });
        stream.on('limit', () => refuse(uploadTooLarge(maxFileBytes)));
        stream.on('end', () => {
          if (failed) return;
          const safeName = (info.filename || 'upload').replace(/[^A-Za-z0-9._-]/g, '_').slice(-100);
          const bytes = Buffer.concat(chunks);
          const sha256 = digest.digest('hex');
          stores.push(
            blobs
              .put(
                `uploads/${requestId}/${slot}-${randomUUID().slice(0, 8)}-${safeName}`,
                bytes,
                info.mimeType || 'application/octet-stream',
                info.filename,
              )
              .then((ref) => {
                slots[slot] = {
                  field,
                  ref: { ...ref, sha256 },
                  head: Buffer.from(bytes.subarray(0, 32)),
                  bytes: bytes.length,
                };
              }),
          );
        });
      },
      tooManyFiles: () =>
        invalidRequest(`Too many files in one request: at most ${multipartLimits.files}.`, null, 'too_many_files'),
      tooManyFields: () =>
        invalidRequest(`Too many fields in one request: at most ${multipartLimits.fields}.`, null, 'too_many_fields'),
      discard() {
        failed = true;
        // Whatever was already stored will never be read by a job.
        void Promise.allSettled(stores).then(() =>
          Promise.allSettled(slots.flatMap((file) => (file ? [blobs.delete(file.ref.key)] : []))),
        );
      },
      end: async () => {
        await Promise.all(stores);
        return { fields, files: slots.filter((f) => f !== undefined) };
      },
    };
  });
}

/**
 * Runs a multipart request's checks; when they refuse it, the files already
 * stored for it are deleted at once (no job will ever read them).
 */
export async function refusingDeletesUploads<T>(
  form: MultipartForm,
  blobs: BlobStore,
  checks: () => T | Promise<T>,
): Promise<T> {
  try {
    return await checks();
  } catch (error) {
    await Promise.allSettled(form.files.map((file) => blobs.delete(file.ref.key)));
    throw error;
  }
}
