import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { GenerateContentResponse } from '@google/genai';
import pino from 'pino';
import { loadCatalog } from '../../shared/catalog.js';
import { loadConfig } from '../../shared/config.js';
import type { GeminiStreamForm } from '../../shared/gemini.js';
import type { ChatCompletionRequest } from '../../shared/schemas/chat.js';
import type { AnswerEvent, FinishReason, Usage } from '../../workers/answers/events.js';
import {
  GeminiChunkFold,
  GeminiFramer,
  GeminiStreamEncoder,
  geminiFinishReasonOf,
  geminiUsageOf,
  type GeminiEncoderOptions,
} from '../../workers/answers/gemini-encoder.js';
import { geminiEmbeddingsOf } from '../../workers/answers/gemini-embeddings.js';
import { mapGeminiFinishReason } from '../../workers/vendors/gemini/map-gemini-finish-reason.js';
import { mockAdapter } from '../../workers/vendors/mock/index.js';
import type { CallContext } from '../../workers/vendors/types.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';
import { wireFixture } from '../support/fixtures.js';
import { assertShape, generateContentResponseShape } from '../support/gemini-shapes.js';

type Json = Record<string, any>;

const FINISH_REASONS = new Set([
  'FINISH_REASON_UNSPECIFIED',
  'STOP',
  'MAX_TOKENS',
  'SAFETY',
  'RECITATION',
  'LANGUAGE',
  'OTHER',
  'BLOCKLIST',
  'PROHIBITED_CONTENT',
  'SPII',
  'MALFORMED_FUNCTION_CALL',
  'IMAGE_SAFETY',
  'UNEXPECTED_TOOL_CALL',
  'TOO_MANY_TOOL_CALLS',
]);
const PART_DATA = [
  'text',
  'inlineData',
  'fileData',
  'functionCall',
  'functionResponse',
  'executableCode',
  'codeExecutionResult',
];
const COUNTS = [
  'promptTokenCount',
  'candidatesTokenCount',
  'totalTokenCount',
  'cachedContentTokenCount',
  'thoughtsTokenCount',
  'toolUsePromptTokenCount',
];

const onlyKeys = (value: Json, allowed: string[], at: string) => {
  for (const key of Object.keys(value)) assert.ok(allowed.includes(key), `${at}: unexpected field ${key}`);
};

/**
 * Google's `GenerateContentResponse`: the strict shape of Google's reference (`test/support/gemini-shapes.ts`), and
 * field by field what the gateway writes (no field of its own, a call's id and object args, counts as integers).
 */
function checkResponse(chunk: Json): void {
  assertShape(generateContentResponseShape, chunk, 'chunk');
  onlyKeys(chunk, ['candidates', 'promptFeedback', 'usageMetadata', 'modelVersion', 'responseId'], 'response');
  assert.equal(typeof chunk.modelVersion, 'string');
  assert.equal(typeof chunk.responseId, 'string');
  assert.ok(chunk.responseId.length > 0);
  assert.ok(Array.isArray(chunk.candidates) && chunk.candidates.length > 0, 'candidates');
  for (const candidate of chunk.candidates as Json[]) {
    onlyKeys(candidate, ['content', 'finishReason', 'index'], 'candidate');
    assert.ok(Number.isInteger(candidate.index) && candidate.index >= 0, 'candidate.index');
    if (candidate.finishReason !== undefined)
      assert.ok(FINISH_REASONS.has(candidate.finishReason), candidate.finishReason);
    if (candidate.content === undefined) continue;
    onlyKeys(candidate.content, ['role', 'parts'], 'content');
    assert.equal(candidate.content.role, 'model');
    for (const part of (candidate.content.parts ?? []) as Json[]) {
      onlyKeys(part, [...PART_DATA, 'thought', 'thoughtSignature'], 'part');
      assert.equal(
        PART_DATA.filter((key) => part[key] !== undefined).length,
        1,
        `one data field: ${JSON.stringify(part)}`,
      );
      if (part.text !== undefined) assert.equal(typeof part.text, 'string');
      if (part.thought !== undefined) assert.equal(part.thought, true);
      if (part.functionCall !== undefined) {
        onlyKeys(part.functionCall, ['id', 'name', 'args'], 'functionCall');
        assert.equal(typeof part.functionCall.name, 'string');
        assert.equal(typeof part.functionCall.id, 'string');
        assert.ok(
          part.functionCall.args !== null &&
            typeof part.functionCall.args === 'object' &&
            !Array.isArray(part.functionCall.args),
          'args is an object',
        );
      }
    }
  }
  if (chunk.usageMetadata !== undefined) {
    onlyKeys(chunk.usageMetadata, COUNTS, 'usageMetadata');
    for (const value of Object.values(chunk.usageMetadata))
      assert.ok(Number.isInteger(value) && (value as number) >= 0);
  }
}

