/*
 * The dialect layer's shared policy (api/dialects/): what chat gets for a request's tools, tool choice, web search
 * and settings, and where a refusal points, in terms any dialect can say. The Messages and Responses translators
 * are tested through it in their own files; here the policy is checked as a third dialect (Gemini's words) would
 * use it, so a new decoder needs no policy of its own.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { GatewayError } from '../../shared/errors.js';
import type { ChatCompletionRequest } from '../../shared/schemas/chat.js';
import { applyChatSettings, chatResponseFormat, effortForBudget } from '../../api/dialects/chat-request.js';
import {
  chatFunction,
  chatToolChoice,
  chatToolFields,
  chatWebSearch,
  type ChoiceWording,
  type DeclaredTools,
} from '../../api/dialects/chat-tools.js';
import { invalidAt, paramOf, parseAt } from '../../api/dialects/field-path.js';

/** How Gemini's `toolConfig.functionCallingConfig` would say its choice. */
const gemini: ChoiceWording = {
  path: ['toolConfig', 'functionCallingConfig'],
  namePath: ['toolConfig', 'functionCallingConfig', 'allowedFunctionNames', 0],
  required: "functionCallingConfig.mode 'ANY'",
  declined: 'is run by Google',
};

const weather = {
  name: 'get_weather',
  description: 'The weather',
  parameters: { type: 'object', properties: { city: { type: 'string' } } },
};
const tools = (extra: Partial<DeclaredTools> = {}): DeclaredTools => ({ functions: [weather], declined: [], ...extra });

/** Asserts a 400 at `param` whose message matches `message`, with `code`. */
function refuses(run: () => unknown, param: string, message: RegExp, code: string) {
  assert.throws(run, (error: unknown) => {
    assert.ok(error instanceof GatewayError, String(error));
    assert.equal(error.status, 400);
    assert.equal(error.param, param);
    assert.equal(error.code, code);
    assert.match(error.message, message);
    return true;
  });
}

describe('chat functions and web search', () => {
  it('writes a function as chat does, with an empty object for no parameters and no empty description', () => {
    assert.deepEqual(chatFunction(weather), { type: 'function', function: weather });
    assert.deepEqual(chatFunction({ name: 'now', description: '', parameters: null, strict: null }), {
      type: 'function',
      function: { name: 'now', parameters: { type: 'object', properties: {} } },
    });
    assert.deepEqual(chatFunction({ name: 'f', strict: false }).function, {
      name: 'f',
      parameters: { type: 'object', properties: {} },
      strict: false,
    });
  });

  it('takes the search settings chat has, and nothing else', () => {
    assert.deepEqual(chatWebSearch({}), {});
    assert.deepEqual(chatWebSearch({ contextSize: 'high', userLocation: { type: 'approximate', country: 'NO' } }), {
      search_context_size: 'high',
      user_location: { type: 'approximate', approximate: { country: 'NO' } },
    });
    assert.deepEqual(chatWebSearch({ contextSize: 'huge', userLocation: 'Oslo' }), {});
  });
});

describe('the tool choice policy, in a third dialect’s words', () => {
  it('passes auto, none and required, and names a function by its chat name', () => {
    for (const choice of ['auto', 'none', 'required'] as const)
      assert.equal(chatToolChoice(choice, tools(), gemini), choice);
    assert.deepEqual(chatToolChoice({ tool: 'get.weather', function: 'get_weather' }, tools(), gemini), {
      type: 'function',
      function: { name: 'get_weather' },
    });
    assert.equal(chatToolChoice(undefined, tools(), gemini), undefined);
  });

  it('leaves a choice of the vendor’s own search to the model, required or named', () => {
    const searching = { functions: [], declined: ['codeExecution'], search: { name: 'googleSearch', settings: {} } };
    assert.equal(chatToolChoice('required', searching, gemini), undefined);
    assert.equal(
      chatToolChoice(
        { tool: 'googleSearch', function: 'googleSearch' },
        tools({ search: { name: 'googleSearch', settings: {} } }),
        gemini,
      ),
      undefined,
    );
  });

  it('refuses a required call with nothing left to call, and a choice of a tool left out, at the choice', () => {
    refuses(
      () => chatToolChoice('required', { functions: [], declined: ['codeExecution'] }, gemini),
      'toolConfig.functionCallingConfig',
      /'codeExecution' is run by Google, and functionCallingConfig.mode 'ANY' needs a tool/,
      'unsupported_tool',
    );
    refuses(
      () =>
        chatToolChoice(
          { tool: 'codeExecution', function: 'codeExecution' },
          tools({ declined: ['codeExecution'] }),
          gemini,
        ),
      'toolConfig.functionCallingConfig',
      /'codeExecution' is run by Google/,
      'unsupported_tool',
    );
  });

  it('refuses a function the request does not declare, at the choice’s name, with or without functions', () => {
    for (const declared of [tools(), { functions: [], declined: [] }]) {
      refuses(
        () => chatToolChoice({ tool: 'lookup', function: 'lookup' }, declared, gemini),
        'toolConfig.functionCallingConfig.allowedFunctionNames[0]',
        /the tool 'lookup' is not among the request's tools/,
        'invalid_value',
      );
    }
  });

  it('with no tools at all, a required choice asks nothing of chat', () => {
    assert.equal(chatToolChoice('required', { functions: [], declined: [] }, gemini), 'required');
    assert.deepEqual(chatToolFields({ functions: [], declined: [] }, 'required', false, gemini), {});
  });
});

