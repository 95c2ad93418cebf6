import type { GatewayContext } from '../http/context.js';
import type { Queue } from 'bullmq';
import type { Logger } from '../../shared/logger.js';
import { GatewayError, type WireError } from '../../shared/errors.js';
import type { ReplyMessage } from '../../shared/reply.js';
import { HeldReply, type HeldReplyDeps } from './held-reply.js';
import type { ExpectedReply } from './reply-hub.js';

/**
 * A request answered with its job's final body as one HTTP response (inline in the reply, or read from Redis by
 * reference).
 */
export class BodyReply extends HeldReply {
  readonly stream = false;

  constructor(
    ctx: GatewayContext,
    deps: HeldReplyDeps,
    expected: ExpectedReply,
    queue: Queue,
    log: Logger,
    private readonly contentType = 'application/json',
  ) {
    super(ctx, deps, expected, queue, log);
  }

  deliver(message: ReplyMessage): void {
    if (this.ended) return;
    if (message.kind === 'done') this.respond(message.payload);
    else if (message.kind === 'done-ref') {
      this.deps.redis.getdel(message.payload).then(
        (body) =>
          body === null
            ? this.failWith(new GatewayError(502, 'The result expired before it was read.', { code: 'server_error' }))
            : this.respond(body),
        (error) => this.end(error),
      );
    } else if (message.kind === 'error') this.failWith(GatewayError.fromWire(JSON.parse(message.payload) as WireError));
  }

  private respond(body: string): void {
    if (this.ended) return;
    this.ctx.type = this.contentType;
    this.ctx.body = body;
    this.end();
  }

  protected failWith(error: GatewayError): void {
    this.end(error);
  }
}
