import assert from 'node:assert/strict';
import { MessageStream } from '@anthropic-ai/sdk/lib/MessageStream';
import { Stream } from '@anthropic-ai/sdk/streaming';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import type { AnswerEvent, Usage } from '../../workers/answers/events.js';
import {
  AnthropicEventFold,
  MessagesStreamEncoder,
  anthropicCounts,
  messageIdOf,
  type AnthropicMessage,
  type MessagesEncoderOptions,
} from '../../workers/answers/messages-encoder.js';
import { wireFixture } from '../support/fixtures.js';

interface Frame {
  id: number;
  event: string;
  data: Record<string, any>;
}

/** A tiny SSE reader for the encoder's framing; it checks each frame's exact form on the way. */
function parseFrames(text: string): Frame[] {
  if (text === '') return [];
  assert.ok(text.endsWith('\n\n'), 'frames end with a blank line');
  return text
    .slice(0, -2)
    .split('\n\n')
    .map((block) => {
      const match = /^id: (\d+)\nevent: ([^\n]+)\ndata: ([^\n]+)$/.exec(block);
      assert.ok(match, `frame has the form "id: N\\nevent: …\\ndata: …": ${JSON.stringify(block)}`);
      const data = JSON.parse(match[3]!) as Record<string, any>;
      assert.equal(data.type, match[2], 'data.type is the event name');
      assert.equal(Object.keys(data)[0], 'type', 'type is the first key');
      return { id: Number(match[1]), event: match[2]!, data };
    });
}

const options: MessagesEncoderOptions = { model: 'claude-alias', inputTokens: 42 };
const start: AnswerEvent = { type: 'start', id: 'chatcmpl-abc123', created: 1 };
const role: AnswerEvent = { type: 'role', choice: 0 };
const text = (t: string): AnswerEvent => ({ type: 'text', choice: 0, text: t });
const usage = (u: Partial<Usage> & Record<string, unknown>): AnswerEvent => ({
  type: 'usage',
  usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, ...u },
});
const finish = (reason: 'stop' | 'length' | 'tool_calls' | 'content_filter' | 'function_call'): AnswerEvent => ({
  type: 'finish',
  choice: 0,
  reason,
});
const call = (index: number, args: string, first?: { id?: string; name: string }): AnswerEvent => ({
  type: 'tool-call',
  choice: 0,
  index,
  arguments: args,
  ...first,
});

/**
 * Runs batches through a fresh encoder, then end(); the frames as text and parsed, and the frame count the encoder
 * said.
 */
function run(batches: AnswerEvent[][], opts: MessagesEncoderOptions = options) {
  const encoder = new MessagesStreamEncoder(opts);
  let sse = '';
  let count = 0;
  for (const batch of batches) {
    const out = encoder.encode(batch);
    sse += out.frames;
    count += out.count;
  }
  const tail = encoder.end();
  sse += tail.frames;
  count += tail.count;
  const frames = parseFrames(sse);
  assert.equal(count, frames.length, 'count says how many frames');
  assert.deepEqual(
    frames.map((f) => f.id),
    frames.map((_, index) => index),
    'frames are numbered from 0',
  );
  return { encoder, sse, frames };
}

/** The streamed events folded the way a client (or the pass-through path) would. */
function foldFrames(frames: Frame[]): AnthropicMessage {
  const fold = new AnthropicEventFold();
  for (const frame of frames) fold.add(frame.event, frame.data);
  return fold.message();
}

const names = (frames: Frame[]) =>
  frames.map((f) => (f.event === 'content_block_delta' ? `delta:${f.data.delta.type}` : f.event));

