import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import {
  GoogleGenAI,
  ThinkingLevel,
  type Content,
  type FunctionDeclaration,
  type GenerateContentResponse as SdkResponse,
} from '@google/genai';
import { paidAccountKey, waitFor, type GatewayProcess } from '../support/gateway.js';
import type { FakeOpenAI } from '../support/fake-openai.js';
import { FAKE_REPLY_TEXT, FAKE_TOOL_CALL_ID } from '../support/fake-openai-defaults.js';
import {
  FAKE_ANTHROPIC_TEXT,
  FAKE_ANTHROPIC_TOOL_USE_ID,
  FAKE_THINKING_TEXT,
  type FakeAnthropic,
} from '../support/fake-anthropic.js';
import { FAKE_GEMINI_TEXT, fakeEmbedding, fakeTokenCount, type FakeGemini } from '../support/fake-gemini.js';
import { startVendorGateway, type VendorGateway } from '../support/vendor-gateway.js';
import {
  assertShape,
  batchEmbedContentsResponseShape,
  countTokensResponseShape,
  embedContentResponseShape,
  generateContentResponseShape,
  type GenerateContentResponse,
} from '../support/gemini-shapes.js';
import { createFakePng } from '../support/fake-bfl.js';
import { usageRows } from '../support/record.js';

/**
 * Google's Gemini API served by the gateway, spoken by Google's own SDK (`@google/genai`, which calls
 * `/v1/models/{model}:{method}`; `apiVersion: 'v1beta'` for the spelling Gemini CLI and older SDKs use) and by
 * plain HTTP where the SDK does not go (the streamed JSON array, `:embedContent`). Three vendors behind it, each a
 * strict fake: an OpenAI model and an Anthropic model (the request translated), a Gemini model (passed through as
 * written; the fake records what arrived). Every body the gateway answers is checked against Google's published
 * shapes (`gemini-shapes.ts`), every request billed and logged under its key. The keys, the model list and the
 * errors are `gemini-access.test.ts`.
 */

