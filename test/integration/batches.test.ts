import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { Queue } from 'bullmq';
import Anthropic from '@anthropic-ai/sdk';
import { readBill } from '../../shared/money/billing.js';
import {
  freshRedis,
  paidAccountKey,
  paidKeyIn,
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
import { chatStreamSse } from '../support/fake-openai-defaults.js';
import { laneQueueName } from '../../shared/queues.js';
import { removeWaitingJob } from '../../shared/scheduling/index.js';
import { accountBatchesKey, batchKey } from '../../shared/redis-keys.js';

type BatchRequest = Anthropic.Messages.Batches.BatchCreateParams.Request;

const ask = (customId: string, model: string, text: string, maxTokens = 64): BatchRequest => ({
  custom_id: customId,
  params: { model, max_tokens: maxTokens, messages: [{ role: 'user', content: text }] },
});
const lastUserText = (request: RecordedRequest) =>
  JSON.stringify((request.body as { messages?: unknown[] }).messages ?? '');

async function ended(
  client: Anthropic,
  id: string,
  timeoutMs = 30_000,
): Promise<Anthropic.Messages.Batches.MessageBatch> {
  let batch: Anthropic.Messages.Batches.MessageBatch | undefined;
  await waitFor(
    async () => (batch = await client.messages.batches.retrieve(id)).processing_status === 'ended',
    timeoutMs,
    `batch ${id} to end`,
  );
  return batch!;
}

async function resultsOf(
  client: Anthropic,
  id: string,
): Promise<Map<string, Anthropic.Messages.Batches.MessageBatchResult>> {
  const results = new Map<string, Anthropic.Messages.Batches.MessageBatchResult>();
  for await (const line of await client.messages.batches.results(id)) {
    assert.ok(!results.has(line.custom_id), `${line.custom_id} has one result`);
    results.set(line.custom_id, line.result);
  }
  return results;
}

/** The settled usage rows of a batch's requests (request ids `<batch>.<index>`), as the record has them. */
async function batchRows(redis: Redis, id: string) {
  return (await usageRows(redis)).filter((row) => row.settled && row.request_id.startsWith(`${id}.`));
}

describe('Message Batches (/v1/messages/batches) with the official Anthropic SDK against strict vendor fakes', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let vendorGateway: VendorGateway;
  let client: Anthropic;
  let account: string;
  let apiKey: string;
  const balance = 50_000_000;

  before(async () => {
    vendorGateway = await startVendorGateway({
      db: 11,
      env: {
        // OpenAI's requests wait in a lane of two at a time: a batch of slow requests is still running when it is
        // canceled.
        OPENAI_MAX_CONCURRENCY: '2',
        BATCH_MAX_REQUESTS: '40',
        BATCH_MAX_BYTES: '65536',
        BATCH_MAX_OPEN: '3',
        BATCH_SWEEP_INTERVAL_S: '1',
        // Four of a batch's requests queued at once (twice OpenAI's cap of two).
        BATCH_WINDOW: '4',
      },
      prepare: async (ready) => {
        ({ openai, anthropic, redis } = ready);
        // A request that asks to fail is refused by the vendor, a slow one takes 400 ms (refusedOrSlow), a brief one 50
        // ms.
        openai.setDefault((request) => {
          const text = lastUserText(request);
          const answer = refusedOrSlow(text);
          if (answer) return answer;
          if (text.includes('briefly')) return { delayMs: 50 };
          // Used all it may: 2,000 tokens out.
          if (text.includes('Count to'))
            return (request.body as { stream?: boolean }).stream
              ? {
                  sse: chatStreamSse(
                    Array.from({ length: 2_000 }, () => 'x'),
                    { usage: true },
                  ),
                }
              : {
                  json: {
                    id: 'chatcmpl-count',
                    object: 'chat.completion',
                    created: 1,
                    model: 'gpt-4o-mini',
                    choices: [
                      {
                        index: 0,
                        message: { role: 'assistant', content: 'x', refusal: null },
                        finish_reason: 'length',
                        logprobs: null,
                      },
                    ],
                    usage: { prompt_tokens: 9, completion_tokens: 2_000, total_tokens: 2_009 },
                  },
                };
          return undefined;
        });
        ({ key: apiKey, account } = await paidAccountKey(redis, balance));
      },
    });
    gateway = vendorGateway.gateway;
    client = new Anthropic({ apiKey, baseURL: gateway.url, maxRetries: 0, timeout: 20_000 });
  });

  after(async () => {
    await vendorGateway?.close();
  });

  it(
    'runs a batch across three vendors: each result once, a vendor’s refusal errored among successes, billed once ' +
      'at the flex price',
    async () => {
      const start = (await readBill(redis, account))!.balanceMicros!;
      const made = await client.messages.batches.create({
        requests: [
          ask('openai-1', 'gpt-4o-mini', 'Hello OpenAI'),
          ask('anthropic-1', 'claude-sonnet-4-5', 'Hello Anthropic'),
          ask('gemini-1', 'gemini-2.5-flash', 'Hello Gemini'),
          ask('refused', 'gpt-4o-mini', 'please fail'),
        ],
      });
      assert.match(made.id, /^msgbatch_[A-Za-z0-9]{24}$/);
      assert.equal(made.type, 'message_batch');
      assert.equal(made.processing_status, 'in_progress');
      assert.equal(made.request_counts.processing, 4);
      assert.equal(made.results_url, null);
      assert.ok(
        Date.parse(made.expires_at) - Date.parse(made.created_at) === 86_400_000,
        'expires 24 h after it was made',
      );

      const done = await ended(client, made.id);
      assert.deepEqual(done.request_counts, { processing: 0, succeeded: 3, errored: 1, canceled: 0, expired: 0 });
      assert.ok(done.ended_at && done.results_url?.endsWith(`/v1/messages/batches/${made.id}/results`));

      const results = await resultsOf(client, made.id);
      assert.deepEqual([...results.keys()].sort(), ['anthropic-1', 'gemini-1', 'openai-1', 'refused']);
      const text = (id: string) => {
        const result = results.get(id)!;
        assert.equal(result.type, 'succeeded', `${id}: ${JSON.stringify(result)}`);
        const message = (result as Anthropic.Messages.Batches.MessageBatchSucceededResult).message;
        assert.equal(message.type, 'message');
        assert.equal(message.role, 'assistant');
        return (message.content[0] as Anthropic.TextBlock).text;
      };
      assert.ok(text('openai-1').length > 0);
      assert.equal(text('anthropic-1'), FAKE_ANTHROPIC_TEXT);
      assert.equal(text('gemini-1'), FAKE_GEMINI_TEXT);
      const refused = results.get('refused')!;
      assert.equal(refused.type, 'errored');
      assert.equal(
        (refused as Anthropic.Messages.Batches.MessageBatchErroredResult).error.error.type,
        'invalid_request_error',
      );
      // Each vendor was called once per request (the refused one once: a vendor's 400 is not retried), Anthropic
      // natively.
      assert.equal(anthropic.requests.filter((r) => JSON.stringify(r.body).includes('Hello Anthropic')).length, 1);
      assert.equal(openai.requests.filter((r) => lastUserText(r).includes('please fail')).length, 1);

      // Billed once each at the flex price: half of what the same request costs served at once.
      const direct = await client.messages
        .create({ model: 'gpt-4o-mini', max_tokens: 64, messages: [{ role: 'user', content: 'Hello OpenAI' }] })
        .withResponse();
      const directCost = (await requestRecord(gateway.url, apiKey, direct.response.headers.get('request-id')!))
        .cost_micros;
      let rows: Awaited<ReturnType<typeof batchRows>> = [];
      await waitFor(async () => (rows = await batchRows(redis, made.id)).length >= 4, 10_000, 'the batch’s usage rows');
      assert.equal(new Set(rows.map((row) => row.request_id)).size, rows.length, 'one row per request');
      assert.equal(rows.length, 4);
      for (const row of rows) assert.equal(row.service_tier, 'flex');
      const openaiRow = rows.find((row) => row.request_id === `${made.id}.0`)!;
      assert.ok(directCost > 0);
      assert.ok(
        Math.abs(Number(openaiRow.cost_micros) * 2 - directCost) <= 1,
        `flex ${openaiRow.cost_micros} is half of ${directCost}`,
      );
      const batchCost = rows.reduce((sum, row) => sum + Number(row.cost_micros), 0);
      const after = (await readBill(redis, account))!;
      assert.equal(after.balanceMicros, start - batchCost - directCost, 'the balance moved by what the rows say, once');
      assert.equal(after.reservedMicros, 0);
      // The request log has each request under its batch.
      const found = await fetch(`${gateway.url}/v1/generation?id=${made.id}.1`, {
        headers: { authorization: `Bearer ${apiKey}` },
      });
      assert.equal(found.status, 200);
      const logged = (
        (await found.json()) as { data: { model: string; batch_id: string | null; service_tier: string } }
      ).data;
      assert.equal(logged.service_tier, 'flex');
      assert.equal(logged.model, 'claude-sonnet-4-5');
      assert.equal(logged.batch_id, made.id);

      // Listed (newest first, paged), and deleted once ended.
      const listed: string[] = [];
      for await (const batch of client.messages.batches.list({ limit: 1 })) listed.push(batch.id);
      assert.ok(listed.includes(made.id));
      const deleted = await client.messages.batches.delete(made.id);
      assert.deepEqual(deleted, { id: made.id, type: 'message_batch_deleted' });
      await assert.rejects(client.messages.batches.retrieve(made.id), Anthropic.NotFoundError);
    },
  );

  it('cancels a batch mid-way: what ran is kept and billed, what waited is canceled and costs nothing', async () => {
    const start = (await readBill(redis, account))!.balanceMicros!;
    const made = await client.messages.batches.create({
      requests: Array.from({ length: 12 }, (_, i) => ask(`slow-${i}`, 'gpt-4o-mini', `Answer slowly ${i}`)),
    });
    await waitFor(
      async () => (await client.messages.batches.retrieve(made.id)).request_counts.succeeded >= 2,
      15_000,
      'two answers',
    );
    const canceling = await client.messages.batches.cancel(made.id);
    assert.ok(canceling.processing_status === 'canceling' || canceling.processing_status === 'ended');
    assert.ok(canceling.cancel_initiated_at);
    const done = await ended(client, made.id);
    const counts = done.request_counts;
    assert.equal(counts.succeeded + counts.canceled, 12, JSON.stringify(counts));
    assert.ok(counts.canceled >= 6, `most were still waiting: ${JSON.stringify(counts)}`);
    const results = await resultsOf(client, made.id);
    assert.equal(results.size, 12);
    assert.equal([...results.values()].filter((r) => r.type === 'canceled').length, counts.canceled);
    // Only what ran is billed.
    let rows: Awaited<ReturnType<typeof batchRows>> = [];
    await waitFor(
      async () => (rows = await batchRows(redis, made.id)).length >= counts.succeeded,
      10_000,
      'the rows of what ran',
    );
    assert.equal(rows.length, counts.succeeded, 'canceled requests have no usage row');
    const after = (await readBill(redis, account))!;
    assert.equal(after.balanceMicros, start - rows.reduce((sum, row) => sum + Number(row.cost_micros), 0));
    assert.equal(after.reservedMicros, 0);
  });

  it(
    'shares one account’s turns between its batches: a batch made second is not served after the whole first, and ' +
      'only a window of each is queued',
    async () => {
      const size = 24;
      const made = async (tag: string) =>
        client.messages.batches.create({
          requests: Array.from({ length: size }, (_, i) =>
            ask(`${tag}-${i}`, 'gpt-4o-mini', `Answer briefly ${tag}${i}.`),
          ),
        });
      const calls = () => openai.requests.map(lastUserText).filter((text) => text.includes('briefly'));
      const before = calls().length;
      const lane = `bull:${laneQueueName('openai')}:prioritized`;
      let mostQueued = 0;
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          mostQueued = Math.max(mostQueued, await redis.zcard(lane));
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      })();
      const first = await made('A');
      const second = await made('B');
      const [doneFirst, doneSecond] = await Promise.all([ended(client, first.id), ended(client, second.id)]);
      sampling = false;
      await sampler;
      assert.equal(doneFirst.request_counts.succeeded, size);
      assert.equal(doneSecond.request_counts.succeeded, size);
      const order = calls()
        .slice(before)
        .map((text) => (text.includes('briefly A') ? 'A' : 'B'));
      assert.equal(order.length, 2 * size, 'each request called once');
      // Served in turns once both wait: in the calls made while the first still had half of its requests to go, the
      // second has about as many (in order, first come first served, it would have none).
      const early = order.slice(0, size);
      const secondEarly = early.filter((batch) => batch === 'B').length;
      assert.ok(
        secondEarly >= size / 3,
        `the second batch had ${secondEarly} of the first ${size} calls: ${order.join('')}`,
      );
      assert.ok(mostQueued <= 2 * 4, `at most a window of each batch waits as jobs (saw ${mostQueued})`);
      assert.ok(mostQueued > 0, 'the sampler saw the queue');
    },
  );

  it('refuses a batch whole, naming the request, when one request is invalid, and keeps batches to their account', async () => {
    const refusal = async (body: unknown) => {
      const response = await fetch(`${gateway.url}/v1/messages/batches`, {
        method: 'POST',
        headers: { 'x-api-key': apiKey, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
      return {
        status: response.status,
        body: (await response.json()) as { type: string; error: { type: string; message: string } },
      };
    };
    const countBefore = (await client.messages.batches.list({ limit: 100 })).data.length;
    const invalid = await refusal({
      requests: [
        ask('ok', 'gpt-4o-mini', 'fine'),
        {
          custom_id: 'bad',
          params: { model: 'gpt-4o-mini', max_tokens: 0, messages: [{ role: 'user', content: 'x' }] },
        },
      ],
    });
    assert.equal(invalid.status, 400);
    assert.equal(invalid.body.type, 'error');
    assert.equal(invalid.body.error.type, 'invalid_request_error');
    assert.match(invalid.body.error.message, /^requests\.1: .*max_tokens/);
    assert.equal(
      (await refusal({ requests: [ask('same', 'gpt-4o-mini', 'a'), ask('same', 'gpt-4o-mini', 'b')] })).status,
      400,
    );
    assert.match(
      (
        await refusal({
          requests: [
            {
              custom_id: 's',
              params: { model: 'gpt-4o-mini', max_tokens: 5, stream: true, messages: [{ role: 'user', content: 'x' }] },
            },
          ],
        })
      ).body.error.message,
      /cannot stream/,
    );
    assert.match((await refusal({ requests: [ask('m', 'no-such-model', 'x')] })).body.error.message, /^requests\.0: /);
    assert.match((await refusal({ requests: [] })).body.error.message, /at least one/);
    assert.match((await refusal({ requests: [ask('a', 'gpt-4o-mini', 'x')], extra: 1 })).body.error.message, /extra/);
    assert.equal((await refusal('{"requests": [{"custom_id": "a", "params": {}},]}')).status, 400);
    assert.equal((await refusal('{"requests": [{"custom_id": "a", "params": {"model": "gpt-4o-mini"')).status, 400);
    assert.match((await refusal({ requests: [1, 2] })).body.error.message, /must be an object/);
    assert.match(
      (await refusal({ requests: Array.from({ length: 41 }, (_, i) => ask(`n${i}`, 'gpt-4o-mini', 'x')) })).body.error
        .message,
      /at most 40/,
    );
    assert.equal((await refusal({ requests: [ask('big', 'gpt-4o-mini', 'x'.repeat(70_000))] })).status, 413);
    assert.equal(
      (await client.messages.batches.list({ limit: 100 })).data.length,
      countBefore,
      'no batch was made by a refused one',
    );

    // Another account sees none of this account's batches; one in progress is not deleted; results wait for its end.
    const made = await client.messages.batches.create({
      requests: [ask('slow', 'gpt-4o-mini', 'Answer slowly please')],
    });
    const other = new Anthropic({
      apiKey: (await paidAccountKey(redis, 1_000_000)).key,
      baseURL: gateway.url,
      maxRetries: 0,
    });
    await assert.rejects(other.messages.batches.retrieve(made.id), Anthropic.NotFoundError);
    await assert.rejects(other.messages.batches.cancel(made.id), Anthropic.NotFoundError);
    assert.equal((await other.messages.batches.list()).data.length, 0);
    await assert.rejects(client.messages.batches.delete(made.id), Anthropic.BadRequestError);
    await assert.rejects(client.messages.batches.retrieve('msgbatch_nope'), Anthropic.NotFoundError);
    await ended(client, made.id);
  });

  it(
    'shows a key limited to models only its account’s batches whose every model it may use: any other is a 404 to ' +
      'it, and left out of its list',
    async () => {
      // One account, three keys: A with no model limit, B limited to gpt-4o-mini, C to claude-sonnet-4-5.
      const keys = await testKeyStore(redis);
      const a = await paidKeyIn(keys, 10_000_000);
      const keyed = (key: string) => new Anthropic({ apiKey: key, baseURL: gateway.url, maxRetries: 0 });
      const clientA = keyed(a.key);
      const bKey = (await keys.create('b', { accountId: a.account, models: ['gpt-4o-mini'] })).key;
      const clientB = keyed(bKey);
      const clientC = keyed((await keys.create('c', { accountId: a.account, models: ['claude-sonnet-4-5'] })).key);
      const other = keyed((await paidAccountKey(redis, 1_000_000)).key);
      // Made second, the batch B may not see is the newest: B's pages of one must read past it.
      const onlyX = await clientA.messages.batches.create({
        requests: [ask('x-1', 'gpt-4o-mini', 'Hello X'), ask('x-2', 'gpt-4o-mini', 'Hello X again')],
      });
      const both = await clientA.messages.batches.create({
        requests: [ask('x', 'gpt-4o-mini', 'Hello X'), ask('y', 'claude-sonnet-4-5', 'Hello Y')],
      });
      await Promise.all([ended(clientA, onlyX.id), ended(clientA, both.id)]);

      const listed = async (client: Anthropic) => {
        const ids: string[] = [];
        for await (const batch of client.messages.batches.list({ limit: 1 })) ids.push(batch.id);
        return ids;
      };
      const notFound = async (call: Promise<unknown>, what: string) => {
        const error = await call.then(
          () => undefined,
          (thrown: unknown) => thrown,
        );
        assert.ok(error instanceof Anthropic.NotFoundError, `${what}: ${String(error)}`);
        assert.equal((error.error as { error: { type: string } }).error.type, 'not_found_error', what);
      };
      // The results path itself (the SDK reads the batch first, which would answer before it).
      const rawResults = async (key: string, id: string) => {
        const response = await fetch(`${gateway.url}/v1/messages/batches/${id}/results`, {
          headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01' },
        });
        return { status: response.status, text: await response.text() };
      };

      // A sees both, newest first.
      assert.deepEqual(await listed(clientA), [both.id, onlyX.id]);
      assert.equal((await clientA.messages.batches.retrieve(both.id)).id, both.id);

      // B sees the batch of its model alone: retrieved, listed (paged: the page after the hidden one is not empty), read.
      assert.equal((await clientB.messages.batches.retrieve(onlyX.id)).processing_status, 'ended');
      assert.deepEqual(await listed(clientB), [onlyX.id]);
      const firstPage = await clientB.messages.batches.list({ limit: 1 });
      assert.deepEqual(
        [firstPage.data.map((batch) => batch.id), firstPage.has_more, firstPage.first_id, firstPage.last_id],
        [[onlyX.id], false, onlyX.id, onlyX.id],
      );
      assert.deepEqual(
        (await clientB.messages.batches.list({ before_id: onlyX.id })).data,
        [],
        'the newer batch it may not see is not before it either',
      );
      assert.deepEqual([...(await resultsOf(clientB, onlyX.id)).keys()].sort(), ['x-1', 'x-2']);
      // …and the batch that also uses a model it may not use is as one of another account: 404 for each of its paths.
      await notFound(clientB.messages.batches.retrieve(both.id), 'B retrieves');
      await notFound(clientB.messages.batches.results(both.id), 'B reads the results');
      const raw = await rawResults(bKey, both.id);
      assert.equal(raw.status, 404, raw.text);
      assert.equal((JSON.parse(raw.text) as { error: { type: string } }).error.type, 'not_found_error');
      assert.equal((await rawResults(a.key, both.id)).status, 200);
      await notFound(clientB.messages.batches.cancel(both.id), 'B cancels');
      await notFound(clientB.messages.batches.delete(both.id), 'B deletes');

      // C may use one of the second batch's models, not both: it sees neither.
      assert.deepEqual(await listed(clientC), []);
      for (const id of [onlyX.id, both.id]) {
        await notFound(clientC.messages.batches.retrieve(id), `C retrieves ${id}`);
        await notFound(clientC.messages.batches.delete(id), `C deletes ${id}`);
      }
      // Another account sees neither.
      assert.deepEqual(await listed(other), []);
      await notFound(other.messages.batches.retrieve(onlyX.id), 'another account retrieves');

      // Nothing B or C did touched the batches: A still has both, and deletes them.
      assert.deepEqual(await listed(clientA), [both.id, onlyX.id]);
      for (const id of [both.id, onlyX.id])
        assert.deepEqual(await clientA.messages.batches.delete(id), { id, type: 'message_batch_deleted' });
    },
  );

  it('holds an account to BATCH_MAX_OPEN batches in progress at once, and lets it make more as they end', async () => {
    const open = await Promise.all(
      [1, 2, 3].map((n) =>
        client.messages.batches.create({ requests: [ask(`open-${n}`, 'gpt-4o-mini', `Answer slowly ${n}`)] }),
      ),
    );
    const refused = await client.messages.batches.create({ requests: [ask('one-more', 'gpt-4o-mini', 'x')] }).then(
      () => undefined,
      (error: unknown) => error,
    );
    assert.ok(refused instanceof Anthropic.RateLimitError, String(refused));
    assert.equal((refused.error as { error: { type: string } }).error.type, 'rate_limit_error');
    for (const batch of open) await ended(client, batch.id);
    const later = await client.messages.batches.create({ requests: [ask('later', 'gpt-4o-mini', 'x')] });
    assert.equal((await ended(client, later.id)).request_counts.succeeded, 1);
  });

  it('refuses requests one by one once the account’s balance cannot cover them, and never spends past it', async () => {
    // Each request may cost up to its reservation; the vendor says it used all of max_tokens.
    const poor = await paidAccountKey(redis, 2_000);
    const poorClient = new Anthropic({ apiKey: poor.key, baseURL: gateway.url, maxRetries: 0 });
    const made = await poorClient.messages.batches.create({
      requests: Array.from({ length: 8 }, (_, i) => ask(`p${i}`, 'gpt-4o-mini', `Count to ${i}`, 2_000)),
    });
    const done = await ended(poorClient, made.id);
    const results = await resultsOf(poorClient, made.id);
    const errored = [...results.values()].filter(
      (r) => r.type === 'errored',
    ) as Anthropic.Messages.Batches.MessageBatchErroredResult[];
    assert.ok(errored.length >= 1, `some were refused: ${JSON.stringify(done.request_counts)}`);
    for (const result of errored) assert.equal(result.error.error.type, 'billing_error', JSON.stringify(result));
    assert.equal(done.request_counts.succeeded + errored.length, 8);
    const bill = (await readBill(redis, poor.account))!;
    assert.ok(bill.balanceMicros! >= 0, `never below zero: ${bill.balanceMicros}`);
    assert.equal(bill.reservedMicros, 0);
    let rows: Awaited<ReturnType<typeof batchRows>> = [];
    await waitFor(
      async () => (rows = await batchRows(redis, made.id)).length >= done.request_counts.succeeded,
      10_000,
      'rows',
    );
    assert.equal(rows.length, done.request_counts.succeeded, 'a refused request is not billed');
    assert.equal(bill.balanceMicros, 2_000 - rows.reduce((sum, row) => sum + Number(row.cost_micros), 0));
  });
});

describe('Message Batches across faults: a worker killed mid-batch, a batch past its deadline', () => {
  const processes: GatewayProcess[] = [];
  let redis: Redis;
  let url: string;
  let openai: FakeOpenAI;

  before(async () => {
    // Every chat answer takes 300 ms: a batch is under way long enough to kill its worker, or to outlive its deadline.
    openai = await startFakeOpenAI({ latencyMs: 300 });
    const fresh = await freshRedis(12);
    redis = fresh.redis;
    url = fresh.url;
  });

  after(async () => {
    await Promise.all(processes.splice(0).map((p) => p.stop('SIGKILL')));
    await openai?.close();
    redis?.disconnect();
  });

  // A dead worker's jobs run again after WORKER_LOCK_MS, and the vendor slots it held free after VENDOR_LEASE_MS.
  const env = () => ({
    REDIS_URL: url,
    OPENAI_API_KEY: 'sk-openai-test',
    OPENAI_BASE_URL: openai.url,
    OPENAI_MAX_CONCURRENCY: '2',
    WORKER_LOCK_MS: '2000',
    VENDOR_LEASE_MS: '3000',
    BATCH_SWEEP_INTERVAL_S: '1',
  });

  it('loses nothing and bills nothing twice when the worker running a batch is SIGKILLed and another takes over', async () => {
    const { key, account } = await paidAccountKey(redis, 10_000_000);
    const api = await startGateway({ role: 'api', env: env() });
    processes.push(api);
    const doomed = await startGateway({ role: 'worker', env: env() });
    processes.push(doomed);
    const client = new Anthropic({ apiKey: key, baseURL: api.url, maxRetries: 0 });
    const made = await client.messages.batches.create({
      requests: Array.from({ length: 10 }, (_, i) => ask(`k${i}`, 'gpt-4o-mini', `Question ${i}`)),
    });
    await waitFor(
      async () => (await client.messages.batches.retrieve(made.id)).request_counts.succeeded >= 2,
      15_000,
      'two answers',
    );
    await doomed.stop('SIGKILL');
    processes.push(await startGateway({ role: 'worker', env: env() }));
    const done = await ended(client, made.id, 60_000);
    assert.deepEqual(done.request_counts, { processing: 0, succeeded: 10, errored: 0, canceled: 0, expired: 0 });
    const results = await resultsOf(client, made.id);
    assert.deepEqual([...results.keys()].sort(), Array.from({ length: 10 }, (_, i) => `k${i}`).sort());
    let rows: Awaited<ReturnType<typeof batchRows>> = [];
    // A row the killed worker's writer had read but not written is claimed by another writer once idle 30 s.
    await waitFor(async () => (rows = await batchRows(redis, made.id)).length >= 10, 60_000, 'ten rows');
    assert.equal(rows.length, 10, 'one usage row per request');
    assert.equal(new Set(rows.map((row) => row.request_id)).size, 10);
    const bill = (await readBill(redis, account))!;
    assert.equal(bill.balanceMicros, 10_000_000 - rows.reduce((sum, row) => sum + Number(row.cost_micros), 0));
    await waitFor(async () => (await readBill(redis, account))!.reservedMicros === 0, 10_000, 'no reservation left');
  });

  it(
    'queues again a request let into the queue whose job never arrived (its api died between the two), and runs it ' +
      'once',
    async () => {
      for (const process of processes.splice(0)) await process.stop('SIGKILL');
      const { key } = await paidAccountKey(redis, 10_000_000);
      // The api alone first: the batch's jobs wait, and one is taken out as an api dying at the wrong moment leaves it.
      const api = await startGateway({ role: 'api', env: { ...env(), BATCH_WINDOW: '3' } });
      processes.push(api);
      const client = new Anthropic({ apiKey: key, baseURL: api.url, maxRetries: 0 });
      const made = await client.messages.batches.create({
        requests: Array.from({ length: 6 }, (_, i) => ask(`l${i}`, 'gpt-4o-mini', `Lost and found ${i}`)),
      });
      const lane = new Queue(laneQueueName('openai'), { connection: redis });
      try {
        const queued = (await lane.getJobs(['prioritized', 'wait'])).filter((job) => job.id?.startsWith(`${made.id}.`));
        // BATCH_WINDOW is 3, raised to twice the lane's cap of two.
        assert.deepEqual(
          queued.map((job) => job.id).sort(),
          [0, 1, 2, 3].map((i) => `${made.id}.${i}`),
          'a window of four queued',
        );
        assert.ok(await removeWaitingJob(redis, lane, `${made.id}.1`));
        const calledBefore = openai.requests.filter((r) => lastUserText(r).includes('Lost and found')).length;
        processes.push(await startGateway({ role: 'worker', env: env() }));
        const done = await ended(client, made.id, 30_000);
        assert.deepEqual(done.request_counts, { processing: 0, succeeded: 6, errored: 0, canceled: 0, expired: 0 });
        const results = await resultsOf(client, made.id);
        assert.equal(results.get('l1')?.type, 'succeeded');
        const calls = openai.requests.filter((r) => lastUserText(r).includes('Lost and found'));
        assert.equal(calls.length - calledBefore, 6, 'each request called once');
        assert.ok(
          api.logs.some((line) => line.includes('queued again')),
          'the sweep said it queued one again',
        );
      } finally {
        await lane.close();
      }
    },
  );

  it('goes on when no api heard its worker ask for a refill: the next api’s sweep fills the window', async () => {
    for (const process of processes.splice(0)) await process.stop('SIGKILL');
    const { key } = await paidAccountKey(redis, 10_000_000);
    // A window of four (BATCH_WINDOW 1, raised to twice the lane's cap of two).
    const first = await startGateway({ role: 'api', env: { ...env(), BATCH_WINDOW: '1' } });
    processes.push(first);
    const made = await new Anthropic({ apiKey: key, baseURL: first.url, maxRetries: 0 }).messages.batches.create({
      requests: Array.from({ length: 10 }, (_, i) => ask(`w${i}`, 'gpt-4o-mini', `Window ${i}`)),
    });
    // No api while the worker runs the first window (four: twice the cap) and asks for more.
    await first.stop('SIGKILL');
    processes.push(await startGateway({ role: 'worker', env: env() }));
    await waitFor(
      async () => Number(await redis.hget(batchKey(made.id), 'succeeded')) === 4,
      15_000,
      'the first window answered',
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(Number(await redis.hget(batchKey(made.id), 'succeeded')), 4, 'nothing more ran without an api');
    const api = await startGateway({ role: 'api', env: { ...env(), BATCH_WINDOW: '1' } });
    processes.push(api);
    const done = await ended(new Anthropic({ apiKey: key, baseURL: api.url, maxRetries: 0 }), made.id, 30_000);
    assert.deepEqual(done.request_counts, { processing: 0, succeeded: 10, errored: 0, canceled: 0, expired: 0 });
  });

  it(
    'cancels a batch whose api was SIGKILLed while storing its requests (its client had no answer): what was not ' +
      'run is canceled, what ran is billed once',
    async () => {
      for (const process of processes.splice(0)) await process.stop('SIGKILL');
      const { key, account } = await paidAccountKey(redis, 10_000_000);
      // A batch big enough that its requests are stored over many round trips, and a second api whose sweep finds it.
      const apiEnv = { ...env(), BATCH_WINDOW: '1', BATCH_MAX_REQUESTS: '30000' };
      const [doomed, survivor, worker] = await Promise.all([
        startGateway({ role: 'api', env: apiEnv }),
        startGateway({ role: 'api', env: apiEnv }),
        startGateway({ role: 'worker', env: env() }),
      ]);
      processes.push(doomed, survivor, worker);
      const total = 30_000;
      const body = JSON.stringify({
        requests: Array.from({ length: total }, (_, i) => ask(`i${i}`, 'gpt-4o-mini', `Intake ${i}`)),
      });
      // A raw POST (an SDK would send the batch again when the connection drops, as a client may).
      const posted = fetch(`${doomed.url}/v1/messages/batches`, {
        method: 'POST',
        headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
        body,
      }).then(
        (response) => `answered ${response.status}`,
        () => 'dropped',
      );
      let id: string | undefined;
      await waitFor(
        async () =>
          (id ??= (await redis.zrange(accountBatchesKey(account), '0', '-1'))[0]) !== undefined &&
          Number(await redis.hget(batchKey(id), 'stored')) > 0,
        30_000,
        'the batch being stored',
      );
      await doomed.stop('SIGKILL');
      assert.equal(await posted, 'dropped', 'its client had no answer');
      const storedAtKill = Number(await redis.hget(batchKey(id!), 'stored'));
      assert.ok(storedAtKill < total, `killed mid-way (${storedAtKill} stored)`);
      const client = new Anthropic({ apiKey: key, baseURL: survivor.url, maxRetries: 0 });
      // The intake's lease (15 s) runs out, then the survivor's next sweep (every second) cancels the batch.
      const done = await ended(client, id!, 45_000);
      const counts = done.request_counts;
      assert.equal(counts.succeeded + counts.canceled, total, JSON.stringify(counts));
      assert.ok(
        counts.canceled >= total - storedAtKill,
        `every request not stored is canceled: ${JSON.stringify(counts)}`,
      );
      assert.ok(done.cancel_initiated_at !== null, 'ended as a cancel');
      assert.ok(
        survivor.logs.some((line) => line.includes('stopped while storing')),
        'the sweep said why',
      );
      const results = await resultsOf(client, id!);
      assert.equal(results.size, total, 'a result for each request');
      assert.ok(results.has(`#${total - 1}`), 'a request never stored is named by its index');
      let rows: Awaited<ReturnType<typeof batchRows>> = [];
      await waitFor(async () => (rows = await batchRows(redis, id!)).length >= counts.succeeded, 10_000, 'rows');
      assert.equal(rows.length, counts.succeeded, 'canceled requests have no usage row');
      await waitFor(async () => (await readBill(redis, account))!.reservedMicros === 0, 10_000, 'no reservation left');
      assert.equal(
        (await readBill(redis, account))!.balanceMicros,
        10_000_000 - rows.reduce((sum, row) => sum + Number(row.cost_micros), 0),
      );
    },
  );

  it('expires what has not run by the batch’s deadline, ends the batch then, and bills nothing for it', async () => {
    for (const process of processes.splice(0)) await process.stop('SIGKILL');
    const { key, account } = await paidAccountKey(redis, 10_000_000);
    const gateway = await startGateway({ env: { ...env(), BATCH_DEADLINE_S: '2' } });
    processes.push(gateway);
    const client = new Anthropic({ apiKey: key, baseURL: gateway.url, maxRetries: 0 });
    const made = await client.messages.batches.create({
      requests: Array.from({ length: 30 }, (_, i) => ask(`e${i}`, 'gpt-4o-mini', `Expiring ${i}`)),
    });
    assert.equal(Date.parse(made.expires_at) - Date.parse(made.created_at), 2_000);
    const done = await ended(client, made.id, 15_000);
    const counts = done.request_counts;
    assert.equal(counts.succeeded + counts.expired, 30, JSON.stringify(counts));
    assert.ok(counts.expired >= 10, `most never ran: ${JSON.stringify(counts)}`);
    assert.ok(Date.parse(done.ended_at!) - Date.parse(made.expires_at) < 5_000, 'ended soon after its deadline');
    const results = await resultsOf(client, made.id);
    assert.equal([...results.values()].filter((r) => r.type === 'expired').length, counts.expired);
    let rows: Awaited<ReturnType<typeof batchRows>> = [];
    await waitFor(async () => (rows = await batchRows(redis, made.id)).length >= counts.succeeded, 10_000, 'rows');
    assert.equal(rows.length, counts.succeeded, 'expired requests have no usage row');
    await waitFor(async () => (await readBill(redis, account))!.reservedMicros === 0, 10_000, 'no reservation left');
    assert.equal(
      (await readBill(redis, account))!.balanceMicros,
      10_000_000 - rows.reduce((sum, row) => sum + Number(row.cost_micros), 0),
    );
  });
});
