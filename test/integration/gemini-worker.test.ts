/*
 * The worker's half of Google's Gemini API (workers/gemini-run.ts) on a real
 * Redis: a job's answer published on the reply channel as the api hears it,
 * for a chat vendor (the mock, the fake OpenAI: its answer events written as
 * Gemini's chunks) and for Gemini itself (the fake Gemini: its chunks relayed
 * as sent), in both stream forms and as one body, with what the meter, the
 * request log and the response cache get.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { GenerateContentResponse } from '@google/genai';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { loadCatalog, type CatalogModel } from '../../shared/catalog.js';
import { loadConfig } from '../../shared/config.js';
import type { GeminiEmbedJob, GeminiJob, GeminiStreamForm } from '../../shared/gemini.js';
import { chatToolName } from '../../shared/messages-tools.js';
import { createRedis } from '../../shared/redis.js';
import { decodeReply, type ReplyMessage } from '../../shared/reply.js';
import type { Protocol } from '../../shared/vendor-definitions.js';
import { countGeminiTokens, embedGemini, runGemini } from '../../workers/gemini-run.js';
import { ReplyPublisher } from '../../workers/reply-publisher.js';
import { Meter } from '../../workers/settlement.js';
import type { CallContext } from '../../workers/vendors/types.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';
import {
  FAKE_GEMINI_TEXT,
  fakeEmbedding,
  fakeTokenCount,
  startFakeGemini,
  type FakeGemini,
} from '../support/fake-gemini.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { FAKE_REPLY_TEXT } from '../support/fake-openai-defaults.js';
import { startPrivateRedis, type PrivateRedis } from '../support/redis-server.js';
import { freshRedis, paidAccountKey, requestRecord, startGateway, type GatewayProcess } from '../support/gateway.js';
import {
  assertShape,
  batchEmbedContentsResponseShape,
  countTokensResponseShape,
  embedContentResponseShape,
  generateContentResponseShape,
} from '../support/gemini-shapes.js';

type Json = Record<string, any>;

const GEMINI_KEY = 'AIzaSyWorkerTestKey0123456789abcdefghij';
const OPENAI_KEY = 'sk-gemini-worker-0123456789';
const http = createVendorHttp(loadConfig({}));
const catalog = loadCatalog();

const model = (id: string): CatalogModel => ({ ...(catalog.get('mock-chat') as CatalogModel), id });

describe('the Gemini pipeline (workers/gemini-run.ts) publishing on a real Redis', () => {
  let server: PrivateRedis;
  let redis: Redis;
  let subscriber: Redis;
  let gemini: FakeGemini;
  let openai: FakeOpenAI;
  const heard = new Map<string, ReplyMessage[]>();
  let jobs = 0;

  before(async () => {
    server = await startPrivateRedis({ aof: false });
    redis = createRedis(server.url);
    subscriber = new Redis(server.url);
    subscriber.on('message', (channel: string, message: string) => {
      const reply = decodeReply(message);
      if (reply) heard.set(channel, [...(heard.get(channel) ?? []), reply]);
    });
    gemini = await startFakeGemini({ apiKey: GEMINI_KEY });
    openai = await startFakeOpenAI({ apiKey: OPENAI_KEY });
  });
  after(async () => {
    await gemini?.close();
    await openai?.close();
    await http.close();
    redis?.disconnect();
    subscriber?.disconnect();
    await server?.remove();
  });
  beforeEach(() => {
    gemini.reset();
    openai.reset();
  });

  function context(protocol: Protocol, upstreamModel: string): CallContext {
    const channel =
      protocol === 'gemini'
        ? { vendor: 'google', baseUrl: gemini.url, apiKey: GEMINI_KEY }
        : protocol === 'openai'
          ? { vendor: 'openai', baseUrl: openai.url, apiKey: OPENAI_KEY }
          : { vendor: 'mock', baseUrl: '', apiKey: '' };
    return {
      requestId: `req_${jobs}`,
      signal: new AbortController().signal,
      channel,
      upstreamModel,
      model: model(upstreamModel),
      log: pino({ level: 'silent' }),
      http,
    };
  }

  const weather = {
    functionDeclarations: [
      {
        name: 'weather.lookup',
        description: 'Weather by city',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    ],
  };

  /** A job as the api would build it: the client's Gemini body and its chat form. */
  function job(options: { form?: GeminiStreamForm; tools?: boolean; text?: string } = {}): GeminiJob {
    const text = options.text ?? 'Say hello';
    // Named as the api's translation names it: chat takes no `.` in a function name.
    const chatTools = options.tools
      ? [
          {
            type: 'function' as const,
            function: {
              name: chatToolName('weather.lookup'),
              description: 'Weather by city',
              parameters: weather.functionDeclarations[0]!.parameters,
            },
          },
        ]
      : undefined;
    return {
      gemini: {
        contents: [{ role: 'user', parts: [{ text }] }],
        ...(options.tools ? { tools: [weather], toolConfig: { functionCallingConfig: { mode: 'ANY' } } } : {}),
      },
      chat: {
        model: 'client-model',
        messages: [{ role: 'user', content: text }],
        ...(chatTools ? { tools: chatTools, tool_choice: 'required' as const } : {}),
      },
      model: 'gemini-client-name',
      inputTokens: 9,
      ...(options.form ? { form: options.form } : {}),
    };
  }

  /** Runs one job as the pipeline does; what the api heard on its channel, and the meter. */
  async function runJob(protocol: Protocol, upstream: string, gem: GeminiJob, streams: boolean, keep = false) {
    const channel = `sy:test:gemini:${++jobs}`;
    await subscriber.subscribe(channel);
    const publisher = new ReplyPublisher(redis, channel, `job-${jobs}`, { stream: streams });
    const produced = new Meter();
    const order: string[] = [];
    const body = await runGemini({
      protocol,
      job: gem,
      ctx: context(protocol, upstream),
      publisher,
      clientStreams: streams,
      produced,
      vendorDone: async () => void order.push('vendorDone'),
      keep,
      beforeEnd: async () => void order.push('beforeEnd'),
    });
    if (body !== undefined) await publisher.done(body);
    // The end is published last: once it is heard, so is everything before it.
    for (let waited = 0; !(heard.get(channel) ?? []).some((reply) => reply.kind === 'done'); waited += 10) {
      assert.ok(waited < 5_000, 'the end of the answer is heard');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const replies = heard.get(channel) ?? [];
    const frames = replies
      .filter((reply) => reply.kind === 'chunk')
      .map((reply) => reply.payload)
      .join('');
    // The end's payload: the array form's `]` (the api writes it after the chunks), nothing for ?alt=sse.
    const trailer = replies.find((reply) => reply.kind === 'done')!.payload;
    return { body, produced, replies, frames, trailer, order };
  }

  const sseChunks = (frames: string): Json[] => {
    assert.ok(frames.endsWith('\n\n'));
    return frames
      .slice(0, -2)
      .split('\n\n')
      .map((frame) => {
        assert.match(frame, /^data: [^\n]+$/);
        return JSON.parse(frame.slice(6)) as Json;
      });
  };
  const textOf = (chunks: Json[]) =>
    chunks.map((chunk) => Object.assign(new GenerateContentResponse(), chunk).text ?? '').join('');

  for (const [protocol, upstream, expected] of [
    ['mock', 'mock-chat', undefined],
    ['openai', 'gpt-4o-mini', FAKE_REPLY_TEXT],
    ['gemini', 'gemini-2.5-flash', FAKE_GEMINI_TEXT],
  ] as const) {
    describe(`on ${protocol}`, () => {
      it('streams ?alt=sse chunks, ends with an empty done, and meters what the vendor said', async () => {
        const { frames, replies, produced, order } = await runJob(protocol, upstream, job({ form: 'sse' }), true);
        const chunks = sseChunks(frames);
        if (expected !== undefined) assert.equal(textOf(chunks), expected);
        else assert.ok(textOf(chunks).length > 0);
        const last = chunks.at(-1)!;
        assert.equal(last.candidates[0].finishReason, 'STOP');
        assert.ok(last.usageMetadata.promptTokenCount > 0);
        assert.deepEqual(replies.at(-1), {
          kind: 'done',
          jobId: replies.at(-1)!.jobId,
          seq: replies.at(-1)!.seq,
          payload: '',
        });
        assert.ok(produced.usage && produced.usage.prompt_tokens === last.usageMetadata.promptTokenCount);
        assert.equal(produced.answerId, last.responseId, 'the request log names the response id the client got');
        assert.deepEqual(order, ['vendorDone']);
        for (const chunk of chunks) assert.equal(chunk.responseId, last.responseId);
        if (protocol !== 'gemini') for (const chunk of chunks) assert.equal(chunk.modelVersion, 'gemini-client-name');
      });

      it('streams the default form as one JSON array, and keeps both forms for the cache before the end goes out', async () => {
        const {
          frames: elements,
          trailer,
          produced,
          order,
        } = await runJob(protocol, upstream, job({ form: 'array' }), true, true);
        assert.equal(trailer, ']', "the stream's end carries the array's close");
        const frames = elements + trailer;
        assert.ok(frames.startsWith('[{') && frames.endsWith('}]'));
        const chunks = JSON.parse(frames) as Json[];
        assert.equal(frames.split(',\r\n{').length, chunks.length);
        assert.deepEqual(order, ['vendorDone', 'beforeEnd']);
        const cached = produced.cacheable!;
        assert.deepEqual(
          cached.events!.map((event) => JSON.parse(event.d)),
          chunks,
          'the stored events are the chunks as sent',
        );
        const body = JSON.parse(cached.body) as Json;
        assert.equal(Object.assign(new GenerateContentResponse(), body).text, textOf(chunks));
        assert.deepEqual(body.usageMetadata, chunks.at(-1)!.usageMetadata);
      });

      it('answers a client that asked for no stream with the one body the chunks fold to', async () => {
        const { body, frames, replies, produced } = await runJob(protocol, upstream, job(), false);
        assert.equal(frames, '', 'nothing streamed');
        assert.equal(replies.at(-1)!.kind, 'done');
        const parsed = JSON.parse(body!) as Json;
        assert.equal(parsed.candidates.length, 1);
        assert.equal(parsed.candidates[0].content.parts.length, 1, 'the text in one part');
        if (expected !== undefined) assert.equal(parsed.candidates[0].content.parts[0].text, expected);
        assert.equal(parsed.candidates[0].finishReason, 'STOP');
        assert.equal(produced.answerId, parsed.responseId);
      });

      it('answers a function call whole, under the name the client declared, with an id', async () => {
        const { frames } = await runJob(
          protocol,
          upstream,
          job({ form: 'sse', tools: true, text: 'Weather in Oslo?' }),
          true,
        );
        const calls = sseChunks(frames).flatMap(
          (chunk) => Object.assign(new GenerateContentResponse(), chunk).functionCalls ?? [],
        );
        assert.equal(calls.length, 1);
        assert.equal(calls[0]!.name, 'weather.lookup');
        assert.equal(typeof calls[0]!.args, 'object');
        if (protocol !== 'gemini') assert.ok((calls[0]!.id ?? '').length > 0);
      });
    });
  }

  it("relays Gemini's chunks byte for byte (thought signatures included)", async () => {
    const { frames } = await runJob(
      'gemini',
      'gemini-2.5-flash',
      job({ form: 'sse', tools: true, text: 'Weather in Oslo?' }),
      true,
    );
    const relayed = frames
      .slice(0, -2)
      .split('\n\n')
      .map((frame) => frame.slice('data: '.length));
    const signature = JSON.parse(relayed[0]!).candidates[0].content.parts[0].thoughtSignature as string;
    assert.ok(gemini.issuedSignatures.has(signature));
    assert.equal(gemini.requests[0]!.path, '/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse');
  });

  it(
    'counts tokens at Gemini for a Gemini model (its answer as sent), and with the gateway tokenizer on a chat ' +
      'vendor',
    async () => {
      const counted = JSON.parse(await countGeminiTokens('mock', job(), context('mock', 'mock-chat')));
      assert.deepEqual(Object.keys(counted), ['totalTokens']);
      assert.ok(counted.totalTokens > 0);
      const body = { contents: [{ role: 'user', parts: [{ text: 'Count these words' }] }] };
      const native = JSON.parse(
        await countGeminiTokens('gemini', { ...job(), gemini: body }, context('gemini', 'gemini-2.5-flash')),
      );
      assert.deepEqual(native, {
        totalTokens: fakeTokenCount('Count these words'),
        promptTokensDetails: [{ modality: 'TEXT', tokenCount: fakeTokenCount('Count these words') }],
      });
      assert.equal(gemini.requests[0]!.path, '/v1beta/models/gemini-2.5-flash:countTokens');
      assert.deepEqual(gemini.requests[0]!.body, body);
    },
  );

  it("embeds on a chat vendor and answers in Gemini's shape, billed by the usage it said", async () => {
    const embed: GeminiEmbedJob = {
      gemini: { requests: [] },
      embedding: { model: 'x', input: ['one', 'two'] },
      batch: true,
    };
    const produced = new Meter();
    const body = JSON.parse(await embedGemini('mock', embed, context('mock', 'mock-embed'), produced, true));
    assert.equal(body.embeddings.length, 2);
    assert.ok(
      body.embeddings.every((embedding: Json) => Array.isArray(embedding.values) && embedding.values.length > 0),
    );
    assert.ok(produced.usage!.prompt_tokens > 0);
    assert.equal(produced.cacheable!.body, JSON.stringify(body));
    const one: GeminiEmbedJob = {
      gemini: { content: { parts: [{ text: 'one' }] }, taskType: 'RETRIEVAL_QUERY' },
      embedding: { model: 'x', input: ['one'] },
      batch: false,
    };
    const single = JSON.parse(await embedGemini('gemini', one, context('gemini', 'text-embedding-004'), new Meter()));
    assert.deepEqual(single, { embedding: { values: fakeEmbedding('one') } });
    assert.equal(gemini.requests.at(-1)!.path, '/v1beta/models/text-embedding-004:embedContent');
    const batch: GeminiEmbedJob = {
      gemini: { requests: [{ model: 'models/alias', content: { parts: [{ text: 'one' }] } }] },
      embedding: { model: 'x', input: ['one'] },
      batch: true,
    };
    const native = JSON.parse(await embedGemini('gemini', batch, context('gemini', 'text-embedding-004'), new Meter()));
    assert.deepEqual(native, { embeddings: [{ values: fakeEmbedding('one') }] });
  });
});

