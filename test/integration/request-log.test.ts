import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { toFile } from 'openai';
import { sql } from 'kysely';
import {
  freshRedis,
  paidAccountKey,
  requestRecord,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';
import { testRecord, usageRows, waitForUsage } from '../support/record.js';
import {
  lockUsageWriting,
  logRow,
  mergeHalves,
  usageRow,
  writeLog,
  writeUsage,
  type LogRow,
  type UsageRow,
} from '../../storage/record/usage-writer.js';
import { findRequest, requestView } from '../../storage/record/request-log.js';
import { readUsage, usageQuerySchema } from '../../api/accounts/admin-usage.js';
import { utcDay } from '../../shared/accounts.js';
import type { RecordDb } from '../../storage/record/database.js';
import type { RequestView } from '../../shared/money/usage.js';
import { loadHotState } from '../../storage/record/hot-state.js';
import { billingBucket, usageStreamKey } from '../../shared/redis-keys.js';
import { readBill } from '../../shared/money/billing.js';
import { endpoints, type Endpoint } from '../../shared/endpoints.js';
import { shardQueueName } from '../../shared/queues.js';
import { payloadKey } from '../../shared/redis-keys.js';
import type { GatewayJobData } from '../../shared/jobs.js';
import { encodeGradientPng } from '../../workers/vendors/mock/png.js';

/*
 * The request log end to end: requests made with the official client (and
 * raw fetches for what a client library would not send), each read back with
 * `GET /v1/generation` by the key that made it and listed by
 * `GET /admin/requests`; then the writer's merge of the api's half and the
 * worker's half in either order, against a real PostgreSQL.
 */

const model = 'gpt-4o-mini';
const adminToken = 'request-log-admin-token';

type Generation = RequestView;

describe('the request log', () => {
  let redis: Redis;
  let url: string;
  let gateway: GatewayProcess;

  before(async () => {
    ({ redis, url } = await freshRedis(3));
    gateway = await startGateway({ env: { REDIS_URL: url, ADMIN_TOKEN: adminToken, STREAM_RESUME_GRACE_MS: '0' } });
  });
  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  const generation = (key: string, id: string) =>
    fetch(`${gateway.url}/v1/generation?id=${encodeURIComponent(id)}`, { headers: { authorization: `Bearer ${key}` } });

  /** The record of `id` once the api's event and (when it has one) the settlement are both in. */
  const recordOf = (key: string, id: string, settledToo = true): Promise<Generation> =>
    requestRecord(gateway.url, key, id, settledToo);

  const admin = (query: string) =>
    fetch(`${gateway.url}/admin/requests${query}`, { headers: { authorization: `Bearer ${adminToken}` } });

  it('records a plain chat completion with what it used, and reads it back by request id and by answer id', async () => {
    const { key, id: keyId, account } = await paidAccountKey(redis, 5_000_000);
    const client = gateway.client(key);
    const { data: completion, response } = await client.chat.completions
      .create({ model, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 20 })
      .withResponse();
    const requestId = response.headers.get('x-request-id')!;
    const record = await recordOf(key, requestId);
    assert.equal(record.id, requestId);
    assert.equal(record.answer_id, completion.id);
    assert.equal(record.account_id, account);
    assert.equal(record.key_id, keyId);
    assert.equal(record.endpoint, 'chat.completions');
    assert.equal(record.model, model);
    assert.equal(record.stream, false);
    assert.equal(record.status, 'completed');
    assert.equal(record.http_status, 200);
    assert.equal(record.error_code, null);
    assert.equal(record.finish_reason, completion.choices[0]!.finish_reason);
    assert.equal(record.attempts, 1);
    assert.equal(record.fallback, null);
    assert.ok(record.channel, 'the channel that served');
    assert.ok(record.vendor, 'the vendor that served');
    assert.equal(record.input_tokens, completion.usage!.prompt_tokens);
    assert.equal(record.output_tokens, completion.usage!.completion_tokens);
    assert.ok(record.cost_micros > 0 && record.cost_usd === record.cost_micros / 1e6);
    assert.ok(record.latency_ms! >= 0 && record.queue_ms! >= 0 && record.queue_ms! <= record.latency_ms!);
    assert.equal(record.ttft_ms, null);
    const byAnswer = (await (await generation(key, completion.id)).json()) as { data: Generation };
    assert.equal(byAnswer.data.id, requestId);
  });

  it("measures a stream's time to first token where the client sees it, and its latency to the last byte", async () => {
    const { key } = await paidAccountKey(redis, 5_000_000);
    const client = gateway.client(key);
    const { data: stream, response } = await client.chat.completions
      .create({
        model,
        stream: true,
        messages: [{ role: 'user', content: 'Count slowly [mock:slow:30]' }],
        max_tokens: 8,
      })
      .withResponse();
    let answerId = '';
    for await (const chunk of stream) answerId ||= chunk.id;
    const record = await recordOf(key, response.headers.get('x-request-id')!);
    assert.equal(record.stream, true);
    assert.equal(record.status, 'completed');
    assert.equal(record.answer_id, answerId);
    assert.ok(record.ttft_ms !== null && record.ttft_ms >= 0, 'a stream has a time to first token');
    // Eight tokens 30 ms apart: the last byte comes well after the first.
    assert.ok(record.latency_ms! >= record.ttft_ms + 100, `latency ${record.latency_ms} ms, ttft ${record.ttft_ms} ms`);
  });

  it('records a refused request (invalid body) with the model asked for, and a failure at the vendor with its error', async () => {
    const { key } = await paidAccountKey(redis, 5_000_000);
    const invalid = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: 'not a list' }),
    });
    assert.equal(invalid.status, 400);
    const invalidMessage = ((await invalid.json()) as { error: { message: string } }).error.message;
    const refused = await recordOf(key, invalid.headers.get('x-request-id')!, false);
    assert.equal(refused.status, 'refused');
    assert.equal(refused.http_status, 400);
    assert.ok(refused.error_code, 'the error the client got');
    assert.equal(refused.error_message, invalidMessage, 'and its message');
    assert.equal(refused.model, model);
    assert.equal(refused.settled, false);
    assert.equal(refused.cost_micros, 0);

    const client = gateway.client(key);
    const failed = await client.chat.completions
      .create({ model, messages: [{ role: 'user', content: 'Fail [mock:error:400]' }] })
      .withResponse()
      .then(
        () => assert.fail('expected a 400'),
        (error: unknown) => error as InstanceType<typeof OpenAI.APIError>,
      );
    const record = await recordOf(key, failed.headers!.get('x-request-id')!);
    assert.equal(record.status, 'failed');
    assert.equal(record.http_status, 400);
    assert.equal(record.error_code, 'mock_error');
    assert.equal(record.error_message, (failed.error as { message: string }).message);
    assert.equal(record.attempts, 1);

    // Out of credit: refused, with the message the client read.
    const { key: broke } = await paidAccountKey(redis, 0);
    const unpaid = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${broke}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
    });
    const unpaidError = ((await unpaid.json()) as { error: { message: string; code: string } }).error;
    assert.equal(unpaidError.code, 'insufficient_quota', JSON.stringify(unpaidError));
    const quota = await recordOf(broke, unpaid.headers.get('x-request-id')!, false);
    assert.deepEqual(
      [quota.status, quota.error_code, quota.error_message],
      ['refused', 'insufficient_quota', unpaidError.message],
    );
  });

  it('records every request of a rate-limited burst, the refusals as refused with their code', async () => {
    const { key, id: keyId } = await paidAccountKey(redis, 5_000_000, { rpm: 2 });
    const answers = await Promise.all(
      Array.from({ length: 12 }, () =>
        fetch(`${gateway.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
        }),
      ),
    );
    const limited = answers.filter((res) => res.status === 429);
    assert.ok(limited.length >= 9, `${limited.length} of 12 were limited`);
    const bodies = new Map(
      await Promise.all(answers.map(async (res) => [res.headers.get('x-request-id')!, await res.text()] as const)),
    );
    let page: { data: Generation[] } = { data: [] };
    await waitFor(
      async () => {
        page = (await (await admin(`?key_id=${keyId}&limit=100`)).json()) as { data: Generation[] };
        return page.data.length === 12 && page.data.every((row) => row.latency_ms !== null);
      },
      10_000,
      'twelve records',
    );
    const refused = page.data.filter((row) => row.status === 'refused');
    assert.equal(refused.length, limited.length);
    assert.ok(refused.every((row) => row.error_code === 'rate_limit_exceeded' && row.http_status === 429));
    // Each with the message its client read.
    assert.ok(
      refused.every(
        (row) =>
          row.error_message === (JSON.parse(bodies.get(row.id)!) as { error: { message: string } }).error.message,
      ),
      JSON.stringify(refused.map((row) => row.error_message)),
    );
    assert.deepEqual(
      new Set(page.data.map((row) => row.id)),
      new Set(answers.map((res) => res.headers.get('x-request-id'))),
    );
  });

  it('records a stream the client left as cancelled', async () => {
    const { key } = await paidAccountKey(redis, 5_000_000);
    const controller = new AbortController();
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model,
        stream: true,
        messages: [{ role: 'user', content: 'Go on and on [mock:slow:200]' }],
        max_tokens: 200,
      }),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    controller.abort();
    const record = await recordOf(key, res.headers.get('x-request-id')!);
    assert.equal(record.status, 'cancelled');
    assert.equal(record.stream, true);
  });

  it('answers another key, an unknown id and a missing id as the API does, and logs no unauthenticated request', async () => {
    const owner = await paidAccountKey(redis, 5_000_000);
    const other = await paidAccountKey(redis, 5_000_000);
    const { response } = await gateway
      .client(owner.key)
      .chat.completions.create({ model, messages: [{ role: 'user', content: 'mine' }], max_tokens: 1 })
      .withResponse();
    const id = response.headers.get('x-request-id')!;
    await recordOf(owner.key, id);
    const stranger = await generation(other.key, id);
    const unknown = await generation(other.key, 'req_0000000000000000000000000000dead');
    assert.equal(stranger.status, 404);
    assert.equal(unknown.status, 404);
    const [a, b] = (await Promise.all([stranger.json(), unknown.json()])) as [
      { error: { code: string; type: string } },
      { error: { code: string; type: string } },
    ];
    assert.equal(a.error.code, 'not_found');
    assert.deepEqual({ code: a.error.code, type: a.error.type }, { code: b.error.code, type: b.error.type });
    const missing = await fetch(`${gateway.url}/v1/generation`, { headers: { authorization: `Bearer ${owner.key}` } });
    assert.equal(missing.status, 400);
    assert.equal(((await missing.json()) as { error: { param: string } }).error.param, 'id');

    const anonymous = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(anonymous.status, 401);
    const anonymousId = anonymous.headers.get('x-request-id')!;
    // Give the writer the time it takes for a logged one, then look.
    await recordOf(
      owner.key,
      (
        await gateway
          .client(owner.key)
          .chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 1 })
          .withResponse()
      ).response.headers.get('x-request-id')!,
    );
    const record = await testRecord(url);
    assert.equal(
      (await record.selectFrom('usage').select('request_id').where('request_id', '=', anonymousId).execute()).length,
      0,
    );
  });

  /**
   * One request of an endpoint row (or of its async form): sent with the extra headers given, answered as a
   * client sees it. `answer` is the id the answer carries (a pattern when the client does not see it).
   */
  interface Sent {
    requestId: string;
    httpStatus: number;
    answer: string | RegExp | null;
  }
  type Send = (client: OpenAI, key: string, headers: Record<string, string>) => Promise<Sent>;
  /** Anthropic's SDK, for the Messages API's rows: it sends the key as x-api-key. */
  const anthropicClient = (key: string) => new Anthropic({ apiKey: key, baseURL: gateway.url, maxRetries: 0 });
  const sent = (response: Response, answer: Sent['answer']): Sent => ({
    requestId: response.headers.get('x-request-id')!,
    httpStatus: response.status,
    answer,
  });
  /**
   * One call of Google's Gemini API (`/v1beta/models/{model}:{method}`, the key as the GenAI SDKs send it), answered
   * 200.
   */
  const googleCall = async (
    key: string,
    headers: Record<string, string>,
    method: string,
    body: unknown,
    modelName = model,
  ) => {
    const response = await fetch(`${gateway.url}/v1beta/models/${modelName}:${method}`, {
      method: 'POST',
      headers: { ...headers, 'x-goog-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    assert.equal(response.status, 200, `${method}: ${response.status}`);
    return response;
  };
  const gray = [120, 120, 120] as const;
  const png = () => toFile(encodeGradientPng(16, 16, [gray, gray, gray, gray]), 'square.png', { type: 'image/png' });

  /**
   * Every row of the endpoint table, and the async-job form: each a request made through the official client where it
   * has the call.
   */
  const byEndpoint: Record<Endpoint, Record<string, Send>> = {
    'chat.completions': {
      plain: async (client, _key, headers) => {
        const { data, response } = await client.chat.completions
          .create({ model, messages: [{ role: 'user', content: 'one row' }], max_tokens: 8 }, { headers })
          .withResponse();
        return sent(response, data.id);
      },
      'async job (Prefer: respond-async)': async (_client, key, headers) => {
        const response = await fetch(`${gateway.url}/v1/chat/completions`, {
          method: 'POST',
          headers: {
            ...headers,
            authorization: `Bearer ${key}`,
            'content-type': 'application/json',
            prefer: 'respond-async',
          },
          body: JSON.stringify({ model, messages: [{ role: 'user', content: 'later' }], max_tokens: 8 }),
        });
        assert.equal(response.status, 202);
        const job = (await response.json()) as { id: string };
        // The job is found by the request's id: the two are one for every row but responses and videos.
        assert.equal(job.id, response.headers.get('x-request-id'));
        return sent(response, /^chatcmpl-/);
      },
    },
    completions: {
      plain: async (client, _key, headers) => {
        const { data, response } = await client.completions
          .create({ model: 'gpt-3.5-turbo-instruct', prompt: 'one row', max_tokens: 8 }, { headers })
          .withResponse();
        return sent(response, data.id);
      },
    },
    embeddings: {
      plain: async (client, _key, headers) => {
        const { response } = await client.embeddings
          .create({ model: 'text-embedding-3-small', input: 'one row' }, { headers })
          .withResponse();
        return sent(response, null);
      },
    },
    moderations: {
      plain: async (client, _key, headers) => {
        const { data, response } = await client.moderations
          .create({ model: 'omni-moderation-latest', input: 'one row' }, { headers })
          .withResponse();
        assert.match(data.id, /^modr-/);
        return sent(response, data.id);
      },
    },
    'images.generations': {
      plain: async (client, _key, headers) => {
        const { response } = await client.images
          .generate({ model: 'dall-e-2', prompt: 'one row', size: '256x256', response_format: 'b64_json' }, { headers })
          .withResponse();
        return sent(response, null);
      },
    },
    'images.edits': {
      plain: async (client, _key, headers) => {
        const { response } = await client.images
          .edit(
            { model: 'dall-e-2', image: await png(), prompt: 'one row', size: '256x256', response_format: 'b64_json' },
            { headers },
          )
          .withResponse();
        return sent(response, null);
      },
    },
    'images.variations': {
      plain: async (client, _key, headers) => {
        const { response } = await client.images
          .createVariation(
            { model: 'dall-e-2', image: await png(), size: '256x256', response_format: 'b64_json' },
            { headers },
          )
          .withResponse();
        return sent(response, null);
      },
    },
    'audio.transcriptions': {
      plain: async (client, _key, headers) => {
        const file = await toFile(Buffer.alloc(48_000, 1), 'speech.wav', { type: 'audio/wav' });
        const { response } = await client.audio.transcriptions
          .create({ model: 'whisper-1', file, response_format: 'json' }, { headers })
          .withResponse();
        return sent(response, null);
      },
    },
    'audio.translations': {
      plain: async (client, _key, headers) => {
        const file = await toFile(Buffer.alloc(48_000, 1), 'speech.wav', { type: 'audio/wav' });
        const { response } = await client.audio.translations
          .create({ model: 'whisper-1', file, response_format: 'json' }, { headers })
          .withResponse();
        return sent(response, null);
      },
    },
    'audio.speech': {
      plain: async (client, _key, headers) => {
        const { data, response } = await client.audio.speech
          .create({ model: 'mock-speech', input: 'one row', voice: 'alloy' }, { headers })
          .withResponse();
        assert.ok((await data.arrayBuffer()).byteLength > 0, 'audio');
        return sent(response, null);
      },
    },
    responses: {
      plain: async (client, _key, headers) => {
        const { data, response } = await client.responses
          .create({ model, input: 'one row', max_output_tokens: 16 }, { headers })
          .withResponse();
        return sent(response, data.id);
      },
      streamed: async (client, _key, headers) => {
        const { data: stream, response } = await client.responses
          .create({ model, input: 'one row', max_output_tokens: 16, stream: true }, { headers })
          .withResponse();
        let id = '';
        for await (const event of stream) if (event.type === 'response.completed') id = event.response.id;
        assert.match(id, /^resp_/);
        return sent(response, id);
      },
      background: async (client, _key, headers) => {
        const { data, response } = await client.responses
          .create({ model, input: 'one row', max_output_tokens: 16, background: true }, { headers })
          .withResponse();
        await waitFor(
          async () => (await client.responses.retrieve(data.id)).status === 'completed',
          10_000,
          'the background response',
        );
        return sent(response, data.id);
      },
    },
    messages: {
      plain: async (_client, key, headers) => {
        const { data, response } = await anthropicClient(key)
          .messages.create({ model, max_tokens: 16, messages: [{ role: 'user', content: 'one row' }] }, { headers })
          .withResponse();
        assert.match(data.id, /^msg_/);
        return sent(response, data.id);
      },
      streamed: async (_client, key, headers) => {
        const { data: stream, response } = await anthropicClient(key)
          .messages.create(
            { model, max_tokens: 16, stream: true, messages: [{ role: 'user', content: 'one row' }] },
            { headers },
          )
          .withResponse();
        let id = '';
        for await (const event of stream) if (event.type === 'message_start') id = event.message.id;
        assert.match(id, /^msg_/);
        return sent(response, id);
      },
    },
    'messages.count_tokens': {
      plain: async (_client, key, headers) => {
        const { data, response } = await anthropicClient(key)
          .messages.countTokens({ model, messages: [{ role: 'user', content: 'one row' }] }, { headers })
          .withResponse();
        assert.ok(data.input_tokens > 0);
        return sent(response, null);
      },
    },
    'gemini.generate': {
      plain: async (_client, key, headers) => {
        const response = await googleCall(key, headers, 'generateContent', {
          contents: [{ role: 'user', parts: [{ text: 'one row' }] }],
          generationConfig: { maxOutputTokens: 16 },
        });
        const body = (await response.json()) as { responseId: string };
        return sent(response, body.responseId);
      },
      streamed: async (_client, key, headers) => {
        const response = await googleCall(key, headers, 'streamGenerateContent?alt=sse', {
          contents: [{ role: 'user', parts: [{ text: 'one row' }] }],
          generationConfig: { maxOutputTokens: 16 },
        });
        const ids = new Set([...(await response.text()).matchAll(/"responseId":"([^"]+)"/g)].map((match) => match[1]));
        assert.equal(ids.size, 1, 'one response id on every chunk');
        return sent(response, [...ids][0]!);
      },
    },
    'gemini.count_tokens': {
      plain: async (_client, key, headers) => {
        const response = await googleCall(key, headers, 'countTokens', {
          contents: [{ role: 'user', parts: [{ text: 'one row' }] }],
        });
        assert.ok(((await response.json()) as { totalTokens: number }).totalTokens > 0);
        return sent(response, null);
      },
    },
    'gemini.embed': {
      plain: async (_client, key, headers) => {
        const response = await googleCall(
          key,
          headers,
          'embedContent',
          { content: { parts: [{ text: 'one row' }] } },
          'text-embedding-3-small',
        );
        assert.ok(((await response.json()) as { embedding: { values: number[] } }).embedding.values.length > 0);
        return sent(response, null);
      },
    },
    'gemini.batch_embed': {
      plain: async (_client, key, headers) => {
        const requests = ['one row', 'two rows'].map((text) => ({
          model: 'models/text-embedding-3-small',
          content: { parts: [{ text }] },
        }));
        const response = await googleCall(key, headers, 'batchEmbedContents', { requests }, 'text-embedding-3-small');
        assert.equal(((await response.json()) as { embeddings: unknown[] }).embeddings.length, 2);
        return sent(response, null);
      },
    },
    videos: {
      plain: async (client, _key, headers) => {
        const { data, response } = await client.videos
          .create({ model: 'sora-2', prompt: 'one row', seconds: '4', size: '1280x720' }, { headers })
          .withResponse();
        assert.match(data.id, /^video_/);
        return sent(response, data.id);
      },
    },
  };

  it('covers every row of the endpoint table', () => {
    assert.deepEqual(Object.keys(byEndpoint).sort(), Object.keys(endpoints).sort());
  });

  for (const [endpoint, forms] of Object.entries(byEndpoint)) {
    for (const [form, send] of Object.entries(forms)) {
      it(
        `keeps one row per ${endpoint} request (${form}) under its x-request-id, with the api's half and the ` +
          `worker's`,
        async () => {
          const { key, id: keyId } = await paidAccountKey(redis, 50_000_000);
          const client = gateway.client(key, { timeout: 30_000 });
          // A client's own x-request-id is not taken: the gateway names every request itself (money is keyed by it).
          const chosen = `client-${keyId}`;
          const requests = await Promise.all([send(client, key, { 'x-request-id': chosen }), send(client, key, {})]);
          for (const request of requests) {
            assert.match(request.requestId, /^req_[0-9a-f]{32}$/, "the gateway's own request id");
            const record = await recordOf(key, request.requestId);
            // The api's half.
            assert.equal(record.id, request.requestId);
            assert.equal(record.endpoint, endpoint);
            assert.equal(record.http_status, request.httpStatus);
            assert.ok(record.latency_ms !== null && record.latency_ms >= 0, 'latency from the api');
            assert.equal(record.status, 'completed');
            // The worker's half.
            assert.equal(record.settled, true);
            assert.ok(record.vendor, 'the vendor that served');
            // Counting tokens and moderating (free at OpenAI) cost nothing; every other row is billed.
            if (
              endpoint === 'messages.count_tokens' ||
              endpoint === 'gemini.count_tokens' ||
              endpoint === 'moderations'
            )
              assert.equal(record.cost_micros, 0);
            else assert.ok(record.cost_micros > 0, `cost ${record.cost_micros}`);
            assert.ok(record.attempts === 1 && record.queue_ms !== null, "the run's detail from the worker");
            if (request.answer === null) assert.equal(record.answer_id, null);
            else if (typeof request.answer === 'string') {
              assert.equal(record.answer_id, request.answer);
              // Found by the answer's id too: the same row.
              const byAnswer = (await (await generation(key, request.answer)).json()) as { data: Generation };
              assert.equal(byAnswer.data.id, request.requestId);
            } else assert.match(record.answer_id ?? '', request.answer);
          }
          assert.equal((await generation(key, chosen)).status, 404, 'nothing is kept under an id the client chose');
          // The record holds exactly one row per request: none under the job's id, none without its other half.
          const db = await testRecord(url);
          const rows = await db
            .selectFrom('usage')
            .select(['request_id', 'answer_id', 'settled', 'latency_ms'])
            .where('key_id', '=', keyId)
            .execute();
          assert.deepEqual(
            rows.map((row) => row.request_id).sort(),
            requests.map((request) => request.requestId).sort(),
          );
          assert.ok(
            rows.every((row) => row.settled && row.latency_ms !== null),
            JSON.stringify(rows),
          );
        },
      );
    }
  }

  it(
    "gives back a background response's reservation, held under its request's id, when it is cancelled before a " +
      'worker takes it',
    async () => {
      const { key, account } = await paidAccountKey(redis, 5_000_000);
      const client = gateway.client(key);
      // Paused, the chat queue keeps the job waiting: the cancel removes it, and no worker settles it.
      const chat = new Queue(shardQueueName('chat', 0, 1), { connection: redis });
      try {
        await chat.pause();
        const { data: queued, response } = await client.responses
          .create({ model, input: 'never run', max_output_tokens: 64, background: true })
          .withResponse();
        const requestId = response.headers.get('x-request-id')!;
        assert.notEqual(queued.id, requestId);
        assert.ok((await readBill(redis, account))!.reservedMicros > 0, 'its worst case is reserved');
        assert.equal((await client.responses.cancel(queued.id)).status, 'cancelled');
        assert.equal((await readBill(redis, account))!.reservedMicros, 0, 'the reservation is given back at once');
        assert.equal((await readBill(redis, account))!.balanceMicros, 5_000_000);
        const record = await recordOf(key, requestId, false);
        assert.equal(record.http_status, 200);
        assert.equal(record.settled, false);
      } finally {
        await chat.resume();
        await chat.close();
      }
    },
  );

  it(
    'runs a job queued before the two ids were named apart (its requestId is its job id too), its stored payload ' +
      'found and its cost settled once under that id',
    async () => {
      const { id: keyId, account } = await paidAccountKey(redis, 5_000_000);
      const id = `req_${randomBytes(16).toString('hex')}`;
      const embeddings = new Queue(shardQueueName('embeddings', 0, 1), { connection: redis });
      try {
        // As an api of the release before queued it: no jobId, the body kept apart under the job's id.
        await redis.set(
          payloadKey(id),
          JSON.stringify({
            model: 'text-embedding-3-small',
            input: 'queued before the upgrade',
            encoding_format: 'float',
          }),
          'EX',
          60,
        );
        const old: Omit<GatewayJobData, 'jobId'> = {
          requestId: id,
          replyTo: 'sy:reply:gone',
          keyId,
          accountId: account,
          endpoint: 'embeddings',
          model: 'text-embedding-3-small',
          stream: false,
          deadline: Date.now() + 60_000,
          async: true,
        };
        await embeddings.add('embeddings', old, { jobId: id, attempts: 1 });
        const row = await waitForUsage(redis, (candidate) => candidate.request_id === id);
        assert.ok(
          Number(row.cost_micros) > 0 && Number(row.input_tokens) > 0,
          'the stored payload was read and the answer billed',
        );
        await waitFor(async () => (await embeddings.getJobState(id)) === 'completed', 5000, 'the old job to complete');
        assert.equal((await usageRows(redis)).filter((candidate) => candidate.request_id === id).length, 1);
      } finally {
        await embeddings.close();
      }
    },
  );

  it('lists requests for admins newest first, filtered, a page at a time with every row once', async () => {
    const { key, id: keyId, account } = await paidAccountKey(redis, 5_000_000);
    const client = gateway.client(key);
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) {
      const { response } = await client.chat.completions
        .create({ model, messages: [{ role: 'user', content: `n${i}` }], max_tokens: 1 })
        .withResponse();
      ids.push(response.headers.get('x-request-id')!);
    }
    await recordOf(key, ids.at(-1)!);
    await waitFor(
      async () =>
        ((await (await admin(`?account_id=${account}&limit=100`)).json()) as { data: unknown[] }).data.length === 7,
      10_000,
      'seven rows',
    );
    const seen: Generation[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await admin(`?key_id=${keyId}&limit=3${cursor ? `&cursor=${cursor}` : ''}`);
      assert.equal(res.status, 200);
      const page = (await res.json()) as {
        object: string;
        data: Generation[];
        has_more: boolean;
        next_cursor: string | null;
      };
      assert.equal(page.object, 'list');
      assert.ok(page.data.length <= 3);
      seen.push(...page.data);
      assert.equal(page.has_more, page.next_cursor !== null);
      cursor = page.next_cursor;
      pages++;
    } while (cursor && pages < 10);
    assert.equal(pages, 3);
    assert.deepEqual(seen.map((row) => row.id).sort(), [...ids].sort());
    for (let i = 1; i < seen.length; i++) {
      const [a, b] = [seen[i - 1]!, seen[i]!];
      assert.ok(
        a.created > b.created || (a.created === b.created && a.id > b.id),
        'newest first, by id within a second',
      );
    }
    const filtered = (await (await admin(`?key_id=${keyId}&status=failed`)).json()) as { data: unknown[] };
    assert.equal(filtered.data.length, 0);
    const since = (await (await admin(`?key_id=${keyId}&since=${seen[0]!.created + 1}`)).json()) as { data: unknown[] };
    assert.equal(since.data.length, 0);
    const until = (await (
      await admin(`?key_id=${keyId}&until=${new Date((seen[0]!.created + 1) * 1000).toISOString()}`)
    ).json()) as { data: unknown[] };
    assert.equal(until.data.length, 7);

    for (const bad of [
      '?cursor=nonsense',
      '?limit=0',
      '?limit=101',
      '?status=done',
      '?since=yesterday',
      '?colour=red',
    ]) {
      const res = await admin(bad);
      assert.equal(res.status, 400, bad);
      assert.equal(typeof ((await res.json()) as { error: { message: string } }).error.message, 'string');
    }
    const unauthorised = await fetch(`${gateway.url}/admin/requests`);
    assert.equal(unauthorised.status, 401);
    // Another letter case is another (unknown) path; slashes and escapes reach the token check.
    assert.equal((await fetch(`${gateway.url}/ADMIN/Requests`)).status, 404);
    assert.equal((await fetch(`${gateway.url}/admin//requests`)).status, 401);
    assert.equal((await fetch(`${gateway.url}/%61dmin/requests?limit=1`)).status, 401);
  });
});

