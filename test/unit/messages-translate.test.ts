import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { GatewayError } from '../../shared/errors.js';
import { chatToolName, toolNamesBack } from '../../shared/messages-tools.js';
import { flatToolName } from '../../shared/responses-tools.js';
import { chatCompletionRequestSchema, type ChatCompletionRequest } from '../../shared/schemas/chat.js';
import { messagesRequestSchema, type MessagesRequest } from '../../shared/schemas/messages.js';
import { effortForBudget, toChatRequest } from '../../api/messages/translate.js';
import { withoutUnsignedThinking } from '../../workers/vendors/anthropic/native-messages.js';

const model = { id: 'gpt-test', max_output_tokens: 16_384 };

const parse = (body: Record<string, unknown>): MessagesRequest =>
  messagesRequestSchema.parse({ model: 'claude-x', max_tokens: 1024, ...body });

/**
 * Parses a Messages body with the request schema, translates it, and checks the chat request against chat's own schema.
 */
function translate(
  body: Record<string, unknown>,
  target: { id: string; max_output_tokens: number; web_search?: boolean } = model,
): { chat: ChatCompletionRequest; dropped: string[] } {
  const result = toChatRequest(parse(body), target);
  chatCompletionRequestSchema.parse(result.chat);
  return result;
}

const user = (content: unknown) => ({ messages: [{ role: 'user', content }] });

/** Asserts a 400 with this param (and, if given, a message matching `message`). */
function rejects(body: Record<string, unknown>, param: string | null, message?: RegExp) {
  assert.throws(
    () => toChatRequest(parse(body), model),
    (error: unknown) => {
      assert.ok(error instanceof GatewayError, `expected a GatewayError, got ${String(error)}`);
      assert.equal(error.status, 400);
      assert.equal(error.param, param, error.message);
      if (message) assert.match(error.message, message);
      return true;
    },
  );
}

const png = 'iVBORw0KGgo=';

describe('chatToolName and toolNamesBack', () => {
  it('keeps a name chat takes, and renames one it does not, uniquely and within 64 characters', () => {
    assert.equal(chatToolName('get_weather'), 'get_weather');
    assert.equal(chatToolName('mcp__ide__getDiagnostics'), 'mcp__ide__getDiagnostics');
    const dotted = chatToolName('files.read');
    assert.match(dotted, /^files_read_[0-9a-f]{8}$/);
    assert.notEqual(dotted, chatToolName('files_read'));
    assert.notEqual(dotted, chatToolName('files:read'));
    const long = 'x'.repeat(128);
    assert.equal(chatToolName(long).length, 64);
    assert.notEqual(chatToolName(long), chatToolName(`${'x'.repeat(127)}y`));
    for (const name of [dotted, chatToolName(long), chatToolName('naïve tool')])
      assert.match(name, /^[a-zA-Z0-9_-]{1,64}$/);
    assert.equal(chatToolName('files.read'), dotted, 'the same name every time');
  });

  it('maps only the renamed tools back to the client names', () => {
    const back = toolNamesBack([{ name: 'Read' }, { name: 'files.read' }, { name: 'y'.repeat(100) }]);
    assert.deepEqual(
      [...back.entries()],
      [
        [chatToolName('files.read'), 'files.read'],
        [chatToolName('y'.repeat(100)), 'y'.repeat(100)],
      ],
    );
    assert.equal(toolNamesBack(undefined).size, 0);
  });

  it('leaves the Responses API flat names as they were', () => {
    assert.equal(flatToolName('crm', 'lookup'), 'crm__lookup');
    assert.match(flatToolName('c.r.m', 'lookup'), /^c_r_m__lookup_[0-9a-f]{8}$/);
  });
});

