import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadCatalog } from '../../shared/catalog.js';
import { loadConfig } from '../../shared/config.js';
import type { EndpointRequest } from '../../shared/endpoints.js';
import { actualCost, worstCase } from '../../shared/money/charge.js';
import { PriceList, type Metered } from '../../shared/money/pricing.js';
import { chatCompletionRequestSchema } from '../../shared/schemas/chat.js';

const catalog = loadCatalog();
const prices = new PriceList(catalog.all());
const model = 'gpt-4o-mini';
const request: EndpointRequest = {
  endpoint: 'chat.completions',
  payload: chatCompletionRequestSchema.parse({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 100 }),
};
const used: Metered = {
  inputTokens: 1_000,
  cachedTokens: 0,
  outputTokens: 500,
  images: 0,
  audioSeconds: 0,
  videoSeconds: 0,
};
const openai = { vendor: 'openai' };
const mock = { vendor: 'mock' };
const standIn = { vendor: 'openai', protocol: 'mock' as const };

describe('charge: one rule for the worst case and the actual cost', () => {
  it('charges a priced model a vendor answers, at admission and at settlement alike', () => {
    const config = loadConfig({ OPENAI_API_KEY: 'sk-test' });
    const reserved = worstCase(config, prices, request, model, 'openai', 10);
    assert.equal(reserved.micros, prices.worstCaseMicros(model, request, 10).micros);
    assert.ok(reserved.micros > 0);
    const cost = actualCost(config, prices, model, openai, used, 'default');
    assert.equal(cost, prices.costMicros(model, used));
    assert.ok(cost > 0);
    assert.equal(
      actualCost(config, prices, model, openai, used, 'flex'),
      prices.costMicros(model, used, 'flex'),
      'at the prices of the tier that served it',
    );
  });

  it('serves the mock free, standing in for a vendor or answering its own models, unless MOCK_BILLING asks', () => {
    const standing = loadConfig({ MOCK_VENDOR: 'auto' });
    assert.deepEqual(
      worstCase(standing, prices, request, model, 'openai', 10),
      { micros: 0, tokens: 10 },
      'offline, the mock stands in for every vendor',
    );
    assert.equal(actualCost(standing, prices, model, standIn, used, 'default'), 0);
    assert.equal(actualCost(standing, prices, model, mock, used, 'default'), 0);

    const billed = loadConfig({ MOCK_VENDOR: 'auto', MOCK_BILLING: 'on' });
    assert.equal(
      worstCase(billed, prices, request, model, 'openai', 10).micros,
      prices.worstCaseMicros(model, request, 10).micros,
    );
    assert.equal(actualCost(billed, prices, model, standIn, used, 'default'), prices.costMicros(model, used));
  });

  it('serves a model without a price free, and still counts its tokens against tokens per minute', () => {
    const unpriced = new PriceList(catalog.all().filter((m) => m.id !== model));
    const config = loadConfig({ OPENAI_API_KEY: 'sk-test' });
    assert.equal(unpriced.has(model), false);
    assert.deepEqual(worstCase(config, unpriced, request, model, 'openai', 42), { micros: 0, tokens: 42 });
    assert.equal(actualCost(config, unpriced, model, openai, used, 'default'), 0);
  });

  it('costs nothing for a job that never reached a channel, and used nothing', () => {
    const config = loadConfig({ OPENAI_API_KEY: 'sk-test' });
    const nothing: Metered = {
      inputTokens: 0,
      cachedTokens: 0,
      outputTokens: 0,
      images: 0,
      audioSeconds: 0,
      videoSeconds: 0,
    };
    assert.equal(actualCost(config, prices, model, undefined, nothing, 'default'), 0);
  });
});