describe('the request log turned off (REQUEST_LOG=off)', () => {
  let redis: Redis;
  let url: string;
  let gateway: GatewayProcess;

  before(async () => {
    ({ redis, url } = await freshRedis(5));
    gateway = await startGateway({ env: { REDIS_URL: url, ADMIN_TOKEN: adminToken, REQUEST_LOG: 'off' } });
  });
  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it(
    "keeps the settlements only: a served request has its usage row without the api's half, a refused one leaves " +
      'none',
    async () => {
      const { key } = await paidAccountKey(redis, 5_000_000);
      // The refusal first: its log event, had the api appended one, would be ahead of the settlement in the account's
      // stream.
      const refused = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: 'not a list' }),
      });
      assert.equal(refused.status, 400);
      const refusedId = refused.headers.get('x-request-id')!;
      const { response } = await gateway
        .client(key)
        .chat.completions.create({ model, messages: [{ role: 'user', content: 'billed' }], max_tokens: 2 })
        .withResponse();
      const served = response.headers.get('x-request-id')!;
      const record = await testRecord(url);
      await waitFor(
        async () =>
          (await record.selectFrom('usage').select('request_id').where('request_id', '=', served).execute()).length ===
          1,
        10_000,
        'the settlement',
      );
      // The stream is read in order: a log event of the refusal would have been written in the settlement's batch or
      // before.
      const rows = await record
        .selectFrom('usage')
        .selectAll()
        .where('request_id', 'in', [served, refusedId])
        .execute();
      assert.deepEqual(
        rows.map((r) => r.request_id),
        [served],
        'the settlement only: no row for the refusal',
      );
      const row = rows[0];
      assert.equal(row!.settled, true);
      assert.equal(row!.latency_ms, null);
      assert.equal(row!.http_status, null);
      assert.ok(Number(row!.cost_micros) > 0);
      const read = await fetch(`${gateway.url}/v1/generation?id=${served}`, {
        headers: { authorization: `Bearer ${key}` },
      });
      assert.equal(read.status, 200);
      assert.equal(((await read.json()) as { data: Generation }).data.status, 'completed');
    },
  );
});

