import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import { GenerateContentResponse } from '@google/genai';
import { pino } from 'pino';
import type { CatalogModel } from '../../shared/catalog.js';
import { loadConfig } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import type { GeminiEmbedJob, GeminiJob } from '../../shared/gemini.js';
import { countTextTokens } from '../../shared/tokens.js';
import { GeminiChunkFold } from '../../workers/answers/gemini-fold.js';
import { geminiAdapter, SKIP_THOUGHT_SIGNATURE } from '../../workers/vendors/gemini/index.js';
import { withSignedCalls } from '../../workers/vendors/gemini/native-gemini.js';
import type { CallContext, NativeGeminiChunk } from '../../workers/vendors/types.js';
import type { AnswerEvent } from '../../workers/answers/events.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';
import {
  FAKE_GEMINI_PIECES,
  FAKE_GEMINI_USAGE,
  fakeEmbedding,
  geminiError,
  startFakeGemini,
  type FakeGemini,
} from '../support/fake-gemini.js';
import { wireFixture } from '../support/fixtures.js';
import {
  assertShape,
  batchEmbedContentsResponseShape,
  countTokensResponseShape,
  embedContentResponseShape,
  generateContentResponseShape,
} from '../support/gemini-shapes.js';

type Json = Record<string, any>;

const http = createVendorHttp(loadConfig({}));
const KEY = 'AIzaSyTestKey0123456789abcdefghijklmno';
const MODEL: CatalogModel = {
  id: 'gemini-pro-alias',
  owned_by: 'google',
  capability: 'chat',
  created: 0,
  context_window: 1_048_576,
  max_output_tokens: 65_536,
  input_modalities: ['text'],
  supports_tools: true,
  routes: [{ vendor: 'google' }],
};

let fake: FakeGemini;

function context(baseUrl: string, upstreamModel = 'gemini-2.5-pro'): CallContext {
  return {
    requestId: 'req_native',
    signal: new AbortController().signal,
    channel: { vendor: 'google', baseUrl, apiKey: KEY },
    upstreamModel,
    model: MODEL,
    log: pino({ level: 'silent' }),
    http,
  };
}

/** A generate job as the api builds it: the client's body as written (its chat form is not read on this path). */
function job(gemini: Json, extra: Partial<GeminiJob> = {}): GeminiJob {
  return {
    gemini: gemini as GeminiJob['gemini'],
    chat: { model: MODEL.id, messages: [{ role: 'user', content: 'x' }] },
    model: MODEL.id,
    inputTokens: 5,
    ...extra,
  };
}

async function collect(job: GeminiJob, ctx: CallContext): Promise<NativeGeminiChunk[][]> {
  const batches: NativeGeminiChunk[][] = [];
  for await (const batch of geminiAdapter.nativeGemini!(job, ctx)) batches.push(batch);
  return batches;
}

/** Runs a stream, keeping what came before a failure; the failure, if any. */
async function collectUntilFailure(
  job: GeminiJob,
  ctx: CallContext,
): Promise<{ chunks: NativeGeminiChunk[]; error: unknown }> {
  const chunks: NativeGeminiChunk[] = [];
  try {
    for await (const batch of geminiAdapter.nativeGemini!(job, ctx)) chunks.push(...batch);
  } catch (error) {
    return { chunks, error };
  }
  return { chunks, error: undefined };
}

const answersOf = (chunks: NativeGeminiChunk[]) => chunks.flatMap((chunk) => chunk.answers);
const sent = (index = 0) => fake.requests[index]!;

before(async () => {
  fake = await startFakeGemini({ apiKey: KEY });
});
after(async () => {
  await fake.close();
  await http.close();
});
beforeEach(() => fake.reset());

