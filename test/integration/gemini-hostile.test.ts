import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { paidAccountKey, type GatewayProcess } from '../support/gateway.js';
import type { FakeOpenAI } from '../support/fake-openai.js';
import type { FakeAnthropic } from '../support/fake-anthropic.js';
import type { FakeGemini } from '../support/fake-gemini.js';
import { startVendorGateway, type VendorGateway } from '../support/vendor-gateway.js';
import {
  assertGoogleError,
  assertShape,
  errorBodyShape,
  generateContentResponseShape,
  retryInfoShape,
} from '../support/gemini-shapes.js';

/**
 * Google's Gemini API as an attacker and odd clients call it: spellings of the path Google reads (the colon
 * percent-encoded, no model, no method), bodies Google refuses (a part with two data fields, bytes that are not
 * base64), histories chat vendors refuse unless the gateway mends them (a call its next turn leaves unanswered),
 * a burst of streams past a key's rate, and a vendor that breaks mid-stream. Each answer is checked against
 * Google's published shapes: a success in its stream form, a refusal as Google's error with the right status.
 * One gateway, the strict vendor fakes behind it.
 */

const GEMINI_KEY = 'gemini-hostile-key';
const ask = (text: string) => [{ role: 'user', parts: [{ text }] }];

/** The chunks of a streamed answer, in either of Google's forms. */
function streamElements(text: string, form: 'sse' | 'array'): unknown[] {
  if (form === 'array') return JSON.parse(text) as unknown[];
  return text
    .split(/\r?\n\r?\n/)
    .filter((frame) => frame.trim() !== '')
    .map((frame) => {
      assert.match(frame, /^data: /, 'every SSE frame is a data line');
      return JSON.parse(frame.slice('data: '.length)) as unknown;
    });
}