/** Reads frames of either form, checking their exact framing on the way; the chunks they hold. */
function parseFrames(text: string, form: GeminiStreamForm): Json[] {
  if (form === 'array') {
    assert.ok(text.startsWith('[') && text.endsWith(']'), 'one JSON array');
    const elements = text.slice(1, -1).split(',\r\n');
    const parsed = JSON.parse(text) as Json[];
    assert.equal(parsed.length, elements.length, 'elements are separated by ",\\r\\n"');
    parsed.forEach(checkResponse);
    return parsed;
  }
  if (text === '') return [];
  assert.ok(text.endsWith('\n\n'));
  return text
    .slice(0, -2)
    .split('\n\n')
    .map((frame) => {
      const match = /^data: ([^\n]+)$/.exec(frame);
      assert.ok(match, `frame is one data line: ${JSON.stringify(frame)}`);
      const chunk = JSON.parse(match[1]!) as Json;
      checkResponse(chunk);
      return chunk;
    });
}

const options: GeminiEncoderOptions = { model: 'gemini-2.5-pro', inputTokens: 42 };
const start: AnswerEvent = { type: 'start', id: 'chatcmpl-abc123', created: 1 };
const role = (choice = 0): AnswerEvent => ({ type: 'role', choice });
const text = (t: string, choice = 0): AnswerEvent => ({ type: 'text', choice, text: t });
const thinking = (t: string): AnswerEvent => ({ type: 'reasoning', choice: 0, text: t });
const finish = (reason: FinishReason, choice = 0): AnswerEvent => ({ type: 'finish', choice, reason });
const usage = (u: Partial<Usage> & Record<string, unknown> = {}): AnswerEvent => ({
  type: 'usage',
  usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, ...u },
});
const call = (index: number, args: string, first?: { id?: string; name: string }, choice = 0): AnswerEvent => ({
  type: 'tool-call',
  choice,
  index,
  arguments: args,
  ...first,
});

/** Runs batches through a fresh encoder in one form, then end(); the chunks, and what each batch wrote. */
function run(batches: AnswerEvent[][], form: GeminiStreamForm = 'sse', opts: Partial<GeminiEncoderOptions> = {}) {
  const encoder = new GeminiStreamEncoder({ ...options, form, ...opts });
  let written = '';
  let count = 0;
  const perBatch: string[] = [];
  for (const batch of batches) {
    const out = encoder.encode(batch);
    perBatch.push(out.frames);
    written += out.frames;
    count += out.count;
  }
  const tail = encoder.end();
  written += tail.frames;
  count += tail.count;
  // The array's `]` is the stream's trailer: the payload of its end, as the api writes it.
  assert.equal(encoder.trailer, form === 'array' ? ']' : '');
  written += encoder.trailer;
  const chunks = parseFrames(written, form);
  assert.equal(count, chunks.length, 'count says how many chunks');
  return { encoder, chunks, written, perBatch };
}

/** The body a client that asked for no stream gets for the same events. */
function plain(batches: AnswerEvent[][], opts: Partial<GeminiEncoderOptions> = {}): Json {
  const encoder = new GeminiStreamEncoder({ ...options, ...opts });
  for (const batch of batches)
    assert.deepEqual(encoder.encode(batch), { frames: '', count: 0 }, 'a plain answer frames nothing');
  encoder.end();
  const body = encoder.fold() as Json;
  checkResponse(body);
  return body;
}

