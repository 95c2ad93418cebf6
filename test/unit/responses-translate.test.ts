import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { GatewayError } from '../../shared/errors.js';
import type { ConversationItem } from '../../shared/responses.js';
import { chatCompletionRequestSchema } from '../../shared/schemas/chat.js';
import { responsesRequestSchema, type ResponsesRequest } from '../../shared/schemas/responses.js';
import { buildShell, newResponseId, normaliseInput, toChatRequest } from '../../api/responses/translate.js';
import { clientToolName, flatToolName, namespacedTools } from '../../shared/responses-tools.js';

const parse = (body: Record<string, unknown>): ResponsesRequest =>
  responsesRequestSchema.parse({ model: 'm', ...body });

/** Normalises and translates a request body, and checks the chat request against chat's own schema. */
function translate(body: Record<string, unknown>, history: ConversationItem[] = [], searches = false) {
  const request = parse(body);
  const chat = toChatRequest(request, history, normaliseInput(request.input), searches);
  chatCompletionRequestSchema.parse(chat);
  return chat;
}

/** Asserts a 400 with this param (and, if given, a message matching `message` and this code). */
function rejects(fn: () => unknown, param: string | null, message?: RegExp, code?: string) {
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof GatewayError, `expected a GatewayError, got ${String(error)}`);
    assert.equal(error.status, 400);
    assert.equal(error.param, param, error.message);
    if (message) assert.match(error.message, message);
    if (code) assert.equal(error.code, code);
    return true;
  });
}

const normalise = (input: unknown) => normaliseInput(parse({ input }).input);

describe('responsesRequestSchema', () => {
  it('takes a minimal request and tolerates unknown top-level fields', () => {
    const request = parse({ input: 'hi', conversation: null, prompt: { id: 'p' } });
    assert.equal(request.input, 'hi');
    assert.deepEqual((request as Record<string, unknown>).prompt, { id: 'p' });
  });

  it('requires model, and input items to be objects', () => {
    assert.equal(responsesRequestSchema.safeParse({ input: 'hi' }).success, false);
    assert.equal(responsesRequestSchema.safeParse({ model: '', input: 'hi' }).success, false);
    assert.equal(responsesRequestSchema.safeParse({ model: 'm', input: ['hi'] }).success, false);
    assert.equal(responsesRequestSchema.safeParse({ model: 'm', input: [] }).success, false);
    assert.equal(responsesRequestSchema.safeParse({ model: 'm', previous_response_id: 'resp_1' }).success, true);
  });

  it('checks the fields it knows', () => {
    const bad: Record<string, unknown>[] = [
      { max_output_tokens: 15 },
      { max_output_tokens: 1.5 },
      { temperature: 3 },
      { top_p: 2 },
      { tools: [{ name: 'x' }] },
      { tools: Array.from({ length: 129 }, () => ({ type: 'function', name: 'f' })) },
      { tool_choice: 'sometimes' },
      { text: { format: { type: 'json_schema', name: 'bad name', schema: {} } } },
      { text: { format: { type: 'json_schema', name: 'ok' } } },
      { text: { format: { type: 'xml' } } },
      { reasoning: { effort: 'extreme' } },
      { metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) },
      { metadata: { ['k'.repeat(65)]: 'v' } },
      { metadata: { k: 'v'.repeat(513) } },
      { metadata: { k: 1 } },
      { truncation: 'sometimes' },
      { store: 'yes' },
      { include: [1] },
      { max_tool_calls: 1.5 },
    ];
    for (const fields of bad)
      assert.equal(
        responsesRequestSchema.safeParse({ model: 'm', input: 'hi', ...fields }).success,
        false,
        JSON.stringify(fields).slice(0, 80),
      );
    const good = parse({
      input: 'hi',
      instructions: null,
      text: {
        format: { type: 'json_schema', name: 'out_1', schema: { type: 'object' }, strict: true },
        verbosity: 'low',
      },
      reasoning: { effort: 'minimal', summary: 'auto' },
      metadata: Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`k${i}`, 'v'])),
      truncation: 'auto',
      stream_options: { include_obfuscation: false },
      include: ['reasoning.encrypted_content'],
      service_tier: 'auto',
      prompt_cache_key: 'k',
      safety_identifier: 's',
      max_tool_calls: 3,
    });
    assert.equal(good.reasoning?.effort, 'minimal');
  });
});

describe('newResponseId', () => {
  it('is resp_ and 48 hex digits, new each time', () => {
    const id = newResponseId();
    assert.match(id, /^resp_[0-9a-f]{48}$/);
    assert.notEqual(id, newResponseId());
  });
});

