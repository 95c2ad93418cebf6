import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import { readBill } from '../../shared/money/billing.js';
import { readBatch } from '../../shared/batches/index.js';
import { batchFinalizeLeaseKey, batchIntakeKey, batchKey, batchResultsKey } from '../../shared/redis-keys.js';
import { createValidatingBatch } from '../../api/batches/openai-record.js';
import { filesUnder } from '../support/blob-dir.js';
import {
  freshRedis,
  paidAccountKey,
  requestRecord,
  startGateway,
  testKeyStore,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';
import { refusedOrSlow, startFakeOpenAI, type FakeOpenAI, type RecordedRequest } from '../support/fake-openai.js';
import { FAKE_ANTHROPIC_TEXT, type FakeAnthropic } from '../support/fake-anthropic.js';
import { FAKE_GEMINI_TEXT } from '../support/fake-gemini.js';
import { startVendorGateway, type VendorGateway } from '../support/vendor-gateway.js';
import { usageRows } from '../support/record.js';
import { ConsoleClient } from '../support/console-client.js';

/**
 * OpenAI's Batch API (`/v1/batches`) with the official `openai` SDK, end to end: files uploaded through `/v1/files`,
 * a batch made of one, polled, and its output and error files downloaded, against strict fakes of OpenAI, Anthropic
 * and Gemini (one batch mixes them). The lines run on the Message Batches engine: billed once each at the flex price,
 * logged under their batch, cancelled and expired as its requests are, and a worker killed mid-way loses nothing.
 */

type Batch = OpenAI.Batches.Batch;
interface OutputLine {
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string | null; body: Record<string, unknown> } | null;
  error: { code: string; message: string } | null;
}

const line = (customId: string, url: string, body: Record<string, unknown>, method = 'POST') =>
  JSON.stringify({ custom_id: customId, method, url, body });
const chat = (customId: string, model: string, text: string, extra: Record<string, unknown> = {}) =>
  line(customId, '/v1/chat/completions', {
    model,
    max_tokens: 64,
    messages: [{ role: 'user', content: text }],
    ...extra,
  });
const lastUserText = (request: RecordedRequest) =>
  JSON.stringify(
    (request.body as { messages?: unknown[]; input?: unknown }).messages ??
      (request.body as { input?: unknown }).input ??
      '',
  );

async function upload(
  client: OpenAI,
  lines: readonly string[],
  name = 'input.jsonl',
  purpose: 'batch' | 'user_data' = 'batch',
) {
  return client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), name), purpose });
}

const finalStatuses = new Set(['completed', 'failed', 'expired', 'cancelled']);

/** Polls the batch as a client does until it has a final status. */
async function settled(client: OpenAI, id: string, timeoutMs = 30_000): Promise<Batch> {
  let batch: Batch | undefined;
  await waitFor(
    async () => finalStatuses.has((batch = await client.batches.retrieve(id)).status),
    timeoutMs,
    `batch ${id} to end`,
  );
  return batch!;
}

async function linesOf(client: OpenAI, fileId: string | null | undefined): Promise<OutputLine[]> {
  assert.ok(fileId, 'the file is there');
  const text = await (await client.files.content(fileId)).text();
  assert.ok(text.endsWith('\n'), 'each line ends with a newline');
  return text
    .split('\n')
    .filter((row) => row !== '')
    .map((row) => JSON.parse(row) as OutputLine);
}

const byCustomId = (lines: readonly OutputLine[]) => {
  const map = new Map<string, OutputLine>();
  for (const output of lines) {
    assert.ok(!map.has(output.custom_id), `${output.custom_id} appears once`);
    map.set(output.custom_id, output);
  }
  return map;
};

/** The settled usage rows of a batch's requests (request ids `<batch>.<index>`), as the record has them. */
async function batchRows(redis: Redis, id: string) {
  return (await usageRows(redis)).filter((row) => row.settled && row.request_id.startsWith(`${id}.`));
}

/**
 * Waits for `count` settled rows of the batch, then checks the account's balance moved by exactly what they say, once.
 */
async function rowsBilled(redis: Redis, id: string, count: number) {
  let rows: Awaited<ReturnType<typeof batchRows>> = [];
  await waitFor(
    async () => (rows = await batchRows(redis, id)).length >= count,
    15_000,
    `${count} usage rows of ${id}`,
  );
  assert.equal(rows.length, count, 'one row per request that ran, none for one that did not');
  assert.equal(new Set(rows.map((row) => row.request_id)).size, rows.length, 'each request billed once');
  for (const row of rows) assert.equal(row.service_tier, 'flex', `${row.request_id} is billed at the flex price`);
  return { rows, cost: rows.reduce((sum, row) => sum + Number(row.cost_micros), 0) };
}