const partsOf = (chunks: Json[], index = 0) =>
  chunks.flatMap((chunk) =>
    (chunk.candidates as Json[]).filter((c) => c.index === index).flatMap((c) => c.content?.parts ?? []),
  );

describe('GeminiStreamEncoder', () => {
  const textAnswer = [[start, role(), text('Hel')], [text('lo')], [finish('stop')], [usage()]];

  it('writes text as ?alt=sse chunks, the finish reason and usage on the last one', () => {
    const { chunks } = run(textAnswer);
    assert.equal(chunks.length, 3);
    assert.deepEqual(chunks[0], {
      candidates: [{ content: { role: 'model', parts: [{ text: 'Hel' }] }, index: 0 }],
      modelVersion: 'gemini-2.5-pro',
      responseId: 'abc123',
    });
    assert.deepEqual(chunks[1]!.candidates, [{ content: { role: 'model', parts: [{ text: 'lo' }] }, index: 0 }]);
    assert.deepEqual(chunks[2], {
      candidates: [{ content: { role: 'model' }, finishReason: 'STOP', index: 0 }],
      usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 5, totalTokenCount: 15 },
      modelVersion: 'gemini-2.5-pro',
      responseId: 'abc123',
    });
    for (const chunk of chunks.slice(0, -1))
      assert.equal(chunk.usageMetadata, undefined, 'usage only on the last chunk');
  });

  it('puts the finish on the chunk of the last text when the usage came in the same read', () => {
    const { chunks } = run([
      [start, role(), text('Hi')],
      [text('!'), finish('stop'), usage()],
    ]);
    assert.equal(chunks.length, 2);
    assert.deepEqual(chunks[1]!.candidates, [
      { content: { role: 'model', parts: [{ text: '!' }] }, finishReason: 'STOP', index: 0 },
    ]);
  });

  it('writes the default form as one JSON array, "[" then ",\\r\\n" between chunks then "]"', () => {
    const { written, chunks, perBatch } = run(textAnswer, 'array');
    assert.ok(perBatch[0]!.startsWith('[{"candidates"'));
    assert.ok(perBatch[1]!.startsWith(',\r\n{"candidates"'));
    assert.ok(written.endsWith('}]'));
    assert.equal(chunks.length, 3);
    assert.equal(JSON.parse(written).length, 3);
  });

  it('ends an answer with no events at all with one chunk: its finish and the prompt the api counted', () => {
    for (const form of ['array', 'sse'] as const) {
      const { chunks, written } = run([], form);
      assert.equal(chunks.length, 1);
      if (form === 'array') assert.ok(written.startsWith('[{') && written.endsWith('}]'));
      assert.deepEqual(chunks[0]!.candidates, [{ content: { role: 'model' }, finishReason: 'STOP', index: 0 }]);
      assert.deepEqual(chunks[0]!.usageMetadata, { promptTokenCount: 42, totalTokenCount: 42 });
    }
  });

  it('writes visible reasoning as thought parts, apart from the answer text', () => {
    const { chunks } = run([
      [start, role(), thinking('Let me '), thinking('think.'), text('Done')],
      [finish('stop'), usage()],
    ]);
    assert.deepEqual(chunks[0]!.candidates[0].content.parts, [
      { text: 'Let me think.', thought: true },
      { text: 'Done' },
    ]);
    const body = plain([
      [start, role(), thinking('a')],
      [thinking('b'), text('c')],
      [text('d'), finish('stop'), usage()],
    ]);
    assert.deepEqual(body.candidates[0].content.parts, [{ text: 'ab', thought: true }, { text: 'cd' }]);
  });

  it(
    'writes a call streamed in pieces as one functionCall once its arguments are whole, named as the client ' +
      'declared it',
    () => {
      const names = new Map([['fs_read_file', 'fs.read_file']]);
      const batches = [
        [start, role(), call(0, '', { id: 'call_1', name: 'fs_read_file' })],
        [call(0, '{"path":')],
        [call(0, '"a.txt"}')],
        [call(1, '{"x":1}', { id: 'call_2', name: 'other' })],
        [finish('tool_calls')],
        [usage()],
      ];
      const { chunks, perBatch } = run(batches, 'sse', { toolNames: names });
      assert.equal(perBatch[0], '');
      assert.equal(perBatch[1], '', 'incomplete arguments wait');
      assert.deepEqual(partsOf(chunks), [
        { functionCall: { id: 'call_1', name: 'fs.read_file', args: { path: 'a.txt' } } },
        { functionCall: { id: 'call_2', name: 'other', args: { x: 1 } } },
      ]);
      assert.equal(
        chunks.at(-1)!.candidates[0].finishReason,
        'STOP',
        'a turn that called functions ends with STOP, as Gemini says it',
      );
      const sdk = Object.assign(new GenerateContentResponse(), plain(batches, { toolNames: names }));
      assert.deepEqual(sdk.functionCalls, [
        { id: 'call_1', name: 'fs.read_file', args: { path: 'a.txt' } },
        { id: 'call_2', name: 'other', args: { x: 1 } },
      ]);
    },
  );

  it('writes calls interleaved by a vendor (pieces of two at once) whole, each once', () => {
    const { chunks } = run([
      [start, role(), call(0, '{"a"', { id: 'c0', name: 'f' }), call(1, '{"b"', { id: 'c1', name: 'g' })],
      [call(0, ':1}'), call(1, ':2}')],
      [finish('tool_calls'), usage()],
    ]);
    assert.deepEqual(partsOf(chunks), [
      { functionCall: { id: 'c0', name: 'f', args: { a: 1 } } },
      { functionCall: { id: 'c1', name: 'g', args: { b: 2 } } },
    ]);
  });

  it('sends a call whose arguments are not a JSON object with args {}, and says so in the log', () => {
    const warnings: unknown[] = [];
    const log = { warn: (...args: unknown[]) => void warnings.push(args) };
    const { chunks } = run(
      [
        [start, role(), call(0, '{"broken', { id: 'c', name: 'f' })],
        [finish('tool_calls'), usage()],
      ],
      'sse',
      { log },
    );
    assert.deepEqual(partsOf(chunks), [{ functionCall: { id: 'c', name: 'f', args: {} } }]);
    assert.equal(warnings.length, 1);
    const { chunks: empty } = run(
      [
        [start, role(), call(0, '', { name: 'noargs' })],
        [finish('tool_calls'), usage()],
      ],
      'sse',
      { log },
    );
    assert.deepEqual(
      partsOf(empty),
      [{ functionCall: { id: 'call_abc123_0_0', name: 'noargs', args: {} } }],
      'no arguments are an empty object; a call without an id gets one',
    );
    assert.equal(warnings.length, 1, 'no arguments at all is not a fault');
  });

  it('says finish reasons in Gemini words, the reverse of the chat mapping', () => {
    const cases: Array<[FinishReason, string]> = [
      ['stop', 'STOP'],
      ['tool_calls', 'STOP'],
      ['function_call', 'STOP'],
      ['length', 'MAX_TOKENS'],
      ['content_filter', 'SAFETY'],
    ];
    for (const [reason, gemini] of cases) {
      assert.equal(geminiFinishReasonOf(reason), gemini);
      const back = mapGeminiFinishReason(gemini, reason === 'tool_calls');
      if (reason !== 'function_call') assert.equal(back, reason);
      const { chunks } = run([
        [start, role(), text('x')],
        [finish(reason), usage()],
      ]);
      assert.equal(chunks.at(-1)!.candidates[0].finishReason, gemini);
    }
  });

  it('counts as Gemini does: thoughts apart from the candidates, cached tokens inside the prompt', () => {
    assert.deepEqual(
      geminiUsageOf({
        prompt_tokens: 100,
        completion_tokens: 50,
        total_tokens: 150,
        prompt_tokens_details: { cached_tokens: 60 },
        completion_tokens_details: { reasoning_tokens: 30 },
      }),
      {
        promptTokenCount: 100,
        candidatesTokenCount: 20,
        totalTokenCount: 150,
        cachedContentTokenCount: 60,
        thoughtsTokenCount: 30,
      },
    );
    assert.deepEqual(
      geminiUsageOf({
        prompt_tokens: 5,
        completion_tokens: 0,
        total_tokens: 5,
        prompt_tokens_details: { cached_tokens: 0 },
      }),
      { promptTokenCount: 5, candidatesTokenCount: 0, totalTokenCount: 5 },
    );
  });

  it('writes several choices (candidateCount) as candidates with their index', () => {
    const batches = [
      [start, role(0), role(1), text('A', 0), text('B', 1)],
      [text('a', 0), finish('stop', 0)],
      [text('b', 1), finish('length', 1)],
      [usage()],
    ];
    const { chunks } = run(batches);
    assert.deepEqual(
      chunks[0]!.candidates.map((c: Json) => [c.index, c.content.parts[0].text]),
      [
        [0, 'A'],
        [1, 'B'],
      ],
    );
    assert.deepEqual(
      chunks.at(-1)!.candidates.map((c: Json) => [c.index, c.finishReason]),
      [
        [0, 'STOP'],
        [1, 'MAX_TOKENS'],
      ],
    );
    const body = plain(batches);
    assert.deepEqual(
      body.candidates.map((c: Json) => [c.index, c.content.parts[0].text, c.finishReason]),
      [
        [0, 'Aa', 'STOP'],
        [1, 'Bb', 'MAX_TOKENS'],
      ],
    );
  });

  it('folds to the body a plain client gets: what the streamed chunks fold to, as the SDK reads it', () => {
    const batches = [
      [start, role(), thinking('hm')],
      [text('The '), text('answer')],
      [call(0, '{"q":1}', { id: 'c', name: 'f' })],
      [finish('tool_calls'), usage({ completion_tokens_details: { reasoning_tokens: 2 } })],
    ];
    const body = plain(batches);
    const { chunks, encoder } = run(batches, 'sse', { keep: true });
    const fold = new GeminiChunkFold();
    for (const chunk of chunks) fold.add(chunk);
    assert.deepEqual(fold.response(), body);
    assert.deepEqual(encoder.fold(), body, 'a kept stream folds as it goes');
    assert.deepEqual(
      encoder.chunks().map((json) => JSON.parse(json)),
      chunks,
      'kept: every chunk as written',
    );
    assert.deepEqual(body, {
      candidates: [
        {
          content: {
            role: 'model',
            parts: [
              { text: 'hm', thought: true },
              { text: 'The answer' },
              { functionCall: { id: 'c', name: 'f', args: { q: 1 } } },
            ],
          },
          finishReason: 'STOP',
          index: 0,
        },
      ],
      usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 3, totalTokenCount: 15, thoughtsTokenCount: 2 },
      modelVersion: 'gemini-2.5-pro',
      responseId: 'abc123',
    });
    const sdk = Object.assign(new GenerateContentResponse(), body);
    assert.equal(sdk.text, 'The answer');
    assert.equal(sdk.responseId, 'abc123');
  });

  it('writes nothing after its last chunk', () => {
    const encoder = new GeminiStreamEncoder({ ...options, form: 'sse' });
    encoder.encode([start, role(), text('x'), finish('stop'), usage()]);
    assert.deepEqual(encoder.encode([text('late')]), { frames: '', count: 0 });
    assert.deepEqual(encoder.end(), { frames: '', count: 0 });
    const array = new GeminiStreamEncoder({ ...options, form: 'array' });
    assert.ok(array.end().frames.startsWith('[{'), 'an answer with no events still has its one element');
    assert.equal(array.trailer, ']');
  });
});

