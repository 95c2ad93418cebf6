import { invalidRequest } from '../../shared/errors.js';
import { yieldToLoop } from '../http/request-body.js';

/**
 * A Message Batch's body, `{"requests": [{…}, {…}, …]}`, up to BATCH_MAX_BYTES (32 MiB by default), split into the
 * JSON text of each request without parsing the whole: parsed at once, a body of 10,000 requests would hold the
 * event loop for tens of milliseconds. One linear scan over the text's structural characters (strings skipped by
 * indexOf, as `checkJsonShape` does) finds the `requests` array and the bounds of each of its elements, yielding to
 * the loop every `sliceChars`; each element is then parsed on its own (small), and the envelope without them
 * (`{"requests":[]}`) too, so that the body as a whole is exactly as valid as JSON.parse would find it.
 */

const sliceChars = 64 * 1024;
const structural = /["{}[\],:]/g;

export interface SplitBody {
  /**
   * The body with the array's elements taken out: `{"requests":[]}`, or the whole body when it has no `requests` array.
   */
  envelope: string;
  /** Each element's JSON text, in order. */
  items: string[];
}

const malformed = (detail: string) =>
  invalidRequest(
    `We could not parse the JSON body of your request (${detail}). Send valid JSON.`,
    null,
    'invalid_json',
  );

/** The index just past the string whose opening quote is at `quote`. */
function stringEnd(text: string, quote: number): number {
  let at = quote + 1;
  for (;;) {
    const end = text.indexOf('"', at);
    if (end < 0) throw malformed('a string is not terminated');
    let backslashes = 0;
    for (let k = end - 1; text.charCodeAt(k) === 0x5c; k--) backslashes++;
    if (backslashes % 2 === 0) return end + 1;
    at = end + 1;
  }
}

/** Splits the body (see above); refuses more than `maxItems` requests, and an element that is not an object. */
export async function splitBatchBody(text: string, maxItems: number): Promise<SplitBody> {
  const items: string[] = [];
  let depth = 0;
  // The last string at depth 1 and whether a ':' followed it: the member whose value comes next.
  let lastString = '';
  let member = '';
  let arrayStart = -1;
  let arrayEnd = -1;
  let inArray = false;
  let itemStart = -1;
  // Where the text between elements (whitespace and one comma) begins.
  let gapFrom = -1;
  let nextYield = sliceChars;
  const checkGap = (to: number, first: boolean) => {
    const gap = text.slice(gapFrom, to);
    if (!(first ? /^\s*$/ : /^\s*,\s*$/).test(gap))
      throw invalidRequest(
        `requests.${items.length}: each request must be an object ({"custom_id", "params"}).`,
        `requests.${items.length}`,
      );
  };
  structural.lastIndex = 0;
  for (let match = structural.exec(text); match; match = structural.exec(text)) {
    const at = match.index;
    if (at >= nextYield) {
      await yieldToLoop();
      nextYield = at + sliceChars;
    }
    const char = text.charCodeAt(at);
    if (char === 0x22) {
      const end = stringEnd(text, at);
      if (depth === 1) lastString = text.slice(at, end);
      structural.lastIndex = end;
      continue;
    }
    if (char === 0x3a /* : */) {
      if (depth === 1) member = lastString;
      continue;
    }
    if (char === 0x2c /* , */) continue;
    if (char === 0x7b /* { */ || char === 0x5b /* [ */) {
      if (inArray && depth === 2) {
        if (char !== 0x7b)
          throw invalidRequest(
            `requests.${items.length}: each request must be an object ({"custom_id", "params"}).`,
            `requests.${items.length}`,
          );
        checkGap(at, items.length === 0);
        itemStart = at;
      } else if (depth === 1 && char === 0x5b && member !== '' && safeKey(member) === 'requests') {
        if (arrayStart >= 0) throw invalidRequest('The body names `requests` twice.', 'requests');
        arrayStart = at;
        inArray = true;
        gapFrom = at + 1;
      }
      depth++;
      continue;
    }
    // } or ]
    depth--;
    if (depth < 0) throw malformed('unbalanced brackets');
    if (inArray && depth === 2 && itemStart >= 0) {
      items.push(text.slice(itemStart, at + 1));
      if (items.length > maxItems)
        throw invalidRequest(`A batch may hold at most ${maxItems} requests.`, 'requests', 'too_many_requests');
      itemStart = -1;
      gapFrom = at + 1;
    } else if (inArray && depth === 1) {
      if (char !== 0x5d) throw malformed('unbalanced brackets');
      const gap = text.slice(gapFrom, at);
      if (/^\s*,\s*$/.test(gap)) throw malformed('a trailing comma');
      checkGap(at, true);
      arrayEnd = at;
      inArray = false;
    }
  }
  if (depth !== 0 || inArray) throw malformed('the body ends before it is complete');
  const envelope = arrayStart < 0 ? text : `${text.slice(0, arrayStart + 1)}${text.slice(arrayEnd)}`;
  return { envelope, items };
}

/** A member's name as JSON says it (escapes read), or '' when its text is not a string JSON reads. */
function safeKey(quoted: string): string {
  try {
    return JSON.parse(quoted) as string;
  } catch {
    return '';
  }
}
