import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import type { Middleware } from 'koa';
import type { z } from 'zod';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import { lingerAfterAnswer } from './linger.js';

/*
 * A request body, from bytes to a typed value or an OpenAI-shaped 4xx: read
 * within its size limit, scanned for shapes that would stall the parser,
 * parsed, then validated against the endpoint's zod schema, whose first
 * problem becomes the 400 OpenAI would give (param named the OpenAI way).
 */

export const payloadTooLarge = (limit: number) =>
  new GatewayError(413, `Request body too large: the limit is ${limit} bytes.`, { code: 'request_too_large' });

/** Past this many bytes a body's scan, parse and validation each get a turn of the loop of their own. */
export const largeBodyBytes = 64 * 1024;

/** Lets every other ready callback run before this request's next step. */
export const yieldToLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/** BODY_IDLE_TIMEOUT_MS, set once by the api server: the longest silence a body reader waits through. */
let bodyIdleMs = 30_000;
export function setBodyIdleTimeout(ms: number): void {
  bodyIdleMs = ms;
}

export const bodyStalled = () =>
  new GatewayError(408, `The request body stalled: nothing arrived for ${bodyIdleMs / 1000} s.`, {
    code: 'request_timeout',
  });

/**
 * Watches a body being read: `onStall` runs once the client has sent nothing
 * for BODY_IDLE_TIMEOUT_MS while we were waiting for it. The returned `bytes`
 * (call it on every chunk) starts the silence over; `stop` ends the watch.
 * Time the body spends paused by our own backpressure (a slow disk or S3
 * holding a piped upload) or with bytes still unread in its buffer is ours,
 * not the client's: the watch starts over instead of refusing it.
 */
export function watchBodyIdle(req: Readable, onStall: () => void): { bytes: () => void; stop: () => void } {
  const timer = setTimeout(() => {
    if (req.readableFlowing === false || req.readableLength > 0) timer.refresh();
    else onStall();
  }, bodyIdleMs);
  return { bytes: () => timer.refresh(), stop: () => clearTimeout(timer) };
}

/**
 * A refusal sent before the request's body has all arrived (401, 403, 413,
 * 429, a 408 for a stalled body…) closes the connection after it: the client
 * may not keep the socket by sending the rest slowly, as Node would otherwise
 * read (and drop) it for as long as it comes. A request that has arrived
 * keeps its connection. The client may read the answer while it still sends:
 * see endAndLinger (./linger.ts) for how long the socket waits for it.
 */
export const closeUnreadRequests: Middleware = async (ctx, next) => {
  try {
    await next();
  } finally {
    if (!ctx.req.complete && !ctx.headerSent) {
      ctx.set('connection', 'close');
      lingerAfterAnswer(ctx.req.socket);
    }
  }
};

/**
 * Reads the body into memory: within `limit` bytes (a declared length over it
 * is refused before reading, an undeclared one as soon as it passes it) and
 * within the body idle deadline. After a refusal the rest is read and dropped
 * until the answer (which closes the connection) is out, so the client can read it.
 *
 * Reading stops early (`cutAt`: the end of its `data:image/`) once the body
 * is inside a string that starts `data:image/` and is already longer than
 * any vendor takes inline: the caller refuses it from the bytes before it,
 * without joining, decoding or parsing the rest. A byte run since the last `"` is all it takes to see (base64 has
 * no quote), one lastIndexOf per chunk.
 */
function readBytes(
  req: IncomingMessage,
  limit: number,
): Promise<{ chunks: Buffer[]; size: number; cutAt: number | undefined }> {
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (declared > limit) return Promise.reject(payloadTooLarge(limit));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    // Bytes since the last quote, the first bytes after it, and where it is.
    let run = 0;
    let head: Buffer = Buffer.alloc(0);
    let quoteAt = 0;
    const finish = (error?: unknown, cutAt?: number) => {
      idle.stop();
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', finish);
      req.off('close', onClose);
      if (error === undefined) resolve({ chunks, size, cutAt });
      else reject(error);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) return finish(payloadTooLarge(limit));
      chunks.push(chunk);
      idle.bytes();
      const quote = chunk.lastIndexOf(0x22);
      if (quote === -1) {
        run += chunk.length;
        if (head.length < dataImagePrefix.length)
          head = Buffer.concat([head, chunk.subarray(0, dataImagePrefix.length - head.length)]);
      } else {
        run = chunk.length - quote - 1;
        head = chunk.subarray(quote + 1, quote + 1 + dataImagePrefix.length);
        quoteAt = size - chunk.length + quote;
      }
      if (run > maxImageDataUrlChars && head.toString('latin1').toLowerCase() === dataImagePrefix) {
        finish(undefined, quoteAt + 1 + dataImagePrefix.length);
      }
    };
    const onEnd = () => finish();
    const onClose = () =>
      finish(invalidRequest('The request body ended before it was complete.', null, 'incomplete_body'));
    const idle = watchBodyIdle(req, () => finish(bodyStalled()));
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', finish);
    req.on('close', onClose);
  });
}

