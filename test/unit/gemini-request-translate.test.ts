import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { GatewayError } from '../../shared/errors.js';
import { geminiToolNamesBack, speaksGoogle } from '../../shared/gemini.js';
import { chatToolName } from '../../shared/messages-tools.js';
import { chatCompletionRequestSchema, type ChatCompletionRequest } from '../../shared/schemas/chat.js';
import {
  geminiBatchEmbedContentsRequestSchema,
  geminiCountTokensRequestSchema,
  geminiEmbedContentRequestSchema,
  geminiGenerateRequestSchema,
} from '../../shared/schemas/gemini.js';
import { parseBody } from '../../api/http/request-body.js';
import { toChatRequest, type TranslatedModel } from '../../api/gemini/translate-request.js';
import { toJsonSchema } from '../../api/gemini/translate-tools.js';
import { toEmbedJob } from '../../api/gemini/translate-embeddings.js';
import { readGeminiPath, streamFormOf } from '../../api/gemini/paths.js';
import { googleModelPage, toGoogleModel } from '../../api/gemini/models.js';
import type { CatalogModel } from '../../shared/catalog.js';

const model: TranslatedModel = {
  id: 'gpt-test',
  capability: 'reasoning',
  max_output_tokens: 16_384,
  input_modalities: ['text', 'image', 'audio'],
};
const textOnly: TranslatedModel = { ...model, capability: 'chat', input_modalities: ['text'] };

/** Parses a Gemini body as the api does, translates it, and checks the chat request against chat's own schema. */
function translate(
  body: Record<string, unknown>,
  target: TranslatedModel = model,
  options = { stream: false, native: false, reasons: target.capability === 'reasoning' },
): { chat: ChatCompletionRequest; dropped: string[] } {
  const result = toChatRequest(parseBody(geminiGenerateRequestSchema, structuredClone(body)) as never, target, options);
  chatCompletionRequestSchema.parse(result.chat);
  return result;
}

const user = (...parts: unknown[]) => ({ role: 'user', parts });
const modelTurn = (...parts: unknown[]) => ({ role: 'model', parts });

/** Asserts the translation refuses `body` with a 400 at `param` (and, if given, a message matching `message`). */
function rejects(
  body: Record<string, unknown>,
  param: string | null,
  message?: RegExp,
  target: TranslatedModel = model,
) {
  const request = parseBody(geminiGenerateRequestSchema, structuredClone(body)) as never;
  assert.throws(() => toChatRequest(request, target, { stream: false, native: false, reasons: true }), {
    name: 'GatewayError',
    status: 400,
    param,
    ...(message ? { message } : {}),
  });
}

const png = 'iVBORw0KGgo=';

