import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { freshRedis, paidAccountKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import {
  startFakeOpenAIRealtime,
  type FakeOpenAIRealtime,
  type FakeRealtimeSessionView,
} from '../support/fake-openai-realtime.js';
import { openRealtime, userText, type RealtimeTestClient } from '../support/realtime-client.js';
import { adminClient } from '../support/admin-client.js';
import { waitForUsage } from '../support/record.js';
import { readBill } from '../../shared/money/billing.js';
import { countTextTokens } from '../../shared/tokens.js';
import { budgetCounter } from '../../shared/money/budgets.js';
import { billKey } from '../../shared/redis-keys.js';

/*
 * An open Realtime session does what its key may do NOW, not what it could at the upgrade: the key revoked, its
 * account disabled, its spending limit or its team's budget cut, its models narrowed — the session hears the change
 * and ends (an `error` event in OpenAI's words, close 1008) within a second, idle or not, and a response asked right
 * after the change never reaches OpenAI. And a response the client cuts off is billed: the worker cancels it at
 * OpenAI and bills the usage of the cancel's `response.done`, or, when OpenAI never answers the cancel, the output
 * counted as it passed plus the worst case of its input, within the wait (`cancelWaitMs`, 6 s).
 *
 * Real processes: the gateway (api and worker), Redis, PostgreSQL, the official SDK's `OpenAIRealtimeWS`, the strict
 * fake of OpenAI's Realtime API, changes made through the admin API.
 */

const adminToken = 'realtime-access-admin-token';
/** USD per 1M tokens of gpt-realtime, as the catalog prices it; its context window and most output. */
const PRICE = { text: 4, cachedText: 0.4, textOut: 16, audio: 32, cachedAudio: 0.4, audioOut: 64 };
const CONTEXT_WINDOW = 32_000;
const MAX_OUTPUT = 4_096;
/** A part-micro is a micro: each kind of token priced and rounded up on its own. */
const part = (tokens: number, usd: number) => Math.ceil((tokens * Math.round(usd * 1_000_000)) / 1_000_000);
/** One response's worst case: what the session's reservation holds. */
const WORST_CASE = part(CONTEXT_WINDOW, PRICE.audio) + part(MAX_OUTPUT, PRICE.audioOut);
/** The gateway's wait for a cancelled response's end (workers/realtime/session-run.ts `cancelWaitMs`). */
const CANCEL_WAIT_MS = 6_000;

type ServerEvent = Record<string, any> & { type: string };

function expectedMicros(usage: any): number {
  const input = usage.input_token_details;
  const cached = input.cached_tokens_details;
  return (
    part(input.text_tokens - cached.text_tokens, PRICE.text) +
    part(cached.text_tokens, PRICE.cachedText) +
    part(input.audio_tokens - cached.audio_tokens, PRICE.audio) +
    part(cached.audio_tokens, PRICE.cachedAudio) +
    part(usage.output_token_details.text_tokens, PRICE.textOut) +
    part(usage.output_token_details.audio_tokens, PRICE.audioOut)
  );
}

describe('Realtime sessions do what their key may do now; a response cut off is billed', () => {
  let fake: FakeOpenAIRealtime;
  let redis: Redis;
  let gateway: GatewayProcess;
  let seq = 0;
  const { admin } = adminClient(() => gateway.url, adminToken);

  before(async () => {
    fake = await startFakeOpenAIRealtime();
    const fresh = await freshRedis(11);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        ADMIN_TOKEN: adminToken,
        OPENAI_API_KEY: fake.key,
        OPENAI_BASE_URL: fake.url,
        REALTIME_START_WAIT_MS: '20000',
      },
    });
  });
  afterEach(() => {
    fake.ignoreCancels(false);
    assert.deepEqual(fake.problems, []);
  });
  after(async () => {
    await gateway?.stop();
    await fake?.close();
    redis?.disconnect();
  });

  /**
   * A started gpt-realtime session answering in text: open, session.created and session.updated seen, OpenAI's session
   * found.
   */
  async function start(
    key: string,
    modalities: Array<'text' | 'audio'> = ['text'],
  ): Promise<{
    client: RealtimeTestClient<ServerEvent>;
    vendor: FakeRealtimeSessionView;
    sessionId: string;
    closedAt: Promise<number>;
  }> {
    const client = openRealtime<ServerEvent>(gateway.url, key, 'gpt-realtime');
    await client.opened;
    await client.next('session.created');
    const vendor = fake.sessions.at(-1)!;
    client.send({
      type: 'session.update',
      session: { type: 'realtime', output_modalities: modalities, audio: { input: { turn_detection: null } } },
    });
    await client.next('session.updated');
    return { client, vendor, sessionId: await client.requestId, closedAt: client.closed.then(() => Date.now()) };
  }

  /** A key of a team account ($10, no budget yet), made through the admin API. */
  async function teamKey(): Promise<{ id: string; key: string; account: string }> {
    const team = await admin('POST', '/admin/teams', { name: `Realtime team ${++seq}` });
    assert.equal(team.status, 201, JSON.stringify(team.json));
    const account = String(team.json.id);
    assert.equal((await admin('POST', `/admin/accounts/${account}/credits`, { amount_usd: 10 })).status, 200);
    const made = await admin('POST', '/admin/keys', { name: 'team key', account_id: account });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    return { id: String(made.json.id), key: String(made.json.key), account };
  }

  /** Each change, made through the admin API, and what the session's client is told. */
  const changes: Array<{
    what: string;
    key: () => Promise<{ id: string; key: string; account: string }>;
    change: (k: { id: string; account: string }) => Promise<{ status: number }>;
    error: { type: string; code: string };
  }> = [
    {
      what: 'key revoked',
      key: () => paidAccountKey(redis, 10_000_000),
      change: (k) => admin('DELETE', `/admin/keys/${k.id}`),
      error: { type: 'invalid_request_error', code: 'invalid_api_key' },
    },
    {
      what: 'account disabled',
      key: () => paidAccountKey(redis, 10_000_000),
      change: (k) => admin('PATCH', `/admin/accounts/${k.account}`, { disabled: true }),
      error: { type: 'invalid_request_error', code: 'invalid_api_key' },
    },
    {
      what: "key's limit cut to a micro-dollar",
      key: () => paidAccountKey(redis, 10_000_000, { limitMicros: 5_000_000 }),
      change: (k) => admin('PATCH', `/admin/keys/${k.id}`, { limit_usd: 0.000001 }),
      error: { type: 'insufficient_quota', code: 'insufficient_quota' },
    },
    {
      what: "team's budget cut to a micro-dollar",
      key: teamKey,
      change: (k) => admin('PATCH', `/admin/accounts/${k.account}`, { budget_usd: 0.000001, budget_period: 'day' }),
      error: { type: 'insufficient_quota', code: 'insufficient_quota' },
    },
    {
      what: "key's models narrowed",
      key: () => paidAccountKey(redis, 10_000_000),
      change: (k) => admin('PATCH', `/admin/keys/${k.id}`, { models: ['gpt-realtime-mini'] }),
      error: { type: 'invalid_request_error', code: 'model_not_allowed' },
    },
  ];

  for (const { what, key: makeKey, change, error } of changes) {
    it(`${what}: an idle session gets the error event and close 1008 within a second; nothing billed`, async () => {
      const k = await makeKey();
      const before = await readBill(redis, k.account);
      const { client, vendor, closedAt } = await start(k.key);
      const errorAt = client.next('error', 5_000).then((event) => ({ event, at: Date.now() }));
      const answered = await change(k);
      const changedAt = Date.now();
      assert.equal(answered.status, 200, what);
      const told = await errorAt;
      assert.deepEqual(
        [told.event.error.type, told.event.error.code],
        [error.type, error.code],
        JSON.stringify(told.event),
      );
      const closed = await client.closed;
      assert.equal(closed.code, 1008);
      const closedMs = (await closedAt) - changedAt;
      assert.ok(
        told.at - changedAt < 1000 && closedMs < 1000,
        `told after ${told.at - changedAt} ms, closed after ${closedMs} ms`,
      );
      assert.equal((await vendor.closed).by, 'client', "the gateway closed OpenAI's socket");
      await waitFor(
        async () => (await readBill(redis, k.account))?.reservedMicros === 0,
        5_000,
        'the reservation given back',
      );
      assert.equal((await readBill(redis, k.account))?.balanceMicros, before?.balanceMicros, 'nothing billed');
    });

    it(`${what}: a response asked right after the change never reaches OpenAI`, async () => {
      const k = await makeKey();
      const before = await readBill(redis, k.account);
      const { client, vendor } = await start(k.key);
      assert.equal((await change(k)).status, 200, what);
      client.send(userText('Are you still there?'));
      client.send({ type: 'response.create' });
      const told = await client.next('error', 5_000);
      assert.equal(told.error.code, error.code, JSON.stringify(told));
      assert.equal((await client.closed).code, 1008);
      await vendor.closed;
      assert.equal(
        vendor.received.filter((event: any) => event.type === 'response.create').length,
        0,
        'no response.create reached OpenAI',
      );
      assert.ok(!client.events.some((event) => event.type === 'response.created'), 'no response ran');
      await waitFor(
        async () => (await readBill(redis, k.account))?.reservedMicros === 0,
        5_000,
        'the reservation given back',
      );
      assert.equal((await readBill(redis, k.account))?.balanceMicros, before?.balanceMicros, 'nothing billed');
    });
  }

  it(
    "the key's limit cut while a response is under way: that response is cut, billed with OpenAI's usage, and no " +
      'other runs',
    async () => {
      const k = await paidAccountKey(redis, 10_000_000, { limitMicros: 5_000_000 });
      const { client, vendor, sessionId } = await start(k.key);
      client.send(userText('Talk at length [hold]'));
      client.send({ type: 'response.create' });
      const created = await client.next('response.created');
      await client.next('response.output_text.delta');
      assert.equal((await admin('PATCH', `/admin/keys/${k.id}`, { limit_usd: 0.000001 })).status, 200);
      const told = await client.next('error', 5_000);
      assert.equal(told.error.code, 'insufficient_quota');
      assert.equal((await client.closed).code, 1008);
      await vendor.closed;
      const done = vendor.sent.find((event) => event.type === 'response.done') as any;
      assert.ok(done, 'OpenAI was asked to cancel, and answered');
      assert.equal(done.response.status, 'cancelled');
      const row = await waitForUsage(redis, (r) => r.request_id === `${sessionId}:${created.response.id}`);
      assert.equal(Number(row.cost_micros), expectedMicros(done.response.usage));
      const bill = await readBill(redis, k.account);
      assert.deepEqual(
        [bill!.balanceMicros, bill!.reservedMicros],
        [10_000_000 - expectedMicros(done.response.usage), 0],
      );
      assert.equal(
        vendor.received.filter((event: any) => event.type === 'response.create').length,
        1,
        'no second response',
      );
    },
  );

  it(
    "a team's budget set that still covers: the session goes on, its reservation held once on the new budget, each " +
      'response counted on it',
    async () => {
      const k = await teamKey();
      const { client } = await start(k.key);
      const counter = budgetCounter({ scope: 'team', period: 'day' }, Date.now());
      const held = async () =>
        (await redis.hmget(billKey(k.account), `${counter}.spent`, `${counter}.reserved`)).map((v) => Number(v ?? 0));
      assert.equal(
        (await admin('PATCH', `/admin/accounts/${k.account}`, { budget_usd: 5, budget_period: 'day' })).status,
        200,
      );
      // The reservation the upgrade took, admitted again under the budget now in force: held on it, once.
      await waitFor(async () => (await held())[1] === WORST_CASE, 2_000, 'the reservation held on the new budget');
      client.send(userText('Still here?'));
      client.send({ type: 'response.create' });
      const done = await client.next('response.done');
      assert.equal(done.response.status, 'completed');
      const cost = expectedMicros(done.response.usage);
      // Settled on the budget, and the next response reserved on it again: never two holds for one session.
      await waitFor(async () => (await held())[0] === cost, 5_000, 'the response counted on the budget');
      assert.deepEqual(await held(), [cost, WORST_CASE]);
      assert.ok(!client.events.some((event) => event.type === 'error'), 'no error');
      client.rt.close();
      await client.closed;
      await waitFor(
        async () => (await held())[1] === 0 && (await readBill(redis, k.account))?.reservedMicros === 0,
        5_000,
        'given back at the end',
      );
      assert.equal((await readBill(redis, k.account))?.balanceMicros, 10_000_000 - cost);
    },
  );

  it("bills a response the client cuts off with OpenAI's usage from the cancel's response.done", async () => {
    const k = await paidAccountKey(redis, 10_000_000);
    const { client, vendor, sessionId } = await start(k.key);
    // An 80 KB prompt, and an answer that goes on until it is cancelled.
    client.send(userText(`${'Repeat after me, every word of it. '.repeat(2300)} [hold]`));
    client.send({ type: 'response.create' });
    const created = await client.next('response.created');
    await client.next('response.output_text.delta');
    client.rt.close();
    await client.closed;
    const end = await vendor.closed;
    assert.equal(end.by, 'client', "the gateway closed OpenAI's socket");
    const done = vendor.sent.find((event) => event.type === 'response.done') as any;
    assert.ok(done, 'the gateway asked OpenAI to cancel the response and it answered');
    assert.equal(done.response.status, 'cancelled');
    assert.ok(
      vendor.received.some((event: any) => event.type === 'response.cancel'),
      'a response.cancel reached OpenAI',
    );
    assert.ok(done.response.usage.input_tokens > 20_000, `the prompt counted: ${done.response.usage.input_tokens}`);
    const cost = expectedMicros(done.response.usage);
    const row = await waitForUsage(redis, (r) => r.request_id === `${sessionId}:${created.response.id}`);
    assert.deepEqual([Number(row.cost_micros), row.status, row.finish_reason], [cost, 'cancelled', 'cancelled']);
    assert.deepEqual(
      [Number(row.input_tokens), Number(row.output_tokens)],
      [done.response.usage.input_tokens, done.response.usage.output_tokens],
    );
    await waitFor(
      async () => (await readBill(redis, k.account))?.reservedMicros === 0,
      5_000,
      'the reservation given back',
    );
    assert.equal((await readBill(redis, k.account))?.balanceMicros, 10_000_000 - cost);
    const session = await waitForUsage(redis, (r) => r.request_id === sessionId);
    assert.deepEqual([session.finish_reason, Number(session.cost_micros)], ['client_closed', cost]);
  });

  it(
    'bills a cut-off response OpenAI never ends at the output counted and the worst case of its input, within the ' +
      'wait; the balance never below zero',
    async () => {
      // Enough for one response's worst case and a little more: the fallback is held to what the reservation covered.
      const balance = WORST_CASE + 5_000;
      const k = await paidAccountKey(redis, balance);
      const { client, vendor, sessionId } = await start(k.key, ['audio']);
      fake.ignoreCancels(true);
      client.send(userText('Sing me something long [hold]'));
      client.send({ type: 'response.create' });
      const created = await client.next('response.created');
      const audio = await client.next('response.output_audio.delta');
      const transcript = await client.next('response.output_audio_transcript.delta');
      const closedAt = Date.now();
      client.rt.close();
      await client.closed;
      const end = await vendor.closed;
      const waited = Date.now() - closedAt;
      assert.equal(end.by, 'client');
      assert.ok(
        waited >= CANCEL_WAIT_MS - 500,
        `OpenAI's socket closed only after the wait for the cancel: ${waited} ms`,
      );
      assert.ok(
        vendor.received.some((event: any) => event.type === 'response.cancel'),
        'a response.cancel reached OpenAI',
      );
      assert.ok(!vendor.sent.some((event) => event.type === 'response.done'), 'OpenAI never ended the response');
      // The output as it passed: the transcript's tokens, the audio at 20 tokens a second (24 kHz pcm16); the input's
      // worst case.
      const audioTokens = Math.ceil(Buffer.from(audio.delta, 'base64').length / 2_400);
      const textTokens = countTextTokens(transcript.delta);
      const expected =
        part(CONTEXT_WINDOW, PRICE.audio) + part(textTokens, PRICE.textOut) + part(audioTokens, PRICE.audioOut);
      assert.ok(expected <= WORST_CASE);
      const row = await waitForUsage(
        redis,
        (r) => r.request_id === `${sessionId}:${created.response.id}`,
        CANCEL_WAIT_MS + 5_000,
      );
      assert.ok(
        Date.now() - closedAt < CANCEL_WAIT_MS + 4_000,
        `billed ${Date.now() - closedAt} ms after the client left`,
      );
      assert.deepEqual([Number(row.cost_micros), row.status, row.finish_reason], [expected, 'cancelled', 'incomplete']);
      assert.deepEqual(
        [Number(row.input_tokens), Number(row.output_tokens)],
        [CONTEXT_WINDOW, textTokens + audioTokens],
      );
      await waitFor(
        async () => (await readBill(redis, k.account))?.reservedMicros === 0,
        5_000,
        'the reservation given back',
      );
      const bill = await readBill(redis, k.account);
      assert.equal(bill!.balanceMicros, balance - expected);
      assert.ok(bill!.balanceMicros >= 0);
    },
  );
});