describe('effortForBudget', () => {
  it('takes the largest preset at or below the budget, minimal below the smallest', () => {
    const cases: [number, string][] = [
      [1, 'minimal'],
      [1023, 'minimal'],
      [1024, 'minimal'],
      [2047, 'minimal'],
      [2048, 'low'],
      [4095, 'low'],
      [4096, 'medium'],
      [16_383, 'medium'],
      [16_384, 'high'],
      [31_999, 'high'],
      [32_000, 'xhigh'],
      [128_000, 'xhigh'],
    ];
    for (const [budget, effort] of cases) assert.equal(effortForBudget(budget), effort, `budget ${budget}`);
  });
});

describe('toChatRequest: system and plain messages', () => {
  it('sends the catalog id, max_completion_tokens, and a string system prompt first', () => {
    const { chat, dropped } = translate({ system: 'Be terse.', ...user('hi') });
    assert.deepEqual(chat, {
      model: 'gpt-test',
      messages: [
        { role: 'system', content: 'Be terse.' },
        { role: 'user', content: 'hi' },
      ],
      max_completion_tokens: 1024,
    });
    assert.deepEqual(dropped, []);
  });

  it('keeps system blocks as separate text parts, without cache_control', () => {
    const { chat } = translate({
      system: [
        { type: 'text', text: 'one', cache_control: { type: 'ephemeral' } },
        { type: 'text', text: 'two' },
      ],
      ...user('hi'),
    });
    assert.deepEqual(chat.messages[0], {
      role: 'system',
      content: [
        { type: 'text', text: 'one' },
        { type: 'text', text: 'two' },
      ],
    });
  });

  it('sends no system message for an empty system prompt', () => {
    assert.equal(translate({ system: '', ...user('hi') }).chat.messages.length, 1);
    assert.equal(translate({ system: [], ...user('hi') }).chat.messages.length, 1);
  });

  it('keeps string turns as strings, an assistant prefill included, and leaves out an empty assistant turn', () => {
    const { chat } = translate({
      messages: [
        { role: 'user', content: 'a' },
        { role: 'assistant', content: '' },
        { role: 'user', content: 'b' },
        { role: 'assistant', content: '{"x":' },
      ],
    });
    assert.deepEqual(chat.messages, [
      { role: 'user', content: 'a' },
      { role: 'user', content: 'b' },
      { role: 'assistant', content: '{"x":' },
    ]);
  });
});

