import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pino from 'pino';
import { parseBody } from '../../api/http/request-body.js';
import { loadCatalog } from '../../shared/catalog.js';
import { GatewayError } from '../../shared/errors.js';
import {
  countModerationTokens,
  moderationCategories,
  moderationRequestSchema,
  moderationResultCount,
  type ModerationRequest,
} from '../../shared/schemas/moderations.js';
import { countTextTokens } from '../../shared/tokens.js';
import { moderateMock } from '../../workers/vendors/mock/moderations.js';
import type { CallContext, VendorHttp } from '../../workers/vendors/types.js';

/*
 * `/v1/moderations`' request schema (its forms, what it drops, what it refuses and how fast) and the mock's
 * moderation (its shape, its scores a function of the input, its markers, its abort), without a process.
 */

const parse = (body: unknown) => parseBody(moderationRequestSchema, body);

function context(requestId = 'req_1', signal = new AbortController().signal): CallContext {
  return {
    requestId,
    signal,
    channel: { vendor: 'mock', baseUrl: '', apiKey: '' },
    upstreamModel: 'mock-moderation',
    model: loadCatalog().get('mock-moderation')!,
    log: pino({ level: 'silent' }),
    // The mock's moderation makes no HTTP call.
    http: {} as VendorHttp,
  };
}

type Result = {
  flagged: boolean;
  categories: Record<string, boolean>;
  category_scores: Record<string, number>;
  category_applied_input_types: Record<string, string[]>;
};
const resultsOf = (body: string) => (JSON.parse(body) as { results: Result[] }).results;