describe('OpenAI Batch API (/v1/batches) with the official openai SDK over /v1/files, against strict vendor fakes', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let vendorGateway: VendorGateway;
  let client: OpenAI;
  let account: string;
  let apiKey: string;
  let blobDir: string;

  before(async () => {
    blobDir = await mkdtemp(join(tmpdir(), 'sy-openai-batches-'));
    vendorGateway = await startVendorGateway({
      db: 14,
      env: {
        // OpenAI's requests wait in a lane of two at a time: a batch of slow requests is still running when it is
        // cancelled.
        OPENAI_MAX_CONCURRENCY: '2',
        BATCH_SWEEP_INTERVAL_S: '1',
        BATCH_WINDOW: '4',
        BATCH_MAX_OPEN: '5',
        FILES_BATCH_MAX_REQUESTS: '40',
        // Every batch of more than a few lines writes its results out as parts while it runs.
        FILES_BATCH_SPILL_RESULTS: '10',
        BLOB_DIR: blobDir,
        ADMIN_EMAIL: 'root@batches.test',
        ADMIN_PASSWORD: 'root-password-1',
      },
      prepare: async (ready) => {
        ({ openai, anthropic, redis } = ready);
        openai.setDefault((request) => refusedOrSlow(lastUserText(request)));
        ({ key: apiKey, account } = await paidAccountKey(redis, 50_000_000));
      },
    });
    gateway = vendorGateway.gateway;
    client = gateway.client(apiKey);
  });

  after(async () => {
    await vendorGateway?.close();
    if (blobDir) await rm(blobDir, { recursive: true, force: true });
  });

  it(
    'runs a chat batch over an OpenAI, an Anthropic and a Gemini model to completed: one output line each, billed ' +
      'once at the flex price',
    async () => {
      const start = (await readBill(redis, account))!.balanceMicros!;
      const input = await upload(
        client,
        [
          chat('openai-1', 'gpt-4o-mini', 'Hello OpenAI'),
          chat('anthropic-1', 'claude-sonnet-4-5', 'Hello Anthropic'),
          chat('gemini-1', 'gemini-2.5-flash', 'Hello Gemini'),
        ],
        'chat.jsonl',
      );
      const made = await client.batches.create({
        input_file_id: input.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
        metadata: { run: 'nightly' },
      });
      assert.match(made.id, /^batch_[0-9a-f]{32}$/);
      assert.equal(made.object, 'batch');
      assert.equal(made.status, 'validating');
      assert.equal(made.endpoint, '/v1/chat/completions');
      assert.equal(made.input_file_id, input.id);
      assert.equal(made.completion_window, '24h');
      assert.deepEqual(made.metadata, { run: 'nightly' });
      assert.equal(made.expires_at! - made.created_at, 86_400, 'expires 24 h after it was made');
      assert.equal(made.output_file_id, null);

      const done = await settled(client, made.id);
      assert.equal(done.status, 'completed', JSON.stringify(done));
      assert.deepEqual(done.request_counts, { total: 3, completed: 3, failed: 0 });
      assert.ok(done.in_progress_at && done.finalizing_at && done.completed_at, 'each step has its time');
      assert.ok(done.in_progress_at >= done.created_at && done.completed_at >= done.finalizing_at);
      assert.equal(done.failed_at, null);
      assert.equal(done.error_file_id, null, 'no error file when nothing failed');
      assert.equal(done.errors, null);
      assert.equal(done.model, undefined, 'a batch mixing models names none');
      assert.ok(done.usage!.input_tokens > 0 && done.usage!.output_tokens > 0);
      assert.equal(done.usage!.total_tokens, done.usage!.input_tokens + done.usage!.output_tokens);

      const output = byCustomId(await linesOf(client, done.output_file_id));
      assert.deepEqual([...output.keys()].sort(), ['anthropic-1', 'gemini-1', 'openai-1']);
      const text = (customId: string) => {
        const found = output.get(customId)!;
        assert.match(found.id, /^batch_req_[0-9a-f]{32}$/);
        assert.equal(found.error, null);
        assert.equal(found.response!.status_code, 200);
        assert.match(found.response!.request_id!, new RegExp(`^${made.id}\\.\\d$`));
        const body = found.response!.body as unknown as OpenAI.ChatCompletion;
        assert.equal(body.object, 'chat.completion');
        return body.choices[0]!.message.content;
      };
      assert.ok(text('openai-1')!.length > 0);
      assert.equal(text('anthropic-1'), FAKE_ANTHROPIC_TEXT);
      assert.equal(text('gemini-1'), FAKE_GEMINI_TEXT);
      // Each vendor was called once for its line (Anthropic natively).
      assert.equal(anthropic.requests.filter((r) => JSON.stringify(r.body).includes('Hello Anthropic')).length, 1);
      assert.equal(openai.requests.filter((r) => lastUserText(r).includes('Hello OpenAI')).length, 1);

      // The output file is a file of the account, written by the batch.
      const file = await client.files.retrieve(done.output_file_id!);
      assert.equal(file.purpose, 'batch_output');
      assert.equal(file.filename, `${made.id}_output.jsonl`);
      assert.ok(file.expires_at! > Date.now() / 1000 + 86_400, 'kept with the batch’s results');

      // Money: each line billed once at the flex price, half of what the same request costs served at once, and the
      // balance moved by exactly what the record says.
      const direct = await client.chat.completions
        .create({ model: 'gpt-4o-mini', max_tokens: 64, messages: [{ role: 'user', content: 'Hello OpenAI' }] })
        .withResponse();
      const directCost = (await requestRecord(gateway.url, apiKey, direct.response.headers.get('x-request-id')!))
        .cost_micros;
      const { rows, cost } = await rowsBilled(redis, made.id, 3);
      const openaiRow = rows.find((row) => row.request_id === output.get('openai-1')!.response!.request_id)!;
      assert.ok(directCost > 0);
      assert.ok(
        Math.abs(Number(openaiRow.cost_micros) * 2 - directCost) <= 1,
        `flex ${openaiRow.cost_micros} is half of ${directCost}`,
      );
      assert.equal(Number(await redis.hget(batchKey(made.id), 'cost')), cost, 'the batch’s cost is its rows’');
      const bill = (await readBill(redis, account))!;
      assert.equal(bill.balanceMicros, start - cost - directCost);
      assert.equal(bill.reservedMicros, 0);
      // The request log has each line under its batch.
      const found = await fetch(`${gateway.url}/v1/generation?id=${output.get('anthropic-1')!.response!.request_id!}`, {
        headers: { authorization: `Bearer ${apiKey}` },
      });
      assert.equal(found.status, 200);
      const logged = (
        (await found.json()) as { data: { model: string; batch_id: string | null; service_tier: string } }
      ).data;
      assert.equal(logged.batch_id, made.id);
      assert.equal(logged.model, 'claude-sonnet-4-5');
      assert.equal(logged.service_tier, 'flex');

      // The console's Batches page reads it as a Batch API batch, with its endpoint, status, files and cost.
      const admin = new ConsoleClient(gateway.url);
      assert.equal((await admin.signIn('root@batches.test', 'root-password-1')).status, 200);
      const page = await admin.request<{ data: Array<Record<string, unknown>> }>(
        'GET',
        `/console/api/batches?account_id=${account}`,
      );
      const shown = page.json.data.find((batch) => batch.id === made.id)!;
      assert.deepEqual(
        [shown.dialect, shown.endpoint, shown.status, shown.openai_status, shown.cost_micros, shown.results_path],
        ['openai', '/v1/chat/completions', 'ended', 'completed', cost, `/v1/files/${done.output_file_id}/content`],
      );
      assert.deepEqual(shown.files, {
        input: { id: input.id, filename: 'chat.jsonl' },
        output: { id: done.output_file_id, filename: `${made.id}_output.jsonl` },
        error: null,
      });

      // /metrics counts it under its dialect.
      const metrics = await (await fetch(`${gateway.url}/metrics`)).text();
      const counted = (pattern: RegExp) => Number(pattern.exec(metrics)?.[1] ?? 0);
      assert.ok(
        counted(/^switchyard_batches_total\{event="created",dialect="openai"\} (\d+)/m) >= 1,
        'created, counted as openai',
      );
      assert.ok(
        counted(/^switchyard_batch_requests_total\{outcome="succeeded",dialect="openai"\} (\d+)/m) >= 3,
        'its requests, counted as openai',
      );

      // Listed, newest first, paged with `after`; not among the Message Batches.
      const listed: string[] = [];
      for await (const batch of client.batches.list({ limit: 1 })) listed.push(batch.id);
      assert.ok(listed.includes(made.id));
      const anthropicList = (await (
        await fetch(`${gateway.url}/v1/messages/batches`, {
          headers: { 'x-api-key': apiKey, 'anthropic-version': '2023-06-01' },
        })
      ).json()) as { data: Array<{ id: string }> };
      assert.ok(!anthropicList.data.some((batch) => batch.id === made.id), 'an OpenAI batch is not a Message Batch');
    },
  );

  it(
    'runs an embeddings batch over OpenAI and Gemini, its files expiring as output_expires_after says, billed at ' +
      'the flex price',
    async () => {
      const start = (await readBill(redis, account))!.balanceMicros!;
      const long = (n: number) => `passage ${n} `.repeat(400);
      const input = await upload(client, [
        line('e-openai', '/v1/embeddings', { model: 'text-embedding-3-small', input: long(1) }),
        line('e-gemini', '/v1/embeddings', { model: 'gemini-embedding-001', input: [long(2), long(3)] }),
      ]);
      const made = await client.batches.create({
        input_file_id: input.id,
        endpoint: '/v1/embeddings',
        completion_window: '24h',
        output_expires_after: { anchor: 'created_at', seconds: 3600 },
      });
      const done = await settled(client, made.id);
      assert.equal(done.status, 'completed', JSON.stringify(done));
      assert.deepEqual(done.request_counts, { total: 2, completed: 2, failed: 0 });
      const output = byCustomId(await linesOf(client, done.output_file_id));
      const vectors = (customId: string) => {
        const body = output.get(customId)!.response!.body as unknown as OpenAI.CreateEmbeddingResponse;
        assert.equal(body.object, 'list');
        return body.data.map((item) => item.embedding);
      };
      assert.equal(vectors('e-openai').length, 1);
      assert.equal(vectors('e-gemini').length, 2);
      assert.ok(vectors('e-gemini').every((vector) => vector.length > 0));
      const file = await client.files.retrieve(done.output_file_id!);
      assert.ok(
        Math.abs(file.expires_at! - (file.created_at + 3600)) <= 2,
        `expires an hour after it was written: ${JSON.stringify(file)}`,
      );
      const { cost } = await rowsBilled(redis, made.id, 2);
      assert.ok(cost > 0, 'embeddings are billed');
      assert.equal((await readBill(redis, account))!.balanceMicros, start - cost);
    },
  );

  it('runs a Responses batch: each line’s Response object in the output file', async () => {
    const input = await upload(client, [
      line('r-openai', '/v1/responses', { model: 'gpt-4o-mini', input: 'Hello Responses' }),
      line('r-anthropic', '/v1/responses', {
        model: 'claude-sonnet-4-5',
        input: 'Hello Responses on Claude',
        max_output_tokens: 64,
      }),
    ]);
    const made = await client.batches.create({
      input_file_id: input.id,
      endpoint: '/v1/responses',
      completion_window: '24h',
    });
    const done = await settled(client, made.id);
    assert.equal(done.status, 'completed', JSON.stringify(done));
    const output = byCustomId(await linesOf(client, done.output_file_id));
    for (const customId of ['r-openai', 'r-anthropic']) {
      const body = output.get(customId)!.response!.body as unknown as OpenAI.Responses.Response;
      assert.equal(body.object, 'response');
      assert.equal(body.status, 'completed');
      assert.match(body.id, /^resp_/);
      assert.ok(body.output_text === undefined || typeof body.output_text === 'string');
      const message = body.output.find((item) => item.type === 'message') as OpenAI.Responses.ResponseOutputMessage;
      assert.ok((message.content[0] as OpenAI.Responses.ResponseOutputText).text.length > 0);
    }
    const claude = output.get('r-anthropic')!.response!.body as unknown as OpenAI.Responses.Response;
    assert.equal(
      (
        (claude.output.find((item) => item.type === 'message') as OpenAI.Responses.ResponseOutputMessage)
          .content[0] as OpenAI.Responses.ResponseOutputText
      ).text,
      FAKE_ANTHROPIC_TEXT,
    );
    await rowsBilled(redis, made.id, 2);
  });

  it(
    'writes per-request failures to the error file beside the successes: an unknown model, a refused body, a ' +
      'stream, a vendor’s refusal',
    async () => {
      const start = (await readBill(redis, account))!.balanceMicros!;
      const calledBefore = openai.requests.length;
      const input = await upload(client, [
        chat('ok', 'gpt-4o-mini', 'Fine'),
        chat('unknown-model', 'no-such-model', 'x'),
        line('bad-body', '/v1/chat/completions', { model: 'gpt-4o-mini', messages: 'not a list' }),
        chat('streams', 'gpt-4o-mini', 'x', { stream: true }),
        chat('vendor-refuses', 'gpt-4o-mini', 'please fail'),
      ]);
      const made = await client.batches.create({
        input_file_id: input.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      });
      const done = await settled(client, made.id);
      assert.equal(done.status, 'completed', 'failed requests do not fail their batch');
      assert.deepEqual(done.request_counts, { total: 5, completed: 1, failed: 4 });
      const output = byCustomId(await linesOf(client, done.output_file_id));
      assert.deepEqual([...output.keys()], ['ok']);
      const errors = byCustomId(await linesOf(client, done.error_file_id));
      assert.deepEqual([...errors.keys()].sort(), ['bad-body', 'streams', 'unknown-model', 'vendor-refuses']);
      const failure = (customId: string) => {
        const found = errors.get(customId)!;
        assert.equal(found.error, null, 'a request that was answered with an error has it as its response');
        return {
          status: found.response!.status_code,
          error: (
            found.response!.body as {
              error: { message: string; type: string; param: string | null; code: string | null };
            }
          ).error,
        };
      };
      assert.equal(failure('unknown-model').status, 404);
      assert.equal(failure('unknown-model').error.code, 'model_not_found');
      assert.equal(failure('bad-body').status, 400);
      assert.equal(failure('bad-body').error.param, 'messages');
      assert.equal(failure('streams').status, 400);
      assert.equal(failure('streams').error.param, 'stream');
      assert.equal(failure('vendor-refuses').status, 400);
      assert.match(failure('vendor-refuses').error.message, /refused upstream/);
      // Only the lines that reached a vendor called it: the good one and the one it refused.
      assert.equal(openai.requests.length - calledBefore, 2);
      // What ran is billed (the refused call at nothing it produced); what never ran has no row.
      let rows: Awaited<ReturnType<typeof batchRows>> = [];
      await waitFor(async () => (rows = await batchRows(redis, made.id)).length >= 2, 15_000, 'the rows of what ran');
      assert.equal(rows.length, 2);
      assert.equal(
        (await readBill(redis, account))!.balanceMicros,
        start - rows.reduce((sum, row) => sum + Number(row.cost_micros), 0),
      );
      assert.equal((await readBill(redis, account))!.reservedMicros, 0);
    },
  );

  it(
    'writes the results of a running batch out as parts (Redis keeps no more than a part of them), its files whole ' +
      'from the parts, the parts gone after',
    async () => {
      const lines = Array.from({ length: 40 }, (_, i) =>
        line(`c${i}`, '/v1/embeddings', {
          model: 'text-embedding-3-small',
          input: i % 8 === 5 ? `please fail ${i}` : `passage ${i}`,
        }),
      );
      const input = await upload(client, lines);
      const made = await client.batches.create({
        input_file_id: input.id,
        endpoint: '/v1/embeddings',
        completion_window: '24h',
      });
      // Watched as it runs: the results waiting in Redis, and the parts noted.
      let mostWaiting = 0;
      let batch: Batch | undefined;
      await waitFor(
        async () => {
          mostWaiting = Math.max(mostWaiting, await redis.xlen(batchResultsKey(made.id)));
          return finalStatuses.has((batch = await client.batches.retrieve(made.id)).status);
        },
        30_000,
        'the batch to end',
      );
      assert.equal(batch!.status, 'completed', JSON.stringify(batch));
      assert.deepEqual(batch!.request_counts, { total: 40, completed: 35, failed: 5 });
      const parts = Number(await redis.hget(batchKey(made.id), 'oa_parts'));
      assert.ok(parts >= 2, `its results went out in parts (${parts})`);
      assert.ok(mostWaiting < 40, `Redis never held them all (${mostWaiting} at most)`);
      // The files: every line once, each where it belongs, with ids of their own.
      const output = await linesOf(client, batch!.output_file_id);
      const errors = await linesOf(client, batch!.error_file_id);
      const outputs = byCustomId(output);
      const failures = byCustomId(errors);
      assert.equal(outputs.size, 35);
      assert.deepEqual([...failures.keys()].sort(), ['c13', 'c21', 'c29', 'c37', 'c5']);
      for (const [, found] of outputs) assert.equal(found.response!.status_code, 200);
      for (const [, found] of failures) assert.equal(found.response!.status_code, 400);
      assert.equal(
        new Set([...output, ...errors].map((found) => found.id)).size,
        40,
        'each line its own batch_req_ id',
      );
      // Once written, the parts and the results in Redis are gone.
      await waitFor(() => filesUnder(join(blobDir, 'batch-parts')).length === 0, 10_000, 'the parts deleted');
      assert.equal(await redis.exists(batchResultsKey(made.id)), 0);
      await rowsBilled(redis, made.id, 40);
    },
  );

  it(
    'ends a batch whose every line is refused (more of them than its window) with each in the error file and ' +
      'nothing billed',
    async () => {
      const input = await upload(
        client,
        Array.from({ length: 13 }, (_, i) => chat(`r${i}`, `no-such-model-${i}`, 'x')),
      );
      const made = await client.batches.create({
        input_file_id: input.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      });
      const done = await settled(client, made.id);
      assert.equal(done.status, 'completed');
      assert.deepEqual(done.request_counts, { total: 13, completed: 0, failed: 13 });
      assert.equal(done.output_file_id, null, 'no output file when nothing succeeded');
      const errors = byCustomId(await linesOf(client, done.error_file_id));
      assert.equal(errors.size, 13);
      for (const [, found] of errors) assert.equal(found.response!.status_code, 404);
      // Refused before any vendor call, each line still has its request id, as every line of OpenAI's has one.
      assert.deepEqual(
        [...errors].map(([customId, found]) => [customId, found.response!.request_id]),
        Array.from({ length: 13 }, (_, i) => [`r${i}`, `${made.id}.${i}`]),
      );
      assert.deepEqual(await batchRows(redis, made.id), []);
    },
  );

  it(
    'runs a /v1/messages batch (Anthropic’s bodies) over Claude and an OpenAI model, a refused body in Anthropic’s ' +
      'error shape',
    async () => {
      const message = (customId: string, model: string, text: string) =>
        line(customId, '/v1/messages', { model, max_tokens: 64, messages: [{ role: 'user', content: text }] });
      const input = await upload(client, [
        message('m-claude', 'claude-sonnet-4-5', 'Hello Messages'),
        message('m-openai', 'gpt-4o-mini', 'Hello Messages on OpenAI'),
        line('m-bad', '/v1/messages', { model: 'claude-sonnet-4-5', messages: [] }),
      ]);
      const made = await client.batches.create({
        input_file_id: input.id,
        endpoint: '/v1/messages' as OpenAI.Batches.BatchCreateParams['endpoint'],
        completion_window: '24h',
      });
      const done = await settled(client, made.id);
      assert.equal(done.status, 'completed');
      assert.deepEqual(done.request_counts, { total: 3, completed: 2, failed: 1 });
      const output = byCustomId(await linesOf(client, done.output_file_id));
      const claude = output.get('m-claude')!.response!.body as { type: string; content: Array<{ text: string }> };
      assert.equal(claude.type, 'message');
      assert.equal(claude.content[0]!.text, FAKE_ANTHROPIC_TEXT);
      assert.equal((output.get('m-openai')!.response!.body as { type: string }).type, 'message');
      const bad = (await linesOf(client, done.error_file_id))[0]!;
      assert.equal(bad.custom_id, 'm-bad');
      assert.equal(bad.response!.status_code, 400);
      assert.equal(
        (bad.response!.body as { type: string; error: { type: string } }).error.type,
        'invalid_request_error',
      );
      assert.equal((bad.response!.body as { type: string }).type, 'error');
      await rowsBilled(redis, made.id, 2);
    },
  );

  it('fails a malformed file at validation, naming each line and its code, and runs none of it', async () => {
    const calledBefore = openai.requests.length;
    const input = await upload(client, [
      chat('a', 'gpt-4o-mini', 'never sent'),
      '{"custom_id": "b", "method": "POST", "url": "/v1/chat/completions", "body": {',
      line('c', '/v1/embeddings', { model: 'text-embedding-3-small', input: 'x' }),
      chat('a', 'gpt-4o-mini', 'twice'),
      line('d', '/v1/chat/completions', { model: 'gpt-4o-mini', messages: [] }, 'GET'),
      '[1, 2]',
      JSON.stringify({ method: 'POST', url: '/v1/chat/completions', body: {} }),
    ]);
    const made = await client.batches.create({
      input_file_id: input.id,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    const done = await settled(client, made.id);
    assert.equal(done.status, 'failed');
    assert.ok(done.failed_at);
    assert.equal(done.in_progress_at, null, 'it never ran');
    assert.deepEqual(
      done.errors!.data!.map(({ code, line: at, param }) => ({ code, line: at, param })),
      [
        { code: 'invalid_json_line', line: 2, param: null },
        { code: 'url_mismatch', line: 3, param: 'url' },
        { code: 'duplicate_custom_id', line: 4, param: 'custom_id' },
        { code: 'invalid_method', line: 5, param: 'method' },
        { code: 'invalid_json_line', line: 6, param: null },
        { code: 'missing_required_parameter', line: 7, param: 'custom_id' },
      ],
    );
    assert.ok(done.errors!.data!.every((error) => typeof error.message === 'string' && error.message.length > 0));
    assert.equal(done.output_file_id, null);
    assert.equal(done.error_file_id, null);
    assert.deepEqual(done.request_counts, { total: 0, completed: 0, failed: 0 });
    assert.equal(openai.requests.length, calledBefore, 'nothing of it reached a vendor');
    await assert.rejects(client.batches.cancel(made.id), OpenAI.BadRequestError, 'a failed batch cannot be cancelled');

    // More lines than FILES_BATCH_MAX_REQUESTS (40 here), a file that is not the account's batch file, an empty file.
    const tooMany = await upload(
      client,
      Array.from({ length: 41 }, (_, i) => chat(`n${i}`, 'gpt-4o-mini', 'x')),
    );
    const failedWith = async (fileId: string) => {
      const batch = await settled(
        client,
        (
          await client.batches.create({
            input_file_id: fileId,
            endpoint: '/v1/chat/completions',
            completion_window: '24h',
          })
        ).id,
      );
      assert.equal(batch.status, 'failed');
      return batch.errors!.data!.map(({ code, line: at }) => ({ code, line: at }));
    };
    assert.deepEqual(await failedWith(tooMany.id), [{ code: 'too_many_tasks', line: 41 }]);
    const userData = await upload(client, [chat('u', 'gpt-4o-mini', 'x')], 'notes.jsonl', 'user_data');
    assert.deepEqual(await failedWith(userData.id), [{ code: 'invalid_file_purpose', line: null }]);
    assert.deepEqual(await failedWith('file-doesnotexist000000000'), [{ code: 'file_not_found', line: null }]);
    const blank = await upload(client, ['', '  ']);
    assert.deepEqual(await failedWith(blank.id), [{ code: 'empty_file', line: null }]);
    // Another account's file is not found either.
    const other = gateway.client((await paidAccountKey(redis, 1_000_000)).key);
    const theirs = await upload(other, [chat('t', 'gpt-4o-mini', 'x')]);
    assert.deepEqual(await failedWith(theirs.id), [{ code: 'file_not_found', line: null }]);
  });

  it('refuses a batch it cannot make, in OpenAI’s errors, and keeps batches to their account', async () => {
    const input = await upload(client, [chat('s', 'gpt-4o-mini', 'Hello')]);
    const refused = async (params: Record<string, unknown>) => {
      const error = await client.batches.create(params as unknown as OpenAI.Batches.BatchCreateParams).then(
        () => undefined,
        (thrown: unknown) => thrown,
      );
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
      return error.param;
    };
    assert.equal(
      await refused({ input_file_id: input.id, endpoint: '/v1/images/generations', completion_window: '24h' }),
      'endpoint',
    );
    assert.equal(
      await refused({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '48h' }),
      'completion_window',
    );
    assert.equal(await refused({ endpoint: '/v1/chat/completions', completion_window: '24h' }), 'input_file_id');
    assert.equal(
      await refused({
        input_file_id: input.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
        output_expires_after: { anchor: 'created_at', seconds: 60 },
      }),
      'output_expires_after.seconds',
    );
    assert.equal(
      await refused({
        input_file_id: input.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
        metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])),
      }),
      'metadata',
    );

    const made = await client.batches.create({
      input_file_id: input.id,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    const other = gateway.client((await paidAccountKey(redis, 1_000_000)).key);
    await assert.rejects(other.batches.retrieve(made.id), OpenAI.NotFoundError);
    await assert.rejects(other.batches.cancel(made.id), OpenAI.NotFoundError);
    assert.deepEqual((await other.batches.list()).data, []);
    await assert.rejects(client.batches.retrieve('batch_nope'), OpenAI.NotFoundError);
    await assert.rejects(client.batches.retrieve('msgbatch_nope'), OpenAI.NotFoundError);
    // A key of the account limited to other models sees none of it.
    const keys = await testKeyStore(redis);
    const limited = gateway.client(
      (await keys.create('limited', { accountId: account, models: ['claude-sonnet-4-5'] })).key,
    );
    await assert.rejects(limited.batches.retrieve(made.id), OpenAI.NotFoundError);
    assert.equal((await settled(client, made.id)).status, 'completed');
  });

  it(
    'cancels a batch mid-run: only finished lines in the output, the rest cancelled in the error file and never ' +
      'billed',
    async () => {
      const start = (await readBill(redis, account))!.balanceMicros!;
      const input = await upload(
        client,
        Array.from({ length: 12 }, (_, i) => chat(`slow-${i}`, 'gpt-4o-mini', `Answer slowly ${i}`)),
      );
      const made = await client.batches.create({
        input_file_id: input.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      });
      await waitFor(
        async () => (await client.batches.retrieve(made.id)).request_counts!.completed >= 2,
        15_000,
        'two answers',
      );
      const cancelling = await client.batches.cancel(made.id);
      assert.ok(cancelling.status === 'cancelling' || cancelling.status === 'cancelled', cancelling.status);
      assert.ok(cancelling.cancelling_at);
      const done = await settled(client, made.id);
      assert.equal(done.status, 'cancelled');
      assert.ok(done.cancelled_at);
      const completed = done.request_counts!.completed;
      assert.ok(completed >= 2 && completed <= 8, `most were still waiting: ${JSON.stringify(done.request_counts)}`);
      const output = await linesOf(client, done.output_file_id);
      assert.equal(output.length, completed, 'only the finished lines are in the output');
      assert.ok(output.every((found) => found.response?.status_code === 200));
      const errors = await linesOf(client, done.error_file_id);
      assert.equal(errors.length, 12 - completed);
      assert.ok(
        errors.every((found) => found.response === null && found.error?.code === 'batch_cancelled'),
        JSON.stringify(errors[0]),
      );
      assert.deepEqual(
        new Set([...output, ...errors].map((found) => found.custom_id)),
        new Set(Array.from({ length: 12 }, (_, i) => `slow-${i}`)),
      );
      const { cost } = await rowsBilled(redis, made.id, completed);
      await waitFor(async () => (await readBill(redis, account))!.reservedMicros === 0, 10_000, 'no reservation left');
      assert.equal((await readBill(redis, account))!.balanceMicros, start - cost);
    },
  );
});

