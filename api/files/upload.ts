import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import { invalidRequest, type GatewayError } from '../../shared/errors.js';
import type { FileObject, FilePurpose } from '../../shared/files.js';
import { fileTooLarge, type AccountFileStore, type StagedFile } from '../../storage/account-files.js';
import { readMultipartBody } from '../http/multipart.js';

/**
 * `POST /v1/files`: OpenAI's CreateFileRequest (multipart `file`, `purpose`, `expires_after[anchor]` and
 * `expires_after[seconds]`), the file part streamed into the account's files as it arrives, never whole in memory.
 * The official SDKs send the file before the purpose, so the bytes are stored first (capped at the largest purpose's
 * limit, or the purpose's own when it came first) and the file is recorded once the body has ended and its fields
 * are checked; a refusal at any point deletes what was stored.
 */

/** The purposes an upload may have here (`batch_output` is written by batches only). */
export const uploadPurposes = ['batch', 'user_data'] as const satisfies readonly FilePurpose[];
type UploadPurpose = (typeof uploadPurposes)[number];

export interface UploadLimits {
  /** A `user_data` file's largest size. */
  maxBytes: number;
  /** A `batch` file's largest size. */
  batchMaxBytes: number;
}

/** OpenAI's default for batch input files: they expire 30 days after upload. */
export const batchFileLifetimeSeconds = 30 * 86_400;
const expiresAfterRange = { min: 3600, max: 2_592_000 } as const;
const fieldNames = new Set(['purpose', 'expires_after[anchor]', 'expires_after[seconds]']);

const isUploadPurpose = (value: string): value is UploadPurpose =>
  (uploadPurposes as readonly string[]).includes(value);
const capOf = (purpose: UploadPurpose, limits: UploadLimits) =>
  purpose === 'batch' ? limits.batchMaxBytes : limits.maxBytes;

function refusePurpose(value: string): GatewayError {
  return invalidRequest(
    `Invalid value for 'purpose': '${value.slice(0, 40)}'. Files here are for ${uploadPurposes.map((p) => `'${p}'`).join(' or ')} (the Batch API, or any use).`,
    'purpose',
    'invalid_value',
  );
}

/** `expires_after` as the form sends it: the epoch second the file expires, or undefined for the purpose's default. */
function expiryOf(fields: Map<string, string>, created: number, purpose: UploadPurpose): number | undefined {
  const anchor = fields.get('expires_after[anchor]');
  const seconds = fields.get('expires_after[seconds]');
  if (anchor === undefined && seconds === undefined)
    return purpose === 'batch' ? created + batchFileLifetimeSeconds : undefined;
  if (anchor !== 'created_at')
    throw invalidRequest(
      `Invalid value for 'expires_after.anchor': the one anchor is 'created_at'.`,
      'expires_after.anchor',
      'invalid_value',
    );
  const value = Number(seconds);
  if (
    seconds === undefined ||
    !/^\d+$/.test(seconds) ||
    value < expiresAfterRange.min ||
    value > expiresAfterRange.max
  ) {
    throw invalidRequest(
      `Invalid value for 'expires_after.seconds': a whole number of seconds from ${expiresAfterRange.min} (1 ` +
        `hour) to ${expiresAfterRange.max} (30 days).`,
      'expires_after.seconds',
      'invalid_value',
    );
  }
  return created + value;
}

/**
 * A Batch API input is JSON Lines, named so: OpenAI refuses any other name at upload, before the batch would fail on
 * it.
 */
const batchFormatRefused = () =>
  invalidRequest('Invalid file format for Batch API. Must be .jsonl', 'file', 'invalid_file_format');
const isJsonlName = (filename: string) => filename.toLowerCase().endsWith('.jsonl');

/** A part's filename as the file object shows it: no control characters, at most 255 characters (never half of one). */
const cleanFilename = (name: string | undefined) =>
  Array.from((name ?? '').replace(/[\u0000-\u001f\u007f]/g, ''))
    .slice(0, 255)
    .join('') || 'upload';

/**
 * Reads an upload into the account's files (as `keyId`'s); resolves with the file object, or rejects with an
 * OpenAI-shaped 4xx.
 */