describe('Gemini request → chat', () => {
  it('turns the system instruction, user and model turns into chat messages', () => {
    const { chat } = translate({
      systemInstruction: { parts: [{ text: 'Be brief.' }] },
      contents: [user({ text: 'Hello' }), modelTurn({ text: 'Hi ' }, { text: 'there.' }), { parts: [{ text: 'Bye' }] }],
    });
    assert.deepEqual(chat.messages, [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: [{ type: 'text', text: 'Hello' }] },
      { role: 'assistant', content: 'Hi there.' },
      { role: 'user', content: [{ type: 'text', text: 'Bye' }] },
    ]);
    assert.equal(chat.model, 'gpt-test');
    assert.equal(chat.stream, undefined);
  });

  it('takes a string system instruction and keeps several system parts apart', () => {
    assert.deepEqual(translate({ systemInstruction: 'Be kind.', contents: [user({ text: 'x' })] }).chat.messages[0], {
      role: 'system',
      content: 'Be kind.',
    });
    assert.deepEqual(
      translate({
        systemInstruction: { role: 'user', parts: [{ text: 'A' }, { text: 'B' }] },
        contents: [user({ text: 'x' })],
      }).chat.messages[0],
      {
        role: 'system',
        content: [
          { type: 'text', text: 'A' },
          { type: 'text', text: 'B' },
        ],
      },
    );
  });

  it('reads snake_case field names as Google does', () => {
    const { chat } = translate({
      system_instruction: { parts: [{ text: 'S' }] },
      contents: [user({ inline_data: { mime_type: 'image/png', data: png } }, { text: 'what is it?' })],
      generation_config: {
        max_output_tokens: 100,
        stop_sequences: ['END'],
        thinking_config: { thinking_budget: 2048 },
      },
      tools: [
        {
          function_declarations: [
            { name: 'f', parameters: { type: 'OBJECT', properties: { file_path: { type: 'STRING' } } } },
          ],
        },
      ],
      tool_config: { function_calling_config: { mode: 'ANY' } },
    });
    assert.equal(chat.messages[0]!.content, 'S');
    assert.deepEqual((chat.messages[1]!.content as unknown[])[0], {
      type: 'image_url',
      image_url: { url: `data:image/png;base64,${png}` },
    });
    assert.equal(chat.max_completion_tokens, 100);
    assert.deepEqual(chat.stop, ['END']);
    assert.equal(chat.reasoning_effort, 'low');
    // A property's own name is the client's: it is not renamed.
    assert.deepEqual((chat.tools![0] as { function: { parameters: unknown } }).function.parameters, {
      type: 'object',
      properties: { file_path: { type: 'string' } },
    });
    assert.equal(chat.tool_choice, 'required');
  });

  it('turns inline images, PDFs, wav and mp3 audio and text into chat parts', () => {
    const { chat } = translate({
      contents: [
        user(
          { inlineData: { mimeType: 'image/jpeg', data: png } },
          { inlineData: { mimeType: 'application/pdf', data: 'JVBERi0=' } },
          { inlineData: { mimeType: 'audio/wav', data: 'UklGRg==' } },
          { inlineData: { mimeType: 'audio/mpeg', data: 'SUQz' } },
          { inlineData: { mimeType: 'text/plain', data: Buffer.from('notes').toString('base64') } },
          { fileData: { mimeType: 'image/png', fileUri: 'https://example.com/cat.png' } },
        ),
      ],
    });
    assert.deepEqual(chat.messages[0]!.content, [
      { type: 'image_url', image_url: { url: `data:image/jpeg;base64,${png}` } },
      { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'document.pdf' } },
      { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } },
      { type: 'input_audio', input_audio: { data: 'SUQz', format: 'mp3' } },
      { type: 'text', text: 'notes' },
      { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } },
    ]);
  });

  it('refuses what chat cannot carry for a model Gemini does not serve, naming the part and what is served', () => {
    rejects(
      { contents: [user({ text: 'x' }, { inlineData: { mimeType: 'video/mp4', data: 'AAAA' } })] },
      'contents[0].parts[1].inlineData.mimeType',
      /video\/mp4 is served for Gemini models only; this model takes an image/,
    );
    rejects(
      { contents: [user({ inlineData: { mimeType: 'audio/ogg', data: 'AAAA' } })] },
      'contents[0].parts[0].inlineData.mimeType',
      /audio\/wav, audio\/mp3/,
    );
    rejects(
      { contents: [user({ fileData: { mimeType: 'application/pdf', fileUri: 'gs://bucket/doc.pdf' } })] },
      'contents[0].parts[0].fileData',
      /Files API, Cloud Storage/,
    );
    rejects(
      { contents: [user({ fileData: { fileUri: 'https://generativelanguage.googleapis.com/v1beta/files/abc' } })] },
      'contents[0].parts[0].fileData',
    );
    rejects(
      { contents: [user({ fileData: { mimeType: 'video/mp4', fileUri: 'https://example.com/v.mp4' } })] },
      'contents[0].parts[0].fileData',
      /by URL is served for Gemini models only/,
    );
    rejects(
      { cachedContent: 'cachedContents/abc', contents: [user({ text: 'x' })] },
      'cachedContent',
      /Gemini models only/,
    );
    rejects(
      { contents: [user({ inlineData: { mimeType: 'image/png', data: png } })] },
      'contents[0].parts[0].inlineData',
      /does not accept image input/,
      textOnly,
    );
  });

  it('leaves out what chat cannot carry for a model Gemini serves (it gets the body as written)', () => {
    const { chat, dropped } = translate(
      {
        cachedContent: 'cachedContents/abc',
        contents: [
          user(
            { text: 'x' },
            { inlineData: { mimeType: 'video/mp4', data: 'AAAA' } },
            { fileData: { fileUri: 'gs://b/x.pdf', mimeType: 'application/pdf' } },
          ),
        ],
      },
      model,
      { stream: false, native: true, reasons: true },
    );
    assert.deepEqual(chat.messages, [{ role: 'user', content: [{ type: 'text', text: 'x' }] }]);
    assert.ok(dropped.includes('cachedContent'));
    assert.ok(dropped.includes('contents[].parts[].inlineData.mimeType'));
    assert.ok(dropped.includes('contents[].parts[].fileData'));
  });

  it('pairs function calls and responses by id, and by name to the oldest unanswered call when a call has none', () => {
    const { chat } = translate({
      contents: [
        user({ text: 'Read both files' }),
        modelTurn(
          { text: 'Reading.' },
          { functionCall: { name: 'read_file', args: { path: 'a' } }, thoughtSignature: 'sig' },
          { functionCall: { name: 'read_file', args: { path: 'b' } } },
          { functionCall: { id: 'own-1', name: 'list', args: {} } },
        ),
        // Gemini CLI answers calls that had no id with ids of its own: matched by name, oldest first.
        user(
          { functionResponse: { id: 'list-own', name: 'list', response: { output: 'a, b' } } },
          { functionResponse: { id: 'read_file-123', name: 'read_file', response: { output: 'A' } } },
          { functionResponse: { name: 'read_file', response: { output: 'B', error: null } } },
        ),
      ],
    });
    const assistant = chat.messages[1] as {
      tool_calls: Array<{ id: string; function: { name: string; arguments: string } }>;
      content: string;
    };
    assert.equal(assistant.content, 'Reading.');
    assert.deepEqual(
      assistant.tool_calls.map((call) => [call.id, call.function.name, call.function.arguments]),
      [
        ['call_1_1', 'read_file', '{"path":"a"}'],
        ['call_1_2', 'read_file', '{"path":"b"}'],
        ['own-1', 'list', '{}'],
      ],
    );
    assert.deepEqual(chat.messages.slice(2), [
      { role: 'tool', tool_call_id: 'own-1', content: 'a, b' },
      { role: 'tool', tool_call_id: 'call_1_1', content: 'A' },
      { role: 'tool', tool_call_id: 'call_1_2', content: '{"output":"B","error":null}' },
    ]);
  });

  it('answers a call no response answers where its answer was due, so chat vendors take the history', () => {
    // A response under another id and name (read as text), a call the user's next turn leaves unanswered, two
    // model turns in a row, and a request that ends on a model's calls: each call gets its tool message.
    const { chat } = translate({
      contents: [
        user({ text: 'q' }),
        modelTurn(
          { functionCall: { id: 'A', name: 'f', args: {} } },
          { functionCall: { id: 'B', name: 'f', args: {} } },
        ),
        user(
          { functionResponse: { id: 'B', name: 'f', response: { output: 'b' } } },
          { functionResponse: { id: 'Z', name: 'g', response: { output: 'z' } } },
        ),
        modelTurn({ functionCall: { id: 'C', name: 'f', args: {} } }),
        modelTurn({ text: 'Moving on.' }, { functionCall: { id: 'D', name: 'f', args: {} } }),
      ],
    });
    const none = (id: string) => ({
      role: 'tool',
      tool_call_id: id,
      content: 'No result was sent for this call of the function f.',
    });
    assert.deepEqual(chat.messages.slice(2), [
      { role: 'tool', tool_call_id: 'B', content: 'b' },
      none('A'),
      { role: 'user', content: [{ type: 'text', text: 'The result of the function g: z' }] },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'C', type: 'function', function: { name: 'f', arguments: '{}' } }],
      },
      none('C'),
      {
        role: 'assistant',
        content: 'Moving on.',
        tool_calls: [{ id: 'D', type: 'function', function: { name: 'f', arguments: '{}' } }],
      },
      none('D'),
    ]);
    // A response that comes a turn late is text: its call was closed when its answer was due.
    const late = translate({
      contents: [
        user({ text: 'q' }),
        modelTurn({ functionCall: { id: 'A', name: 'f', args: {} } }),
        user({ text: 'wait' }),
        user({ functionResponse: { id: 'A', name: 'f', response: { output: 'a' } } }),
      ],
    });
    assert.deepEqual(late.chat.messages.slice(2), [
      none('A'),
      { role: 'user', content: [{ type: 'text', text: 'wait' }] },
      { role: 'user', content: [{ type: 'text', text: 'The result of the function f: a' }] },
    ]);
  });

  it('sends URL-safe or unpadded base64 as the standard, padded base64 a data URL takes', () => {
    const { chat } = translate({
      contents: [
        user(
          { inlineData: { mimeType: 'image/png', data: 'iVBO-w_KGgo' } },
          { inlineData: { mimeType: 'text/plain', data: 'aGk' } },
        ),
      ],
    });
    assert.deepEqual(chat.messages[0], {
      role: 'user',
      content: [
        { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBO+w/KGgo=' } },
        { type: 'text', text: 'hi' },
      ],
    });
  });

  it('is deterministic: the same request gets the same synthesized call ids', () => {
    const body = {
      contents: [
        user({ text: 'x' }),
        modelTurn({ functionCall: { name: 'f', args: {} } }),
        user({ functionResponse: { name: 'f', response: {} } }),
      ],
    };
    assert.deepEqual(translate(body).chat, translate(body).chat);
  });

  it('puts function responses before the rest of a user turn, and a response to no call as text', () => {
    const { chat } = translate({
      contents: [
        user({ text: 'go' }),
        modelTurn({ functionCall: { id: 'c1', name: 'run', args: { x: 1 } } }),
        user(
          { text: 'and then?' },
          { functionResponse: { id: 'c1', name: 'run', response: { result: 42 } } },
          { functionResponse: { name: 'ghost', response: { output: 'boo' } } },
        ),
      ],
    });
    assert.deepEqual(chat.messages.slice(2), [
      { role: 'tool', tool_call_id: 'c1', content: '{"result":42}' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'The result of the function ghost: boo' },
          { type: 'text', text: 'and then?' },
        ],
      },
    ]);
  });

  it('leaves out thoughts and signatures, code execution, and turns left empty', () => {
    const { chat, dropped } = translate({
      contents: [
        user({ text: 'hi' }),
        modelTurn({ text: 'pondering', thought: true, thoughtSignature: 'abc' }),
        modelTurn(
          { executableCode: { language: 'PYTHON', code: 'print(1)' } },
          { codeExecutionResult: { outcome: 'OUTCOME_OK', output: '1' } },
          { text: 'It is 1.' },
        ),
      ],
    });
    assert.deepEqual(chat.messages, [
      { role: 'user', content: [{ type: 'text', text: 'hi' }] },
      { role: 'assistant', content: 'It is 1.' },
    ]);
    for (const what of [
      'thought parts',
      'thoughtSignature',
      'contents[].parts[].executableCode',
      'contents[].parts[].codeExecutionResult',
    ])
      assert.ok(dropped.includes(what), what);
  });

  it('refuses a function call in a user turn, a response in a model turn, and a request with nothing left', () => {
    rejects(
      { contents: [user({ functionCall: { name: 'f', args: {} } })] },
      'contents[0].parts[0].functionCall',
      /belong in model turns/,
    );
    rejects(
      { contents: [user({ text: 'x' }), modelTurn({ functionResponse: { name: 'f', response: {} } })] },
      'contents[1].parts[0].functionResponse',
      /belong in user turns/,
    );
    rejects({ contents: [modelTurn({ text: 'x', thought: true })] }, 'contents', /nothing is left/);
  });

  it('maps generationConfig: sampling, the output limit clamped to the model, stops, candidates, penalties, logprobs', () => {
    const { chat, dropped } = translate({
      contents: [user({ text: 'x' })],
      generationConfig: {
        temperature: 0.3,
        topP: 0.9,
        topK: 40,
        candidateCount: 2,
        maxOutputTokens: 65_536,
        stopSequences: ['a', 'b', 'c', 'd', 'e'],
        presencePenalty: 0.5,
        frequencyPenalty: -0.5,
        seed: 7,
        responseLogprobs: true,
        logprobs: 3,
        speechConfig: { voiceConfig: {} },
      },
    });
    assert.equal(chat.temperature, 0.3);
    assert.equal(chat.top_p, 0.9);
    assert.equal(chat.n, 2);
    assert.equal(chat.max_completion_tokens, 16_384);
    assert.deepEqual(chat.stop, ['a', 'b', 'c', 'd']);
    assert.equal(chat.presence_penalty, 0.5);
    assert.equal(chat.frequency_penalty, -0.5);
    assert.equal(chat.seed, 7);
    assert.equal(chat.logprobs, true);
    assert.equal(chat.top_logprobs, 3);
    assert.ok(dropped.includes('generationConfig.topK'));
    assert.ok(dropped.includes('generationConfig.speechConfig'));
    assert.ok(dropped.some((what) => what.startsWith('generationConfig.stopSequences[4:]')));
  });

  it('asks chat for a stream with its usage when the request streams', () => {
    const { chat } = translate({ contents: [user({ text: 'x' })] }, model, {
      stream: true,
      native: false,
      reasons: true,
    });
    assert.equal(chat.stream, true);
    assert.deepEqual(chat.stream_options, { include_usage: true });
  });

  it('turns structured output into response_format', () => {
    const json = (generationConfig: Record<string, unknown>) =>
      translate({ contents: [user({ text: 'x' })], generationConfig }).chat.response_format;
    assert.deepEqual(json({ responseMimeType: 'application/json' }), { type: 'json_object' });
    assert.deepEqual(
      json({
        responseMimeType: 'application/json',
        responseSchema: {
          type: 'OBJECT',
          properties: { n: { type: 'INTEGER', nullable: true } },
          required: ['n'],
          propertyOrdering: ['n'],
        },
      }),
      {
        type: 'json_schema',
        json_schema: {
          name: 'response',
          schema: { type: 'object', properties: { n: { type: ['integer', 'null'] } }, required: ['n'] },
        },
      },
    );
    const schema = { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: false };
    assert.deepEqual(json({ responseMimeType: 'application/json', responseJsonSchema: schema }), {
      type: 'json_schema',
      json_schema: { name: 'response', schema },
    });
    assert.equal(json({ responseMimeType: 'text/plain' }), undefined);
    rejects(
      { contents: [user({ text: 'x' })], generationConfig: { responseSchema: { type: 'STRING' } } },
      'generationConfig.responseMimeType',
      /requires responseMimeType 'application\/json'/,
    );
  });

  it('turns thinkingConfig into reasoning_effort for a model that reasons', () => {
    const effort = (thinkingConfig: Record<string, unknown>, target = model, reasons = true) =>
      translate({ contents: [user({ text: 'x' })], generationConfig: { thinkingConfig } }, target, {
        stream: false,
        native: false,
        reasons,
      }).chat.reasoning_effort;
    assert.equal(effort({ thinkingBudget: 1024 }), 'minimal');
    assert.equal(effort({ thinkingBudget: 8192 }), 'medium');
    assert.equal(effort({ thinkingBudget: 24_576 }), 'high');
    assert.equal(effort({ thinkingBudget: 100 }), 'minimal');
    assert.equal(effort({ thinkingBudget: 0 }), 'none');
    assert.equal(effort({ thinkingBudget: -1 }), undefined);
    assert.equal(effort({ thinkingLevel: 'HIGH' }), 'high');
    assert.equal(effort({ thinkingLevel: 'low', includeThoughts: true }), 'low');
    assert.equal(effort({ includeThoughts: true }), undefined);
    // A model that takes no effort (another vendor's chat model behind a gemini-2.5 alias) is sent none.
    assert.equal(effort({ thinkingBudget: 8192 }, textOnly, false), undefined);
    // Anthropic's and Gemini's adapters turn an effort into thinking, for models the catalog calls chat too.
    assert.equal(effort({ thinkingBudget: 2048 }, textOnly, true), 'low');
    assert.throws(
      () =>
        parseBody(geminiGenerateRequestSchema, {
          contents: [user({ text: 'x' })],
          generationConfig: { thinkingConfig: { thinkingLevel: 'extreme' } },
        }),
      /thinkingConfig\.thinkingLevel/,
    );
  });
});