/**
 * Reads a JSON body as text (see readBytes for the limits of the reading), refusing another content type, an empty
 * body, and an inline image larger than any vendor takes; `large`: it was past `largeBodyBytes`, and each later step
 * on it should get a turn of the loop of its own.
 */
export async function readJsonText(
  req: IncomingMessage,
  limit: number,
): Promise<{ text: string; large: boolean; bytes: number }> {
  const type = req.headers['content-type'] ?? '';
  if (type && !/^application\/(?:[\w.+-]*\+)?json\b/i.test(type)) {
    throw invalidRequest(`Unsupported content type '${type.split(';')[0]}': send the body as application/json.`);
  }
  const { chunks, size, cutAt } = await readBytes(req, limit);
  if (cutAt !== undefined) {
    // Only the body up to the image's `data:image/` is decoded and scanned, for the image's path.
    const prefix: Buffer[] = [];
    for (let taken = 0, i = 0; taken < cutAt; taken += chunks[i]!.length, i++) prefix.push(chunks[i]!);
    checkJsonShape(Buffer.concat(prefix).subarray(0, cutAt).toString('utf8'), maxJsonDepth, true);
    // Only a quote escaped just before the image could hide it from the scan.
    throw inlineImageTooLarge(null);
  }
  // Reading a large body is many turns of the loop; joining, decoding, scanning, parsing and (later) validating it
  // are one each, with a yield between them, so that no turn holds the others up for all of them (a 47 MB body takes
  // about 45 ms to join and 50 ms to decode). A small body is all one turn.
  const large = size > largeBodyBytes;
  const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
  chunks.length = 0;
  if (large) await yieldToLoop();
  const text = bytes.toString('utf8');
  if (text.trim() === '') throw invalidRequest('The request body is empty: send a JSON object.');
  if (large) await yieldToLoop();
  return { text, large, bytes: size };
}

/** Reads and parses a JSON object body (see readBytes for the limits of the reading). */
export async function readJsonObject(req: IncomingMessage, limit: number): Promise<Record<string, unknown>> {
  return (await readJsonBody(req, limit)).body;
}

/**
 * Reads and parses a JSON object body, with the bytes it had as they were read: a chunked body (no
 * `Content-Length`) is as large as what arrived, and so is one whose `Content-Length` the client misstated.
 */
export async function readJsonBody(
  req: IncomingMessage,
  limit: number,
): Promise<{ body: Record<string, unknown>; bytes: number }> {
  const { text, large, bytes } = await readJsonText(req, limit);
  // Also refuses an inline image past the vendors' limit (one short of the cut), naming where it is, before it is
  // parsed.
  checkJsonShape(text, maxJsonDepth);
  if (large) await yieldToLoop();
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
  return { body: body as Record<string, unknown>, bytes };
}

/**
 * Deeper than any real request (a JSON schema ten levels deep is about 25), far below what recursion in the stack can
 * take.
 */
export const maxJsonDepth = 100;
/**
 * Most members in one object and elements in one array. Every one costs
 * validation on the request thread, and an invalid one an error record too;
 * no request needs more (the largest lists of the API, embedding and
 * completion batches, are 2,048). Arrays of plain numbers (token ids) are
 * cheap and may be longer.
 */
export const maxObjectMembers = 10_000;
/**
 * Most objects and arrays in one body, all levels together. Validation,
 * translation and serialisation each walk every one of them on the request
 * thread; at this bound each of those steps stays well under 50 ms (about
 * 25 ms for validation, the slowest), while no real request comes near it:
 * a conversation of 10,000 plain messages is 10,000, an embeddings batch of
 * 2,048 token arrays about 2,000.
 */
