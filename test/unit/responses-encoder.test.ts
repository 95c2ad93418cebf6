import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Answer, AnswerEvent } from '../../workers/answers/events.js';
import type { ResponseShell } from '../../shared/responses.js';
import {
  ResponsesStreamEncoder,
  replayFrames,
  responseFromAnswer,
  responseObject,
  responsesUsage,
  type ResponseObject,
} from '../../workers/answers/responses-encoder.js';

function shellFixture(overrides: Partial<ResponseShell> = {}): ResponseShell {
  return {
    id: 'resp_test0001',
    created_at: 1_700_000_000,
    model: 'gpt-test',
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
    ...overrides,
  };
}

interface Frame {
  event: string;
  data: Record<string, any>;
}

/** A tiny SSE reader for the encoder's own framing; it also checks each frame's exact form. */
function parseFrames(text: string): Frame[] {
  if (text === '') return [];
  assert.ok(text.endsWith('\n\n'), 'frames end with a blank line');
  return text
    .slice(0, -2)
    .split('\n\n')
    .map((block) => {
      const match = /^event: ([^\n]+)\ndata: ([^\n]+)$/.exec(block);
      assert.ok(match, `frame has the form "event: …\\ndata: …": ${JSON.stringify(block)}`);
      const data = JSON.parse(match[2]!) as Record<string, any>;
      assert.equal(data.type, match[1], 'data.type is the event name');
      assert.equal(Object.keys(data)[0], 'type', 'type is the first key');
      assert.ok(Number.isInteger(data.sequence_number), 'sequence_number is an integer');
      return { event: match[1]!, data };
    });
}

const start: AnswerEvent = { type: 'start', id: 'chatcmpl-ignored', created: 1 };

/** Runs a batch (or batches) through a fresh encoder, then end(). */
function run(batches: AnswerEvent[][], shell = shellFixture(), options?: { firstSequence?: number }) {
  const encoder = new ResponsesStreamEncoder(shell, options);
  let frames = '';
  let count = 0;
  for (const batch of batches) {
    const out = encoder.encode(batch);
    frames += out.frames;
    count += out.count;
  }
  const tail = encoder.end();
  frames += tail.frames;
  count += tail.count;
  return { encoder, frames: parseFrames(frames), count };
}

function assertContiguous(frames: Frame[], from = 0): void {
  assert.deepEqual(
    frames.map((f) => f.data.sequence_number),
    frames.map((_, index) => from + index),
  );
}

const ID = /^[0-9a-f]{24}$/;

describe('responsesUsage', () => {
  it('maps chat usage, token details included', () => {
    assert.deepEqual(
      responsesUsage({
        prompt_tokens: 20,
        completion_tokens: 9,
        total_tokens: 29,
        prompt_tokens_details: { cached_tokens: 4 },
        completion_tokens_details: { reasoning_tokens: 3 },
      }),
      {
        input_tokens: 20,
        input_tokens_details: { cached_tokens: 4, cache_write_tokens: 0 },
        output_tokens: 9,
        output_tokens_details: { reasoning_tokens: 3 },
        total_tokens: 29,
      },
    );
  });

  it('puts 0 for missing details', () => {
    assert.deepEqual(responsesUsage({ prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 }), {
      input_tokens: 1,
      input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
      output_tokens: 2,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 3,
    });
  });
});

describe('responseObject', () => {
  it('has OpenAI key order and echoes the shell', () => {
    const object = responseObject(shellFixture({ instructions: 'be brief', metadata: { a: 'b' } }), {
      status: 'in_progress',
      output: [],
      usage: null,
      error: null,
    });
    assert.deepEqual(Object.keys(object), [
      'id',
      'object',
      'created_at',
      'status',
      'background',
      'completed_at',
      'error',
      'incomplete_details',
      'instructions',
      'max_output_tokens',
      'model',
      'output',
      'output_text',
      'parallel_tool_calls',
      'previous_response_id',
      'reasoning',
      'service_tier',
      'store',
      'temperature',
      'text',
      'tool_choice',
      'tools',
      'top_p',
      'truncation',
      'metadata',
    ]);
    // No usage yet and no user named: both left out (the spec types them as an object and a string, never null).
    const done = responseObject(shellFixture({ user: 'u-1' }), {
      status: 'completed',
      output: [],
      usage: responsesUsage({ prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }),
      error: null,
    });
    assert.deepEqual(Object.keys(done).slice(-3), ['usage', 'user', 'metadata']);
    assert.equal(object.object, 'response');
    assert.equal(object.id, 'resp_test0001');
    assert.equal(object.instructions, 'be brief');
    assert.equal(object.truncation, 'disabled');
    assert.equal(object.output_text, '');
    assert.equal(object.completed_at, null);
    assert.deepEqual(object.metadata, { a: 'b' });
  });
});

