import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { splitBatchBody } from '../../api/batches/split-body.js';
import { GatewayError } from '../../shared/errors.js';

const refused = (pattern: RegExp) => (error: unknown) =>
  error instanceof GatewayError && error.status === 400 && pattern.test(error.message);

describe('a Message Batch body split into its requests without being parsed whole', () => {
  it('finds each request of `requests` as its own JSON text, whatever the spacing, escapes and nesting', async () => {
    const requests = [
      {
        custom_id: 'a',
        params: { model: 'm', messages: [{ role: 'user', content: 'has "quotes", {braces} and [brackets] \\ too' }] },
      },
      { custom_id: 'b', params: { nested: [[{ deep: ['}', ']'] }]] } },
    ];
    const body = `{ "first": 1,\n "req\\u0075ests" : [ ${requests.map((r) => JSON.stringify(r, null, 2)).join(' ,\n')} ] , "last": {"x": "]"} }`;
    const { envelope, items } = await splitBatchBody(body, 10);
    assert.deepEqual(
      items.map((item) => JSON.parse(item)),
      requests,
    );
    assert.deepEqual(JSON.parse(envelope), { first: 1, requests: [], last: { x: ']' } });
  });

  it('gives the whole body as the envelope when it has no `requests` array, and an empty array as none', async () => {
    assert.deepEqual(await splitBatchBody('{"other": [1, 2]}', 10), { envelope: '{"other": [1, 2]}', items: [] });
    assert.deepEqual((await splitBatchBody('{"requests": []}', 10)).items, []);
  });

  it(
    'refuses elements that are not objects, a trailing comma, unbalanced or cut bodies, a second `requests`, and ' +
      'too many',
    async () => {
      await assert.rejects(
        splitBatchBody('{"requests": [1]}', 10),
        refused(/requests\.0: each request must be an object/),
      );
      await assert.rejects(
        splitBatchBody('{"requests": [{}, "x"]}', 10),
        refused(/requests\.1: each request must be an object/),
      );
      await assert.rejects(splitBatchBody('{"requests": [{}, [{}]]}', 10), refused(/requests\.1: /));
      await assert.rejects(splitBatchBody('{"requests": [{} {}]}', 10), refused(/requests\.1: /));
      await assert.rejects(splitBatchBody('{"requests": [{},]}', 10), refused(/trailing comma/));
      await assert.rejects(splitBatchBody('{"requests": [{"a": "b}]}', 10), refused(/not terminated|ends before/));
      await assert.rejects(splitBatchBody('{"requests": [{}]', 10), refused(/ends before/));
      await assert.rejects(splitBatchBody('{"requests": [{}]}}', 10), refused(/unbalanced/));
      await assert.rejects(splitBatchBody('{"requests": [{}], "requests": [{}]}', 10), refused(/twice/));
      await assert.rejects(splitBatchBody(`{"requests": [${'{},'.repeat(10)}{}]}`, 10), refused(/at most 10 requests/));
    },
  );

  it('splits 10,000 requests (3.5 MB) yielding to the event loop as it goes', async () => {
    const one = JSON.stringify({
      custom_id: 'x',
      params: { model: 'gpt-4o-mini', max_tokens: 64, messages: [{ role: 'user', content: 'y'.repeat(300) }] },
    });
    const body = `{"requests":[${Array.from({ length: 10_000 }, () => one).join(',')}]}`;
    let turns = 0;
    const ticking = setInterval(() => turns++, 0);
    const { items } = await splitBatchBody(body, 10_000);
    clearInterval(ticking);
    assert.equal(items.length, 10_000);
    assert.equal(items[9_999], one);
    assert.ok(turns > 0, 'other callbacks ran while it split');
  });
});