describe('a choice among some functions (Gemini’s allowedFunctionNames)', () => {
  const clock = { name: 'clock' };
  const news = { name: 'news_search' };
  const three = (): DeclaredTools => ({ functions: [weather, clock, news], declined: ['codeExecution'] });
  const named = (name: string) => ({ tool: name, function: name });
  const among = { ...gemini, namePath: ['toolConfig', 'functionCallingConfig', 'allowedFunctionNames'] };
  const names = (fields: ReturnType<typeof chatToolFields>) =>
    fields.tools?.map((tool) => tool.type === 'function' && tool.function.name);

  it('sends only the functions allowed, and names the one when a call of it alone is required', () => {
    const two = chatToolFields(
      three(),
      { mode: 'required', among: [named('news_search'), named('get_weather')] },
      undefined,
      among,
    );
    assert.deepEqual(names(two), ['get_weather', 'news_search'], 'in the order declared');
    assert.equal(two.tool_choice, 'required');
    const one = chatToolFields(three(), { mode: 'required', among: [named('clock')] }, undefined, among);
    assert.deepEqual(names(one), ['clock']);
    assert.deepEqual(one.tool_choice, { type: 'function', function: { name: 'clock' } });
    const auto = chatToolFields(three(), { mode: 'auto', among: [named('clock')] }, undefined, among);
    assert.deepEqual([names(auto), auto.tool_choice], [['clock'], 'auto']);
  });

  it('forbids calls of every function with none, and takes an empty list as no list', () => {
    const none = chatToolFields(three(), { mode: 'none', among: [named('clock')] }, undefined, among);
    assert.deepEqual([names(none), none.tool_choice], [['get_weather', 'clock', 'news_search'], 'none']);
    const all = chatToolFields(three(), { mode: 'required', among: [] }, undefined, among);
    assert.deepEqual([names(all), all.tool_choice], [['get_weather', 'clock', 'news_search'], 'required']);
  });

  it('refuses a name it does not declare at its place in the list, and one of a tool left out at the choice', () => {
    refuses(
      () => chatToolFields(three(), { mode: 'auto', among: [named('clock'), named('stock_price')] }, undefined, among),
      'toolConfig.functionCallingConfig.allowedFunctionNames[1]',
      /the tool 'stock_price' is not among the request's tools/,
      'invalid_value',
    );
    refuses(
      () => chatToolFields(three(), { mode: 'none', among: [named('stock_price')] }, undefined, among),
      'toolConfig.functionCallingConfig.allowedFunctionNames[0]',
      /stock_price/,
      'invalid_value',
    );
    refuses(
      () => chatToolFields(three(), { mode: 'required', among: [named('codeExecution')] }, undefined, among),
      'toolConfig.functionCallingConfig',
      /'codeExecution' is run by Google/,
      'unsupported_tool',
    );
  });

  it('leaves the vendor’s search among them to the model', () => {
    const searching = { ...three(), search: { name: 'googleSearch', settings: {} } };
    assert.deepEqual(
      chatToolFields(searching, { mode: 'required', among: [named('googleSearch')] }, undefined, among),
      { web_search_options: {} },
    );
  });
});

