import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { createValidatingBatch } from '../../api/batches/openai-record.js';
import { adminClient } from '../support/admin-client.js';
import { ConsoleClient } from '../support/console-client.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI, type RecordedRequest } from '../support/fake-openai.js';

/**
 * Who sees what of a team's files and batches through the API (`/v1/files`, `/v1/batches`, `/v1/messages/batches`),
 * with the official SDKs against a real gateway (Redis, PostgreSQL, a fake OpenAI): a member's key sees what its
 * maker's keys made and nothing of another member's, at once otherwise once that member becomes an owner; an owner's
 * key and a key nobody made (the admin API) see everything; a key limited to models not the batches of other models
 * nor their input, output and error files, though always its own batches, in every status; and a file's UTF-8 name
 * kept and sent back (docs/api.md, "Who sees what").
 */

const adminToken = 'files-scope-admin-token';
const adminEmail = 'root@files-scope.test';
const adminPassword = 'root-password-1';

const chat = (customId: string, model: string, text: string) =>
  JSON.stringify({
    custom_id: customId,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model, max_tokens: 32, messages: [{ role: 'user', content: text }] },
  });
const lastUserText = (request: RecordedRequest) =>
  JSON.stringify((request.body as { messages?: unknown[] }).messages ?? '');
const finalStatuses = new Set(['completed', 'failed', 'expired', 'cancelled']);

type Key = { id: string; key: string };

/** The status a promise rejects with (an SDK's APIError), or 200 when it resolves. */
async function statusOf(promise: Promise<unknown>): Promise<number> {
  try {
    await promise;
    return 200;
  } catch (error) {
    if (error instanceof OpenAI.APIError || error instanceof Anthropic.APIError) return error.status ?? -1;
    throw error;
  }
}