describe('GeminiFramer', () => {
  it('frames chunks as ?alt=sse events or as the elements of one array', () => {
    const sse = new GeminiFramer('sse');
    assert.equal(sse.frame('{"a":1}'), 'data: {"a":1}\n\n');
    assert.equal(sse.trailer, '');
    const array = new GeminiFramer('array');
    assert.equal(array.frame('{"a":1}') + array.frame('{"b":2}') + array.trailer, '[{"a":1},\r\n{"b":2}]');
    assert.equal(array.chunks, 2);
  });
});

describe('GeminiChunkFold', () => {
  const readFixture = (name: string) =>
    readFileSync(wireFixture(name), 'utf8')
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => JSON.parse(line) as Json);

  it('folds a recorded Gemini text stream into one text part that keeps its thought signature', () => {
    const chunks = readFixture('gemini-stream-text.chunks.jsonl');
    const fold = new GeminiChunkFold();
    for (const chunk of chunks) fold.add(chunk);
    const body = fold.response() as Json;
    const signature = chunks.at(-1)!.candidates[0].content.parts[0].thoughtSignature;
    assert.deepEqual(body.candidates, [
      {
        content: {
          role: 'model',
          parts: [{ text: 'There are **3** "r"s in strawberry.\n\nst**r**awbe**rr**y', thoughtSignature: signature }],
        },
        finishReason: 'STOP',
        index: 0,
      },
    ]);
    assert.deepEqual(body.usageMetadata, chunks.at(-1)!.usageMetadata);
    assert.equal(body.responseId, 'bH6LaZW8Fp_3nsEPqtaSwQ4');
    assert.equal(body.modelVersion, 'gemini-3-pro-preview');
    assert.deepEqual(chunks, readFixture('gemini-stream-text.chunks.jsonl'), 'the chunks are not changed');
  });

  it('folds a recorded Gemini function call stream: the call with its signature, the trailing empty text left out', () => {
    const chunks = readFixture('gemini-stream-function-call.chunks.jsonl');
    const fold = new GeminiChunkFold();
    for (const chunk of chunks) fold.add(chunk);
    const body = fold.response() as Json;
    assert.deepEqual(body.candidates[0].content.parts, [chunks[0]!.candidates[0].content.parts[0]]);
    assert.equal(body.candidates[0].finishReason, 'STOP');
    const sdk = Object.assign(new GenerateContentResponse(), body);
    assert.deepEqual(sdk.functionCalls, [{ name: 'weather', args: { location: 'San Francisco' } }]);
  });

  it('keeps what it does not know, joins citations, and answers a blocked prompt without candidates', () => {
    const fold = new GeminiChunkFold();
    fold.add({
      candidates: [
        {
          content: { role: 'model', parts: [{ text: 'a' }, { executableCode: { code: 'x' } }] },
          citationMetadata: { citationSources: [{ uri: 'u1' }] },
          index: 0,
        },
      ],
      modelVersion: 'm',
    });
    fold.add({
      candidates: [
        {
          content: { role: 'model', parts: [{ text: 'b' }] },
          citationMetadata: { citationSources: [{ uri: 'u2' }] },
          safetyRatings: [{ category: 'X' }],
          finishReason: 'STOP',
          index: 0,
        },
      ],
      groundingNew: 1,
    });
    assert.deepEqual(fold.response(), {
      candidates: [
        {
          content: { role: 'model', parts: [{ text: 'a' }, { executableCode: { code: 'x' } }, { text: 'b' }] },
          finishReason: 'STOP',
          citationMetadata: { citationSources: [{ uri: 'u1' }, { uri: 'u2' }] },
          safetyRatings: [{ category: 'X' }],
          index: 0,
        },
      ],
      groundingNew: 1,
      modelVersion: 'm',
    });
    const blocked = new GeminiChunkFold();
    blocked.add({
      promptFeedback: { blockReason: 'SAFETY' },
      usageMetadata: { promptTokenCount: 3, totalTokenCount: 3 },
      responseId: 'r',
    });
    assert.deepEqual(blocked.response(), {
      promptFeedback: { blockReason: 'SAFETY' },
      usageMetadata: { promptTokenCount: 3, totalTokenCount: 3 },
      responseId: 'r',
    });
    const garbage = new GeminiChunkFold();
    for (const chunk of [null, 1, 'x', { candidates: 'no' }, { candidates: [null, { content: 'x' }] }])
      garbage.add(chunk);
    assert.deepEqual(garbage.response(), { candidates: [{ content: { role: 'model' }, index: 1 }] });
  });
});

