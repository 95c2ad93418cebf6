import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { countFrames, framesAfter, framesAfterBatch, parseLogEntry } from '../../shared/reply.js';

describe("a stream's event log entries", () => {
  const frames = 'id: 4\ndata: {"a":1}\n\nid: 5\ndata: {"b":"x\\n\\ny"}\n\nid: 6\ndata: {"c":3}\n\n';

  it('reads the fields of a batch and of the terminal entry, whatever their order', () => {
    assert.deepEqual(parseLogEntry('1-0', ['seq', '2', 'frames', frames, 'first', '4', 'owner', 'key_1']), {
      id: '1-0',
      seq: 2,
      from: 2,
      first: 4,
      frames,
      owner: 'key_1',
    });
    assert.deepEqual(parseLogEntry('2-0', ['seq', '2', 'end', 'error', 'payload', '{}']), {
      id: '2-0',
      seq: 2,
      from: 2,
      first: 0,
      frames: '',
      end: 'error',
      payload: '{}',
    });
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

  it("reads an entry that holds several batches: its first batch and each one's length", () => {
    const batches = [
      'id: 4\ndata: {"a":1}\n\n',
      'id: 5\ndata: {"b":"x\\n\\ny"}\n\nid: 6\ndata: {"c":3}\n\n',
      ': keep-alive\n\n',
    ];
    const entry = parseLogEntry('1-0', [
      'seq',
      '9',
      'from',
      '7',
      'lens',
      batches.map((b) => b.length).join(','),
      'frames',
      batches.join(''),
      'first',
      '4',
    ]);
    assert.equal(entry.from, 7);
    assert.deepEqual(
      entry.lens,
      batches.map((b) => b.length),
    );
    // The batches after a given one, as a reader that has seen up to it needs them.
    assert.equal(framesAfterBatch(entry, 6), batches.join(''));
    assert.equal(framesAfterBatch(entry, 7), batches[1]! + batches[2]!);
    assert.equal(framesAfterBatch(entry, 8), batches[2]);
    assert.equal(framesAfterBatch(entry, 9), '');
    assert.equal(framesAfterBatch(entry, 12), '');
    // Frame numbers still count across the batches.
    assert.deepEqual(framesAfter(entry, 5), {
      frames: batches[1]!.slice(batches[1]!.indexOf('id: 6')) + batches[2]!,
      last: 7,
    });
  });

  it('reads an entry of one batch as whole or nothing', () => {
    const entry = parseLogEntry('1-0', ['seq', '3', 'frames', frames, 'first', '4']);
    assert.equal(framesAfterBatch(entry, 2), frames);
    assert.equal(framesAfterBatch(entry, 3), '');
  });
});
