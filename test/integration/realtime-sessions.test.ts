import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import {
  freshRedis,
  paidAccountKey,
  requestRecord,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';
import { openRealtime, userText, type RealtimeTestClient, type ServerEvent } from '../support/realtime-client.js';
import { loadCatalog } from '../../shared/catalog.js';
import { readBill, reserve } from '../../shared/money/billing.js';
import { PriceList } from '../../shared/money/pricing.js';
import {
  readRealtimeUsage,
  realtimeResponseCostMicros,
  realtimeResponseWorstCaseMicros,
  settleRealtimeResponse,
} from '../../shared/money/realtime.js';
import { realtimeLaneQueueName, shardQueueName } from '../../shared/queues.js';

/**
 * Realtime sessions end to end (api/realtime/ and workers/realtime/ in one gateway, the official SDK's
 * `OpenAIRealtimeWS` as the client) on the mock vendor's `mock-realtime`: text, audio both ways, a function call
 * round trip, a cancel; each response billed at the model's prices as it ends (the balance moves by exactly their
 * sum), a balance that runs out mid-session, the session's request-log row, and fair starts between two accounts
 * while the vendor's session cap is full.
 */

const pricing = {
  input_per_1m: 4,
  cached_input_per_1m: 0.4,
  output_per_1m: 16,
  audio_input_per_1m: 32,
  audio_output_per_1m: 64,
};
const catalog = loadCatalog(undefined);
const prices = new PriceList(catalog.all(), { overrides: { 'mock-realtime': pricing } });
const model = catalog.get('mock-realtime')!;
const pricingFile = join(mkdtempSync(join(tmpdir(), 'sy-rt-')), 'prices.json');
writeFileSync(pricingFile, JSON.stringify({ models: { 'mock-realtime': pricing } }));

const costOf = (done: ServerEvent) =>
  realtimeResponseCostMicros(prices, 'mock-realtime', readRealtimeUsage((done.response as { usage: unknown }).usage));

async function started(gatewayUrl: string, key: string): Promise<RealtimeTestClient & { sessionId: string }> {
  const client = openRealtime(gatewayUrl, key);
  await client.opened;
  const created = await client.next('session.created');
  const session = created.session as { id: string; model: string };
  assert.equal(session.model, 'mock-realtime', 'session.model is the model as the client named it');
  return { ...client, sessionId: session.id };
}

describe('Realtime sessions through the gateway on the mock', () => {
  let gateway: GatewayProcess;
  let redis: Redis;

  before(async () => {
    const fresh = await freshRedis(1);
    redis = fresh.redis;
    gateway = await startGateway({
      env: { REDIS_URL: fresh.url, MOCK_VENDOR: 'on', PRICING_FILE: pricingFile, REALTIME_START_WAIT_MS: '20000' },
    });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it('answers text: session.update, an item, a response in deltas, response.done', async () => {
    const { key } = await paidAccountKey(redis, 10_000_000);
    const client = await started(gateway.url, key);
    client.rt.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'] } });
    const updated = await client.next('session.updated');
    assert.deepEqual((updated.session as { output_modalities: string[] }).output_modalities, ['text']);
    assert.equal((updated.session as { model: string }).model, 'mock-realtime');
    client.rt.send(userText('What is a switchyard?'));
    await client.next('conversation.item.done');
    client.rt.send({ type: 'response.create' });
    const done = await client.next('response.done');
    const text = client.events
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    assert.equal(text, 'Mock reply: What is a switchyard?');
    assert.equal((done.response as { status: string }).status, 'completed');
    // The worker's metrics: the session open on its vendor, frames relayed both ways, the latency added on the way up.
    const metrics = await (await fetch(`${gateway.url}/metrics`)).text();
    assert.match(metrics, /switchyard_realtime_worker_sessions_open\{vendor="mock"\} [1-9]/);
    assert.match(metrics, /switchyard_realtime_worker_frames_total\{direction="up"\} [1-9]/);
    assert.match(metrics, /switchyard_realtime_worker_frames_total\{direction="down"\} [1-9]/);
    assert.match(metrics, /switchyard_realtime_worker_added_latency_seconds_count\{direction="up"\} [1-9]/);
    client.rt.close();
    assert.equal((await client.closed).code, 1000);
  });

  it('carries audio both ways: pcm16 appended and committed, pcm16 at 24 kHz spoken back with its transcript', async () => {
    const { key } = await paidAccountKey(redis, 10_000_000);
    const client = await started(gateway.url, key);
    const second = Buffer.alloc(24_000 * 2);
    for (let i = 0; i < 24_000; i++)
      second.writeInt16LE(Math.round(4000 * Math.sin((2 * Math.PI * 300 * i) / 24_000)), i * 2);
    // Ten 100 ms frames, as a microphone sends them.
    for (let at = 0; at < second.length; at += 4800)
      client.rt.send({ type: 'input_audio_buffer.append', audio: second.subarray(at, at + 4800).toString('base64') });
    client.rt.send({ type: 'input_audio_buffer.commit' });
    await client.next('input_audio_buffer.committed');
    client.rt.send({ type: 'response.create' });
    const done = await client.next('response.done');
    const audio = Buffer.concat(
      client.events
        .filter((e) => e.type === 'response.output_audio.delta')
        .map((e) => Buffer.from(String(e.delta), 'base64')),
    );
    assert.ok(audio.length >= 4800 && audio.length % 2 === 0, `${audio.length} bytes of pcm16`);
    let peak = 0;
    for (let i = 0; i < audio.length; i += 2) peak = Math.max(peak, Math.abs(audio.readInt16LE(i)));
    assert.ok(peak > 1000, 'real samples, not silence');
    assert.equal((await client.next('response.output_audio_transcript.done')).transcript, 'I heard 1000 ms of audio.');
    const tokens = readRealtimeUsage((done.response as { usage: unknown }).usage);
    assert.equal(tokens.audioInput, 10, 'a second of input audio, at 10 tokens a second');
    assert.ok(tokens.audioOutput > 0);
    client.rt.close();
    await client.closed;
  });

  it('runs a function call round trip', async () => {
    const { key } = await paidAccountKey(redis, 10_000_000);
    const client = await started(gateway.url, key);
    client.rt.send({
      type: 'session.update',
      session: {
        type: 'realtime',
        output_modalities: ['text'],
        tools: [
          {
            type: 'function',
            name: 'lookup_train',
            description: 'Finds a train',
            parameters: { type: 'object', properties: { number: { type: 'string' } }, required: ['number'] },
          },
        ],
      },
    });
    await client.next('session.updated');
    client.rt.send(userText('Please call lookup_train for the 8:15'));
    client.rt.send({ type: 'response.create' });
    const call = await client.next('response.function_call_arguments.done');
    assert.equal(call.name, 'lookup_train');
    assert.deepEqual(JSON.parse(String(call.arguments)), { number: 'mock' });
    await client.next('response.done');
    client.rt.send({
      type: 'conversation.item.create',
      item: { type: 'function_call_output', call_id: String(call.call_id), output: '{"platform":4}' },
    });
    client.rt.send({ type: 'response.create' });
    assert.equal((await client.next('response.output_text.done')).text, 'The function said: {"platform":4}');
    await client.next('response.done');
    client.rt.close();
    await client.closed;
  });

  it('cancels a response under way: response.done says cancelled, and what it wrote is billed', async () => {
    const { key, account } = await paidAccountKey(redis, 10_000_000);
    const client = await started(gateway.url, key);
    client.rt.send(userText('[mock:slow:200] one two three four five six seven eight nine ten'));
    client.rt.send({ type: 'response.create' });
    await client.next('response.output_audio.delta');
    client.rt.send({ type: 'response.cancel' });
    const done = await client.next('response.done');
    assert.equal((done.response as { status: string }).status, 'cancelled');
    client.rt.close();
    await client.closed;
    const row = await requestRecord(gateway.url, key, client.sessionId, 'session');
    assert.equal(row.cost_micros, costOf(done));
    const bill = await readBill(redis, account);
    assert.equal(bill!.balanceMicros, 10_000_000 - costOf(done));
  });

  it('bills each response as it ends: the balance moves by exactly their sum, and the session has one row', async () => {
    const { key, account } = await paidAccountKey(redis, 10_000_000);
    const client = await started(gateway.url, key);
    const dones: ServerEvent[] = [];
    client.rt.send(userText('First question'));
    client.rt.send({ type: 'response.create' });
    dones.push(await client.next('response.done'));
    client.rt.send(userText('Second question, a little longer than the first'));
    client.rt.send({ type: 'response.create', response: { output_modalities: ['text'] } });
    dones.push(await client.next('response.done'));
    const sum = dones.map(costOf).reduce((a, b) => a + b, 0);
    assert.ok(dones.every((done) => costOf(done) > 0));
    // While the session lives, the next response is reserved: the balance has moved by what ran.
    await waitFor(
      async () => (await readBill(redis, account))?.balanceMicros === 10_000_000 - sum,
      5000,
      'both responses settled',
    );
    const live = await readBill(redis, account);
    assert.equal(live!.reservedMicros, realtimeResponseWorstCaseMicros(prices, model));
    client.rt.close();
    await client.closed;

    const row = await requestRecord(gateway.url, key, client.sessionId, 'session');
    assert.equal(row.endpoint, 'realtime');
    assert.equal(row.model, 'mock-realtime');
    assert.equal(row.cost_micros, sum);
    const tokens = dones.map((d) => readRealtimeUsage((d.response as { usage: unknown }).usage));
    assert.equal(
      row.output_tokens,
      tokens.reduce((a, t) => a + t.textOutput + t.audioOutput, 0),
    );
    assert.equal(
      row.input_tokens,
      tokens.reduce((a, t) => a + t.textInput + t.audioInput + t.cachedTextInput + t.cachedAudioInput, 0),
    );
    assert.equal(row.finish_reason, 'client_closed');
    assert.equal(row.answer_id, client.sessionId);
    assert.ok(row.latency_ms === null || row.latency_ms >= 0);
    const bill = await readBill(redis, account);
    assert.deepEqual(
      { balance: bill!.balanceMicros, reserved: bill!.reservedMicros },
      { balance: 10_000_000 - sum, reserved: 0 },
    );
    // Each response is a settlement of its own, under the session's id and the response's.
    for (const done of dones) {
      const part = await requestRecord(
        gateway.url,
        key,
        `${client.sessionId}:${(done.response as { id: string }).id}`,
        'session',
      );
      assert.equal(part.endpoint, 'realtime.response');
      assert.equal(part.cost_micros, costOf(done));
    }
  });

  it('relays the vendor ending the session: an error event, then close 1011; the session row says so', async () => {
    const { key } = await paidAccountKey(redis, 10_000_000);
    const client = await started(gateway.url, key);
    client.rt.send(userText('[mock:vendor-close]'));
    client.rt.send({ type: 'response.create' });
    const error = await client.next('error');
    assert.equal((error.error as { type: string }).type, 'server_error');
    assert.equal((await client.closed).code, 1011);
    const row = await requestRecord(gateway.url, key, client.sessionId, 'session');
    assert.equal(row.finish_reason, 'vendor_failed');
    assert.equal(row.status, 'failed');
  });

  it(
    'ends the session when the balance cannot cover the next response: an insufficient_quota error event and a ' +
      'close, never a negative balance',
    async () => {
      const worst = realtimeResponseWorstCaseMicros(prices, model);
      // Enough to start (the first response's worst case) and one micro more: after one response, not enough for another.
      const { key, account } = await paidAccountKey(redis, worst + 1);
      const client = await started(gateway.url, key);
      client.rt.send(userText('Spend it'));
      client.rt.send({ type: 'response.create' });
      const done = await client.next('response.done');
      const error = await client.next('error');
      assert.deepEqual(
        { type: (error.error as { type: string }).type, code: (error.error as { code: string }).code },
        { type: 'insufficient_quota', code: 'insufficient_quota' },
      );
      const closed = await client.closed;
      assert.ok(closed.code >= 1000 && closed.code !== 1006, `closed with ${closed.code}`);
      const bill = await readBill(redis, account);
      assert.equal(bill!.balanceMicros, worst + 1 - costOf(done));
      assert.ok(bill!.balanceMicros! >= 0);
      assert.equal(bill!.reservedMicros, 0);
      const row = await requestRecord(gateway.url, key, client.sessionId, 'session');
      assert.equal(row.finish_reason, 'insufficient_quota');
      assert.equal(row.cost_micros, costOf(done));
    },
  );

  it("holds each renewal to the key's spending limit too: a rich account's key past its limit ends the session", async () => {
    const worst = realtimeResponseWorstCaseMicros(prices, model);
    // The account could pay for many responses; the key's limit covers the first response's worst case and one micro.
    const { key, account } = await paidAccountKey(redis, worst * 100, { limitMicros: worst + 1 });
    const client = await started(gateway.url, key);
    client.rt.send(userText('Spend the key'));
    client.rt.send({ type: 'response.create' });
    const done = await client.next('response.done');
    const error = await client.next('error');
    assert.equal((error.error as { code: string }).code, 'insufficient_quota');
    await client.closed;
    const bill = await readBill(redis, account);
    assert.equal(bill!.balanceMicros, worst * 100 - costOf(done), 'only the response that ran is billed');
    assert.equal(bill!.reservedMicros, 0);
  });
});

describe('Realtime settlement in Redis', () => {
  let redis: Redis;
  before(async () => {
    redis = (await freshRedis(3)).redis;
  });
  after(() => redis?.disconnect());

  it('settles a response once however often its response.done comes, and renews the reservation in the same step', async () => {
    const { id: keyId, account } = await paidAccountKey(redis, 1_000_000);
    const outcome = await reserve(
      redis,
      { requestId: 'sess_twice', keyId, accountId: account, micros: 200_000, tokens: 0, deadline: Date.now() + 60_000 },
      {},
    );
    assert.equal(outcome.ok, true);
    const entry = {
      request_id: 'sess_twice:resp_1',
      key_id: keyId,
      account_id: account,
      model: 'mock-realtime',
      vendor: 'mock',
      input_tokens: 10,
      cached_tokens: 0,
      cache_write_tokens: 0,
      output_tokens: 5,
      images: 0,
      audio_seconds: 0,
      video_seconds: 0,
      cost_micros: 1234,
      service_tier: 'default' as const,
      status: 'completed' as const,
      created: 0,
      duration_ms: 1,
    };
    const policy = { bufferRecords: 1000, keepSettledMs: 60_000 };
    const first = await settleRealtimeResponse(
      redis,
      'sess_twice',
      entry,
      200_000,
      Date.now() + 60_000,
      undefined,
      policy,
    );
    const again = await settleRealtimeResponse(
      redis,
      'sess_twice',
      entry,
      200_000,
      Date.now() + 60_000,
      undefined,
      policy,
    );
    assert.deepEqual(first, { applied: true, next: 'held', alerts: [] });
    assert.equal(again.applied, false);
    assert.deepEqual(await readBill(redis, account), {
      balanceMicros: 1_000_000 - 1234,
      reservedMicros: 200_000,
      unlimited: false,
    });
    // The next response is one the balance cannot cover: settled, and nothing reserved.
    const dear = { ...entry, request_id: 'sess_twice:resp_2', cost_micros: 900_000 };
    assert.deepEqual(
      await settleRealtimeResponse(redis, 'sess_twice', dear, 200_000, Date.now() + 60_000, undefined, policy),
      { applied: true, next: 'refused', alerts: [] },
    );
    assert.deepEqual(await readBill(redis, account), {
      balanceMicros: 1_000_000 - 1234 - 900_000,
      reservedMicros: 0,
      unlimited: false,
    });
  });
});

describe('Realtime starts with the vendor session cap full', () => {
  let gateway: GatewayProcess;
  let redis: Redis;

  before(async () => {
    const fresh = await freshRedis(2);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        MOCK_VENDOR: 'on',
        REALTIME_VENDOR_SESSIONS_MOCK: '1',
        REALTIME_START_WAIT_MS: '60000',
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it('takes them in turn between two accounts of equal weight, whatever order they came in', async () => {
    const a = await paidAccountKey(redis, 'unlimited');
    const b = await paidAccountKey(redis, 'unlimited');
    const lane = new Queue(realtimeLaneQueueName('mock'), { connection: redis });
    const shared = new Queue(shardQueueName('realtime', 0), { connection: redis });
    try {
      // One session of A's holds the only slot.
      const holder = await started(gateway.url, a.key);
      const order: string[] = [];
      const waiting: Array<{ who: string; client: RealtimeTestClient }> = [];
      const open = (who: string, key: string) => {
        const client = openRealtime(gateway.url, key);
        waiting.push({ who, client });
        // Each starts only when the one before it ends: it is closed as soon as it has started.
        client.opened.then(
          async () => {
            order.push(who);
            await client.next('session.created');
            client.rt.close();
          },
          () => order.push(`${who}:refused`),
        );
      };
      // A floods first, then B asks.
      for (let i = 0; i < 4; i++) open('A', a.key);
      await waitFor(async () => (await lane.getPrioritizedCount()) === 4, 10_000, "A's four starts to wait");
      for (let i = 0; i < 4; i++) open('B', b.key);
      await waitFor(async () => (await lane.getPrioritizedCount()) === 8, 10_000, "B's four starts to wait");
      assert.equal(await shared.getWaitingCount(), 0, 'capped sessions wait in their vendor lane');
      assert.deepEqual(order, [], 'nothing starts while the slot is held');
      holder.rt.close();
      await holder.closed;
      await waitFor(() => order.length === 8, 30_000, 'every start');
      // The holder was taken while nothing waited, so both accounts stand level (a band with nothing waiting drops its
      // tags): A, which asked first, starts first, and from then on the two alternate, however many A queued ahead.
      assert.deepEqual(order, ['A', 'B', 'A', 'B', 'A', 'B', 'A', 'B']);
      await Promise.all(waiting.map(({ client }) => client.closed));
      await waitFor(async () => (await lane.getActiveCount()) === 0, 10_000, 'the slot to be free');
    } finally {
      await lane.close();
      await shared.close();
    }
  });
});
