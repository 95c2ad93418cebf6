import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { echoServiceTier, startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { startFakeAnthropic, type FakeAnthropic } from '../support/fake-anthropic.js';
import {
  freshRedis,
  paidAccountKey,
  requestRecord,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';
import type { RequestView } from '../../shared/money/usage.js';

/*
 * `service_tier` past the answer: the tier a request was served in
 * (shared/scheduling/served-tier.ts) is what its answer says, what it is charged at
 * and what its request-log row (`GET /v1/generation`, `GET /admin/requests`
 * with its `service_tier` filter) records; its reservation covers the
 * dearest tier it may be billed at. OpenAI sells tiers: it is sent the band
 * and its answer's word is billed. DeepSeek (OpenAI's wire protocol) and
 * Anthropic sell none: they never see `service_tier`, and the gateway's queue
 * decides (priority only where work waited, flex only after
 * SERVICE_TIER_FLEX_MIN_WAIT_MS in the queue). Tier prices: flex 0.5,
 * priority 2.
 */

const adminToken = 'service-tier-admin-token';
const openaiModel = 'gpt-4o';
const deepseekModel = 'deepseek-chat';
const anthropicModel = 'claude-sonnet-4-5';
const flexMinWaitMs = 1000;

type Json = Record<string, any>;

describe('service tiers: the tier served is echoed and billed', () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let openai: FakeOpenAI;
  let deepseek: FakeOpenAI;
  let anthropic: FakeAnthropic;

  before(async () => {
    // OpenAI answers the tier it was asked (as OpenAI does); the DeepSeek stand-in claims flex, which counts for
    // nothing.
    [openai, deepseek, anthropic] = await Promise.all([
      startFakeOpenAI({ serviceTier: echoServiceTier }),
      startFakeOpenAI({ serviceTier: 'flex' }),
      startFakeAnthropic(),
    ]);
    let url: string;
    ({ redis, url } = await freshRedis(3));
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_TOKEN: adminToken,
        OPENAI_API_KEY: 'sk-tier-openai',
        OPENAI_BASE_URL: openai.url,
        DEEPSEEK_API_KEY: 'sk-tier-deepseek',
        DEEPSEEK_BASE_URL: deepseek.url,
        ANTHROPIC_API_KEY: 'sk-ant-tier',
        ANTHROPIC_BASE_URL: anthropic.url,
        // One call at a time: a second request waits in the queue behind a slow first.
        ANTHROPIC_MAX_CONCURRENCY: '1',
        // Priority is an admin's grant; this gateway grants every tier to every account.
        SERVICE_TIERS_GRANTED: 'priority,default,flex',
        SERVICE_TIER_FLEX_MIN_WAIT_MS: String(flexMinWaitMs),
      },
    });
  });
  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), deepseek?.close(), anthropic?.close()]);
    redis?.disconnect();
  });

  const post = (key: string, path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const admin = async (query: string) => {
    const res = await fetch(`${gateway.url}/admin/requests${query}`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    return { status: res.status, body: (await res.json()) as { data: RequestView[]; error?: { param?: string } } };
  };
  const chatBody = (model: string, tier: string | undefined, extra: Json = {}) => ({
    model,
    messages: [{ role: 'user', content: 'Tell me about tiers' }],
    max_tokens: 40,
    ...(tier ? { service_tier: tier } : {}),
    ...extra,
  });
  /** A plain chat completion: its body and its settled row. */
  const chat = async (key: string, model: string, tier: string | undefined, extra: Json = {}) => {
    const res = await post(key, '/v1/chat/completions', chatBody(model, tier, extra));
    assert.equal(res.status, 200, await res.clone().text());
    const body = (await res.json()) as Json;
    return { body, row: await requestRecord(gateway.url, key, res.headers.get('x-request-id')!) };
  };
  /** A streamed request's `data:` payloads (the chunks, or the Responses events) and its settled row. */
  const stream = async (key: string, path: string, body: Json) => {
    const res = await post(key, path, { ...body, stream: true });
    assert.equal(res.status, 200, await res.clone().text());
    const text = await res.text();
    const data = text
      .split('\n\n')
      .map((frame) =>
        frame
          .split('\n')
          .find((line) => line.startsWith('data: '))
          ?.slice('data: '.length),
      )
      .filter((payload): payload is string => payload !== undefined && payload !== '' && payload !== '[DONE]')
      .map((payload) => JSON.parse(payload) as Json);
    assert.ok(data.length > 0, `no data in ${text}`);
    return { data, row: await requestRecord(gateway.url, key, res.headers.get('x-request-id')!) };
  };
  const sentTiers = (fake: FakeOpenAI) =>
    fake.requests.map((request) => (request.body as Json).service_tier as unknown);

  it(
    'OpenAI: is sent the band, and the tier its answer says is echoed and billed (flex half, priority double, a ' +
      'downgrade at default)',
    async () => {
      const { key, account } = await paidAccountKey(redis, 5_000_000);
      openai.reset();
      const base = await chat(key, openaiModel, undefined);
      assert.equal(base.body.service_tier, 'default');
      assert.equal(base.row.service_tier, 'default');
      assert.ok(base.row.cost_micros > 0);

      const flex = await chat(key, openaiModel, 'flex');
      assert.equal(flex.body.service_tier, 'flex');
      assert.equal(flex.row.service_tier, 'flex');
      assert.equal(flex.row.cost_micros, Math.ceil(base.row.cost_micros / 2));

      const priority = await chat(key, openaiModel, 'priority');
      assert.equal(priority.body.service_tier, 'priority');
      assert.equal(priority.row.service_tier, 'priority');
      assert.equal(priority.row.cost_micros, base.row.cost_micros * 2);
      assert.deepEqual(sentTiers(openai), ['default', 'flex', 'priority'], 'what OpenAI received');

      // OpenAI served the priority request at default: the answer says so, and the bill is the default price.
      openai.setServiceTier('default');
      const downgraded = await chat(key, openaiModel, 'priority');
      assert.equal(openai.requests.at(-1)!.body && (openai.requests.at(-1)!.body as Json).service_tier, 'priority');
      assert.equal(downgraded.body.service_tier, 'default');
      assert.equal(downgraded.row.service_tier, 'default');
      assert.equal(downgraded.row.cost_micros, base.row.cost_micros);
      openai.setServiceTier(undefined);

      // auto and scale are OpenAI's words, never sent: the band is default.
      openai.reset();
      for (const asked of ['auto', 'scale']) {
        const answered = await chat(key, openaiModel, asked);
        assert.equal(answered.body.service_tier, 'default', asked);
        assert.equal(answered.row.cost_micros, base.row.cost_micros, asked);
      }
      assert.deepEqual(sentTiers(openai), ['default', 'default']);

      // The admin's list filters by the tier served.
      const flexRows = await admin(`?account_id=${account}&service_tier=flex`);
      assert.equal(flexRows.status, 200);
      assert.deepEqual(
        flexRows.body.data.map((row) => row.id),
        [flex.row.id],
      );
      const defaultRows = await admin(`?account_id=${account}&service_tier=default`);
      assert.equal(defaultRows.body.data.length, 4);
      assert.ok(
        defaultRows.body.data.some((row) => row.id === downgraded.row.id),
        'the downgraded priority request is a default row',
      );
      assert.ok(defaultRows.body.data.every((row) => row.service_tier === 'default'));
      const refused = await admin(`?service_tier=turbo`);
      assert.equal(refused.status, 400);
      assert.equal(refused.body.error?.param, 'service_tier');
    },
  );

  it('a stream: every chunk says the tier served, the first chunk of a vendor that sells tiers deciding it', async () => {
    const { key } = await paidAccountKey(redis, 5_000_000);
    const flex = await stream(
      key,
      '/v1/chat/completions',
      chatBody(openaiModel, 'flex', { stream_options: { include_usage: true } }),
    );
    assert.deepEqual([...new Set(flex.data.map((chunk) => chunk.service_tier))], ['flex']);
    assert.equal(flex.row.service_tier, 'flex');

    openai.setServiceTier('default');
    const downgraded = await stream(key, '/v1/chat/completions', chatBody(openaiModel, 'priority'));
    openai.setServiceTier(undefined);
    assert.deepEqual([...new Set(downgraded.data.map((chunk) => chunk.service_tier))], ['default']);
    assert.equal(downgraded.row.service_tier, 'default');

    // Anthropic sells no tiers: served at once, a flex request is default on every chunk, and billed so.
    const atOnce = await stream(key, '/v1/chat/completions', chatBody(anthropicModel, 'flex'));
    assert.ok(atOnce.data.length > 1);
    assert.deepEqual([...new Set(atOnce.data.map((chunk) => chunk.service_tier))], ['default']);
    assert.equal(atOnce.row.service_tier, 'default');
  });

  it(
    'DeepSeek speaks OpenAI but sells no tiers: it never receives service_tier, and what it claims counts for ' +
      'nothing',
    async () => {
      const { key } = await paidAccountKey(redis, 5_000_000);
      deepseek.reset();
      const base = await chat(key, deepseekModel, undefined);
      assert.equal(base.body.service_tier, 'default');
      assert.ok(base.row.cost_micros > 0);
      // Served at once: flex buys no discount; nothing waited: priority costs nothing more.
      for (const asked of ['flex', 'priority']) {
        const answered = await chat(key, deepseekModel, asked);
        assert.equal(answered.body.service_tier, 'default', asked);
        assert.equal(answered.row.service_tier, 'default', asked);
        assert.equal(answered.row.cost_micros, base.row.cost_micros, asked);
      }
      const streamed = await stream(key, '/v1/chat/completions', chatBody(deepseekModel, 'flex'));
      assert.deepEqual([...new Set(streamed.data.map((chunk) => chunk.service_tier))], ['default']);
      assert.equal(deepseek.requests.length, 4);
      for (const request of deepseek.requests)
        assert.equal('service_tier' in (request.body as Json), false, 'DeepSeek received service_tier');
    },
  );

  it(
    'Anthropic: a flex request served at once is billed default; one that waited SERVICE_TIER_FLEX_MIN_WAIT_MS in ' +
      'the queue is billed flex',
    async () => {
      const { key } = await paidAccountKey(redis, 5_000_000);
      anthropic.reset();
      const base = await chat(key, anthropicModel, undefined);
      assert.ok(base.row.cost_micros > 0);
      const atOnce = await chat(key, anthropicModel, 'flex');
      assert.equal(atOnce.body.service_tier, 'default');
      assert.equal(atOnce.row.service_tier, 'default');
      assert.equal(atOnce.row.cost_micros, base.row.cost_micros, 'the full price');

      // A slow call holds Anthropic's one slot, and a second request the lane's other place (a lane of cap 1 runs 2 jobs,
      // the second waiting in its worker for the slot): the flex request waits in the queue until the slow call ends.
      anthropic.enqueue({
        delayMs: flexMinWaitMs + 1500,
        json: {
          id: 'msg_slow',
          type: 'message',
          role: 'assistant',
          model: anthropicModel,
          content: [{ type: 'text', text: 'slow' }],
          stop_reason: 'end_turn',
          stop_sequence: null,
          usage: { input_tokens: 5, output_tokens: 1 },
        },
      });
      const slow = chat(key, anthropicModel, undefined);
      await waitFor(() => anthropic.inFlight === 1, 10_000, 'the slow call to hold the slot');
      const next = chat(key, anthropicModel, undefined);
      await sleep(300);
      const waited = await chat(key, anthropicModel, 'flex');
      await Promise.all([slow, next]);
      assert.ok((waited.row.queue_ms ?? 0) >= flexMinWaitMs, `it waited ${waited.row.queue_ms} ms`);
      assert.equal(waited.body.service_tier, 'flex');
      assert.equal(waited.row.service_tier, 'flex');
      assert.equal(waited.row.cost_micros, Math.ceil(base.row.cost_micros / 2));
      for (const request of anthropic.requests)
        assert.equal('service_tier' in (request.body as Json), false, 'Anthropic received service_tier');
    },
  );

  it('the Responses API: the object says the tier served, and is billed at it', async () => {
    const { key } = await paidAccountKey(redis, 5_000_000);
    openai.reset();
    const ask = async (model: string, tier: string) => {
      const res = await post(key, '/v1/responses', {
        model,
        input: 'Tell me about tiers',
        max_output_tokens: 40,
        service_tier: tier,
      });
      assert.equal(res.status, 200, await res.clone().text());
      return {
        object: (await res.json()) as Json,
        row: await requestRecord(gateway.url, key, res.headers.get('x-request-id')!),
      };
    };
    const flex = await ask(openaiModel, 'flex');
    assert.equal(flex.object.service_tier, 'flex');
    assert.equal(flex.row.service_tier, 'flex');
    const auto = await ask(openaiModel, 'auto');
    assert.equal(auto.object.service_tier, 'default');
    assert.deepEqual(sentTiers(openai), ['flex', 'default']);
    assert.equal(flex.row.cost_micros, Math.ceil(auto.row.cost_micros / 2));

    const anthropicFlex = await ask(anthropicModel, 'flex');
    assert.equal(anthropicFlex.object.service_tier, 'default');
    assert.equal(anthropicFlex.row.service_tier, 'default');

    // Streamed, and downgraded by OpenAI: every response event says default.
    openai.setServiceTier('default');
    const events = await stream(key, '/v1/responses', {
      model: openaiModel,
      input: 'Tell me about tiers',
      max_output_tokens: 40,
      service_tier: 'priority',
    });
    openai.setServiceTier(undefined);
    const said = events.data.filter((event) => event.response).map((event) => event.response.service_tier);
    assert.ok(said.length >= 3, 'created, in progress, completed');
    assert.deepEqual([...new Set(said)], ['default']);
    assert.equal(events.row.service_tier, 'default');
    const stored = await fetch(`${gateway.url}/v1/responses/${events.data[0]!.response.id}`, {
      headers: { authorization: `Bearer ${key}` },
    });
    assert.equal(((await stored.json()) as Json).service_tier, 'default', 'the stored response');
  });

  it('legacy completions have no service_tier: the vendor never receives it, and it is billed default', async () => {
    const { key } = await paidAccountKey(redis, 5_000_000);
    openai.reset();
    const complete = async (tier?: string) => {
      const res = await post(key, '/v1/completions', {
        model: 'gpt-3.5-turbo-instruct',
        prompt: 'Say this is a test',
        max_tokens: 10,
        ...(tier ? { service_tier: tier } : {}),
      });
      assert.equal(res.status, 200, await res.clone().text());
      const body = (await res.json()) as Json;
      assert.equal('service_tier' in body, false);
      return requestRecord(gateway.url, key, res.headers.get('x-request-id')!);
    };
    const plain = await complete();
    for (const tier of ['flex', 'priority']) {
      const row = await complete(tier);
      assert.equal(row.service_tier, 'default', tier);
      assert.equal(row.cost_micros, plain.cost_micros, tier);
    }
    assert.equal(openai.requests.length, 3);
    for (const request of openai.requests)
      assert.equal('service_tier' in (request.body as Json), false, 'the completions call carried service_tier');
  });

  it(
    'reserves at the dearest tier a request may be billed at: flex at the default price, priority at the priority ' +
      'price',
    async () => {
      // 1,000 output tokens of gpt-4o: 10,000 micros reserved at default (and now at flex), 20,000 at priority (plus the
      // prompt).
      const ask = (key: string, serviceTier?: string) =>
        post(key, '/v1/chat/completions', {
          model: openaiModel,
          messages: [{ role: 'user', content: 'Hi' }],
          max_tokens: 1000,
          ...(serviceTier ? { service_tier: serviceTier } : {}),
        });
      const short = await paidAccountKey(redis, 7_500);
      for (const tier of ['flex', 'default', 'priority']) {
        const res = await ask(short.key, tier);
        assert.equal(res.status, 429, `${tier} with 7,500 micros`);
        assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'insufficient_quota');
      }
      const { key } = await paidAccountKey(redis, 15_000);
      const atPriority = await ask(key, 'priority');
      assert.equal(atPriority.status, 429);
      const row = await requestRecord(gateway.url, key, atPriority.headers.get('x-request-id')!, false);
      assert.equal(row.status, 'refused');
      assert.equal(row.service_tier, 'priority');
      for (const tier of [undefined, 'flex']) {
        const res = await ask(key, tier);
        assert.equal(res.status, 200, `${tier ?? 'default'}: ${await res.clone().text()}`);
        await res.arrayBuffer();
      }
    },
  );
});