describe('normaliseInput', () => {
  it('makes a string one user message', () => {
    const [item, ...rest] = normaliseInput('Hello');
    assert.equal(rest.length, 0);
    assert.match(item!.id, /^msg_[0-9a-f]{48}$/);
    assert.deepEqual(
      { ...item, id: 'x' },
      { type: 'message', id: 'x', role: 'user', status: 'completed', content: [{ type: 'input_text', text: 'Hello' }] },
    );
    assert.deepEqual(normaliseInput(undefined), []);
  });

  it('normalises easy and typed messages, their parts and string content', () => {
    const items = normalise([
      { role: 'developer', content: 'Be brief.' },
      {
        type: 'message',
        role: 'user',
        content: [
          { type: 'input_text', text: 'Look' },
          { type: 'input_image', image_url: 'https://example.com/a.png' },
          { type: 'input_image', image_url: 'data:image/png;base64,AAAA', detail: 'low' },
          {
            type: 'input_file',
            file_data: 'data:application/pdf;base64,JVBE',
            filename: 'a.pdf',
            file_id: 'file_ignored',
          },
          { type: 'input_file', file_data: 'JVBE' },
        ],
      },
      { role: 'assistant', content: 'Seen.' },
      {
        type: 'message',
        id: 'msg_kept',
        role: 'assistant',
        status: 'in_progress',
        content: [
          { type: 'output_text', text: 'a', annotations: [{ x: 1 }] },
          { type: 'refusal', refusal: 'no' },
        ],
      },
      { role: 'system', content: [{ type: 'input_text', text: 's' }] },
    ]);
    assert.equal(items.length, 5);
    for (const item of items) assert.equal(item.status, 'completed');
    assert.deepEqual(items[0]!.content, [{ type: 'input_text', text: 'Be brief.' }]);
    assert.equal(items[0]!.role, 'developer');
    assert.deepEqual(items[1]!.content, [
      { type: 'input_text', text: 'Look' },
      { type: 'input_image', image_url: 'https://example.com/a.png', detail: 'auto' },
      { type: 'input_image', image_url: 'data:image/png;base64,AAAA', detail: 'low' },
      { type: 'input_file', file_data: 'data:application/pdf;base64,JVBE', filename: 'a.pdf' },
      { type: 'input_file', file_data: 'JVBE' },
    ]);
    assert.deepEqual(items[2]!.content, [{ type: 'output_text', text: 'Seen.', annotations: [] }]);
    assert.equal(items[3]!.id, 'msg_kept');
    assert.deepEqual(items[3]!.content, [
      { type: 'output_text', text: 'a', annotations: [] },
      { type: 'refusal', refusal: 'no' },
    ]);
    assert.match(items[4]!.id, /^msg_/);
  });

  it('keeps function calls, outputs, references and reasoning, giving ids to those without', () => {
    const items = normalise([
      { type: 'function_call', call_id: 'call_1', name: 'get', arguments: '{}' },
      {
        type: 'function_call',
        id: 'fc_mine',
        call_id: 'call_2',
        name: 'get',
        arguments: '{"a":1}',
        status: 'in_progress',
      },
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
      {
        type: 'function_call_output',
        id: 'fco_mine',
        call_id: 'call_2',
        output: [
          { type: 'input_text', text: 'a' },
          { type: 'input_text', text: 'b' },
        ],
      },
      { type: 'item_reference', id: 'msg_old' },
      { id: 'msg_older' },
      { type: 'reasoning', id: 'rs_1', summary: [], encrypted_content: 'xyz' },
      { type: 'reasoning', summary: [] },
    ]);
    assert.match(items[0]!.id, /^fc_[0-9a-f]{48}$/);
    assert.deepEqual(
      { ...items[0], id: 'x' },
      { type: 'function_call', id: 'x', call_id: 'call_1', name: 'get', arguments: '{}', status: 'completed' },
    );
    assert.deepEqual(items[1], {
      type: 'function_call',
      id: 'fc_mine',
      call_id: 'call_2',
      name: 'get',
      arguments: '{"a":1}',
      status: 'completed',
    });
    assert.match(items[2]!.id, /^fco_/);
    assert.deepEqual(
      { ...items[2], id: 'x' },
      { type: 'function_call_output', id: 'x', call_id: 'call_1', output: 'sunny', status: 'completed' },
    );
    assert.deepEqual(items[3]!.output, [
      { type: 'input_text', text: 'a' },
      { type: 'input_text', text: 'b' },
    ]);
    assert.equal(items[3]!.id, 'fco_mine');
    assert.deepEqual(items[4], { type: 'item_reference', id: 'msg_old' });
    assert.deepEqual(items[5], { type: 'item_reference', id: 'msg_older' });
    assert.deepEqual(items[6], { type: 'reasoning', id: 'rs_1', summary: [], encrypted_content: 'xyz' });
    assert.match(items[7]!.id, /^rs_/);
  });

  it('refuses unknown and malformed items, naming the field', () => {
    rejects(
      () =>
        normalise([
          { role: 'user', content: 'ok' },
          { role: 'user', content: 'ok' },
          { type: 'web_search_call', id: 'ws_1' },
        ]),
      'input[2].type',
      /'web_search_call' is not supported/,
      'invalid_value',
    );
    rejects(() => normalise([{ type: 7 }]), 'input[0].type', /Invalid type/);
    rejects(() => normalise([{ content: 'hi' }]), 'input[0].role', /Missing required parameter: 'input\[0\]\.role'/);
    rejects(() => normalise([{ role: 'tool', content: 'hi' }]), 'input[0].role');
    rejects(() => normalise([{ role: 'user' }]), 'input[0].content', /Missing required/);
    rejects(() => normalise([{ role: 'user', content: 5 }]), 'input[0].content');
    rejects(() => normalise([{ role: 'user', content: [] }]), 'input[0].content', /empty array/);
    rejects(() => normalise([{ type: 'message', role: 'user', content: ['hi'] }]), 'input[0].content[0]');
    rejects(
      () => normalise([{ role: 'user', content: [{ text: 'x' }] }]),
      'input[0].content[0].type',
      /Missing required/,
    );
    rejects(
      () => normalise([{ role: 'user', content: [{ type: 'input_text', text: 'a' }, { type: 'input_audio' }] }]),
      'input[0].content[1].type',
      /'input_audio' is not supported in a 'user' message/,
    );
    rejects(
      () => normalise([{ role: 'user', content: [{ type: 'output_text', text: 'a' }] }]),
      'input[0].content[0].type',
      /'input_text', 'input_image' and 'input_file'/,
    );
    rejects(
      () => normalise([{ role: 'assistant', content: [{ type: 'input_text', text: 'a' }] }]),
      'input[0].content[0].type',
      /'output_text' and 'refusal'/,
    );
    rejects(
      () => normalise([{ role: 'system', content: [{ type: 'input_image', image_url: 'https://x/y.png' }] }]),
      'input[0].content[0].type',
      /'system' message/,
    );
    rejects(
      () => normalise([{ role: 'developer', content: [{ type: 'input_file', file_data: 'AAAA' }] }]),
      'input[0].content[0].type',
    );
    rejects(() => normalise([{ role: 'user', content: [{ type: 'input_text' }] }]), 'input[0].content[0].text');
    rejects(
      () => normalise([{ role: 'user', content: [{ type: 'input_text', text: 3 }] }]),
      'input[0].content[0].text',
      /Invalid type/,
    );
    rejects(() => normalise([{ role: 'assistant', content: [{ type: 'refusal' }] }]), 'input[0].content[0].refusal');
    rejects(
      () => normalise([{ role: 'assistant', content: [{ type: 'output_text', text: null }] }]),
      'input[0].content[0].text',
    );
  });

  it('refuses images and files the gateway cannot pass on', () => {
    const part = (p: Record<string, unknown>) => [{ role: 'user', content: [{ type: 'input_text', text: 'a' }, p] }];
    rejects(
      () => normalise(part({ type: 'input_image', file_id: 'file_1', detail: 'auto' })),
      'input[0].content[1].file_id',
      /'file_id' are not supported/,
      'unsupported_parameter',
    );
    rejects(
      () => normalise(part({ type: 'input_image', detail: 'auto' })),
      'input[0].content[1].image_url',
      /Missing required/,
    );
    rejects(
      () => normalise(part({ type: 'input_image', image_url: 'file:///etc/passwd' })),
      'input[0].content[1].image_url',
      /http\(s\) URL/,
    );
    rejects(
      () => normalise(part({ type: 'input_image', image_url: 'ftp://host/a.png' })),
      'input[0].content[1].image_url',
    );
    rejects(() => normalise(part({ type: 'input_image', image_url: '' })), 'input[0].content[1].image_url');
    rejects(
      () => normalise(part({ type: 'input_image', image_url: 'https://x/y.png', detail: 'huge' })),
      'input[0].content[1].detail',
    );
    rejects(
      () => normalise(part({ type: 'input_file', file_id: 'file_1' })),
      'input[0].content[1].file_id',
      /'file_id' are not supported/,
      'unsupported_parameter',
    );
    rejects(
      () => normalise(part({ type: 'input_file', file_url: 'https://x/a.pdf' })),
      'input[0].content[1].file_url',
      /'file_url' are not supported/,
      'unsupported_parameter',
    );
    rejects(
      () => normalise(part({ type: 'input_file', filename: 'a.pdf' })),
      'input[0].content[1].file_data',
      /Missing required/,
    );
    rejects(
      () => normalise(part({ type: 'input_file', file_data: 'https://x/a.pdf' })),
      'input[0].content[1].file_data',
      /base64 data or a data: URL/,
    );
    const [item] = normalise(part({ type: 'input_image', image_url: 'gs://bucket/a.png', detail: 'original' }));
    assert.deepEqual((item!.content as unknown[])[1], {
      type: 'input_image',
      image_url: 'gs://bucket/a.png',
      detail: 'original',
    });
  });

  it('refuses malformed function calls, outputs, references and reasoning', () => {
    const ok = { role: 'user', content: 'x' };
    rejects(
      () => normalise([ok, ok, ok, ok, { type: 'function_call', name: 'f', arguments: '{}' }]),
      'input[4].call_id',
      /Missing required parameter: 'input\[4\]\.call_id'/,
    );
    rejects(() => normalise([{ type: 'function_call', call_id: '', name: 'f', arguments: '{}' }]), 'input[0].call_id');
    rejects(() => normalise([{ type: 'function_call', call_id: 'c', arguments: '{}' }]), 'input[0].name');
    rejects(
      () => normalise([{ type: 'function_call', call_id: 'c', name: 'f', arguments: { a: 1 } }]),
      'input[0].arguments',
      /Invalid type/,
    );
    rejects(
      () => normalise([{ type: 'function_call', id: 5, call_id: 'c', name: 'f', arguments: '{}' }]),
      'input[0].id',
    );
    rejects(() => normalise([{ type: 'function_call_output', output: 'x' }]), 'input[0].call_id');
    rejects(
      () => normalise([{ type: 'function_call_output', call_id: 'c'.repeat(65), output: 'x' }]),
      'input[0].call_id',
    );
    rejects(() => normalise([{ type: 'function_call_output', call_id: 'c' }]), 'input[0].output', /Missing required/);
    rejects(() => normalise([{ type: 'function_call_output', call_id: 'c', output: 5 }]), 'input[0].output');
    rejects(
      () =>
        normalise([
          {
            type: 'function_call_output',
            call_id: 'c',
            output: [{ type: 'input_image', image_url: 'https://x/y.png' }],
          },
        ]),
      'input[0].output[0].type',
      /function call output/,
    );
    rejects(
      () => normalise([{ type: 'function_call_output', call_id: 'c', output: [{ type: 'input_text' }] }]),
      'input[0].output[0].text',
    );
    rejects(() => normalise([{ type: 'item_reference' }]), 'input[0].id', /Missing required/);
    rejects(() => normalise([{ type: 'item_reference', id: 3 }]), 'input[0].id');
    rejects(() => normalise([{ type: 'reasoning', id: 3 }]), 'input[0].id');
  });
});

