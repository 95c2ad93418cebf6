/**
 * Generators for the fuzz suite (test/integration/fuzz.test.ts): every case is
 * a plausible valid request of one endpoint, then mutated. A case is plain data
 * (method, path, headers, body bytes, what its answer must look like), built
 * only from fast-check's values, so a seed always gives the same requests.
 *
 * Secrets and ids the generator cannot know ($KEY, $ADMIN, $VIDEO, $JOB,
 * $OTHER_VIDEO) are placeholders, filled in when the case is sent.
 */
import fc from 'fast-check';

// ---------------------------------------------------------------------------
// Limits the gateway under test is started with (see fuzz.test.ts). Small on
// purpose: a case past a limit then costs a megabyte, not fifty.

export const limits = {
  /** MAX_BODY_BYTES: JSON bodies past it must be a 413. */
  bodyBytes: 4 * 1024 * 1024,
  /** MAX_IMAGE_BYTES and MAX_AUDIO_BYTES: one uploaded file past it must be a 413. */
  fileBytes: 1024 * 1024,
  /** What the gateway promises for multipart bodies: more is refused, never silently dropped. */
  files: 20,
  fields: 150,
  /** One text field past it must be refused, not cut short. */
  fieldBytes: 1024 * 1024,
} as const;

// ---------------------------------------------------------------------------
// Cases

export interface Expect {
  /** Why a 2xx would be wrong: the answer must be an OpenAI-shaped 4xx. */
  refuse?: string;
  /** A multipart number field sent as non-numeric text: the 400 must name it and not call the text a number. */
  numberField?: string;
  /** The client sent `Connection: close`: the answer must not promise keep-alive. */
  connectionClose?: boolean;
  /** An answer with no body is fine (OPTIONS). */
  emptyOk?: boolean;
  /**
   * Multipart text fields and file fields sent whole: a "missing parameter" error about one of them means it was
   * dropped.
   */
  sentFields?: string[];
  sentFiles?: string[];
}

export interface FuzzCase {
  /** What was generated, in words (the mutations applied). */
  label: string;
  method: string;
  /** Request target; may hold placeholders. */
  path: string;
  headers: Array<[string, string]>;
  body?: Buffer;
  /** `http`: Node's client; `net`: the bytes in `raw` as they are, for requests Node's client refuses to write. */
  transport: 'http' | 'net';
  raw?: Buffer;
  /** Send the body with `transfer-encoding: chunked` in a few pieces instead of a content-length. */
  chunked?: boolean;
  /**
   * Send only this many bytes of the body (content-length says all of it), then close the socket: no answer is owed.
   */
  cutAfter?: number;
  /** How long to wait after the partial body before closing. */
  cutDelayMs?: number;
  expect: Expect;
}

const clip = (text: string, max: number) =>
  text.length > max ? `${text.slice(0, max)}… (${text.length} chars)` : text;

/**
 * `arbitrary` once in `oneIn` cases, null otherwise (fc.option's `freq` is the other way round: null once in `freq`).
 */
function sometimes<T>(arbitrary: fc.Arbitrary<T>, oneIn: number): fc.Arbitrary<T | null> {
  return fc.oneof({ weight: oneIn - 1, arbitrary: fc.constant(null) }, { weight: 1, arbitrary });
}

/** Bytes shown readably: printable ASCII as is, the rest escaped. */
export function preview(bytes: Buffer | undefined, max = 300): string {
  if (!bytes) return '(none)';
  const head = bytes.subarray(0, max);
  let out = '';
  for (const byte of head) {
    if (byte >= 0x20 && byte < 0x7f && byte !== 0x5c) out += String.fromCharCode(byte);
    else if (byte === 0x0a) out += '\\n';
    else if (byte === 0x0d) out += '\\r';
    else out += `\\x${byte.toString(16).padStart(2, '0')}`;
  }
  if (bytes.length > max) {
    const tail = bytes.subarray(Math.max(max, bytes.length - 80));
    out += ` …[${bytes.length} bytes in all]… ${preview(tail, 80)}`;
  }
  return out;
}

/** One line per case, short enough for a failure report (fast-check prints cases with this). */
export function describeCase(c: FuzzCase): string {
  const headers = c.headers.map(([name, value]) => `${name}: ${clip(value, 60)}`).join('; ');
  const body =
    c.transport === 'net'
      ? `raw ${preview(c.raw, 400)}`
      : `body ${c.body ? `${c.body.length} B: ${preview(c.body, 300)}` : '(none)'}`;
  const cut = c.cutAfter !== undefined ? ` | cut after ${c.cutAfter} B and closed` : '';
  const chunked = c.chunked ? ' | chunked' : '';
  return `[${c.label}] ${c.method} ${clip(c.path, 160)} | ${headers} | ${body}${chunked}${cut}`;
}

/** Gives a case the short description fast-check prints for counterexamples (the bodies can be megabytes). */
function finish(c: FuzzCase): FuzzCase {
  Object.defineProperty(c, fc.toStringMethod, { value: () => describeCase(c), enumerable: false });
  return c;
}

// ---------------------------------------------------------------------------
// JSON values with parts JSON.stringify cannot write

/** JSON text spliced in verbatim: numbers such as 1e999, nesting thousands deep, bytes that are not UTF-8. */
export class RawJson {
  constructor(
    readonly bytes: Buffer,
    readonly note: string,
  ) {}
}

export type FuzzValue = null | boolean | number | string | RawJson | FuzzValue[] | { [key: string]: FuzzValue };
type FuzzObject = { [key: string]: FuzzValue };
type Path = ReadonlyArray<string | number>;

const raw = (text: string | Buffer, note?: string) =>
  new RawJson(typeof text === 'string' ? Buffer.from(text, 'utf8') : text, note ?? clip(String(text), 40));

const isObject = (value: unknown): value is FuzzObject =>
  typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof RawJson);

/** An own property, even for `__proto__` (plain assignment would set the prototype instead). */
function defineOwn(target: FuzzObject, key: string, value: FuzzValue): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

function getOwn(target: FuzzValue | undefined, key: string | number): FuzzValue | undefined {
  if (Array.isArray(target) && typeof key === 'number') return target[key];
  if (isObject(target) && Object.prototype.hasOwnProperty.call(target, key)) return target[key as string];
  return undefined;
}

function cloneObject(source: FuzzObject): FuzzObject {
  const out: FuzzObject = {};
  for (const [key, value] of Object.entries(source)) defineOwn(out, key, value);
  return out;
}

/**
 * The value with `path` set (or deleted when `value` is undefined), copied
 * along the path. Missing or wrong-typed containers on the way are created,
 * so a mutation can reach `tools[0].function.parameters` of a body that had no tools.
 */
export function setAt(root: FuzzValue | undefined, path: Path, value: FuzzValue | undefined): FuzzValue {
  if (path.length === 0) return value ?? null;
  const [head, ...rest] = path as [string | number, ...Array<string | number>];
  const emptyFor = (key: string | number | undefined): FuzzValue => (typeof key === 'number' ? [] : {});
  if (typeof head === 'number') {
    const array = Array.isArray(root) ? [...root] : [];
    const index = Math.min(head, array.length);
    if (rest.length === 0 && value === undefined) {
      array.splice(index, 1);
      return array;
    }
    array[index] = setAt(array[index] ?? emptyFor(rest[0]), rest, value);
    return array;
  }
  const object = isObject(root) ? cloneObject(root) : {};
  if (rest.length === 0 && value === undefined) {
    delete object[head];
    return object;
  }
  defineOwn(object, head, setAt(getOwn(root, head) ?? emptyFor(rest[0]), rest, value));
  return object;
}

/** A mock vendor marker (`[mock:error:500]`) in generated text would make the mock fail on purpose: never send one. */
const defuse = (text: string) => (text.includes('[mock:') ? text.replaceAll('[mock:', '[mo ck:') : text);

/** JSON bytes of a value, RawJson parts spliced in verbatim. Keys keep their order, `__proto__` included. */
export function encodeJson(value: FuzzValue): Buffer {
  const parts: Buffer[] = [];
  let text = '';
  const flush = () => {
    if (text !== '') parts.push(Buffer.from(text, 'utf8'));
    text = '';
  };
  const walk = (node: FuzzValue) => {
    if (node instanceof RawJson) {
      flush();
      parts.push(node.bytes);
    } else if (typeof node === 'string') {
      text += JSON.stringify(defuse(node));
    } else if (node === null || typeof node !== 'object') {
      text += JSON.stringify(node) ?? 'null';
    } else if (Array.isArray(node)) {
      text += '[';
      node.forEach((item, i) => {
        if (i > 0) text += ',';
        walk(item);
      });
      text += ']';
    } else {
      text += '{';
      let first = true;
      for (const [key, item] of Object.entries(node)) {
        if (!first) text += ',';
        first = false;
        text += `${JSON.stringify(defuse(key))}:`;
        walk(item);
      }
      text += '}';
    }
  };
  walk(value);
  flush();
  return Buffer.concat(parts);
}

// ---------------------------------------------------------------------------
// Value generators

/** Values of the wrong type for nearly every field. */
const wrongTypes = fc.constantFrom<FuzzValue>(
  null,
  true,
  false,
  0,
  1,
  -1,
  0.5,
  '',
  'x',
  'null',
  'true',
  '0',
  [],
  [null],
  [1, 'a'],
  {},
  { a: 1 },
  [[]],
  { '': '' },
);

/** Numbers at and past the edges of what a double holds, written as JSON text. */
const extremeNumberTexts = [
  '1e308',
  '-1e308',
  '1.7976931348623157e308',
  '-0',
  '-0.0',
  '0.0',
  '9007199254740993',
  '-9007199254740993',
  '18446744073709551616',
  `1${'0'.repeat(400)}`,
  `-${'9'.repeat(600)}`,
  '1e999',
  '-1e999',
  '4.9e-324',
  '2.2250738585072014e-308',
  '1.5',
  '0.1',
  '1E+2',
  '1.0',
  '2.0000000000000004',
  '1e-400',
  '100000000000000000000.0',
  '123456789012345678901234567890.5',
];
const extremeNumber = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...extremeNumberTexts).map((text) => raw(text, `number ${clip(text, 24)}`)) },
  { weight: 1, arbitrary: fc.double({ noNaN: true, noDefaultInfinity: true }) as fc.Arbitrary<FuzzValue> },
  { weight: 1, arbitrary: fc.integer() as fc.Arbitrary<FuzzValue> },
  {
    weight: 1,
    arbitrary: fc
      .bigInt({ min: -(2n ** 256n), max: 2n ** 256n })
      .map((n) => raw(n.toString(), `integer ${clip(n.toString(), 24)}`)),
  },
);

