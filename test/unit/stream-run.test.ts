/*
 * The one stream runner (workers/answers/stream-run.ts), with the real encoders and a real reply publisher on a
 * private Redis: what goes out and in what order (frames as they come, the vendor done before the end goes out,
 * the cache's forms stored before it), what the meter says, a stream that fails, one the client does not see,
 * a native relay, and an encoder that writes a streamed JSON array rather than SSE; and a dialect's job answered
 * through it (`answerJob`), streamed or as one body, relayed or translated.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { createRedis } from '../../shared/redis.js';
import { decodeReply, type ReplyMessage } from '../../shared/reply.js';
import { sseFrame } from '../../shared/sse.js';
import { ChatStreamEncoder } from '../../workers/answers/chat-encoder.js';
import type { AnswerEvent } from '../../workers/answers/events.js';
import { MessagesStreamEncoder } from '../../workers/answers/messages-encoder.js';
import {
  answerJob,
  meterRelayed,
  noFrames,
  RelayEncoder,
  relayedAnswer,
  runStream,
  type EncodedFrames,
  type StreamedJob,
  type StreamEncoder,
} from '../../workers/answers/stream-run.js';
import { storedEvents } from '../../workers/answers/answer-forms.js';
import { ReplyPublisher } from '../../workers/reply-publisher.js';
import { Meter } from '../../workers/settlement.js';
import { startPrivateRedis, type PrivateRedis } from '../support/redis-server.js';

/** A real publisher that also notes, in one list with the runner's callbacks, what it was asked to send. */
class NotingPublisher extends ReplyPublisher {
  constructor(
    redis: Redis,
    channel: string,
    private readonly notes: string[],
  ) {
    super(redis, channel, channel, { stream: true });
  }
  override chunk(frames: string, count = 0): void {
    this.notes.push(`chunk ${count}`);
    super.chunk(frames, count);
  }
  override endStream(trailer: string): Promise<void> {
    this.notes.push(`end ${JSON.stringify(trailer)}`);
    return super.endStream(trailer);
  }
}

const usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };
const answer: AnswerEvent[][] = [
  [
    { type: 'start', id: 'chatcmpl-abc', created: 1 },
    { type: 'role', choice: 0 },
  ],
  [{ type: 'text', choice: 0, text: 'Hel' }],
  [{ type: 'text', choice: 0, text: 'lo' }],
  [
    { type: 'finish', choice: 0, reason: 'stop' },
    { type: 'usage', usage },
  ],
];

async function* batches<T>(list: readonly T[], failAfter?: number): AsyncGenerator<T> {
  for (const [i, batch] of list.entries()) {
    if (i === failAfter) throw new Error('vendor went away');
    await sleep(1);
    yield batch;
  }
}