describe('anthropicCounts', () => {
  it('takes cache reads and writes out of input_tokens', () => {
    assert.deepEqual(
      anthropicCounts({
        prompt_tokens: 100,
        completion_tokens: 7,
        total_tokens: 107,
        prompt_tokens_details: { cached_tokens: 30, cache_write_tokens: 20 },
      }),
      {
        input_tokens: 50,
        output_tokens: 7,
        cache_creation_input_tokens: 20,
        cache_read_input_tokens: 30,
      },
    );
  });

  it('never says fewer than 0 input tokens, and reads missing details as 0', () => {
    assert.equal(
      anthropicCounts({
        prompt_tokens: 10,
        completion_tokens: 1,
        total_tokens: 11,
        prompt_tokens_details: { cached_tokens: 30 },
      }).input_tokens,
      0,
    );
    assert.deepEqual(
      anthropicCounts({ prompt_tokens: 9, completion_tokens: 1, total_tokens: 10, prompt_tokens_details: null }),
      {
        input_tokens: 9,
        output_tokens: 1,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
      },
    );
  });
});

describe('messageIdOf', () => {
  it('keeps an Anthropic id and makes one of any other, the same every time', () => {
    assert.equal(messageIdOf('msg_01XYZ'), 'msg_01XYZ');
    assert.equal(messageIdOf('chatcmpl-abc'), 'msg_abc');
    assert.equal(messageIdOf('resp-9'), 'msg_resp-9');
  });
});