describe('geminiEmbeddingsOf', () => {
  const body = JSON.stringify({
    object: 'list',
    data: [
      { object: 'embedding', index: 1, embedding: [0.5, 1] },
      { object: 'embedding', index: 0, embedding: [0.25, -1] },
    ],
    usage: { prompt_tokens: 2, total_tokens: 2 },
  });
  it("writes a vendor's OpenAI embeddings as Gemini's, in the order of the inputs", () => {
    assert.equal(geminiEmbeddingsOf(body, true), '{"embeddings":[{"values":[0.25,-1]},{"values":[0.5,1]}]}');
    const one = JSON.stringify({ data: [{ index: 0, embedding: [0.5] }] });
    assert.equal(geminiEmbeddingsOf(one, false), '{"embedding":{"values":[0.5]}}');
    const floats = Buffer.alloc(8);
    floats.writeFloatLE(0.5, 0);
    floats.writeFloatLE(-2, 4);
    assert.equal(
      geminiEmbeddingsOf(JSON.stringify({ data: [{ index: 0, embedding: floats.toString('base64') }] }), false),
      '{"embedding":{"values":[0.5,-2]}}',
    );
  });
  it('says undefined for a body without vectors', () => {
    assert.equal(geminiEmbeddingsOf('not json', true), undefined);
    assert.equal(geminiEmbeddingsOf('{"data":[{"embedding":["x"]}]}', true), undefined);
    assert.equal(geminiEmbeddingsOf(body, false), undefined, 'embedContent answers one vector');
  });
});

