import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { LineTooLong, readJsonlLines, type JsonlLine } from '../../api/batches/jsonl-lines.js';

/** The lines read from `pieces` as a stream would hand them over. */
async function lines(pieces: ReadonlyArray<Buffer | string>, maxLineBytes = 1024): Promise<JsonlLine[]> {
  async function* source() {
    for (const piece of pieces) yield piece;
  }
  const out: JsonlLine[] = [];
  for await (const line of readJsonlLines(source(), maxLineBytes)) out.push(line);
  return out;
}

describe('a JSONL file read as a stream (api/batches/jsonl-lines.ts)', () => {
  it(
    'numbers lines as an editor does, blank ones counted and skipped, CRLF and a byte-order mark read, the last ' +
      'line without a newline kept',
    async () => {
      assert.deepEqual(await lines(['\ufeff{"a":1}\r\n', '\n', '  \n{"b":2}\n{"c"', ':3}']), [
        { number: 1, text: '{"a":1}' },
        { number: 4, text: '{"b":2}' },
        { number: 5, text: '{"c":3}' },
      ]);
      assert.deepEqual(await lines([]), []);
      assert.deepEqual(await lines(['\n\n']), []);
    },
  );

  it('joins a character split between two chunks (never splits inside UTF-8)', async () => {
    const bytes = Buffer.from('{"t":"é—😀"}\n', 'utf8');
    const pieces = Array.from(bytes, (byte) => Buffer.from([byte]));
    assert.deepEqual(await lines(pieces), [{ number: 1, text: '{"t":"é—😀"}' }]);
  });

  it('refuses a line longer than its limit, naming it, whether it ends in its chunk or goes on past it', async () => {
    await assert.rejects(
      lines(['{"a":1}\n', 'x'.repeat(20) + '\n'], 10),
      (error: unknown) => error instanceof LineTooLong && error.line === 2 && error.maxBytes === 10,
    );
    await assert.rejects(
      lines(['{"a":1}\n', 'x'.repeat(8), 'x'.repeat(8)], 10),
      (error: unknown) => error instanceof LineTooLong && error.line === 2,
    );
    assert.deepEqual(
      await lines(['x'.repeat(10) + '\n'], 10),
      [{ number: 1, text: 'x'.repeat(10) }],
      'a line of exactly the limit is read',
    );
  });

  it('reads thousands of lines from one chunk, as a file in the page cache arrives', async () => {
    const text = Array.from({ length: 5_000 }, (_, i) => `{"i":${i}}`).join('\n');
    const read = await lines([text]);
    assert.equal(read.length, 5_000);
    assert.deepEqual(read.at(-1), { number: 5_000, text: '{"i":4999}' });
  });
});