describe('MessagesStreamEncoder', () => {
  it('writes a vendor’s reasoning as an unsigned thinking block before the text', () => {
    const reasoning = (t: string): AnswerEvent => ({ type: 'reasoning', choice: 0, text: t });
    const { encoder, frames } = run([
      [start, role, reasoning('First, '), reasoning('think.')],
      [text('Answer.'), finish('stop'), usage({})],
    ]);
    assert.deepEqual(names(frames), [
      'message_start',
      'ping',
      'content_block_start',
      'delta:thinking_delta',
      'delta:thinking_delta',
      'content_block_stop',
      'content_block_start',
      'delta:text_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    assert.deepEqual(frames[2]!.data.content_block, { type: 'thinking', thinking: '', signature: '' });
    assert.deepEqual(encoder.message().content, [
      { type: 'thinking', thinking: 'First, think.', signature: '' },
      { type: 'text', text: 'Answer.' },
    ]);
    assert.deepEqual(foldFrames(frames).content, encoder.message().content);
  });

  it('streams a text answer in Anthropic order', () => {
    const { encoder, sse, frames } = run([
      [start, role, text('Hel')],
      [text(''), text('lo, "world"\n'), { type: 'text', choice: 1, text: 'another choice' }],
      [finish('stop'), usage({ prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 })],
    ]);
    assert.deepEqual(names(frames), [
      'message_start',
      'ping',
      'content_block_start',
      'delta:text_delta',
      'delta:text_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    assert.ok(
      sse.startsWith('id: 0\nevent: message_start\ndata: {"type":"message_start","message":{"id":"msg_abc123",'),
    );
    assert.deepEqual(frames[0]!.data.message, {
      id: 'msg_abc123',
      type: 'message',
      role: 'assistant',
      model: 'claude-alias',
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: {
        input_tokens: 42,
        output_tokens: 1,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        service_tier: 'standard',
      },
    });
    assert.deepEqual(frames[1]!.data, { type: 'ping' });
    assert.deepEqual(frames[2]!.data, {
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'text', text: '' },
    });
    assert.deepEqual(frames[4]!.data, {
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'text_delta', text: 'lo, "world"\n' },
    });
    assert.deepEqual(frames[5]!.data, { type: 'content_block_stop', index: 0 });
    assert.deepEqual(frames[6]!.data, {
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null },
      usage: { input_tokens: 12, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    });
    assert.deepEqual(frames[7]!.data, { type: 'message_stop' });

    assert.deepEqual(encoder.usage, { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 });
    const message = encoder.message();
    assert.deepEqual(message, {
      id: 'msg_abc123',
      type: 'message',
      role: 'assistant',
      model: 'claude-alias',
      content: [{ type: 'text', text: 'Hello, "world"\n' }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: {
        input_tokens: 12,
        output_tokens: 5,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        service_tier: 'standard',
      },
    });
    assert.deepEqual(foldFrames(frames), message);

    // Ended: nothing more is written.
    assert.deepEqual(encoder.encode([text('late')]), { frames: '', count: 0 });
    assert.deepEqual(encoder.end(), { frames: '', count: 0 });
  });

  it('streams tool calls sent in order live, a call without arguments included', () => {
    const { frames, encoder } = run([
      [start, role, call(0, '', { id: 'call_1', name: 'get_weather' }), call(0, '{"city":'), call(0, '"Oslo"}')],
      [call(1, '', { id: 'call_2', name: 'now' }), finish('tool_calls'), usage({})],
    ]);
    assert.deepEqual(names(frames), [
      'message_start',
      'ping',
      'content_block_start',
      'delta:input_json_delta',
      'delta:input_json_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    assert.deepEqual(frames[2]!.data.content_block, { type: 'tool_use', id: 'call_1', name: 'get_weather', input: {} });
    assert.deepEqual(frames[3]!.data, {
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'input_json_delta', partial_json: '{"city":' },
    });
    assert.deepEqual(frames[6]!.data, {
      type: 'content_block_start',
      index: 1,
      content_block: { type: 'tool_use', id: 'call_2', name: 'now', input: {} },
    });
    assert.equal(frames[8]!.data.delta.stop_reason, 'tool_use');
    const message = encoder.message();
    assert.deepEqual(message.content, [
      { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Oslo' } },
      { type: 'tool_use', id: 'call_2', name: 'now', input: {} },
    ]);
    assert.equal(message.stop_reason, 'tool_use');
    assert.deepEqual(foldFrames(frames), message);
  });

  it('writes interleaved tool calls one block at a time, every call whole', () => {
    const { frames, encoder } = run([
      [start, call(0, '', { id: 'call_a', name: 'a' }), call(1, '', { id: 'call_b', name: 'b' })],
      [
        call(0, '{"x":'),
        call(1, '{"y":'),
        call(0, '1}'),
        call(1, '2}'),
        call(2, '{"z":3}', { id: 'call_c', name: 'c' }),
      ],
      [finish('tool_calls'), usage({})],
    ]);
    assert.deepEqual(names(frames), [
      'message_start',
      'ping',
      // The first call streams live…
      'content_block_start',
      'delta:input_json_delta',
      'delta:input_json_delta',
      'content_block_stop',
      // …the others waited and come whole, in the order they began.
      'content_block_start',
      'delta:input_json_delta',
      'content_block_stop',
      'content_block_start',
      'delta:input_json_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    assert.deepEqual(frames[7]!.data.delta, { type: 'input_json_delta', partial_json: '{"y":2}' });
    const message = encoder.message();
    assert.deepEqual(message.content, [
      { type: 'tool_use', id: 'call_a', name: 'a', input: { x: 1 } },
      { type: 'tool_use', id: 'call_b', name: 'b', input: { y: 2 } },
      { type: 'tool_use', id: 'call_c', name: 'c', input: { z: 3 } },
    ]);
    assert.deepEqual(foldFrames(frames), message);
    // At most one block open at a time, each index started once.
    let open: number | null = null;
    for (const frame of frames) {
      if (frame.event === 'content_block_start') {
        assert.equal(open, null);
        open = frame.data.index;
      } else if (frame.event === 'content_block_delta') assert.equal(frame.data.index, open);
      else if (frame.event === 'content_block_stop') {
        assert.equal(frame.data.index, open);
        open = null;
      }
    }
  });

  it('opens a new block for text after a tool call', () => {
    const { frames, encoder } = run([
      [
        start,
        text('Let me check.'),
        call(0, '{"q":"x"}', { id: 'call_1', name: 'search' }),
        text('Done.'),
        finish('tool_calls'),
        usage({}),
      ],
    ]);
    assert.deepEqual(names(frames), [
      'message_start',
      'ping',
      'content_block_start',
      'delta:text_delta',
      'content_block_stop',
      'content_block_start',
      'delta:input_json_delta',
      'content_block_stop',
      'content_block_start',
      'delta:text_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    assert.deepEqual(
      frames.filter((f) => f.event === 'content_block_start').map((f) => [f.data.index, f.data.content_block.type]),
      [
        [0, 'text'],
        [1, 'tool_use'],
        [2, 'text'],
      ],
    );
    assert.deepEqual(encoder.message().content, [
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: 'call_1', name: 'search', input: { q: 'x' } },
      { type: 'text', text: 'Done.' },
    ]);
    assert.deepEqual(foldFrames(frames), encoder.message());
  });

  it('says cached tokens apart from input tokens', () => {
    const { frames, encoder } = run([
      [
        start,
        text('hi'),
        finish('stop'),
        usage({
          prompt_tokens: 100,
          completion_tokens: 7,
          total_tokens: 107,
          prompt_tokens_details: { cached_tokens: 30, cache_write_tokens: 20 },
        }),
      ],
    ]);
    const counts = { input_tokens: 50, output_tokens: 7, cache_creation_input_tokens: 20, cache_read_input_tokens: 30 };
    assert.deepEqual(frames.at(-2)!.data.usage, counts);
    assert.deepEqual(encoder.message().usage, { ...counts, service_tier: 'standard' });
    assert.equal(encoder.usage?.prompt_tokens, 100, 'billing reads the vendor usage as sent');
  });

  it('ends a stream without usage, and one without a finish', () => {
    const noUsage = run([[start, text('cut'), finish('length')]]);
    assert.equal(noUsage.encoder.usage, undefined);
    assert.deepEqual(names(noUsage.frames).slice(-4), [
      'delta:text_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    assert.deepEqual(noUsage.frames.at(-2)!.data, {
      type: 'message_delta',
      delta: { stop_reason: 'max_tokens', stop_sequence: null },
      usage: { input_tokens: 42, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    });
    assert.deepEqual(foldFrames(noUsage.frames), noUsage.encoder.message());

    const noFinish = run([[start, call(0, '{"a":', { id: 'call_1', name: 't' })]]);
    assert.deepEqual(names(noFinish.frames).slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
    assert.equal(noFinish.frames.at(-2)!.data.delta.stop_reason, 'end_turn');
    // Arguments that never became JSON: an object still, as the SDKs expect.
    assert.deepEqual(noFinish.encoder.message().content, [{ type: 'tool_use', id: 'call_1', name: 't', input: {} }]);
  });

  it('maps every finish reason', () => {
    const reasonOf = (events: AnswerEvent[]) =>
      run([[start, ...events, usage({})]]).frames.at(-2)!.data.delta.stop_reason;
    assert.equal(reasonOf([text('x'), finish('stop')]), 'end_turn');
    assert.equal(reasonOf([text('x'), finish('length')]), 'max_tokens');
    assert.equal(reasonOf([call(0, '{}', { id: 'c', name: 'f' }), finish('function_call')]), 'tool_use');
    assert.equal(reasonOf([text('x'), finish('content_filter')]), 'refusal');
    // A forced call comes back from chat vendors with `stop`; Anthropic says tool_use for an answer ending in calls.
    assert.equal(reasonOf([call(0, '{}', { id: 'c', name: 'f' }), finish('stop')]), 'tool_use');
  });

  it('fails with Anthropic’s error event, and nothing after it', () => {
    const encoder = new MessagesStreamEncoder(options);
    const first = encoder.encode([start, text('partial')]);
    const failed = encoder.fail({ type: 'overloaded_error', message: 'Overloaded' });
    assert.equal(failed.count, 1);
    assert.equal(
      failed.frames,
      `id: ${first.count}\nevent: error\ndata: ` +
        `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n`,
    );
    assert.deepEqual(encoder.encode([text('more'), finish('stop')]), { frames: '', count: 0 });
    assert.deepEqual(encoder.end(), { frames: '', count: 0 });
    assert.deepEqual(encoder.fail({ type: 'api_error', message: 'again' }), { frames: '', count: 0 });
    const message = encoder.message();
    assert.deepEqual(message.content, [{ type: 'text', text: 'partial' }]);
    assert.equal(message.stop_reason, null);

    // Before anything was written: the error is the whole stream.
    const early = new MessagesStreamEncoder(options);
    const only = early.fail({ type: 'api_error', message: 'boom' });
    assert.deepEqual(
      parseFrames(only.frames).map((f) => [f.id, f.event]),
      [[0, 'error']],
    );
  });

  it('gives shortened tool names back as the client wrote them, and an id to a call that had none', () => {
    const toolNames = new Map([['very_long_name_1a2b', 'very_long_name_of_a_client_tool_that_did_not_fit']]);
    const { frames, encoder } = run(
      [
        [
          { type: 'start', id: 'gen-77', created: 1 },
          call(0, '{}', { name: 'very_long_name_1a2b' }),
          call(1, '{}', { id: '', name: 'short' }),
          finish('tool_calls'),
          usage({}),
        ],
      ],
      { ...options, toolNames },
    );
    const blocks = frames.filter((f) => f.event === 'content_block_start').map((f) => f.data.content_block);
    assert.deepEqual(blocks, [
      { type: 'tool_use', id: 'toolu_gen-77_0', name: 'very_long_name_of_a_client_tool_that_did_not_fit', input: {} },
      { type: 'tool_use', id: 'toolu_gen-77_1', name: 'short', input: {} },
    ]);
    assert.equal(encoder.message().id, 'msg_gen-77');
    assert.deepEqual(foldFrames(frames), encoder.message());
  });

  it('keeps a call’s late arguments in the message when its block was already stopped', () => {
    const { frames, encoder } = run([
      [
        start,
        call(0, '{"a":', { id: 'call_1', name: 't' }),
        text('between'),
        call(0, '1}'),
        finish('tool_calls'),
        usage({}),
      ],
    ]);
    // The stream cannot reopen the block…
    assert.equal(frames.filter((f) => f.event === 'content_block_delta' && f.data.index === 0).length, 1);
    assert.deepEqual(foldFrames(frames).content[0], { type: 'tool_use', id: 'call_1', name: 't', input: {} });
    // …but a client that asked for no stream gets the whole call.
    assert.deepEqual(encoder.message().content[0], { type: 'tool_use', id: 'call_1', name: 't', input: { a: 1 } });
  });

  it('writes keep-alive pings without a number, so numbering goes on unchanged', () => {
    const encoder = new MessagesStreamEncoder(options);
    const head = encoder.encode([start]);
    assert.equal(encoder.ping(), 'event: ping\ndata: {"type":"ping"}\n\n');
    const next = encoder.encode([text('x')]);
    assert.ok(next.frames.startsWith(`id: ${head.count}\n`));
  });

  it('refuses content before the start event (an adapter bug)', () => {
    assert.throws(() => new MessagesStreamEncoder(options).encode([text('x')]), /before the start event/);
  });

  it('gives a message at any time, matching what was sent so far', () => {
    const encoder = new MessagesStreamEncoder(options);
    const sent = parseFrames(
      encoder.encode([
        start,
        text('a'),
        call(0, '{"k":', { id: 'c1', name: 'f' }),
        call(1, '{}', { id: 'c2', name: 'g' }),
      ]).frames,
    );
    const message = encoder.message();
    assert.equal(message.stop_reason, null);
    assert.deepEqual(message.usage, {
      input_tokens: 42,
      output_tokens: 1,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      service_tier: 'standard',
    });
    // The waiting call comes last, as it will be written.
    assert.deepEqual(message.content, [
      { type: 'text', text: 'a' },
      { type: 'tool_use', id: 'c1', name: 'f', input: {} },
      { type: 'tool_use', id: 'c2', name: 'g', input: {} },
    ]);
    assert.deepEqual(foldFrames(sent).content, message.content.slice(0, 2));
  });
});

/** The data lines of a recorded stream, with the event name each one says. */
function recorded(name: string): Array<[string, unknown]> {
  return readFileSync(wireFixture(name), 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      const data = JSON.parse(line) as { type: string };
      return [data.type, data];
    });
}

function fold(events: Array<[string, unknown]>): AnthropicMessage {
  const folded = new AnthropicEventFold();
  for (const [name, data] of events) folded.add(name, data);
  return folded.message();
}

describe('AnthropicEventFold', () => {
  it('folds a recorded text-then-tool stream into the plain answer', () => {
    assert.deepEqual(fold(recorded('anthropic-stream-text-then-tool-use.chunks.jsonl')), {
      model: 'claude-sonnet-4-5-20250929',
      id: 'msg_01GE2RKp1VYsPzdFs3sS9z5S',
      type: 'message',
      role: 'assistant',
      content: [
        { type: 'text', text: "I'll update the issue list for you." },
        { type: 'tool_use', id: 'toolu_01QE1WLsSVp5hy5Q3GmGTmjP', name: 'updateIssueList', input: {} },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      usage: {
        input_tokens: 565,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
        output_tokens: 48,
        service_tier: 'standard',
      },
    });
  });

  it('parses a recorded tool call’s streamed JSON into its input', () => {
    const message = fold(recorded('anthropic-stream-tool-use-input-json-delta.chunks.jsonl'));
    assert.deepEqual(message.content, [
      {
        type: 'tool_use',
        id: 'toolu_01KFbKqPYSuAKujiL6mTfzYA',
        name: 'json',
        input: { elements: [{ location: 'San Francisco', temperature: 58, condition: 'sunny' }] },
      },
    ]);
    assert.equal(message.usage.output_tokens, 47);
    assert.equal(message.usage.input_tokens, 849);
  });

  it('folds thinking, citations, server tools, and passes over what it does not know', () => {
    const citation = {
      type: 'web_search_result_location',
      url: 'https://example.com',
      title: 'Ex',
      cited_text: 'fact',
      encrypted_index: 'e1',
    };
    const searchResult = {
      type: 'web_search_tool_result',
      tool_use_id: 'srvtoolu_1',
      content: [{ type: 'web_search_result', url: 'https://example.com', title: 'Ex', encrypted_content: 'x' }],
    };
    const events: Array<[string, unknown]> = [
      [
        'message_start',
        {
          type: 'message_start',
          message: {
            id: 'msg_t',
            type: 'message',
            role: 'assistant',
            model: 'claude-x',
            content: [],
            stop_reason: null,
            stop_sequence: null,
            usage: { input_tokens: 10, output_tokens: 1 },
          },
        },
      ],
      [
        'content_block_start',
        { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } },
      ],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'Let me ' } },
      ],
      ['ping', { type: 'ping' }],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'think.' } },
      ],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'sig==' } },
      ],
      ['content_block_stop', { type: 'content_block_stop', index: 0 }],
      [
        'content_block_start',
        { type: 'content_block_start', index: 1, content_block: { type: 'redacted_thinking', data: 'opaque' } },
      ],
      ['content_block_stop', { type: 'content_block_stop', index: 1 }],
      [
        'content_block_start',
        {
          type: 'content_block_start',
          index: 2,
          content_block: { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} },
        },
      ],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '{"query": "fa' } },
      ],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: 'ct"}' } },
      ],
      ['content_block_stop', { type: 'content_block_stop', index: 2 }],
      ['content_block_start', { type: 'content_block_start', index: 3, content_block: searchResult }],
      ['content_block_stop', { type: 'content_block_stop', index: 3 }],
      ['content_block_start', { type: 'content_block_start', index: 4, content_block: { type: 'text', text: '' } }],
      ['content_block_delta', { type: 'content_block_delta', index: 4, delta: { type: 'citations_delta', citation } }],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 4, delta: { type: 'text_delta', text: 'A fact.' } },
      ],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 4, delta: { type: 'brand_new_delta', whatever: 1 } },
      ],
      ['content_block_stop', { type: 'content_block_stop', index: 4 }],
      [
        'content_block_start',
        { type: 'content_block_start', index: 5, content_block: { type: 'future_block', payload: 1 } },
      ],
      ['content_block_stop', { type: 'content_block_stop', index: 5 }],
      ['future_event', { type: 'future_event' }],
      ['content_block_delta', 'not an object'],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 99, delta: { type: 'text_delta', text: 'no such block' } },
      ],
      [
        'message_delta',
        {
          type: 'message_delta',
          delta: { stop_reason: 'end_turn', stop_sequence: null },
          usage: { output_tokens: 90, server_tool_use: { web_search_requests: 1 }, cache_read_input_tokens: null },
        },
      ],
      ['message_stop', { type: 'message_stop' }],
    ];
    const folded = new AnthropicEventFold();
    for (const [name, data] of events) folded.add(name, data);
    assert.equal(folded.done, true);
    assert.deepEqual(folded.message(), {
      id: 'msg_t',
      type: 'message',
      role: 'assistant',
      model: 'claude-x',
      content: [
        { type: 'thinking', thinking: 'Let me think.', signature: 'sig==' },
        { type: 'redacted_thinking', data: 'opaque' },
        { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: { query: 'fact' } },
        searchResult,
        { type: 'text', text: 'A fact.', citations: [citation] },
        { type: 'future_block', payload: 1 },
      ],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 90, server_tool_use: { web_search_requests: 1 } },
    });
  });

  it('gives the message as it stands mid-stream, and the same whole one after', () => {
    const events = recorded('anthropic-stream-tool-use-input-json-delta.chunks.jsonl');
    const folded = new AnthropicEventFold();
    events.slice(0, 5).forEach(([name, data]) => folded.add(name, data));
    const partial = folded.message();
    assert.equal(partial.stop_reason, null);
    assert.deepEqual(partial.content[0]!.input, {}, 'JSON not yet whole: an empty input');
    events.slice(5).forEach(([name, data]) => folded.add(name, data));
    assert.deepEqual(folded.message().content[0]!.input, {
      elements: [{ location: 'San Francisco', temperature: 58, condition: 'sunny' }],
    });
  });
});

