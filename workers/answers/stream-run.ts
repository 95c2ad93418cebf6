import type { CacheableAnswer, StoredEvent } from '../../shared/cache/index.js';
import type { Protocol } from '../../shared/vendor-definitions.js';
import type { ReplyPublisher } from '../reply-publisher.js';
import type { Meter } from '../settlement.js';
import type { CallContext } from '../vendors/types.js';
import type { AnswerEvent, Usage } from './events.js';

/*
 * The one stream runner: every streamed answer, in every dialect, runs through it. A pipeline names what differs
 * (the vendor's batches, the encoder that writes them in the client's dialect, what the answer is kept as for the
 * cache) and the runner does the rest the same way for all of them:
 *
 *   for each batch the vendor sent (the events of one upstream read):
 *     encode it → publish its frames when the client sees them → keep them for the cache → meter it;
 *   then, whether the stream ended well or not: the meter's usage (and the pipeline's facts: answer id, tier);
 *   then the vendor is done (its slot freed, billing begun) before the client hears the end;
 *   then the encoder's end frames, the answer's forms for the cache, stored before the end goes out;
 *   then the end frames and the stream's end (with its trailer) go out.
 *
 * A chat adapter's stream is a batch of answer events (workers/answers/events.ts) and its encoder writes them as
 * the client's events (chat chunks, Responses events, Anthropic's events). A native relay's batches are the
 * vendor's own events, already written in the client's dialect, and its encoder writes them as they came. An
 * encoder may write SSE frames (`shared/sse.ts`) or the pieces of a streamed JSON array: the runner publishes
 * whatever text it gives, in order, and counts the numbered frames it says it holds (a resume counts those).
 *
 * A dialect's job (a chat or legacy completion, a Messages or a Gemini request) reaches its run as a
 * `StreamedJob`, the same for all of them; `answerJob` runs a Messages or Gemini answer, relayed or translated,
 * and answers a client that reads no stream with the one body its encoder folded.
 */

/** What an encoder wrote for a batch: the text, and how many numbered frames it holds (a resume counts those). */
export interface EncodedFrames {
  frames: string;
  count: number;
}

/** No frames. */
export const noFrames: EncodedFrames = Object.freeze({ frames: '', count: 0 });

/** A dialect's writer of one stream: what the runner drives. */
export interface StreamEncoder<Batch = readonly AnswerEvent[]> {
  /** What one batch from the vendor is written as ('' when it says nothing the client gets). */
  encode(batch: Batch): EncodedFrames;
  /** What closes a stream that ended well (`noFrames` where the stream's trailer closes it). */
  end(): EncodedFrames;
  /** The vendor's usage (OpenAI-shaped, for billing), once it said it. */
  readonly usage: Usage | undefined;
}

/** What a stream is written from and as: the vendor's batches, the dialect's encoder, and what ends it. */
interface EncodedStream<Batch> {
  /** The vendor's batches, each the events of one upstream read. */
  source: AsyncIterable<Batch>;
  encoder: StreamEncoder<Batch>;
  /**
   * What ends the stream after its end frames: `data: [DONE]` on OpenAI's chat streams, `]` on Gemini's array; nothing
   * on the others.
   */
  trailer?: string | undefined;
  /**
   * The answer's facts beyond its usage (its id as the client knows it, the tier that served it): set once the source
   * ended, well or not.
   */
  settle?: (produced: Meter) => void;
  /**
   * What the meter counts of a batch. A batch of answer events needs none (they are metered as they are); any
   * other (a native relay's own events) must say it (`meterRelayed`): `runStream` and `answerJob` take such a
   * stream only with one.
   */
  meter?: ((batch: Batch, produced: Meter) => void) | undefined;
}

/** One stream: what the pipeline supplies. */
export interface StreamRun<Batch> extends EncodedStream<Batch> {
  publisher: ReplyPublisher;
  /** Takes what the answer used, for billing. */
  produced: Meter;
  /**
   * The client sees the frames as they come (it streams, or follows a background response's log); else it is answered
   * with one body.
   */
  visible: boolean;
  /** The vendor's part is over: its slot is freed (and billing begun), before the client hears the end. */
  vendorDone: () => Promise<unknown>;
  /** Each batch once written, before it is published: what the pipeline keeps of it, a resume alias. */
  onBatch?: (batch: Batch, encoded: EncodedFrames) => void;
  /**
   * The answer kept for the response cache. `forms` gets every frame the stream was written as, its end included
   * (when `keepsFrames`; else ''), and says the answer's forms, or undefined (not kept: a response that failed);
   * `store` stores them before the end goes out, so the client's next identical request finds them.
   */
  cache?:
    | { keepsFrames?: boolean; forms: (frames: string) => CacheableAnswer | undefined; store?: () => Promise<void> }
    | undefined;
  /** Runs beside the stream's end going out (the Responses API's stored object). */
  alongEnd?: () => Promise<unknown>;
}