describe('toChatRequest: user content blocks', () => {
  it('maps text and images, base64 as a data URL', () => {
    const { chat } = translate(
      user([
        { type: 'text', text: 'look', cache_control: { type: 'ephemeral' } },
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } },
        { type: 'image', source: { type: 'url', url: 'https://example.com/a.jpg' } },
      ]),
    );
    assert.deepEqual(chat.messages, [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look' },
          { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } },
          { type: 'image_url', image_url: { url: 'https://example.com/a.jpg' } },
        ],
      },
    ]);
  });

  it('refuses an image URL that is not a web URL, and images by file id', () => {
    rejects(
      user([{ type: 'image', source: { type: 'url', url: 'file:///etc/passwd' } }]),
      'messages[0].content[0].source.url',
      /http\(s\)/,
    );
    rejects(
      user([
        { type: 'text', text: 'x' },
        { type: 'image', source: { type: 'file', file_id: 'file_1' } },
      ]),
      'messages[0].content[1].source',
      /file_id/,
    );
  });

  it('maps a base64 PDF to a file part, named by its title or document.pdf, its context a text part before it', () => {
    const pdf = { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' };
    const { chat } = translate(
      user([
        { type: 'document', source: pdf },
        { type: 'document', source: pdf, title: 'report.pdf', context: 'Q3 figures' },
      ]),
    );
    assert.deepEqual(chat.messages[0]!.content, [
      { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'document.pdf' } },
      { type: 'text', text: 'Q3 figures' },
      { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'report.pdf' } },
    ]);
  });

  it('maps a text document to a text part headed by its title and context', () => {
    const { chat } = translate(
      user([
        { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'body' } },
        {
          type: 'document',
          source: { type: 'text', media_type: 'text/plain', data: 'body' },
          title: 'Notes',
          context: 'From the wiki',
        },
      ]),
    );
    assert.deepEqual(chat.messages[0]!.content, [
      { type: 'text', text: 'body' },
      { type: 'text', text: 'Notes\n\nFrom the wiki\n\nbody' },
    ]);
  });

  it('maps a content document to its text and images', () => {
    const { chat, dropped } = translate(
      user([
        {
          type: 'document',
          title: 'Deck',
          source: {
            type: 'content',
            content: [
              { type: 'text', text: 'slide 1' },
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } },
              { type: 'chart', data: 1 },
            ],
          },
        },
      ]),
    );
    assert.deepEqual(chat.messages[0]!.content, [
      { type: 'text', text: 'Deck' },
      { type: 'text', text: 'slide 1' },
      { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } },
    ]);
    assert.deepEqual(dropped, ['document content of type chart']);
  });

  it('refuses documents by URL or by file id, naming the source', () => {
    rejects(
      {
        messages: [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: 'b' },
          { role: 'user', content: [{ type: 'document', source: { type: 'url', url: 'https://x/a.pdf' } }] },
        ],
      },
      'messages[2].content[0].source',
      /only served for Anthropic models/,
    );
    rejects(
      user([{ type: 'document', source: { type: 'file', file_id: 'file_1' } }]),
      'messages[0].content[0].source',
      /Files API/,
    );
  });

  it('drops thinking and unknown blocks, and leaves out a turn they were all of', () => {
    const { chat, dropped } = translate({
      messages: [
        { role: 'user', content: [{ type: 'search_result', source: 's', title: 't', content: [] }] },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'hi' },
            { type: 'container_upload', file_id: 'f' },
          ],
        },
        { role: 'user', content: [] },
      ],
    });
    assert.deepEqual(chat.messages, [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }]);
    assert.deepEqual(dropped, [
      'messages[].content[] of type search_result',
      'messages[].content[] of type container_upload',
    ]);
  });

  it('refuses a request left with nothing to send', () => {
    rejects(user([{ type: 'redacted_thinking', data: 'x' }]), 'messages', /nothing is left/);
  });

  it('leaves a known block of the wrong shape to the request schema, which refuses it at its path', () => {
    const refusedAt = (body: Record<string, unknown>, path: string) => {
      const result = messagesRequestSchema.safeParse({ model: 'claude-x', max_tokens: 1024, ...body });
      assert.equal(result.success, false);
      assert.ok(
        result.error!.issues.some((issue) => issue.path.join('.').startsWith(path)),
        JSON.stringify(result.error!.issues),
      );
    };
    refusedAt(user([{ type: 'text' }]), 'messages.0.content');
    refusedAt(user([{ type: 'image', source: { type: 'weird' } }]), 'messages.0.content');
    refusedAt(
      user([{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'text', text: 1 }] }]),
      'messages.0.content',
    );
    refusedAt({ messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 'x' }] }] }, 'messages.0.content');
  });

  it('refuses tool_use in a user turn and tool_result in an assistant turn', () => {
    rejects(
      user([{ type: 'tool_use', id: 't', name: 'n', input: {} }]),
      'messages[0].content[0].type',
      /assistant turns/,
    );
    rejects(
      { messages: [{ role: 'assistant', content: [{ type: 'tool_result', tool_use_id: 't' }] }] },
      'messages[0].content[0].type',
      /user turns/,
    );
  });
});