const history: ConversationItem[] = [
  {
    type: 'message',
    id: 'msg_h1',
    role: 'user',
    status: 'completed',
    content: [{ type: 'input_text', text: 'Weather in Oslo?' }],
  },
  { type: 'reasoning', id: 'rs_h', summary: [] },
  {
    type: 'message',
    id: 'msg_h2',
    role: 'assistant',
    status: 'completed',
    content: [
      { type: 'output_text', text: 'Checking', annotations: [] },
      { type: 'output_text', text: '…', annotations: [] },
    ],
  },
  {
    type: 'function_call',
    id: 'fc_h1',
    call_id: 'call_a',
    name: 'weather',
    arguments: '{"city":"Oslo"}',
    status: 'completed',
  },
  { type: 'function_call', id: 'fc_h2', call_id: 'call_b', name: 'time', arguments: '{}', status: 'completed' },
];

describe('toChatRequest: messages', () => {
  it('turns a string input into one user message, streamed with usage', () => {
    const chat = translate({ input: 'Hi', stream: false, stream_options: { include_obfuscation: false } });
    assert.deepEqual(chat, {
      model: 'm',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }],
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it('puts instructions first as a system message', () => {
    const chat = translate({ input: 'Hi', instructions: 'Be brief.' });
    assert.deepEqual(chat.messages[0], { role: 'system', content: 'Be brief.' });
    assert.equal(chat.messages.length, 2);
  });

  it('converts user, system and developer parts', () => {
    const chat = translate({
      input: [
        { role: 'system', content: 'sys' },
        { role: 'developer', content: [{ type: 'input_text', text: 'dev' }] },
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'Look' },
            { type: 'input_image', image_url: 'https://example.com/a.png' },
            { type: 'input_image', image_url: 'https://example.com/b.png', detail: 'original' },
            { type: 'input_file', file_data: 'data:application/pdf;base64,JVBE', filename: 'a.pdf' },
          ],
        },
      ],
    });
    assert.deepEqual(chat.messages, [
      { role: 'system', content: [{ type: 'text', text: 'sys' }] },
      { role: 'developer', content: [{ type: 'text', text: 'dev' }] },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Look' },
          { type: 'image_url', image_url: { url: 'https://example.com/a.png', detail: 'auto' } },
          { type: 'image_url', image_url: { url: 'https://example.com/b.png', detail: 'high' } },
          { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBE', filename: 'a.pdf' } },
        ],
      },
    ]);
  });

  it('replays history, merging an assistant message and the function calls after it into one turn', () => {
    const chat = translate(
      {
        previous_response_id: 'resp_1',
        input: [
          { type: 'function_call_output', call_id: 'call_a', output: 'sunny' },
          {
            type: 'function_call_output',
            call_id: 'call_b',
            output: [
              { type: 'input_text', text: '12:' },
              { type: 'input_text', text: '00' },
            ],
          },
        ],
      },
      history,
    );
    assert.deepEqual(chat.messages, [
      { role: 'user', content: [{ type: 'text', text: 'Weather in Oslo?' }] },
      {
        role: 'assistant',
        content: 'Checking…',
        tool_calls: [
          { id: 'call_a', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } },
          { id: 'call_b', type: 'function', function: { name: 'time', arguments: '{}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_a', content: 'sunny' },
      { role: 'tool', tool_call_id: 'call_b', content: '12:00' },
    ]);
  });

  it('gives function calls with no message before them an assistant turn with null content', () => {
    const chat = translate({
      input: [
        { role: 'user', content: 'Hi' },
        { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
        { type: 'reasoning', summary: [] },
        { type: 'function_call', call_id: 'c2', name: 'g', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c1', output: 'one' },
        { type: 'function_call_output', call_id: 'c2', output: 'two' },
        { role: 'assistant', content: 'Done.' },
      ],
    });
    assert.deepEqual(chat.messages, [
      { role: 'user', content: [{ type: 'text', text: 'Hi' }] },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } },
          { id: 'c2', type: 'function', function: { name: 'g', arguments: '{}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'one' },
      { role: 'tool', tool_call_id: 'c2', content: 'two' },
      { role: 'assistant', content: 'Done.' },
    ]);
  });

  it('keeps assistant messages without function calls as separate turns, and a refusal in both forms', () => {
    const chat = translate({
      input: [
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'One.' },
        { role: 'assistant', content: [{ type: 'refusal', refusal: 'No.' }] },
        {
          role: 'assistant',
          content: [
            { type: 'output_text', text: 'Partly' },
            { type: 'refusal', refusal: 'not that' },
          ],
        },
        { role: 'user', content: 'Why?' },
      ],
    });
    assert.deepEqual(chat.messages.slice(1, 4), [
      { role: 'assistant', content: 'One.' },
      { role: 'assistant', content: [{ type: 'refusal', refusal: 'No.' }], refusal: 'No.' },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Partly' },
          { type: 'refusal', refusal: 'not that' },
        ],
        refusal: 'not that',
      },
    ]);
  });

  it('drops reasoning items and resolves item references from history', () => {
    const chat = translate(
      {
        previous_response_id: 'resp_1',
        input: [
          { type: 'reasoning', id: 'rs_x', summary: [] },
          { type: 'item_reference', id: 'msg_h1' },
          { id: 'msg_h1' },
        ],
      },
      history.slice(0, 2),
    );
    assert.deepEqual(chat.messages, [
      { role: 'user', content: [{ type: 'text', text: 'Weather in Oslo?' }] },
      { role: 'user', content: [{ type: 'text', text: 'Weather in Oslo?' }] },
      { role: 'user', content: [{ type: 'text', text: 'Weather in Oslo?' }] },
    ]);
  });

  it('resolves item references stored in history, skipping ones that lead nowhere', () => {
    const stored: ConversationItem[] = [
      history[0]!,
      { type: 'item_reference', id: 'msg_h1' },
      { type: 'item_reference', id: 'msg_gone' },
    ];
    const chat = translate({ previous_response_id: 'resp_1', input: 'Again' }, stored);
    assert.equal(chat.messages.length, 3);
    assert.deepEqual(chat.messages[1], chat.messages[0]);
  });

  it('refuses a reference to an unknown item', () => {
    rejects(
      () =>
        translate(
          {
            input: [
              { role: 'user', content: 'Hi' },
              { type: 'item_reference', id: 'msg_nope' },
            ],
          },
          history,
        ),
      'input[1].id',
      /msg_nope/,
    );
  });

  it('refuses a function call output without a function call before it', () => {
    rejects(
      () =>
        translate(
          {
            input: [
              { role: 'user', content: 'Hi' },
              { type: 'function_call_output', call_id: 'call_x', output: 'y' },
            ],
          },
          history,
        ),
      'input[1].call_id',
      /No tool call found for function call output with call_id call_x/,
    );
    rejects(
      () =>
        translate({
          input: [
            { type: 'function_call_output', call_id: 'c1', output: 'early' },
            { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
          ],
        }),
      'input[0].call_id',
    );
    // The call may come from history or from earlier in the input.
    assert.equal(
      translate(
        { previous_response_id: 'resp_1', input: [{ type: 'function_call_output', call_id: 'call_b', output: 'x' }] },
        history,
      ).messages.length,
      3,
    );
  });

  it('refuses a request without input, or with nothing to send', () => {
    rejects(
      () => toChatRequest(parse({}), [], []),
      'input',
      /Missing required parameter: 'input'\./,
      'missing_required_parameter',
    );
    rejects(
      () => toChatRequest(parse({ instructions: 'x' }), history, []),
      'input',
      /Missing required parameter: 'input'\./,
    );
    rejects(() => translate({ input: [{ type: 'reasoning', summary: [] }] }), 'input', /nothing to send/);
    rejects(() => translate({ input: [{ type: 'reasoning', summary: [] }], instructions: 'Be brief.' }), 'input');
    // Chaining with no new input replays the conversation.
    const request = parse({ previous_response_id: 'resp_1' });
    assert.equal(toChatRequest(request, history, normaliseInput(request.input)).messages.length, 2);
  });
});