/** A meter of batches that are not answer events: a stream of them is run only with one. */
interface Metered<Batch> {
  meter: (batch: Batch, produced: Meter) => void;
}

/** What a stream produced, kept in case no usage comes (a stream cut short is billed for what it produced). */
export function meterEvents(events: readonly AnswerEvent[], produced: Meter): void {
  for (const event of events) {
    if (event.type === 'text' || event.type === 'reasoning') {
      produced.output.push(event.text);
      produced.outputStarted();
    } else if (event.type === 'tool-call') {
      produced.output.push(event.arguments);
      produced.outputStarted();
    } else if (event.type === 'start') produced.answerId ??= event.id;
    else if (event.type === 'finish') produced.finishReason ??= event.reason;
  }
}

/** What a native relay's batch produced: each vendor event's answer events, metered. */
export function meterRelayed(batch: readonly RelayedEvent[], produced: Meter): void {
  for (const event of batch) meterEvents(event.answers, produced);
}

/** A vendor's own event, already in the client's dialect, with the answer events it carries (for billing). */
export interface RelayedEvent {
  answers: readonly AnswerEvent[];
}

/** What a native relay does with each vendor event; each part is absent when nobody needs it. */
export interface RelayParts<Event extends RelayedEvent> {
  /** The event as the client's frame (`n`: the frames written before it); absent when the client sees no frames. */
  frame?: ((event: Event, n: number) => string) | undefined;
  /** Folds the event into the plain answer (for a client that asked for no stream, and for the cache). */
  fold?: ((event: Event) => void) | undefined;
  /** The plain answer the events folded into, once they ended. */
  body?: (() => string) | undefined;
  /** The event as the cache replays it; absent when the answer is not kept. */
  keep?: ((event: Event) => StoredEvent) | undefined;
}

/**
 * The encoder of a native relay: the vendor's events written as they came (the vendor speaks the client's
 * dialect), folded into the plain answer where one is wanted, kept as they came for the cache. Its usage is the
 * last the events carried. The vendor's own last event ends the stream: it writes no end of its own.
 */
export class RelayEncoder<Event extends RelayedEvent> implements StreamEncoder<readonly Event[]> {
  usage: Usage | undefined;
  /** The events as the cache replays them (empty unless kept). */
  readonly kept: StoredEvent[] = [];
  private written = 0;
  private answer: string | undefined;

  constructor(private readonly parts: RelayParts<Event>) {}

  encode(batch: readonly Event[]): EncodedFrames {
    const { frame, fold, keep } = this.parts;
    let frames = '';
    const first = this.written;
    for (const event of batch) {
      for (const answer of event.answers) if (answer.type === 'usage') this.usage = answer.usage;
      fold?.(event);
      if (keep) this.kept.push(keep(event));
      if (frame) frames += frame(event, this.written++);
    }
    return frames === '' ? noFrames : { frames, count: this.written - first };
  }

  end(): EncodedFrames {
    return noFrames;
  }

  /** The plain answer ('' where nothing folded it: a stream nobody keeps, whose body is never read); written once. */
  body(): string {
    this.answer ??= this.parts.body?.() ?? '';
    return this.answer;
  }
}

/**
 * Runs a stream to its end. Resolves true once its end went out, false when the client sees no frames: the
 * pipeline then answers it with one body (the encoder's, complete by then).
 */
export function runStream(run: StreamRun<readonly AnswerEvent[]>): Promise<boolean>;
export function runStream<Batch>(run: StreamRun<Batch> & Metered<Batch>): Promise<boolean>;
export function runStream<Batch>(run: StreamRun<Batch>): Promise<boolean> {
  return drive(run);
}

/**
 * The runner itself; `runStream` and `answerJob` are its typed doors (batches that are not answer events come with
 * their meter).
 */