describe('the mock vendor through the Gemini encoder', () => {
  const http = createVendorHttp(loadConfig({}));
  const ctx = (): CallContext => ({
    requestId: 'r1',
    signal: new AbortController().signal,
    channel: { vendor: 'mock', baseUrl: '', apiKey: '' },
    upstreamModel: 'mock-chat',
    model: loadCatalog().get('mock-chat')!,
    log: pino({ level: 'silent' }),
    http,
  });
  const request = (extra: Partial<ChatCompletionRequest> = {}): ChatCompletionRequest => ({
    model: 'mock-chat',
    messages: [{ role: 'user', content: 'Say hello [mock:slow:0]' }],
    ...extra,
  });

  async function stream(chat: ChatCompletionRequest, form: GeminiStreamForm) {
    const encoder = new GeminiStreamEncoder({ model: 'gemini-2.5-flash', inputTokens: 7, form });
    let written = '';
    for await (const events of mockAdapter.streamChat!(chat, ctx())) written += encoder.encode(events).frames;
    written += encoder.end().frames + encoder.trailer;
    return { chunks: parseFrames(written, form), encoder };
  }

  it('answers text in both forms, with the usage the mock counted', async () => {
    for (const form of ['sse', 'array'] as const) {
      const { chunks, encoder } = await stream(request(), form);
      assert.ok(chunks.length >= 2);
      const sdkText = chunks.map((chunk) => Object.assign(new GenerateContentResponse(), chunk).text ?? '').join('');
      assert.ok(sdkText.length > 0);
      const last = chunks.at(-1)!;
      assert.equal(last.candidates[0].finishReason, 'STOP');
      assert.equal(last.usageMetadata.promptTokenCount, encoder.usage!.prompt_tokens);
      assert.equal(last.usageMetadata.candidatesTokenCount, encoder.usage!.completion_tokens);
    }
  });

  it('answers a tool call as one functionCall with its arguments as an object', async () => {
    const tools = [
      {
        type: 'function' as const,
        function: {
          name: 'get_weather',
          parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
      },
    ];
    const { chunks } = await stream(request({ tools, tool_choice: 'required' }), 'sse');
    const calls = partsOf(chunks).filter((part) => part.functionCall);
    assert.equal(calls.length, 1);
    assert.equal(calls[0]!.functionCall.name, 'get_weather');
    assert.equal(typeof calls[0]!.functionCall.args, 'object');
    assert.ok(calls[0]!.functionCall.id.length > 0);
  });

  it('answers several candidates when asked (n)', async () => {
    const { chunks } = await stream(request({ n: 2 }), 'sse');
    assert.deepEqual(
      chunks.at(-1)!.candidates.map((c: Json) => c.index),
      [0, 1],
    );
  });
});