describe('Gemini tools → chat', () => {
  it('converts Gemini Schema parameters to JSON Schema', () => {
    assert.deepEqual(
      toJsonSchema({
        type: 'OBJECT',
        description: 'args',
        properties: {
          mode: { type: 'STRING', format: 'enum', enum: ['a', 'b'] },
          when: { type: 'STRING', format: 'date-time', nullable: true },
          tags: { type: 'ARRAY', items: { type: 'STRING' }, minItems: '1', maxItems: '5' },
          either: { anyOf: [{ type: 'NUMBER' }, { type: 'BOOLEAN' }], nullable: true },
          n: { type: 'integer', minimum: 0, maximum: 9, example: 3 },
        },
        required: ['mode'],
        propertyOrdering: ['mode', 'when'],
      }),
      {
        type: 'object',
        description: 'args',
        properties: {
          mode: { type: 'string', enum: ['a', 'b'] },
          when: { type: ['string', 'null'], format: 'date-time' },
          tags: { type: 'array', items: { type: 'string' }, minItems: 1, maxItems: 5 },
          either: { anyOf: [{ type: 'number' }, { type: 'boolean' }, { type: 'null' }] },
          n: { type: 'integer', minimum: 0, maximum: 9, examples: [3] },
        },
        required: ['mode'],
      },
    );
  });

  it('sends function declarations as chat functions, renaming what chat refuses, parametersJsonSchema as is', () => {
    const jsonSchema = {
      type: 'object',
      properties: { q: { type: 'string' } },
      required: ['q'],
      additionalProperties: false,
    };
    const request = {
      contents: [user({ text: 'x' })],
      tools: [
        {
          functionDeclarations: [
            { name: 'mcp.server:search', description: 'Search', parametersJsonSchema: jsonSchema },
            { name: 'noargs', description: 'No arguments' },
          ],
        },
      ],
    };
    const { chat } = translate(request);
    assert.deepEqual(chat.tools, [
      {
        type: 'function',
        function: { name: chatToolName('mcp.server:search'), description: 'Search', parameters: jsonSchema },
      },
      {
        type: 'function',
        function: { name: 'noargs', description: 'No arguments', parameters: { type: 'object', properties: {} } },
      },
    ]);
    assert.notEqual(chatToolName('mcp.server:search'), 'mcp.server:search');
    assert.equal(geminiToolNamesBack(request).get(chatToolName('mcp.server:search')), 'mcp.server:search');
    assert.equal(chat.tool_choice, undefined);
  });

  it('writes Gemini’s upper-case type names in a JSON schema in lower case, as Gemini CLI’s router schema needs', () => {
    const router = {
      type: 'OBJECT',
      properties: {
        complexity_reasoning: { type: 'STRING' },
        complexity_score: { type: 'INTEGER' },
        type: { type: ['STRING', 'NULL'], enum: ['OBJECT'] },
      },
      required: ['complexity_score'],
    };
    const { chat } = translate({
      contents: [user({ text: 'x' })],
      generationConfig: { responseMimeType: 'application/json', responseJsonSchema: router },
      tools: [
        {
          functionDeclarations: [
            { name: 'f', parametersJsonSchema: { type: 'object', properties: { n: { type: 'INTEGER' } } } },
          ],
        },
      ],
    });
    assert.deepEqual(chat.response_format, {
      type: 'json_schema',
      json_schema: {
        name: 'response',
        schema: {
          type: 'object',
          properties: {
            complexity_reasoning: { type: 'string' },
            complexity_score: { type: 'integer' },
            type: { type: ['string', 'null'], enum: ['OBJECT'] },
          },
          required: ['complexity_score'],
        },
      },
    });
    assert.deepEqual((chat.tools![0] as { function: { parameters: unknown } }).function.parameters, {
      type: 'object',
      properties: { n: { type: 'integer' } },
    });
  });

  it('maps functionCallingConfig to tool_choice, narrowing the tools to the allowed ones', () => {
    const decl = (name: string) => ({ name, parameters: { type: 'OBJECT', properties: {} } });
    const choose = (functionCallingConfig: Record<string, unknown>) =>
      translate({
        contents: [user({ text: 'x' })],
        tools: [{ functionDeclarations: [decl('a'), decl('b'), decl('c')] }],
        toolConfig: { functionCallingConfig },
      }).chat;
    const names = (chat: ChatCompletionRequest) =>
      chat.tools!.map((tool) => (tool as { function: { name: string } }).function.name);
    assert.equal(choose({ mode: 'AUTO' }).tool_choice, 'auto');
    assert.equal(choose({ mode: 'VALIDATED' }).tool_choice, 'auto');
    assert.equal(choose({ mode: 'NONE' }).tool_choice, 'none');
    assert.equal(choose({ mode: 'ANY' }).tool_choice, 'required');
    const one = choose({ mode: 'ANY', allowedFunctionNames: ['b'] });
    assert.deepEqual(one.tool_choice, { type: 'function', function: { name: 'b' } });
    assert.deepEqual(names(one), ['b']);
    const two = choose({ mode: 'ANY', allowedFunctionNames: ['a', 'c'] });
    assert.equal(two.tool_choice, 'required');
    assert.deepEqual(names(two), ['a', 'c']);
    rejects(
      {
        contents: [user({ text: 'x' })],
        tools: [{ functionDeclarations: [decl('a')] }],
        toolConfig: { functionCallingConfig: { mode: 'ANY', allowedFunctionNames: ['zz'] } },
      },
      'toolConfig.functionCallingConfig.allowedFunctionNames[0]',
      /the tool 'zz' is not among the request's tools/,
    );
    rejects(
      { contents: [user({ text: 'x' })], tools: [{ functionDeclarations: [decl('a'), decl('a')] }] },
      'tools[0].functionDeclarations[1].name',
      /declared twice/,
    );
  });

  it(
    'turns Google Search into the vendor’s web search where the model has one, and leaves out what Gemini alone ' +
      'runs',
    () => {
      const tools = [{ googleSearch: {} }, { codeExecution: {} }, { urlContext: {} }];
      const searching = translate({ contents: [user({ text: 'x' })], tools }, { ...model, web_search: true });
      assert.deepEqual(searching.chat.web_search_options, {});
      assert.ok(searching.dropped.includes('tools[].codeExecution (run by Gemini only)'));
      const plain = translate({ contents: [user({ text: 'x' })], tools });
      assert.equal(plain.chat.web_search_options, undefined);
      assert.ok(plain.dropped.some((what) => what.startsWith('tools[].googleSearch')));
      assert.equal(plain.chat.tools, undefined);
    },
  );

  it('refuses a required call when only tools Gemini runs are left, unless Gemini serves the model', () => {
    const body = {
      contents: [user({ text: 'x' })],
      tools: [{ codeExecution: {} }],
      toolConfig: { functionCallingConfig: { mode: 'ANY' } },
    };
    rejects(
      body,
      'toolConfig.functionCallingConfig',
      /'codeExecution' is run by Google, and functionCallingConfig.mode 'ANY' needs a tool this model can call/,
    );
    // Gemini gets the request as written: its chat form (a fallback's) leaves the choice out.
    const native = translate(body, model, { stream: false, native: true, reasons: true });
    assert.equal(native.chat.tool_choice, undefined);
    assert.ok(native.dropped.some((what) => what.startsWith('toolConfig.functionCallingConfig')));
    // A choice left to the model, or with functions to call, is served as before.
    assert.equal(translate({ ...body, toolConfig: { functionCallingConfig: { mode: 'AUTO' } } }).chat.tools, undefined);
    const withFunction = translate({
      ...body,
      tools: [{ codeExecution: {} }, { functionDeclarations: [{ name: 'f' }] }],
    });
    assert.equal(withFunction.chat.tool_choice, 'required');
  });

  it(
    'serves Gemini CLI’s requests as it sends them: declarations with parametersJsonSchema, no toolConfig; its ' +
      'router’s JSON schema',
    () => {
      const { chat } = translate({
        systemInstruction: { parts: [{ text: 'You are a non-interactive CLI agent.' }] },
        contents: [user({ text: '<session_context>…</session_context>' }, { text: 'read a.txt' })],
        tools: [
          {
            functionDeclarations: [
              {
                name: 'update_topic',
                description: 'Topic',
                parametersJsonSchema: { type: 'object', properties: { topic: { type: 'string' } } },
              },
              {
                name: 'read_file',
                description: 'Reads a file',
                parametersJsonSchema: {
                  type: 'object',
                  properties: { file_path: { type: 'string' } },
                  required: ['file_path'],
                },
              },
              {
                name: 'google_web_search',
                description: 'Search',
                parametersJsonSchema: { type: 'object', properties: { query: { type: 'string' } } },
              },
            ],
          },
        ],
        generationConfig: {
          temperature: 1,
          topP: 0.95,
          topK: 64,
          thinkingConfig: { includeThoughts: true, thinkingBudget: 8192 },
        },
      });
      assert.deepEqual(
        chat.tools!.map((tool) => (tool as { function: { name: string } }).function.name),
        ['update_topic', 'read_file', 'google_web_search'],
      );
      assert.equal(chat.tool_choice, undefined);
      assert.equal(chat.reasoning_effort, 'medium');
      const router = translate({
        contents: [user({ text: 'route this' })],
        generationConfig: {
          responseMimeType: 'application/json',
          responseJsonSchema: {
            type: 'OBJECT',
            properties: { complexity_reasoning: { type: 'STRING' }, complexity_score: { type: 'INTEGER' } },
            required: ['complexity_reasoning', 'complexity_score'],
          },
          thinkingConfig: { includeThoughts: true, thinkingLevel: 'HIGH' },
        },
      }).chat;
      assert.deepEqual(router.response_format, {
        type: 'json_schema',
        json_schema: {
          name: 'response',
          schema: {
            type: 'object',
            properties: { complexity_reasoning: { type: 'string' }, complexity_score: { type: 'integer' } },
            required: ['complexity_reasoning', 'complexity_score'],
          },
        },
      });
      assert.equal(router.tools, undefined);
    },
  );
});

