import { yieldToLoop } from '../http/request-body.js';

/**
 * The lines of a JSONL file read as a stream (an OpenAI batch's input, up to 200 MB and 50,000 lines): each line
 * handed on as its text, with its number (1 for the first line of the file, blank lines counted), as the chunks
 * come, so what is held at once is a chunk and the line being read, never the file. The consumer's work on a line
 * runs between two reads; the reader yields to the event loop once a slice of lines or bytes has gone by, so a
 * file already in the page cache (chunks arriving faster than the loop turns) does not hold it either.
 */

/** Yield to the loop after this many bytes of lines, or this many lines, whichever comes first. */
const sliceBytes = 256 * 1024;
const sliceLines = 256;

export interface JsonlLine {
  /** 1-based, as a text editor numbers it. */
  number: number;
  text: string;
}

/** A line longer than the reader takes (it is not read into memory whole). */
export class LineTooLong extends Error {
  constructor(
    readonly line: number,
    readonly maxBytes: number,
  ) {
    super(`line ${line} is longer than ${maxBytes} bytes`);
  }
}

/**
 * The file's lines that hold something (blank ones, and a final newline, skipped but counted), `\r\n` endings and a
 * leading byte-order mark read as a text editor does. A line past `maxLineBytes` throws `LineTooLong`.
 */
export async function* readJsonlLines(
  source: AsyncIterable<Buffer | string>,
  maxLineBytes: number,
): AsyncGenerator<JsonlLine> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let number = 0;
  let sinceYield = { bytes: 0, lines: 0 };
  let first = true;
  const finish = (tail: Buffer): JsonlLine | undefined => {
    number++;
    const whole = pending.length === 0 ? tail : Buffer.concat([...pending, tail]);
    pending = [];
    pendingBytes = 0;
    let text = whole.toString('utf8');
    if (first) {
      first = false;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (text.endsWith('\r')) text = text.slice(0, -1);
    sinceYield.bytes += whole.length;
    sinceYield.lines++;
    return /^\s*$/.test(text) ? undefined : { number, text };
  };
  for await (const piece of source) {
    const chunk = typeof piece === 'string' ? Buffer.from(piece) : piece;
    let start = 0;
    for (;;) {
      const end = chunk.indexOf(0x0a, start);
      if (end < 0) break;
      if (pendingBytes + end - start > maxLineBytes) throw new LineTooLong(number + 1, maxLineBytes);
      const line = finish(chunk.subarray(start, end));
      start = end + 1;
      if (line) yield line;
      if (sinceYield.bytes >= sliceBytes || sinceYield.lines >= sliceLines) {
        sinceYield = { bytes: 0, lines: 0 };
        await yieldToLoop();
      }
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      if (pendingBytes + rest.length > maxLineBytes) throw new LineTooLong(number + 1, maxLineBytes);
      // Copied: the stream may reuse the chunk's memory once it is handed on.
      pending.push(Buffer.from(rest));
      pendingBytes += rest.length;
    }
  }
  if (pendingBytes > 0) {
    const line = finish(Buffer.alloc(0));
    if (line) yield line;
  }
}
