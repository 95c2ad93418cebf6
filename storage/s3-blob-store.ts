import type { Readable } from 'node:stream';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import type { BlobRef } from '../shared/blobs.js';
import { GatewayError } from '../shared/errors.js';
import type { BlobListing, BlobStore } from './blob-store.js';

export interface S3Settings {
  bucket: string;
  endpoint?: string;
  region: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  /** Path-style URLs (`endpoint/bucket/key`), which most S3-compatible servers need. */
  forcePathStyle: boolean;
  prefix: string;
  /** Keys per ListObjectsV2 page (S3's maximum and default: 1000). */
  listPageSize?: number;
  /** Bytes per part of a streamed upload (S3's least is 5 MiB but for the last); default 8 MiB. */
  partBytes?: number;
}

const defaultPartBytes = 8 * 1024 * 1024;

const notFound = (key: string, cause?: unknown) =>
  new GatewayError(404, `No such file: ${key}.`, { code: 'not_found', cause });

/** Blobs in an S3 bucket (AWS or any S3-compatible server). Content type and filename ride as object metadata. */
export class S3BlobStore implements BlobStore {
  private readonly client: S3Client;

  constructor(private readonly settings: S3Settings) {
    const config: S3ClientConfig = { region: settings.region, forcePathStyle: settings.forcePathStyle };
    if (settings.endpoint) config.endpoint = settings.endpoint;
    if (settings.accessKeyId && settings.secretAccessKey) {
      config.credentials = { accessKeyId: settings.accessKeyId, secretAccessKey: settings.secretAccessKey };
    }
    this.client = new S3Client(config);
  }

  private objectKey(key: string): string {
    return `${this.settings.prefix}${key}`;
  }

  async put(key: string, data: Buffer, contentType: string, filename?: string): Promise<BlobRef> {
    await this.client.send(
      new PutObjectCommand({
        Bucket: this.settings.bucket,
        Key: this.objectKey(key),
        Body: data,
        ContentType: contentType,
        ...(filename ? { Metadata: { filename: encodeURIComponent(filename) } } : {}),
      }),
    );
    return { key, contentType, size: data.length, ...(filename ? { filename } : {}) };
  }

  async putStream(
    key: string,
    body: AsyncIterable<Buffer | string>,
    contentType: string,
    filename?: string,
  ): Promise<BlobRef> {
    const target = { Bucket: this.settings.bucket, Key: this.objectKey(key) };
    const described = {
      ContentType: contentType,
      ...(filename ? { Metadata: { filename: encodeURIComponent(filename) } } : {}),
    };
    const partBytes = this.settings.partBytes ?? defaultPartBytes;
    let held: Buffer[] = [];
    let heldBytes = 0;
    let size = 0;
    let uploadId: string | undefined;
    const parts: Array<{ ETag: string | undefined; PartNumber: number }> = [];
    // One part in memory at a time: a body shorter than a part is one plain object; a longer one a multipart upload.
    const sendPart = async () => {
      uploadId ??= (await this.client.send(new CreateMultipartUploadCommand({ ...target, ...described }))).UploadId;
      const PartNumber = parts.length + 1;
      const data = Buffer.concat(held, heldBytes);
      held = [];
      heldBytes = 0;
      const { ETag } = await this.client.send(
        new UploadPartCommand({ ...target, UploadId: uploadId, PartNumber, Body: data }),
      );
      parts.push({ ETag, PartNumber });
    };
    try {
      for await (const chunk of body) {
        const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
        held.push(bytes);
        heldBytes += bytes.length;
        size += bytes.length;
        if (heldBytes >= partBytes) await sendPart();
      }
      if (uploadId === undefined) {
        await this.client.send(new PutObjectCommand({ ...target, ...described, Body: Buffer.concat(held, heldBytes) }));
      } else {
        if (heldBytes > 0) await sendPart();
        await this.client.send(
          new CompleteMultipartUploadCommand({ ...target, UploadId: uploadId, MultipartUpload: { Parts: parts } }),
        );
      }
    } catch (error) {
      if (uploadId !== undefined)
        await this.client
          .send(new AbortMultipartUploadCommand({ ...target, UploadId: uploadId }))
          .catch(() => undefined);
      throw error;
    }
    return { key, contentType, size, ...(filename ? { filename } : {}) };
  }

  async get(key: string): Promise<Buffer> {
    const stream = await this.stream(key);
    const chunks: Buffer[] = [];
    for await (const chunk of stream) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  async stream(key: string): Promise<Readable> {
    try {
      const object = await this.client.send(
        new GetObjectCommand({ Bucket: this.settings.bucket, Key: this.objectKey(key) }),
      );
      return object.Body as Readable;
    } catch (error) {
      throw isMissing(error) ? notFound(key, error) : error;
    }
  }

  async meta(key: string): Promise<BlobRef> {
    try {
      const head = await this.client.send(
        new HeadObjectCommand({ Bucket: this.settings.bucket, Key: this.objectKey(key) }),
      );
      const filename = head.Metadata?.filename ? decodeURIComponent(head.Metadata.filename) : undefined;
      return {
        key,
        contentType: head.ContentType ?? 'application/octet-stream',
        size: head.ContentLength ?? 0,
        ...(filename ? { filename } : {}),
      };
    } catch (error) {
      throw isMissing(error) ? notFound(key, error) : error;
    }
  }

  async delete(key: string): Promise<void> {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.settings.bucket, Key: this.objectKey(key) }));
  }

  async *list(prefix: string): AsyncIterable<BlobListing> {
    const strip = this.settings.prefix.length;
    let token: string | undefined;
    do {
      const page = await this.client.send(
        new ListObjectsV2Command({
          Bucket: this.settings.bucket,
          Prefix: this.objectKey(prefix),
          ...(this.settings.listPageSize ? { MaxKeys: this.settings.listPageSize } : {}),
          ...(token ? { ContinuationToken: token } : {}),
        }),
      );
      for (const object of page.Contents ?? []) {
        if (!object.Key) continue;
        // An object without a date counts as new: never swept by mistake.
        yield { key: object.Key.slice(strip), modified: object.LastModified ?? new Date() };
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
  }

  close(): void {
    this.client.destroy();
  }
}

function isMissing(error: unknown): boolean {
  const name = (error as { name?: string }).name;
  const status = (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
  return name === 'NoSuchKey' || name === 'NotFound' || status === 404;
}