/** Strings that break naive text handling: lone surrogates, NUL, direction marks, joined emoji, BOMs, noncharacters. */
const unicodeEdges = [
  '\ud800',
  '\udfff',
  'a\ud83d',
  '\ude00b',
  '\u0000',
  'x\u0000y',
  '\u202e',
  '\u200f\u200e',
  '\u2028\u2029',
  '\u{1F469}\u200D\u{1F469}\u200D\u{1F467}\u200D\u{1F466}',
  '\u{1F3F3}\uFE0F\u200D\u{1F308}',
  '\ufeff',
  '\uffff',
  '\ufffe',
  '\u{10FFFF}',
  'e\u0301\u0301\u0301\u0301',
  'İı',
  'ß',
  '\u001b[31m',
  '\u0085',
  '\\',
  '"',
  '%s%n%x',
  '${x}',
  '<|endoftext|>',
  '<|im_start|>',
  'Ω≈ç√∫',
  '\u00a0',
  '\t\r\n',
  '\u180e',
  '﷽',
];
const unicodeString = fc
  .array(
    fc.oneof(
      fc.constantFrom(...unicodeEdges),
      fc.string({ unit: 'binary', maxLength: 8 }),
      fc.string({ unit: 'grapheme', maxLength: 8 }),
    ),
    { minLength: 1, maxLength: 12 },
  )
  .map((pieces) => pieces.join(''));

/**
 * Byte sequences that are not UTF-8: bare continuation bytes, overlong forms, encoded surrogates, past U+10FFFF, cut
 * sequences.
 */
const invalidUtf8 = fc.oneof(
  fc.constantFrom(
    [0xff],
    [0xfe, 0xff],
    [0x80],
    [0xbf],
    [0xc0, 0xaf],
    [0xc1, 0xbf],
    [0xe0, 0x80, 0xaf],
    [0xed, 0xa0, 0x80],
    [0xed, 0xbf, 0xbf],
    [0xf4, 0x90, 0x80, 0x80],
    [0xf8, 0x88, 0x80, 0x80, 0x80],
    [0xc3],
    [0xe2, 0x82],
    [0xf0, 0x9f, 0x98],
  ),
  fc.uint8Array({ minLength: 1, maxLength: 16 }).map((bytes) => [...bytes]),
);
/** A JSON string literal holding raw bytes that are not UTF-8 (and may not even be valid JSON: raw control bytes). */
const rawByteString = fc
  .tuple(fc.string({ maxLength: 6 }), invalidUtf8, fc.string({ maxLength: 6 }))
  .map(([before, bytes, after]) =>
    raw(
      Buffer.concat([
        Buffer.from(JSON.stringify(before).slice(0, -1)),
        Buffer.from(bytes),
        Buffer.from(JSON.stringify(after).slice(1)),
      ]),
      `string with raw bytes ${Buffer.from(bytes).toString('hex')}`,
    ),
  );

/** Object keys that mean something to JavaScript itself. */
const prototypeKeys = fc.constantFrom(
  '__proto__',
  'constructor',
  'prototype',
  '__defineGetter__',
  'hasOwnProperty',
  'toString',
  'valueOf',
  'toJSON',
  'then',
);
const prototypeValues = fc.constantFrom<FuzzValue>(
  {},
  { polluted: true },
  { model: 'mock-embedding', messages: 1, isAdmin: true },
  { prototype: { polluted: true } },
  { __proto__x: 1 },
  null,
  1,
  'x',
  [],
  [1],
  true,
);

/** JSON text nested `depth` levels deep, in a few shapes (plain arrays, objects, both, and JSON-schema-like). */
export function nestedJson(depth: number, shape: 'array' | 'object' | 'mixed' | 'schema', leaf = '1'): RawJson {
  let text: string;
  if (shape === 'array') text = '['.repeat(depth) + leaf + ']'.repeat(depth);
  else if (shape === 'object') text = '{"a":'.repeat(depth) + leaf + '}'.repeat(depth);
  else if (shape === 'mixed') {
    const half = Math.ceil(depth / 2);
    text = '[{"a":'.repeat(half) + leaf + '}]'.repeat(half);
  } else {
    const levels = Math.ceil(depth / 2);
    text = '{"type":"object","properties":{"p":'.repeat(levels) + '{"type":"string"}' + '}}'.repeat(levels);
  }
  return raw(text, `nested ${depth} (${shape})`);
}
const nesting = fc
  .record({
    // Mostly deep: recursion in serializers and validators gives out somewhere past a few thousand levels.
    depth: fc.oneof(
      { weight: 1, arbitrary: fc.integer({ min: 1, max: 120 }) },
      { weight: 1, arbitrary: fc.integer({ min: 120, max: 1_500 }) },
      { weight: 4, arbitrary: fc.integer({ min: 1_500, max: 6_000 }) },
    ),
    shape: fc.constantFrom('array' as const, 'object' as const, 'mixed' as const, 'schema' as const),
    leaf: fc.constantFrom('1', '"x"', 'null', '{}', '[]', '{"type":"string"}'),
  })
  .map(({ depth, shape, leaf }) => nestedJson(depth, shape, leaf));

/**
 * String lengths: mostly small or medium, often past 100 k (where a long run
 * of one character used to freeze the tokenizer), sometimes megabytes, and
 * sometimes just past the body limit.
 */
const hugeLength = fc.oneof(
  { weight: 2, arbitrary: fc.integer({ min: 0, max: 2_000 }) },
  { weight: 3, arbitrary: fc.integer({ min: 2_000, max: 60_000 }) },
  { weight: 4, arbitrary: fc.integer({ min: 100_000, max: 300_000 }) },
  { weight: 2, arbitrary: fc.integer({ min: 1_000_000, max: 3_000_000 }) },
  { weight: 1, arbitrary: fc.integer({ min: limits.bodyBytes + 1, max: limits.bodyBytes + 200_000 }) },
);
/**
 * The repeated unit: single characters (the worst case for a BPE tokenizer), words, multi-byte characters, random short
 * strings.
 */
const hugeUnit = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.constantFrom(
      'a',
      'x',
      'Z',
      '0',
      '=',
      '.',
      ' ',
      '\n',
      'word ',
      'ab',
      'é',
      '中',
      '🙂',
      '\u0000',
      '\ud800',
      '\u200f',
      'a\u0301',
    ),
  },
  { weight: 1, arbitrary: fc.string({ minLength: 1, maxLength: 8 }) },
);
export const repeatTo = (unit: string, length: number) =>
  unit.repeat(Math.max(1, Math.ceil(length / unit.length))).slice(0, Math.max(length, 0));
const hugeString = fc.record({ unit: hugeUnit, length: hugeLength }).map(({ unit, length }) => repeatTo(unit, length));

/** Small values of every kind: what a field is given in the "wrong type" mutations. */
const scalarMutant: fc.Arbitrary<FuzzValue> = fc.oneof(
  { weight: 4, arbitrary: wrongTypes },
  { weight: 4, arbitrary: extremeNumber },
  { weight: 2, arbitrary: unicodeString as fc.Arbitrary<FuzzValue> },
  { weight: 1, arbitrary: rawByteString as fc.Arbitrary<FuzzValue> },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }) as fc.Arbitrary<FuzzValue> },
);

// ---------------------------------------------------------------------------
// JSON endpoints: a few valid bodies each, and the places a mutation can reach

interface ArraySlot {
  path: Path;
  /** One plausible element; `size` is the length of its text where it has one. */
  element: (index: number, size: number, unit: string) => FuzzValue;
}

export interface JsonEndpoint {
  name: string;
  path: string;
  admin?: boolean;
  bases: FuzzObject[];
  /** Where a value can be set: the fields the schema knows, whether the base has them or not. */
  slots: Path[];
  /** Fields holding text (where huge and odd strings go). */
  stringSlots: Path[];
  arraySlots: ArraySlot[];
  /** Where nesting goes: free-form objects first. */
  nestSlots: Path[];
  /** Objects that take extra keys (prototype keys, unknown fields, many keys). */
  objectSlots: Path[];
  required: Path[];
}

const message = (index: number, size: number, unit: string): FuzzValue => ({
  role: index % 2 ? 'assistant' : 'user',
  content: size > 0 ? repeatTo(unit, size) : `m${index}`,
});
const textPart = (index: number, size: number, unit: string): FuzzValue => ({
  type: 'text',
  text: size > 0 ? repeatTo(unit, size) : `p${index}`,
});
const textItem = (index: number, size: number, unit: string): FuzzValue =>
  size > 0 ? repeatTo(unit, size) : `item ${index}`;
const token = (index: number): FuzzValue => (index * 7919) % 200_000;
const tool = (index: number): FuzzValue => ({
  type: 'function',
  function: { name: `tool_${index}`, parameters: { type: 'object', properties: {} } },
});

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