describe('ResponsesStreamEncoder', () => {
  it('streams plain text in the documented order', () => {
    const { encoder, frames, count } = run([
      [start, { type: 'role', choice: 0 }, { type: 'text', choice: 0, text: 'Hel' }],
      [
        { type: 'text', choice: 0, text: '' },
        { type: 'text', choice: 0, text: 'lo, ' },
        { type: 'text', choice: 1, text: 'other choice' },
      ],
      [
        { type: 'text', choice: 0, text: 'world "quoted"\nline' },
        { type: 'finish', choice: 0, reason: 'stop' },
        {
          type: 'usage',
          usage: {
            prompt_tokens: 12,
            completion_tokens: 5,
            total_tokens: 17,
            prompt_tokens_details: { cached_tokens: 8 },
            completion_tokens_details: { reasoning_tokens: 2 },
          },
        },
      ],
    ]);
    assert.deepEqual(
      frames.map((f) => f.event),
      [
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        'response.output_text.delta',
        'response.output_text.delta',
        'response.output_text.delta',
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'response.completed',
      ],
    );
    assert.equal(count, frames.length);
    assertContiguous(frames);
    assert.equal(encoder.nextSequence, frames.length);

    const created = frames[0]!.data;
    assert.equal(created.response.status, 'in_progress');
    assert.deepEqual(created.response.output, []);
    assert.equal(created.response.id, 'resp_test0001');
    assert.equal(created.response.created_at, 1_700_000_000);
    assert.equal(frames[1]!.data.response.status, 'in_progress');

    const added = frames[2]!.data;
    assert.equal(added.output_index, 0);
    assert.equal(added.item.type, 'message');
    assert.equal(added.item.status, 'in_progress');
    assert.equal(added.item.role, 'assistant');
    assert.deepEqual(added.item.content, []);
    assert.match(added.item.id, /^msg_/);
    assert.match(added.item.id.slice(4), ID);
    assert.deepEqual(frames[3]!.data, {
      type: 'response.content_part.added',
      sequence_number: 3,
      item_id: added.item.id,
      output_index: 0,
      content_index: 0,
      part: { type: 'output_text', annotations: [], logprobs: [], text: '' },
    });

    const deltas = frames.filter((f) => f.event === 'response.output_text.delta');
    for (const delta of deltas) {
      assert.equal(delta.data.item_id, added.item.id);
      assert.equal(delta.data.content_index, 0);
      assert.deepEqual(delta.data.logprobs, []);
    }
    const text = deltas.map((d) => d.data.delta).join('');
    assert.equal(text, 'Hello, world "quoted"\nline');
    assert.equal(frames[7]!.data.text, text);
    assert.deepEqual(frames[8]!.data.part, { type: 'output_text', annotations: [], logprobs: [], text });
    assert.equal(frames[9]!.data.item.status, 'completed');
    assert.deepEqual(frames[9]!.data.item.content, [{ type: 'output_text', annotations: [], logprobs: [], text }]);

    const final = frames[10]!.data.response;
    assert.equal(final.status, 'completed');
    assert.equal(typeof final.completed_at, 'number');
    assert.equal(final.output_text, text);
    assert.deepEqual(final.output, [frames[9]!.data.item]);
    assert.deepEqual(final.usage, {
      input_tokens: 12,
      input_tokens_details: { cached_tokens: 8, cache_write_tokens: 0 },
      output_tokens: 5,
      output_tokens_details: { reasoning_tokens: 2 },
      total_tokens: 17,
    });
    assert.deepEqual(encoder.current(), final);
    assert.equal(encoder.usage?.prompt_tokens, 12);
  });

  it('emits queued for a background response', () => {
    const { frames } = run([[start, { type: 'text', choice: 0, text: 'x' }]], shellFixture({ background: true }));
    assert.deepEqual(
      frames.slice(0, 3).map((f) => [f.event, f.data.response.status]),
      [
        ['response.created', 'queued'],
        ['response.queued', 'queued'],
        ['response.in_progress', 'in_progress'],
      ],
    );
    assert.equal(frames.at(-1)!.data.response.background, true);
  });

  it('streams text, then two parallel tool calls with arguments in pieces', () => {
    const { encoder, frames } = run([
      [start, { type: 'text', choice: 0, text: 'Let me check.' }],
      [
        { type: 'tool-call', choice: 0, index: 0, id: 'call_a', name: 'weather', arguments: '' },
        { type: 'tool-call', choice: 0, index: 0, arguments: '{"city":' },
        { type: 'tool-call', choice: 0, index: 0, arguments: '"Oslo"}' },
      ],
      [
        { type: 'tool-call', choice: 0, index: 1, id: 'call_b', name: 'time', arguments: '{"tz":' },
        { type: 'tool-call', choice: 0, index: 1, arguments: '"CET"}' },
        { type: 'finish', choice: 0, reason: 'tool_calls' },
      ],
    ]);
    assert.deepEqual(
      frames.map((f) => f.event),
      [
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        'response.output_text.delta',
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'response.output_item.added',
        'response.function_call_arguments.delta',
        'response.function_call_arguments.delta',
        'response.function_call_arguments.done',
        'response.output_item.done',
        'response.output_item.added',
        'response.function_call_arguments.delta',
        'response.function_call_arguments.delta',
        'response.function_call_arguments.done',
        'response.output_item.done',
        'response.completed',
      ],
    );
    assertContiguous(frames);

    const firstAdded = frames[8]!.data;
    assert.equal(firstAdded.output_index, 1);
    assert.match(firstAdded.item.id, /^fc_[0-9a-f]{24}$/);
    assert.deepEqual(firstAdded.item, {
      id: firstAdded.item.id,
      type: 'function_call',
      status: 'in_progress',
      arguments: '',
      call_id: 'call_a',
      name: 'weather',
    });
    assert.deepEqual(frames[9]!.data, {
      type: 'response.function_call_arguments.delta',
      sequence_number: 9,
      item_id: firstAdded.item.id,
      output_index: 1,
      delta: '{"city":',
    });
    assert.deepEqual(frames[11]!.data, {
      type: 'response.function_call_arguments.done',
      sequence_number: 11,
      item_id: firstAdded.item.id,
      output_index: 1,
      name: 'weather',
      arguments: '{"city":"Oslo"}',
    });
    assert.deepEqual(frames[12]!.data.item, { ...firstAdded.item, status: 'completed', arguments: '{"city":"Oslo"}' });

    const secondAdded = frames[13]!.data;
    assert.equal(secondAdded.output_index, 2);
    assert.equal(secondAdded.item.call_id, 'call_b');
    assert.notEqual(secondAdded.item.id, firstAdded.item.id);
    assert.equal(frames[14]!.data.delta, '{"tz":');
    assert.equal(frames[16]!.data.arguments, '{"tz":"CET"}');

    const final = encoder.current();
    assert.equal(final.status, 'completed');
    assert.deepEqual(
      final.output.map((item: any) => [item.type, item.status]),
      [
        ['message', 'completed'],
        ['function_call', 'completed'],
        ['function_call', 'completed'],
      ],
    );
    assert.equal(final.output_text, 'Let me check.');
    assert.equal(final.usage, undefined, 'no usage reported: none in the object');
  });

  it('opens a new message for text after a tool call, and closes items when the vendor sends no finish', () => {
    const { frames, encoder } = run([
      [
        start,
        { type: 'tool-call', choice: 0, index: 0, id: 'c1', name: 'f', arguments: '{}' },
        { type: 'text', choice: 0, text: 'after' },
      ],
    ]);
    const kinds = frames
      .filter((f) => f.event === 'response.output_item.added' || f.event === 'response.output_item.done')
      .map((f) => [f.event, f.data.item.type, f.data.output_index]);
    assert.deepEqual(kinds, [
      ['response.output_item.added', 'function_call', 0],
      ['response.output_item.done', 'function_call', 0],
      ['response.output_item.added', 'message', 1],
      ['response.output_item.done', 'message', 1],
    ]);
    assert.equal(frames.at(-1)!.event, 'response.completed');
    assert.equal(encoder.current().output_text, 'after');
  });

  it('ends with response.incomplete on a length finish', () => {
    const { frames, encoder } = run([
      [start, { type: 'text', choice: 0, text: 'cut' }, { type: 'finish', choice: 0, reason: 'length' }],
    ]);
    const last = frames.at(-1)!;
    assert.equal(last.event, 'response.incomplete');
    assert.equal(last.data.response.status, 'incomplete');
    assert.deepEqual(last.data.response.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(last.data.response.completed_at, null);
    assert.equal(last.data.response.output_text, 'cut');
    assert.equal(frames.at(-2)!.event, 'response.output_item.done');
    assert.equal(encoder.current().status, 'incomplete');
  });

  it('ends with response.incomplete on a content_filter finish', () => {
    const { frames } = run([[start, { type: 'finish', choice: 0, reason: 'content_filter' }]]);
    assert.deepEqual(frames.at(-1)!.data.response.incomplete_details, { reason: 'content_filter' });
  });

  it('fail() before anything emits created, error, failed', () => {
    const encoder = new ResponsesStreamEncoder(shellFixture());
    const out = encoder.fail({ code: 'server_error', message: 'vendor down' });
    const frames = parseFrames(out.frames);
    assert.equal(out.count, 3);
    assert.deepEqual(
      frames.map((f) => f.event),
      ['response.created', 'error', 'response.failed'],
    );
    assertContiguous(frames);
    assert.deepEqual(frames[1]!.data, {
      type: 'error',
      sequence_number: 1,
      code: 'server_error',
      message: 'vendor down',
      param: null,
    });
    const failed = frames[2]!.data.response;
    assert.equal(failed.status, 'failed');
    assert.deepEqual(failed.error, { code: 'server_error', message: 'vendor down' });
    assert.deepEqual(failed.output, []);
    assert.deepEqual(encoder.current(), failed);
    // Nothing more after the end.
    assert.deepEqual(encoder.end(), { frames: '', count: 0 });
    assert.deepEqual(encoder.encode([{ type: 'text', choice: 0, text: 'late' }]), { frames: '', count: 0 });
  });

  it('fail() after some text leaves the open item out and ends the sequence', () => {
    const encoder = new ResponsesStreamEncoder(shellFixture());
    const head = encoder.encode([start, { type: 'text', choice: 0, text: 'partial' }]);
    const tail = encoder.fail({ code: 'rate_limit_exceeded', message: 'slow down' });
    const frames = parseFrames(head.frames + tail.frames);
    assert.equal(head.count + tail.count, frames.length);
    assert.deepEqual(
      frames.map((f) => f.event),
      [
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        'response.output_text.delta',
        'error',
        'response.failed',
      ],
    );
    assertContiguous(frames);
    assert.equal(frames.at(-1)!.data.response.status, 'failed');
    assert.deepEqual(frames.at(-1)!.data.response.output, []);
    assert.equal(encoder.current().status, 'failed');
  });

  it('fail() keeps items already completed', () => {
    const encoder = new ResponsesStreamEncoder(shellFixture());
    encoder.encode([
      start,
      { type: 'text', choice: 0, text: 'done part' },
      { type: 'tool-call', choice: 0, index: 0, id: 'c', name: 'f', arguments: '{' },
    ]);
    const frames = parseFrames(encoder.fail({ code: 'server_error', message: 'x' }).frames);
    const response = frames.at(-1)!.data.response;
    assert.deepEqual(
      response.output.map((item: any) => item.type),
      ['message'],
    );
    assert.equal(response.output_text, 'done part');
  });

  it(
    'cancel() closes the open item with what was produced, then emits a response_cancelled error and marks the ' +
      'object cancelled',
    () => {
      const encoder = new ResponsesStreamEncoder(shellFixture());
      const head = encoder.encode([start, { type: 'text', choice: 0, text: 'a' }]);
      const tail = encoder.cancel();
      const frames = parseFrames(tail.frames);
      assert.equal(tail.count, frames.length);
      assert.deepEqual(
        frames.map((f) => f.event),
        ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'error'],
      );
      const error = frames.at(-1)!;
      assert.equal(error.data.code, 'response_cancelled');
      assert.equal(error.data.param, null);
      assertContiguous(frames, head.count);
      const final = encoder.current();
      assert.equal(final.status, 'cancelled');
      assert.equal(final.output_text, 'a');
      assert.deepEqual(encoder.end(), { frames: '', count: 0 });
    },
  );

  it('numbers from firstSequence', () => {
    const { frames, encoder } = run([[start, { type: 'text', choice: 0, text: 'hi' }]], shellFixture(), {
      firstSequence: 41,
    });
    assert.equal(frames[0]!.data.sequence_number, 41);
    assertContiguous(frames, 41);
    assert.equal(encoder.nextSequence, 41 + frames.length);
  });

  it('starts the stream even when the start event is missing', () => {
    const { frames } = run([[{ type: 'text', choice: 0, text: 'x' }]]);
    assert.deepEqual(
      frames.slice(0, 2).map((f) => f.event),
      ['response.created', 'response.in_progress'],
    );
  });
});

