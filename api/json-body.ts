import type { IncomingMessage } from 'node:http';
import { GatewayError, invalidRequest } from '../shared/errors.js';

export const payloadTooLarge = (limit: number) =>
  new GatewayError(413, `Request body too large: the limit is ${limit} bytes.`, { code: 'request_too_large' });

/**
 * Reads and parses a JSON object body. A declared length over the limit is
 * refused before reading; an undeclared one is cut off as soon as it passes it.
 */
export async function readJsonObject(req: IncomingMessage, limit: number): Promise<Record<string, unknown>> {
  const type = req.headers['content-type'] ?? '';
  if (type && !/^application\/(?:[\w.+-]*\+)?json\b/i.test(type)) {
    throw invalidRequest(`Unsupported content type '${type.split(';')[0]}': send the body as application/json.`);
  }
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (declared > limit) throw payloadTooLarge(limit);

  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw payloadTooLarge(limit);
    chunks.push(chunk);
  }
  const text = chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks, size).toString('utf8');
  if (text.trim() === '') throw invalidRequest('The request body is empty: send a JSON object.');
  checkJsonShape(text, maxJsonDepth);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw invalidRequest(
      `We could not parse the JSON body of your request (${(error as Error).message}). Send valid JSON.`,
      null,
      'invalid_json',
    );
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw invalidRequest('The request body must be a JSON object.', null, 'invalid_json');
  }
  return body as Record<string, unknown>;
}

/** Deeper than any real request (a JSON schema ten levels deep is about 25), far below what recursion in the stack can take. */
export const maxJsonDepth = 100;
/**
 * Most members in one object and elements in one array. Every one costs
 * validation on the request thread, and an invalid one an error record too;
 * no request needs more (the largest lists of the API, embedding and
 * completion batches, are 2,048). Arrays of plain numbers (token ids) are
 * cheap and may be longer.
 */
export const maxObjectMembers = 10_000;
export const maxArrayElements = 10_000;
export const maxNumberArrayElements = 1_000_000;

/**
 * Refuses JSON nested deeper than `limit`, or with an object or array larger
 * than the caps above, before it is parsed: serializers, validators and vendor
 * mappings recurse, and a body nested thousands deep would overflow the stack
 * in any of them. A linear scan that skips strings with indexOf (so a large
 * base64 image costs next to nothing) and stops at the first violation. The
 * error names the top-level field it is in.
 */
export function checkJsonShape(text: string, limit: number): void {
  const structural = /["{}[\],]/g;
  // Per open container: object or array, separators seen, and (arrays) whether every element so far is a number.
  const isObject: boolean[] = [];
  const separators: number[] = [];
  const numeric: boolean[] = [];
  let depth = 0;
  let topKey: string | null = null;
  const refuse = (message: string, code: string): never => {
    throw invalidRequest(message, topKey, code);
  };
  const startsNumber = (from: number) => {
    const c = nextNonSpace(text, from);
    return c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39);
  };
  for (let match = structural.exec(text); match !== null; match = structural.exec(text)) {
    const i = match.index;
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      let end = text.indexOf('"', i + 1);
      while (end !== -1 && isEscaped(text, end)) end = text.indexOf('"', end + 1);
      if (end === -1) return; // unterminated: JSON.parse reports it
      if (depth === 1 && nextNonSpace(text, end + 1) === 0x3a /* : */) topKey = text.slice(i + 1, Math.min(end, i + 65));
      structural.lastIndex = end + 1;
    } else if (c === 0x2c /* , */) {
      if (depth === 0) continue;
      const at = depth - 1;
      const count = ++separators[at]!;
      if (isObject[at]) {
        if (count >= maxObjectMembers) refuse(`An object in the request body has more than ${maxObjectMembers} members.`, 'too_many_elements');
        continue;
      }
      if (numeric[at] && !startsNumber(i + 1)) numeric[at] = false;
      if (count >= (numeric[at] ? maxNumberArrayElements : maxArrayElements)) {
        refuse(`An array in the request body has more than ${numeric[at] ? maxNumberArrayElements : maxArrayElements} elements.`, 'too_many_elements');
      }
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (depth >= limit) refuse(`The request body is nested too deeply: at most ${limit} levels of objects and arrays are accepted.`, 'nesting_too_deep');
      isObject[depth] = c === 0x7b;
      separators[depth] = 0;
      numeric[depth] = c === 0x5b && startsNumber(i + 1);
      depth++;
    } else if (depth > 0) {
      depth--;
    }
  }
}

function isEscaped(text: string, quote: number): boolean {
  let backslashes = 0;
  for (let j = quote - 1; j >= 0 && text.charCodeAt(j) === 0x5c; j--) backslashes++;
  return backslashes % 2 === 1;
}

function nextNonSpace(text: string, from: number): number {
  for (let i = from; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return c;
  }
  return -1;
}