export const jsonEndpoints: JsonEndpoint[] = [
  {
    name: 'chat',
    path: '/v1/chat/completions',
    bases: [
      { model: 'mock-chat', messages: [{ role: 'user', content: 'hi' }] },
      {
        model: 'gpt-4o-mini',
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Say hi' },
        ],
        max_tokens: 16,
        temperature: 0.2,
      },
      {
        model: 'mock-chat',
        messages: [{ role: 'user', content: 'weather in Paris?' }],
        tools: [weatherTool],
        tool_choice: 'auto',
      },
      {
        model: 'mock-chat',
        messages: [{ role: 'user', content: 'answer in JSON' }],
        response_format: {
          type: 'json_schema',
          json_schema: {
            name: 'answer',
            schema: { type: 'object', properties: { a: { type: 'string' } } },
            strict: true,
          },
        },
      },
      {
        model: 'gpt-4o-mini',
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'look' },
              { type: 'image_url', image_url: { url: 'https://example.com/a.png', detail: 'low' } },
            ],
          },
        ],
        metadata: { team: 'fuzz' },
        user: 'u-1',
        seed: 7,
        stop: ['\n\n'],
      },
      {
        model: 'mock-chat',
        messages: [
          { role: 'user', content: 'weather?' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
            ],
          },
          { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
        ],
      },
    ],
    slots: [
      ['model'],
      ['messages'],
      ['messages', 0],
      ['messages', 0, 'role'],
      ['messages', 0, 'content'],
      ['messages', 0, 'content', 0],
      ['messages', 0, 'content', 0, 'text'],
      ['messages', 0, 'content', 1, 'image_url', 'url'],
      ['messages', 0, 'name'],
      ['messages', 1],
      ['messages', 1, 'tool_calls'],
      ['temperature'],
      ['top_p'],
      ['n'],
      ['max_tokens'],
      ['max_completion_tokens'],
      ['stop'],
      ['seed'],
      ['presence_penalty'],
      ['frequency_penalty'],
      ['logprobs'],
      ['top_logprobs'],
      ['logit_bias'],
      ['logit_bias', '50256'],
      ['user'],
      ['stream'],
      ['stream_options'],
      ['response_format'],
      ['response_format', 'type'],
      ['response_format', 'json_schema'],
      ['response_format', 'json_schema', 'name'],
      ['response_format', 'json_schema', 'schema'],
      ['tools'],
      ['tools', 0],
      ['tools', 0, 'type'],
      ['tools', 0, 'function'],
      ['tools', 0, 'function', 'name'],
      ['tools', 0, 'function', 'parameters'],
      ['tool_choice'],
      ['parallel_tool_calls'],
      ['functions'],
      ['function_call'],
      ['metadata'],
      ['metadata', 'k'],
      ['service_tier'],
      ['reasoning_effort'],
    ],
    stringSlots: [
      ['messages', 0, 'content'],
      ['messages', 0, 'content'],
      ['messages', 0, 'content', 0, 'text'],
      ['messages', 0, 'name'],
      ['messages', 1, 'content'],
      ['messages', 2, 'tool_call_id'],
      ['messages', 1, 'tool_calls', 0, 'function', 'arguments'],
      ['messages', 0, 'content', 1, 'image_url', 'url'],
      ['model'],
      ['user'],
      ['stop'],
      ['stop', 0],
      ['tools', 0, 'function', 'name'],
      ['tools', 0, 'function', 'description'],
      ['response_format', 'json_schema', 'name'],
      ['metadata', 'k'],
    ],
    arraySlots: [
      { path: ['messages'], element: message },
      { path: ['messages', 0, 'content'], element: textPart },
      { path: ['stop'], element: textItem },
      { path: ['tools'], element: tool },
      { path: ['functions'], element: (i) => ({ name: `f_${i}` }) },
    ],
    nestSlots: [
      ['messages', 0, 'content'],
      ['tools', 0, 'function', 'parameters'],
      ['response_format', 'json_schema', 'schema'],
      ['metadata'],
      ['metadata', 'k'],
      ['tools', 0, 'function', 'parameters', 'properties', 'city'],
      ['messages', 0],
      ['messages'],
      ['logit_bias'],
      ['tool_choice'],
      ['stream_options'],
    ],
    objectSlots: [
      [],
      ['messages', 0],
      ['metadata'],
      ['tools', 0, 'function', 'parameters'],
      ['response_format'],
      ['response_format', 'json_schema', 'schema'],
      ['logit_bias'],
      ['stream_options'],
      ['tools', 0],
      ['tools', 0, 'function'],
    ],
    required: [['model'], ['messages'], ['messages', 0, 'role'], ['messages', 0, 'content']],
  },
  {
    name: 'completions',
    path: '/v1/completions',
    bases: [
      { model: 'mock-instruct', prompt: 'Say hi', max_tokens: 8 },
      { model: 'gpt-3.5-turbo-instruct', prompt: ['one', 'two'], max_tokens: 4, echo: true, logprobs: 1 },
      { model: 'mock-instruct', prompt: [1, 2, 3], suffix: '!', n: 2, best_of: 2, stop: 'x' },
      {
        model: 'mock-instruct',
        prompt: [
          [1, 2],
          [3, 4],
        ],
        temperature: 0,
        seed: 1,
        user: 'u',
      },
    ],
    slots: [
      ['model'],
      ['prompt'],
      ['prompt', 0],
      ['prompt', 0, 0],
      ['suffix'],
      ['max_tokens'],
      ['temperature'],
      ['top_p'],
      ['n'],
      ['stream'],
      ['stream_options'],
      ['logprobs'],
      ['echo'],
      ['stop'],
      ['presence_penalty'],
      ['frequency_penalty'],
      ['best_of'],
      ['logit_bias'],
      ['seed'],
      ['user'],
    ],
    stringSlots: [['prompt'], ['prompt'], ['prompt', 0], ['suffix'], ['stop'], ['user'], ['model']],
    arraySlots: [
      { path: ['prompt'], element: textItem },
      { path: ['prompt'], element: token },
      { path: ['prompt', 0], element: token },
      { path: ['stop'], element: textItem },
    ],
    nestSlots: [['prompt'], ['prompt', 0], ['logit_bias'], ['stop'], ['stream_options']],
    objectSlots: [[], ['logit_bias'], ['stream_options']],
    required: [['model'], ['prompt']],
  },
  {
    name: 'embeddings',
    path: '/v1/embeddings',
    bases: [
      { model: 'mock-embedding', input: 'hello' },
      { model: 'text-embedding-3-small', input: ['a', 'b'], encoding_format: 'base64' },
      { model: 'mock-embedding', input: [1, 2, 3], dimensions: 32 },
      { model: 'mock-embedding', input: [[1, 2], [3]], user: 'u' },
    ],
    slots: [['model'], ['input'], ['input', 0], ['input', 0, 0], ['encoding_format'], ['dimensions'], ['user']],
    stringSlots: [['input'], ['input'], ['input', 0], ['model'], ['user']],
    arraySlots: [
      { path: ['input'], element: textItem },
      { path: ['input'], element: token },
      { path: ['input', 0], element: token },
    ],
    nestSlots: [['input'], ['input', 0], ['user']],
    objectSlots: [[]],
    required: [['model'], ['input']],
  },
  {
    name: 'images',
    path: '/v1/images/generations',
    bases: [
      { model: 'mock-image', prompt: 'a red fox', size: '256x256', response_format: 'b64_json' },
      { model: 'dall-e-2', prompt: 'a red fox', n: 1, size: '256x256', response_format: 'url' },
      { prompt: 'the default model', size: '256x256' },
      {
        model: 'mock-image',
        prompt: 'a fox',
        size: '256x256',
        quality: 'high',
        output_format: 'png',
        background: 'auto',
        moderation: 'low',
        output_compression: 50,
      },
    ],
    slots: [
      ['model'],
      ['prompt'],
      ['n'],
      ['size'],
      ['quality'],
      ['response_format'],
      ['style'],
      ['background'],
      ['output_format'],
      ['output_compression'],
      ['moderation'],
      ['user'],
    ],
    stringSlots: [['prompt'], ['prompt'], ['size'], ['model'], ['user'], ['quality']],
    arraySlots: [{ path: ['prompt'], element: textItem }],
    nestSlots: [['prompt'], ['size'], ['user'], ['n']],
    objectSlots: [[]],
    required: [['prompt']],
  },
  {
    name: 'videos',
    path: '/v1/videos',
    bases: [
      { model: 'mock-video', prompt: 'a cat', seconds: '4', size: '720x1280' },
      { model: 'sora-2', prompt: 'a dog', seconds: 8 },
      { prompt: 'the default model' },
    ],
    slots: [['model'], ['prompt'], ['seconds'], ['size'], ['input_reference']],
    stringSlots: [['prompt'], ['prompt'], ['size'], ['model'], ['seconds']],
    arraySlots: [{ path: ['prompt'], element: textItem }],
    nestSlots: [['prompt'], ['input_reference'], ['seconds']],
    objectSlots: [[]],
    required: [['prompt']],
  },
  {
    name: 'admin-keys',
    path: '/admin/keys',
    admin: true,
    bases: [{ name: 'fuzz key' }],
    slots: [['name']],
    stringSlots: [['name']],
    arraySlots: [{ path: ['name'], element: textItem }],
    nestSlots: [['name']],
    objectSlots: [[]],
    required: [['name']],
  },
];

type Mutation = { note: string; apply: (body: FuzzValue) => FuzzValue };

const pathText = (path: Path) =>
  path.length === 0
    ? '(top level)'
    : path
        .map((p) => (typeof p === 'number' ? `[${p}]` : `.${p}`))
        .join('')
        .replace(/^\./, '');
const valueNote = (value: FuzzValue) =>
  value instanceof RawJson
    ? value.note
    : typeof value === 'string'
      ? `string(${value.length}) ${JSON.stringify(clip(value, 24))}`
      : clip(JSON.stringify(value) ?? 'undefined', 40);

const setMutation = (path: Path, value: FuzzValue, what?: string): Mutation => ({
  note: `${pathText(path)} = ${what ?? valueNote(value)}`,
  apply: (body) => setAt(body, path, value),
});
const deleteMutation = (path: Path): Mutation => ({
  note: `delete ${pathText(path)}`,
  apply: (body) => setAt(body, path, undefined),
});
const keyMutation = (path: Path, key: string, value: FuzzValue): Mutation => ({
  note: `${pathText([...path, key])} = ${valueNote(value)}`,
  apply: (body) => setAt(body, [...path, key], value),
});

/** Wrong types, extreme numbers, deleted fields, prototype keys and unknown fields. */
function fieldMutation(endpoint: JsonEndpoint): fc.Arbitrary<Mutation> {
  return fc.oneof(
    {
      weight: 6,
      arbitrary: fc
        .tuple(fc.constantFrom(...endpoint.slots), scalarMutant)
        .map(([path, value]) => setMutation(path, value)),
    },
    { weight: 1, arbitrary: fc.constantFrom(...endpoint.required, ...endpoint.slots).map(deleteMutation) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(fc.constantFrom(...endpoint.objectSlots), prototypeKeys, prototypeValues)
        .map(([path, key, value]) => keyMutation(path, key, value)),
    },
    {
      weight: 1,
      arbitrary: fc
        .tuple(
          fc.constantFrom(...endpoint.objectSlots),
          fc.string({ maxLength: 20 }),
          fc.jsonValue({ maxDepth: 2 }) as fc.Arbitrary<FuzzValue>,
        )
        .map(([path, key, value]) => keyMutation(path, key, value)),
    },
  );
}

/**
 * Nesting in the fields that take it (free-form objects), in unknown fields (passed through as they are), and anywhere
 * else.
 */
function nestingMutation(endpoint: JsonEndpoint): fc.Arbitrary<Mutation> {
  const extraKey = fc.oneof(fc.constantFrom('metadata', 'extra', 'x', 'input_reference', 'extra_body'), prototypeKeys);
  return fc.oneof(
    {
      weight: 4,
      arbitrary: fc
        .tuple(fc.constantFrom(...endpoint.nestSlots), nesting)
        .map(([path, value]) => setMutation(path, value)),
    },
    {
      weight: 3,
      arbitrary: fc
        .tuple(fc.constantFrom(...endpoint.objectSlots), extraKey, nesting)
        .map(([path, key, value]) => keyMutation(path, key, value)),
    },
    {
      weight: 1,
      arbitrary: fc.tuple(fc.constantFrom(...endpoint.slots), nesting).map(([path, value]) => setMutation(path, value)),
    },
  );
}