/**
 * The official SDK's stream reader: it reads the encoder's SSE as it reads Anthropic's, and its accumulated message
 * must be the encoder's own.
 */
const sdk = { MessageStream, Stream } as { MessageStream: any; Stream: any };

describe('the Anthropic SDK reading the encoder’s stream', () => {
  async function sdkEvents(sse: string): Promise<unknown[]> {
    const stream = sdk!.Stream.fromSSEResponse(new Response(sse), new AbortController());
    const events: unknown[] = [];
    for await (const event of stream) events.push(event);
    return events;
  }

  async function sdkMessage(sse: string): Promise<unknown> {
    const lines = (await sdkEvents(sse)).map((event) => `${JSON.stringify(event)}\n`).join('');
    const body = new Response(lines).body!;
    const final = await sdk!.MessageStream.fromReadableStream(body).finalMessage();
    // The SDK's structured-output helper adds `parsed_output` (null without a schema): its own field, not the wire's.
    return JSON.parse(JSON.stringify(final), (key, value) => (key === 'parsed_output' ? undefined : value));
  }

  it('accumulates the same message as the encoder folds', async () => {
    const cases: AnswerEvent[][] = [
      [
        start,
        role,
        text('Hel'),
        text('lo'),
        finish('stop'),
        usage({
          prompt_tokens: 100,
          completion_tokens: 7,
          total_tokens: 107,
          prompt_tokens_details: { cached_tokens: 30 },
        }),
      ],
      [
        start,
        text('Let me check.'),
        call(0, '{"q":', { id: 'call_1', name: 'search' }),
        call(1, '', { id: 'call_2', name: 'b' }),
        call(0, '"x"}'),
        call(1, '{"n":2}'),
        finish('tool_calls'),
        usage({}),
      ],
      [start, call(0, '', { id: 'call_1', name: 'noargs' }), text('after'), finish('stop')],
    ];
    for (const events of cases) {
      const { sse, encoder } = run([events]);
      assert.deepEqual(await sdkMessage(sse), encoder.message());
    }
  });

  it('raises the error event as an API error', async () => {
    const encoder = new MessagesStreamEncoder(options);
    const sse =
      encoder.encode([start, text('x')]).frames +
      encoder.fail({ type: 'overloaded_error', message: 'Overloaded' }).frames;
    await assert.rejects(sdkEvents(sse), (error: any) => {
      assert.equal(error.type, 'overloaded_error');
      assert.match(String(error.message), /Overloaded/);
      return true;
    });
  });
});