describe('responseFromAnswer', () => {
  it('builds a completed text response', () => {
    const answer: Answer = {
      id: 'chatcmpl-1',
      created: 5,
      choices: [{ index: 0, text: 'Hello there', toolCalls: [], finishReason: 'stop' }],
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5, prompt_tokens_details: { cached_tokens: 1 } },
    };
    const response = responseFromAnswer(answer, shellFixture());
    assert.equal(response.id, 'resp_test0001');
    assert.equal(response.status, 'completed');
    assert.equal(typeof response.completed_at, 'number');
    assert.equal(response.output_text, 'Hello there');
    assert.equal(response.output.length, 1);
    const item = response.output[0] as any;
    assert.match(item.id, /^msg_[0-9a-f]{24}$/);
    assert.deepEqual(item, {
      id: item.id,
      type: 'message',
      status: 'completed',
      content: [{ type: 'output_text', annotations: [], logprobs: [], text: 'Hello there' }],
      role: 'assistant',
    });
    assert.deepEqual(response.usage, {
      input_tokens: 3,
      input_tokens_details: { cached_tokens: 1, cache_write_tokens: 0 },
      output_tokens: 2,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 5,
    });
  });

  it('builds tool-call items, and incomplete on length', () => {
    const answer: Answer = {
      id: 'chatcmpl-2',
      created: 5,
      choices: [
        {
          index: 0,
          text: null,
          toolCalls: [
            { id: 'call_1', name: 'a', arguments: '{"x":1}' },
            { id: 'call_2', name: 'b', arguments: '{}' },
          ],
          finishReason: 'tool_calls',
        },
      ],
    };
    const response = responseFromAnswer(answer, shellFixture());
    assert.equal(response.status, 'completed');
    assert.equal(response.output_text, '');
    assert.equal(response.usage, undefined);
    assert.deepEqual(
      response.output.map((item: any) => [item.type, item.status, item.call_id, item.name, item.arguments]),
      [
        ['function_call', 'completed', 'call_1', 'a', '{"x":1}'],
        ['function_call', 'completed', 'call_2', 'b', '{}'],
      ],
    );
    for (const item of response.output as any[]) assert.match(item.id, /^fc_[0-9a-f]{24}$/);

    const cut = responseFromAnswer(
      { id: 'c', created: 1, choices: [{ index: 0, text: 'abc', toolCalls: [], finishReason: 'length' }] },
      shellFixture(),
    );
    assert.equal(cut.status, 'incomplete');
    assert.deepEqual(cut.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(cut.completed_at, null);
  });

  it('has the same item shapes as the stream', () => {
    const { encoder } = run([
      [
        start,
        { type: 'text', choice: 0, text: 'Hi' },
        { type: 'tool-call', choice: 0, index: 0, id: 'call_1', name: 'a', arguments: '{}' },
        { type: 'finish', choice: 0, reason: 'tool_calls' },
      ],
    ]);
    const plain = responseFromAnswer(
      {
        id: 'x',
        created: 1,
        choices: [
          {
            index: 0,
            text: 'Hi',
            toolCalls: [{ id: 'call_1', name: 'a', arguments: '{}' }],
            finishReason: 'tool_calls',
          },
        ],
      },
      shellFixture(),
    );
    const strip = (response: ResponseObject) => response.output.map((item: any) => ({ ...item, id: undefined }));
    assert.deepEqual(strip(plain), strip(encoder.current()));
    assert.deepEqual(
      plain.output.map((item) => Object.keys(item as object)),
      encoder.current().output.map((item) => Object.keys(item as object)),
    );
  });
});