/** Huge strings in text fields, and huge arrays (many messages, many inputs of many bytes) and objects (many keys). */
function hugeMutation(endpoint: JsonEndpoint): fc.Arbitrary<Mutation> {
  const arrays = fc
    .record({
      slot: fc.constantFrom(...endpoint.arraySlots),
      count: fc.oneof(
        fc.integer({ min: 2, max: 200 }),
        fc.integer({ min: 200, max: 5_000 }),
        fc.integer({ min: 5_000, max: 60_000 }),
      ),
      size: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 200 }), fc.integer({ min: 1_000, max: 12_000 })),
      unit: fc.constantFrom('a', 'x', 'word ', '中', '0'),
    })
    // Past the body limit by far is the 413 case already: keep arrays under about twice the limit.
    .filter(({ count, size }) => count * (size + 30) < 2 * limits.bodyBytes)
    .map(({ slot, count, size, unit }) =>
      setMutation(
        slot.path,
        Array.from({ length: count }, (_, i) => slot.element(i, size, unit)),
        `${count} elements${size ? ` of ${size} × ${JSON.stringify(unit)}` : ''}`,
      ),
    );
  const objects = fc
    // Up to about 3.5 MB of keys: under the 4 MiB body limit.
    .tuple(
      fc.constantFrom(...endpoint.objectSlots),
      fc.oneof(fc.integer({ min: 100, max: 50_000 }), fc.integer({ min: 50_000, max: 250_000 })),
    )
    .map(([path, count]) => {
      const many: FuzzObject = {};
      for (let i = 0; i < count; i++) many[`k${i}`] = i;
      return {
        note: `${pathText(path)} gets ${count} extra keys`,
        apply: (body: FuzzValue) => mergeKeys(body, path, many),
      };
    });
  return fc.oneof(
    {
      weight: 5,
      arbitrary: fc
        .tuple(fc.constantFrom(...endpoint.stringSlots), hugeString)
        .map(([path, value]) => setMutation(path, value)),
    },
    { weight: 3, arbitrary: arrays },
    { weight: 1, arbitrary: objects },
  );
}

/** The object at `path` with `extra` keys added. */
function mergeKeys(body: FuzzValue, path: Path, extra: FuzzObject): FuzzValue {
  let target: FuzzValue | undefined = body;
  for (const key of path) target = getOwn(target, key);
  const merged = isObject(target) ? cloneObject(target) : {};
  for (const [key, value] of Object.entries(extra)) defineOwn(merged, key, value);
  return setAt(body, path, merged);
}

/** Odd text in string fields and keys: unicode edge cases and bytes that are not UTF-8. */
function encodingMutation(endpoint: JsonEndpoint): fc.Arbitrary<Mutation> {
  return fc.oneof(
    {
      weight: 3,
      arbitrary: fc
        .tuple(fc.constantFrom(...endpoint.stringSlots), unicodeString)
        .map(([path, value]) => setMutation(path, value)),
    },
    {
      weight: 3,
      arbitrary: fc
        .tuple(fc.constantFrom(...endpoint.stringSlots), rawByteString)
        .map(([path, value]) => setMutation(path, value)),
    },
    {
      weight: 1,
      arbitrary: fc
        .tuple(fc.constantFrom(...endpoint.objectSlots), unicodeString, fc.string({ maxLength: 4 }))
        .map(([path, key, value]) => keyMutation(path, key, value)),
    },
  );
}

