import type { Queue } from 'bullmq';
import type { KeyedContext } from '../http/context.js';
import { traceRelay } from '../http/request-tracing.js';
import type { JobPlan } from '../requests/build-job.js';
import { BodyReply } from './body-reply.js';
import type { Enqueued, EnqueueDeps } from './enqueue.js';
import type { HeldReplyDeps } from './held-reply.js';
import { StreamReply } from './stream-reply.js';

export type HoldDeps = EnqueueDeps & HeldReplyDeps;

/** How a held request is answered: its job's body as one response, or its chunks as server-sent events. */
export interface HoldOptions {
  stream: boolean;
  /** Content type of the final body (JSON unless said). */
  contentType?: string;
  /** What the request asked for with `x-stream-resume-grace-ms` (already capped); undefined: the configured default. */
  resumeGraceMs?: number;
}

/**
 * Holds the client for its job's answer: the reply is registered with the
 * hub before the job is queued (so no early message is missed), then answered
 * from the reply channel until the answer, the deadline, the client leaving
 * or a forced shutdown. A job that never ran gives back what it took.
 */
export async function hold(ctx: KeyedContext, deps: HoldDeps, job: JobPlan, queue: Queue, enqueueJob: () => Promise<Enqueued>, options: HoldOptions): Promise<void> {
  const { log } = ctx.state;
  const reply = options.stream ? new StreamReply(ctx, deps, job.id, queue, log) : new BodyReply(ctx, deps, job.id, queue, log, options.contentType);
  reply.resumeGraceMs = options.resumeGraceMs;
  deps.hub.register(job.id, reply);
  let enqueued: Enqueued | undefined;
  try {
    enqueued = await enqueueJob();
    reply.jobKey = queue.toKey(job.id);
    if (ctx.state.trace) traceRelay(ctx.state.trace, reply);
    await reply.run(job.deadline);
  } finally {
    deps.hub.unregister(job.id);
    const abandon = enqueued?.abandon;
    if (reply.cancelled && abandon) void reply.cancelled.then((removed) => removed && abandon());
  }
}