describe('Gemini schemas', () => {
  it('names the field a body gets wrong by its path', () => {
    assert.throws(
      () => parseBody(geminiGenerateRequestSchema, { contents: [{ parts: [{ text: 5 }] }] }),
      (error: GatewayError) => error.param === 'contents[0].parts[0].text',
    );
    assert.throws(
      () => parseBody(geminiGenerateRequestSchema, { contents: [{ role: 'assistant', parts: [] }] }),
      (error: GatewayError) => error.param === 'contents[0].role',
    );
    assert.throws(
      () => parseBody(geminiGenerateRequestSchema, {}),
      (error: GatewayError) => error.param === 'contents' && /Missing required parameter/.test(error.message),
    );
    assert.throws(
      () => parseBody(geminiGenerateRequestSchema, { contents: [] }),
      (error: GatewayError) => error.param === 'contents',
    );
  });

  it('refuses a part holding two data fields, and inline data that is not base64, as Google does', () => {
    for (const part of [
      { text: 'a', inlineData: { mimeType: 'image/png', data: png } },
      { text: '', functionCall: { name: 'f', args: {} } },
      { inline_data: { mime_type: 'image/png', data: png }, file_data: { file_uri: 'https://x/y.png' } },
    ]) {
      assert.throws(
        () => parseBody(geminiGenerateRequestSchema, { contents: [{ parts: [part] }] }),
        (error: GatewayError) =>
          error.status === 400 && error.param === 'contents[0].parts[0]' && /holds one of/.test(error.message),
      );
    }
    for (const data of ['!!!not base64!!!', 'abcde', 'ab=c', 'a b']) {
      assert.throws(
        () =>
          parseBody(geminiGenerateRequestSchema, {
            contents: [{ parts: [{ inlineData: { mimeType: 'image/png', data } }] }],
          }),
        (error: GatewayError) =>
          error.status === 400 &&
          error.param === 'contents[0].parts[0].inlineData.data' &&
          /Base64 decoding failed/.test(error.message),
        data,
      );
    }
    // Both alphabets, padded or not, and a thought's text beside its signature, are Google's own.
    for (const data of [png, 'iVBO-w_KGgo', 'aGk', ''])
      assert.ok(
        parseBody(geminiGenerateRequestSchema, {
          contents: [{ parts: [{ inlineData: { mimeType: 'image/png', data } }] }],
        }),
      );
    assert.ok(
      parseBody(geminiGenerateRequestSchema, {
        contents: [
          {
            role: 'model',
            parts: [
              { text: 't', thought: true, thoughtSignature: 'c2ln' },
              { functionCall: { name: 'f' }, thoughtSignature: 'c2ln' },
            ],
          },
        ],
      }),
    );
  });

  it('keeps fields it does not read, for Gemini', () => {
    const body = parseBody(geminiGenerateRequestSchema, {
      contents: [
        { role: 'model', parts: [{ functionCall: { name: 'f', args: { some_arg: 1 } }, thoughtSignature: 'c2ln' }] },
      ],
      safetySettings: [{ category: 'HARM_CATEGORY_HARASSMENT', threshold: 'BLOCK_NONE' }],
      generationConfig: {
        thinkingConfig: { includeThoughts: true, thinkingLevel: 'HIGH' },
        mediaResolution: 'MEDIA_RESOLUTION_LOW',
      },
      tools: [{ googleSearch: {} }],
    }) as Record<string, any>;
    assert.equal(body.contents[0].parts[0].thoughtSignature, 'c2ln');
    // A function's arguments are the client's: their keys stay as written.
    assert.deepEqual(body.contents[0].parts[0].functionCall.args, { some_arg: 1 });
    assert.equal(body.generationConfig.thinkingConfig.thinkingLevel, 'HIGH');
    assert.equal(body.generationConfig.mediaResolution, 'MEDIA_RESOLUTION_LOW');
    assert.deepEqual(body.tools, [{ googleSearch: {} }]);
  });

  it('takes a countTokens body of contents or of a generateContentRequest, not both or neither', () => {
    assert.ok(parseBody(geminiCountTokensRequestSchema, { contents: [user({ text: 'x' })] }));
    assert.ok(
      parseBody(geminiCountTokensRequestSchema, {
        generateContentRequest: { model: 'models/x', contents: [user({ text: 'x' })] },
      }),
    );
    assert.throws(() => parseBody(geminiCountTokensRequestSchema, {}), /either contents or generateContentRequest/);
    assert.throws(
      () =>
        parseBody(geminiCountTokensRequestSchema, {
          contents: [user({ text: 'x' })],
          generateContentRequest: { contents: [user({ text: 'y' })] },
        }),
      /one of the two/,
    );
  });
});