/** Changes to the whole body text: not an object, not JSON, not UTF-8. */
type BodyTransform = { note: string; apply: (bytes: Buffer) => Buffer };
const bodyTransform: fc.Arbitrary<BodyTransform> = fc.oneof(
  {
    weight: 2,
    arbitrary: fc
      .constantFrom('[]', '[{}]', '"text"', '123', '-0', '1e999', 'null', 'true', 'false', '""', '[null]', '{}')
      .map((text) => ({ note: `body is ${text}`, apply: () => Buffer.from(text) })),
  },
  {
    weight: 1,
    arbitrary: fc.constant({
      note: 'body wrapped in an array',
      apply: (bytes: Buffer) => Buffer.concat([Buffer.from('['), bytes, Buffer.from(']')]),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.double({ min: 0, max: 1, noNaN: true }).map((at) => ({
      note: `cut at ${Math.round(at * 100)}%`,
      apply: (bytes: Buffer) => bytes.subarray(0, Math.floor(bytes.length * at)),
    })),
  },
  {
    weight: 2,
    arbitrary: fc.tuple(fc.double({ min: 0, max: 1, noNaN: true }), invalidUtf8).map(([at, inserted]) => ({
      note: `bytes ${Buffer.from(inserted).toString('hex')} inserted at ${Math.round(at * 100)}%`,
      apply: (bytes: Buffer) => {
        const i = Math.floor(bytes.length * at);
        return Buffer.concat([bytes.subarray(0, i), Buffer.from(inserted), bytes.subarray(i)]);
      },
    })),
  },
  {
    weight: 2,
    arbitrary: fc
      .constantFrom(
        '',
        ' ',
        '\n\t ',
        '{',
        '}',
        '{"model":',
        "{'model':'mock-chat'}",
        '{"a":1,}',
        '{"a":NaN}',
        '{"a":Infinity}',
        '{"a":undefined}',
        '{} {}',
        '{"a":1}garbage',
        '// c\n{}',
        '/* c */{}',
        '{"a":"\\x41"}',
        '{"a":"\\u12"}',
        '{"a":01}',
        '{"a":.5}',
        '{"a":+1}',
        '{"a":0x10}',
        '{"a":"\t"}',
        '{"a" 1}',
        '{a:1}',
        '\u0000{}',
      )
      .map((text) => ({ note: `body is ${JSON.stringify(text)}`, apply: () => Buffer.from(text) })),
  },
  {
    weight: 1,
    arbitrary: fc.constant({
      note: 'UTF-8 BOM first',
      apply: (bytes: Buffer) => Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), bytes]),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.constant({
      note: 'sent as UTF-16LE',
      apply: (bytes: Buffer) => Buffer.from(bytes.toString('utf8'), 'utf16le'),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.constant({
      note: 'duplicate keys',
      apply: (bytes: Buffer) =>
        bytes[0] === 0x7b
          ? Buffer.concat([Buffer.from('{"model":"mock-embedding","prompt":1,'), bytes.subarray(1)])
          : bytes,
    }),
  },
);

const contentTypes = fc.oneof(
  { weight: 12, arbitrary: fc.constant<string | undefined>('application/json') },
  {
    weight: 2,
    arbitrary: fc.constantFrom<string | undefined>(
      undefined,
      'text/plain',
      'application/x-www-form-urlencoded',
      'multipart/form-data',
      'multipart/form-data; boundary=zzz',
      'application/json; charset=utf-16',
      'APPLICATION/JSON',
      'application/vnd.api+json',
      'application/jsonx',
      'application/json;;;',
      '',
      'json',
      '*/*',
      'application/xml',
      'text/json',
      'application/json; charset=latin1',
      'application/json\u00e9',
    ),
  },
);

/** Mostly the real key; sometimes none, a wrong one, or a malformed header. */
const authHeader = fc.oneof(
  { weight: 12, arbitrary: fc.constant<string | undefined>('Bearer $KEY') },
  {
    weight: 1,
    arbitrary: fc.constantFrom<string | undefined>(
      undefined,
      'Bearer nope',
      'Basic eA==',
      'Bearer ',
      'Bearer $KEY extra',
      'bearer $KEY',
      'Bearer  $KEY  ',
      '$KEY',
      'Bearer $KEY\u00e9',
    ),
  },
);

interface JsonCaseParts {
  endpoint: JsonEndpoint;
  base: FuzzObject;
  mutations: Mutation[];
  transform?: BodyTransform;
  contentType: string | undefined;
  auth: string | undefined;
  prefer?: string;
  chunked: boolean;
  connection?: string;
}

export function buildJsonCase(parts: JsonCaseParts, expect: Expect = {}): FuzzCase {
  let body: FuzzValue = parts.base;
  for (const mutation of parts.mutations) body = mutation.apply(body);
  let bytes = encodeJson(body);
  if (parts.transform) bytes = parts.transform.apply(bytes);
  const headers: Array<[string, string]> = [];
  if (parts.contentType !== undefined) headers.push(['content-type', parts.contentType]);
  const auth = parts.endpoint.admin ? 'Bearer $ADMIN' : parts.auth;
  if (auth !== undefined) headers.push(['authorization', auth]);
  if (parts.prefer) headers.push(['prefer', parts.prefer]);
  if (parts.connection) headers.push(['connection', parts.connection]);
  const notes = [...parts.mutations.map((m) => m.note), ...(parts.transform ? [parts.transform.note] : [])];
  return finish({
    label: `${parts.endpoint.name}: ${notes.join(', ') || 'valid body'}`,
    method: 'POST',
    path: parts.endpoint.path,
    headers,
    body: bytes,
    transport: 'http',
    chunked: parts.chunked,
    expect: parts.connection === 'close' ? { ...expect, connectionClose: true } : expect,
  });
}

type MutationKind = 'fields' | 'nesting' | 'huge' | 'encoding';

/** A JSON case of one endpoint with mutations of the given kind (plus, now and then, a field mutation). */
export function jsonCase(kind: MutationKind): fc.Arbitrary<FuzzCase> {
  return fc.constantFrom(...jsonEndpoints).chain((endpoint) => {
    const primary =
      kind === 'fields'
        ? fieldMutation(endpoint)
        : kind === 'nesting'
          ? nestingMutation(endpoint)
          : kind === 'huge'
            ? hugeMutation(endpoint)
            : encodingMutation(endpoint);
    const mutations =
      kind === 'fields'
        ? fc.array(primary, { minLength: 1, maxLength: 3 })
        : fc
            .tuple(primary, sometimes(fieldMutation(endpoint), 5))
            .map(([first, extra]) => (extra ? [first, extra] : [first]));
    return fc
      .record({
        base: fc.constantFrom(...endpoint.bases),
        mutations,
        transform: kind === 'encoding' ? sometimes(bodyTransform, 2) : fc.constant(null),
        contentType: kind === 'encoding' ? contentTypes : fc.constant('application/json'),
        auth: kind === 'fields' ? authHeader : fc.constant('Bearer $KEY'),
        prefer: sometimes(fc.constantFrom('respond-async', 'respond-async, wait=1', 'wait=5'), 12),
        chunked: fc.boolean().map((b) => b && kind !== 'huge'),
      })
      .map((r) =>
        buildJsonCase({
          endpoint,
          base: r.base,
          mutations: r.mutations,
          ...(r.transform ? { transform: r.transform } : {}),
          contentType: r.contentType,
          auth: r.auth,
          ...(r.prefer ? { prefer: r.prefer } : {}),
          chunked: r.chunked && kind === 'encoding',
        }),
      );
  });
}

/** Streamed chat and completions, lightly mutated, with `Connection: close` or keep-alive asked for. */
export function streamCase(): fc.Arbitrary<FuzzCase> {
  const endpoints = jsonEndpoints.filter((e) => e.name === 'chat' || e.name === 'completions');
  return fc.constantFrom(...endpoints).chain((endpoint) =>
    fc
      .record({
        base: fc.constantFrom(...endpoint.bases),
        streamOptions: fc.constantFrom<FuzzValue>(
          null,
          { include_usage: true },
          { include_usage: false, include_obfuscation: true },
        ),
        // Light mutations only: wrong types and edge numbers, never a valid `n: 128` that would stream for seconds by
        // design.
        mutation: sometimes(
          fc.oneof(
            fc
              .tuple(
                fc.constantFrom(...endpoint.slots),
                fc.oneof(
                  wrongTypes,
                  extremeNumber.filter((v) => v instanceof RawJson),
                ),
              )
              .map(([path, value]) => setMutation(path, value)),
            fc
              .tuple(fc.constantFrom(...endpoint.objectSlots), prototypeKeys, prototypeValues)
              .map(([path, key, value]) => keyMutation(path, key, value)),
          ),
          2,
        ),
        connection: fc.constantFrom<string | undefined>(
          'close',
          'close',
          'keep-alive',
          undefined,
          'Close',
          'upgrade, close',
        ),
        prefer: sometimes(fc.constant('respond-async'), 8),
      })
      .map((r) => {
        const mutations: Mutation[] = [setMutation(['stream'], true)];
        if (r.streamOptions !== null) mutations.push(setMutation(['stream_options'], r.streamOptions));
        if (r.mutation) mutations.push(r.mutation);
        const connection = r.connection;
        const closing = connection !== undefined && /(^|,)\s*close\s*$/i.test(connection);
        const c = buildJsonCase({
          endpoint,
          base: r.base,
          mutations,
          contentType: 'application/json',
          auth: 'Bearer $KEY',
          ...(r.prefer ? { prefer: r.prefer } : {}),
          chunked: false,
          ...(connection ? { connection } : {}),
        });
        if (closing) c.expect.connectionClose = true;
        return c;
      }),
  );
}

// ---------------------------------------------------------------------------
// Multipart

export interface Part {
  name: string;
  filename?: string;
  contentType?: string;
  data: Buffer;
  /** Replaces the part's header lines altogether. */
  headerLines?: string[];
}

/**
 * How busboy tells a file from a field: a non-empty filename, or the octet-stream type (filename="" alone is a field).
 */
const isFilePart = (p: Part) => !!p.filename || p.contentType === 'application/octet-stream';

/** A 1×1 PNG: a valid image for every edit model (square, tiny). */
export const tinyPng = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==',
  'base64',
);
/** Not real audio: the mock transcribes from the size and name, and a vendor would answer a 400. */
const fakeAudio = Buffer.from(`ID3${'\u0004'.repeat(7)}${'audio-bytes-'.repeat(300)}`, 'latin1');

interface MultipartEndpoint {
  name: string;
  path: string;
  variants: Array<{ fields: Array<[string, string]>; files: Part[] }>;
  numberFields: string[];
  /** Text fields the route reads (a "missing" error about one of these, sent whole, means it was dropped). */
  textFields: string[];
  fileFields: string[];
}

export const multipartEndpoints: MultipartEndpoint[] = [
  {
    name: 'image-edits',
    path: '/v1/images/edits',
    variants: [
      {
        fields: [
          ['model', 'mock-image'],
          ['prompt', 'add a hat'],
          ['size', '256x256'],
          ['response_format', 'b64_json'],
        ],
        files: [{ name: 'image', filename: 'photo.png', contentType: 'image/png', data: tinyPng }],
      },
      {
        fields: [
          ['model', 'dall-e-2'],
          ['prompt', 'add a hat'],
          ['n', '1'],
          ['size', '256x256'],
        ],
        files: [
          { name: 'image', filename: 'photo.png', contentType: 'image/png', data: tinyPng },
          { name: 'mask', filename: 'mask.png', contentType: 'image/png', data: tinyPng },
        ],
      },
      {
        fields: [
          ['model', 'mock-image'],
          ['prompt', 'merge'],
          ['size', '256x256'],
          ['n', '2'],
        ],
        files: [
          { name: 'image[]', filename: 'a.png', contentType: 'image/png', data: tinyPng },
          { name: 'image[]', filename: 'b.png', contentType: 'image/png', data: tinyPng },
        ],
      },
    ],
    numberFields: ['n'],
    textFields: ['model', 'prompt'],
    fileFields: ['image'],
  },
  {
    name: 'transcriptions',
    path: '/v1/audio/transcriptions',
    variants: [
      {
        fields: [
          ['model', 'whisper-1'],
          ['response_format', 'json'],
        ],
        files: [{ name: 'file', filename: 'clip.mp3', contentType: 'audio/mpeg', data: fakeAudio }],
      },
      {
        fields: [
          ['model', 'mock-transcribe'],
          ['response_format', 'verbose_json'],
          ['timestamp_granularities[]', 'word'],
          ['language', 'en'],
          ['temperature', '0.2'],
          ['prompt', 'hello'],
        ],
        files: [{ name: 'file', filename: 'clip.wav', contentType: 'audio/wav', data: fakeAudio }],
      },
      {
        fields: [
          ['model', 'whisper-1'],
          ['response_format', 'text'],
        ],
        files: [{ name: 'file', filename: 'clip.m4a', data: fakeAudio }],
      },
    ],
    numberFields: ['temperature'],
    textFields: ['model'],
    fileFields: ['file'],
  },
  {
    name: 'videos',
    path: '/v1/videos',
    variants: [
      {
        fields: [
          ['model', 'mock-video'],
          ['prompt', 'a cat'],
          ['seconds', '4'],
          ['size', '720x1280'],
        ],
        files: [],
      },
      {
        fields: [
          ['model', 'sora-2'],
          ['prompt', 'a dog'],
        ],
        files: [{ name: 'input_reference', filename: 'ref.png', contentType: 'image/png', data: tinyPng }],
      },
    ],
    numberFields: ['seconds'],
    textFields: ['prompt'],
    fileFields: [],
  },
];

interface MultipartOptions {
  lineEnd?: string;
  preamble?: string;
  /** Leave out the closing `--boundary--`. */
  unterminated?: boolean;
}

/** The body, and where each file's bytes lie in it (to cut inside one). */
export function encodeMultipart(
  parts: Part[],
  boundary: string,
  options: MultipartOptions = {},
): { body: Buffer; fileRanges: Array<[number, number]> } {
  const eol = options.lineEnd ?? '\r\n';
  const chunks: Buffer[] = [];
  const fileRanges: Array<[number, number]> = [];
  let size = 0;
  const push = (buffer: Buffer) => {
    chunks.push(buffer);
    size += buffer.length;
  };
  if (options.preamble) push(Buffer.from(options.preamble));
  for (const part of parts) {
    const lines = part.headerLines ?? [
      `Content-Disposition: form-data; name="${part.name}"${part.filename !== undefined ? `; filename="${part.filename}"` : ''}`,
      ...(part.contentType ? [`Content-Type: ${part.contentType}`] : []),
    ];
    push(Buffer.from(`--${boundary}${eol}${lines.join(eol)}${eol}${eol}`, 'utf8'));
    if (part.filename !== undefined) fileRanges.push([size, size + part.data.length]);
    push(part.data);
    push(Buffer.from(eol));
  }
  if (!options.unterminated) push(Buffer.from(`--${boundary}--${eol}`));
  return { body: Buffer.concat(chunks, size), fileRanges };
}

type PartsMutation = { note: string; apply: (state: MultipartState) => void };

interface MultipartState {
  parts: Part[];
  contentType: string | undefined;
  boundary: string;
  options: MultipartOptions;
  expect: Expect;
  /** The body text after encoding (for mutations of the raw bytes). */
  post?: (body: Buffer, fileRanges: Array<[number, number]>) => Buffer;
  /** Parts whose value reaches the route intact (for the "dropped field" oracle). */
  intact: boolean;
}

const numberTexts = ['1e999', '-1e999', 'abc', 'NaN', 'Infinity', '-Infinity', ''];
const numberLooking = [
  ' ',
  '0x10',
  '1_0',
  '1.5',
  '-1',
  '0',
  '2',
  '1e308',
  '9007199254740993',
  '１',
  '4 ',
  ' 8',
  '+4',
  '4.0',
  '0b1',
];

function mutateField(state: MultipartState, name: string, value: Buffer | string): void {
  const part = state.parts.find((p) => p.name === name && p.filename === undefined);
  const data = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
  if (part) part.data = data;
  else state.parts.push({ name, data });
}

/**
 * Field values and part shapes: number fields, duplicates, files for text and
 * text for files, odd names and headers, boundaries. Without `shapes`, only the
 * values change (the extra mutation of the other multipart properties, so that
 * a part-header bug cannot hide the one those properties look for).
 */
function multipartFieldMutation(endpoint: MultipartEndpoint, shapes = true): fc.Arbitrary<PartsMutation> {
  const allFields = [...new Set(endpoint.variants.flatMap((v) => v.fields.map(([name]) => name)))];
  const shapeWeight = shapes ? 1 : 0;
  return fc.oneof(
    {
      weight: 4,
      arbitrary: fc
        .tuple(fc.constantFrom(...endpoint.numberFields), fc.constantFrom(...numberTexts, ...numberLooking))
        .map(([field, value]) => ({
          note: `${field}=${JSON.stringify(value)}`,
          apply: (state: MultipartState) => {
            mutateField(state, field, value);
            // Non-numeric text in a number field: the 400 must name the field and not call the text a number.
            if (numberTexts.includes(value)) state.expect.numberField = field;
          },
        })),
    },
    {
      weight: 2,
      arbitrary: fc.tuple(fc.constantFrom(...allFields), fc.string({ maxLength: 12 })).map(([field, value]) => ({
        note: `${field} sent twice (second ${JSON.stringify(value)})`,
        apply: (state: MultipartState) => void state.parts.push({ name: field, data: Buffer.from(value) }),
      })),
    },
    {
      weight: 2,
      arbitrary: fc.constantFrom(...allFields).map((field) => ({
        note: `${field} sent as a file`,
        apply: (state: MultipartState) => {
          for (const part of state.parts)
            if (part.name === field && part.filename === undefined)
              Object.assign(part, { filename: `${field}.txt`, contentType: 'text/plain' });
        },
      })),
    },
    {
      weight: 2,
      arbitrary: fc.constant({
        note: 'files sent as text fields',
        apply: (state: MultipartState) => {
          for (const part of state.parts) delete part.filename;
        },
      }),
    },
    {
      weight: 2,
      arbitrary: fc
        .tuple(
          fc.uint8Array({ maxLength: 4096 }),
          fc.constantFrom(undefined, 'image/png', 'application/octet-stream', 'text/plain', ''),
        )
        .map(([bytes, type]) => ({
          note: `files are ${bytes.length} random bytes (${type ?? 'no type'})`,
          apply: (state: MultipartState) => {
            for (const part of state.parts)
              if (part.filename !== undefined) Object.assign(part, { data: Buffer.from(bytes), contentType: type });
          },
        })),
    },
    {
      weight: 2,
      arbitrary: fc
        .tuple(
          fc.constantFrom(
            '__proto__',
            'constructor',
            'prototype',
            'toString',
            'hasOwnProperty',
            '__proto__[]',
            'constructor[]',
            'valueOf',
          ),
          fc.boolean(),
          fc.string({ maxLength: 8 }),
        )
        .map(([name, twice, value]) => ({
          note: `field ${name}${twice ? ' (twice)' : ''}`,
          apply: (state: MultipartState) => {
            state.parts.push({ name, data: Buffer.from(value) });
            if (twice) state.parts.push({ name, data: Buffer.from(value) });
          },
        })),
    },
    {
      weight: 2,
      arbitrary: fc
        .tuple(
          fc.constantFrom(...allFields),
          fc.oneof(
            unicodeString.map((s) => Buffer.from(s, 'utf8')),
            invalidUtf8.map((b) => Buffer.from(b)),
          ),
        )
        .map(([field, bytes]) => ({
          note: `${field} = bytes ${preview(bytes, 40)}`,
          apply: (state: MultipartState) => mutateField(state, field, bytes),
        })),
    },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom(
          '../../etc/passwd',
          '',
          'a\u0000b.png',
          '\u202egnp.exe',
          'x'.repeat(5000),
          '🙂.png',
          'C:\\x\\y.png',
          '"quoted".png',
        )
        .map((filename) => ({
          note: `file name ${JSON.stringify(clip(filename, 30))}`,
          apply: (state: MultipartState) => {
            for (const part of state.parts) if (part.filename !== undefined) part.filename = filename;
            // Written as is, a quote ends the filename parameter early and an empty one makes the part a field: no
            // longer the files sent.
            if (filename === '' || filename.includes('"')) state.intact = false;
          },
        })),
    },
    {
      weight: 2 * shapeWeight,
      arbitrary: fc
        .constantFrom(
          'no Content-Disposition',
          'Content-Disposition without a name',
          'form-data with name*=',
          'header line of 100 KB',
          '3000 header lines',
          'LF line endings',
          'garbage before the first boundary',
          'no closing boundary',
          'attachment disposition',
        )
        .map((variant) => ({
          note: variant,
          apply: (state: MultipartState) => {
            const first = state.parts[0];
            if (variant === 'no Content-Disposition' && first) first.headerLines = ['Content-Type: text/plain'];
            if (variant === 'Content-Disposition without a name' && first)
              first.headerLines = ['Content-Disposition: form-data'];
            if (variant === 'form-data with name*=' && first)
              first.headerLines = [`Content-Disposition: form-data; name*=UTF-8''%E2%82%AC${first.name}`];
            if (variant === 'header line of 100 KB' && first)
              first.headerLines = [`Content-Disposition: form-data; name="${first.name}"; x="${'h'.repeat(100_000)}"`];
            if (variant === '3000 header lines' && first) {
              first.headerLines = [
                `Content-Disposition: form-data; name="${first.name}"`,
                ...Array.from({ length: 3000 }, (_, i) => `X-H${i}: v`),
              ];
            }
            if (variant === 'attachment disposition' && first)
              first.headerLines = [`Content-Disposition: attachment; name="${first.name}"`];
            if (variant === 'LF line endings') state.options.lineEnd = '\n';
            if (variant === 'garbage before the first boundary') state.options.preamble = 'garbage\r\n--not-it\r\n';
            if (variant === 'no closing boundary') state.options.unterminated = true;
            state.intact = false;
          },
        })),
    },
    {
      weight: 2 * shapeWeight,
      arbitrary: fc
        .constantFrom(
          'multipart/form-data',
          'multipart/form-data; boundary=',
          'multipart/form-data; boundary=wrong',
          'multipart/form-data; boundary="$B"',
          'multipart/form-data; boundary=$B; boundary=other',
          `multipart/form-data; boundary=${'b'.repeat(200)}`,
          'multipart/form-data; charset=utf-8; boundary=$B',
          'multipart/mixed; boundary=$B',
          'MULTIPART/FORM-DATA; BOUNDARY=$B',
          'application/json',
          'text/plain',
          'application/x-www-form-urlencoded',
          '(none)',
        )
        .map((type) => ({
          note: `content-type ${type}`,
          apply: (state: MultipartState) => {
            state.contentType =
              type === '(none)'
                ? undefined
                : type.replaceAll('"$B"', `"${state.boundary}"`).replaceAll('$B', headerParam(state.boundary));
            if (type.startsWith('multipart/form-data; boundary=bbbb')) state.boundary = 'b'.repeat(200);
            state.intact = type.includes('$B') && !type.includes('other');
          },
        })),
    },
    {
      weight: 1,
      arbitrary: fc.tuple(fc.constantFrom(...allFields), fc.integer({ min: 1, max: 4096 })).map(([field, extra]) => ({
        note: `${field} is ${limits.fieldBytes + extra} bytes (past the 1 MB field limit)`,
        apply: (state: MultipartState) => {
          mutateField(state, field, Buffer.alloc(limits.fieldBytes + extra, 0x61));
        },
      })),
    },
    {
      weight: shapeWeight,
      arbitrary: fc.constant({
        note: 'an empty body',
        apply: (state: MultipartState) => {
          state.post = () => Buffer.alloc(0);
          state.intact = false;
        },
      }),
    },
  );
}

/** More parts than the limits: files past the size limit, more than 20 files, more than 150 fields. */
function multipartLimitMutation(endpoint: MultipartEndpoint): fc.Arbitrary<PartsMutation> {
  const fileField = endpoint.fileFields[0] ?? 'input_reference';
  const placement = fc.constantFrom('after' as const, 'before' as const, 'around' as const);
  const place = (state: MultipartState, extra: Part[], where: 'after' | 'before' | 'around') => {
    if (where === 'after') state.parts.push(...extra);
    else if (where === 'before') state.parts.unshift(...extra);
    else {
      const half = Math.floor(extra.length / 2);
      state.parts.unshift(...extra.slice(0, half));
      state.parts.push(...extra.slice(half));
    }
  };
  return fc.oneof(
    {
      weight: 2,
      arbitrary: fc
        .tuple(fc.integer({ min: 1, max: 65_536 }), fc.constantFrom(0x00, 0x61, 0xff))
        .map(([extra, fill]) => ({
          note: `${fileField} is ${limits.fileBytes + extra} bytes (limit ${limits.fileBytes})`,
          apply: (state: MultipartState) => {
            const data = Buffer.alloc(limits.fileBytes + extra, fill);
            // A PNG header first, so an image rule cannot refuse it before its size is noticed.
            tinyPng.copy(data, 0, 0, 16);
            const existing = state.parts.find((p) => p.name === fileField && p.filename !== undefined);
            if (existing) existing.data = data;
            else
              state.parts.push({ name: fileField, filename: 'big.bin', contentType: 'application/octet-stream', data });
          },
        })),
    },
    {
      weight: 3,
      arbitrary: fc
        .tuple(
          fc.integer({ min: limits.files + 1, max: limits.files + 30 }),
          placement,
          fc.constantFrom('extra', 'image[]', fileField),
        )
        .map(([count, where, name]) => ({
          note: `${count} files in all (${name}, placed ${where})`,
          apply: (state: MultipartState) => {
            const existing = state.parts.filter((p) => p.filename !== undefined).length;
            const extra = Array.from({ length: Math.max(0, count - existing) }, (_, i): Part => ({
              name: name === 'extra' ? `extra_${i}` : name,
              filename: `f${i}.png`,
              contentType: 'image/png',
              data: tinyPng,
            }));
            place(state, extra, where);
          },
        })),
    },
    {
      weight: 3,
      arbitrary: fc
        .tuple(fc.integer({ min: limits.fields + 1, max: limits.fields + 300 }), placement, fc.boolean())
        .map(([count, where, sameName]) => ({
          note: `${count} text fields in all (${sameName ? 'one name' : 'distinct names'}, placed ${where})`,
          apply: (state: MultipartState) => {
            const existing = state.parts.filter((p) => p.filename === undefined).length;
            const extra = Array.from({ length: Math.max(0, count - existing) }, (_, i): Part => ({
              name: sameName ? 'tag[]' : `field_${i}`,
              data: Buffer.from(`v${i}`),
            }));
            place(state, extra, where);
          },
        })),
    },
  );
}

/** Bodies cut at a random byte (often inside a file), and random bytes. */
function multipartCutMutation(): fc.Arbitrary<PartsMutation> {
  return fc.oneof(
    {
      weight: 4,
      arbitrary: fc.tuple(fc.double({ min: 0, max: 1, noNaN: true }), fc.boolean()).map(([at, inFile]) => ({
        note: `body cut at ${Math.round(at * 100)}%${inFile ? ' of the first file' : ''}`,
        apply: (state: MultipartState) => {
          state.intact = false;
          state.post = (body, ranges) => {
            const range = inFile ? ranges[0] : undefined;
            const cut = range ? range[0] + Math.floor((range[1] - range[0]) * at) : Math.floor(body.length * at);
            return body.subarray(0, cut);
          };
        },
      })),
    },
    {
      weight: 1,
      arbitrary: fc.uint8Array({ maxLength: 8192 }).map((bytes) => ({
        note: `body is ${bytes.length} random bytes`,
        apply: (state: MultipartState) => {
          state.intact = false;
          state.post = () => Buffer.from(bytes);
        },
      })),
    },
    {
      weight: 1,
      arbitrary: fc
        .tuple(fc.double({ min: 0, max: 1, noNaN: true }), fc.uint8Array({ minLength: 1, maxLength: 64 }))
        .map(([at, bytes]) => ({
          note: `${bytes.length} random bytes written over the body at ${Math.round(at * 100)}%`,
          apply: (state: MultipartState) => {
            state.intact = false;
            state.post = (body) => {
              const copy = Buffer.from(body);
              Buffer.from(bytes).copy(copy, Math.floor(copy.length * at));
              return copy;
            };
          },
        })),
    },
  );
}

/**
 * A header parameter value: as is when it is an HTTP token, quoted otherwise (`:`, `/`, `=`, `?` and the like must be).
 */
const headerParam = (value: string) => (/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(value) ? value : `"${value}"`);

const boundaries = fc.oneof(
  { weight: 4, arbitrary: fc.constant('----switchyard-fuzz-7MA4YWxkTrZu0gW') },
  { weight: 1, arbitrary: fc.stringMatching(/^[0-9A-Za-z'()+_,\-./:=?]{1,69}[0-9A-Za-z'()+_,\-./:=?]$/) },
);

type MultipartKind = 'cut' | 'limits' | 'fields';

/** Sends a multipart case whole, or (now and then) stops mid-body and closes the socket. */
export function multipartCase(kind: MultipartKind): fc.Arbitrary<FuzzCase> {
  return fc.constantFrom(...multipartEndpoints).chain((endpoint) => {
    const mutation =
      kind === 'cut'
        ? multipartCutMutation()
        : kind === 'limits'
          ? multipartLimitMutation(endpoint)
          : multipartFieldMutation(endpoint);
    return fc
      .record({
        variant: fc.constantFrom(...endpoint.variants),
        boundary: boundaries,
        mutations:
          kind === 'fields'
            ? fc.array(mutation, { minLength: 1, maxLength: 3 })
            : fc
                .tuple(mutation, sometimes(multipartFieldMutation(endpoint, false), 6))
                .map(([m, extra]) => (extra ? [m, extra] : [m])),
        abort:
          kind === 'cut'
            ? sometimes(fc.tuple(fc.double({ min: 0, max: 1, noNaN: true }), fc.integer({ min: 0, max: 150 })), 3)
            : fc.constant(null),
        prefer: sometimes(fc.constant('respond-async'), 10),
      })
      .map((r) => {
        const state: MultipartState = {
          parts: [
            ...r.variant.fields.map(([name, value]): Part => ({ name, data: Buffer.from(value) })),
            ...r.variant.files.map((f) => ({ ...f })),
          ],
          contentType: undefined,
          boundary: r.boundary,
          options: {},
          expect: {},
          intact: true,
        };
        state.contentType = `multipart/form-data; boundary=${headerParam(state.boundary)}`;
        for (const m of r.mutations) m.apply(state);
        const { body: encoded, fileRanges } = encodeMultipart(state.parts, state.boundary, state.options);
        const body = state.post ? state.post(encoded, fileRanges) : encoded;
        const expect: Expect = { ...state.expect };
        // A single mutation on an otherwise valid form: only then does the number-field rule apply.
        if (r.mutations.length !== 1 || !state.intact) delete expect.numberField;
        if (state.intact) {
          // What the form holds once every mutation is applied (one may have turned the extra files into fields).
          const plain = state.parts.filter((p) => !p.headerLines);
          const files = plain.filter(isFilePart);
          const fields = plain.filter((p) => !isFilePart(p));
          const bigFile = files.find((p) => p.data.length > limits.fileBytes);
          const bigField = fields.find((p) => p.data.length > limits.fieldBytes);
          if (files.length > limits.files)
            expect.refuse = `${files.length} files is more than the ${limits.files} a request may carry`;
          else if (fields.length > limits.fields)
            expect.refuse = `${fields.length} text fields is more than the ${limits.fields} a request may carry`;
          else if (bigFile)
            expect.refuse =
              `the file '${bigFile.name}' of ${bigFile.data.length} bytes is past the ${limits.fileBytes}-byte ` +
              `upload limit`;
          else if (bigField)
            expect.refuse =
              `the field '${bigField.name}' of ${bigField.data.length} bytes is past the ${limits.fieldBytes} ` +
              `bytes a field may hold`;
          const sent = (p: Part) =>
            p.data.length > 0 && p.data.length <= (isFilePart(p) ? limits.fileBytes : limits.fieldBytes);
          expect.sentFields = [...new Set(fields.filter(sent).map((p) => p.name))].filter((name) =>
            endpoint.textFields.includes(name),
          );
          expect.sentFiles = [...new Set(files.filter(sent).map((p) => p.name.replace(/\[\]$/, '')))].filter((name) =>
            endpoint.fileFields.includes(name),
          );
        }
        const headers: Array<[string, string]> = [['authorization', 'Bearer $KEY']];
        if (state.contentType !== undefined) headers.push(['content-type', state.contentType]);
        if (r.prefer) headers.push(['prefer', r.prefer]);
        const c: FuzzCase = {
          label: `${endpoint.name}: ${r.mutations.map((m) => m.note).join(', ')}`,
          method: 'POST',
          path: endpoint.path,
          headers,
          body,
          transport: 'http',
          expect,
        };
        if (r.abort) {
          c.cutAfter = Math.floor(body.length * r.abort[0]);
          c.cutDelayMs = r.abort[1];
          c.label += `, then the socket closes after ${c.cutAfter} of ${body.length} bytes`;
        }
        return finish(c);
      });
  });
}

// ---------------------------------------------------------------------------
// Reads, deletes and admin

const idText = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      '$VIDEO',
      '$JOB',
      '$OTHER_VIDEO',
      'video_00000000000000000000000000000000',
      'req_0',
      'mock-chat',
      'gpt-4o-mini',
      'dall-e-2',
    ),
  },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '',
      '%',
      '%E0%A4%A',
      '%00',
      '%2e%2e%2f%2e%2e%2fadmin',
      '..',
      '.',
      '__proto__',
      'constructor',
      'prototype',
      'hasOwnProperty',
      'a/b/c',
      '%2F',
      '%ZZ',
      'x;y',
      'a%0D%0Ab',
      '%F0%9F%99%82',
      '%C0%AF',
      '%ED%A0%80',
      '\u00e9',
      '*',
      '~',
      'null',
      'undefined',
      '-1',
      '1e999',
      'video_$VIDEO',
    ),
  },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 30 }).map((s) => encodeURIComponent(s)) },
  { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 12_000 }).map((n) => 'a'.repeat(n)) },
);
const queryValue = fc.oneof(
  fc.constantFrom(
    '',
    '1',
    '0',
    '-1',
    '1e308',
    '1e999',
    'NaN',
    'abc',
    '100',
    '101',
    '20.5',
    '__proto__',
    'constructor',
    'asc',
    'desc',
    '$VIDEO',
    '%00',
    '%E0%A4',
    'video',
    'thumbnail',
    'spritesheet',
  ),
  fc.string({ maxLength: 10 }).map((s) => encodeURIComponent(s)),
);
const query = fc
  .array(
    fc.tuple(
      fc.constantFrom('limit', 'order', 'after', 'variant', '__proto__', 'constructor', 'limit[]', 'x'),
      queryValue,
    ),
    { maxLength: 4 },
  )
  .map((pairs) => (pairs.length ? `?${pairs.map(([k, v]) => `${k}=${v}`).join('&')}` : ''));