describe('replayFrames', () => {
  /** Rebuilds output items and text from replayed frames the way a client would. */
  function rebuild(frames: Frame[]) {
    const items: any[] = [];
    const texts = new Map<string, string>();
    const args = new Map<string, string>();
    for (const { event, data } of frames) {
      if (event === 'response.output_item.added') items[data.output_index] = data.item;
      if (event === 'response.output_text.delta') texts.set(data.item_id, (texts.get(data.item_id) ?? '') + data.delta);
      if (event === 'response.function_call_arguments.delta')
        args.set(data.item_id, (args.get(data.item_id) ?? '') + data.delta);
      if (event === 'response.output_item.done') items[data.output_index] = data.item;
    }
    return { items, texts, args };
  }

  it('round-trips a stored stream response', () => {
    const { encoder, frames: live } = run([
      [
        start,
        { type: 'text', choice: 0, text: 'Checking ' },
        { type: 'text', choice: 0, text: 'now.' },
        { type: 'tool-call', choice: 0, index: 0, id: 'call_a', name: 'w', arguments: '{"a":' },
        { type: 'tool-call', choice: 0, index: 0, arguments: '1}' },
        { type: 'finish', choice: 0, reason: 'tool_calls' },
        { type: 'usage', usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } },
      ],
    ]);
    const stored = JSON.parse(JSON.stringify(encoder.current())) as ResponseObject;
    const replayed = replayFrames(stored);
    const frames = parseFrames(replayed.join(''));
    assert.equal(frames.length, replayed.length);
    assertContiguous(frames);
    assert.deepEqual(
      frames.map((f) => f.event),
      [
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        'response.output_text.delta',
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'response.output_item.added',
        'response.function_call_arguments.delta',
        'response.function_call_arguments.done',
        'response.output_item.done',
        'response.completed',
      ],
    );
    // Same event names as the live stream, minus the extra deltas.
    assert.deepEqual(
      frames.map((f) => f.event),
      live.map((f) => f.event).filter((event, index, all) => !(event.endsWith('.delta') && all[index - 1] === event)),
    );
    assert.equal(frames[0]!.data.response.status, 'in_progress');
    assert.deepEqual(frames[0]!.data.response.output, []);
    // No usage yet: left out, as in the live stream's opening events (the spec's usage is an object, never null).
    assert.ok(!('usage' in frames[0]!.data.response));

    const { items, texts, args } = rebuild(frames);
    assert.deepEqual(items, stored.output);
    const message = stored.output[0] as any;
    const call = stored.output[1] as any;
    assert.equal(texts.get(message.id), 'Checking now.');
    assert.equal(texts.get(message.id), stored.output_text);
    assert.equal(args.get(call.id), call.arguments);
    assert.deepEqual(frames.at(-1)!.data.response, stored);
  });

  it('ends with the event its status calls for', () => {
    const incomplete = responseFromAnswer(
      { id: 'c', created: 1, choices: [{ index: 0, text: 'abc', toolCalls: [], finishReason: 'length' }] },
      shellFixture(),
    );
    const incompleteFrames = parseFrames(replayFrames(incomplete).join(''));
    assert.equal(incompleteFrames.at(-1)!.event, 'response.incomplete');
    assert.equal(rebuild(incompleteFrames).texts.get((incomplete.output[0] as any).id), 'abc');

    const encoder = new ResponsesStreamEncoder(shellFixture());
    encoder.fail({ code: 'server_error', message: 'boom' });
    const failedFrames = parseFrames(replayFrames(encoder.current()).join(''));
    assert.deepEqual(
      failedFrames.map((f) => f.event),
      ['response.created', 'response.in_progress', 'error', 'response.failed'],
    );
    assert.equal(failedFrames[2]!.data.code, 'server_error');
    assert.equal(failedFrames[2]!.data.message, 'boom');
    assertContiguous(failedFrames);
  });
});
