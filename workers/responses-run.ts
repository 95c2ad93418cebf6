import type { Redis } from 'ioredis';
import type { GatewayError } from '../shared/errors.js';
import { responseKey } from '../shared/redis-keys.js';
import { as, luaFiles, redisScript } from '../shared/redis-script.js';
import type { ResponsesJob } from '../shared/responses.js';
import { ResponsesStreamEncoder, type ResponseObject } from './answers/responses-encoder.js';
import type { ReplyPublisher } from './reply-publisher.js';
import type { Meter } from './settlement.js';
import { storedEvents } from './answers/answer-forms.js';
import { runStream } from './answers/stream-run.js';
import type { AnswerEvent } from './answers/events.js';
import type { TierRule } from '../shared/scheduling/index.js';

/**
 * Stores a response object over its record only while the record exists: a
 * response deleted while it ran is not brought back by its end.
 */
const storeScript = redisScript({
  name: 'response_store',
  files: luaFiles(import.meta.url, 'store-response'),
  keys: ['record'],
  args: ['response', 'ttlSeconds'],
  reply: as<number>(),
});

/**
 * One `responses` job: the model's chat adapter streams the answer events,
 * the Responses encoder writes them as the API's events (published when the
 * client streams or the response runs in the background, so it can be
 * followed and resumed), and the final object is stored for retrieval and
 * for `previous_response_id`. The vendor is always streamed (through the one
 * stream runner, workers/answers/stream-run.ts): the events are the same
 * whether the client reads them or only the final object.
 */
export class ResponsesRun {
  private readonly encoder: ResponsesStreamEncoder;
  /** Events go out as they come: the client streams, or the response is background (followed from its log). */
  private readonly visible: boolean;

  /**
   * `tier`: the rule of the tier that serves it (`shared/scheduling/served-tier.ts`), once its channel is known: the
   * object says that tier as `service_tier` (a native vendor's first chunk deciding it), not the one asked.
   * Without it (the job failed before it had a channel) the object says the band the shell asked for.
   */
  constructor(
    private readonly redis: Redis,
    private readonly job: ResponsesJob,
    private readonly publisher: ReplyPublisher,
    clientStreams: boolean,
    private readonly ttlSeconds: number,
    tier?: TierRule,
  ) {
    this.encoder = new ResponsesStreamEncoder(
      job.shell,
      tier ? { serviceTier: tier.before, answeredTier: tier.answered } : {},
    );
    this.visible = clientStreams || job.shell.background;
  }

  /**
   * Runs the answer's events (the model's stream, or the tool loop around it) to their end. Resolves to the body a
   * plain request is answered with, or undefined once a stream has ended. What the answer
   * used, and the tier that served it, go to `produced`; `vendorDone` runs
   * once the vendor is done.
   */
  async run(
    source: AsyncIterable<AnswerEvent[]>,
    produced: Meter,
    vendorDone: () => Promise<unknown>,
    cache?: { keep: () => Promise<void> },
  ): Promise<string | undefined> {
    const { encoder } = this;
    if (this.job.shell.background) await this.store({ ...encoder.current(), status: 'in_progress' });
    // The request log names a response by its own id (set first: the chat stream's id under it is the vendor's).
    produced.answerId = this.job.shell.id;
    let final: ResponseObject | undefined;
    // The object is whole once the encoder ended: built once, for the store, the client and the cache alike.
    const finalObject = () => (final ??= encoder.current());
    const sent = await runStream({
      source,
      encoder,
      publisher: this.publisher,
      produced,
      visible: this.visible,
      vendorDone,
      settle: (meter) => {
        meter.servedTier = encoder.serviceTier;
      },
      // A request that opted into the response cache keeps the events it was written as, whether its client reads
      // them or not; only an answer that completed (or stopped at its limit) is kept.
      cache: cache && {
        keepsFrames: true,
        forms: (frames) => {
          const response = finalObject();
          if (response.status !== 'completed' && response.status !== 'incomplete') return undefined;
          return { body: JSON.stringify(response), events: storedEvents(frames), trailer: '' };
        },
        store: cache.keep,
      },
      alongEnd: () => this.store(finalObject()),
    });
    if (sent) return undefined;
    const response = finalObject();
    const [, kept] = await Promise.all([this.store(response), this.publisher.done(JSON.stringify(response))]);
    return kept.body ?? '';
  }

  /**
   * The job failed for good. A stream that has begun (or a background one,
   * whose client already has its answer) ends with the `error` and
   * `response.failed` events; the stored response says failed. Resolves true
   * when the client has been answered that way, false when it still needs the
   * HTTP error.
   */
  async fail(error: GatewayError): Promise<boolean> {
    const reason = {
      code: error.code ?? (error.status >= 500 ? 'server_error' : 'invalid_request'),
      message: error.message,
    };
    const inStream = this.visible && (this.publisher.started || this.job.shell.background);
    const { frames, count } = this.encoder.fail(reason);
    const stored = this.store(this.encoder.current());
    if (!inStream) {
      await stored;
      return false;
    }
    this.publisher.chunk(frames, count);
    await Promise.all([stored, this.publisher.endStream('')]);
    return true;
  }

  /**
   * Cancelled (`POST /v1/responses/{id}/cancel`, or its client left): the stream says so, and the stored response keeps
   * what was produced.
   */
  async cancel(): Promise<void> {
    const { frames, count } = this.encoder.cancel();
    const stored = this.store(this.encoder.current());
    if (this.visible) {
      this.publisher.chunk(frames, count);
      await Promise.all([stored, this.publisher.endStream('')]);
    } else await stored;
  }

  private async store(response: ResponseObject): Promise<void> {
    if (!this.job.shell.store) return;
    await storeScript(this.redis, {
      record: responseKey(this.job.shell.id),
      response: JSON.stringify(response),
      ttlSeconds: this.ttlSeconds,
    });
  }
}