describe('toChatRequest: tools and options', () => {
  it('nests function tools, with default parameters, and passes tool_choice and parallel_tool_calls', () => {
    const chat = translate({
      input: 'Hi',
      tools: [
        {
          type: 'function',
          name: 'get_weather',
          description: 'Weather',
          parameters: { type: 'object', properties: { city: { type: 'string' } } },
          strict: true,
        },
        { type: 'function', name: 'now', parameters: null, strict: null, description: null },
      ],
      tool_choice: { type: 'function', name: 'now' },
      parallel_tool_calls: false,
    });
    assert.deepEqual(chat.tools, [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Weather',
          parameters: { type: 'object', properties: { city: { type: 'string' } } },
          strict: true,
        },
      },
      { type: 'function', function: { name: 'now', parameters: { type: 'object', properties: {} } } },
    ]);
    assert.deepEqual(chat.tool_choice, { type: 'function', function: { name: 'now' } });
    assert.equal(chat.parallel_tool_calls, false);
    for (const choice of ['none', 'auto', 'required'] as const) {
      assert.equal(
        translate({ input: 'Hi', tools: [{ type: 'function', name: 'f' }], tool_choice: choice }).tool_choice,
        choice,
      );
    }
  });

  it('leaves tool_choice and parallel_tool_calls out when there are no tools', () => {
    for (const tools of [undefined, null, []]) {
      const chat = translate({ input: 'Hi', tools, tool_choice: 'required', parallel_tool_calls: true });
      assert.equal('tools' in chat, false);
      assert.equal('tool_choice' in chat, false);
      assert.equal('parallel_tool_calls' in chat, false);
    }
  });

  it('declines built-in tools (left out of the chat request) and refuses a tool type the API does not have', () => {
    for (const type of [
      'web_search',
      'web_search_preview',
      'file_search',
      'code_interpreter',
      'image_generation',
      'mcp',
      'computer_use_preview',
      'local_shell',
      'custom',
      'shell',
      'apply_patch',
    ]) {
      const chat = translate({ input: 'Hi', tools: [{ type: 'function', name: 'f' }, { type }] });
      assert.deepEqual(
        chat.tools?.map((tool) => tool.type === 'function' && tool.function.name),
        ['f'],
        type,
      );
      // Only built-in tools: the chat request has none, and no choice to make.
      assert.equal('tools' in translate({ input: 'Hi', tools: [{ type }] }), false);
    }
    rejects(
      () => translate({ input: 'Hi', tools: [{ type: 'function', name: 'f' }, { type: 'teleport' }] }),
      'tools[1].type',
      /The tool type 'teleport' is not supported by this gateway/,
      'unsupported_tool',
    );
    // Required, with nothing left to call: refused rather than silently answered without a call.
    rejects(
      () => translate({ input: 'Hi', tools: [{ type: 'web_search' }], tool_choice: 'required' }),
      'tool_choice',
      /'web_search' is not supported/,
      'unsupported_tool',
    );
    rejects(
      () => translate({ input: 'Hi', tools: [{ type: 'web_search' }], tool_choice: { type: 'web_search' } }),
      'tool_choice',
      /'web_search' is not supported/,
      'unsupported_tool',
    );
  });

  it('gives a web search tool to a model whose vendor searches (web_search_options), required or forced included', () => {
    const location = { type: 'approximate', country: 'NO', city: 'Oslo' };
    for (const type of ['web_search', 'web_search_preview', 'web_search_2025_08_26']) {
      const chat = translate(
        {
          input: 'News?',
          tools: [
            { type: 'function', name: 'f' },
            { type, search_context_size: 'low', user_location: location },
          ],
        },
        [],
        true,
      );
      assert.deepEqual(chat.web_search_options, {
        search_context_size: 'low',
        user_location: { type: 'approximate', approximate: { country: 'NO', city: 'Oslo' } },
      });
      assert.deepEqual(
        chat.tools?.map((tool) => tool.type === 'function' && tool.function.name),
        ['f'],
      );
    }
    // The search is the vendor's to start: a choice that requires or names it leaves the choice to the model.
    const required = translate({ input: 'News?', tools: [{ type: 'web_search' }], tool_choice: 'required' }, [], true);
    assert.deepEqual(required.web_search_options, {});
    assert.equal(required.tool_choice, undefined);
    const forced = translate(
      { input: 'News?', tools: [{ type: 'web_search' }], tool_choice: { type: 'web_search' } },
      [],
      true,
    );
    assert.equal(forced.tool_choice, undefined);
    // A model without search: declined, as before.
    assert.equal(translate({ input: 'News?', tools: [{ type: 'web_search' }] }).web_search_options, undefined);
  });

  it('flattens a namespace’s functions to chat functions under flat names, and takes calls back by namespace', () => {
    const tools = [
      { type: 'function', name: 'shell', parameters: { type: 'object', properties: { cmd: { type: 'string' } } } },
      {
        type: 'namespace',
        name: 'multi_agent_v1',
        description: 'Agents you can start.',
        tools: [
          {
            type: 'function',
            name: 'spawn_agent',
            description: 'Start one.',
            parameters: { type: 'object', properties: {} },
          },
          { type: 'function', name: 'wait', parameters: { type: 'object', properties: {} } },
          { type: 'custom', name: 'freeform' },
        ],
      },
      { type: 'web_search' },
    ];
    const chat = translate({
      input: [
        { type: 'message', role: 'user', content: 'Go' },
        { type: 'function_call', call_id: 'call_1', namespace: 'multi_agent_v1', name: 'spawn_agent', arguments: '{}' },
        { type: 'function_call_output', call_id: 'call_1', output: 'started' },
      ],
      tools,
      tool_choice: { type: 'function', namespace: 'multi_agent_v1', name: 'wait' },
    });
    assert.deepEqual(
      chat.tools?.map((tool) => tool.type === 'function' && tool.function.name),
      ['shell', 'multi_agent_v1__spawn_agent', 'multi_agent_v1__wait'],
    );
    const spawn = chat.tools?.[1];
    assert.equal(spawn?.type === 'function' && spawn.function.description, 'Agents you can start.\n\nStart one.');
    assert.deepEqual(chat.tool_choice, { type: 'function', function: { name: 'multi_agent_v1__wait' } });
    const call = chat.messages.find((message) => message.role === 'assistant');
    assert.equal(
      call?.role === 'assistant' && call.tool_calls?.[0]?.type === 'function' && call.tool_calls[0].function.name,
      'multi_agent_v1__spawn_agent',
    );
    rejects(() => translate({ input: 'Hi', tools: [{ type: 'namespace', name: 'n', tools: [] }] }), 'tools[0].tools');
    rejects(
      () => translate({ input: 'Hi', tools: [{ type: 'namespace', tools: [{ type: 'function', name: 'f' }] }] }),
      'tools[0].name',
      /Missing required/,
    );
    rejects(
      () =>
        translate({
          input: 'Hi',
          tools: [{ type: 'namespace', name: 'n', tools: [{ type: 'function', name: 'bad name' }] }],
        }),
      'tools[0].tools[0].name',
    );
  });

  it('keeps flat names valid and apart when a namespace and a name are long or odd', () => {
    const long = flatToolName('n'.repeat(40), 'f'.repeat(40));
    assert.ok(long.length <= 64 && /^[a-zA-Z0-9_-]+$/.test(long), long);
    assert.notEqual(long, flatToolName('n'.repeat(40), `${'f'.repeat(39)}g`));
    assert.match(flatToolName('crm.v2', 'find'), /^[a-zA-Z0-9_-]+$/);
    const names = namespacedTools([
      { type: 'namespace', name: 'n'.repeat(40), tools: [{ type: 'function', name: 'f'.repeat(40) }] },
    ]);
    assert.deepEqual(clientToolName(long, names), { namespace: 'n'.repeat(40), name: 'f'.repeat(40) });
    assert.deepEqual(clientToolName('plain', names), { name: 'plain' });
  });

  it('refuses bad function tools', () => {
    rejects(
      () => translate({ input: 'Hi', tools: [{ type: 'function', name: 'bad name' }] }),
      'tools[0].name',
      /a-z, A-Z/,
    );
    rejects(() => translate({ input: 'Hi', tools: [{ type: 'function', name: 'x'.repeat(65) }] }), 'tools[0].name');
    rejects(() => translate({ input: 'Hi', tools: [{ type: 'function' }] }), 'tools[0].name', /Missing required/);
    rejects(
      () => translate({ input: 'Hi', tools: [{ type: 'function', name: 'f', parameters: 'x' }] }),
      'tools[0].parameters',
    );
    rejects(
      () => translate({ input: 'Hi', tools: [{ type: 'function', name: 'f', strict: 'yes' }] }),
      'tools[0].strict',
    );
    rejects(
      () => translate({ input: 'Hi', tools: [{ type: 'function', name: 'f', description: 1 }] }),
      'tools[0].description',
    );
  });

  it('refuses tool choices it cannot translate', () => {
    const tools = [{ type: 'function', name: 'f' }];
    rejects(
      () => translate({ input: 'Hi', tools, tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [] } }),
      'tool_choice',
      /'allowed_tools' is not supported/,
    );
    rejects(() => translate({ input: 'Hi', tools, tool_choice: { type: 'web_search_preview' } }), 'tool_choice');
    rejects(() => translate({ input: 'Hi', tools, tool_choice: { type: 'mcp', server_label: 's' } }), 'tool_choice');
    rejects(() => translate({ input: 'Hi', tools: [], tool_choice: { type: 'custom', name: 'x' } }), 'tool_choice');
    rejects(
      () => translate({ input: 'Hi', tools, tool_choice: { type: 'function' } }),
      'tool_choice.name',
      /Missing required/,
    );
    rejects(
      () => translate({ input: 'Hi', tools, tool_choice: { type: 'function', name: 'g' } }),
      'tool_choice.name',
      /'g'/,
    );
  });

  it('maps text.format to response_format', () => {
    assert.equal('response_format' in translate({ input: 'Hi', text: { format: { type: 'text' } } }), false);
    assert.equal('response_format' in translate({ input: 'Hi', text: null }), false);
    assert.deepEqual(translate({ input: 'Hi', text: { format: { type: 'json_object' } } }).response_format, {
      type: 'json_object',
    });
    const schema = { type: 'object', properties: { a: { type: 'string' } }, required: ['a'] };
    assert.deepEqual(
      translate({ input: 'Hi', text: { format: { type: 'json_schema', name: 'out', schema } } }).response_format,
      {
        type: 'json_schema',
        json_schema: { name: 'out', schema },
      },
    );
    assert.deepEqual(
      translate({
        input: 'Hi',
        text: {
          format: { type: 'json_schema', name: 'out', schema, strict: true, description: 'd' },
          verbosity: 'high',
        },
      }).response_format,
      { type: 'json_schema', json_schema: { name: 'out', schema, strict: true, description: 'd' } },
    );
  });

  it('copies the sampling fields chat has, and nothing Responses-only', () => {
    const chat = translate({
      input: 'Hi',
      temperature: 0.2,
      top_p: 0.9,
      user: 'u1',
      max_output_tokens: 100,
      reasoning: { effort: 'low', summary: 'auto' },
      metadata: { a: 'b' },
      store: false,
      background: true,
      include: ['reasoning.encrypted_content'],
      truncation: 'auto',
      max_tool_calls: 2,
      service_tier: 'auto',
      prompt_cache_key: 'k',
      safety_identifier: 's',
      previous_response_id: 'resp_1',
      instructions: null,
    });
    assert.deepEqual(chat, {
      model: 'm',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }],
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0.2,
      top_p: 0.9,
      user: 'u1',
      // As the client named it, for a vendor with tiers of its own.
      service_tier: 'auto',
      max_completion_tokens: 100,
      reasoning_effort: 'low',
    });
    const nulls = translate({
      input: 'Hi',
      temperature: null,
      top_p: null,
      user: null,
      max_output_tokens: null,
      reasoning: { effort: null },
    });
    assert.deepEqual(Object.keys(nulls).sort(), ['messages', 'model', 'stream', 'stream_options']);
    assert.equal('reasoning_effort' in translate({ input: 'Hi', reasoning: null }), false);
  });
});