export function readCase(): fc.Arbitrary<FuzzCase> {
  const target = fc.oneof(
    fc.constant({ method: 'GET', path: '/v1/models' }),
    idText.map((id) => ({ method: 'GET', path: `/v1/models/${id}` })),
    idText.map((id) => ({ method: 'GET', path: `/v1/jobs/${id}` })),
    query.map((q) => ({ method: 'GET', path: `/v1/videos${q}` })),
    idText.map((id) => ({ method: 'GET', path: `/v1/videos/${id}` })),
    fc.tuple(idText, query).map(([id, q]) => ({ method: 'GET', path: `/v1/videos/${id}/content${q}` })),
    idText.map((id) => ({ method: 'DELETE', path: `/v1/videos/${id}` })),
    fc.constant({ method: 'GET', path: '/admin/keys' }),
    idText.map((id) => ({ method: 'DELETE', path: `/admin/keys/${id}` })),
    fc.tuple(idText, query).map(([key, q]) => ({ method: 'GET', path: `/v1/files/${key}${q}` })),
    fc
      .constantFrom(
        '/',
        '/v1',
        '/v1/',
        '/v2/models',
        '//v1//models',
        '/v1/models/',
        '/v1/chat/completions/',
        '/healthz/',
        '/admin',
        '/v1/%2e%2e/admin/keys',
      )
      .map((path) => ({ method: 'GET', path })),
    fc
      .tuple(
        fc.constantFrom('PUT', 'PATCH', 'OPTIONS', 'DELETE', 'GET', 'TRACE', 'PROPFIND'),
        fc.constantFrom(
          '/v1/chat/completions',
          '/v1/models',
          '/v1/embeddings',
          '/v1/videos',
          '/admin/keys',
          '/healthz',
        ),
      )
      .map(([method, path]) => ({ method, path })),
  );
  const auth = fc.oneof(
    { weight: 8, arbitrary: fc.constant<string | undefined>('Bearer $KEY') },
    { weight: 2, arbitrary: fc.constant<string | undefined>('Bearer $ADMIN') },
    {
      weight: 1,
      arbitrary: fc.constantFrom<string | undefined>(undefined, 'Bearer nope', 'Bearer $OTHER_KEY', 'Basic $KEY'),
    },
  );
  return fc.record({ target, auth }).map(({ target, auth }) =>
    finish({
      label: `${target.method} ${clip(target.path, 60)}${auth === 'Bearer $KEY' ? '' : ` as ${auth ?? 'nobody'}`}`,
      method: target.method,
      path: target.path,
      headers: auth ? [['authorization', auth]] : [],
      transport: 'http',
      // OPTIONS answers with an Allow header and may carry no body.
      expect: target.method === 'OPTIONS' ? { emptyOk: true } : {},
    }),
  );
}

