import assert from 'node:assert/strict';

/** One SSE frame of a Messages stream, as sent. */
export interface MessagesFrame {
  event: string | undefined;
  data: Record<string, any>;
}

export function parseMessagesFrames(text: string): MessagesFrame[] {
  return text
    .split('\n\n')
    .filter((raw) => raw.trim() !== '' && !raw.split('\n').every((line) => line.startsWith(':')))
    .map((raw) => {
      const lines = raw.split('\n');
      const event = lines.find((line) => line.startsWith('event: '))?.slice('event: '.length);
      const data = lines.find((line) => line.startsWith('data: '))!.slice('data: '.length);
      return { event, data: JSON.parse(data) as Record<string, any> };
    });
}

const usageCounts = ['input_tokens', 'output_tokens'] as const;

/**
 * Checks a Messages stream event by event against Anthropic's documented sequence: every frame named by its
 * `event:` line as its data's type; `message_start` first (a `msg_` id, no stop reason, input usage already
 * there); blocks opened, added to and closed one at a time, in index order, each delta of its block's kind;
 * `message_delta` with a stop reason and cumulative usage; `message_stop` last; `ping` anywhere; or an `error`
 * event ending it. Returns the frames without pings.
 */
export function assertMessagesStream(
  frames: readonly MessagesFrame[],
  options: { endsWithError?: boolean } = {},
): MessagesFrame[] {
  const events = frames.filter((frame) => frame.event !== 'ping');
  for (const frame of frames)
    assert.equal(frame.event, frame.data.type, `the event: line names the data type (${frame.event})`);
  assert.ok(events.length > 0, 'the stream has events');
  const start = events[0]!;
  assert.equal(start.event, 'message_start');
  const message = start.data.message;
  assert.match(message.id, /^msg_/);
  assert.equal(message.type, 'message');
  assert.equal(message.role, 'assistant');
  assert.deepEqual(message.content, []);
  assert.equal(message.stop_reason, null);
  for (const count of usageCounts) assert.equal(typeof message.usage[count], 'number', `message_start usage.${count}`);
  let open: { index: number; type: string } | undefined;
  let nextIndex = 0;
  let sawDelta = false;
  let ended = false;
  for (const [at, frame] of events.entries()) {
    if (at === 0) continue;
    assert.ok(!ended, `nothing after message_stop (${frame.event})`);
    const data = frame.data;
    switch (frame.event) {
      case 'content_block_start':
        assert.equal(open, undefined, 'a block starts only once the previous one stopped');
        assert.equal(data.index, nextIndex, 'blocks are numbered in order from 0');
        assert.ok(
          ['text', 'tool_use', 'thinking', 'redacted_thinking', 'server_tool_use', 'web_search_tool_result'].includes(
            data.content_block.type,
          ),
          data.content_block.type,
        );
        if (data.content_block.type === 'tool_use') {
          assert.equal(typeof data.content_block.id, 'string');
          assert.equal(typeof data.content_block.name, 'string');
          assert.deepEqual(data.content_block.input, {});
        }
        open = { index: data.index, type: data.content_block.type };
        nextIndex += 1;
        break;
      case 'content_block_delta': {
        assert.ok(open && open.index === data.index, 'a delta belongs to the open block');
        const kinds: Record<string, string[]> = {
          text: ['text_delta', 'citations_delta'],
          tool_use: ['input_json_delta'],
          thinking: ['thinking_delta', 'signature_delta'],
          server_tool_use: ['input_json_delta'],
        };
        assert.ok((kinds[open.type] ?? []).includes(data.delta.type), `${data.delta.type} in a ${open.type} block`);
        break;
      }
      case 'content_block_stop':
        assert.ok(open && open.index === data.index, 'the open block stops');
        open = undefined;
        break;
      case 'message_delta':
        assert.equal(open, undefined, 'every block stopped before message_delta');
        assert.ok(
          [
            'end_turn',
            'max_tokens',
            'stop_sequence',
            'tool_use',
            'pause_turn',
            'refusal',
            'model_context_window_exceeded',
          ].includes(data.delta.stop_reason),
          String(data.delta.stop_reason),
        );
        assert.equal(typeof data.usage.output_tokens, 'number');
        sawDelta = true;
        break;
      case 'message_stop':
        assert.ok(sawDelta, 'message_delta came before message_stop');
        ended = true;
        break;
      case 'error':
        assert.ok(options.endsWithError, `an unexpected error event: ${JSON.stringify(data)}`);
        assert.equal(at, events.length - 1, 'an error event ends the stream');
        assert.equal(typeof data.error.type, 'string');
        assert.equal(typeof data.error.message, 'string');
        return events;
      default:
        assert.fail(`unknown event ${frame.event}`);
    }
  }
  assert.ok(!options.endsWithError, 'the stream was to end with an error event');
  assert.ok(ended, 'the stream ends with message_stop');
  return events;
}