export const maxJsonContainers = 50_000;
export const maxArrayElements = 10_000;
export const maxNumberArrayElements = 1_000_000;
/**
 * The largest image a body may carry inline (a `data:image/…` URL, in any
 * field): OpenAI's limit of 20 MB per image, the largest a vendor takes that
 * way (Anthropic's is 5 MB, Gemini's 20 MB for the whole request). A larger one
 * would only be refused by the vendor, after the api had parsed, copied and
 * queued it; here it is a 400 found by the shape scan, before the body is parsed.
 */
const maxInlineImageBytes = 20 * 1024 * 1024;
/** The same in characters of the data URL: base64 (4 characters per 3 bytes) and room for the `data:…;base64,` head. */
const maxImageDataUrlChars = Math.ceil(maxInlineImageBytes / 3) * 4 + 256;
const dataImagePrefix = 'data:image/';

/** `chars`: the data URL's length, when all of it was read. */
const inlineImageTooLarge = (param: string | null, chars?: number) =>
  invalidRequest(
    `${param ? `Invalid '${param}': an` : 'An'} image sent inline (a data URL) may be at most ${maxInlineImageBytes / 1024 / 1024} MB` +
      `${chars === undefined ? '' : `; this one is about ${Math.round((chars * 3) / 4 / 1024 / 1024)} MB`}. Send a larger one by URL.`,
    param,
    'image_too_large',
  );

/**
 * Refuses JSON nested deeper than `limit`, or with an object or array larger
 * than the caps above, before it is parsed: serializers, validators and vendor
 * mappings recurse, and a body nested thousands deep would overflow the stack
 * in any of them. A linear scan that skips strings with indexOf (so a large
 * base64 image costs next to nothing) and stops at the first violation. The
 * error names the top-level field it is in; an inline image too large for
 * any vendor (a string whose length alone says so) is named by its full path.
 * `endsInImage`: the text is a body cut inside such an image, which the
 * unterminated string at its end is.
 */
