import { vendorFixturesDir } from '../support/fixtures.js';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { SseParser } from '../../workers/vendors/sse-parser.js';
import { SseBody } from '../../workers/vendors/sse-body.js';
import type { VendorResponse } from '../../workers/vendors/http.js';
import type { CallContext } from '../../workers/vendors/types.js';
import type { SseEvent } from '../../workers/vendors/sse-parser.js';

// The recorded OpenAI streams, in test/fixtures/openai/.
const FIXTURES = vendorFixturesDir('openai');
const encoder = new TextEncoder();

function parseAll(pieces: (string | Uint8Array)[]): SseEvent[] {
  const parser = new SseParser();
  const events: SseEvent[] = [];
  for (const piece of pieces) events.push(...parser.push(typeof piece === 'string' ? encoder.encode(piece) : piece));
  events.push(...parser.end());
  return events;
}

/** Every way of cutting `bytes` in two, plus one-byte pieces. */
function* splits(bytes: Uint8Array): Generator<Uint8Array[]> {
  for (let offset = 0; offset <= bytes.length; offset += 1) yield [bytes.subarray(0, offset), bytes.subarray(offset)];
  yield Array.from(bytes, (_, index) => bytes.subarray(index, index + 1));
}

/** The data lines of a fixture, read independently of the parser: the fixtures use plain `\n\n` framing. */
function fixtureData(text: string): string[] {
  return text
    .split('\n\n')
    .filter((block) => block.length > 0)
    .map((block) => block.replace(/^data: /, ''));
}

describe('SseParser', () => {
  it('parses LF framing and strips one space after the colon', () => {
    assert.deepEqual(parseAll(['data: a\n\ndata:b\n\ndata:  c\n\n']), [{ data: 'a' }, { data: 'b' }, { data: ' c' }]);
  });

  it('accepts CRLF and CR framing', () => {
    assert.deepEqual(parseAll(['data: one\r\n\r\ndata: two\r\rdata: three\n\n']), [
      { data: 'one' },
      { data: 'two' },
      { data: 'three' },
    ]);
  });

  it('joins several data lines of one event with \\n', () => {
    assert.deepEqual(parseAll(['data: {"a":\ndata: 1}\n\n']), [{ data: '{"a":\n1}' }]);
  });

  it('keeps event and id fields, and does not carry them over to the next event', () => {
    assert.deepEqual(parseAll(['event: message_start\nid: 7\ndata: x\n\ndata: y\n\n']), [
      { event: 'message_start', id: '7', data: 'x' },
      { data: 'y' },
    ]);
  });

  it('ignores comments, retry fields and events without data', () => {
    assert.deepEqual(parseAll([': keep-alive\n\n:another\nretry: 100\ndata: real\n\nevent: ping\n\n']), [
      { data: 'real' },
    ]);
  });

  it('dispatches an empty data field as an empty string', () => {
    assert.deepEqual(parseAll(['data:\n\n']), [{ data: '' }]);
  });

  it('handles a CRLF cut between \\r and \\n without inventing a blank line', () => {
    assert.deepEqual(parseAll(['data: a\r', '\ndata: b\r', '\n\r', '\n']), [{ data: 'a\nb' }]);
  });

  it('handles a UTF-8 character cut across chunks', () => {
    const bytes = encoder.encode('data: héllo 🌍\n\n');
    for (const pieces of splits(bytes)) assert.deepEqual(parseAll(pieces), [{ data: 'héllo 🌍' }]);
  });

  it('flushes a final event that has no trailing blank line', () => {
    assert.deepEqual(parseAll(['data: first\n\ndata: last']), [{ data: 'first' }, { data: 'last' }]);
    assert.deepEqual(parseAll(['data: last\n']), [{ data: 'last' }]);
    assert.deepEqual(parseAll(['data: last\r']), [{ data: 'last' }]);
  });

  it('gives the same events for a mixed-framing stream cut at every offset', () => {
    const bytes = encoder.encode(': hi\r\nevent: e\r\ndata: {"x":"ü"}\r\n\r\ndata: 1\ndata: 2\n\ndata: [DONE]\r\r');
    const expected = [{ event: 'e', data: '{"x":"ü"}' }, { data: '1\n2' }, { data: '[DONE]' }];
    for (const pieces of splits(bytes)) assert.deepEqual(parseAll(pieces), expected);
  });

  it('replays the small OpenAI fixture identically at every split offset', () => {
    const bytes = readFileSync(`${FIXTURES}/openai-chat-stream-tool-call.sse`);
    const expected = fixtureData(bytes.toString('utf8')).map((data) => ({ data }));
    assert.equal(expected.at(-1)?.data, '[DONE]');
    assert.deepEqual(parseAll([bytes]), expected);
    for (const pieces of splits(bytes)) assert.deepEqual(parseAll(pieces), expected);
  });

  it('replays the parallel tool call fixture in small pieces', () => {
    const bytes = readFileSync(`${FIXTURES}/openai-chat-stream-parallel-tool-calls.sse`);
    const expected = fixtureData(bytes.toString('utf8')).map((data) => ({ data }));
    for (const size of [1, 3, 7, 64, 1000]) {
      const pieces: Uint8Array[] = [];
      for (let offset = 0; offset < bytes.length; offset += size) pieces.push(bytes.subarray(offset, offset + size));
      assert.deepEqual(parseAll(pieces), expected);
    }
  });

  it('replays a fixture converted to CRLF framing', () => {
    const text = readFileSync(`${FIXTURES}/openai-chat-stream-tool-call.sse`, 'utf8');
    const expected = fixtureData(text).map((data) => ({ data }));
    const bytes = encoder.encode(text.replaceAll('\n', '\r\n'));
    for (let offset = 0; offset <= bytes.length; offset += 5) {
      assert.deepEqual(parseAll([bytes.subarray(0, offset), bytes.subarray(offset)]), expected);
    }
  });
});

describe('SseBody', () => {
  async function* reads(...pieces: string[]): AsyncGenerator<Uint8Array> {
    for (const piece of pieces) yield encoder.encode(piece);
  }

  it('yields the events completed by each read, skipping reads that complete none', async () => {
    const batches: SseEvent[][] = [];
    const response = {
      status: 200,
      headers: {},
      body: reads('data: a\n\ndata: b\n\nda', 'ta: c', '\n\n', 'data: d'),
    } as unknown as VendorResponse;
    const sse = new SseBody(response, { signal: new AbortController().signal } as CallContext);
    for await (const batch of sse.batches()) {
      batches.push(batch);
    }
    sse.finish();
    assert.deepEqual(batches, [[{ data: 'a' }, { data: 'b' }], [{ data: 'c' }], [{ data: 'd' }]]);
  });
});
