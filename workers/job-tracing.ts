import type { Job } from 'bullmq';
import { context, SpanKind, trace, type Span } from '@opentelemetry/api';
import { endpoints } from '../shared/endpoints.js';
import type { GatewayError } from '../shared/errors.js';
import { isFirstRun, type GatewayJobData, type GatewayJobResult } from '../shared/jobs.js';
import { contextOf, getTracer, markFailed, tracingEnabled } from '../shared/tracing.js';
import type { ResolvedRoute } from './channel-router.js';
import { ClientGoneError } from './client-gone-error.js';
import { queueSignal } from './failure-policy.js';
import type { BilledUsage } from './settlement.js';

/**
 * The worker's spans of one request (only when tracing is on, see
 * shared/tracing.ts), children of the api's server span through the job's
 * `trace` carrier:
 * - `queue wait`, from the enqueue (the job's timestamp, taken by the api) to
 *   the start of its first run in a worker; recorded for the first run only
 *   (a retry's wait is the gap between two `process` spans);
 * - `process <queue>`, one per run of the job (each BullMQ attempt, and each
 *   resumption after a rate-limit delay), with its outcome;
 * - `vendor attempt`, inside it: the call to one vendor channel, from the
 *   moment its vendor slot is held until the vendor's part is done.
 */

type Processor = (job: Job<GatewayJobData, GatewayJobResult>, token?: string) => Promise<GatewayJobResult>;

/** The processor with spans around each run; the processor itself when tracing is off. */
export function traceJobs(processor: Processor): Processor {
  if (!tracingEnabled()) return processor;
  const tracer = getTracer();
  return async (job, token) => {
    const data = job.data;
    const queue = endpoints[data.endpoint]?.queue ?? job.queueName;
    const parent = contextOf(data.trace);
    // The wall clock, as the job's timestamp (the api's Date.now()) and the SDK's span starts are: a clock of
    // timeOrigin + performance.now() drifts from it by a millisecond or more over a process's life, which could put
    // the wait's end before its start (the SDK then ends it at its start, apart from the run's).
    const startTime = Date.now();
    if (isFirstRun(job)) {
      const waited = tracer.startSpan('queue wait', { startTime: job.timestamp }, parent);
      if (waited.isRecording())
        waited.setAttributes({ 'switchyard.queue': queue, 'switchyard.request_id': data.requestId });
      // Until this run starts (BullMQ's fetch of the job included): the wait and the run meet at one instant.
      waited.end(startTime);
    }
    const span = tracer.startSpan(`process ${queue}`, { kind: SpanKind.CONSUMER, startTime }, parent);
    if (span.isRecording()) {
      span.setAttributes({
        'switchyard.request_id': data.requestId,
        'switchyard.queue': queue,
        'switchyard.endpoint': data.endpoint,
        'switchyard.model': data.model,
        'switchyard.stream': data.stream,
        'switchyard.mode': data.async ? 'async' : data.background ? 'background' : 'held',
        'switchyard.attempt': job.attemptsMade + 1,
        'switchyard.run': job.attemptsStarted ?? 1,
      });
    }
    try {
      const result = await context.with(trace.setSpan(parent, span), () => processor(job, token));
      span.setAttribute('switchyard.outcome', 'completed');
      return result;
    } catch (error) {
      const outcome = outcomeOf(error);
      span.setAttribute('switchyard.outcome', outcome);
      if (outcome !== 'delayed' && outcome !== 'cancelled') markFailed(span, error);
      throw error;
    } finally {
      span.end();
    }
  };
}

/**
 * What a run's error leads to: `delayed` (rate limited: it runs again later, no
 * attempt spent), `cancelled` (the client left), `failed` (answered with an
 * error for good), `retry` (BullMQ runs it again after a backoff).
 */
function outcomeOf(error: unknown): 'delayed' | 'cancelled' | 'failed' | 'retry' {
  if (error instanceof ClientGoneError) return 'cancelled';
  const signal = queueSignal(error);
  return signal === 'put-back' ? 'delayed' : signal ? 'failed' : 'retry';
}

/** One call to a vendor channel; undefined (and nothing to call) when tracing is off. */
export interface VendorAttempt {
  /** The vendor's part is over (its slot is freed): the span ends at this moment, whatever comes after. */
  vendorDone(): void;
  /** The attempt failed with this error (as the failure policy reads it). */
  failed(error: GatewayError): void;
  /**
   * The outcome is known: the span ends (at `vendorDone`'s moment when that came first), with what the call was billed
   * for.
   */
  end(billed?: BilledUsage): void;
}

export function startVendorAttempt(
  job: Job<GatewayJobData>,
  route: ResolvedRoute,
  signal: AbortSignal,
): VendorAttempt | undefined {
  if (!tracingEnabled()) return undefined;
  return new TracedAttempt(getTracer().startSpan('vendor attempt', { kind: SpanKind.CLIENT }), job, route, signal);
}

class TracedAttempt implements VendorAttempt {
  private doneAt: number | undefined;
  private failure = false;
  private ended = false;

  constructor(
    private readonly span: Span,
    job: Job<GatewayJobData>,
    route: ResolvedRoute,
    private readonly signal: AbortSignal,
  ) {
    if (!span.isRecording()) return;
    const { channel } = route;
    span.setAttributes({
      'switchyard.vendor': channel.vendor,
      'switchyard.channel.id': channel.id,
      'switchyard.protocol': route.protocol,
      'switchyard.model': route.model.id,
      'switchyard.model.requested': job.data.model,
      'switchyard.fallback': route.model.id !== job.data.model,
      'switchyard.attempt': job.attemptsMade + 1,
      'switchyard.endpoint': job.data.endpoint,
      'gen_ai.provider.name': channel.vendor,
      'gen_ai.request.model': route.upstreamModel,
    });
    const host = hostOf(channel.baseUrl);
    if (host) span.setAttribute('server.address', host);
  }

  vendorDone(): void {
    this.doneAt ??= Date.now();
  }

  failed(error: GatewayError): void {
    if (this.ended) return;
    this.failure = true;
    if (this.span.isRecording()) {
      this.span.setAttributes({
        'switchyard.outcome': 'error',
        'switchyard.error.status': error.status,
        'switchyard.error.retryable': error.retryable,
      });
    }
    markFailed(this.span, error);
  }

  end(billed?: BilledUsage): void {
    if (this.ended) return;
    this.ended = true;
    if (!this.failure) this.span.setAttribute('switchyard.outcome', this.signal.aborted ? 'cancelled' : 'ok');
    // The GenAI conventions' usage (input counts every prompt token, cached ones included), with what it cost.
    if (billed && this.span.isRecording()) {
      this.span.setAttributes({
        'gen_ai.usage.input_tokens': billed.input,
        'gen_ai.usage.output_tokens': billed.output,
        'gen_ai.usage.cache_read.input_tokens': billed.cached,
        ...(billed.cacheWrite !== undefined ? { 'gen_ai.usage.cache_creation.input_tokens': billed.cacheWrite } : {}),
        'switchyard.cost_micros': billed.costMicros,
        ...(billed.promptCacheSavedMicros !== undefined
          ? { 'switchyard.prompt_cache.saved_micros': billed.promptCacheSavedMicros }
          : {}),
      });
    }
    this.span.end(this.doneAt);
  }
}

function hostOf(baseUrl: string): string | undefined {
  if (!baseUrl) return undefined;
  try {
    return new URL(baseUrl).host;
  } catch {
    return undefined;
  }
}
