import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import type OpenAI from 'openai';
import { readBill, readKeySpend } from '../../shared/money/billing.js';
import { loadCatalog } from '../../shared/catalog.js';
import { PriceList } from '../../shared/money/pricing.js';
import { countChatPromptTokensAsync } from '../../shared/tokens.js';
import type { ChatCompletionRequest } from '../../shared/schemas/chat.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import {
  createKey,
  freshRedis,
  paidAccountKey,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';

/*
 * A request is admitted against its reservation (its prompt and at most
 * max_tokens of output per choice); its key limit and balance hold only if
 * the answer costs no more. With the built-in mock, which keeps to
 * max_tokens for tool calls as for text, they hold under a race; a vendor
 * that does not keep to it is seen by operators: a counter in /metrics and
 * a warning naming the request.
 */

const prices = new PriceList(loadCatalog().all());
const model = 'gpt-4o';
const weather: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'],
    },
  },
};
const toolRequest = {
  model,
  max_tokens: 1,
  n: 8,
  tool_choice: 'required',
  tools: [weather],
  messages: [{ role: 'user', content: 'What is the weather in Lisbon?' }],
} as const;

async function worstCase(request: object): Promise<number> {
  const payload = request as unknown as ChatCompletionRequest;
  const promptTokens = await countChatPromptTokensAsync(payload.messages, payload.tools ?? null);
  return prices.worstCaseMicros(model, { endpoint: 'chat.completions', payload }, promptTokens).micros;
}

async function metric(gateway: GatewayProcess, name: string): Promise<number> {
  const text = await (await fetch(`${gateway.url}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`) || line.startsWith(`${name} `))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
}

const post = (gateway: GatewayProcess, key: string, body: object) =>
  fetch(`${gateway.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

describe('settlement never passes the reservation unseen', () => {
  let redis: Redis;
  let url: string;
  let mock: GatewayProcess;

  before(async () => {
    ({ redis, url } = await freshRedis(6));
    mock = await startGateway({ env: { REDIS_URL: url } });
  });
  after(async () => {
    await mock?.stop();
    redis?.disconnect();
  });

  it('the mock keeps to max_tokens for tool calls: finish_reason length, and at most max_tokens per choice billed', async () => {
    const { key } = await createKey(redis, 'probe');
    const answer = (await (await post(mock, key, toolRequest)).json()) as OpenAI.ChatCompletion;
    assert.equal(answer.choices.length, 8);
    for (const choice of answer.choices) assert.equal(choice.finish_reason, 'length');
    assert.ok(answer.usage!.completion_tokens <= 8, `completion tokens ${answer.usage!.completion_tokens}`);
    const full = (await (
      await post(mock, key, { ...toolRequest, max_tokens: 200, n: 1 })
    ).json()) as OpenAI.ChatCompletion;
    assert.equal(full.choices[0]!.finish_reason, 'tool_calls');
    assert.deepEqual(
      JSON.parse(
        (full.choices[0]!.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall).function.arguments,
      ),
      { city: 'mock', unit: 'celsius' },
    );
  });

  it('40 racing tool-call requests keep the key limit and the balance, and no overrun is counted', async () => {
    const worst = await worstCase(toolRequest);
    // The balance covers about 12 such requests, the key limit about 10: both bind under the race.
    const balance = 12 * worst;
    const limit = 10 * worst;
    const created = await paidAccountKey(redis, balance, { limitMicros: limit });
    const { account } = created;
    const statuses = await Promise.all(
      Array.from({ length: 40 }, () =>
        post(mock, created.key, toolRequest).then(async (res) => (await res.arrayBuffer(), res.status)),
      ),
    );
    assert.ok(statuses.includes(200) && statuses.includes(429), JSON.stringify(statuses));
    await waitFor(
      async () => (await readKeySpend(redis, account, created.id))?.reservedMicros === 0,
      10_000,
      'every reservation settled',
    );
    const spent = (await readKeySpend(redis, account, created.id))!.spentMicros;
    const left = (await readBill(redis, account))!.balanceMicros!;
    assert.ok(spent <= limit, `spent ${spent} of the key's ${limit}`);
    assert.ok(left >= 0, `balance ${left}`);
    assert.equal(left, balance - spent);
    assert.equal(await metric(mock, 'switchyard_settlement_overruns_total'), 0);
  });
});

describe('a vendor that answers past max_tokens', () => {
  let redis: Redis;
  let fake: FakeOpenAI;
  let gateway: GatewayProcess;

  before(async () => {
    fake = await startFakeOpenAI();
    const fresh = await freshRedis(6);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: 'sk-overrun-vendor-0123456789',
        OPENAI_BASE_URL: fake.url,
        MOCK_VENDOR: 'off',
      },
    });
  });
  after(async () => {
    await gateway?.stop();
    await fake?.close();
    redis?.disconnect();
  });

  it('is counted in /metrics and warned about with the request id; the bill is what the vendor reported', async () => {
    const { key } = await createKey(redis, 'overrun');
    fake.enqueue({
      json: {
        id: 'chatcmpl-overrun',
        object: 'chat.completion',
        created: 1_700_000_000,
        model: 'gpt-4o-2024-08-06',
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: 'far more than one token of answer', refusal: null },
            logprobs: null,
            finish_reason: 'stop',
          },
        ],
        usage: { prompt_tokens: 12, completion_tokens: 5000, total_tokens: 5012 },
      },
    });
    const before = await metric(gateway, 'switchyard_settlement_overruns_total');
    const res = await post(gateway, key, { model, max_tokens: 1, messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(res.status, 200);
    const requestId = res.headers.get('x-request-id')!;
    await waitFor(
      async () => (await metric(gateway, 'switchyard_settlement_overruns_total')) === before + 1,
      5000,
      'the overrun counted',
    );
    const over = await metric(gateway, 'switchyard_settlement_overrun_micros_total');
    const billed = prices.costMicros(model, {
      inputTokens: 12,
      cachedTokens: 0,
      outputTokens: 5000,
      images: 0,
      audioSeconds: 0,
      videoSeconds: 0,
    });
    assert.ok(over > 0 && over < billed, `over by ${over} of ${billed}`);
    const warning = gateway.logs.find((line) => line.includes('more than its reservation'));
    assert.ok(warning, 'a warning');
    assert.ok(warning.includes(requestId), warning);
    assert.match(warning, /"level":40/);
  });
});