describe('toChatRequest: tool round trips', () => {
  const tools = [{ name: 'get_weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];

  it('maps tool_use to tool_calls, with the turn text as content', () => {
    const { chat, dropped } = translate({
      tools,
      messages: [
        { role: 'user', content: 'weather?' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'hmm', signature: 'sig' },
            { type: 'text', text: 'Let me ' },
            { type: 'text', text: 'check.' },
            { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Oslo' } },
            { type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: { city: 'Bergen' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_1', content: '4°C' },
            {
              type: 'tool_result',
              tool_use_id: 'toolu_2',
              content: [
                { type: 'text', text: '6°C' },
                { type: 'text', text: 'rain' },
              ],
            },
          ],
        },
      ],
    });
    assert.deepEqual(chat.messages.slice(1), [
      {
        role: 'assistant',
        content: 'Let me check.',
        tool_calls: [
          { id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
          { id: 'toolu_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Bergen"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'toolu_1', content: '4°C' },
      { role: 'tool', tool_call_id: 'toolu_2', content: '6°C\n\nrain' },
    ]);
    assert.deepEqual(dropped, ['messages[].content[] of type thinking']);
  });

  it('gives a turn of only tool calls null content, and calls a renamed tool by its chat name', () => {
    const { chat } = translate({
      tools: [{ name: 'files.read', input_schema: { type: 'object' } }],
      messages: [
        { role: 'user', content: 'read' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'files.read', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1' }] },
      ],
    });
    assert.deepEqual(chat.messages[1], {
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'toolu_1', type: 'function', function: { name: chatToolName('files.read'), arguments: '{}' } },
      ],
    });
    assert.deepEqual(chat.messages[2], { role: 'tool', tool_call_id: 'toolu_1', content: '' });
    assert.equal(chat.tools![0]!.type === 'function' && chat.tools![0]!.function.name, chatToolName('files.read'));
  });

  it(
    'puts tool messages before the rest of the turn, says an error in the content, and moves a result image to the ' +
      'user message',
    () => {
      const { chat } = translate({
        tools,
        messages: [
          { role: 'user', content: 'go' },
          {
            role: 'assistant',
            content: [
              { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: {} },
              { type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: {} },
              { type: 'tool_use', id: 'toolu_3', name: 'get_weather', input: {} },
            ],
          },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'also this' },
              { type: 'tool_result', tool_use_id: 'toolu_1', content: 'no such city', is_error: true },
              {
                type: 'tool_result',
                tool_use_id: 'toolu_2',
                content: [
                  { type: 'text', text: 'the map' },
                  { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } },
                ],
              },
              { type: 'tool_result', tool_use_id: 'toolu_3', is_error: true },
            ],
          },
        ],
      });
      assert.deepEqual(chat.messages.slice(2), [
        { role: 'tool', tool_call_id: 'toolu_1', content: 'Error: no such city' },
        { role: 'tool', tool_call_id: 'toolu_2', content: 'the map' },
        { role: 'tool', tool_call_id: 'toolu_3', content: 'Error' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Attached to the result of tool call toolu_2:' },
            { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } },
            { type: 'text', text: 'also this' },
          ],
        },
      ]);
    },
  );
});