export function checkJsonShape(text: string, limit: number, endsInImage = false): void {
  const structural = /["{}[\],]/g;
  // Per open container: object or array, separators seen, (arrays) whether every element so far is a number, and
  // (objects) where the current member's name is in the text.
  const isObject: boolean[] = [];
  const separators: number[] = [];
  const numeric: boolean[] = [];
  const keyAt: number[] = [];
  const keyEnd: number[] = [];
  let depth = 0;
  let containers = 0;
  let topKey: string | null = null;
  const refuse = (message: string, code: string): never => {
    throw invalidRequest(message, topKey, code);
  };
  // A string at `quote` too long to be an inline image a vendor takes (`chars` long, when it ends): refused, by its
  // path, if it is one.
  const refuseImage = (quote: number, chars?: number) => {
    if (text.slice(quote + 1, quote + 1 + dataImagePrefix.length).toLowerCase() !== dataImagePrefix) return;
    const path = Array.from({ length: depth }, (_, d) =>
      isObject[d] ? text.slice(keyAt[d], keyEnd[d]) : separators[d]!,
    );
    throw inlineImageTooLarge(formatParam(path), chars);
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
      // Unterminated: JSON.parse reports it, unless it is the image a cut body ends in (`endsInImage`).
      if (end === -1) return void (endsInImage && refuseImage(i));
      if (depth > 0 && isObject[depth - 1] && nextNonSpace(text, end + 1) === 0x3a /* : */) {
        keyAt[depth - 1] = i + 1;
        keyEnd[depth - 1] = end;
        if (depth === 1) topKey = text.slice(i + 1, Math.min(end, i + 65));
      } else if (end - i - 1 > maxImageDataUrlChars) {
        refuseImage(i, end - i - 1);
      }
      structural.lastIndex = end + 1;
    } else if (c === 0x2c /* , */) {
      if (depth === 0) continue;
      const at = depth - 1;
      const count = ++separators[at]!;
      if (isObject[at]) {
        if (count >= maxObjectMembers)
          refuse(`An object in the request body has more than ${maxObjectMembers} members.`, 'too_many_elements');
        continue;
      }
      if (numeric[at] && !startsNumber(i + 1)) numeric[at] = false;
      if (count >= (numeric[at] ? maxNumberArrayElements : maxArrayElements)) {
        refuse(
          `An array in the request body has more than ${numeric[at] ? maxNumberArrayElements : maxArrayElements} ` +
            `elements.`,
          'too_many_elements',
        );
      }
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (depth >= limit)
        refuse(
          `The request body is nested too deeply: at most ${limit} levels of objects and arrays are accepted.`,
          'nesting_too_deep',
        );
      if (++containers > maxJsonContainers)
        refuse(`The request body holds more than ${maxJsonContainers} objects and arrays in all.`, 'too_many_elements');
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

// ---- validation: zod issues as OpenAI errors ----

type Issue = z.core.$ZodIssue;
type PathKey = PropertyKey;

/** `['messages', 0, 'content']` → `messages[0].content`, the way OpenAI names params. */
export function formatParam(path: readonly PathKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
  }
  return out;
}

/** For a failed union, the branch that got furthest says most about what the client meant. */
function mostSpecific(issue: Issue, base: readonly PathKey[]): { issue: Issue; path: PathKey[] } {
  const path = [...base, ...issue.path];
  if (issue.code !== 'invalid_union' || issue.errors.length === 0) return { issue, path };
  let best: { issue: Issue; path: PathKey[] } | undefined;
  for (const branch of issue.errors) {
    for (const inner of branch) {
      const candidate = mostSpecific(inner, path);
      if (!best || candidate.path.length > best.path.length) best = candidate;
    }
  }
  // Branches that all fail at the union's own path (wrong type altogether) say nothing more specific.
  return best && best.path.length > path.length ? best : { issue, path };
}

function describe(issue: Issue, param: string): string {
  switch (issue.code) {
    case 'invalid_type':
      return issue.input === undefined
        ? `Missing required parameter: '${param}'.`
        : `Invalid type for '${param}': expected ${article(issue.expected)}, but got ${describeValue(issue.input)} ` +
            `instead.`;
    case 'too_big':
      return issue.origin === 'array'
        ? `Invalid '${param}': array too long. Expected an array with maximum length ${issue.maximum}.`
        : `Invalid '${param}': ${issue.origin === 'string' ? 'string too long' : `expected a value ≤ ${issue.maximum}`}.`;
    case 'too_small':
      return issue.origin === 'array'
        ? `Invalid '${param}': empty array. Expected an array with minimum length ${issue.minimum}.`
        : issue.origin === 'string'
          ? `Invalid '${param}': ${issue.message}.`
          : `Invalid '${param}': expected a value ≥ ${issue.minimum}.`;
    case 'invalid_union':
      if ('discriminator' in issue && issue.discriminator) {
        const options = (issue as { options?: unknown[] }).options ?? [];
        return `Invalid value for '${param}': expected one of ${options.map((o) => `'${String(o)}'`).join(', ')}.`;
      }
      return `Invalid value for '${param}': it matches none of the accepted forms.`;
    case 'invalid_value':
      return `Invalid value for '${param}': expected one of ${issue.values.map((v) => `'${String(v)}'`).join(', ')}.`;
    default:
      return `Invalid '${param}': ${issue.message}.`;
  }
}

function article(type: string): string {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  if (typeof value === 'number' && !Number.isFinite(value)) return `${value}`;
  return article(typeof value);
}

/** The first problem of a failed parse, as the 400 OpenAI would give. */
export function toValidationError(error: z.ZodError): GatewayError {
  const first = error.issues[0];
  if (!first) return new GatewayError(400, 'Invalid request body.');
  const { issue, path } = mostSpecific(first, []);
  const param = formatParam(path);
  const code =
    issue.code !== 'invalid_type'
      ? 'invalid_value'
      : issue.input === undefined
        ? 'missing_required_parameter'
        : 'invalid_type';
  return new GatewayError(400, describe(issue, param), { param: param || null, code });
}

export function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.output<T> {
  // reportInput: without it zod leaves `input` out, and a wrong type would read as a missing one.
  const result = schema.safeParse(body, { reportInput: true });
  if (!result.success) throw toValidationError(result.error);
  return result.data;
}