describe("Google's Gemini API against hostile input", () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let key: { key: string };
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let gemini: FakeGemini;
  let vendorGateway: VendorGateway;

  before(async () => {
    vendorGateway = await startVendorGateway({
      db: 14,
      gemini: { apiKey: GEMINI_KEY },
      env: { JOB_ATTEMPTS: '1' },
      prepare: async (ready) => {
        ({ openai, anthropic, gemini, redis } = ready);
        key = await paidAccountKey(redis, 50_000_000);
      },
    });
    gateway = vendorGateway.gateway;
  });

  after(async () => {
    await vendorGateway?.close();
  });

  const post = (path: string, body: unknown, headers: Record<string, string> = { 'x-goog-api-key': key.key }) =>
    fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(20_000),
    });

  it('reads a percent-encoded colon as the colon, on /v1beta and /v1, and answers there in Google’s shape', async () => {
    for (const [path, headers] of [
      ['/v1beta/models/gpt-4o-mini%3AgenerateContent', { 'x-goog-api-key': key.key }],
      ['/v1beta/models/gpt-4o-mini%3agenerateContent', { 'x-goog-api-key': key.key }],
      ['/v1/models/gpt-4o-mini%3AgenerateContent', { authorization: `Bearer ${key.key}` }],
    ] as const) {
      const response = await post(path, { contents: ask('Hello') }, headers);
      assert.equal(response.status, 200, `${path}: ${await response.clone().text()}`);
      assert.equal(assertShape(generateContentResponseShape, await response.json()).modelVersion, 'gpt-4o-mini');
    }
    // A refusal on /v1 with the colon encoded and no Google header is still Google's (it was OpenAI's 404).
    await assertGoogleError(
      await post('/v1/models/gpt-4o-mini%3AgenerateContent', { contents: 5 }, { authorization: `Bearer ${key.key}` }),
      400,
      'INVALID_ARGUMENT',
    );
    const streamed = await post('/v1beta/models/gpt-4o-mini%3AstreamGenerateContent?alt=sse', {
      contents: ask('Hello'),
    });
    assert.equal(streamed.status, 200);
    for (const chunk of streamElements(await streamed.text(), 'sse'))
      assertShape(generateContentResponseShape, chunk, 'a chunk');
  });

  it('answers a path with no model or no method as Google’s 404, and leaves /v1’s model ids with colons to OpenAI', async () => {
    for (const path of [
      '/v1beta/models/:generateContent',
      '/v1/models/:generateContent',
      '/v1/models/%3AstreamGenerateContent',
    ]) {
      const error = await assertGoogleError(
        await post(path, { contents: ask('x') }, { authorization: `Bearer ${key.key}` }),
        404,
        'NOT_FOUND',
      );
      assert.match(error.message, /names no model/, path);
    }
    const noMethod = await assertGoogleError(
      await post('/v1beta/models/gpt-4o-mini:', { contents: ask('x') }),
      404,
      'NOT_FOUND',
    );
    assert.match(noMethod.message, /Method '' is not found/);
    await assertGoogleError(
      await post('/v1beta/models/gpt-4o-mini:generate-content', { contents: ask('x') }),
      404,
      'NOT_FOUND',
    );
    // A model's method asked with GET is still told to POST.
    const get = await fetch(`${gateway.url}/v1beta/models/gpt-4o-mini:generateContent`, {
      headers: { 'x-goog-api-key': key.key },
    });
    assert.equal(get.status, 405);
    assertShape(errorBodyShape, await get.json());
    // OpenAI's fine-tuned ids hold colons: retrieving one is OpenAI's model route, answered in OpenAI's shape.
    const fineTuned = await fetch(`${gateway.url}/v1/models/ft:gpt-4o-mini:acme::9xYz-1`, {
      headers: { authorization: `Bearer ${key.key}` },
    });
    assert.equal(fineTuned.status, 404);
    assert.equal(((await fineTuned.json()) as { error: { type?: string } }).error.type, 'invalid_request_error');
  });

  it('refuses a part with two data fields and inline data that is not base64 before any vendor hears of it', async () => {
    const before = { openai: openai.requests.length, gemini: gemini.requests.length };
    for (const model of ['gpt-4o-mini', 'gemini-2.5-flash']) {
      const two = await assertGoogleError(
        await post(`/v1beta/models/${model}:generateContent`, {
          contents: [
            { role: 'user', parts: [{ text: 'look', inlineData: { mimeType: 'image/png', data: 'iVBORw0KGgo=' } }] },
          ],
        }),
        400,
        'INVALID_ARGUMENT',
      );
      assert.match(two.message, /^Invalid value at 'contents\[0\]\.parts\[0\]': a part holds one of/);
      const garbled = await assertGoogleError(
        await post(`/v1beta/models/${model}:streamGenerateContent?alt=sse`, {
          contents: [{ role: 'user', parts: [{ inline_data: { mime_type: 'text/plain', data: '!!!not base64!!!' } }] }],
        }),
        400,
        'INVALID_ARGUMENT',
      );
      assert.match(
        garbled.message,
        /^Invalid value at 'contents\[0\]\.parts\[0\]\.inlineData\.data': Base64 decoding failed/,
      );
    }
    assert.deepEqual(
      { openai: openai.requests.length, gemini: gemini.requests.length },
      before,
      'no vendor was called',
    );
    // URL-safe, unpadded base64 is Google's too: a chat vendor gets it standard and padded.
    const response = await post('/v1beta/models/gpt-4o-mini:generateContent', {
      contents: [{ role: 'user', parts: [{ inlineData: { mimeType: 'image/png', data: 'iVBO-w_KGgo' } }] }],
    });
    assert.equal(response.status, 200, await response.clone().text());
    assert.match(openai.requests.at(-1)!.rawBody, /data:image\/png;base64,iVBO\+w\/KGgo=/);
  });

  it('mends a call its next turn leaves unanswered, so Anthropic and OpenAI take the history Gemini would', async () => {
    // Gemini CLI answers under ids of its own; a client that trimmed a response, or answered under another id and
    // name, leaves the call without its result: the strict Anthropic fake refuses that (as Anthropic does).
    const contents = [
      ...ask('Read a.txt'),
      { role: 'model', parts: [{ functionCall: { id: 'call-a', name: 'read_file', args: { file_path: 'a.txt' } } }] },
      {
        role: 'user',
        parts: [{ functionResponse: { id: 'other-id', name: 'list_directory', response: { output: 'a.txt' } } }],
      },
    ];
    const tools = [
      {
        functionDeclarations: [
          {
            name: 'read_file',
            parametersJsonSchema: { type: 'object', properties: { file_path: { type: 'string' } } },
          },
          { name: 'list_directory' },
        ],
      },
    ];
    for (const form of ['sse', 'array'] as const) {
      const response = await post(
        `/v1beta/models/claude-sonnet-4-6:streamGenerateContent${form === 'sse' ? '?alt=sse' : ''}`,
        { contents, tools },
      );
      const text = await response.text();
      assert.equal(response.status, 200, text);
      const chunks = streamElements(text, form);
      for (const chunk of chunks) assertShape(generateContentResponseShape, chunk, `a ${form} chunk`);
      const sent = anthropic.requests.at(-1)!.body as {
        messages: Array<{ role: string; content: Array<{ type: string; tool_use_id?: string }> }>;
      };
      const results = sent.messages
        .flatMap((message) => message.content)
        .filter((block) => block.type === 'tool_result');
      assert.ok(
        results.some((block) => block.tool_use_id === 'call-a'),
        JSON.stringify(sent.messages),
      );
    }
    const viaOpenAI = await post('/v1beta/models/gpt-4o-mini:generateContent', {
      contents: [
        ...contents,
        { role: 'model', parts: [{ functionCall: { id: 'call-b', name: 'read_file', args: {} } }] },
      ],
      tools,
    });
    assert.equal(viaOpenAI.status, 200, await viaOpenAI.clone().text());
    const messages = (openai.requests.at(-1)!.body as { messages: Array<{ role: string; tool_call_id?: string }> })
      .messages;
    assert.deepEqual(
      messages.filter((message) => message.role === 'tool').map((message) => message.tool_call_id),
      ['call-a', 'call-b'],
    );
  });

  it(
    'refuses a burst of streams past the key’s rate with Google’s 429 and a retryDelay, each stream whole, none ' +
      'hanging',
    async () => {
      const limited = await paidAccountKey(redis, 10_000_000, { rpm: 5 });
      const answers = await Promise.all(
        Array.from({ length: 60 }, async (_, i) => {
          const response = await post(
            '/v1beta/models/gpt-4o-mini:streamGenerateContent?alt=sse',
            { contents: ask(`burst ${i}`) },
            { 'x-goog-api-key': limited.key },
          );
          return { status: response.status, text: await response.text() };
        }),
      );
      let served = 0;
      for (const answer of answers) {
        if (answer.status === 200) {
          served++;
          const chunks = streamElements(answer.text, 'sse');
          assert.ok(chunks.length > 0);
          for (const chunk of chunks) assertShape(generateContentResponseShape, chunk, 'a served chunk');
          continue;
        }
        assert.equal(answer.status, 429, answer.text);
        const error = assertShape(errorBodyShape, JSON.parse(answer.text)).error;
        assert.equal(error.status, 'RESOURCE_EXHAUSTED');
        assertShape(
          retryInfoShape,
          error.details?.find((detail) => detail['@type'] === 'type.googleapis.com/google.rpc.RetryInfo'),
          'its RetryInfo',
        );
      }
      assert.equal(served, 5, 'the key’s rate, no more');
    },
  );

  it('ends a stream whose vendor breaks mid-answer with Google’s error as its last element, in both forms', async () => {
    const chunk = JSON.stringify({
      id: 'x',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'gpt-4o-mini',
      choices: [{ index: 0, delta: { role: 'assistant', content: 'Hi' } }],
    });
    for (const [what, fault] of [
      ['a malformed chunk', { sse: `data: ${chunk}\n\ndata: {not json\n\n` }],
      ['a connection closed mid-stream', { sse: `data: ${chunk}\n\n`, destroyAtEnd: true }],
    ] as const) {
      for (const form of ['sse', 'array'] as const) {
        openai.enqueue(fault);
        const response = await post(
          `/v1beta/models/gpt-4o-mini:streamGenerateContent${form === 'sse' ? '?alt=sse' : ''}`,
          { contents: ask('Hello') },
        );
        assert.equal(response.status, 200);
        const elements = streamElements(await response.text(), form);
        assert.ok(elements.length >= 2, `${what} (${form}): a chunk, then the error`);
        for (const element of elements.slice(0, -1))
          assertShape(generateContentResponseShape, element, `${what} (${form}): a chunk`);
        const last = assertShape(errorBodyShape, elements.at(-1), `${what} (${form}): the last element`);
        assert.equal(last.error.code, 502);
      }
    }
  });
});
