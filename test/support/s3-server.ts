import { mkdtempSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../bin/local-redis.js';

interface S3rverInstance {
  run(): Promise<{ port: number }>;
  close(): Promise<void>;
}
type S3rverConstructor = new (options: Record<string, unknown>) => S3rverInstance;

/**
 * An S3-compatible server on loopback (s3rver, files in a temp dir), so the
 * S3 blob store is tested against a real S3 wire protocol. Credentials are s3rver's fixed ones.
 */
export async function startS3(bucket = 'switchyard') {
  const S3rver = createRequire(import.meta.url)('s3rver') as S3rverConstructor;
  const port = await freePort();
  const server = new S3rver({
    port,
    address: '127.0.0.1',
    silent: true,
    directory: mkdtempSync(join(tmpdir(), 'sy-s3-')),
    configureBuckets: [{ name: bucket }],
  });
  await server.run();
  return {
    env: {
      S3_BUCKET: bucket,
      S3_ENDPOINT: `http://127.0.0.1:${port}`,
      S3_ACCESS_KEY_ID: 'S3RVER',
      S3_SECRET_ACCESS_KEY: 'S3RVER',
      S3_FORCE_PATH_STYLE: 'true',
    },
    close: () => server.close(),
  };
}