describe('the moderation request schema', () => {
  it("reads a text, a list of texts and a list of parts, defaulting the model and keeping only the spec's fields", () => {
    assert.deepEqual(parse({ input: 'x' }), { model: 'omni-moderation-latest', input: 'x' });
    assert.deepEqual(parse({ input: '', model: 'text-moderation-stable', user: 'u', extra: [1] }), {
      model: 'text-moderation-stable',
      input: '',
    });
    assert.deepEqual(parse({ input: ['a', 'b'] }).input, ['a', 'b']);
    const parts = parse({
      input: [
        { type: 'text', text: 't', cache: true },
        { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA', detail: 'low' } },
      ],
    });
    assert.deepEqual(parts.input, [
      { type: 'text', text: 't' },
      { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
    ]);
    assert.equal(moderationResultCount(parts.input), 1);
    assert.equal(moderationResultCount(['a', 'b', 'c']), 3);
    assert.equal(moderationResultCount('a'), 1);
  });

  it('refuses with the parameter named: missing, wrong types, an empty or too long list, a mixed list, a bad part', () => {
    const refusal = (body: unknown) => {
      try {
        parse(body);
      } catch (error) {
        assert.ok(error instanceof GatewayError);
        return [error.status, error.param, error.code];
      }
      return assert.fail(`accepted ${JSON.stringify(body).slice(0, 80)}`);
    };
    assert.deepEqual(refusal({}), [400, 'input', 'missing_required_parameter']);
    assert.deepEqual(refusal({ input: null }), [400, 'input', 'invalid_type']);
    assert.deepEqual(refusal({ input: { text: 'x' } }), [400, 'input', 'invalid_type']);
    assert.deepEqual(refusal({ input: [] }), [400, 'input', 'invalid_value']);
    assert.deepEqual(refusal({ input: Array(33).fill('x') }), [400, 'input', 'invalid_value']);
    assert.deepEqual(refusal({ input: ['x', { type: 'text', text: 'y' }] }), [400, 'input[1]', 'invalid_type']);
    assert.deepEqual(refusal({ input: [{ type: 'text', text: 'y' }, 'x'] }), [400, 'input[1]', 'invalid_type']);
    assert.deepEqual(refusal({ input: [{ type: 'image_url', image_url: {} }] }), [
      400,
      'input[0].image_url.url',
      'missing_required_parameter',
    ]);
    assert.deepEqual(refusal({ input: [{ type: 'image_url', image_url: { url: 'javascript:alert(1)' } }] }), [
      400,
      'input[0].image_url.url',
      'invalid_value',
    ]);
    assert.deepEqual(refusal({ input: 'x', model: '' }), [400, 'model', 'invalid_value']);
    assert.deepEqual(refusal({ input: 'x', model: 7 }), [400, 'model', 'invalid_type']);
  });

  it('refuses a list of a million items by its length, without reading them', () => {
    const huge = { input: new Array(1_000_000).fill({ type: 'text', text: 'x' }) };
    assert.throws(
      () => parse(huge),
      (error: unknown) =>
        error instanceof GatewayError && error.param === 'input' && /maximum length 32/.test(error.message),
    );
  });

  it("counts the texts' tokens, never the images", async () => {
    const input = [
      { type: 'text' as const, text: 'one two three' },
      { type: 'image_url' as const, image_url: { url: 'https://images.example/a.png' } },
      { type: 'text' as const, text: 'four' },
    ];
    assert.equal(await countModerationTokens(input), countTextTokens('one two three') + countTextTokens('four'));
    assert.equal(await countModerationTokens(['a b', 'c']), countTextTokens('a b') + countTextTokens('c'));
  });
});

describe("the mock's moderation", () => {
  const request = (input: ModerationRequest['input']): ModerationRequest => ({ model: 'mock-moderation', input });

  it("answers OpenAI's shape, one result per text, its id the request's, the texts' tokens as usage", async () => {
    const answer = await moderateMock(request(['hello', 'world']), context('req_a'));
    const body = JSON.parse(answer.body) as { id: string; model: string; results: Result[] };
    assert.deepEqual(Object.keys(body), ['id', 'model', 'results']);
    assert.equal(body.id, answer.id);
    assert.match(body.id, /^modr-[0-9a-f]{32}$/);
    assert.equal(body.model, 'mock-moderation');
    assert.equal(body.results.length, 2);
    for (const result of body.results) {
      assert.deepEqual(Object.keys(result.categories), [...moderationCategories]);
      assert.deepEqual(Object.keys(result.category_scores), [...moderationCategories]);
      assert.equal(result.flagged, false);
    }
    assert.deepEqual(answer.usage, {
      prompt_tokens: countTextTokens('hello') + countTextTokens('world'),
      completion_tokens: 0,
      total_tokens: countTextTokens('hello') + countTextTokens('world'),
    });
    // A retried job (the same request id) answers the same; another request has its own id, the same scores.
    assert.equal((await moderateMock(request(['hello', 'world']), context('req_a'))).body, answer.body);
    const other = await moderateMock(request('hello'), context('req_b'));
    assert.notEqual(other.id, answer.id);
    assert.deepEqual(resultsOf(other.body)[0], body.results[0]);
  });

  it('flags the categories its markers name, and only known ones', async () => {
    const [result] = resultsOf(
      (await moderateMock(request('x [mock:flag:self-harm/intent] [mock:flag:nonsense] [mock:flag:hate]'), context()))
        .body,
    ) as [Result];
    assert.equal(result.flagged, true);
    assert.deepEqual(
      Object.entries(result.categories)
        .filter(([, flag]) => flag)
        .map(([name]) => name),
      ['hate', 'self-harm/intent'],
    );
    assert.ok(result.category_scores.hate! >= 0.9 && result.category_scores.hate! < 1);
    assert.ok(result.category_scores.violence! < 0.02);
  });

  it('fails as its error marker asks, and stops at an aborted signal', async () => {
    await assert.rejects(
      moderateMock(request(['fine', 'x [mock:error:503]']), context()),
      (error: unknown) => error instanceof GatewayError && error.status === 503 && error.retryable,
    );
    const aborted = new AbortController();
    aborted.abort(new Error('client left'));
    await assert.rejects(moderateMock(request('x'), context('req_1', aborted.signal)), /client left/);
    const slow = new AbortController();
    const pending = moderateMock(request('x [mock:slow:60000]'), context('req_1', slow.signal));
    slow.abort(new Error('deadline'));
    await assert.rejects(pending, /deadline/);
  });
});