describe('toChatRequest: tools and tool_choice', () => {
  const client = { name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: {} } };
  const custom = { type: 'custom', name: 'lookup', input_schema: { type: 'object' }, strict: true };
  const search = { type: 'web_search_20250305', name: 'web_search', max_uses: 5 };
  const bash = { type: 'bash_20250124', name: 'bash' };

  it('maps client and custom tools to functions and leaves out server tools', () => {
    const { chat, dropped } = translate({ tools: [client, search, custom, bash, { name: 'bare' }], ...user('hi') });
    assert.deepEqual(chat.tools, [
      {
        type: 'function',
        function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: {} } },
      },
      { type: 'function', function: { name: 'lookup', parameters: { type: 'object' }, strict: true } },
      { type: 'function', function: { name: 'bare', parameters: { type: 'object', properties: {} } } },
    ]);
    assert.deepEqual(dropped, ['tools[] of type web_search_20250305', 'tools[] of type bash_20250124']);
    assert.equal(chat.tool_choice, undefined);
  });

  it('gives the web search tool to a model whose vendor searches (web_search_options), and lets the model start it', () => {
    const located = { ...search, user_location: { type: 'approximate', city: 'Oslo', country: 'NO' } };
    const { chat, dropped } = translate(
      { tools: [client, located, bash], tool_choice: { type: 'tool', name: search.name }, ...user('news?') },
      { ...model, web_search: true },
    );
    assert.deepEqual(chat.web_search_options, {
      user_location: { type: 'approximate', approximate: { city: 'Oslo', country: 'NO' } },
    });
    assert.deepEqual(
      chat.tools?.map((tool) => tool.type === 'function' && tool.function.name),
      ['get_weather'],
    );
    assert.equal(chat.tool_choice, undefined);
    assert.deepEqual(dropped, ['tools[] of type bash_20250124']);
  });

  it('maps each tool_choice, and disable_parallel_tool_use to parallel_tool_calls false', () => {
    const choose = (tool_choice: unknown) => {
      const { chat } = translate({ tools: [client, custom], tool_choice, ...user('hi') });
      return { tool_choice: chat.tool_choice, parallel_tool_calls: chat.parallel_tool_calls };
    };
    assert.deepEqual(choose({ type: 'auto' }), { tool_choice: 'auto', parallel_tool_calls: undefined });
    assert.deepEqual(choose({ type: 'any', disable_parallel_tool_use: true }), {
      tool_choice: 'required',
      parallel_tool_calls: false,
    });
    assert.deepEqual(choose({ type: 'none' }), { tool_choice: 'none', parallel_tool_calls: undefined });
    assert.deepEqual(choose({ type: 'auto', disable_parallel_tool_use: false }), {
      tool_choice: 'auto',
      parallel_tool_calls: undefined,
    });
    assert.deepEqual(choose({ type: 'tool', name: 'lookup', disable_parallel_tool_use: true }), {
      tool_choice: { type: 'function', function: { name: 'lookup' } },
      parallel_tool_calls: false,
    });
  });

  it('names a renamed tool by its chat name in tool_choice', () => {
    const { chat } = translate({
      tools: [{ name: 'a.b', input_schema: {} }],
      tool_choice: { type: 'tool', name: 'a.b' },
      ...user('hi'),
    });
    assert.deepEqual(chat.tool_choice, { type: 'function', function: { name: chatToolName('a.b') } });
  });

  it('sends no tool_choice when no tools are left', () => {
    const { chat } = translate({
      tools: [search],
      tool_choice: { type: 'auto', disable_parallel_tool_use: true },
      ...user('hi'),
    });
    assert.equal(chat.tools, undefined);
    assert.equal(chat.tool_choice, undefined);
    assert.equal(chat.parallel_tool_calls, undefined);
    assert.equal(translate({ tool_choice: { type: 'any' }, ...user('hi') }).chat.tool_choice, undefined);
  });

  it('refuses forcing a server tool, requiring a call when only server tools were sent, and naming an unknown tool', () => {
    rejects(
      { tools: [client, search], tool_choice: { type: 'tool', name: 'web_search' }, ...user('hi') },
      'tool_choice',
      /web_search' is run by Anthropic/,
    );
    rejects({ tools: [search, bash], tool_choice: { type: 'any' }, ...user('hi') }, 'tool_choice', /needs a tool/);
    rejects(
      { tools: [client], tool_choice: { type: 'tool', name: 'nope' }, ...user('hi') },
      'tool_choice.name',
      /not among/,
    );
  });
});

