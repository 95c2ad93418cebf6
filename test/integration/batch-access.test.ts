import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { readBatch, readBatchResults } from '../../shared/batches/index.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { adminClient, type Json } from '../support/admin-client.js';
import { testRecord } from '../support/record.js';
import type { RecordDb } from '../../storage/record/database.js';

/**
 * A running batch follows every change to what its key may do: each request is admitted, as it is reserved, by what
 * the key may do at that moment (shared/access), not by what it could when the batch was made. A team's budget cut,
 * the key's limit lowered, the account disabled, the key's models narrowed or the key revoked, two lines in, and no
 * request reaches the vendor more than a moment later (what was already at the vendor, at most the lane's two, runs
 * out and is billed); the rest are failed with the refusal the endpoint would give now. Both dialects: OpenAI's
 * Batch API over /v1/files and Anthropic's Message Batches, with the official SDKs, on a worker and an api process.
 */

const adminToken = 'batch-access-admin-token';
const lines = 16;
const vendorDelayMs = 250;

interface OutputLine {
  custom_id: string;
  response: {
    status_code: number;
    request_id: string | null;
    body: { error?: { code: string | null; type: string; message: string } };
  } | null;
}

describe('a running batch stops at its next request when what its key may do changes', () => {
  let redis: Redis;
  let upstream: FakeOpenAI;
  let api: GatewayProcess;
  let worker: GatewayProcess;
  let record: RecordDb;
  let seq = 0;
  /** When each vendor call arrived, by the tag in its prompt. */
  const arrivals = new Map<string, number[]>();
  const { admin } = adminClient(() => api.url, adminToken);

  before(async () => {
    upstream = await startFakeOpenAI();
    upstream.setDefault((request) => {
      const text = JSON.stringify((request.body as { messages?: unknown }).messages ?? '');
      const tag = /tag-(\w+)/.exec(text)?.[1];
      if (tag) arrivals.set(tag, [...(arrivals.get(tag) ?? []), Date.now()]);
      return { delayMs: vendorDelayMs };
    });
    const fresh = await freshRedis(11);
    redis = fresh.redis;
    const env = {
      REDIS_URL: fresh.url,
      ADMIN_TOKEN: adminToken,
      OPENAI_API_KEY: 'sk-openai-test',
      OPENAI_BASE_URL: upstream.url,
      MOCK_VENDOR: 'off',
      // Two at a time at the vendor: a batch of sixteen is still running when its key changes.
      OPENAI_MAX_CONCURRENCY: '2',
      BATCH_WINDOW: '4',
      BATCH_SWEEP_INTERVAL_S: '1',
      KEY_CACHE_TTL_MS: '60000',
    };
    [api, worker] = await Promise.all([startGateway({ role: 'api', env }), startGateway({ role: 'worker', env })]);
    record = await testRecord(redis);
  });

  after(async () => {
    await Promise.all([api?.stop(), worker?.stop()]);
    await upstream?.close();
    redis?.disconnect();
  });

  /** A team with $100 and a key the admin API made in it. */
  async function team(): Promise<{ id: string; keyId: string; key: string }> {
    const made = await admin('POST', '/admin/teams', { name: `Batch access team ${++seq}` });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const id = String(made.json.id);
    assert.equal((await admin('POST', `/admin/accounts/${id}/credits`, { amount_usd: 100 })).status, 200);
    const key = await admin('POST', '/admin/keys', { name: 'batch', account_id: id });
    assert.equal(key.status, 201, JSON.stringify(key.json));
    return { id, keyId: String(key.json.id), key: String(key.json.key) };
  }

  const chatLine = (tag: string, i: number) =>
    JSON.stringify({
      custom_id: `line-${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: { model: 'gpt-4o', max_tokens: 32, messages: [{ role: 'user', content: `tag-${tag} line ${i}` }] },
    });

  /** An OpenAI batch of `lines` gpt-4o requests, made with the SDK and left running. */
  async function openAIBatch(client: OpenAI, tag: string): Promise<string> {
    const file = await client.files.create({
      file: await toFile(
        Buffer.from(`${Array.from({ length: lines }, (_, i) => chatLine(tag, i)).join('\n')}\n`),
        `${tag}.jsonl`,
      ),
      purpose: 'batch',
    });
    const batch = await client.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    return batch.id;
  }

  /**
   * Waits until `count` of the tag's requests reached the vendor, then makes the change; returns when it was answered.
   */
  async function changeAfter(
    tag: string,
    count: number,
    change: () => Promise<{ status: number; json: Json }>,
  ): Promise<number> {
    await waitFor(() => (arrivals.get(tag)?.length ?? 0) >= count, 20_000, `${count} requests of ${tag} at the vendor`);
    const answer = await change();
    assert.ok(answer.status === 200 || answer.status === 204, JSON.stringify(answer.json));
    return Date.now();
  }

  /**
   * Waits for the batch to end (read in Redis: the key may no longer read it) and checks nothing reached the vendor a
   * second after the change.
   */
  async function endsWithoutVendor(tag: string, batchId: string, changedAt: number): Promise<void> {
    await waitFor(async () => (await readBatch(redis, batchId))?.status === 'ended', 30_000, `batch ${batchId} to end`);
    const late = (arrivals.get(tag) ?? []).filter((at) => at > changedAt + 1000);
    assert.deepEqual(late, [], 'no request reached the vendor more than a second after the change');
    assert.ok((arrivals.get(tag) ?? []).length < lines, 'the batch did not run out');
  }

  /** The batch's output and error lines through the SDK, by custom id. */
  async function outcome(
    client: OpenAI,
    batchId: string,
  ): Promise<{ batch: OpenAI.Batches.Batch; errors: OutputLine[]; succeeded: number }> {
    let batch: OpenAI.Batches.Batch | undefined;
    await waitFor(
      async () =>
        ['completed', 'failed', 'cancelled', 'expired'].includes(
          (batch = await client.batches.retrieve(batchId)).status,
        ),
      20_000,
      `batch ${batchId} final`,
    );
    const read = async (id: string | null | undefined) =>
      id
        ? (await (await client.files.content(id)).text())
            .split('\n')
            .filter(Boolean)
            .map((row) => JSON.parse(row) as OutputLine)
        : [];
    const errors = await read(batch!.error_file_id);
    const output = await read(batch!.output_file_id);
    assert.equal(errors.length + output.length, lines, 'every line has its result');
    return { batch: batch!, errors, succeeded: output.length };
  }

  /** The settled cost of the batch's requests, from the record. */
  async function batchCost(batchId: string, expectedRows: number): Promise<number> {
    let rows: Array<{ cost_micros: number | string }> = [];
    await waitFor(
      async () => {
        rows = await record
          .selectFrom('usage')
          .select('cost_micros')
          .where('request_id', 'like', `${batchId}.%`)
          .where('settled', '=', true)
          .execute();
        return rows.length >= expectedRows;
      },
      15_000,
      `${expectedRows} settled rows of ${batchId}`,
    );
    assert.equal(rows.length, expectedRows, 'a row for each request that reached the vendor, none for one refused');
    return rows.reduce((sum, row) => sum + Number(row.cost_micros), 0);
  }

  it(
    "a team's budget cut to a millionth of a dollar: the lines after it fail with insufficient_quota, naming the " +
      'budget; nothing more is spent than what was at the vendor',
    async () => {
      const t = await team();
      const client = api.client(t.key);
      const id = await openAIBatch(client, 'budget');
      const changedAt = await changeAfter('budget', 2, () =>
        admin('PATCH', `/admin/accounts/${t.id}`, { budget_usd: 0.000001, budget_period: 'day' }),
      );
      await endsWithoutVendor('budget', id, changedAt);
      // A chat request of the same key is refused too: the batch and the door read the same rule.
      await assert.rejects(
        client.chat.completions.create({
          model: 'gpt-4o',
          max_tokens: 8,
          messages: [{ role: 'user', content: 'one more' }],
        }),
        (error: unknown) =>
          error instanceof OpenAI.APIError && error.status === 429 && error.code === 'insufficient_quota',
      );
      assert.equal((await admin('PATCH', `/admin/accounts/${t.id}`, { budget_usd: null })).status, 200);
      const { batch, errors, succeeded } = await outcome(client, id);
      assert.ok(errors.length > 0 && succeeded >= 2, JSON.stringify(batch.request_counts));
      for (const line of errors) {
        assert.equal(line.response?.status_code, 429, JSON.stringify(line));
        assert.equal(line.response?.body.error?.code, 'insufficient_quota');
        assert.match(line.response?.body.error?.message ?? '', /daily budget/);
        assert.match(
          line.response?.request_id ?? '',
          new RegExp(`^${id}\\.\\d+$`),
          'a refused line has its request id',
        );
      }
      const ran = arrivals.get('budget')!.length;
      assert.equal(succeeded, ran, 'what reached the vendor answered; nothing else');
      await batchCost(id, ran);
    },
  );

  it("the key's spending limit lowered below what it spent: the rest fail with insufficient_quota", async () => {
    const t = await team();
    const client = api.client(t.key);
    const id = await openAIBatch(client, 'limit');
    const changedAt = await changeAfter('limit', 3, () =>
      admin('PATCH', `/admin/keys/${t.keyId}`, { limit_usd: 0.000001 }),
    );
    await endsWithoutVendor('limit', id, changedAt);
    assert.equal((await admin('PATCH', `/admin/keys/${t.keyId}`, { limit_usd: null })).status, 200);
    const { errors, succeeded } = await outcome(client, id);
    assert.ok(errors.length > 0);
    for (const line of errors)
      assert.equal(line.response?.body.error?.code, 'insufficient_quota', JSON.stringify(line));
    assert.equal(succeeded, arrivals.get('limit')!.length);
  });

  it('the account disabled: the rest fail as a refused key (401 invalid_api_key), and nothing more is spent', async () => {
    const t = await team();
    const client = api.client(t.key);
    const id = await openAIBatch(client, 'disabled');
    const changedAt = await changeAfter('disabled', 2, () =>
      admin('PATCH', `/admin/accounts/${t.id}`, { disabled: true }),
    );
    await endsWithoutVendor('disabled', id, changedAt);
    assert.equal((await admin('PATCH', `/admin/accounts/${t.id}`, { disabled: false })).status, 200);
    const { errors, succeeded } = await outcome(client, id);
    assert.ok(errors.length > 0);
    for (const line of errors) {
      assert.equal(line.response?.status_code, 401, JSON.stringify(line));
      assert.equal(line.response?.body.error?.code, 'invalid_api_key');
      assert.match(line.response?.body.error?.message ?? '', /disabled/);
    }
    const ran = arrivals.get('disabled')!.length;
    assert.equal(succeeded, ran);
    await batchCost(id, ran);
  });

  it("the key's models narrowed away from the batch's model: the rest fail with 403 model_not_allowed", async () => {
    const t = await team();
    const client = api.client(t.key);
    const id = await openAIBatch(client, 'models');
    const changedAt = await changeAfter('models', 2, () =>
      admin('PATCH', `/admin/keys/${t.keyId}`, { models: ['gpt-4o-mini'] }),
    );
    await endsWithoutVendor('models', id, changedAt);
    assert.equal((await admin('PATCH', `/admin/keys/${t.keyId}`, { models: null })).status, 200);
    const { errors, succeeded } = await outcome(client, id);
    assert.ok(errors.length > 0);
    for (const line of errors) {
      assert.equal(line.response?.status_code, 403, JSON.stringify(line));
      assert.equal(line.response?.body.error?.code, 'model_not_allowed');
    }
    assert.equal(succeeded, arrivals.get('models')!.length);
  });

  it(
    'an Anthropic Message Batch whose key is revoked: the rest are errored with an authentication_error, billed ' +
      'nothing',
    async () => {
      const t = await team();
      const anthropic = new Anthropic({ apiKey: t.key, baseURL: api.url, maxRetries: 0 });
      const made = await anthropic.messages.batches.create({
        requests: Array.from({ length: lines }, (_, i) => ({
          custom_id: `line-${i}`,
          params: {
            model: 'gpt-4o',
            max_tokens: 32,
            messages: [{ role: 'user' as const, content: `tag-revoked line ${i}` }],
          },
        })),
      });
      const changedAt = await changeAfter('revoked', 2, () => admin('DELETE', `/admin/keys/${t.keyId}`));
      await endsWithoutVendor('revoked', made.id, changedAt);
      const ran = arrivals.get('revoked')!.length;
      // The key is gone: its results are read from the batch's record.
      const { lines: recorded } = await readBatchResults(redis, made.id, '0', 1000);
      const types = recorded.map(
        (row) => (JSON.parse(row) as { result: { type: string; error?: { error: { type: string } } } }).result,
      );
      assert.equal(types.length, lines);
      assert.equal(types.filter((result) => result.type === 'succeeded').length, ran);
      const errored = types.filter((result) => result.type === 'errored');
      assert.ok(errored.length > 0);
      for (const result of errored)
        assert.equal(result.error?.error.type, 'authentication_error', JSON.stringify(result));
      await batchCost(made.id, ran);
    },
  );
});
