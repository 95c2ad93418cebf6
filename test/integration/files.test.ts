import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { request } from 'node:http';
import type { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import { blobUrlSecretKey, fileUploadsKey } from '../../shared/redis-keys.js';
import { AccountFileStore, fileBlobKey } from '../../storage/account-files.js';
import { signBlobUrl } from '../../storage/blob-urls.js';
import { LocalBlobStore } from '../../storage/local-blob-store.js';
import { filesUnder } from '../support/blob-dir.js';
import { freshRedis, paidAccountKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';

/**
 * OpenAI's Files API (`/v1/files`) through a real gateway process with the official SDK: upload, list, retrieve,
 * content, delete, paging, another account's 404, the size caps and refusals (nothing kept), a large chunked upload
 * within a bounded RSS, expiry, and the signed blob links that moved from `/v1/files/` to `/v1/blobs/`.
 */

const batchCap = 1024 * 1024;
const userDataCap = 256 * 1024 * 1024;
const jsonl = (n: number) =>
  Array.from({ length: n }, (_, i) =>
    JSON.stringify({
      custom_id: `r${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: { model: 'mock-chat', messages: [{ role: 'user', content: `q${i}` }] },
    }),
  ).join('\n') + '\n';

/** The OpenAI error a promise rejects with. */
async function refusal(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof OpenAI.APIError, String(error));
    return error;
  }
  assert.fail('expected a refusal');
}

/** A process's resident set, from /proc (kB → bytes); `peak` is its high-water mark. */
function rssOf(pid: number): { now: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)![1]) * 1024;
  return { now: field('VmRSS'), peak: field('VmHWM') };
}

/** A multipart body (purpose first, then `size` bytes of file) made as it is sent, with no length: chunked. */
function streamedUpload(
  purpose: string,
  size: number,
  seed: number,
): { body: ReadableStream<Uint8Array>; boundary: string } {
  const boundary = `----sy${randomBytes(8).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n${purpose}\r\n` +
      (`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="large.bin"\r\nContent-Type: ` +
        `application/octet-stream\r\n\r\n`),
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  let sent = -1;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent < 0) {
        controller.enqueue(head);
        sent = 0;
      } else if (sent < size) {
        const chunk = Buffer.alloc(Math.min(256 * 1024, size - sent), (sent / 4096 + seed) % 251);
        sent += chunk.length;
        controller.enqueue(chunk);
      } else {
        controller.enqueue(tail);
        controller.close();
      }
    },
  });
  return { body, boundary };
}

function expectedDigest(size: number, seed: number): string {
  const hash = createHash('sha256');
  for (let sent = 0; sent < size;) {
    const chunk = Buffer.alloc(Math.min(256 * 1024, size - sent), (sent / 4096 + seed) % 251);
    sent += chunk.length;
    hash.update(chunk);
  }
  return hash.digest('hex');
}

describe('the Files API (/v1/files) with the official SDK', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let blobDir: string;
  let client: OpenAI;
  let other: OpenAI;
  let apiKey: string;
  let account: string;

  /** The stored files' names (their ids). */
  const filesOnDisk = () => filesUnder(join(blobDir, 'files'));
  /**
   * Waits until no file is on disk but those of `before` (a test's refusals keep nothing of theirs; a file of an
   * earlier test deleted meanwhile is not this test's) and no upload is marked under way (a refused upload's file may
   * be written, then deleted, after its answer: its mark goes once it is deleted); names what is left when it waits
   * in vain.
   */
  const untilNothingBut = async (before: ReadonlySet<string>, what: string) => {
    const added = () => filesOnDisk().filter((name) => !before.has(name));
    try {
      await waitFor(async () => added().length === 0 && (await redis.zcard(fileUploadsKey)) === 0, 10_000, what);
    } catch (error) {
      throw new Error(
        `${(error as Error).message}: left ${added().join(', ') || 'no file'}; uploads under way: ${(await redis.zrange(fileUploadsKey, '0', '-1')).join(', ') || 'none'}`,
      );
    }
  };

  before(async () => {
    const fresh = await freshRedis(9);
    redis = fresh.redis;
    blobDir = await mkdtemp(join(tmpdir(), 'sy-files-api-'));
    const mine = await paidAccountKey(redis, 'unlimited');
    const theirs = await paidAccountKey(redis, 'unlimited');
    apiKey = mine.key;
    account = mine.account;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        BLOB_DIR: blobDir,
        FILES_BATCH_MAX_BYTES: String(batchCap),
        FILES_MAX_BYTES: String(userDataCap),
        BLOB_SWEEP_INTERVAL_S: '1',
        BODY_IDLE_TIMEOUT_MS: '3000',
      },
    });
    client = gateway.client(apiKey, { timeout: 60_000 });
    other = gateway.client(theirs.key);
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
    if (blobDir) await rm(blobDir, { recursive: true, force: true });
  });

  it('uploads, retrieves, downloads, lists and deletes a batch file', async () => {
    const content = jsonl(5);
    const made = await client.files.create({
      file: await toFile(Buffer.from(content), 'input.jsonl'),
      purpose: 'batch',
    });
    assert.match(made.id, /^file-[A-Za-z0-9]{22}$/);
    assert.equal(made.object, 'file');
    assert.equal(made.bytes, Buffer.byteLength(content));
    assert.equal(made.filename, 'input.jsonl');
    assert.equal(made.purpose, 'batch');
    assert.equal(made.status, 'processed');
    // As OpenAI's: a batch file expires 30 days after its upload unless told otherwise.
    assert.equal(made.expires_at, made.created_at + 30 * 86_400);

    assertMatchesSchema('OpenAIFile', made, 'POST /v1/files');
    assert.deepEqual(await client.files.retrieve(made.id), made);
    const download = await client.files.content(made.id);
    assert.equal(download.headers.get('content-type'), 'application/octet-stream');
    assert.equal(await download.text(), content);
    const listed = await client.files.list();
    assert.ok(listed.data.some((file) => file.id === made.id));

    const rawList = await fetch(`${gateway.url}/v1/files?purpose=batch`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    assertMatchesSchema('ListFilesResponse', await rawList.json(), 'GET /v1/files');
    const deleted = await client.files.delete(made.id);
    assertMatchesSchema('DeleteFileResponse', deleted, 'DELETE /v1/files/{id}');
    assert.deepEqual(deleted, { id: made.id, object: 'file', deleted: true });
    // One at a time: a refusal that came while the one before was awaited would be an unhandled rejection.
    for (const call of [
      () => client.files.retrieve(made.id),
      () => client.files.content(made.id),
      () => client.files.delete(made.id),
    ]) {
      const error = await refusal(call());
      assert.equal(error.status, 404);
      assert.equal(error.message, `404 No such File object: ${made.id}`);
    }
    assert.ok(!(await client.files.list()).data.some((file) => file.id === made.id));
    assert.ok(!filesOnDisk().includes(made.id), 'its bytes are deleted');
  });

  it("answers another account's file as unknown (404), and lists only the account's own", async () => {
    const mine = await client.files.create({
      file: await toFile(Buffer.from('private'), 'notes.txt'),
      purpose: 'user_data',
    });
    assert.equal(mine.expires_at, null, 'a user_data file is kept until deleted');
    for (const call of [
      () => other.files.retrieve(mine.id),
      () => other.files.content(mine.id),
      () => other.files.delete(mine.id),
    ]) {
      const error = await refusal(call());
      assert.equal(error.status, 404);
      assert.equal(error.message, `404 No such File object: ${mine.id}`);
    }
    assert.ok(!(await other.files.list()).data.some((file) => file.id === mine.id));
    assert.equal(await (await client.files.content(mine.id)).text(), 'private', 'still whole for its owner');
  });

  it('pages with after, limit and order, and filters by purpose', async () => {
    const start = await client.files.list({ order: 'asc' });
    const before = start.data.map((file) => file.id);
    const made: string[] = [];
    for (let i = 0; i < 5; i++) {
      const file = await client.files.create({
        file: await toFile(Buffer.from(jsonl(1)), `page${i}.jsonl`),
        purpose: i === 3 ? 'user_data' : 'batch',
      });
      made.push(file.id);
    }
    const all = [...before, ...made];
    const first = await client.files.list({ limit: 2, order: 'asc' });
    assert.deepEqual(
      first.data.map((file) => file.id),
      all.slice(0, 2),
    );
    assert.equal(first.has_more, true);
    // The SDK's own paging follows `after` to the end.
    const walked: string[] = [];
    for await (const file of client.files.list({ limit: 2, order: 'asc' })) walked.push(file.id);
    assert.deepEqual(walked, all);
    const newest = await client.files.list({ limit: 3 });
    assert.deepEqual(
      newest.data.map((file) => file.id),
      made.slice(2).reverse(),
      'newest first by default',
    );
    const next = await client.files.list({ limit: 3, after: made[2] });
    assert.deepEqual(
      next.data.map((file) => file.id),
      all.slice(0, all.indexOf(made[2]!)).reverse().slice(0, 3),
    );
    const userData = await client.files.list({ purpose: 'user_data', order: 'asc' });
    assert.ok(userData.data.every((file) => file.purpose === 'user_data'));
    assert.ok(userData.data.some((file) => file.id === made[3]));
    assert.deepEqual(
      (await client.files.list({ purpose: 'fine-tune' })).data,
      [],
      'a purpose no file here has lists nothing',
    );

    const raw = await fetch(`${gateway.url}/v1/files?limit=1`, { headers: { authorization: `Bearer ${apiKey}` } });
    const page = (await raw.json()) as Record<string, unknown>;
    assert.deepEqual(Object.keys(page).sort(), ['data', 'first_id', 'has_more', 'last_id', 'object']);
    assert.equal(page.object, 'list');
    assert.equal(page.first_id, made[4]);
    assert.equal(page.last_id, made[4]);

    for (const [query, param] of [
      ['limit=0', 'limit'],
      ['limit=10001', 'limit'],
      ['limit=x', 'limit'],
      ['order=up', 'order'],
      [`after=${'file-'}nothere`, 'after'],
    ] as const) {
      const res = await fetch(`${gateway.url}/v1/files?${query}`, { headers: { authorization: `Bearer ${apiKey}` } });
      assert.equal(res.status, 400, query);
      assert.equal(((await res.json()) as { error: { param: string } }).error.param, param, query);
    }
  });

  it('honours expires_after, and refuses one out of range', async () => {
    const made = await client.files.create({
      file: await toFile(Buffer.from('x'), 'x.txt'),
      purpose: 'user_data',
      expires_after: { anchor: 'created_at', seconds: 3600 },
    });
    assert.equal(made.expires_at, made.created_at + 3600);
    const error = await refusal(
      client.files.create({
        file: await toFile(Buffer.from('x'), 'x.jsonl'),
        purpose: 'batch',
        expires_after: { anchor: 'created_at', seconds: 60 },
      }),
    );
    assert.equal(error.status, 400);
    assert.equal((error.error as { param: string }).param, 'expires_after.seconds');
  });

  it(
    'refuses a missing or unserved purpose, a missing file, stray fields and a body that is not multipart, keeping ' +
      'nothing',
    async () => {
      const stored = new Set(filesOnDisk());
      const post = (form: FormData) =>
        fetch(`${gateway.url}/v1/files`, {
          method: 'POST',
          headers: { authorization: `Bearer ${apiKey}` },
          body: form,
        });
      const refused = async (res: Response, param: string | null, pattern: RegExp) => {
        assert.equal(res.status, 400);
        const { error } = (await res.json()) as { error: { param: string | null; message: string; type: string } };
        assert.equal(error.type, 'invalid_request_error');
        assert.equal(error.param, param);
        assert.match(error.message, pattern);
      };

      const missing = await refusal(
        client.files.create({
          file: await toFile(Buffer.from(jsonl(2)), 'a.jsonl'),
          purpose: undefined as unknown as 'batch',
        }),
      );
      assert.equal(missing.status, 400);
      assert.equal((missing.error as { param: string }).param, 'purpose');

      // The SDK sends the file first: it is stored, then deleted when the purpose is refused.
      const unserved = await refusal(
        client.files.create({ file: await toFile(Buffer.from(jsonl(2)), 'a.jsonl'), purpose: 'assistants' }),
      );
      assert.equal(unserved.status, 400);
      assert.equal((unserved.error as { param: string }).param, 'purpose');
      assert.match(unserved.message, /'batch' or 'user_data'/);

      const purposeFirst = new FormData();
      purposeFirst.set('purpose', 'fine-tune');
      purposeFirst.set('file', new Blob([jsonl(2)]), 'a.jsonl');
      await refused(await post(purposeFirst), 'purpose', /'fine-tune'.*'batch' or 'user_data'/);

      const noFile = new FormData();
      noFile.set('purpose', 'batch');
      await refused(await post(noFile), 'file', /Missing required parameter: 'file'/);

      const stray = new FormData();
      stray.set('purpose', 'batch');
      stray.set('model', 'gpt-4o');
      stray.set('file', new Blob(['{}']), 'a.jsonl');
      await refused(await post(stray), 'model', /Unrecognized request argument supplied: model/);

      const twoFiles = new FormData();
      twoFiles.set('purpose', 'batch');
      twoFiles.append('file', new Blob(['{}']), 'a.jsonl');
      twoFiles.append('file', new Blob(['{}']), 'b.jsonl');
      await refused(await post(twoFiles), 'file', /One file per upload/);

      const json = await fetch(`${gateway.url}/v1/files`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: '{"purpose":"batch"}',
      });
      await refused(json, null, /multipart\/form-data/);

      // A body cut inside the file part.
      const boundary = 'cutcutcut';
      const cut = await fetch(`${gateway.url}/v1/files`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
        body:
          `--${boundary}\r\nContent-Disposition: form-data; ` +
          `name="purpose"\r\n\r\nbatch\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; ` +
          `filename="a.jsonl"\r\n\r\n{"custom_id":`,
      });
      assert.equal(cut.status, 400);

      // A Batch API input named other than .jsonl, as OpenAI refuses it at upload: file first (the SDK's order), and
      // purpose first (refused before its bytes are kept).
      const csv = await refusal(
        client.files.create({ file: await toFile(Buffer.from(jsonl(2)), 'requests.csv'), purpose: 'batch' }),
      );
      assert.equal(csv.status, 400);
      assert.equal((csv.error as { message: string }).message, 'Invalid file format for Batch API. Must be .jsonl');
      assert.equal((csv.error as { param: string }).param, 'file');
      const csvFirst = new FormData();
      csvFirst.set('purpose', 'batch');
      csvFirst.set('file', new Blob([jsonl(2)]), 'requests.jsonl.csv');
      await refused(await post(csvFirst), 'file', /^Invalid file format for Batch API\. Must be \.jsonl$/);

      await untilNothingBut(stored, 'the refused uploads deleted');
    },
  );

  it('takes a batch file named .jsonl in any letter case, and any name for user_data', async () => {
    const upper = await client.files.create({
      file: await toFile(Buffer.from(jsonl(1)), 'REQUESTS.JSONL'),
      purpose: 'batch',
    });
    assert.deepEqual([upper.filename, upper.purpose], ['REQUESTS.JSONL', 'batch']);
    const notes = await client.files.create({
      file: await toFile(Buffer.from('a,b\n'), 'requests.csv'),
      purpose: 'user_data',
    });
    assert.deepEqual([notes.filename, notes.purpose], ['requests.csv', 'user_data']);
  });

  it('keeps nothing of an upload whose client goes away or goes silent mid-file (408)', async () => {
    const stored = new Set(filesOnDisk());
    const boundary = 'gonegonegone';
    const head =
      `--${boundary}\r\nContent-Disposition: form-data; ` +
      `name="purpose"\r\n\r\nuser_data\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; ` +
      `filename="half.bin"\r\n\r\n`;
    /** Sends the head and 2 MiB of file, then `then` (hang up, or fall silent); resolves with the answer, if any. */
    const partial = (then: 'hang up' | 'fall silent') =>
      new Promise<{ status: number; body: string } | 'closed'>((resolve) => {
        const req = request(`${gateway.url}/v1/files`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${apiKey}`,
            'content-type': `multipart/form-data; boundary=${boundary}`,
            'transfer-encoding': 'chunked',
          },
        });
        req.on('response', (res) => {
          let body = '';
          res.on('data', (chunk: Buffer) => (body += String(chunk)));
          res.on('end', () => resolve({ status: res.statusCode!, body }));
        });
        req.on('error', () => resolve('closed'));
        req.write(head);
        req.write(Buffer.alloc(2 * 1024 * 1024, 7), () => {
          if (then === 'hang up') req.destroy();
        });
      });
    assert.equal(await partial('hang up'), 'closed');
    const silent = await partial('fall silent');
    assert.notEqual(silent, 'closed');
    const answered = silent as { status: number; body: string };
    assert.equal(answered.status, 408);
    assert.equal((JSON.parse(answered.body) as { error: { code: string } }).error.code, 'request_timeout');
    await untilNothingBut(stored, 'the partial uploads deleted');
    await waitFor(async () => (await redis.zcard(fileUploadsKey)) === 0, 5000, 'no upload left marked under way');
  });

  it('refuses a file past its purpose limit with 413 and keeps nothing, whichever part comes first', async () => {
    const stored = new Set(filesOnDisk());
    const listed = (await client.files.list()).data.length;
    const big = Buffer.alloc(batchCap + 1, 0x61);
    // The SDK's order (file first): read to its end against the larger limit, then refused for a batch file.
    const sdk = await refusal(client.files.create({ file: await toFile(big, 'big.jsonl'), purpose: 'batch' }));
    assert.equal(sdk.status, 413);
    assert.equal((sdk.error as { code: string }).code, 'file_too_large');
    // Purpose first: refused as soon as the bytes pass the limit.
    const form = new FormData();
    form.set('purpose', 'batch');
    form.set('file', new Blob([big]), 'big.jsonl');
    const res = await fetch(`${gateway.url}/v1/files`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}` },
      body: form,
    });
    assert.equal(res.status, 413);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'file_too_large');
    // Exactly at the limit is taken.
    const exact = await client.files.create({
      file: await toFile(big.subarray(0, batchCap), 'exact.jsonl'),
      purpose: 'batch',
    });
    assert.equal(exact.bytes, batchCap);
    await client.files.delete(exact.id);
    await untilNothingBut(stored, 'the refused uploads deleted');
    assert.equal((await client.files.list()).data.length, listed);
  });

  it("streams chunked uploads of hundreds of MB to the blob store without the api's RSS growing by their size", async () => {
    const pid = gateway.proc.pid!;
    const upload = async (size: number, seed: number) => {
      const { body, boundary } = streamedUpload('user_data', size, seed);
      const res = await fetch(`${gateway.url}/v1/files`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
        body,
        duplex: 'half',
      } as RequestInit);
      assert.equal(res.status, 200, await res.clone().text());
      return (await res.json()) as { id: string; bytes: number };
    };
    // The first large body warms the allocator (its RSS rises once, some tens of MB, however large the body):
    // measured after it, what is left is what a body's size costs.
    const warm = await upload(64 * 1024 * 1024, 4);
    await client.files.delete(warm.id);

    const size = 192 * 1024 * 1024;
    // The peak started over (Linux: writing 5 to clear_refs resets VmHWM), and RSS sampled besides.
    let resetPeak = true;
    try {
      writeFileSync(`/proc/${pid}/clear_refs`, '5');
    } catch {
      resetPeak = false;
    }
    const baseline = rssOf(pid).now;
    let polled = baseline;
    const sampler = setInterval(() => (polled = Math.max(polled, rssOf(pid).now)), 20);
    let made: { id: string; bytes: number };
    try {
      made = await upload(size, 5);
    } finally {
      clearInterval(sampler);
    }
    assert.equal(made.bytes, size);
    const peak = Math.max(polled, resetPeak ? rssOf(pid).peak : 0);
    const grew = peak - baseline;
    assert.ok(
      grew < size / 3,
      `the api's RSS grew ${Math.round(grew / 1048576)} MiB for a ${size / 1048576} MiB upload`,
    );

    // Back out whole, streamed.
    const download = await client.files.content(made.id);
    assert.equal(download.headers.get('content-length'), String(size));
    const hash = createHash('sha256');
    for await (const chunk of download.body!) hash.update(chunk);
    assert.equal(hash.digest('hex'), expectedDigest(size, 5));
    await client.files.delete(made.id);
  });

  it('deletes a file at its expires_at: 404 at once, its bytes swept by the blob janitor', async () => {
    // Written as a batch writes its output files (through the same store), expiring in a moment.
    const files = new AccountFileStore(redis, new LocalBlobStore(blobDir));
    const output = await files.put(account, {
      purpose: 'batch_output',
      filename: 'batch_output.jsonl',
      body: Readable.from(['{"id":"batch_req_1"}\n']),
      expiresAt: Math.floor(Date.now() / 1000) + 2,
    });
    const seen = await client.files.retrieve(output.id);
    assert.equal(seen.purpose, 'batch_output');
    assert.equal(seen.expires_at, output.expires_at);
    assert.ok((await client.files.list({ purpose: 'batch_output' })).data.some((file) => file.id === output.id));
    await waitFor(
      async () =>
        (await fetch(`${gateway.url}/v1/files/${output.id}`, { headers: { authorization: `Bearer ${apiKey}` } }))
          .status === 404,
      10_000,
      'the file to expire',
    );
    const path = join(blobDir, fileBlobKey(account, output.id));
    await waitFor(() => !existsSync(path), 10_000, 'the janitor to delete its bytes');
    assert.ok(!(await client.files.list()).data.some((file) => file.id === output.id));
  });

  it('serves signed blob links under /v1/blobs/, and old ones under /v1/files/ until they expire', async () => {
    const image = await client.images.generate({
      model: 'mock-image',
      prompt: 'a fox',
      size: '256x256',
      response_format: 'url',
    });
    const link = image.data![0]!.url!;
    assert.match(link, /\/v1\/blobs\/images\/.+\?expires=\d+&signature=/);
    const fresh = await fetch(link);
    assert.equal(fresh.status, 200);
    assert.equal(fresh.headers.get('content-type'), 'image/png');
    const png = Buffer.from(await fresh.arrayBuffer());

    // A link signed before the move: the same key and signature under /v1/files/.
    const old = link.replace('/v1/blobs/', '/v1/files/');
    const served = await fetch(old);
    assert.equal(served.status, 200);
    assert.deepEqual(Buffer.from(await served.arrayBuffer()), png);
    assert.equal((await fetch(old.replace(/signature=[^&]+/, 'signature=forged'))).status, 403);
    const key = new URL(link).pathname.slice('/v1/blobs/'.length);
    const secret = (await redis.get(blobUrlSecretKey))!;
    const expired = signBlobUrl(gateway.url, secret, key, -10).replace('/v1/blobs/', '/v1/files/');
    assert.equal((await fetch(expired)).status, 410);
    // Without a signature, /v1/files/… is the Files API: it wants a key, and knows no such file.
    const unsigned = `${gateway.url}/v1/files/${key}`;
    assert.equal((await fetch(unsigned)).status, 401);
    assert.equal((await fetch(unsigned, { headers: { authorization: `Bearer ${apiKey}` } })).status, 404);
  });
});
