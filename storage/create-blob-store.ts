import type { Config } from '../shared/config.js';
import type { BlobRef } from '../shared/blobs.js';
import type { BlobStore } from './blob-store.js';
import { LocalBlobStore } from './local-blob-store.js';
import { S3BlobStore } from './s3-blob-store.js';

/** A blob store that can also describe a stored blob (for downloads). */
export type ServingBlobStore = BlobStore & { meta(key: string): Promise<BlobRef> };

/** S3-compatible storage when `S3_BUCKET` is set, else the local directory `BLOB_DIR`. */
export function createBlobStore(config: Config, env: Record<string, string | undefined> = process.env): ServingBlobStore {
  if (!env.S3_BUCKET) return new LocalBlobStore(config.blobDir);
  return new S3BlobStore({
    bucket: env.S3_BUCKET,
    region: env.S3_REGION ?? 'us-east-1',
    forcePathStyle: (env.S3_FORCE_PATH_STYLE ?? (env.S3_ENDPOINT ? 'true' : 'false')) === 'true',
    prefix: env.S3_PREFIX ?? '',
    ...(env.S3_ENDPOINT ? { endpoint: env.S3_ENDPOINT } : {}),
    ...(env.S3_ACCESS_KEY_ID ? { accessKeyId: env.S3_ACCESS_KEY_ID } : {}),
    ...(env.S3_SECRET_ACCESS_KEY ? { secretAccessKey: env.S3_SECRET_ACCESS_KEY } : {}),
  });
}