/*
 * The same pipeline behind the api (H1's half): requests in Google's dialect to a gateway whose vendors are the
 * strict fakes, read with nothing but fetch, each answer checked against Google's published shapes, and the
 * request's record (billed, named by the response id the client got).
 */
describe('Gemini requests through a gateway: the mock, an OpenAI model (translated), a Gemini model (native)', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let key: string;
  let gemini: FakeGemini;
  let openai: FakeOpenAI;

  before(async () => {
    [gemini, openai] = await Promise.all([
      startFakeGemini({ apiKey: GEMINI_KEY }),
      startFakeOpenAI({ apiKey: OPENAI_KEY }),
    ]);
    const fresh = await freshRedis(3);
    redis = fresh.redis;
    key = (await paidAccountKey(redis, 50_000_000)).key;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: OPENAI_KEY,
        OPENAI_BASE_URL: openai.url,
        GEMINI_API_KEY: GEMINI_KEY,
        GEMINI_BASE_URL: gemini.url,
        MOCK_VENDOR: 'on',
      },
    });
  });
  after(async () => {
    await gateway?.stop();
    await Promise.all([gemini?.close(), openai?.close()]);
    redis?.disconnect();
  });

  const post = (path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: { 'x-goog-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const ask = (text: string, extra: Json = {}) => ({ contents: [{ role: 'user', parts: [{ text }] }], ...extra });
  const requestIdOf = (response: Response) =>
    response.headers.get('x-request-id') ?? response.headers.get('request-id') ?? '';
  const sse = (text: string) => {
    assert.ok(text.endsWith('\n\n'), 'the stream ends after a whole event');
    return text
      .slice(0, -2)
      .split('\n\n')
      .map(
        (frame) =>
          assertShape(
            generateContentResponseShape,
            JSON.parse(frame.replace(/^data: /, '')),
            'an ?alt=sse chunk',
          ) as Json,
      );
  };
  const array = (text: string) =>
    (JSON.parse(text) as Json[]).map(
      (chunk) => assertShape(generateContentResponseShape, chunk, 'an array element') as Json,
    );
  const reader = (chunks: Json[]) => ({
    text: chunks.map((chunk) => Object.assign(new GenerateContentResponse(), chunk).text ?? '').join(''),
    calls: chunks.flatMap((chunk) => Object.assign(new GenerateContentResponse(), chunk).functionCalls ?? []),
    last: chunks.at(-1)!,
  });

  for (const [name, model, text] of [
    ['the mock', 'mock-chat', 'Mock reply to: "Say hello"'],
    ['an OpenAI model', 'gpt-4o-mini', FAKE_REPLY_TEXT],
    ['a Gemini model', 'gemini-2.5-flash', FAKE_GEMINI_TEXT],
  ] as const) {
    it(`answers on ${name} in both stream forms and as one body, billed under the response id`, async () => {
      const streamed = await post(`/v1beta/models/${model}:streamGenerateContent?alt=sse`, ask('Say hello'));
      assert.equal(streamed.status, 200);
      assert.match(streamed.headers.get('content-type') ?? '', /^text\/event-stream/);
      const events = reader(sse(await streamed.text()));
      assert.equal(events.text, text);
      assert.equal(events.last.candidates[0].finishReason, 'STOP');
      assert.ok(events.last.usageMetadata.promptTokenCount > 0 && events.last.usageMetadata.candidatesTokenCount > 0);

      const arrayed = await post(`/v1beta/models/${model}:streamGenerateContent`, ask('Say hello'));
      assert.equal(arrayed.status, 200);
      const raw = await arrayed.text();
      assert.ok(raw.startsWith('[{') && raw.endsWith('}]'), 'one JSON array');
      assert.equal(reader(array(raw)).text, text);

      const plain = await post(`/v1beta/models/${model}:generateContent`, ask('Say hello'));
      assert.equal(plain.status, 200);
      const body = assertShape(generateContentResponseShape, await plain.json(), 'the plain answer') as Json;
      assert.deepEqual(body.candidates[0].content.parts, [{ text }], 'the text in one part');
      const record = await requestRecord(gateway.url, key, requestIdOf(plain));
      assert.equal(record.endpoint, 'gemini.generate');
      assert.equal(record.status, 'completed');
      assert.equal(record.answer_id, body.responseId);
      assert.equal(record.input_tokens, body.usageMetadata.promptTokenCount);
      if (model !== 'mock-chat') assert.ok(record.cost_micros > 0, 'billed');
    });
  }

  it(
    'runs a function call round trip on an OpenAI model: the call under the declared name with its id, the result ' +
      'back as a tool message',
    async () => {
      const tools = [
        {
          functionDeclarations: [
            {
              name: 'fs.read_file',
              description: 'Reads a file',
              parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
            },
          ],
        },
      ];
      const first = await post(
        '/v1beta/models/gpt-4o-mini:streamGenerateContent?alt=sse',
        ask('Read a.txt', { tools }),
      );
      const { calls } = reader(sse(await first.text()));
      assert.equal(calls.length, 1);
      assert.equal(calls[0]!.name, 'fs.read_file');
      assert.ok(calls[0]!.id);
      const history = [
        { role: 'user', parts: [{ text: 'Read a.txt' }] },
        { role: 'model', parts: [{ functionCall: calls[0] }] },
        {
          role: 'user',
          parts: [{ functionResponse: { id: calls[0]!.id, name: 'fs.read_file', response: { content: 'hello' } } }],
        },
      ];
      const second = await post('/v1beta/models/gpt-4o-mini:generateContent', { contents: history, tools });
      assert.equal(second.status, 200);
      const sent = openai.requests.at(-1)!.body as Json;
      const toolMessage = (sent.messages as Json[]).find((message) => message.role === 'tool')!;
      assert.equal(toolMessage.tool_call_id, calls[0]!.id);
    },
  );

  it('keeps a Gemini 3 thought signature across turns on a Gemini model: relayed as sent, replayed as written', async () => {
    const tools = [
      {
        functionDeclarations: [
          { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
        ],
      },
    ];
    const first = await post(
      '/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse',
      ask('Weather?', { tools }),
    );
    const chunks = sse(await first.text());
    const callPart = chunks
      .flatMap((chunk) => chunk.candidates?.[0]?.content?.parts ?? [])
      .find((part: Json) => part.functionCall) as Json;
    assert.ok(gemini.issuedSignatures.has(callPart.thoughtSignature), 'the signature Gemini issued, untouched');
    const history = [
      { role: 'user', parts: [{ text: 'Weather?' }] },
      { role: 'model', parts: [callPart] },
      { role: 'user', parts: [{ functionResponse: { name: 'get_weather', response: { tempC: 4 } } }] },
    ];
    const second = await post('/v1beta/models/gemini-3-pro-preview:generateContent', { contents: history, tools });
    assert.equal(second.status, 200, await second.clone().text());
    assert.deepEqual((gemini.requests.at(-1)!.body as Json).contents, history, 'the client body as written');
  });

  it(
    'counts tokens at Gemini for a Gemini model and with the gateway tokenizer elsewhere; embeds natively and ' +
      'translated',
    async () => {
      const counted = await post('/v1beta/models/gemini-2.5-flash:countTokens', ask('Count these words'));
      assert.deepEqual(assertShape(countTokensResponseShape, await counted.json()), {
        totalTokens: fakeTokenCount('Count these words'),
        promptTokensDetails: [{ modality: 'TEXT', tokenCount: fakeTokenCount('Count these words') }],
      });
      const local = await post('/v1beta/models/gpt-4o-mini:countTokens', ask('Count these words'));
      const localCount = assertShape(countTokensResponseShape, await local.json()) as Json;
      assert.ok(localCount.totalTokens > 0);
      const countRecord = await requestRecord(gateway.url, key, requestIdOf(local));
      assert.equal(countRecord.cost_micros, 0, 'a count is billed nothing');

      const native = await post('/v1beta/models/text-embedding-004:embedContent', {
        content: { parts: [{ text: 'one' }] },
      });
      assert.deepEqual(assertShape(embedContentResponseShape, await native.json()), {
        embedding: { values: fakeEmbedding('one') },
      });
      const translated = await post('/v1beta/models/mock-embedding:batchEmbedContents', {
        requests: ['one', 'two'].map((text) => ({ model: 'models/mock-embedding', content: { parts: [{ text }] } })),
      });
      const batch = assertShape(batchEmbedContentsResponseShape, await translated.json()) as Json;
      assert.equal(batch.embeddings.length, 2);
    },
  );

  it(
    'ends a Gemini stream that failed after its first chunk with an error element, the job failed and billed for ' +
      'what was produced',
    async () => {
      const chunk = {
        candidates: [{ content: { role: 'model', parts: [{ text: 'partial' }] }, index: 0 }],
        usageMetadata: { promptTokenCount: 5, candidatesTokenCount: 1, totalTokenCount: 6 },
        modelVersion: 'gemini-2.5-flash',
        responseId: 'cut-1',
      };
      gemini.enqueue({ chunks: [chunk], destroyAtEnd: true });
      const response = await post('/v1beta/models/gemini-2.5-flash:streamGenerateContent', ask('Say hello'));
      assert.equal(response.status, 200);
      const elements = JSON.parse(await response.text()) as Json[];
      assert.equal(elements[0]!.candidates[0].content.parts[0].text, 'partial');
      assert.equal(typeof elements.at(-1)!.error?.code, 'number', "Google's error element closes the array");
      const record = await requestRecord(gateway.url, key, requestIdOf(response));
      assert.equal(record.status, 'failed');
      assert.equal(record.input_tokens, 5, "billed by Gemini's own count of what it produced");
    },
  );
});