describe('buildShell', () => {
  it('fills the defaults of the response object', () => {
    assert.deepEqual(buildShell(parse({ input: 'Hi' }), 'resp_1', 'model-a', 1700000000), {
      id: 'resp_1',
      created_at: 1700000000,
      model: 'model-a',
      instructions: null,
      previous_response_id: null,
      tools: [],
      tool_choice: 'auto',
      parallel_tool_calls: true,
      temperature: null,
      top_p: null,
      max_output_tokens: null,
      text: { format: { type: 'text' } },
      reasoning: { effort: null, summary: null },
      metadata: {},
      store: true,
      background: false,
      user: null,
      service_tier: 'default',
    });
  });

  it('echoes what the request set', () => {
    const tools = [{ type: 'function', name: 'f', parameters: null, strict: true }];
    const format = { type: 'json_schema', name: 'out', schema: { type: 'object' }, strict: true };
    const shell = buildShell(
      parse({
        input: 'Hi',
        instructions: 'Be brief.',
        previous_response_id: 'resp_0',
        tools,
        tool_choice: 'required',
        parallel_tool_calls: false,
        temperature: 0.5,
        top_p: 0.5,
        max_output_tokens: 64,
        text: { format },
        reasoning: { effort: 'high', summary: 'auto' },
        metadata: { a: 'b' },
        store: false,
        background: true,
        user: 'u',
        service_tier: 'fast',
      }),
      'resp_2',
      'model-b',
      1,
    );
    assert.deepEqual(shell, {
      id: 'resp_2',
      created_at: 1,
      model: 'model-b',
      instructions: 'Be brief.',
      previous_response_id: 'resp_0',
      tools,
      tool_choice: 'required',
      parallel_tool_calls: false,
      temperature: 0.5,
      top_p: 0.5,
      max_output_tokens: 64,
      text: { format },
      reasoning: { effort: 'high', summary: null },
      metadata: { a: 'b' },
      store: false,
      background: true,
      user: 'u',
      service_tier: 'priority',
    });
  });
});
