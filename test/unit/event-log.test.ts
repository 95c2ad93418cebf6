import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { countFrames, framesAfter, parseLogEntry } from '../../shared/reply.js';

describe("a stream's event log entries", () => {
  const frames = 'id: 4\ndata: {"a":1}\n\nid: 5\ndata: {"b":"x\\n\\ny"}\n\nid: 6\ndata: {"c":3}\n\n';

  it('reads the fields of a batch and of the terminal entry, whatever their order', () => {
    assert.deepEqual(parseLogEntry('1-0', ['seq', '2', 'frames', frames, 'first', '4', 'owner', 'key_1']), {
      id: '1-0',
      seq: 2,
      first: 4,
      frames,
      owner: 'key_1',
    });
    assert.deepEqual(parseLogEntry('2-0', ['seq', '2', 'end', 'error', 'payload', '{}']), { id: '2-0', seq: 2, first: 0, frames: '', end: 'error', payload: '{}' });
    assert.equal(parseLogEntry('3-0', ['end', 'done']).end, 'done');
  });

  it('counts frames by their blank lines (JSON data never holds a raw newline)', () => {
    assert.equal(countFrames(frames), 3);
    assert.equal(countFrames(''), 0);
  });

  it('keeps the frames numbered after a point, and says the last number', () => {
    const entry = parseLogEntry('1-0', ['seq', '2', 'frames', frames, 'first', '4']);
    assert.deepEqual(framesAfter(entry, -1), { frames, last: 6 });
    assert.deepEqual(framesAfter(entry, 3), { frames, last: 6 });
    assert.deepEqual(framesAfter(entry, 4), { frames: frames.slice(frames.indexOf('id: 5')), last: 6 });
    assert.deepEqual(framesAfter(entry, 5), { frames: 'id: 6\ndata: {"c":3}\n\n', last: 6 });
    assert.deepEqual(framesAfter(entry, 6), { frames: '', last: 6 });
    assert.deepEqual(framesAfter(entry, 60), { frames: '', last: 6 });
  });
});