export function receiveUpload(
  req: IncomingMessage,
  files: AccountFileStore,
  accountId: string,
  limits: UploadLimits,
  keyId?: string,
): Promise<FileObject> {
  return readMultipartBody(req, { files: 1, fields: 10, fieldSize: 1024 }, (fail) => {
    const fields = new Map<string, string>();
    let part: Readable | undefined;
    let staging: Promise<StagedFile> | undefined;
    // The 413 is told before the part stops being read: a part cut short must not read as a malformed body.
    async function* limited(stream: Readable, maxBytes: number): AsyncIterable<Buffer> {
      let total = 0;
      for await (const chunk of stream as AsyncIterable<Buffer>) {
        total += chunk.length;
        if (total > maxBytes) {
          const error = fileTooLarge(maxBytes);
          fail(error);
          throw error;
        }
        yield chunk;
      }
    }

    /** The body has ended: the file is recorded if its fields allow, else deleted. */
    async function finish(): Promise<FileObject> {
      if (!staging) {
        throw invalidRequest(
          fields.has('purpose')
            ? "Missing required parameter: 'file'."
            : "Missing required parameters: 'file' and 'purpose'.",
          'file',
          'missing_required_parameter',
        );
      }
      const staged = await staging;
      try {
        const purpose = fields.get('purpose');
        if (purpose === undefined)
          throw invalidRequest("Missing required parameter: 'purpose'.", 'purpose', 'missing_required_parameter');
        if (!isUploadPurpose(purpose)) throw refusePurpose(purpose);
        if (purpose === 'batch' && !isJsonlName(staged.filename)) throw batchFormatRefused();
        if (staged.bytes > capOf(purpose, limits)) throw fileTooLarge(capOf(purpose, limits));
        const expiresAt = expiryOf(fields, Math.floor(Date.now() / 1000), purpose);
        return await files.commit(staged, purpose, expiresAt);
      } catch (error) {
        // Deleted here, so the `discard` this refusal reaches next finds nothing left to delete.
        staging = undefined;
        await files.discard(staged).catch(() => undefined);
        throw error;
      }
    }

    return {
      field(name, value, info) {
        if (info.valueTruncated)
          return fail(
            invalidRequest(`The field '${name.slice(0, 40)}' is too long.`, name.slice(0, 40), 'field_too_long'),
          );
        if (!fieldNames.has(name))
          return fail(
            invalidRequest(
              `Unrecognized request argument supplied: ${name.slice(0, 40)}`,
              name.slice(0, 40),
              'unknown_parameter',
            ),
          );
        if (fields.has(name))
          return fail(invalidRequest(`The field '${name}' is sent twice.`, name, 'duplicate_parameter'));
        // A purpose refused before the file arrives: none of its bytes are stored.
        if (name === 'purpose' && !isUploadPurpose(value)) return fail(refusePurpose(value));
        fields.set(name, value);
      },
      file(name, stream, info) {
        if (name !== 'file') {
          stream.resume();
          return fail(
            invalidRequest(
              `Unrecognized file field '${String(name).slice(0, 40)}': the file goes in the part named 'file'.`,
              'file',
              'unknown_parameter',
            ),
          );
        }
        part = stream;
        const purpose = fields.get('purpose') as UploadPurpose | undefined;
        // A batch file named otherwise, its purpose known first: refused before any of its bytes are stored.
        if (purpose === 'batch' && !isJsonlName(cleanFilename(info.filename))) {
          stream.resume();
          return fail(batchFormatRefused());
        }
        const maxBytes = purpose ? capOf(purpose, limits) : Math.max(limits.maxBytes, limits.batchMaxBytes);
        // The uploading key is kept with the file: who else sees it follows from it (api/files/key-scope.ts).
        staging = files.stage(accountId, {
          filename: cleanFilename(info.filename),
          body: limited(stream, maxBytes),
          maxBytes,
          ...(keyId ? { keyId } : {}),
        });
        staging.catch(fail);
      },
      tooManyFiles: () =>
        invalidRequest('One file per upload: send the others in requests of their own.', 'file', 'too_many_files'),
      tooManyFields: () => invalidRequest('Too many fields in this upload.', null, 'too_many_fields'),
      discard() {
        part?.destroy();
        // Whatever was stored is deleted once its write has settled.
        void staging?.then((staged) => files.discard(staged)).catch(() => undefined);
      },
      end: finish,
    };
  });
}