describe('Gemini embeddings → OpenAI embeddings', () => {
  const embedder = {
    id: 'text-embedding-3-small',
    capability: 'embedding',
    dimensions: 1536,
    supports_dimensions: true,
  } as CatalogModel;

  it('embeds one content, its text parts as one text', () => {
    const body = parseBody(geminiEmbedContentRequestSchema, {
      content: { parts: [{ text: 'Hello' }, { text: 'world' }] },
      taskType: 'RETRIEVAL_QUERY',
      output_dimensionality: 256,
    });
    const job = toEmbedJob(body, embedder, 'text-embedding-3-small', false);
    assert.deepEqual(job.embedding, {
      model: 'text-embedding-3-small',
      input: ['Hello\nworld'],
      encoding_format: 'float',
      dimensions: 256,
    });
    assert.equal(job.batch, false);
    assert.equal((job.gemini as { taskType: string }).taskType, 'RETRIEVAL_QUERY');
  });

  it('embeds a batch in order; each request names the path’s model', () => {
    const body = parseBody(geminiBatchEmbedContentsRequestSchema, {
      requests: [
        { model: 'models/gemini-embedding-001', content: { parts: [{ text: 'a' }] } },
        { model: 'gemini-embedding-001', content: { parts: [{ text: 'b' }] } },
      ],
    });
    assert.deepEqual(toEmbedJob(body, embedder, 'gemini-embedding-001', true).embedding.input, ['a', 'b']);
    const other = parseBody(geminiBatchEmbedContentsRequestSchema, {
      requests: [
        { model: 'models/gemini-embedding-001', content: { parts: [{ text: 'a' }] } },
        { model: 'models/other', content: { parts: [{ text: 'b' }] } },
      ],
    });
    assert.throws(
      () => toEmbedJob(other, embedder, 'gemini-embedding-001', true),
      (error: GatewayError) =>
        error.param === 'requests[1].model' && /differs from the model of the request's path/.test(error.message),
    );
  });

  it(
    'refuses parts that are not text, empty contents, and dimensions the model does not take or a batch disagrees ' +
      'on',
    () => {
      const refuse = (body: unknown, batch: boolean, param: string) =>
        assert.throws(
          () =>
            toEmbedJob(
              parseBody(batch ? geminiBatchEmbedContentsRequestSchema : geminiEmbedContentRequestSchema, body) as never,
              embedder,
              'e',
              batch,
            ),
          (error: GatewayError) => error.status === 400 && error.param === param,
        );
      refuse(
        { content: { parts: [{ text: 'a' }, { inlineData: { mimeType: 'image/png', data: png } }] } },
        false,
        'content.parts[1]',
      );
      refuse({ content: { parts: [] } }, false, 'content.parts');
      refuse({ content: { parts: [{ text: 'a' }] }, outputDimensionality: 4096 }, false, 'outputDimensionality');
      refuse(
        {
          requests: [
            { content: { parts: [{ text: 'a' }] }, outputDimensionality: 8 },
            { content: { parts: [{ text: 'b' }] } },
          ],
        },
        true,
        'requests[1].outputDimensionality',
      );
    },
  );
});