describe('toChatRequest: sampling, limits and other fields', () => {
  it('clamps max_tokens to the model limit when it has one', () => {
    assert.equal(translate({ max_tokens: 64_000, ...user('hi') }).chat.max_completion_tokens, 16_384);
    assert.equal(translate({ max_tokens: 500, ...user('hi') }).chat.max_completion_tokens, 500);
    assert.equal(
      translate({ max_tokens: 64_000, ...user('hi') }, { id: 'm', max_output_tokens: 0 }).chat.max_completion_tokens,
      64_000,
    );
  });

  it('passes stop sequences (the first 4), temperature, top_p and the user id; drops top_k', () => {
    const { chat, dropped } = translate({
      stop_sequences: ['a', 'b', 'c', 'd', 'e'],
      temperature: 0,
      top_p: 0.9,
      top_k: 40,
      metadata: { user_id: 'u-1' },
      stream: true,
      service_tier: 'standard_only',
      ...user('hi'),
    });
    assert.deepEqual(chat.stop, ['a', 'b', 'c', 'd']);
    assert.equal(chat.temperature, 0);
    assert.equal(chat.top_p, 0.9);
    assert.equal(chat.user, 'u-1');
    assert.equal('top_k' in chat, false);
    assert.equal('stream' in chat, false);
    assert.equal('service_tier' in chat, false);
    assert.deepEqual(dropped, ['stop_sequences[4:] (chat takes at most 4)', 'top_k']);
    // Claude Code's user id is a JSON object of ids, longer than chat's user takes: a stable digest goes instead.
    const long = JSON.stringify({
      device_id: 'b'.repeat(64),
      account_uuid: '',
      session_id: 'e1a5cd6e-4efc-4e59-b75d-a37ae835a5b6',
    });
    const first = translate({ metadata: { user_id: long }, ...user('hi') }).chat.user!;
    assert.match(first, /^user-[0-9a-f]{32}$/);
    assert.equal(translate({ metadata: { user_id: long }, ...user('again') }).chat.user, first);
  });

  it('sets no sampling field the client left out, and no stop for an empty list', () => {
    const { chat } = translate({ stop_sequences: [], ...user('hi') });
    for (const key of ['stop', 'temperature', 'top_p', 'user', 'reasoning_effort', 'response_format', 'tools'])
      assert.equal(key in chat, false, key);
  });

  it('maps thinking to reasoning_effort', () => {
    const effort = (thinking: unknown) => translate({ thinking, ...user('hi') }).chat.reasoning_effort;
    assert.equal(effort({ type: 'enabled', budget_tokens: 1024 }), 'minimal');
    assert.equal(effort({ type: 'enabled', budget_tokens: 10_000 }), 'medium');
    assert.equal(effort({ type: 'enabled', budget_tokens: 40_000 }), 'xhigh');
    assert.equal(effort({ type: 'adaptive', display: 'summarized' }), 'medium');
    assert.equal(effort({ type: 'disabled' }), undefined);
  });

  it('maps a json_schema output format to response_format and drops the rest of output_config and unknown fields', () => {
    const schema = {
      type: 'object',
      properties: { a: { type: 'string' } },
      required: ['a'],
      additionalProperties: false,
    };
    const { chat, dropped } = translate({
      output_config: { format: { type: 'json_schema', schema }, effort: 'low' },
      context_management: { edits: [] },
      container: 'c_1',
      mcp_servers: [{ type: 'url', url: 'https://mcp', name: 'm' }],
      inference_geo: null,
      ...user('hi'),
    });
    assert.deepEqual(chat.response_format, {
      type: 'json_schema',
      json_schema: { name: 'output', schema, strict: true },
    });
    assert.deepEqual(dropped, ['output_config.effort', 'context_management', 'container', 'mcp_servers']);
  });
});