// ---------------------------------------------------------------------------
// Raw HTTP

const validTargets = [
  '/v1/chat/completions',
  '/v1/embeddings',
  '/v1/models',
  '/healthz',
  '/v1/images/edits',
  '/admin/keys',
  '/v1/videos',
];

export function rawCase(): fc.Arbitrary<FuzzCase> {
  const bigHeader = fc
    .tuple(
      fc.constantFrom(...validTargets),
      fc.oneof(fc.integer({ min: 1_000, max: 15_000 }), fc.integer({ min: 16_500, max: 64_000 })),
      fc.constantFrom('x-fuzz', 'cookie', 'user-agent', 'authorization'),
    )
    .map(([path, size, name]) =>
      finish({
        label: `${name} header of ${size} bytes`,
        method: path === '/v1/models' || path === '/healthz' ? 'GET' : 'POST',
        path,
        headers: [
          ['authorization', name === 'authorization' ? `Bearer ${'k'.repeat(size)}` : 'Bearer $KEY'],
          ...(name === 'authorization' ? [] : ([[name, 'h'.repeat(size)]] as Array<[string, string]>)),
          ['content-type', 'application/json'],
        ],
        body: Buffer.from('{"model":"mock-embedding","input":"hi"}'),
        transport: 'http',
        expect: {},
      }),
    );
  const manyHeaders = fc.integer({ min: 100, max: 4_000 }).map((count) =>
    finish({
      label: `${count} headers`,
      method: 'GET',
      path: '/v1/models',
      headers: [
        ['authorization', 'Bearer $KEY'],
        ...Array.from({ length: count }, (_, i): [string, string] => [`x-h${i}`, 'v']),
      ],
      transport: 'http',
      expect: {},
    }),
  );
  const bigUrl = fc
    .tuple(
      fc.oneof(fc.integer({ min: 1_000, max: 15_000 }), fc.integer({ min: 16_500, max: 40_000 })),
      fc.constantFrom('/v1/models/', '/v1/videos?after=', '/v1/jobs/', '/v1/nothing/', '/healthz?x='),
    )
    .map(([size, prefix]) =>
      finish({
        label: `URL of ${size + prefix.length} bytes`,
        method: 'GET',
        path: prefix + 'a'.repeat(size),
        headers: [['authorization', 'Bearer $KEY']],
        transport: 'http',
        expect: {},
      }),
    );
  const malformed = fc
    .constantFrom(
      'GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\nConnection: close\r\n\r\n',
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: ' +
        'chunked\r\nConnection: close\r\n\r\n0\r\n\r\n',
      'POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $KEY\r\nTransfer-Encoding: ' +
        'chunked\r\nConnection: close\r\n\r\nzz\r\n{}\r\n0\r\n\r\n',
      'GET /healthz HTTP/9.9\r\nHost: x\r\nConnection: close\r\n\r\n',
      'G@T /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
      'GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\nConnection: close\r\n\r\n',
      'GET /healthz HTTP/1.1\r\nHo\u0000st: x\r\nConnection: close\r\n\r\n',
      'GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n',
      'GET /v1/models HTTP/1.1\r\nHost: x\r\nHost: y\r\nAuthorization: Bearer $KEY\r\nConnection: close\r\n\r\n',
      'GET /v1/models HTTP/1.0\r\nAuthorization: Bearer $KEY\r\n\r\n',
      '\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
      'GET /he\u007fz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
      'GET /healthz HTTP/1.1\nHost: x\nConnection: close\n\n',
      'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\nConnection: close\r\n\r\n',
      'GET http://evil.example/v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $KEY\r\nConnection: close\r\n\r\n',
      'GET * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
      'CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\nConnection: close\r\n\r\n',
      'POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $KEY\r\nContent-Type: ' +
        'application/json\r\nContent-Length: -1\r\nConnection: close\r\n\r\n',
      'POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $KEY\r\nContent-Type: ' +
        'application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\nConnection: close\r\n\r\n{}x',
      'POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $KEY\r\nContent-Type: ' +
        'application/json\r\nContent-Length: 99999999999999999999\r\nConnection: close\r\n\r\n',
      'POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $KEY\r\nContent-Type: ' +
        'application/json\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n0\r\n\r\n',
      'GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $KEY\r\nExpect: 100-continue\r\nConnection: ' +
        'close\r\n\r\n',
      'GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $KEY\r\nUpgrade: websocket\r\nConnection: ' +
        'Upgrade, close\r\n\r\n',
    )
    .map((text) =>
      finish({
        label: `malformed request ${JSON.stringify(clip(text.split(/\r?\n/)[0] ?? '', 40))}`,
        method: '(raw)',
        path: '',
        headers: [],
        transport: 'net',
        raw: Buffer.from(text, 'latin1'),
        expect: {},
      }),
    );
  const garbage = fc.uint8Array({ minLength: 1, maxLength: 512 }).map((bytes) =>
    finish({
      label: `${bytes.length} random bytes as a request`,
      method: '(raw)',
      path: '',
      headers: [],
      transport: 'net',
      raw: Buffer.concat([Buffer.from(bytes), Buffer.from('\r\n\r\n')]),
      expect: {},
    }),
  );
  // A body that stops part-way and a socket that closes: no answer is owed, the gateway must simply live on.
  const cutOff = fc
    .tuple(
      fc.constantFrom(...jsonEndpoints.filter((e) => !e.admin)),
      fc.double({ min: 0, max: 1, noNaN: true }),
      fc.integer({ min: 0, max: 150 }),
      fc.boolean(),
    )
    .map(([endpoint, at, delay, chunked]) => {
      const body = encodeJson(setAt(endpoint.bases[0]!, ['user'], 'x'.repeat(20_000)));
      return finish({
        label: `${endpoint.name}: body stops after ${Math.floor(body.length * at)} of ${body.length} bytes${chunked ? ' (chunked)' : ''}, socket closed`,
        method: 'POST',
        path: endpoint.path,
        headers: [
          ['authorization', 'Bearer $KEY'],
          ['content-type', 'application/json'],
        ],
        body,
        transport: 'http',
        chunked,
        cutAfter: Math.floor(body.length * at),
        cutDelayMs: delay,
        expect: {},
      });
    });
  // The client leaves as soon as the request is sent (a chat that is being answered, a stream).
  const leaves = fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 100 })).map(([stream, delay]) => {
    const body = encodeJson({ model: 'mock-chat', messages: [{ role: 'user', content: 'hi' }], stream });
    return finish({
      label: `chat${stream ? ' stream' : ''}: client leaves ${delay} ms after sending`,
      method: 'POST',
      path: '/v1/chat/completions',
      headers: [
        ['authorization', 'Bearer $KEY'],
        ['content-type', 'application/json'],
      ],
      body,
      transport: 'http',
      cutAfter: body.length,
      cutDelayMs: delay,
      expect: {},
    });
  });
  return fc.oneof(
    { weight: 3, arbitrary: bigHeader },
    { weight: 1, arbitrary: manyHeaders },
    { weight: 2, arbitrary: bigUrl },
    { weight: 3, arbitrary: malformed },
    { weight: 1, arbitrary: garbage },
    { weight: 2, arbitrary: cutOff },
    { weight: 1, arbitrary: leaves },
  );
}