describe('chat tool fields', () => {
  it('sends tools, their choice and the parallel flag together, and the search beside them', () => {
    const fields = chatToolFields(
      tools({ search: { name: 'googleSearch', settings: { contextSize: 'low' } } }),
      'required',
      false,
      gemini,
    );
    assert.deepEqual(fields, {
      tools: [{ type: 'function', function: weather }],
      tool_choice: 'required',
      parallel_tool_calls: false,
      web_search_options: { search_context_size: 'low' },
    });
    assert.deepEqual(Object.keys(fields), ['tools', 'tool_choice', 'parallel_tool_calls', 'web_search_options']);
  });

  it('with only the search left: no tools, no choice, no parallel flag', () => {
    assert.deepEqual(
      chatToolFields({ functions: [], declined: [], search: { name: 's', settings: {} } }, 'auto', true, gemini),
      { web_search_options: {} },
    );
  });
});

describe('chat settings', () => {
  const base = (): ChatCompletionRequest => ({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });

  it('clamps the output limit to the model’s, keeps four stop sequences and names the rest', () => {
    const chat = base();
    const dropped = new Set<string>();
    applyChatSettings(
      chat,
      {
        maxTokens: 100_000,
        modelMaxTokens: 8192,
        stop: { sequences: ['a', 'b', 'c', 'd', 'e'], field: 'generationConfig.stopSequences' },
        temperature: 0,
        topP: 1,
      },
      dropped,
    );
    assert.equal(chat.max_completion_tokens, 8192);
    assert.deepEqual(chat.stop, ['a', 'b', 'c', 'd']);
    assert.deepEqual([...dropped], ['generationConfig.stopSequences[4:] (chat takes at most 4)']);
    assert.equal(chat.temperature, 0);
    assert.equal(chat.top_p, 1);
  });

  it('leaves out what the request did not say, and keeps a limit the model does not bound', () => {
    const chat = base();
    applyChatSettings(chat, {
      maxTokens: 50,
      modelMaxTokens: 0,
      temperature: null,
      stop: { sequences: [], field: 'stop' },
    });
    assert.deepEqual(chat, { ...base(), max_completion_tokens: 50 });
  });

  it('writes structured output and reasoning effort as chat does', () => {
    assert.deepEqual(chatResponseFormat({ type: 'json' }), { type: 'json_object' });
    assert.deepEqual(
      chatResponseFormat({
        type: 'schema',
        name: 'output',
        schema: { type: 'object' },
        strict: true,
        description: null,
      }),
      {
        type: 'json_schema',
        json_schema: { name: 'output', schema: { type: 'object' }, strict: true },
      },
    );
    const chat = base();
    applyChatSettings(chat, { effort: effortForBudget(5000), output: { type: 'json' } });
    assert.equal(chat.reasoning_effort, 'medium');
    assert.deepEqual(chat.response_format, { type: 'json_object' });
    assert.equal(effortForBudget(10), 'minimal');
    assert.equal(effortForBudget(1_000_000), 'xhigh');
  });
});

describe('errors at the client’s field', () => {
  const shape = z.looseObject({ name: z.string(), mode: z.enum(['AUTO', 'ANY', 'NONE']) });

  it('roots a schema failure at the piece’s place, and says a missing enum field is missing', () => {
    assert.deepEqual(parseAt(shape, { name: 'f', mode: 'ANY' }, ['tools', 0]), { name: 'f', mode: 'ANY' });
    refuses(
      () => parseAt(shape, { name: 1, mode: 'ANY' }, ['tools', 2, 'functionDeclarations', 0]),
      'tools[2].functionDeclarations[0].name',
      /Invalid type for 'tools\[2\]\.functionDeclarations\[0\]\.name'/,
      'invalid_type',
    );
    refuses(
      () => parseAt(shape, { name: 'f' }, ['toolConfig', 'functionCallingConfig']),
      'toolConfig.functionCallingConfig.mode',
      /Missing required parameter: 'toolConfig\.functionCallingConfig\.mode'/,
      'missing_required_parameter',
    );
    refuses(
      () => parseAt(shape, { name: 'f', mode: 'SOMETIMES' }, ['toolConfig']),
      'toolConfig.mode',
      /toolConfig\.mode/,
      'invalid_value',
    );
  });

  it('says an invalid field in the body parser’s words', () => {
    const error = invalidAt(['contents', 3, 'parts', 0], 'expected a part.');
    assert.equal(error.message, "Invalid 'contents[3].parts[0]': expected a part.");
    assert.equal(error.param, 'contents[3].parts[0]');
    assert.equal(error.code, 'invalid_value');
    assert.equal(invalidAt(['x'], 'no.', 'unsupported_parameter').code, 'unsupported_parameter');
    assert.equal(paramOf(['a', 0, 'b']), 'a[0].b');
  });
});