const GEMINI_KEY = 'gemini-test-key';
const weather: FunctionDeclaration = {
  name: 'get_weather',
  description: 'The weather in a city.',
  parametersJsonSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
const ask = (text: string): Content[] => [{ role: 'user', parts: [{ text }] }];

/**
 * The three vendors: a model of each, the text its fake answers, the id its fake gives a tool call (none: Gemini gives
 * none).
 */
const vendors = [
  {
    vendor: 'openai',
    model: 'gpt-4o-mini',
    text: FAKE_REPLY_TEXT,
    callId: FAKE_TOOL_CALL_ID as string | undefined,
    embedding: 'text-embedding-3-small' as string | undefined,
  },
  {
    vendor: 'anthropic',
    model: 'claude-sonnet-4-6',
    text: FAKE_ANTHROPIC_TEXT,
    callId: FAKE_ANTHROPIC_TOOL_USE_ID as string | undefined,
    embedding: undefined,
  },
  {
    vendor: 'google',
    model: 'gemini-2.5-flash',
    text: FAKE_GEMINI_TEXT,
    callId: undefined,
    embedding: 'gemini-embedding-001',
  },
] as const;

describe("Google's Gemini API with the official @google/genai SDK against strict vendor fakes", () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let redisUrl: string;
  let key: { id: string; key: string };
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let gemini: FakeGemini;
  let vendorGateway: VendorGateway;
  /** Every answer the SDK got, as it came over the wire: what the shapes are checked on. */
  const seen: Array<{ url: string; status: number; text: Promise<string> }> = [];
  let ai: GoogleGenAI;
  let aiBeta: GoogleGenAI;

  const recordingFetch: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    seen.push({
      url: String(input instanceof Request ? input.url : input),
      status: response.status,
      text: response.clone().text(),
    });
    return response;
  };
  const sdk = (apiKey: string, apiVersion?: string) =>
    new GoogleGenAI({
      apiKey,
      ...(apiVersion ? { apiVersion } : {}),
      httpOptions: { baseUrl: gateway.url, fetch: recordingFetch, timeout: 20_000 },
    });

  /** The last answer the SDK got: its URL, status and body text as sent (JSON, or SSE events for a stream). */
  async function lastWire(): Promise<{ url: string; status: number; text: string }> {
    const last = seen.at(-1)!;
    return { url: last.url, status: last.status, text: await last.text };
  }
  /** An SSE body's events, each of `data:` lines only (as Google writes them), parsed. */
  const sseEvents = (text: string) =>
    text
      .split(/\r?\n\r?\n/)
      .filter((event) => event.trim() !== '')
      .map((event) => {
        assert.match(event, /^data: /, `an SSE event of data lines only: ${event}`);
        return JSON.parse(event.replace(/^data: /gm, '')) as unknown;
      });

  before(async () => {
    vendorGateway = await startVendorGateway({
      db: 9,
      gemini: { apiKey: GEMINI_KEY },
      env: {
        MODEL_ALIASES: 'gemini-2.5-pro=gpt-4o-mini',
        JOB_ATTEMPTS: '1',
      },
      prepare: async (ready) => {
        ({ openai, anthropic, gemini, redis, redisUrl } = ready);
        key = await paidAccountKey(redis, 50_000_000);
      },
    });
    gateway = vendorGateway.gateway;
    ai = sdk(key.key);
    aiBeta = sdk(key.key, 'v1beta');
  });

  after(async () => {
    await vendorGateway?.close();
  });

  const post = (path: string, body: unknown, headers: Record<string, string> = { 'x-goog-api-key': key.key }) =>
    fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });

  /** The requests a fake got for a model (its chat, messages or Gemini path). */
  const sentTo = (vendor: string, model: string) => {
    if (vendor === 'openai')
      return openai.requests
        .filter((request) => (request.body as { model?: string } | undefined)?.model === model)
        .map((request) => request.body as Record<string, any>);
    if (vendor === 'anthropic')
      return anthropic.requests
        .filter((request) => (request.body as { model?: string } | undefined)?.model === model)
        .map((request) => request.body as Record<string, any>);
    return gemini.requests
      .filter((request) => request.path.includes(`/models/${model}:`))
      .map((request) => request.body as Record<string, any>);
  };

  for (const { vendor, model, text, callId } of vendors) {
    describe(`${model} (${vendor === 'google' ? 'passed through to Gemini' : `translated for ${vendor}`})`, () => {
      it('generateContent: one answer in Google’s shape, under the model asked, with usage', async () => {
        const response = await ai.models.generateContent({
          model,
          contents: ask('Hello'),
          config: { systemInstruction: 'Be brief.', temperature: 0.2, maxOutputTokens: 64 },
        });
        assert.equal(response.text, text);
        assert.equal(response.modelVersion, model);
        const wire = await lastWire();
        assert.equal(new URL(wire.url).pathname, `/v1/models/${model}:generateContent`, 'the SDK’s default spelling');
        const body = assertShape(generateContentResponseShape, JSON.parse(wire.text));
        assert.equal(body.candidates![0]!.finishReason, 'STOP');
        assert.equal(body.candidates![0]!.content!.role, 'model');
        const usage = body.usageMetadata!;
        assert.ok(usage.promptTokenCount! > 0 && usage.candidatesTokenCount! > 0, JSON.stringify(usage));
        assert.equal(
          usage.totalTokenCount,
          usage.promptTokenCount! + usage.candidatesTokenCount! + (usage.thoughtsTokenCount ?? 0),
        );
        const sent = sentTo(vendor, model).at(-1)!;
        if (vendor === 'google') {
          assert.deepEqual(
            sent,
            {
              contents: ask('Hello'),
              systemInstruction: { parts: [{ text: 'Be brief.' }], role: 'user' },
              generationConfig: { temperature: 0.2, maxOutputTokens: 64 },
            },
            'the request as the SDK wrote it',
          );
        } else if (vendor === 'openai') {
          assert.deepEqual(sent.messages[0], { role: 'system', content: 'Be brief.' });
          assert.equal(sent.temperature, 0.2);
        } else {
          assert.equal(JSON.stringify(sent.system).includes('Be brief.'), true);
          assert.equal(sent.max_tokens, 64);
        }
      });

      it(
        'generateContentStream (?alt=sse): each chunk a GenerateContentResponse, the text in order, finish and ' +
          'usage at the end',
        async () => {
          const chunks: SdkResponse[] = [];
          for await (const chunk of await aiBeta.models.generateContentStream({ model, contents: ask('Hello') }))
            chunks.push(chunk);
          assert.equal(chunks.map((chunk) => chunk.text ?? '').join(''), text);
          const wire = await lastWire();
          assert.equal(new URL(wire.url).pathname, `/v1beta/models/${model}:streamGenerateContent`);
          assert.equal(new URL(wire.url).searchParams.get('alt'), 'sse');
          const events = sseEvents(wire.text).map((event, index) =>
            assertShape(generateContentResponseShape, event, `chunk ${index}`),
          );
          assert.ok(events.length >= 1);
          for (const event of events) assert.equal(event.modelVersion, model);
          const last = events.at(-1)!;
          assert.equal(last.candidates?.[0]?.finishReason, 'STOP');
          assert.ok(last.usageMetadata?.candidatesTokenCount! > 0, 'usage on the last chunk');
        },
      );

      it('streamGenerateContent without alt: Google’s streamed JSON array, each element a GenerateContentResponse', async () => {
        const response = await post(`/v1beta/models/${model}:streamGenerateContent`, { contents: ask('Hello') });
        assert.equal(response.status, 200);
        assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
        const array = JSON.parse(await response.text()) as unknown[];
        assert.ok(Array.isArray(array) && array.length >= 1);
        const chunks = array.map((element, index) =>
          assertShape(generateContentResponseShape, element, `element ${index}`),
        );
        const said = chunks
          .flatMap((chunk) => chunk.candidates?.[0]?.content?.parts ?? [])
          .map((part) => part.text ?? '')
          .join('');
        assert.equal(said, text);
        assert.equal(chunks.at(-1)!.candidates?.[0]?.finishReason, 'STOP');
      });

      it(
        'a function call round trip: the call named as declared, its id kept, the response back to the vendor ' +
          'under it',
        async () => {
          const tools = [{ functionDeclarations: [weather] }];
          const first = await ai.models.generateContent({
            model,
            contents: ask('Weather in Oslo?'),
            config: { tools },
          });
          assertShape(generateContentResponseShape, JSON.parse((await lastWire()).text));
          const call = first.functionCalls?.[0];
          assert.ok(call, JSON.stringify(first.candidates));
          assert.equal(call.name, 'get_weather');
          assert.deepEqual(call.args, { city: 'Oslo' });
          // The vendor's own id for a translated call; Gemini gives none, so the client names its own (as Gemini CLI
          // does).
          if (callId !== undefined) assert.equal(call.id, callId);
          else assert.equal(call.id, undefined);
          const id = call.id ?? 'get_weather_1_0';
          const modelTurn = first.candidates![0]!.content!;
          if (call.id === undefined)
            modelTurn.parts = modelTurn.parts!.map((part) =>
              part.functionCall ? { ...part, functionCall: { ...part.functionCall, id } } : part,
            );
          const history: Content[] = [
            ...ask('Weather in Oslo?'),
            modelTurn,
            {
              role: 'user',
              parts: [{ functionResponse: { id, name: 'get_weather', response: { output: 'sunny, 21 C' } } }],
            },
          ];
          const second = await ai.models.generateContent({ model, contents: history, config: { tools } });
          assertShape(generateContentResponseShape, JSON.parse((await lastWire()).text));
          assert.match(second.text ?? '', /Tool said: .*sunny, 21 C/);
          const sent = sentTo(vendor, model).at(-1)!;
          if (vendor === 'openai') {
            const [assistant, result] = sent.messages.slice(-2);
            assert.equal(assistant.tool_calls[0].id, id);
            assert.equal(assistant.tool_calls[0].function.name, 'get_weather');
            assert.deepEqual(
              { role: result.role, tool_call_id: result.tool_call_id },
              { role: 'tool', tool_call_id: id },
            );
          } else if (vendor === 'anthropic') {
            const [assistant, result] = sent.messages.slice(-2);
            assert.equal(assistant.content.find((block: Record<string, unknown>) => block.type === 'tool_use').id, id);
            assert.equal(
              result.content.find((block: Record<string, unknown>) => block.type === 'tool_result').tool_use_id,
              id,
            );
          } else {
            assert.deepEqual(sent.contents.slice(1), history.slice(1), 'the turns with their ids, as written');
          }
        },
      );

      it('a streamed function call: one whole functionCall part (Gemini never streams a call in pieces), then STOP', async () => {
        const chunks: SdkResponse[] = [];
        for await (const chunk of await aiBeta.models.generateContentStream({
          model,
          contents: ask('Weather in Oslo?'),
          config: { tools: [{ functionDeclarations: [weather] }] },
        }))
          chunks.push(chunk);
        const events = sseEvents((await lastWire()).text).map((event, index) =>
          assertShape(generateContentResponseShape, event, `chunk ${index}`),
        );
        const calls = events
          .flatMap((event) => event.candidates?.[0]?.content?.parts ?? [])
          .filter((part) => part.functionCall);
        assert.equal(calls.length, 1, JSON.stringify(events));
        assert.deepEqual(calls[0]!.functionCall, {
          ...(callId !== undefined ? { id: callId } : {}),
          name: 'get_weather',
          args: { city: 'Oslo' },
        });
        assert.equal(events.at(-1)!.candidates?.[0]?.finishReason, 'STOP');
        assert.equal(chunks.flatMap((chunk) => chunk.functionCalls ?? []).length, 1);
      });

      it(
        'countTokens: Google’s CountTokensResponse, counted by Gemini for its models and by the gateway for the ' +
          'others',
        async () => {
          const contents = ask('How many tokens is this sentence?');
          const counted = await ai.models.countTokens({ model, contents });
          const body = assertShape(countTokensResponseShape, JSON.parse((await lastWire()).text));
          assert.ok(body.totalTokens > 0);
          assert.equal(counted.totalTokens, body.totalTokens);
          if (vendor === 'google') {
            assert.equal(body.totalTokens, fakeTokenCount('How many tokens is this sentence?'), 'Gemini’s own count');
            const sent = gemini.requests.at(-1)!;
            assert.equal(new URL(sent.path, 'http://x').pathname, `/v1beta/models/${model}:countTokens`);
            assert.deepEqual(sent.body, { contents });
          }
          // The other form: a whole request (with its system instruction) to count, naming its model.
          const whole = await post(`/v1beta/models/${model}:countTokens`, {
            generateContentRequest: {
              model: `models/${model}`,
              contents,
              systemInstruction: { parts: [{ text: 'Answer in one long paragraph of plain words.' }] },
            },
          });
          assert.equal(whole.status, 200);
          const wholeCount = assertShape(countTokensResponseShape, await whole.json());
          assert.ok(
            wholeCount.totalTokens > body.totalTokens,
            `the system instruction counted: ${wholeCount.totalTokens} > ${body.totalTokens}`,
          );
        },
      );
    });
  }

  it('an inline image and a JSON schema for the answer reach each translated vendor in its own form', async () => {
    const png = createFakePng([200, 40, 40]).toString('base64');
    const schema = { type: 'object', properties: { color: { type: 'string' } }, required: ['color'] };
    for (const { vendor, model } of vendors.filter((entry) => entry.vendor !== 'google')) {
      const contents: Content[] = [
        { role: 'user', parts: [{ text: 'What color is it?' }, { inlineData: { mimeType: 'image/png', data: png } }] },
      ];
      const response = await ai.models.generateContent({
        model,
        contents,
        config: { responseMimeType: 'application/json', responseJsonSchema: schema },
      });
      assertShape(generateContentResponseShape, JSON.parse((await lastWire()).text));
      assert.equal(response.modelVersion, model);
      const sent = sentTo(vendor, model).at(-1)!;
      const parts = sent.messages.at(-1).content as Array<Record<string, any>>;
      if (vendor === 'openai') {
        assert.deepEqual(parts.find((part) => part.type === 'image_url')?.image_url, {
          url: `data:image/png;base64,${png}`,
        });
        assert.equal(sent.response_format.type, 'json_schema');
        assert.deepEqual(sent.response_format.json_schema.schema, schema);
      } else {
        assert.deepEqual(parts.find((part) => part.type === 'image')?.source, {
          type: 'base64',
          media_type: 'image/png',
          data: png,
        });
        assert.deepEqual(sent.output_config.format, { type: 'json_schema', schema });
      }
    }
  });

  it('a function call round trip without ids on a translated vendor: call and response paired by the gateway', async () => {
    for (const { vendor, model } of vendors.filter((entry) => entry.vendor !== 'google')) {
      const history: Content[] = [
        ...ask('Weather in Oslo?'),
        { role: 'model', parts: [{ functionCall: { name: 'get_weather', args: { city: 'Oslo' } } }] },
        { role: 'user', parts: [{ functionResponse: { name: 'get_weather', response: { output: 'fog' } } }] },
      ];
      const answer = await ai.models.generateContent({
        model,
        contents: history,
        config: { tools: [{ functionDeclarations: [weather] }] },
      });
      assert.match(answer.text ?? '', /Tool said: .*fog/, model);
      const sent = sentTo(vendor, model).at(-1)!;
      const [assistant, result] = sent.messages.slice(-2);
      if (vendor === 'openai') assert.equal(result.tool_call_id, assistant.tool_calls[0].id);
      else
        assert.equal(
          result.content[0].tool_use_id,
          assistant.content.find((block: Record<string, unknown>) => block.type === 'tool_use').id,
        );
    }
  });

  it(
    'a thought signature kept across turns on a Gemini 3 model: the signature Gemini issued reaches it again, byte ' +
      'for byte',
    async () => {
      const model = 'gemini-3-pro-preview';
      const tools = [{ functionDeclarations: [weather] }];
      const config = { tools, thinkingConfig: { thinkingLevel: ThinkingLevel.LOW, includeThoughts: true } };
      const first = await ai.models.generateContent({ model, contents: ask('Weather in Oslo?'), config });
      const callPart = first.candidates![0]!.content!.parts!.find((part) => part.functionCall)!;
      assert.ok(callPart.thoughtSignature, 'the signature rides on the call part');
      assert.ok(gemini.issuedSignatures.has(callPart.thoughtSignature), 'as Gemini issued it');
      const history: Content[] = [
        ...ask('Weather in Oslo?'),
        first.candidates![0]!.content!,
        {
          role: 'user',
          parts: [{ functionResponse: { id: 'call-7', name: 'get_weather', response: { output: 'rain' } } }],
        },
      ];
      (history[1]!.parts!.find((part) => part.functionCall)!.functionCall as { id?: string }).id = 'call-7';
      // Streamed this time: the fake refuses a Gemini 3 history whose call lost its signature.
      const chunks: SdkResponse[] = [];
      for await (const chunk of await ai.models.generateContentStream({ model, contents: history, config }))
        chunks.push(chunk);
      assert.match(chunks.map((chunk) => chunk.text ?? '').join(''), /Tool said: .*rain/);
      const sent = gemini.requests.at(-1)!;
      const replayed = (sent.body as { contents: Content[] }).contents[1]!.parts!.find((part) => part.functionCall)!;
      assert.equal(replayed.thoughtSignature, callPart.thoughtSignature);
      assert.ok(sent.rawBody.includes(`"thoughtSignature":"${callPart.thoughtSignature}"`), 'in the bytes sent');
      assert.deepEqual((sent.body as Record<string, any>).generationConfig.thinkingConfig, {
        thinkingLevel: 'LOW',
        includeThoughts: true,
      });
    },
  );

  it(
    'passes what only Gemini reads to a Gemini model as written: cachedContent, safetySettings, thinkingConfig, ' +
      'stop sequences',
    async () => {
      const safetySettings = [{ category: 'HARM_CATEGORY_HARASSMENT', threshold: 'BLOCK_ONLY_HIGH' }];
      const response = await post('/v1beta/models/gemini-2.5-flash:generateContent', {
        contents: ask('Hi'),
        cachedContent: 'cachedContents/abc123',
        safetySettings,
        generationConfig: {
          stopSequences: ['END'],
          thinkingConfig: { thinkingBudget: 512, includeThoughts: true },
          topK: 5,
        },
      });
      assertShape(generateContentResponseShape, await response.json());
      const sent = gemini.requests.at(-1)!;
      assert.ok(sent.rawBody.includes(JSON.stringify(safetySettings)), sent.rawBody);
      assert.deepEqual((sent.body as Record<string, any>).generationConfig, {
        stopSequences: ['END'],
        thinkingConfig: { thinkingBudget: 512, includeThoughts: true },
        topK: 5,
      });
      assert.equal((sent.body as Record<string, any>).cachedContent, 'cachedContents/abc123');
    },
  );

  it('an Anthropic model’s visible thinking comes back as thought parts, streamed and not', async () => {
    const request = {
      model: 'claude-sonnet-4-6',
      contents: ask('Think first'),
      config: { thinkingConfig: { thinkingBudget: 2048, includeThoughts: true }, maxOutputTokens: 4096 },
    };
    const streamed: SdkResponse[] = [];
    for await (const chunk of await ai.models.generateContentStream(request)) streamed.push(chunk);
    const thoughts = sseEvents((await lastWire()).text)
      .map((event) => assertShape(generateContentResponseShape, event))
      .flatMap((event) => event.candidates?.[0]?.content?.parts ?? [])
      .filter((part) => part.thought);
    assert.equal(thoughts.map((part) => part.text).join(''), FAKE_THINKING_TEXT, 'streamed thoughts');
    const response = await ai.models.generateContent(request);
    const sent = sentTo('anthropic', 'claude-sonnet-4-6').at(-1)!;
    assert.deepEqual(sent.thinking, { type: 'enabled', budget_tokens: 2048 }, JSON.stringify(sent));
    const body = assertShape(generateContentResponseShape, JSON.parse((await lastWire()).text));
    const parts = body.candidates![0]!.content!.parts!;
    assert.deepEqual(
      parts.filter((part) => part.thought).map((part) => part.text),
      [FAKE_THINKING_TEXT],
      JSON.stringify(parts),
    );
    assert.equal(response.text, FAKE_ANTHROPIC_TEXT, 'the answer’s text leaves the thoughts out');
  });

  it('embedContent and batchEmbedContents on an OpenAI and a Gemini embedding model', async () => {
    for (const { vendor, embedding } of vendors) {
      if (embedding === undefined) continue;
      const one = await post(`/v1beta/models/${embedding}:embedContent`, {
        content: { parts: [{ text: 'first text' }] },
        outputDimensionality: 8,
      });
      assert.equal(one.status, 200, embedding);
      const single = assertShape(embedContentResponseShape, await one.json(), `${embedding} embedContent`);
      // The SDK's embedContent is batchEmbedContents on Google's API.
      const batch = await ai.models.embedContent({
        model: embedding,
        contents: ['first text', 'second text'],
        config: { outputDimensionality: 8 },
      });
      const wire = await lastWire();
      assert.equal(new URL(wire.url).pathname, `/v1/models/${embedding}:batchEmbedContents`);
      const body = assertShape(
        batchEmbedContentsResponseShape,
        JSON.parse(wire.text),
        `${embedding} batchEmbedContents`,
      );
      assert.equal(body.embeddings.length, 2);
      assert.equal(batch.embeddings?.length, 2);
      if (vendor === 'google') {
        assert.deepEqual(single.embedding.values, fakeEmbedding('first text', 8), 'Gemini’s own vector');
        assert.deepEqual(
          body.embeddings.map((entry) => entry.values),
          [fakeEmbedding('first text', 8), fakeEmbedding('second text', 8)],
        );
        const sent = gemini.requests.at(-1)!.body as { requests: Array<Record<string, unknown>> };
        assert.deepEqual(
          sent.requests.map((request) => request.model),
          [`models/${embedding}`, `models/${embedding}`],
        );
      } else {
        assert.deepEqual(body.embeddings[0]!.values, single.embedding.values, 'the same text, the same vector');
      }
    }
  });

  it('MODEL_ALIASES: gemini-2.5-pro served by an OpenAI model answers as gemini-2.5-pro', async () => {
    const before = gemini.requests.length;
    const response = await ai.models.generateContent({ model: 'gemini-2.5-pro', contents: ask('Hello') });
    assert.equal(response.text, FAKE_REPLY_TEXT);
    assert.equal(response.modelVersion, 'gemini-2.5-pro');
    assert.equal((openai.requests.at(-1)!.body as { model: string }).model, 'gpt-4o-mini');
    assert.equal(gemini.requests.length, before, 'Gemini never asked');
    const events: GenerateContentResponse[] = [];
    for await (const chunk of await ai.models.generateContentStream({
      model: 'gemini-2.5-pro',
      contents: ask('Hello'),
    }))
      events.push(chunk as GenerateContentResponse);
    assert.ok(events.every((chunk) => chunk.modelVersion === 'gemini-2.5-pro'));
  });

  it('bills and logs each request under its key: generate and stream billed, countTokens free, embeddings billed', async () => {
    type Row = Awaited<ReturnType<typeof usageRows>>[number];
    let rows: Row[] = [];
    const of = (model: string, endpoint: string) =>
      rows.filter((row) => row.model === model && row.endpoint === endpoint && row.settled && row.key_id === key.id);
    await waitFor(
      async () => {
        rows = await usageRows(redisUrl);
        return vendors.every(
          ({ model, embedding }) =>
            of(model, 'gemini.generate').length >= 5 &&
            of(model, 'gemini.count_tokens').length >= 1 &&
            (embedding === undefined ||
              (of(embedding, 'gemini.embed').length >= 1 && of(embedding, 'gemini.batch_embed').length >= 1)),
        );
      },
      15_000,
      'the Gemini requests in the record',
    );
    for (const { model, embedding } of vendors) {
      // Refusals (a vendor's 400 relayed) are logged with their status, billed nothing; every answer is billed.
      const generated = of(model, 'gemini.generate').filter((row) => row.http_status === 200);
      const unbilled = generated.filter((row) => !(row.cost_micros > 0));
      assert.deepEqual(unbilled, [], `${model}: each answer billed`);
      assert.ok(
        generated.some((row) => row.stream === true) && generated.some((row) => row.stream === false),
        `${model}: streams and plain answers logged as such`,
      );
      assert.ok(
        of(model, 'gemini.count_tokens').every((row) => row.cost_micros === 0),
        `${model}: a count costs nothing`,
      );
      if (embedding !== undefined) {
        const embeds = [...of(embedding, 'gemini.embed'), ...of(embedding, 'gemini.batch_embed')];
        assert.deepEqual(
          embeds.filter((row) => !(row.cost_micros > 0)),
          [],
          `${embedding}: embeddings billed`,
        );
      }
    }
  });
});