/** The twelve tools of a Claude Code session, as it sends them (schemas shortened). */
function claudeCodeTools() {
  const schema = (properties: Record<string, unknown>, required: string[] = []) => ({
    type: 'object',
    properties,
    required,
    additionalProperties: false,
    $schema: 'http://json-schema.org/draft-07/schema#',
  });
  const str = { type: 'string' };
  return [
    {
      name: 'Task',
      description: 'Launch a new agent',
      input_schema: schema({ description: str, prompt: str, subagent_type: str }, ['description', 'prompt']),
    },
    {
      name: 'Bash',
      description: 'Executes a bash command',
      input_schema: schema({ command: str, timeout: { type: 'number' } }, ['command']),
    },
    {
      name: 'Glob',
      description: 'File pattern matching',
      input_schema: schema({ pattern: str, path: str }, ['pattern']),
    },
    {
      name: 'Grep',
      description: 'Search file contents',
      input_schema: schema({ pattern: str, path: str, glob: str }, ['pattern']),
    },
    {
      name: 'Read',
      description: 'Reads a file',
      input_schema: schema({ file_path: str, offset: { type: 'number' }, limit: { type: 'number' } }, ['file_path']),
    },
    {
      name: 'Edit',
      description: 'Edits a file',
      input_schema: schema({ file_path: str, old_string: str, new_string: str }, [
        'file_path',
        'old_string',
        'new_string',
      ]),
    },
    {
      name: 'Write',
      description: 'Writes a file',
      input_schema: schema({ file_path: str, content: str }, ['file_path', 'content']),
    },
    {
      name: 'NotebookEdit',
      description: 'Edits a notebook cell',
      input_schema: schema({ notebook_path: str, new_source: str }, ['notebook_path', 'new_source']),
    },
    {
      name: 'WebFetch',
      description: 'Fetches a URL',
      input_schema: schema({ url: { type: 'string', format: 'uri' }, prompt: str }, ['url', 'prompt']),
    },
    {
      name: 'TodoWrite',
      description: 'Updates the todo list',
      input_schema: schema({ todos: { type: 'array', items: { type: 'object' } } }, ['todos']),
    },
    {
      name: 'WebSearch',
      description: 'Searches the web',
      input_schema: schema({ query: { type: 'string', minLength: 2 } }, ['query']),
    },
    {
      name: 'mcp__claude-in-chrome__navigate_to_a_page_and_wait_until_the_network_is_idle',
      description: 'An MCP tool with a long name',
      input_schema: schema({ url: str }, ['url']),
      cache_control: { type: 'ephemeral' },
    },
  ];
}

describe('toChatRequest: a Claude Code request', () => {
  const tools = claudeCodeTools();
  const mcpName = tools[11]!.name;
  const body = {
    model: 'claude-sonnet-4-5-20250929',
    max_tokens: 32_000,
    stream: true,
    system: [
      {
        type: 'text',
        text: "You are Claude Code, Anthropic's official CLI for Claude.",
        cache_control: { type: 'ephemeral' },
      },
      { type: 'text', text: 'You are an interactive CLI tool that helps users with software engineering tasks.' },
      { type: 'text', text: '<env>Working directory: /repo</env>', cache_control: { type: 'ephemeral', ttl: '1h' } },
    ],
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: '<system-reminder>As you answer the user, use the context.</system-reminder>' },
          { type: 'text', text: 'Why does the build fail?', cache_control: { type: 'ephemeral' } },
        ],
      },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 'I should read the log.', signature: 'EqQBCkYIBxgCKkD' },
          { type: 'text', text: "I'll read the build log." },
          { type: 'tool_use', id: 'toolu_01A', name: 'Read', input: { file_path: '/repo/build.log' } },
          { type: 'tool_use', id: 'toolu_01B', name: mcpName, input: { url: 'http://localhost:3000' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_01A', content: '     1→error TS2307: Cannot find module' },
          {
            type: 'tool_result',
            tool_use_id: 'toolu_01B',
            content: [{ type: 'text', text: 'Navigated.' }],
            cache_control: { type: 'ephemeral' },
          },
        ],
      },
    ],
    tools,
    tool_choice: { type: 'auto' },
    metadata: { user_id: 'user_0f3a_account_9b1c_session_77de' },
    thinking: { type: 'adaptive' },
    context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
    output_config: { effort: 'high' },
  };

  it('is accepted by the request schema, unknown fields kept', () => {
    const request = messagesRequestSchema.parse(body);
    assert.deepEqual((request as Record<string, unknown>).context_management, body.context_management);
    assert.deepEqual((request as Record<string, unknown>).output_config, body.output_config);
    assert.equal(request.tools!.length, 12);
  });

  it('translates to a chat request chat accepts', () => {
    const { chat, dropped } = translate(body, { id: 'gpt-5', max_output_tokens: 128_000 });
    assert.equal(chat.model, 'gpt-5');
    assert.equal(chat.max_completion_tokens, 32_000);
    assert.equal(chat.reasoning_effort, 'medium');
    assert.equal(chat.user, 'user_0f3a_account_9b1c_session_77de');
    assert.equal(chat.tool_choice, 'auto');
    assert.equal('stream' in chat, false);
    assert.equal(chat.tools!.length, 12);
    const names = chat.tools!.map((tool) => (tool.type === 'function' ? tool.function.name : ''));
    assert.deepEqual(
      names.slice(0, 11),
      tools.slice(0, 11).map((tool) => tool.name),
    );
    assert.equal(names[11], chatToolName(mcpName));
    assert.equal(names[11]!.length, 64);
    assert.deepEqual(toolNamesBack(tools).get(names[11]!), mcpName);
    assert.deepEqual(chat.tools![4], {
      type: 'function',
      function: { name: 'Read', description: 'Reads a file', parameters: tools[4]!.input_schema },
    });

    assert.deepEqual(chat.messages, [
      {
        role: 'system',
        content: [
          { type: 'text', text: "You are Claude Code, Anthropic's official CLI for Claude." },
          { type: 'text', text: 'You are an interactive CLI tool that helps users with software engineering tasks.' },
          { type: 'text', text: '<env>Working directory: /repo</env>' },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'text', text: '<system-reminder>As you answer the user, use the context.</system-reminder>' },
          { type: 'text', text: 'Why does the build fail?' },
        ],
      },
      {
        role: 'assistant',
        content: "I'll read the build log.",
        tool_calls: [
          {
            id: 'toolu_01A',
            type: 'function',
            function: { name: 'Read', arguments: '{"file_path":"/repo/build.log"}' },
          },
          {
            id: 'toolu_01B',
            type: 'function',
            function: { name: chatToolName(mcpName), arguments: '{"url":"http://localhost:3000"}' },
          },
        ],
      },
      { role: 'tool', tool_call_id: 'toolu_01A', content: '     1→error TS2307: Cannot find module' },
      { role: 'tool', tool_call_id: 'toolu_01B', content: 'Navigated.' },
    ]);
    assert.deepEqual(dropped, ['messages[].content[] of type thinking', 'output_config.effort', 'context_management']);
  });
});