// ---------------------------------------------------------------------------
// Known regressions, run first in every seed (fast-check `examples`)

const chatBase = jsonEndpoints[0]!;
const embeddingsBase = jsonEndpoints.find((e) => e.name === 'embeddings')!;

/** A chat of 9,999 user messages of `parts` text parts each. */
function manyPartsCase(parts: number): FuzzCase {
  const messages = Array.from({ length: 9_999 }, () => ({
    role: 'user',
    content: Array.from({ length: parts }, () => ({ type: 'text', text: 'x' })),
  }));
  return buildJsonCase({
    endpoint: chatBase,
    base: chatBase.bases[0]!,
    mutations: [setMutation(['messages'], messages, `9,999 messages × ${parts} parts`)],
    contentType: 'application/json',
    auth: 'Bearer $KEY',
    chunked: false,
  });
}

export const knownCases = {
  /** 130,000 × 'a' froze the event loop for about 16 s in the tokenizer. */
  longRun: buildJsonCase({
    endpoint: chatBase,
    base: chatBase.bases[0]!,
    mutations: [setMutation(['messages', 0, 'content'], 'a'.repeat(130_000))],
    contentType: 'application/json',
    auth: 'Bearer $KEY',
    chunked: false,
  }),
  /** 60 inputs of 9 KB. */
  manyInputs: buildJsonCase({
    endpoint: embeddingsBase,
    base: embeddingsBase.bases[0]!,
    mutations: [
      setMutation(
        ['input'],
        Array.from({ length: 60 }, (_, i) => repeatTo(`${i} `, 9 * 1024)),
        '60 inputs of 9 KB',
      ),
    ],
    contentType: 'application/json',
    auth: 'Bearer $KEY',
    chunked: false,
  }),
  /** Nested 5,000 levels: a 500 (stack overflow). */
  deepNesting: buildJsonCase({
    endpoint: chatBase,
    base: chatBase.bases[2]!,
    mutations: [setMutation(['tools', 0, 'function', 'parameters'], nestedJson(5_000, 'object'))],
    contentType: 'application/json',
    auth: 'Bearer $KEY',
    chunked: false,
  }),
  deepContent: buildJsonCase({
    endpoint: chatBase,
    base: chatBase.bases[0]!,
    mutations: [setMutation(['messages', 0, 'content'], nestedJson(5_000, 'array'))],
    contentType: 'application/json',
    auth: 'Bearer $KEY',
    chunked: false,
  }),
  /**
   * 9,999 messages of 10 parts each (110,000 objects and arrays): validation and translation held the loop 100-500 ms.
   */
  manyParts: manyPartsCase(10),
  /** 9,999 messages of 3 parts each: just within the bound, served. */
  manyPartsServed: manyPartsCase(3),
  /** A stream asked to close its connection. */
  streamClose: buildJsonCase(
    {
      endpoint: chatBase,
      base: chatBase.bases[0]!,
      mutations: [setMutation(['stream'], true)],
      contentType: 'application/json',
      auth: 'Bearer $KEY',
      chunked: false,
      connection: 'close',
    },
    { connectionClose: true },
  ),
};

/** A multipart case from explicit parts (for the known regressions). */
function multipartExample(
  endpoint: string,
  parts: Part[],
  label: string,
  expect: Expect,
  cut?: (body: Buffer, ranges: Array<[number, number]>) => Buffer,
): FuzzCase {
  const boundary = '----switchyard-fuzz-7MA4YWxkTrZu0gW';
  const { body, fileRanges } = encodeMultipart(parts, boundary);
  return finish({
    label,
    method: 'POST',
    path: endpoint,
    headers: [
      ['authorization', 'Bearer $KEY'],
      ['content-type', `multipart/form-data; boundary=${boundary}`],
    ],
    body: cut ? cut(body, fileRanges) : body,
    transport: 'http',
    expect,
  });
}

const editParts = (): Part[] => [
  { name: 'model', data: Buffer.from('mock-image') },
  { name: 'prompt', data: Buffer.from('add a hat') },
  { name: 'size', data: Buffer.from('256x256') },
  { name: 'image', filename: 'photo.png', contentType: 'image/png', data: tinyPng },
];
const transcriptionParts = (temperature?: string): Part[] => [
  { name: 'model', data: Buffer.from('whisper-1') },
  ...(temperature !== undefined ? [{ name: 'temperature', data: Buffer.from(temperature) }] : []),
  { name: 'file', filename: 'clip.mp3', contentType: 'audio/mpeg', data: fakeAudio },
];

export const knownMultipartCases = {
  /** Cut inside the file part: the file stream's 'error' had no listener and took the process down. */
  truncated: multipartExample(
    '/v1/audio/transcriptions',
    transcriptionParts(),
    'transcriptions: body cut in the middle of the file',
    {},
    (body, ranges) => body.subarray(0, ranges[0]![0] + 100),
  ),
  tooManyFiles: multipartExample(
    '/v1/images/edits',
    [
      ...editParts(),
      ...Array.from({ length: 21 }, (_, i): Part => ({
        name: `extra_${i}`,
        filename: `f${i}.png`,
        contentType: 'image/png',
        data: tinyPng,
      })),
    ],
    'image-edits: 22 files',
    {
      refuse: '22 files is more than the 20 a request may carry',
      sentFields: ['model', 'prompt', 'size'],
      sentFiles: ['image'],
    },
  ),
  tooManyFields: multipartExample(
    '/v1/images/edits',
    [
      ...editParts(),
      ...Array.from({ length: 151 }, (_, i): Part => ({ name: `field_${i}`, data: Buffer.from(`v${i}`) })),
    ],
    'image-edits: 154 text fields',
    {
      refuse: '154 fields is more than the 150 a request may carry',
      sentFields: ['model', 'prompt', 'size'],
      sentFiles: ['image'],
    },
  ),
  numberInfinite: multipartExample(
    '/v1/audio/transcriptions',
    transcriptionParts('1e999'),
    'transcriptions: temperature="1e999"',
    { numberField: 'temperature' },
  ),
  numberText: multipartExample(
    '/v1/audio/transcriptions',
    transcriptionParts('abc'),
    'transcriptions: temperature="abc"',
    { numberField: 'temperature' },
  ),
  numberNaN: multipartExample(
    '/v1/images/edits',
    [...editParts(), { name: 'n', data: Buffer.from('NaN') }],
    'image-edits: n="NaN"',
    { numberField: 'n' },
  ),
};

export const knownRawCases = {
  /** Node answered a bare 431 with no body. */
  bigHeader: finish({
    label: 'x-fuzz header of 20480 bytes',
    method: 'GET',
    path: '/v1/models',
    headers: [
      ['authorization', 'Bearer $KEY'],
      ['x-fuzz', 'h'.repeat(20 * 1024)],
    ],
    transport: 'http',
    expect: {},
  }),
  bigUrl: finish({
    label: 'URL of 20 KB',
    method: 'GET',
    path: `/v1/models/${'a'.repeat(20 * 1024)}`,
    headers: [['authorization', 'Bearer $KEY']],
    transport: 'http',
    expect: {},
  }),
};
