import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  canonicalJson,
  decodeEntry,
  encodeEntry,
  leadHolder,
  readCacheControl,
  readLeadHolder,
  requestHash,
  streamForm,
  type CacheEntry,
} from '../../shared/cache/index.js';
import type { EndpointRequest } from '../../shared/endpoints.js';

const chat = (payload: Record<string, unknown>) =>
  ({
    endpoint: 'chat.completions',
    payload: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hi' }], ...payload },
  }) as unknown as EndpointRequest;

describe('readCacheControl', () => {
  it('reads max-age, no-cache and no-store in any case and order, and ignores the rest', () => {
    assert.deepEqual(readCacheControl('max-age=60'), { maxAgeS: 60, noCache: false, noStore: false });
    assert.deepEqual(readCacheControl(' No-Cache , MAX-AGE="30", private'), {
      maxAgeS: 30,
      noCache: true,
      noStore: false,
    });
    assert.deepEqual(readCacheControl('no-store'), { noCache: false, noStore: true });
    for (const bad of ['max-age=', 'max-age=-1', 'max-age=1.5', 'max-age=abc', 'maxage=5'])
      assert.equal(readCacheControl(bad).maxAgeS, undefined, bad);
    // Past what is represented: 2^31, as RFC 9111 says, however long the number.
    assert.equal(readCacheControl('max-age=99999999999').maxAgeS, 2 ** 31);
    assert.equal(readCacheControl(`max-age=${'9'.repeat(5000)}`).maxAgeS, 2 ** 31);
    assert.equal(readCacheControl('max-age=0000000000060').maxAgeS, 60, 'leading zeros are no overflow');
  });
});

describe('requestHash', () => {
  it('is the same whatever the key order, and leaves out what does not change the answer', () => {
    const base = requestHash(chat({ temperature: 0 }), 'gpt-4o-mini');
    assert.equal(canonicalJson({ b: 1, a: [1, { d: 2, c: 3 }] }), '{"a":[1,{"c":3,"d":2}],"b":1}');
    assert.equal(
      requestHash(
        chat({
          temperature: 0,
          stream: true,
          stream_options: { include_usage: true },
          user: 'u',
          service_tier: 'flex',
        }),
        'gpt-4o-mini',
      ),
      base,
    );
    // What may change the answer is in: sampling, the model it resolved to, the endpoint.
    assert.notEqual(requestHash(chat({ temperature: 1 }), 'gpt-4o-mini'), base);
    assert.notEqual(requestHash(chat({ temperature: 0 }), 'gpt-4o'), base);
    assert.notEqual(
      requestHash({ ...chat({ temperature: 0 }), endpoint: 'completions' } as EndpointRequest, 'gpt-4o-mini'),
      base,
    );
    // The model the client named (an alias) is not: the resolved model is.
    assert.equal(requestHash(chat({ temperature: 0, model: 'an-alias' }), 'gpt-4o-mini'), base);
  });
});

describe('a Responses request’s hash', () => {
  const responses = (shell: Record<string, unknown>, chat: Record<string, unknown> = {}) =>
    ({
      endpoint: 'responses',
      payload: {
        chat: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream: true, ...chat },
        shell: {
          id: 'resp_1',
          created_at: 1,
          model: 'gpt-4o-mini',
          instructions: null,
          store: false,
          background: false,
          user: null,
          metadata: {},
          ...shell,
        },
      },
    }) as unknown as EndpointRequest;
  it('leaves out the response’s own id and time, and keeps what shapes the answer', () => {
    const base = requestHash(responses({}), 'gpt-4o-mini');
    assert.equal(requestHash(responses({ id: 'resp_2', created_at: 2, user: 'u' }), 'gpt-4o-mini'), base);
    assert.notEqual(requestHash(responses({ instructions: 'Be brief.' }), 'gpt-4o-mini'), base);
    assert.notEqual(requestHash(responses({}, { temperature: 1 }), 'gpt-4o-mini'), base);
    assert.notEqual(
      requestHash(responses({ metadata: { a: 'b' } }), 'gpt-4o-mini'),
      base,
      'the object echoes its metadata',
    );
  });
});

describe('the flight mark', () => {
  it('names the job, the form its client reads and its key, and reads back', () => {
    assert.deepEqual(readLeadHolder(leadHolder('job-1', 'chunks+usage', 'key_9')), {
      jobId: 'job-1',
      form: 'chunks+usage',
      keyId: 'key_9',
    });
    assert.deepEqual(readLeadHolder(leadHolder('job-2', undefined, 'key_9')), {
      jobId: 'job-2',
      form: undefined,
      keyId: 'key_9',
    });
  });
  it('tells streams apart by what their frames hold: OpenAI’s usage chunk, or another dialect’s events', () => {
    assert.equal(streamForm(chat({}), false), undefined);
    assert.equal(streamForm(chat({ stream: true }), true), 'chunks');
    assert.equal(streamForm(chat({ stream: true, stream_options: { include_usage: true } }), true), 'chunks+usage');
    assert.equal(streamForm({ endpoint: 'messages', payload: {} } as unknown as EndpointRequest, true), 'events');
  });
});

describe('cache entries as stored', () => {
  it('are JSON when small and gzipped when large, and read back the same; what does not read is a miss', async () => {
    const entry = (body: string): CacheEntry => ({
      v: 1,
      created: 1,
      expires: 2,
      endpoint: 'chat.completions',
      model: 'm',
      costMicros: 5,
      tokens: { input: 1, cached: 0, output: 1 },
      body,
    });
    const small = await encodeEntry(entry('{}'));
    assert.equal(small[0], '{'.charCodeAt(0));
    const large = await encodeEntry(entry('x'.repeat(10_000)));
    assert.equal(large[0], 0x1f);
    assert.ok(large.length < 1000);
    assert.deepEqual(await decodeEntry(large), entry('x'.repeat(10_000)));
    assert.equal(await decodeEntry(Buffer.from([0x1f, 0x8b, 1, 2])), undefined);
    assert.equal(await decodeEntry(Buffer.from('{"v":2}')), undefined);
  });
});