describe('toChatRequest: size', () => {
  it('translates a long tool-using conversation in one pass', () => {
    const messages: unknown[] = [{ role: 'user', content: 'start' }];
    for (let i = 0; i < 30_000; i++) {
      messages.push({
        role: 'assistant',
        content: [{ type: 'tool_use', id: `toolu_${i}`, name: 'Read', input: { i } }],
      });
      messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: `toolu_${i}`, content: 'ok' }] });
    }
    const request = parse({ messages, tools: [{ name: 'Read', input_schema: { type: 'object' } }] });
    const started = performance.now();
    const { chat } = toChatRequest(request, model);
    const elapsed = performance.now() - started;
    assert.equal(chat.messages.length, 60_001);
    // Generous: a quadratic pass over 60,000 messages would take minutes, a linear one tens of milliseconds.
    assert.ok(elapsed < 2_000, `took ${elapsed.toFixed(0)} ms`);
  });
});

describe('withoutUnsignedThinking (what an Anthropic model is sent)', () => {
  it('leaves out the thinking blocks no one signed and keeps Anthropic’s own exactly, copying only when needed', () => {
    const signed = { type: 'thinking', thinking: 'mine', signature: 'sig' };
    const messages = parse({
      messages: [
        { role: 'user', content: 'hi' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'another vendor’s', signature: '' },
            signed,
            { type: 'text', text: 'Hello' },
          ],
        },
        { role: 'user', content: 'again' },
      ],
    }).messages;
    const sent = withoutUnsignedThinking(messages);
    assert.deepEqual(sent[1]!.content, [signed, { type: 'text', text: 'Hello' }]);
    assert.equal(sent[0], messages[0]);
    const clean = parse({ messages: [{ role: 'user', content: 'hi' }] }).messages;
    assert.equal(withoutUnsignedThinking(clean), clean);
  });
});
