import type { Queue } from 'bullmq';
import type { GatewayError } from '../../shared/errors.js';
import type { GatewayContext } from '../http/context.js';
import { traceRelay } from '../http/request-tracing.js';
import { AudioReply } from './audio-reply.js';
import { BodyReply } from './body-reply.js';
import type { HeldReplyDeps } from './held-reply.js';
import type { ExpectedReply } from './reply-hub.js';
import { StreamReply, type StreamDialect, type StreamNotes } from './stream-reply.js';

/** How a held request is answered: its job's body as one response, or its chunks as server-sent events. */
export interface HoldOptions {
  stream: boolean;
  /** Epoch ms after which nobody waits for the answer (the job's deadline). */
  deadline: number;
  /** Content type of the final body (JSON unless said). */
  contentType?: string;
  /** What the request asked for with `x-stream-resume-grace-ms` (already capped); undefined: the configured default. */
  resumeGraceMs?: number;
  /** What a stream's relay tells the request's log. */
  notes: StreamNotes;
  /** Gives back what a job that never ran took (its reservation, its uploads). */
  abandon(): void;
  /** The dialect of a stream's keep-alives and late error (OpenAI's unless said). */
  dialect?: StreamDialect;
  /** Identical requests may follow this stream's log (the response cache's coalescing): it runs on while one does. */
  followed?: boolean;
  /**
   * The frame a stream that began ends with when it fails, where the dialect's own cannot say it (MCP's names the
   * call).
   */
  lateError?: (error: GatewayError) => string;
}

/**
 * Holds the client for its queued job's answer: what the hub routed to the
 * expected reply while the job was being queued comes first, then the reply
 * channel until the answer, the deadline, the client leaving or a forced
 * shutdown. A job the client's leaving removed before it ran is abandoned.
 */
export async function holdForReply(
  ctx: GatewayContext,
  deps: HeldReplyDeps,
  expected: ExpectedReply,
  queue: Queue,
  options: HoldOptions,
): Promise<void> {
  const { log } = ctx.state;
  const reply = !options.stream
    ? new BodyReply(ctx, deps, expected, queue, log, options.contentType)
    : options.dialect === 'audio'
      ? new AudioReply(
          ctx,
          deps,
          expected,
          queue,
          log,
          options.notes,
          options.contentType ?? 'application/octet-stream',
        )
      : new StreamReply(ctx, deps, expected, queue, log, options.notes, options.dialect);
  reply.resumeGraceMs = options.resumeGraceMs;
  reply.followed = options.followed === true;
  if (options.lateError && reply instanceof StreamReply) reply.lateError = options.lateError;
  if (ctx.state.trace) traceRelay(ctx.state.trace, reply);
  expected.attach(reply);
  try {
    await reply.run(options.deadline);
  } finally {
    if (reply.cancelled) void reply.cancelled.then((removed) => removed && options.abandon());
  }
}