describe('the request log writer: the two halves in either order', () => {
  let db: RecordDb;
  let redis: Redis;
  before(async () => {
    const fresh = await freshRedis(4);
    redis = fresh.redis;
    db = await testRecord(fresh.url);
    await sql`insert into accounts (id, created) values ('acct_w', 0)`.execute(db);
    await sql`insert into api_keys (id, account_id, created, hash) values ('key_w', 'acct_w', 0, 'h')`.execute(db);
  });
  after(() => redis?.disconnect());

  const usage = (id: string, cost: number): UsageRow => ({
    request_id: id,
    account_id: 'acct_w',
    key_id: 'key_w',
    model,
    vendor: 'mock',
    input_tokens: 10,
    cached_tokens: 0,
    output_tokens: 5,
    images: 0,
    audio_seconds: 0,
    video_seconds: 0,
    cost_micros: cost,
    status: 'completed',
    created: 1_700_000_000,
    duration_ms: 12,
    answer_id: `chatcmpl-${id}`,
    attempts: 1,
  });
  const logged = (id: string, status: LogRow['status'] = 'completed'): LogRow => ({
    request_id: id,
    account_id: 'acct_w',
    key_id: 'key_w',
    model,
    endpoint: 'chat.completions',
    stream: false,
    status,
    http_status: status === 'completed' ? 200 : 499,
    error_code: null,
    latency_ms: 40,
    ttft_ms: null,
    created: 1_700_000_001,
  });
  const settled = async () =>
    Number(
      (await db.selectFrom('accounts').select('settled_micros').where('id', '=', 'acct_w').executeTakeFirstOrThrow())
        .settled_micros,
    );
  const day = async () =>
    (await db.selectFrom('usage_daily').selectAll().where('account_id', '=', 'acct_w').execute()).reduce(
      (sum, row) => sum + Number(row.requests),
      0,
    );

  it("lets two writers' batches that hold each other's halves both commit: they take turns, no deadlock", async () => {
    // An account of its own, so the other cases' totals of acct_w stay theirs.
    await sql`insert into accounts (id, created) values ('acct_dl', 0)`.execute(db);
    await sql`insert into api_keys (id, account_id, created, hash) values ('key_dl', 'acct_dl', 0, 'h-dl')`.execute(db);
    const mine = { account_id: 'acct_dl', key_id: 'key_dl' };
    // Batch A settles da1 and carries the log half of da2; batch B settles da2 and carries the log half of da1; both
    // add to the one account's total. Interleaved without turns, each waits on a row the other holds (40P01).
    const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    const batch = (settle: string, log: string, wait: number) =>
      db.transaction().execute(async (tx) => {
        await lockUsageWriting(tx);
        await writeUsage(tx, [{ ...usage(settle, 100), ...mine }]);
        await pause(wait);
        await writeLog(tx, [{ ...logged(log), ...mine }]);
      });
    const results = await Promise.allSettled([
      batch('da1', 'da2', 400),
      (async () => {
        await pause(100);
        await batch('da2', 'da1', 0);
      })(),
    ]);
    assert.deepEqual(
      results.map((result) => (result.status === 'rejected' ? String(result.reason) : 'committed')),
      ['committed', 'committed'],
    );
    const total = await db
      .selectFrom('accounts')
      .select('settled_micros')
      .where('id', '=', 'acct_dl')
      .executeTakeFirstOrThrow();
    assert.equal(Number(total.settled_micros), 200);
    const rows = await db
      .selectFrom('usage')
      .select(['request_id', 'settled', 'endpoint'])
      .where('request_id', 'in', ['da1', 'da2'])
      .orderBy('request_id')
      .execute();
    assert.deepEqual(
      rows.map((row) => [row.request_id, row.settled, row.endpoint]),
      [
        ['da1', true, 'chat.completions'],
        ['da2', true, 'chat.completions'],
      ],
    );
  });

  it('counts a settlement once whether the log came first, after, or twice, and keeps both halves', async () => {
    const before = await settled();
    // Log first, then the settlement twice (a redelivered batch).
    await db.transaction().execute((tx) => writeLog(tx, [logged('r1')]));
    assert.equal(await settled(), before, 'a log event alone counts nothing');
    assert.equal(await db.transaction().execute((tx) => writeUsage(tx, [usage('r1', 700)])), 1);
    assert.equal(await db.transaction().execute((tx) => writeUsage(tx, [usage('r1', 700)])), 0);
    // Settlement first, then the log twice.
    assert.equal(await db.transaction().execute((tx) => writeUsage(tx, [usage('r2', 300)])), 1);
    await db.transaction().execute((tx) => writeLog(tx, [logged('r2', 'cancelled'), logged('r2', 'cancelled')]));
    await db.transaction().execute((tx) => writeLog(tx, [logged('r2', 'cancelled')]));
    assert.equal(await settled(), before + 1000);
    assert.equal(await day(), 2);
    const rows = await db
      .selectFrom('usage')
      .selectAll()
      .where('request_id', 'in', ['r1', 'r2'])
      .orderBy('request_id')
      .execute();
    assert.deepEqual(
      rows.map((row) => [
        row.request_id,
        row.status,
        row.settled,
        row.latency_ms,
        row.answer_id,
        Number(row.cost_micros),
        row.created,
      ]),
      [
        ['r1', 'completed', true, 40, 'chatcmpl-r1', 700, 1_700_000_001],
        // The client left: cancelled, whatever the worker's settlement said.
        ['r2', 'cancelled', true, 40, 'chatcmpl-r2', 300, 1_700_000_001],
      ],
    );
  });

  it(
    'writes the two halves of one batch as one row, the same row the two upserts make, and counts it once when ' +
      'redelivered',
    async () => {
      const before = await settled();
      const batch = mergeHalves([usage('r3', 500), usage('r4', 200)], [logged('r3', 'cancelled'), logged('r5')]);
      assert.deepEqual(
        batch.logs.map((log) => log.request_id),
        ['r5'],
        'only the log without its settlement is left to upsert',
      );
      const write = () =>
        db.transaction().execute(async (tx) => {
          const counted = await writeUsage(tx, batch.rows);
          await writeLog(tx, batch.logs);
          return counted;
        });
      assert.equal(await write(), 2);
      assert.equal(await write(), 0, 'a batch delivered again counts nothing');
      assert.equal(await settled(), before + 700);
      const rows = await db
        .selectFrom('usage')
        .selectAll()
        .where('request_id', 'in', ['r3', 'r4', 'r5'])
        .orderBy('request_id')
        .execute();
      assert.deepEqual(
        rows.map((row) => [
          row.request_id,
          row.status,
          row.settled,
          row.latency_ms,
          row.http_status,
          row.endpoint,
          Number(row.cost_micros),
          row.created,
        ]),
        [
          ['r3', 'cancelled', true, 40, 499, 'chat.completions', 500, 1_700_000_001],
          ['r4', 'completed', true, null, null, null, 200, 1_700_000_000],
          ['r5', 'completed', false, 40, 200, 'chat.completions', 0, 1_700_000_001],
        ],
      );
      // The day totals go by the settlement's time, as they do when the halves come apart.
      assert.equal(await day(), 4);
    },
  );

  it(
    "a Redis loaded from the record counts a settlement still in the stream against the balance, though the api's " +
      'log row for it is in',
    async () => {
      await sql`insert into accounts (id, created, credits_micros) values ('acct_h', 0, 5000000)`.execute(db);
      await sql`insert into api_keys (id, account_id, created, hash) values ('key_h', 'acct_h', 0, 'hh')`.execute(db);
      // The api's half reached the record; the worker's settlement (1,234 micros) waits in the stream.
      await db
        .transaction()
        .execute((tx) => writeLog(tx, [{ ...logged('r-pending'), account_id: 'acct_h', key_id: 'key_h' }]));
      const pending = { ...usage('r-pending', 1234), account_id: 'acct_h', key_id: 'key_h' };
      await redis.xadd(usageStreamKey(billingBucket('acct_h')), '*', 'usage', JSON.stringify(pending));
      await loadHotState(redis, db);
      assert.equal((await readBill(redis, 'acct_h'))?.balanceMicros, 5_000_000 - 1234);
    },
  );

  it(
    "keeps how the response cache took part and what it saved, from the settlement's entry to the request's view " +
      'and the day totals',
    async () => {
      const applied = await sql<{ name: string }>`select name from record_migrations order by name`.execute(db);
      assert.ok(
        applied.rows.some((row) => row.name === '0008_cache_marks'),
        applied.rows.map((row) => row.name).join(' '),
      );
      await sql`insert into accounts (id, created) values ('acct_c', 0)`.execute(db);
      await sql`insert into api_keys (id, account_id, created, hash) values ('key_c', 'acct_c', 0, 'hc')`.execute(db);
      // The settlement's usage entry as the stream carries it (JSON in its `usage` field).
      const entry = (id: string, extra: Record<string, unknown>) =>
        usageRow([
          'usage',
          JSON.stringify({
            ...usage(id, 500),
            account_id: 'acct_c',
            key_id: 'key_c',
            service_tier: 'default',
            ...extra,
          }),
        ])!;
      const hit = entry('rc-hit', { cache: 'hit', saved_micros: 1234, cost_micros: 0 });
      const shared = entry('rc-shared', { cache: 'coalesced', saved_micros: 0 });
      const miss = entry('rc-miss', { cache: 'miss' });
      const none = entry('rc-none', {});
      // What this code does not know is no mark, and nothing saved.
      const odd = entry('rc-odd', { cache: 'warm', saved_micros: -5 });
      const fraction = entry('rc-fraction', { cache: 'HIT', saved_micros: 1.5 });
      const huge = entry('rc-huge', { cache: null, saved_micros: 2 ** 53 });
      const text = entry('rc-text', { cache: ['hit'], saved_micros: '1234' });
      assert.deepEqual(
        [hit, shared, miss, none, odd, fraction, huge, text].map((row) => [
          row.request_id,
          row.cache,
          row.saved_micros,
        ]),
        [
          ['rc-hit', 'hit', 1234],
          ['rc-shared', 'coalesced', 0],
          ['rc-miss', 'miss', 0],
          ['rc-none', null, 0],
          ['rc-odd', null, 0],
          ['rc-fraction', null, 0],
          ['rc-huge', null, 0],
          ['rc-text', null, 0],
        ],
      );

      // The api's half of the hit first; the halves of the miss in one batch; the odd one's log after its settlement.
      const logOf = (id: string) => ({ ...logged(id), account_id: 'acct_c', key_id: 'key_c' });
      await db.transaction().execute((tx) => writeLog(tx, [logOf('rc-hit')]));
      const batch = mergeHalves([hit, shared, miss, none, odd], [logOf('rc-miss')]);
      assert.deepEqual(batch.logs, []);
      assert.equal(await db.transaction().execute((tx) => writeUsage(tx, batch.rows)), 5);
      await db.transaction().execute((tx) => writeLog(tx, [logOf('rc-odd'), logOf('rc-hit')]));
      // Delivered again: nothing changes, nothing is counted twice.
      assert.equal(await db.transaction().execute((tx) => writeUsage(tx, [hit])), 0);

      const ids = ['rc-hit', 'rc-miss', 'rc-none', 'rc-odd', 'rc-shared'];
      const views = (
        await db.selectFrom('usage').selectAll().where('request_id', 'in', ids).orderBy('request_id').execute()
      ).map(requestView);
      assert.deepEqual(
        views.map((view) => [view.id, view.cache, view.saved_micros, view.settled, view.http_status, view.cost_micros]),
        [
          ['rc-hit', 'hit', 1234, true, 200, 0],
          ['rc-miss', 'miss', 0, true, 200, 500],
          ['rc-none', null, 0, true, null, 500],
          ['rc-odd', null, 0, true, 200, 500],
          ['rc-shared', 'coalesced', 0, true, null, 500],
        ],
      );
      // As `GET /v1/generation` reads it, by request id and by answer id.
      const generation = await findRequest(db, 'rc-hit', 'key_c');
      assert.equal(generation?.cache, 'hit');
      assert.equal(generation?.saved_micros, 1234);
      assert.equal(generation?.cost_usd, 0);
      assert.equal((await findRequest(db, 'chatcmpl-rc-hit', 'key_c'))?.saved_micros, 1234);

      // The day totals sum what was saved, as they sum the cost.
      const daily = await db
        .selectFrom('usage_daily')
        .select([sql<number>`sum(saved_micros)`.as('saved'), sql<number>`sum(requests)`.as('requests')])
        .where('account_id', '=', 'acct_c')
        .executeTakeFirstOrThrow();
      assert.deepEqual([Number(daily.saved), Number(daily.requests)], [1234, 5]);

      // The record itself takes no other mark, and no NULL saving.
      await assert.rejects(
        sql`update usage set cache = 'warm' where request_id = 'rc-none'`.execute(db),
        (error: { code?: string }) => error.code === '23514',
      );
      await assert.rejects(
        sql`update usage set saved_micros = null where request_id = 'rc-none'`.execute(db),
        (error: { code?: string }) => error.code === '23502',
      );
    },
  );
  it(
    "keeps the prompt tokens the vendor's cache wrote and what its prompt caching saved, signed, to the view, the " +
      'day totals and the report',
    async () => {
      const applied = await sql<{ name: string }>`select name from record_migrations order by name`.execute(db);
      assert.ok(
        applied.rows.some((row) => row.name === '0017_prompt_cache_saving'),
        applied.rows.map((row) => row.name).join(' '),
      );
      await sql`insert into accounts (id, created) values ('acct_p', 0)`.execute(db);
      await sql`insert into api_keys (id, account_id, created, hash) values ('key_p', 'acct_p', 0, 'hp')`.execute(db);
      // The settlement's usage entry as the stream carries it: one that read and wrote the cache (it saved), one that
      // only wrote it (dearer than plain input: below zero), and one settled before either was kept (read as 0).
      const entry = (id: string, extra: Record<string, unknown>) =>
        usageRow([
          'usage',
          JSON.stringify({
            ...usage(id, 500),
            account_id: 'acct_p',
            key_id: 'key_p',
            service_tier: 'default',
            ...extra,
          }),
        ])!;
      const read = entry('rp-read', {
        input_tokens: 28,
        cached_tokens: 5,
        cache_write_tokens: 3,
        prompt_cache_saved_micros: 10,
      });
      const wrote = entry('rp-wrote', {
        input_tokens: 2048,
        cache_write_tokens: 2048,
        prompt_cache_saved_micros: -1536,
      });
      const before = entry('rp-before', { input_tokens: 10 });
      // Anything but a safe integer is nothing saved (a negative one is a saving below zero, not junk).
      const fraction = entry('rp-fraction', { prompt_cache_saved_micros: 1.5, cache_write_tokens: 'x' });
      const huge = entry('rp-huge', { prompt_cache_saved_micros: -(2 ** 53) });
      const text = entry('rp-text', { prompt_cache_saved_micros: '10' });
      assert.deepEqual(
        [read, wrote, before, fraction, huge, text].map((row) => [
          row.request_id,
          row.cache_write_tokens,
          row.prompt_cache_saved_micros,
        ]),
        [
          ['rp-read', 3, 10],
          ['rp-wrote', 2048, -1536],
          ['rp-before', 0, 0],
          ['rp-fraction', 0, 0],
          ['rp-huge', 0, 0],
          ['rp-text', 0, 0],
        ],
      );
      // A row written as a writer before this change wrote it (neither field): the columns' defaults.
      const {
        cache_write_tokens: _w,
        prompt_cache_saved_micros: _s,
        ...older
      } = entry('rp-older', { cached_tokens: 4 });
      // The api's half of one first, the other's after; delivered again, nothing counted twice.
      await db
        .transaction()
        .execute((tx) => writeLog(tx, [{ ...logged('rp-read'), account_id: 'acct_p', key_id: 'key_p' }]));
      assert.equal(await db.transaction().execute((tx) => writeUsage(tx, [read, wrote, before, older])), 4);
      assert.equal(await db.transaction().execute((tx) => writeUsage(tx, [read, wrote])), 0);

      const ids = ['rp-read', 'rp-wrote', 'rp-before', 'rp-older'];
      const views = (
        await db.selectFrom('usage').selectAll().where('request_id', 'in', ids).orderBy('request_id').execute()
      ).map(requestView);
      assert.deepEqual(
        views.map((view) => [
          view.id,
          view.cached_tokens,
          view.cache_write_tokens,
          view.prompt_cache_saved_micros,
          view.saved_micros,
        ]),
        [
          ['rp-before', 0, 0, 0, 0],
          ['rp-older', 4, 0, 0, 0],
          ['rp-read', 5, 3, 10, 0],
          ['rp-wrote', 0, 2048, -1536, 0],
        ],
      );
      const generation = await findRequest(db, 'chatcmpl-rp-read', 'key_p');
      assert.deepEqual([generation?.cache_write_tokens, generation?.prompt_cache_saved_micros], [3, 10]);

      // The day totals sum both, the saving signed; `/admin/usage` and the console's report sum those.
      const daily = await db
        .selectFrom('usage_daily')
        .select([
          sql<number>`sum(cache_write_tokens)`.as('written'),
          sql<number>`sum(prompt_cache_saved_micros)`.as('saved'),
          sql<number>`sum(requests)`.as('requests'),
        ])
        .where('account_id', '=', 'acct_p')
        .executeTakeFirstOrThrow();
      assert.deepEqual([Number(daily.written), Number(daily.saved), Number(daily.requests)], [2051, 10 - 1536, 4]);
      const day = utcDay(1_700_000_000_000);
      const [report] = await readUsage(db, usageQuerySchema.parse({ account_id: 'acct_p', from: day, to: day }));
      assert.deepEqual(
        [
          report?.requests,
          report?.cached_tokens,
          report?.cache_write_tokens,
          report?.prompt_cache_saved_micros,
          report?.saved_micros,
        ],
        [4, 9, 2051, -1526, 0],
      );

      // The record takes no NULL in either column.
      const notNull = (error: { code?: string }) => error.code === '23502';
      await assert.rejects(
        sql`update usage set prompt_cache_saved_micros = null where request_id = 'rp-read'`.execute(db),
        notNull,
      );
      await assert.rejects(
        sql`update usage_daily set cache_write_tokens = null where account_id = 'acct_p'`.execute(db),
        notNull,
      );
    },
  );
  it("keeps the message an error told its client: the api's over the worker's, cut at 500 characters, without NUL", async () => {
    const applied = await sql<{ name: string }>`select name from record_migrations order by name`.execute(db);
    assert.ok(
      applied.rows.some((row) => row.name === '0010_error_message'),
      applied.rows.map((row) => row.name).join(' '),
    );
    await sql`insert into accounts (id, created) values ('acct_m', 0) on conflict do nothing`.execute(db);
    const whose = { account_id: 'acct_m', key_id: 'key_m' };
    // The two halves as the stream carries them.
    const log = (id: string, message: unknown) =>
      logRow([
        'log',
        JSON.stringify({
          ...logged(id, 'failed'),
          ...whose,
          http_status: 502,
          error_code: 'mock_error',
          error_message: message,
        }),
      ])!;
    const settlement = (id: string, message: unknown) =>
      usageRow([
        'usage',
        JSON.stringify({
          ...usage(id, 0),
          ...whose,
          status: 'failed',
          error_code: 'mock_error',
          error_message: message,
        }),
      ])!;
    const long = `${'x'.repeat(498)}\u0000yz and more`;
    assert.equal(log('rm-long', long).error_message, `${'x'.repeat(498)}\uFFFDy`);
    assert.equal(log('rm-none', 42).error_message, null);
    assert.equal(settlement('rm-none', '').error_message, null);

    // Both halves in one batch; the log first, then its settlement; the settlement first, then its log; a settlement
    // alone (a batch request's).
    const batch = mergeHalves([settlement('rm-batch', 'worker said')], [log('rm-batch', 'client read')]);
    await db.transaction().execute((tx) => writeUsage(tx, batch.rows));
    await db.transaction().execute((tx) => writeLog(tx, [log('rm-log-first', 'client read')]));
    await db.transaction().execute((tx) => writeUsage(tx, [settlement('rm-log-first', 'worker said')]));
    await db.transaction().execute((tx) => writeUsage(tx, [settlement('rm-settled-first', 'worker said')]));
    await db.transaction().execute((tx) => writeLog(tx, [log('rm-settled-first', 'client read')]));
    await db.transaction().execute((tx) => writeUsage(tx, [settlement('rm-alone', 'worker said')]));
    const ids = ['rm-alone', 'rm-batch', 'rm-log-first', 'rm-settled-first'];
    const views = (
      await db.selectFrom('usage').selectAll().where('request_id', 'in', ids).orderBy('request_id').execute()
    ).map(requestView);
    assert.deepEqual(
      views.map((view) => [view.id, view.error_message]),
      [
        ['rm-alone', 'worker said'],
        ['rm-batch', 'client read'],
        ['rm-log-first', 'client read'],
        ['rm-settled-first', 'client read'],
      ],
    );
  });
});