describe('who sees which files and batches of a team through the API', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let openai: FakeOpenAI;
  let blobDir: string;
  let admin: ReturnType<typeof adminClient>['admin'];
  let console: ConsoleClient;
  let team: string;
  const people: Record<'owner' | 'ana' | 'ben', string> = { owner: '', ana: '', ben: '' };

  /**
   * A key of the team: made by a person (as the console makes it), or by nobody (the admin API), maybe limited to
   * models.
   */
  async function teamKey(name: string, maker: string | null, models?: string[]): Promise<Key> {
    const made = await admin('POST', '/admin/keys', {
      name,
      account_id: team,
      ...(maker ? { created_by: maker } : {}),
      ...(models ? { models } : {}),
    });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    return { id: made.json.id as string, key: made.json.key as string };
  }
  const client = (key: Key) => gateway.client(key.key);
  const anthropicOf = (key: Key) =>
    new Anthropic({ apiKey: key.key, baseURL: gateway.url, maxRetries: 0, timeout: 20_000 });

  async function upload(
    key: Key,
    lines: readonly string[],
    name = 'input.jsonl',
    purpose: 'batch' | 'user_data' = 'batch',
  ) {
    return client(key).files.create({ file: await toFile(Buffer.from(lines.join('\n') + '\n'), name), purpose });
  }
  async function settled(key: Key, id: string) {
    let batch = await client(key).batches.retrieve(id);
    await waitFor(
      async () => finalStatuses.has((batch = await client(key).batches.retrieve(id)).status),
      30_000,
      `batch ${id} settled`,
    );
    return batch;
  }
  async function runBatch(key: Key, lines: readonly string[]) {
    const input = await upload(key, lines);
    const made = await client(key).batches.create({
      input_file_id: input.id,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    return { input, batch: await settled(key, made.id) };
  }
  async function fileIds(key: Key, purpose?: string): Promise<string[]> {
    const ids: string[] = [];
    for await (const file of client(key).files.list(purpose ? { purpose } : {})) ids.push(file.id);
    return ids;
  }
  async function batchIds(key: Key): Promise<string[]> {
    const ids: string[] = [];
    for await (const batch of client(key).batches.list({ limit: 2 })) ids.push(batch.id);
    return ids;
  }
  async function messageBatchIds(key: Key): Promise<string[]> {
    const ids: string[] = [];
    for await (const batch of anthropicOf(key).messages.batches.list({ limit: 2 })) ids.push(batch.id);
    return ids;
  }
  const raw = (key: Key, path: string, init: RequestInit = {}) =>
    fetch(`${gateway.url}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${key.key}`, ...(init.headers ?? {}) },
    });

  /** A file `key` sees: listed, retrieved, its content read. */
  async function seesFile(key: Key, id: string, what: string): Promise<void> {
    assert.ok((await fileIds(key)).includes(id), `${what}: listed`);
    assert.equal((await client(key).files.retrieve(id)).id, id, `${what}: retrieved`);
    assert.equal((await raw(key, `/v1/files/${id}/content`)).status, 200, `${what}: read`);
  }
  /** A file `key` does not see: a 404 to every call, deletion included (and it is still there), absent from lists. */
  async function missesFile(key: Key, id: string, what: string, stillSeenBy: Key): Promise<void> {
    assert.ok(!(await fileIds(key)).includes(id), `${what}: not listed`);
    assert.equal(await statusOf(client(key).files.retrieve(id)), 404, `${what}: retrieve`);
    assert.equal(await statusOf(client(key).files.content(id)), 404, `${what}: content`);
    assert.equal(await statusOf(client(key).files.delete(id)), 404, `${what}: delete`);
    // The same answer as an id that never was.
    const unknown = await raw(key, `/v1/files/${id}`);
    const never = await raw(key, '/v1/files/file-neverwasHere000000000000');
    assert.deepEqual(
      [unknown.status, ((await unknown.json()) as { error: { code: unknown; type: unknown } }).error.type],
      [never.status, ((await never.json()) as { error: { type: unknown } }).error.type],
    );
    assert.equal(
      (await client(stillSeenBy).files.retrieve(id)).id,
      id,
      `${what}: still there after the refused delete`,
    );
  }
  async function seesBatch(key: Key, id: string, what: string): Promise<void> {
    assert.ok((await batchIds(key)).includes(id), `${what}: listed`);
    assert.equal((await client(key).batches.retrieve(id)).id, id, `${what}: retrieved`);
  }
  async function missesBatch(key: Key, id: string, what: string): Promise<void> {
    assert.ok(!(await batchIds(key)).includes(id), `${what}: not listed`);
    assert.equal(await statusOf(client(key).batches.retrieve(id)), 404, `${what}: retrieve`);
    assert.equal(await statusOf(client(key).batches.cancel(id)), 404, `${what}: cancel`);
  }

  before(async () => {
    blobDir = await mkdtemp(join(tmpdir(), 'sy-files-scope-'));
    openai = await startFakeOpenAI();
    openai.setDefault((request) =>
      lastUserText(request).includes('please fail')
        ? {
            status: 400,
            json: { error: { message: 'Refused upstream.', type: 'invalid_request_error', param: null, code: null } },
          }
        : undefined,
    );
    const fresh = await freshRedis(10);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: 'sk-openai-test',
        OPENAI_BASE_URL: openai.url,
        BATCH_SWEEP_INTERVAL_S: '1',
        BLOB_DIR: blobDir,
        ADMIN_TOKEN: adminToken,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
      },
    });
    ({ admin } = adminClient(() => gateway.url, adminToken));
    for (const name of ['owner', 'ana', 'ben'] as const) {
      const made = await admin('POST', '/admin/accounts', {
        email: `${name}@files-scope.test`,
        name,
        password: 'person-password',
        role: 'member',
      });
      assert.equal(made.status, 201, JSON.stringify(made.json));
      people[name] = made.json.id as string;
    }
    const made = await admin('POST', '/admin/teams', { name: 'Scoped', owner_email: 'owner@files-scope.test' });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    team = made.json.id as string;
    for (const name of ['ana', 'ben'])
      assert.equal(
        (await admin('POST', `/admin/teams/${team}/members`, { email: `${name}@files-scope.test`, role: 'member' }))
          .status,
        201,
      );
    assert.equal((await admin('POST', `/admin/accounts/${team}/credits`, { amount_usd: 50 })).status, 200);
    console = new ConsoleClient(gateway.url);
    assert.equal((await console.signIn(adminEmail, adminPassword)).status, 200);
  });

  after(async () => {
    await gateway?.stop();
    await openai?.close();
    redis?.disconnect();
    if (blobDir) await rm(blobDir, { recursive: true, force: true });
  });

  it(
    "a member's key sees what its maker's keys made and nothing of another member's, until that member is made " +
      'owner',
    async () => {
      const [ana1, ana2, ben1, owner1, nobody] = await Promise.all([
        teamKey('ana 1', people.ana),
        teamKey('ana 2', people.ana),
        teamKey('ben 1', people.ben),
        teamKey('owner 1', people.owner),
        teamKey('admin api', null),
      ]);
      // Ben's: a file, a batch run to its end (its input and output files), a Message Batch.
      const benFile = await upload(ben1, ['ben notes'], 'ben.txt', 'user_data');
      const { input: benInput, batch: benBatch } = await runBatch(ben1, [chat('b-1', 'gpt-4o-mini', 'Hello from Ben')]);
      assert.equal(benBatch.status, 'completed');
      const benOutput = benBatch.output_file_id!;
      const benMessages = await anthropicOf(ben1).messages.batches.create({
        requests: [
          {
            custom_id: 'm-1',
            params: { model: 'gpt-4o-mini', max_tokens: 32, messages: [{ role: 'user', content: 'Hi' }] },
          },
        ],
      });
      await waitFor(
        async () => (await anthropicOf(ben1).messages.batches.retrieve(benMessages.id)).processing_status === 'ended',
        30_000,
        'message batch ended',
      );
      // Ana's, through one key: her other key sees it.
      const anaFile = await upload(ana1, ['ana notes'], 'ana.txt', 'user_data');
      await seesFile(ana2, anaFile.id, "Ana's file, to her other key");

      // Ana's key sees nothing of Ben's.
      for (const [id, what] of [
        [benFile.id, "Ben's file"],
        [benInput.id, "Ben's batch input"],
        [benOutput, "Ben's batch output"],
      ] as const)
        await missesFile(ana1, id, what, ben1);
      await missesBatch(ana1, benBatch.id, "Ben's batch");
      const ana = anthropicOf(ana1);
      assert.ok(!(await messageBatchIds(ana1)).includes(benMessages.id), "Ben's Message Batch: not listed");
      assert.equal(await statusOf(ana.messages.batches.retrieve(benMessages.id)), 404);
      assert.equal(
        (
          await fetch(`${gateway.url}/v1/messages/batches/${benMessages.id}/results`, {
            headers: { 'x-api-key': ana1.key, 'anthropic-version': '2023-06-01' },
          })
        ).status,
        404,
      );
      assert.equal(await statusOf(ana.messages.batches.cancel(benMessages.id)), 404);
      assert.equal(await statusOf(ana.messages.batches.delete(benMessages.id)), 404);
      // A batch of Ben's file fails as one of a file that does not exist.
      const fromBens = await client(ana1).batches.create({
        input_file_id: benInput.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      });
      const fromNothing = await client(ana1).batches.create({
        input_file_id: 'file-neverwasHere000000000000',
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      });
      assert.equal(fromBens.status, fromNothing.status);
      const [failedBens, failedNothing] = [await settled(ana1, fromBens.id), await settled(ana1, fromNothing.id)];
      assert.deepEqual([failedBens.status, failedBens.errors?.data?.[0]?.code], ['failed', 'file_not_found']);
      assert.deepEqual([failedNothing.status, failedNothing.errors?.data?.[0]?.code], ['failed', 'file_not_found']);
      assert.equal(
        openai.requests.filter((r) => lastUserText(r).includes('Hello from Ben')).length,
        1,
        "Ben's lines ran once: never for Ana's batch",
      );
      // Ana's own batches she sees; Ben none of them.
      await seesBatch(ana1, fromBens.id, "Ana's failed batch");
      await missesBatch(ben1, fromBens.id, "Ana's batch, to Ben");
      await missesFile(ben1, anaFile.id, "Ana's file, to Ben", ana1);

      // Ben sees his own; the owner's key and the admin API's see everything.
      for (const key of [ben1, owner1, nobody]) {
        for (const id of [benFile.id, benInput.id, benOutput]) await seesFile(key, id, `file ${id}`);
        await seesBatch(key, benBatch.id, "Ben's batch");
        assert.ok((await messageBatchIds(key)).includes(benMessages.id));
        assert.equal((await anthropicOf(key).messages.batches.retrieve(benMessages.id)).id, benMessages.id);
      }
      for (const key of [owner1, nobody]) {
        await seesFile(key, anaFile.id, "Ana's file");
        await seesBatch(key, fromBens.id, "Ana's batch");
      }

      // Ana made owner: her key sees all of it at once; a member again, none of it.
      const promoted = await console.request(
        'PATCH',
        `/console/api/teams/${team}/members/${people.ana}`,
        { role: 'owner' },
        { headers: { 'x-team': team } },
      );
      assert.equal(promoted.status, 200, JSON.stringify(promoted.json));
      for (const id of [benFile.id, benInput.id, benOutput]) await seesFile(ana1, id, `file ${id}, to Ana as owner`);
      await seesBatch(ana1, benBatch.id, "Ben's batch, to Ana as owner");
      assert.equal((await ana.messages.batches.retrieve(benMessages.id)).id, benMessages.id);
      const demoted = await console.request(
        'PATCH',
        `/console/api/teams/${team}/members/${people.ana}`,
        { role: 'member' },
        { headers: { 'x-team': team } },
      );
      assert.equal(demoted.status, 200, JSON.stringify(demoted.json));
      await missesFile(ana1, benFile.id, "Ben's file, to Ana a member again", ben1);
      await missesBatch(ana1, benBatch.id, "Ben's batch, to Ana a member again");
    },
  );

  it(
    'a key limited to models sees neither the batches of other models nor their input, output and error files; it ' +
      'sees the rest',
    async () => {
      const full = await teamKey('full', null);
      const mini = await teamKey('mini only', null, ['gpt-4o-mini']);
      const big = await runBatch(full, [chat('g-1', 'gpt-4o', 'Hello big'), chat('g-2', 'gpt-4o', 'please fail')]);
      const small = await runBatch(full, [chat('s-1', 'gpt-4o-mini', 'Hello small')]);
      const notes = await upload(full, ['just notes'], 'notes.txt', 'user_data');
      assert.equal(big.batch.status, 'completed');
      assert.ok(
        big.batch.output_file_id && big.batch.error_file_id,
        'the gpt-4o batch wrote an output and an error file',
      );

      await missesBatch(mini, big.batch.id, 'the gpt-4o batch');
      for (const [id, what] of [
        [big.input.id, 'its input'],
        [big.batch.output_file_id, 'its output'],
        [big.batch.error_file_id, 'its error file'],
      ] as const) {
        await missesFile(mini, id, what, full);
      }
      assert.ok(
        !(await fileIds(mini, 'batch_output')).includes(big.batch.output_file_id),
        'not listed by purpose either',
      );
      await seesBatch(mini, small.batch.id, 'the gpt-4o-mini batch');
      for (const [id, what] of [
        [small.input.id, 'its input'],
        [small.batch.output_file_id!, 'its output'],
        [notes.id, 'a file of no batch'],
      ] as const)
        await seesFile(mini, id, what);
      // The key with no model limit sees all of it.
      for (const id of [big.input.id, big.batch.output_file_id, big.batch.error_file_id, small.input.id, notes.id])
        await seesFile(full, id, `file ${id}`);
      await seesBatch(full, big.batch.id, 'the gpt-4o batch');
    },
  );

  it('a key limited to models sees its own batch in every status: validating, failed', async () => {
    const mini = await teamKey('mini own', null, ['gpt-4o-mini']);
    const otherMini = await teamKey('mini other', null, ['gpt-4o-mini']);
    // Validating (held so by its lease, as while its api reads its file).
    const id = 'batch_ownvalidating0001';
    const created = Date.now();
    await createValidatingBatch(
      redis,
      {
        id,
        accountId: team,
        keyId: mini.id,
        created,
        expires: created + 86_400_000,
        endpoint: '/v1/chat/completions',
        inputFileId: 'file-neverwasHere000000000001',
        metadata: null,
        outputExpiresAfter: null,
        access: { models: ['gpt-4o-mini'] },
      },
      60_000,
    );
    assert.equal((await client(mini).batches.retrieve(id)).status, 'validating');
    assert.ok((await batchIds(mini)).includes(id), 'listed while validating');
    // Another key limited alike does not: the batch's models are not known yet.
    await missesBatch(otherMini, id, "another key's validating batch");

    // Failed: a file that does not validate (a line with no custom_id): nothing of it ran, its models never known.
    const { input, batch } = await runBatch(mini, [
      chat('x-1', 'gpt-4o-mini', 'Fine'),
      JSON.stringify({ method: 'POST', url: '/v1/chat/completions', body: { model: 'gpt-4o-mini', messages: [] } }),
    ]);
    assert.equal(batch.status, 'failed');
    assert.equal(batch.errors?.data?.[0]?.code, 'missing_required_parameter');
    await seesBatch(mini, batch.id, 'its own failed batch');
    await seesFile(mini, input.id, "its own failed batch's input");
    await missesBatch(otherMini, batch.id, "another key's failed batch");
  });

  it("keeps a file's UTF-8 name and sends it back as RFC 5987's filename* beside an ASCII filename", async () => {
    const key = await teamKey('names', null);
    const smiley = await upload(key, ['{}'], '😀.jsonl', 'user_data');
    assert.equal(smiley.filename, '😀.jsonl');
    assert.equal((await client(key).files.retrieve(smiley.id)).filename, '😀.jsonl');
    const listed: string[] = [];
    for await (const file of client(key).files.list()) if (file.id === smiley.id) listed.push(file.filename);
    assert.deepEqual(listed, ['😀.jsonl']);
    const download = await raw(key, `/v1/files/${smiley.id}/content`);
    assert.equal(
      download.headers.get('content-disposition'),
      `attachment; filename="_.jsonl"; filename*=UTF-8''%F0%9F%98%80.jsonl`,
    );
    assert.equal(await download.text(), '{}\n');

    const odd = await upload(key, ['x'], `Résumé (final)*'s.txt`, 'user_data');
    assert.equal(odd.filename, `Résumé (final)*'s.txt`);
    const disposition = (await raw(key, `/v1/files/${odd.id}/content`)).headers.get('content-disposition')!;
    assert.equal(
      disposition,
      `attachment; filename="R_sum_ (final)*'s.txt"; filename*=UTF-8''R%C3%A9sum%C3%A9%20%28final%29%2A%27s.txt`,
    );
    assert.equal(decodeURIComponent(/filename\*=UTF-8''(.+)$/.exec(disposition)![1]!), odd.filename);

    // A client naming the part RFC 5987's way.
    const boundary = '----files-scope-boundary';
    const body =
      `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n` +
      (`--${boundary}\r\nContent-Disposition: form-data; name="file"; ` +
        `filename*=UTF-8''%F0%9F%98%80%20%22caf%C3%A9%22.jsonl\r\nContent-Type: ` +
        `application/octet-stream\r\n\r\n{}\n\r\n--${boundary}--\r\n`);
    const sent = await raw(key, '/v1/files', {
      method: 'POST',
      headers: { 'content-type': `multipart/form-data; boundary=${boundary}` },
      body,
    });
    const made = (await sent.json()) as { id: string; filename: string };
    assert.equal(sent.status, 200, JSON.stringify(made));
    assert.equal(made.filename, '😀 "café".jsonl');
    assert.equal((await client(key).files.retrieve(made.id)).filename, '😀 "café".jsonl');
    // A quote in the name is no end of the ASCII one.
    assert.equal(
      (await raw(key, `/v1/files/${made.id}/content`)).headers.get('content-disposition'),
      `attachment; filename="_ _caf__.jsonl"; filename*=UTF-8''%F0%9F%98%80%20%22caf%C3%A9%22.jsonl`,
    );
  });
});
