import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { readBill } from '../../shared/money/billing.js';
import { freshRedis, paidAccountKey, spawnGateway, startGateway, type GatewayProcess } from '../support/gateway.js';
import { waitForUsage } from '../support/record.js';

// The mock is for a laptop: it is never billed unless asked, and production never serves it unless named.
describe('the mock vendor and money, and the mock in production', () => {
  let redis: Redis;
  let url: string;
  const gateways: GatewayProcess[] = [];

  before(async () => {
    ({ redis, url } = await freshRedis(3));
  });

  after(async () => {
    await Promise.all(gateways.map((g) => g.stop()));
    redis?.disconnect();
  });

  async function start(env: Record<string, string>): Promise<GatewayProcess> {
    const gateway = await startGateway({ env: { REDIS_URL: url, ...env } });
    gateways.push(gateway);
    return gateway;
  }

  it(
    'answers offline for a priced model at no cost: nothing reserved, a usage row of 0 micro-dollars, the balance ' +
      'untouched',
    async () => {
      // MOCK_BILLING unset: the default every `npm start` gets (the test support turns it on for the money tests).
      const gateway = await start({ MOCK_BILLING: 'off' });
      // The start line says the mock answers, and free.
      const line = gateway.logs.find((l) => l.includes('no vendor key is set: running offline'));
      assert.ok(line, 'the start says it runs offline on the mock');
      assert.match(line, /the mock vendor answers for every model, free \(MOCK_BILLING is off\)/);
      assert.doesNotMatch(line, /billed/);
      const paid = await paidAccountKey(redis, 1_000_000);
      const { data: completion, response } = await gateway
        .client(paid.key)
        .chat.completions.create({
          model: 'gpt-4o-mini',
          messages: [{ role: 'user', content: 'a free answer' }],
          max_tokens: 50,
        })
        .withResponse();
      assert.match(completion.choices[0]!.message.content ?? '', /Mock reply/);
      const requestId = response.headers.get('x-request-id')!;
      const row = await waitForUsage(url, (r) => r.request_id === requestId);
      assert.equal(row.model, 'gpt-4o-mini');
      assert.ok(row.input_tokens > 0, 'the tokens are still counted');
      assert.equal(Number(row.cost_micros), 0);
      const bill = await readBill(redis, paid.account);
      assert.equal(bill?.balanceMicros, 1_000_000);
      assert.equal(bill?.reservedMicros, 0);
      await gateway.stop();
    },
  );

  it('with MOCK_BILLING=on bills the mock at the price of the model it answers for', async () => {
    const gateway = await start({ MOCK_BILLING: 'on' });
    // The start line no longer says free: it says billed, and at what.
    const line = gateway.logs.find((l) => l.includes('no vendor key is set: running offline'));
    assert.ok(line, 'the start says it runs offline on the mock');
    assert.match(
      line,
      /the mock vendor answers for every model, billed at each model's listed price \(MOCK_BILLING=on\)/,
    );
    assert.doesNotMatch(line, /\bfree\b/);
    const paid = await paidAccountKey(redis, 1_000_000);
    const { response } = await gateway
      .client(paid.key)
      .chat.completions.create({
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: 'a billed answer' }],
        max_tokens: 50,
      })
      .withResponse();
    const row = await waitForUsage(url, (r) => r.request_id === response.headers.get('x-request-id'));
    assert.ok(Number(row.cost_micros) > 0);
    await gateway.stop();
  });

  it('under NODE_ENV=production with no vendor key: no mock answers, every model is 404, /readyz is 503 and says why', async () => {
    const gateway = await start({ NODE_ENV: 'production', MOCK_BILLING: 'off' });
    const paid = await paidAccountKey(redis, 1_000_000);
    const client = gateway.client(paid.key);
    await assert.rejects(
      client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
      (error: unknown) => error instanceof OpenAI.APIError && error.status === 404 && error.code === 'model_not_found',
    );
    await assert.rejects(
      client.chat.completions.create({ model: 'mock-chat', messages: [{ role: 'user', content: 'hi' }] }),
      (error: unknown) => error instanceof OpenAI.APIError && error.status === 404,
    );
    const models = await client.models.list();
    assert.deepEqual(models.data, []);
    const ready = await fetch(`${gateway.url}/readyz`);
    assert.equal(ready.status, 503);
    const body = (await ready.json()) as { status: string; vendors: boolean; redis: boolean };
    assert.equal(body.status, 'not_ready');
    assert.equal(body.vendors, false);
    assert.equal(body.redis, true);
    assert.ok(
      gateway.logs.some((line) => line.includes('no vendor key is set and the mock is off')),
      'the start says what is wrong and what to do',
    );
    // The console is told the mock is off: no badge.
    const config = (await (await fetch(`${gateway.url}/console/api/config`)).json()) as { mock: { on: boolean } };
    assert.equal(config.mock.on, false);
    await gateway.stop();
  });

  it('under NODE_ENV=production serves the mock models only when MOCK_VENDOR=on names them, free, and ready', async () => {
    const gateway = await start({ NODE_ENV: 'production', MOCK_VENDOR: 'on', MOCK_BILLING: 'off' });
    // The start says the mock's own models answer, and free; not that it answers for every model.
    assert.ok(
      gateway.logs.some((line) =>
        line.includes(
          'MOCK_VENDOR=on: the mock vendor serves its own models (mock-chat, …), free (MOCK_BILLING is off)',
        ),
      ),
      'the start names the mock and its price',
    );
    assert.ok(!gateway.logs.some((line) => line.includes('answers for every model')));
    // The console is told the same: the mock on, free, answering for its own models only (counted).
    const { mock } = (await (await fetch(`${gateway.url}/console/api/config`)).json()) as {
      mock: { on: boolean; billed: boolean; models: 'all' | number };
    };
    assert.equal(mock.on, true);
    assert.equal(mock.billed, false);
    assert.ok(typeof mock.models === 'number' && mock.models > 0, JSON.stringify(mock));
    const paid = await paidAccountKey(redis, 1_000_000);
    const client = gateway.client(paid.key);
    const { response } = await client.chat.completions
      .create({ model: 'mock-chat', messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    // The mock does not stand in for real models in production.
    await assert.rejects(
      client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
      (error: unknown) => error instanceof OpenAI.APIError && error.status === 404,
    );
    const row = await waitForUsage(url, (r) => r.request_id === response.headers.get('x-request-id'));
    assert.equal(Number(row.cost_micros), 0);
    assert.equal((await fetch(`${gateway.url}/readyz`)).status, 200);
    await gateway.stop();
  });

  it('refuses MOCK_BILLING=on under NODE_ENV=production at start, naming both', async () => {
    const proc = await spawnGateway('all', {
      REDIS_URL: url,
      NODE_ENV: 'production',
      MOCK_VENDOR: 'on',
      MOCK_BILLING: 'on',
    });
    let output = '';
    proc.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    proc.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const code = await new Promise<number | null>((resolve) => proc.once('exit', (exitCode) => resolve(exitCode)));
    assert.notEqual(code, 0);
    assert.match(output, /MOCK_BILLING=on is refused with NODE_ENV=production/);
  });
});