describe('the stream runner', () => {
  let server: PrivateRedis;
  let redis: Redis;
  let subscriber: Redis;
  const heard = new Map<string, ReplyMessage[]>();
  let channels = 0;

  before(async () => {
    server = await startPrivateRedis({ aof: false });
    redis = createRedis(server.url);
    subscriber = new Redis(server.url);
    subscriber.on('message', (channel: string, message: string) =>
      heard.set(channel, [...(heard.get(channel) ?? []), decodeReply(message)!]),
    );
  });

  after(async () => {
    redis?.disconnect();
    subscriber?.disconnect();
    await server?.remove();
  });

  async function publisher(
    notes: string[],
  ): Promise<{ publisher: NotingPublisher; sent: () => Promise<ReplyMessage[]> }> {
    const channel = `stream-run-${++channels}`;
    await subscriber.subscribe(channel);
    const sent = async () => {
      for (let waited = 0; !(heard.get(channel) ?? []).some((m) => m.kind === 'done') && waited < 5000; waited += 10)
        await sleep(10);
      return heard.get(channel) ?? [];
    };
    return { publisher: new NotingPublisher(redis, channel, notes), sent };
  }

  it('publishes each batch as it comes, frees the vendor and stores the cache’s forms before the end goes out', async () => {
    const notes: string[] = [];
    const { publisher: out, sent } = await publisher(notes);
    const options = {
      form: 'chat.completion' as const,
      model: 'm',
      includeUsage: false,
      legacyFunctions: false,
      serviceTier: 'default' as const,
    };
    const encoder = new ChatStreamEncoder(options);
    const expected = new ChatStreamEncoder(options);
    const produced = new Meter();
    const onBatch: string[] = [];
    const ended = await runStream({
      source: batches(answer),
      encoder,
      publisher: out,
      produced,
      visible: true,
      vendorDone: async () => void notes.push('vendor done'),
      trailer: 'data: [DONE]\n\n',
      onBatch: (_batch, encoded) => void onBatch.push(encoded.frames),
      settle: (meter) => {
        meter.servedTier = encoder.serviceTier;
      },
      cache: {
        forms: (frames) => (notes.push(`forms ${JSON.stringify(frames)}`), { body: 'the body' }),
        store: async () => void notes.push('stored'),
      },
    });
    assert.equal(ended, true);
    // One frame a batch (the role's, the texts', the finish's), each published as it came.
    assert.deepEqual(notes, [
      'chunk 1',
      'chunk 1',
      'chunk 1',
      'chunk 1',
      'vendor done',
      'forms ""',
      'stored',
      'end "data: [DONE]\\n\\n"',
    ]);
    const messages = await sent();
    const frames = messages
      .filter((m) => m.kind === 'chunk')
      .map((m) => m.payload)
      .join('');
    assert.equal(
      frames,
      answer.map((batch) => expected.encode(batch).frames).join(''),
      'the encoder’s bytes, as written',
    );
    assert.equal(frames, onBatch.join(''));
    assert.deepEqual(messages.at(-1), {
      kind: 'done',
      jobId: messages[0]!.jobId,
      seq: messages.at(-2)!.seq,
      payload: 'data: [DONE]\n\n',
    });
    assert.deepEqual(produced.usage, usage);
    assert.equal(produced.answerId, 'chatcmpl-abc');
    assert.equal(produced.finishReason, 'stop');
    assert.equal(produced.servedTier, 'default');
    assert.deepEqual(produced.output, ['Hel', 'lo']);
    assert.deepEqual(produced.cacheable, { body: 'the body' });
  });

  it('keeps every frame for the cache, the end frames with them, even when the client sees none', async () => {
    const notes: string[] = [];
    const { publisher: out } = await publisher(notes);
    const encoder = new MessagesStreamEncoder({ model: 'claude-x', inputTokens: 3 });
    const produced = new Meter();
    let kept = '';
    const ended = await runStream({
      source: batches(answer),
      encoder,
      publisher: out,
      produced,
      visible: false,
      vendorDone: async () => void notes.push('vendor done'),
      cache: {
        keepsFrames: true,
        forms: (frames) => {
          kept = frames;
          return { body: JSON.stringify(encoder.message()), events: storedEvents(frames) };
        },
      },
    });
    assert.equal(ended, false, 'the pipeline answers with the body');
    assert.deepEqual(notes, ['vendor done'], 'nothing published, nothing stored by the runner');
    assert.equal(out.started, false);
    const names = storedEvents(kept).map((event) => event.e);
    assert.deepEqual(names, [
      'message_start',
      'ping',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    assert.equal(JSON.parse(produced.cacheable!.body).content[0].text, 'Hello');
  });

  it('says what a stream that failed produced, and neither frees the vendor nor ends the stream', async () => {
    const notes: string[] = [];
    const { publisher: out } = await publisher(notes);
    const encoder = new ChatStreamEncoder({
      form: 'chat.completion',
      model: 'm',
      includeUsage: false,
      legacyFunctions: false,
      serviceTier: 'default',
    });
    const produced = new Meter();
    let settled = false;
    await assert.rejects(
      runStream({
        source: batches(answer, 3),
        encoder,
        publisher: out,
        produced,
        visible: true,
        vendorDone: async () => void notes.push('vendor done'),
        settle: () => void (settled = true),
        cache: { forms: () => ({ body: 'x' }), store: async () => void notes.push('stored') },
      }),
      /vendor went away/,
    );
    assert.deepEqual(notes, ['chunk 1', 'chunk 1', 'chunk 1']);
    assert.equal(settled, true);
    assert.deepEqual(produced.output, ['Hel', 'lo'], 'billed for what it produced');
    assert.equal(produced.usage, undefined);
    assert.equal(produced.cacheable, undefined);
  });

  it('keeps nothing when the forms say the answer is not to be kept', async () => {
    const notes: string[] = [];
    const { publisher: out } = await publisher(notes);
    const produced = new Meter();
    // No usage came: the encoder's end writes the message's end (message_delta, message_stop).
    await runStream({
      source: batches(answer.map((batch) => batch.filter((event) => event.type !== 'usage'))),
      encoder: new MessagesStreamEncoder({ model: 'claude-x', inputTokens: 3 }),
      publisher: out,
      produced,
      visible: true,
      vendorDone: async () => void notes.push('vendor done'),
      cache: { forms: () => undefined, store: async () => void notes.push('stored') },
      alongEnd: async () => void notes.push('along the end'),
    });
    assert.equal(produced.cacheable, undefined);
    assert.ok(!notes.includes('stored'));
    assert.deepEqual(
      notes.slice(-4),
      ['vendor done', 'chunk 2', 'along the end', 'end ""'],
      'the end frames, then the end beside its companion',
    );
  });

  it('relays a native vendor’s events as they came, numbered, folded and kept', async () => {
    const notes: string[] = [];
    const { publisher: out, sent } = await publisher(notes);
    type Native = { name: string; data: string; answers: AnswerEvent[] };
    const events: Native[][] = [
      [
        {
          name: 'message_start',
          data: '{"type":"message_start"}',
          answers: [{ type: 'start', id: 'msg_1', created: 1 }],
        },
      ],
      [
        {
          name: 'content_block_delta',
          data: '{"type":"content_block_delta","text":"Hi"}',
          answers: [{ type: 'text', choice: 0, text: 'Hi' }],
        },
        { name: 'message_delta', data: '{"type":"message_delta"}', answers: [{ type: 'usage', usage }] },
      ],
    ];
    const folded: string[] = [];
    const relay = new RelayEncoder<Native>({
      frame: (event, n) => sseFrame(event.data, event.name, n),
      fold: (event) => void folded.push(event.name),
      body: () => folded.join(','),
      keep: (event) => ({ e: event.name, d: event.data }),
    });
    const produced = new Meter();
    await runStream({
      source: batches(events),
      encoder: relay,
      publisher: out,
      produced,
      visible: true,
      vendorDone: async () => undefined,
      meter: meterRelayed,
    });
    assert.deepEqual(notes, ['chunk 1', 'chunk 2', 'end ""']);
    const frames = (await sent())
      .filter((m) => m.kind === 'chunk')
      .map((m) => m.payload)
      .join('');
    assert.equal(
      frames,
      'id: 0\nevent: message_start\ndata: {"type":"message_start"}\n\n' +
        'id: 1\nevent: content_block_delta\ndata: {"type":"content_block_delta","text":"Hi"}\n\n' +
        'id: 2\nevent: message_delta\ndata: {"type":"message_delta"}\n\n',
    );
    assert.equal(relay.body(), 'message_start,content_block_delta,message_delta');
    assert.deepEqual(
      relay.kept.map((event) => event.e),
      ['message_start', 'content_block_delta', 'message_delta'],
    );
    assert.deepEqual(produced.usage, usage);
    assert.equal(produced.answerId, 'msg_1');
    assert.deepEqual(produced.output, ['Hi']);
  });

  it('drives an encoder that writes a streamed JSON array: its pieces go out in order, its end closes the array', async () => {
    const notes: string[] = [];
    const { publisher: out, sent } = await publisher(notes);
    /** Each text event as one array element: `[` before the first, `,\r\n` between, `]` at the end. */
    class ArrayEncoder implements StreamEncoder {
      usage = undefined;
      private written = 0;
      encode(events: readonly AnswerEvent[]): EncodedFrames {
        let frames = '';
        for (const event of events)
          if (event.type === 'text')
            frames += `${this.written++ === 0 ? '[' : ',\r\n'}${JSON.stringify({ text: event.text })}`;
        return frames === '' ? noFrames : { frames, count: 0 };
      }
      end(): EncodedFrames {
        return { frames: this.written === 0 ? '[]' : ']', count: 0 };
      }
    }
    await runStream({
      source: batches(answer),
      encoder: new ArrayEncoder(),
      publisher: out,
      produced: new Meter(),
      visible: true,
      vendorDone: async () => undefined,
    });
    const body = (await sent())
      .filter((m) => m.kind === 'chunk')
      .map((m) => m.payload)
      .join('');
    assert.deepEqual(JSON.parse(body), [{ text: 'Hel' }, { text: 'lo' }]);
    assert.equal(body, '[{"text":"Hel"},\r\n{"text":"lo"}]');
  });

  /**
   * A job as the worker's pipeline hands it to a dialect's run: its notes list the vendor's end and the cache's store.
   */
  function streamedJob(
    out: NotingPublisher,
    notes: string[],
    clientStreams: boolean,
    keep: boolean,
  ): StreamedJob<unknown> {
    return {
      protocol: 'mock',
      job: {},
      ctx: {} as StreamedJob<unknown>['ctx'],
      publisher: out,
      clientStreams,
      produced: new Meter(),
      vendorDone: async () => void notes.push('vendor done'),
      keep,
      beforeEnd: async () => void notes.push('stored'),
    };
  }

  it('answers a job that streams: its frames, the cache’s forms from them stored before the end, no body', async () => {
    const notes: string[] = [];
    const { publisher: out, sent } = await publisher(notes);
    const run = streamedJob(out, notes, true, true);
    const encoder = new MessagesStreamEncoder({ model: 'claude-x', inputTokens: 3 });
    const body = await answerJob(run, {
      source: batches(answer),
      encoder,
      body: () => JSON.stringify(encoder.message()),
      keepsFrames: true,
      events: storedEvents,
    });
    assert.equal(body, undefined);
    assert.deepEqual(notes.slice(-3), ['vendor done', 'stored', 'end ""']);
    const frames = (await sent())
      .filter((m) => m.kind === 'chunk')
      .map((m) => m.payload)
      .join('');
    assert.deepEqual(run.produced.cacheable?.events, storedEvents(frames));
    assert.equal(JSON.parse(run.produced.cacheable!.body).content[0].text, 'Hello');
  });

  it('answers a job that does not stream with the body its relay folded; its forms wait for the job’s finish', async () => {
    const notes: string[] = [];
    const { publisher: out } = await publisher(notes);
    const run = streamedJob(out, notes, false, true);
    type Native = { data: string; answers: AnswerEvent[] };
    const chunks: Native[][] = [
      [{ data: '{"n":1}', answers: answer[1]! }],
      [{ data: '{"n":2}', answers: [...answer[2]!, ...answer[3]!] }],
    ];
    const folded: string[] = [];
    const relay = new RelayEncoder<Native>({
      fold: (chunk) => void folded.push(chunk.data),
      body: () => `[${folded.join(',')}]`,
      keep: (chunk) => ({ d: chunk.data }),
    });
    const body = await answerJob(run, { source: batches(chunks), ...relayedAnswer(relay) });
    assert.equal(body, '[{"n":1},{"n":2}]');
    // Nothing published, and the forms are not stored here: a plain answer's are stored once it is billed.
    assert.deepEqual(notes, ['vendor done']);
    assert.deepEqual(run.produced.cacheable, {
      body: '[{"n":1},{"n":2}]',
      events: [{ d: '{"n":1}' }, { d: '{"n":2}' }],
    });
    assert.deepEqual(run.produced.usage, usage);
    assert.deepEqual(run.produced.output, ['Hel', 'lo']);
  });

  it('keeps nothing for a job that did not ask the cache', async () => {
    const notes: string[] = [];
    const { publisher: out } = await publisher(notes);
    const run = streamedJob(out, notes, true, false);
    const encoder = new MessagesStreamEncoder({ model: 'claude-x', inputTokens: 3 });
    assert.equal(
      await answerJob(run, {
        source: batches(answer),
        encoder,
        body: () => JSON.stringify(encoder.message()),
        events: () => assert.fail('not kept'),
      }),
      undefined,
    );
    assert.equal(run.produced.cacheable, undefined);
    assert.ok(!notes.includes('stored'));
  });
});