async function drive<Batch>(run: StreamRun<Batch>): Promise<boolean> {
  const { encoder, publisher, produced, visible, cache } = run;
  const meter = (run.meter ?? meterEvents) as (batch: Batch, produced: Meter) => void;
  const keepsFrames = cache?.keepsFrames === true;
  let kept = '';
  try {
    for await (const batch of run.source) {
      const encoded = encoder.encode(batch);
      run.onBatch?.(batch, encoded);
      if (visible && encoded.frames !== '') publisher.chunk(encoded.frames, encoded.count);
      if (keepsFrames) kept += encoded.frames;
      meter(batch, produced);
    }
  } finally {
    produced.usage = encoder.usage;
    run.settle?.(produced);
  }
  // The vendor is done: free its slot before the client hears the end, so a client that sends its next request at
  // once finds the slot free.
  await run.vendorDone();
  const end = encoder.end();
  if (cache) {
    const forms = cache.forms(keepsFrames ? kept + end.frames : '');
    if (forms) {
      produced.cacheable = forms;
      await cache.store?.();
    }
  }
  if (!visible) return false;
  if (end.frames !== '') publisher.chunk(end.frames, end.count);
  await Promise.all([run.alongEnd?.(), publisher.endStream(run.trailer ?? '')]);
  return true;
}

/**
 * A dialect's job as the worker's pipeline gives it to the run that answers it: the job, the vendor's protocol and
 * call context, the reply channel, whether the client reads the answer as it comes, the meter, and the cache.
 */
export interface StreamedJob<Job> {
  protocol: Protocol;
  job: Job;
  ctx: CallContext;
  publisher: ReplyPublisher;
  /** The client reads the answer as it comes; else it is answered with one body. */
  clientStreams: boolean;
  /** Takes what the answer used, for billing. */
  produced: Meter;
  /** The vendor's part is over: its slot is freed (and a stream's billing begun). */
  vendorDone: () => Promise<unknown>;
  /** Keep the answer's forms for the response cache (`produced.cacheable`) once it ended well. */
  keep?: boolean | undefined;
  /** Stores them before a stream's end goes out, so the client's next identical request finds them. */
  beforeEnd?: (() => Promise<void>) | undefined;
}

/** How one job's answer is written: what differs between dialects, and between a native relay and a translation. */
export interface JobAnswer<Batch> extends EncodedStream<Batch> {
  /** The plain answer, once the stream ended: for a client that reads no stream, and for the cache. */
  body: () => string;
  /** The answer's events as the cache replays them; `frames`: every frame it was written as, when `keepsFrames`. */
  events: (frames: string) => StoredEvent[];
  keepsFrames?: boolean;
}

/**
 * A native relay's part of a job's answer: the relay as its encoder and meter, the body it folded, the events it kept.
 */
export function relayedAnswer<Event extends RelayedEvent>(
  relay: RelayEncoder<Event>,
): Pick<JobAnswer<readonly Event[]>, 'encoder' | 'body' | 'events'> & Metered<readonly Event[]> {
  return { encoder: relay, meter: meterRelayed, body: () => relay.body(), events: () => relay.kept };
}

/**
 * Runs a job's answer to its end. Resolves to the body for a client that reads no stream, undefined once a stream
 * ended. A plain answer's forms are stored by the job's finish, once it is billed; a stream's before its end goes out.
 */
export function answerJob(
  run: StreamedJob<unknown>,
  answer: JobAnswer<readonly AnswerEvent[]>,
): Promise<string | undefined>;
export function answerJob<Batch>(
  run: StreamedJob<unknown>,
  answer: JobAnswer<Batch> & Metered<Batch>,
): Promise<string | undefined>;
export async function answerJob<Batch>(
  run: StreamedJob<unknown>,
  answer: JobAnswer<Batch>,
): Promise<string | undefined> {
  const { body, events, keepsFrames } = answer;
  const sent = await drive<Batch>({
    ...answer,
    publisher: run.publisher,
    produced: run.produced,
    visible: run.clientStreams,
    vendorDone: run.vendorDone,
    cache: run.keep
      ? {
          keepsFrames,
          forms: (frames) => ({ body: body(), events: events(frames) }),
          store: run.clientStreams ? run.beforeEnd : undefined,
        }
      : undefined,
  });
  return sent ? undefined : body();
}