describe('Gemini paths and models', () => {
  it('reads the model and method of both path spellings', () => {
    assert.deepEqual(readGeminiPath('/v1beta/models/gemini-2.5-pro:streamGenerateContent'), {
      version: 'v1beta',
      model: 'gemini-2.5-pro',
      method: 'streamGenerateContent',
      endpoint: 'gemini.generate',
    });
    assert.deepEqual(readGeminiPath('/v1/models/gpt-4o:countTokens'), {
      version: 'v1',
      model: 'gpt-4o',
      method: 'countTokens',
      endpoint: 'gemini.count_tokens',
    });
    assert.deepEqual(readGeminiPath('/v1beta/models/models/org%2Fmodel:embedContent/'), {
      version: 'v1beta',
      model: 'org/model',
      method: 'embedContent',
      endpoint: 'gemini.embed',
    });
    assert.deepEqual(readGeminiPath('/v1beta/models/x:predict'), { version: 'v1beta', model: 'x', method: 'predict' });
    assert.equal(readGeminiPath('/v1/models/gpt-4o'), undefined);
    assert.equal(readGeminiPath('/v1/chat/completions'), undefined);
    assert.equal(readGeminiPath('/v1beta/tunedModels/x:generateContent'), undefined);
    // The colon percent-encoded (canonical paths upper-case the escape), an empty model or method: still a call.
    assert.deepEqual(readGeminiPath('/v1beta/models/gpt-4o%3AgenerateContent'), {
      version: 'v1beta',
      model: 'gpt-4o',
      method: 'generateContent',
      endpoint: 'gemini.generate',
    });
    assert.deepEqual(readGeminiPath('/v1/models/gpt-4o%3AstreamGenerateContent'), {
      version: 'v1',
      model: 'gpt-4o',
      method: 'streamGenerateContent',
      endpoint: 'gemini.generate',
    });
    assert.deepEqual(readGeminiPath('/v1beta/models/:generateContent'), {
      version: 'v1beta',
      model: '',
      method: 'generateContent',
      endpoint: 'gemini.generate',
    });
    assert.deepEqual(readGeminiPath('/v1beta/models/x:'), { version: 'v1beta', model: 'x', method: '' });
    assert.deepEqual(readGeminiPath('/v1beta/models/x:generate-content'), {
      version: 'v1beta',
      model: 'x',
      method: 'generate-content',
    });
    // /v1 is OpenAI's too: a fine-tuned model's id holds colons and ends in no word of Google's.
    assert.equal(readGeminiPath('/v1/models/ft:gpt-4o-mini:acme::9xYz-1'), undefined);
    for (const path of [
      '/v1/models/x%3AgenerateContent',
      '/v1/models/x:generateContent/',
      '/v1/models/:generateContent',
      '/v1beta/models/x',
    ])
      assert.ok(speaksGoogle(path), path);
    for (const path of [
      '/v1/models/x',
      '/v1/models/a/b:generateContent',
      '/v1/chat/completions',
      '/v1/models/ft:gpt-4o-mini:acme::9xYz-1',
    ])
      assert.ok(!speaksGoogle(path), path);
    assert.equal(streamFormOf('sse'), 'sse');
    assert.equal(streamFormOf(undefined), 'array');
    assert.equal(streamFormOf('json'), 'array');
  });

  it('describes models in Google’s shape and pages the list with an opaque token', () => {
    const catalog = Array.from({ length: 7 }, (_, i) => ({
      id: `m-${i}`,
      owned_by: 'test',
      capability: i === 6 ? 'image' : i === 5 ? 'embedding' : i % 2 ? 'reasoning' : 'chat',
      created: 1,
      context_window: 1000,
      max_output_tokens: i === 5 ? 0 : 100,
      input_modalities: ['text'],
      supports_tools: true,
      routes: [{ vendor: 'mock' }],
    })) as CatalogModel[];
    assert.deepEqual(toGoogleModel(catalog[1]!, 'alias'), {
      name: 'models/alias',
      baseModelId: 'm-1',
      version: '1',
      displayName: 'alias',
      description: 'm-1 (test), served by Switchyard.',
      inputTokenLimit: 1000,
      outputTokenLimit: 100,
      supportedGenerationMethods: ['generateContent', 'streamGenerateContent', 'countTokens'],
      thinking: true,
    });
    assert.deepEqual(toGoogleModel(catalog[5]!).supportedGenerationMethods, ['embedContent', 'batchEmbedContents']);
    const first = googleModelPage(catalog, { pageSize: '4' });
    assert.deepEqual(
      first.models.map((m) => m.name),
      ['models/m-0', 'models/m-1', 'models/m-2', 'models/m-3'],
    );
    assert.ok(first.nextPageToken);
    const second = googleModelPage(catalog, { pageSize: '4', pageToken: first.nextPageToken });
    // The image model is served by no Gemini method: not listed.
    assert.deepEqual(
      second.models.map((m) => m.name),
      ['models/m-4', 'models/m-5'],
    );
    assert.equal(second.nextPageToken, undefined);
    assert.equal(googleModelPage(catalog, {}).models.length, 6);
    assert.throws(
      () => googleModelPage(catalog, { pageToken: 'bogus' }),
      (error: GatewayError) => error.param === 'pageToken',
    );
    assert.throws(
      () => googleModelPage(catalog, { pageSize: '-1' }),
      (error: GatewayError) => error.param === 'pageSize',
    );
  });
});
