import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { check, pending, type SoakAccount } from '../../bench/soak-check.js';
import { asyncChat, messageBatch, openaiBatch } from '../../bench/soak-sessions.js';
import { kinds, send, type ClientRecord, type KindName, type Part } from '../../bench/soak-traffic.js';
import { billKey } from '../../shared/redis-keys.js';
import { startFakeAnthropic, type FakeAnthropic } from '../support/fake-anthropic.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { paidAccountKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { recordUrlFor } from '../support/record.js';
import { startPrivateRedis } from '../support/redis-server.js';

/**
 * The soak's check after the run (bench/soak-check.ts) holds the gateway to the clients' own records: here a few
 * requests of the soak's own clients (plain chat, a stream its client leaves, an async job, a Message Batch and an
 * OpenAI batch, through bench/soak-traffic.ts and bench/soak-sessions.ts) against the strict vendor fakes, checked
 * green; then each thing it must catch, put in the records or in Redis one at a time, turns it red with that
 * finding: an answer with no usage row, a request id answered twice, a batch line missing from its results, a
 * Realtime answer or a stream cut off and not billed, a balance off by a few micro-dollars.
 */
describe('the soak’s check after the run', () => {
  let redisServer: Awaited<ReturnType<typeof startPrivateRedis>>;
  let redis: Redis;
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let gateway: GatewayProcess;
  let recordUrl: string;
  let accounts: SoakAccount[];
  const records: ClientRecord[] = [];

  before(async () => {
    redisServer = await startPrivateRedis();
    redis = new Redis(redisServer.url);
    [openai, anthropic] = await Promise.all([startFakeOpenAI({ record: false }), startFakeAnthropic()]);
    recordUrl = await recordUrlFor(redisServer.url);
    gateway = await startGateway({
      env: {
        REDIS_URL: redisServer.url,
        OPENAI_API_KEY: 'sk-openai-test',
        OPENAI_BASE_URL: openai.url,
        ANTHROPIC_API_KEY: 'sk-ant-test',
        ANTHROPIC_BASE_URL: anthropic.url,
        MOCK_VENDOR: 'off',
      },
    });
    const paid = await paidAccountKey(redis, 10_000_000);
    accounts = [
      {
        name: 'paid',
        id: paid.account,
        creditsMicros: 10_000_000,
        keys: [{ name: 'main', id: paid.id, limitMicros: null, budgetMicros: null }],
      },
    ];
    const options = { apis: [gateway.url], apiKey: paid.key, timeoutMs: 60_000 };
    const keep = (kind: KindName, seq: number, parts: Part[]) => {
      for (const part of parts) records.push({ seq, kind, key: 'main', api: 1, startedMs: 0, ...part });
    };
    const chat = kinds.find((k) => k.name === 'chat')!;
    for (let seq = 0; seq < 3; seq += 1)
      keep('chat', seq, [await send(chat, seq, { baseUrl: gateway.url, apiKey: paid.key, timeoutMs: 30_000 })]);
    // A stream its client leaves after the first chunk: billed for what the vendor produced.
    keep('stream-left', 3, [
      await send(
        kinds.find((k) => k.name === 'stream-left')!,
        3,
        { baseUrl: gateway.url, apiKey: paid.key, timeoutMs: 30_000 },
      ),
    ]);
    keep('async-chat', 10, await asyncChat(10, options));
    keep('message-batch', 11, await messageBatch(11, options));
    keep('openai-batch', 12, await openaiBatch(12, options));
    await waitFor(
      async () => {
        const left = await pending(redis, accounts);
        return left.streamed === 0 && left.reserved === 0 && left.deadlines === 0;
      },
      30_000,
      'the usage streams to empty and nothing to be reserved',
    );
    // The api's request-log halves trail the answers by a moment.
    await new Promise((resolve) => setTimeout(resolve, 1500));
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), anthropic?.close()]);
    redis?.disconnect();
    await redisServer?.remove();
  });

  it('is green on what the gateway did: every answer recorded and billed once, the balances to the micro-dollar', async () => {
    assert.deepEqual(
      records.map((r) => `${r.kind}:${r.outcome}`),
      // Batch 11 has 2 + 11 % 3 = 4 lines, batch 12 has 2 + 12 % 3 = 2: a record per line.
      [
        ...Array(3).fill('chat:answered'),
        'stream-left:left',
        'async-chat:answered',
        ...Array(4).fill('message-batch:answered'),
        ...Array(2).fill('openai-batch:answered'),
      ],
    );
    const result = await check(recordUrl, redis, accounts, records);
    assert.deepEqual(result.failures, []);
    assert.equal(result.figures.lost, 0);
    assert.equal(result.figures.doubled, 0);
    assert.equal(result.figures.driftMicros, 0);
    assert.ok(result.figures['spent.paid']! > 0);
  });

  it('fails on an answer with no usage row, a request id answered twice and a batch line missing from its results', async () => {
    const chat = records.find((r) => r.kind === 'chat')!;
    const line = records.find((r) => r.kind === 'message-batch')!;
    const tampered = [
      ...records,
      { ...chat, seq: 100, requestId: 'req_never_recorded' },
      { ...chat, seq: 101 },
      {
        ...line,
        seq: 102,
        outcome: 'failed' as const,
        detail: 'batch line missing',
        answerId: undefined,
        batch: 'msgbatch_x/line-9',
      },
    ];
    const result = await check(recordUrl, redis, accounts, tampered);
    assert.equal(result.figures.lost, 2, JSON.stringify(result.failures));
    assert.equal(result.figures.doubled, 1);
    assert.match(result.failures.join('\n'), /req_never_recorded/);
    assert.match(result.failures.join('\n'), /msgbatch_x\/line-9 missing from its results/);
  });

  it('fails on a Realtime answer or a stream cut off by its client that was not billed', async () => {
    const cut: ClientRecord = {
      seq: 200,
      kind: 'realtime-left',
      key: 'main',
      api: 1,
      startedMs: 0,
      latencyMs: 5,
      outcome: 'left',
      status: 101,
      requestId: 'req_session:resp_unbilled',
      errorCode: null,
      bodyHash: '',
    };
    const left = { ...records.find((r) => r.kind === 'stream-left')!, seq: 201, requestId: 'req_stream_unbilled' };
    const result = await check(recordUrl, redis, accounts, [...records, cut, left]);
    assert.equal(result.figures.unbilledCutOffs, 2);
    assert.match(
      result.failures.join('\n'),
      /cut off by their client have no settled usage row: req_session:resp_unbilled, req_stream_unbilled/,
    );
  });

  it('fails on a balance in Redis a few micro-dollars off its credits minus its usage', async () => {
    const account = accounts[0]!.id;
    await redis.hincrby(billKey(account), 'balance', 7);
    try {
      const result = await check(recordUrl, redis, accounts, records);
      assert.equal(result.figures.driftMicros, 7);
      assert.match(result.failures.join('\n'), /balance in Redis/);
    } finally {
      await redis.hincrby(billKey(account), 'balance', -7);
    }
  });
});