describe('OpenAI batches across faults: a worker killed mid-batch, a batch past its deadline', () => {
  const processes: GatewayProcess[] = [];
  let redis: Redis;
  let url: string;
  let openai: FakeOpenAI;

  before(async () => {
    // Every chat answer takes 300 ms: a batch is under way long enough to kill its worker, or to outlive its deadline.
    openai = await startFakeOpenAI({ latencyMs: 300 });
    const fresh = await freshRedis(15);
    redis = fresh.redis;
    url = fresh.url;
  });

  after(async () => {
    await Promise.all(processes.splice(0).map((p) => p.stop('SIGKILL')));
    await openai?.close();
    redis?.disconnect();
  });

  // A dead worker's jobs run again after WORKER_LOCK_MS, and the vendor slots it held free after VENDOR_LEASE_MS;
  // results are written out as parts every ten.
  const env = () => ({
    REDIS_URL: url,
    OPENAI_API_KEY: 'sk-openai-test',
    OPENAI_BASE_URL: openai.url,
    OPENAI_MAX_CONCURRENCY: '2',
    WORKER_LOCK_MS: '2000',
    VENDOR_LEASE_MS: '3000',
    BATCH_SWEEP_INTERVAL_S: '1',
    FILES_BATCH_SPILL_RESULTS: '10',
  });

  it('loses nothing and bills nothing twice when the worker running a batch is SIGKILLed and another takes over', async () => {
    const { key, account } = await paidAccountKey(redis, 10_000_000);
    const api = await startGateway({ role: 'api', env: env() });
    processes.push(api);
    const doomed = await startGateway({ role: 'worker', env: env() });
    processes.push(doomed);
    const client = api.client(key);
    const input = await upload(
      client,
      Array.from({ length: 10 }, (_, i) => chat(`k${i}`, 'gpt-4o-mini', `Question ${i}`)),
    );
    const made = await client.batches.create({
      input_file_id: input.id,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    await waitFor(
      async () => (await client.batches.retrieve(made.id)).request_counts!.completed >= 2,
      15_000,
      'two answers',
    );
    await doomed.stop('SIGKILL');
    processes.push(await startGateway({ role: 'worker', env: env() }));
    const done = await settled(client, made.id, 60_000);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.request_counts, { total: 10, completed: 10, failed: 0 });
    const output = byCustomId(await linesOf(client, done.output_file_id));
    assert.deepEqual([...output.keys()].sort(), Array.from({ length: 10 }, (_, i) => `k${i}`).sort());
    let rows: Awaited<ReturnType<typeof batchRows>> = [];
    // A row the killed worker's writer had read but not written is claimed by another writer once idle 30 s.
    await waitFor(async () => (rows = await batchRows(redis, made.id)).length >= 10, 60_000, 'ten rows');
    assert.equal(rows.length, 10, 'one usage row per request');
    assert.equal(new Set(rows.map((row) => row.request_id)).size, 10);
    await waitFor(async () => (await readBill(redis, account))!.reservedMicros === 0, 10_000, 'no reservation left');
    assert.equal(
      (await readBill(redis, account))!.balanceMicros,
      10_000_000 - rows.reduce((sum, row) => sum + Number(row.cost_micros), 0),
    );
  });

  it(
    'writes the files of a batch that ended with no api to hear it, once the lease of an api that died writing ' +
      'them is out',
    async () => {
      for (const process of processes.splice(0)) await process.stop('SIGKILL');
      const { key } = await paidAccountKey(redis, 10_000_000);
      const first = await startGateway({ role: 'api', env: env() });
      processes.push(first, await startGateway({ role: 'worker', env: env() }));
      const input = await upload(
        first.client(key),
        Array.from({ length: 12 }, (_, i) => chat(`f${i}`, 'gpt-4o-mini', `Finalized later ${i}`)),
      );
      const made = await first
        .client(key)
        .batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      await waitFor(
        async () => Number(await redis.hget(batchKey(made.id), 'succeeded')) >= 1,
        15_000,
        'the first answer',
      );
      // The only api goes; the worker runs every line (all queued: one window) and ends the batch with nobody to write
      // its files.
      await first.stop('SIGKILL');
      await waitFor(
        async () => (await readBatch(redis, made.id))?.status === 'ended',
        30_000,
        'the batch ended by the worker',
      );
      // What an api SIGKILLed while writing them leaves: the writing lease, for what is left of it.
      await redis.set(batchFinalizeLeaseKey(made.id), '1', 'PX', 8000);
      const second = await startGateway({ role: 'api', env: env() });
      processes.push(second);
      const client = second.client(key);
      assert.equal((await client.batches.retrieve(made.id)).status, 'finalizing', 'ended, its files not yet written');
      const done = await settled(client, made.id, 30_000);
      assert.equal(done.status, 'completed');
      assert.deepEqual(done.request_counts, { total: 12, completed: 12, failed: 0 });
      const output = byCustomId(await linesOf(client, done.output_file_id));
      assert.deepEqual([...output.keys()].sort(), Array.from({ length: 12 }, (_, i) => `f${i}`).sort());
      await rowsBilled(redis, made.id, 12);
    },
  );

  it('reads the file again of a batch whose api died while validating it (its lease out), and runs it once', async () => {
    for (const process of processes.splice(0)) await process.stop('SIGKILL');
    const { key, account, id: keyId } = await paidAccountKey(redis, 10_000_000);
    const gateway = await startGateway({ env: env() });
    processes.push(gateway);
    const client = gateway.client(key);
    const input = await upload(
      client,
      Array.from({ length: 3 }, (_, i) => chat(`v${i}`, 'gpt-4o-mini', `Validated again ${i}`)),
    );
    // What an api SIGKILLed mid-validation leaves: the batch validating, its lease run out.
    const id = `batch_${'ab'.repeat(16)}`;
    const created = Date.now();
    await createValidatingBatch(
      redis,
      {
        id,
        accountId: account,
        keyId,
        created,
        expires: created + 86_400_000,
        endpoint: '/v1/chat/completions',
        inputFileId: input.id,
        metadata: null,
        outputExpiresAfter: null,
        access: {},
      },
      60_000,
    );
    await redis.del(batchIntakeKey(id));
    assert.equal((await client.batches.retrieve(id)).status, 'validating');
    const done = await settled(client, id, 20_000);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.request_counts, { total: 3, completed: 3, failed: 0 });
    assert.equal((await linesOf(client, done.output_file_id)).length, 3);
    assert.ok(
      gateway.logs.some((row) => row.includes('its file is read again')),
      'the sweep said what it did',
    );
    assert.equal(
      openai.requests.filter((r) => lastUserText(r).includes('Validated again')).length,
      3,
      'each line called once',
    );
  });

  it(
    'expires what has not run by the deadline: the batch `expired`, its finished lines in the output, the rest ' +
      '`batch_expired`, none of it billed',
    async () => {
      for (const process of processes.splice(0)) await process.stop('SIGKILL');
      const { key, account } = await paidAccountKey(redis, 10_000_000);
      const gateway = await startGateway({ env: { ...env(), BATCH_DEADLINE_S: '2' } });
      processes.push(gateway);
      const client = gateway.client(key);
      const input = await upload(
        client,
        Array.from({ length: 30 }, (_, i) => chat(`e${i}`, 'gpt-4o-mini', `Expiring ${i}`)),
      );
      const made = await client.batches.create({
        input_file_id: input.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      });
      assert.equal(made.expires_at! - made.created_at, 2);
      const done = await settled(client, made.id, 20_000);
      assert.equal(done.status, 'expired');
      assert.ok(done.expired_at);
      const completed = done.request_counts!.completed;
      const output = completed > 0 ? await linesOf(client, done.output_file_id) : [];
      assert.equal(output.length, completed);
      const errors = await linesOf(client, done.error_file_id);
      assert.ok(errors.length >= 10, `most never ran: ${JSON.stringify(done.request_counts)}`);
      assert.equal(output.length + errors.length, 30);
      assert.ok(errors.every((found) => found.error?.code === 'batch_expired'));
      let rows: Awaited<ReturnType<typeof batchRows>> = [];
      await waitFor(async () => (rows = await batchRows(redis, made.id)).length >= completed, 10_000, 'rows');
      assert.equal(rows.length, completed, 'expired requests have no usage row');
      await waitFor(async () => (await readBill(redis, account))!.reservedMicros === 0, 10_000, 'no reservation left');
      assert.equal(
        (await readBill(redis, account))!.balanceMicros,
        10_000_000 - rows.reduce((sum, row) => sum + Number(row.cost_micros), 0),
      );
    },
  );
});