describe('nativeGemini: the client request as written, the vendor chunks as sent', () => {
  it('sends the body untouched but for the model, always as streamGenerateContent?alt=sse under the upstream name', async () => {
    const body = {
      contents: [{ role: 'user', parts: [{ text: 'Hi' }] }],
      systemInstruction: { parts: [{ text: 'Be brief.' }] },
      safetySettings: [{ category: 'HARM_CATEGORY_HARASSMENT', threshold: 'BLOCK_NONE' }],
      generationConfig: { thinkingConfig: { thinkingBudget: 128, includeThoughts: true }, temperature: 0.2, topK: 3 },
      cachedContent: 'cachedContents/abc',
      tools: [{ googleSearch: {} }],
    };
    const batches = await collect(job({ ...body, model: 'models/gemini-pro-alias' }), context(fake.url));
    assert.equal(sent().path, '/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse');
    assert.equal(sent().headers['x-goog-api-key'], KEY);
    assert.deepEqual(sent().body, body, 'the client body, its own `model` left out (the URL names the model)');
    const chunks = batches.flat();
    assert.equal(chunks.length, FAKE_GEMINI_PIECES.length);
    for (const chunk of chunks) assert.deepEqual(JSON.parse(chunk.data), chunk.payload);
    assert.equal(
      answersOf(chunks)
        .filter((a) => a.type === 'text')
        .map((a) => (a as { text: string }).text)
        .join(''),
      FAKE_GEMINI_PIECES.join(''),
    );
    const usage = answersOf(chunks)
      .filter((a) => a.type === 'usage')
      .at(-1) as Extract<AnswerEvent, { type: 'usage' }>;
    assert.deepEqual(usage.usage, {
      prompt_tokens: 12,
      completion_tokens: 4,
      total_tokens: 16,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    });
    const start = answersOf(chunks).find((a) => a.type === 'start') as Extract<AnswerEvent, { type: 'start' }>;
    assert.equal(start.id, chunks[0]!.payload.responseId, "the answer's id is Gemini's responseId");
  });

  it('relays a recorded Gemini 3 stream byte for byte: thought signatures, usage and ids as Gemini wrote them', async () => {
    const lines = readFileSync(wireFixture('gemini-stream-text.chunks.jsonl'), 'utf8')
      .split('\n')
      .filter((line) => line.trim() !== '');
    fake.enqueue({ chunksFile: wireFixture('gemini-stream-text.chunks.jsonl'), chunkSize: 37 });
    const chunks = (
      await collect(
        job({ contents: [{ role: 'user', parts: [{ text: 'How many r in strawberry?' }] }] }),
        context(fake.url, 'gemini-3-pro-preview'),
      )
    ).flat();
    assert.deepEqual(
      chunks.map((chunk) => chunk.data),
      lines,
      'each chunk as written, even read in pieces of 37 bytes',
    );
    const fold = new GeminiChunkFold();
    for (const chunk of chunks) fold.add(chunk.payload);
    const body = fold.response() as Json;
    assertShape(generateContentResponseShape, body, 'the folded answer');
    for (const chunk of chunks) assertShape(generateContentResponseShape, chunk.payload, 'a relayed chunk');
    assert.equal(
      body.candidates[0].content.parts[0].thoughtSignature,
      JSON.parse(lines.at(-1)!).candidates[0].content.parts[0].thoughtSignature,
    );
    assert.equal(
      Object.assign(new GenerateContentResponse(), body).text,
      'There are **3** "r"s in strawberry.\n\nst**r**awbe**rr**y',
    );
    const usage = answersOf(chunks)
      .filter((a) => a.type === 'usage')
      .at(-1) as Extract<AnswerEvent, { type: 'usage' }>;
    assert.equal(usage.usage.completion_tokens, 23 + 185, 'thoughts are billed as output');
  });

  it('relays a function call with its signature, and its replay with the signature is accepted by Gemini 3', async () => {
    const tools = [
      {
        functionDeclarations: [
          { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
        ],
      },
    ];
    const first = (
      await collect(
        job({ contents: [{ role: 'user', parts: [{ text: 'Weather?' }] }], tools }),
        context(fake.url, 'gemini-3-pro-preview'),
      )
    ).flat();
    const callPart = (first[0]!.payload as Json).candidates[0].content.parts[0];
    assert.ok(fake.issuedSignatures.has(callPart.thoughtSignature));
    const calls = answersOf(first).filter((a) => a.type === 'tool-call');
    assert.equal(calls.length, 1);
    const history = [
      { role: 'user', parts: [{ text: 'Weather?' }] },
      { role: 'model', parts: [callPart] },
      { role: 'user', parts: [{ functionResponse: { name: 'get_weather', response: { tempC: 4 } } }] },
    ];
    const second = (await collect(job({ contents: history, tools }), context(fake.url, 'gemini-3-pro-preview'))).flat();
    assert.deepEqual((sent(1).body as Json).contents, history, 'a signed replay goes as written');
    assert.match(
      answersOf(second)
        .filter((a) => a.type === 'text')
        .map((a) => (a as { text: string }).text)
        .join(''),
      /Tool said/,
    );
  });

  it("signs a replayed step another vendor's model made (no signature) with Google's stand-in, and only that", async () => {
    const unsigned = [
      { role: 'user', parts: [{ text: 'Weather?' }] },
      {
        role: 'model',
        parts: [
          { text: 'Checking.' },
          { functionCall: { id: 'call_1', name: 'get_weather', args: { city: 'Oslo' } } },
          { functionCall: { name: 'get_weather', args: { city: 'Rome' } } },
        ],
      },
      {
        role: 'user',
        parts: [
          { functionResponse: { id: 'call_1', name: 'get_weather', response: { tempC: 4 } } },
          { functionResponse: { name: 'get_weather', response: { tempC: 20 } } },
        ],
      },
    ];
    const signed = withSignedCalls(unsigned);
    assert.equal((signed[1]!.parts as Json[])[1]!.thoughtSignature, SKIP_THOUGHT_SIGNATURE);
    assert.equal((signed[1]!.parts as Json[])[2]!.thoughtSignature, undefined, 'only the first call of the step');
    assert.equal((unsigned[1]!.parts[1] as Json).thoughtSignature, undefined, "the client's request is not changed");
    assert.equal(signed[0], unsigned[0]);
    const already = [{ role: 'model', parts: [{ functionCall: { name: 'f', args: {} }, thoughtSignature: 'sig' }] }];
    assert.equal(withSignedCalls(already), already, 'nothing to sign: the same array');
    await collect(
      job({ contents: unsigned, tools: [{ functionDeclarations: [{ name: 'get_weather' }] }] }),
      context(fake.url, 'gemini-3-pro-preview'),
    );
    assert.equal(((sent().body as Json).contents[1].parts[1] as Json).thoughtSignature, SKIP_THOUGHT_SIGNATURE);
  });

  it('answers a blocked prompt (promptFeedback, no candidates) as a finished, filtered answer', async () => {
    fake.enqueue({
      chunks: [
        {
          promptFeedback: { blockReason: 'SAFETY' },
          usageMetadata: { promptTokenCount: 8, totalTokenCount: 8 },
          modelVersion: 'gemini-2.5-pro',
          responseId: 'blocked1',
        },
      ],
    });
    const chunks = (
      await collect(job({ contents: [{ role: 'user', parts: [{ text: 'x' }] }] }), context(fake.url))
    ).flat();
    assert.deepEqual(
      answersOf(chunks).find((a) => a.type === 'finish'),
      { type: 'finish', choice: 0, reason: 'content_filter' },
    );
  });

  it("maps Gemini's refusals as the chat path does: a quota 429 retryable after RetryInfo, a 400 the client's", async () => {
    fake.enqueue({
      status: 429,
      json: geminiError(429, 'RESOURCE_EXHAUSTED', 'Quota exceeded.', [
        { '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '7s' },
      ]),
    });
    const limited = await collectUntilFailure(
      job({ contents: [{ role: 'user', parts: [{ text: 'x' }] }] }),
      context(fake.url),
    );
    assert.ok(limited.error instanceof GatewayError);
    assert.equal(limited.error.status, 429);
    assert.equal(limited.error.retryable, true);
    const refused = await collectUntilFailure(
      job({ contents: [{ role: 'user', parts: [{ text: '' }] }] }),
      context(fake.url),
    );
    assert.ok(refused.error instanceof GatewayError);
    assert.equal(refused.error.status, 400);
    assert.match(refused.error.message, /empty text parameter/);
    const badKey = await collectUntilFailure(job({ contents: [{ role: 'user', parts: [{ text: 'x' }] }] }), {
      ...context(fake.url),
      channel: { vendor: 'google', baseUrl: fake.url, apiKey: 'wrong' },
    });
    assert.ok(badKey.error instanceof GatewayError);
    assert.equal(badKey.error.status, 502, "a rejected key is the gateway's misconfiguration");
    assert.ok(!JSON.stringify(badKey.error.toWire()).includes('wrong'));
  });

  it('delivers what came before an error mid-stream, then fails; a stream cut before its finish ended early', async () => {
    const text = (t: string) => ({
      candidates: [{ content: { role: 'model', parts: [{ text: t }] }, index: 0 }],
      usageMetadata: FAKE_GEMINI_USAGE,
      responseId: 'r1',
    });
    fake.enqueue({
      chunks: [text('a'), geminiError(500, 'INTERNAL', 'An internal error has occurred.')],
      chunkDelayMs: 5,
    });
    const failed = await collectUntilFailure(
      job({ contents: [{ role: 'user', parts: [{ text: 'x' }] }] }),
      context(fake.url),
    );
    assert.equal(failed.chunks.length, 1);
    assert.ok(failed.error instanceof GatewayError);
    assert.equal(failed.error.status, 502, "the vendor's own failure, as every 5xx of it");
    assert.match(failed.error.message, /internal error/);
    // Closed cleanly, but no candidate ever finished: Gemini ends a stream only by closing it, after a finishReason.
    fake.enqueue({ chunks: [text('a'), text('b')] });
    const cut = await collectUntilFailure(
      job({ contents: [{ role: 'user', parts: [{ text: 'x' }] }] }),
      context(fake.url),
    );
    assert.equal(cut.chunks.length, 2);
    assert.ok(cut.error instanceof GatewayError);
    assert.equal(cut.error.code, 'vendor_stream_incomplete');
    assert.equal(cut.error.retryable, true);
    fake.enqueue({ chunks: [text('a')], destroyAtEnd: true });
    const dropped = await collectUntilFailure(
      job({ contents: [{ role: 'user', parts: [{ text: 'x' }] }] }),
      context(fake.url),
    );
    assert.ok(dropped.error instanceof GatewayError);
    assert.equal(dropped.error.retryable, true, 'a dropped connection is retried when nothing went out');
  });
});

/**
 * A one-route stand-in for the Gemini methods the strict fake does not serve (countTokens, embedContent): it records
 * and answers.
 */
async function startRecorder(answer: (path: string, body: Json) => { status: number; json: unknown }) {
  const seen: Array<{ path: string; body: Json; key: string | undefined }> = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let raw = '';
    req.on('data', (piece: Buffer) => (raw += piece.toString('utf8')));
    req.on('end', () => {
      const body = JSON.parse(raw) as Json;
      seen.push({ path: req.url ?? '', body, key: req.headers['x-goog-api-key'] as string | undefined });
      const { status, json } = answer(req.url ?? '', body);
      res.writeHead(status, { 'content-type': 'application/json; charset=UTF-8' });
      res.end(JSON.stringify(json));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('countGeminiTokens: Gemini counts its own', () => {
  it(
    'sends the client body to :countTokens, its generateContentRequest naming the upstream model, and answers as ' +
      'Gemini did',
    async () => {
      const answer = {
        totalTokens: 31,
        cachedContentTokenCount: 0,
        promptTokensDetails: [{ modality: 'TEXT', tokenCount: 31 }],
      };
      const recorder = await startRecorder(() => ({ status: 200, json: answer }));
      try {
        const contents = [{ role: 'user', parts: [{ text: 'Count me' }] }];
        const counted = JSON.parse(await geminiAdapter.countGeminiTokens!(job({ contents }), context(recorder.url)));
        assertShape(countTokensResponseShape, counted);
        assert.deepEqual(counted, answer);
        assert.equal(recorder.seen[0]!.path, '/v1beta/models/gemini-2.5-pro:countTokens');
        assert.equal(recorder.seen[0]!.key, KEY);
        assert.deepEqual(recorder.seen[0]!.body, { contents });
        const inner = { model: 'models/gemini-pro-alias', contents, systemInstruction: { parts: [{ text: 's' }] } };
        await geminiAdapter.countGeminiTokens!(
          job({ generateContentRequest: inner } as unknown as Json),
          context(recorder.url),
        );
        assert.deepEqual(recorder.seen[1]!.body, {
          generateContentRequest: { ...inner, model: 'models/gemini-2.5-pro' },
        });
      } finally {
        await recorder.close();
      }
    },
  );

  it("maps Gemini's refusal of a count as any of its refusals", async () => {
    const recorder = await startRecorder(() => ({
      status: 400,
      json: geminiError(400, 'INVALID_ARGUMENT', 'contents is not specified'),
    }));
    try {
      await assert.rejects(
        geminiAdapter.countGeminiTokens!(job({ contents: [] }), context(recorder.url)),
        (error: unknown) =>
          error instanceof GatewayError && error.status === 400 && /contents is not specified/.test(error.message),
      );
    } finally {
      await recorder.close();
    }
  });
});

describe('embedGemini: Gemini embeds its own', () => {
  const texts = ['first text', 'second text'];
  const embedJob = (batch: boolean, gemini: Json): GeminiEmbedJob => ({
    gemini,
    batch,
    embedding: { model: MODEL.id, input: batch ? texts : texts[0]! },
  });

  it('sends :batchEmbedContents as written, each request naming the upstream model, and answers as Gemini did', async () => {
    const requests = texts.map((text) => ({
      model: 'models/gemini-pro-alias',
      content: { parts: [{ text }] },
      taskType: 'RETRIEVAL_DOCUMENT',
      outputDimensionality: 4,
    }));
    const answer = await geminiAdapter.embedGemini!(
      embedJob(true, { requests }),
      context(fake.url, 'text-embedding-004'),
    );
    assert.equal(sent().path, '/v1beta/models/text-embedding-004:batchEmbedContents');
    assert.deepEqual(sent().body, {
      requests: requests.map((request) => ({ ...request, model: 'models/text-embedding-004' })),
    });
    assertShape(batchEmbedContentsResponseShape, JSON.parse(answer.body));
    assert.deepEqual(
      JSON.parse(answer.body),
      { embeddings: texts.map((text) => ({ values: fakeEmbedding(text, 4) })) },
      "Gemini's answer as it sent it",
    );
    const tokens = texts.reduce((sum, text) => sum + countTextTokens(text), 0);
    assert.deepEqual(
      answer.usage,
      { prompt_tokens: tokens, completion_tokens: 0, total_tokens: tokens },
      "billed by the gateway's count: Gemini says none",
    );
  });

  it('sends :embedContent as written and answers its one embedding', async () => {
    const recorder = await startRecorder(() => ({ status: 200, json: { embedding: { values: [0.1, 0.2] } } }));
    try {
      const body = { content: { parts: [{ text: texts[0] }] }, taskType: 'RETRIEVAL_QUERY' };
      const answer = await geminiAdapter.embedGemini!(
        embedJob(false, body),
        context(recorder.url, 'text-embedding-004'),
      );
      assert.equal(recorder.seen[0]!.path, '/v1beta/models/text-embedding-004:embedContent');
      assert.deepEqual(recorder.seen[0]!.body, body, 'no model of its own: none added');
      assert.equal(answer.body, '{"embedding":{"values":[0.1,0.2]}}');
      assertShape(embedContentResponseShape, JSON.parse(answer.body));
      await geminiAdapter.embedGemini!(
        embedJob(false, { ...body, model: 'models/alias' }),
        context(recorder.url, 'text-embedding-004'),
      );
      assert.equal(recorder.seen[1]!.body.model, 'models/text-embedding-004');
    } finally {
      await recorder.close();
    }
  });

  it('refuses an answer without embeddings as malformed', async () => {
    const recorder = await startRecorder(() => ({ status: 200, json: { nothing: true } }));
    try {
      await assert.rejects(
        geminiAdapter.embedGemini!(embedJob(false, { content: { parts: [{ text: 'x' }] } }), context(recorder.url)),
        (error: unknown) => error instanceof GatewayError && error.code === 'vendor_bad_response',
      );
    } finally {
      await recorder.close();
    }
  });
});
