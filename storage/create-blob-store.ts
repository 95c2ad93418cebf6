import type { Config } from '../shared/config.js';
import type { BlobRef } from '../shared/blobs.js';
import type { BlobStore } from './blob-store.js';
import { LocalBlobStore } from './local-blob-store.js';
import { S3BlobStore } from './s3-blob-store.js';

/** A blob store that can also describe a stored blob (for downloads). */
export type ServingBlobStore = BlobStore & { meta(key: string): Promise<BlobRef> };

/** S3-compatible storage when `S3_BUCKET` is set (`config.s3`), else the local directory `BLOB_DIR`. */
export function createBlobStore(config: Pick<Config, 's3' | 'blobDir'>): ServingBlobStore {
  return config.s3 ? new S3BlobStore(config.s3) : new LocalBlobStore(config.blobDir);
}
