import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Koa from 'koa';
import Router from '@koa/router';
import { DelayedError, type Job } from 'bullmq';
import { context, propagation, ProxyTracerProvider, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { loadConfig } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import type { GatewayJobData, GatewayJobResult } from '../../shared/jobs.js';
import { carrierOf, contextOf, startTracing, tracesUrl, tracingEnabled, type Tracing } from '../../shared/tracing.js';
import {
  jobTraceCarrier,
  traceQueued,
  traceRelay,
  traceRequests,
  type RequestTrace,
  type TracedReply,
} from '../../api/http/request-tracing.js';
import { queuedEndpoint, routeTemplate } from '../../api/requests/endpoint-paths.js';
import { startVendorAttempt, traceJobs } from '../../workers/job-tracing.js';
import type { ResolvedRoute } from '../../workers/channel-router.js';
import { CallObserver } from '../../workers/call-observer.js';
import { ClientGoneError } from '../../workers/client-gone-error.js';
import { AnsweredFailure } from '../../workers/answered-failure.js';
import { AsyncJobFailure } from '../../shared/async-job-failure.js';

const clientTraceId = '0af7651916cd43dd8448eb211c80319c';
const clientSpanId = 'b7ad6b7169203331';
const traceparent = (flags = '01') => `00-${clientTraceId}-${clientSpanId}-${flags}`;

const route = {
  protocol: 'openai',
  channel: {
    vendor: 'openai',
    baseUrl: 'https://user:pw@api.example.com/v1',
    apiKey: 'sk-secret-channel-key',
    id: 'openai:0123456789ab',
    weight: 1,
  },
  upstreamModel: 'gpt-4o-mini-2024-07-18',
  model: { id: 'gpt-4o-mini' },
} as unknown as ResolvedRoute;

/** A job as BullMQ hands it to a processor, with what the tracing reads. */
function fakeJob(
  data: Partial<GatewayJobData>,
  run: { attemptsMade?: number; attemptsStarted?: number } = {},
): Job<GatewayJobData, GatewayJobResult> {
  return {
    data: {
      requestId: 'req_1',
      replyTo: 'sy:reply:api-1',
      keyId: 'key_1',
      endpoint: 'chat.completions',
      model: 'gpt-4o-mini',
      stream: false,
      deadline: Date.now() + 60_000,
      ...data,
    },
    queueName: '{chat}',
    timestamp: Date.now() - 25,
    attemptsMade: run.attemptsMade ?? 0,
    attemptsStarted: run.attemptsStarted ?? 1,
  } as unknown as Job<GatewayJobData, GatewayJobResult>;
}

const idOf = (span: ReadableSpan) => span.spanContext().spanId;
const byName = (spans: ReadableSpan[], name: string) => spans.filter((span) => span.name === name);

describe('tracing off (no OTEL_EXPORTER_OTLP_ENDPOINT)', () => {
  it('registers nothing: the api stays the no-op one, and no hook is installed', async () => {
    const tracing = await startTracing(loadConfig({}).tracing, 'api');
    assert.equal(tracing, undefined);
    assert.equal(tracingEnabled(), false);
    const provider = trace.getTracerProvider() as ProxyTracerProvider;
    assert.ok(provider instanceof ProxyTracerProvider);
    assert.equal(provider.getDelegateTracer('switchyard'), undefined, 'no tracer provider is registered');
    assert.equal(trace.getTracer('switchyard').startSpan('x').isRecording(), false);

    // The job carries no trace context, the processor is not wrapped, no vendor attempt is traced.
    const parent = propagation.extract(context.active(), { traceparent: traceparent() });
    assert.equal(carrierOf(parent), undefined);
    const processor = async () => ({});
    assert.equal(traceJobs(processor), processor);
    assert.equal(startVendorAttempt(fakeJob({}), route, new AbortController().signal), undefined);
  });
});

describe('tracing on, in process (InMemorySpanExporter)', () => {
  const exporter = new InMemorySpanExporter();
  let tracing: Tracing;
  let server: Server;
  let url: string;

  before(async () => {
    const config = loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318/' });
    assert.equal(tracesUrl(config.tracing.endpoint!), 'http://127.0.0.1:4318/v1/traces');
    tracing = (await startTracing(config.tracing, 'api', { exporter }))!;
    assert.ok(tracingEnabled());

    // A gateway in miniature: the server span first, a router, and a queued endpoint that admits, queues and relays.
    const app = new Koa();
    app.use(
      traceRequests({ routeOf: routeTemplate, queues: (method, path) => queuedEndpoint(method, path) !== undefined }),
    );
    app.use(async (ctx, next) => {
      ctx.state.requestId = 'req_test';
      await next();
    });
    app.use(async (ctx, next) => {
      if (ctx.path !== '/v1/chat/completions') return next();
      // As the endpoint dispatch does: the row's path is the route the request took.
      ctx.state.route = '/v1/chat/completions';
      const state = ctx.state.trace as RequestTrace;
      if (ctx.get('x-refuse')) {
        ctx.status = 429;
        ctx.body = { error: { message: 'slow down', type: 'requests', param: null, code: 'rate_limit_exceeded' } };
        return;
      }
      const data = fakeJob({}).data;
      data.trace = jobTraceCarrier(state);
      traceQueued(state, data, 'chat');
      const reply: TracedReply = { stream: false, deliver: () => undefined };
      traceRelay(state, reply);
      reply.deliver({ kind: 'done', jobId: 'req_test', seq: 0, payload: '{}' });
      ctx.body = { carrier: data.trace };
    });
    const router = new Router();
    router.get('/v1/models/:id', (ctx) => {
      ctx.body = { id: ctx.params.id };
    });
    app.use(router.routes());
    server = createServer(app.callback()).listen(0, '127.0.0.1');
    await once(server, 'listening');
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(async () => {
    server?.close();
    await tracing?.shutdown();
    assert.equal(tracingEnabled(), false);
    assert.equal(
      (trace.getTracerProvider() as ProxyTracerProvider).getDelegateTracer('switchyard'),
      undefined,
      'shutdown unregisters the provider',
    );
  });

  /** The spans of the client's trace, once the response is over (the server span ends on the response's close). */
  async function spansAfter(response: Response): Promise<ReadableSpan[]> {
    await response.arrayBuffer();
    await new Promise((r) => setTimeout(r, 20));
    return exporter.getFinishedSpans().filter((span) => span.spanContext().traceId === clientTraceId);
  }

  it("continues the client's traceparent; the job's carrier makes the worker's spans children of the request", async () => {
    exporter.reset();
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { traceparent: traceparent() },
    });
    const { carrier } = (await response.clone().json()) as { carrier: Record<string, string> };
    const api = await spansAfter(response);
    const server = byName(api, 'POST /v1/chat/completions')[0]!;
    assert.equal(server.kind, SpanKind.SERVER);
    assert.equal(server.parentSpanContext?.spanId, clientSpanId);
    assert.equal(server.attributes['http.route'], '/v1/chat/completions');
    assert.equal(server.attributes['http.response.status_code'], 200);
    assert.equal(server.attributes['switchyard.request_id'], 'req_test');
    assert.match(
      carrier.traceparent!,
      new RegExp(`^00-${clientTraceId}-${idOf(server)}-01$`),
      'the job carries the server span',
    );
    for (const name of ['admission', 'relay'])
      assert.equal(byName(api, name)[0]?.parentSpanContext?.spanId, idOf(server), name);
    assert.equal(byName(api, 'admission')[0]!.attributes['switchyard.queue'], 'chat');
    assert.equal(byName(api, 'relay')[0]!.attributes['switchyard.replies'], 1);
    assert.equal(byName(api, 'relay')[0]!.events[0]?.name, 'first reply');

    // The worker side, from the carrier alone: queue wait and the run under the server span, the vendor attempt under
    // the run.
    exporter.reset();
    const job = fakeJob({ trace: carrier });
    const processor = traceJobs(async (run) => {
      const attempt = startVendorAttempt(run, route, new AbortController().signal)!;
      attempt.vendorDone();
      await new Promise((r) => setTimeout(r, 5));
      attempt.end();
      return { body: '{}' };
    });
    await processor(job);
    const worker = exporter.getFinishedSpans();
    const waited = byName(worker, 'queue wait')[0]!;
    const run = byName(worker, 'process chat')[0]!;
    const attempt = byName(worker, 'vendor attempt')[0]!;
    for (const span of [waited, run]) assert.equal(span.parentSpanContext?.spanId, idOf(server), span.name);
    assert.equal(attempt.parentSpanContext?.spanId, idOf(run));
    assert.ok(worker.every((span) => span.spanContext().traceId === clientTraceId));
    assert.equal(run.kind, SpanKind.CONSUMER);
    assert.equal(run.attributes['switchyard.outcome'], 'completed');
    assert.equal(attempt.kind, SpanKind.CLIENT);
    assert.deepEqual(
      { ...attempt.attributes },
      {
        'switchyard.vendor': 'openai',
        'switchyard.channel.id': 'openai:0123456789ab',
        'switchyard.protocol': 'openai',
        'switchyard.model': 'gpt-4o-mini',
        'switchyard.model.requested': 'gpt-4o-mini',
        'switchyard.fallback': false,
        'switchyard.attempt': 1,
        'switchyard.endpoint': 'chat.completions',
        'gen_ai.provider.name': 'openai',
        'gen_ai.request.model': 'gpt-4o-mini-2024-07-18',
        'server.address': 'api.example.com',
        'switchyard.outcome': 'ok',
      },
      'no key, no credentials from the base URL',
    );
    // The attempt ends when the vendor was done, not when the run went on to answer.
    assert.ok(attempt.endTime[0] * 1e9 + attempt.endTime[1] < run.endTime[0] * 1e9 + run.endTime[1]);
    assert.ok(waited.startTime[0] * 1e3 + waited.startTime[1] / 1e6 <= job.timestamp + 1);
  });

  it(
    "the queue wait is read on the wall clock, as the job's timestamp is: a monotonic clock drifted from it " +
      'changes nothing',
    async () => {
      // performance.timeOrigin + performance.now() drifts from Date.now() over a process's life (by a millisecond or
      // more in a minute on a VM); read against the api's Date.now() timestamp, a run that starts in the enqueue's
      // millisecond could end its wait before the wait began. The drift is exaggerated here to 50 ms.
      exporter.reset();
      const now = performance.now.bind(performance);
      performance.now = () => now() - 50;
      try {
        const job = fakeJob({ trace: { traceparent: traceparent() } });
        (job as { timestamp: number }).timestamp = Date.now();
        await traceJobs(async () => ({ body: '{}' }))(job);
        const spans = exporter.getFinishedSpans();
        const waited = byName(spans, 'queue wait')[0]!;
        const run = byName(spans, 'process chat')[0]!;
        const ms = ([s, ns]: [number, number]) => s * 1e3 + ns / 1e6;
        assert.equal(ms(waited.startTime), job.timestamp);
        assert.deepEqual(waited.endTime, run.startTime, 'the wait ends as the run starts');
        assert.ok(ms(waited.endTime) >= ms(waited.startTime), 'and not before it began');
      } finally {
        performance.now = now;
      }
    },
  );

  it('a failed vendor attempt and the run it fails: errors, outcome retry; a rate-limit delay is no error', async () => {
    exporter.reset();
    const job = fakeJob({ trace: { traceparent: traceparent() } }, { attemptsMade: 1, attemptsStarted: 2 });
    const failing = traceJobs(async (run) => {
      const attempt = startVendorAttempt(run, route, new AbortController().signal)!;
      attempt.vendorDone();
      attempt.failed(new GatewayError(502, 'The vendor failed.', { code: 'vendor_error', retryable: true }));
      attempt.end();
      throw new GatewayError(502, 'The vendor failed.', { code: 'vendor_error', retryable: true });
    });
    await assert.rejects(() => failing(job));
    const delayed = traceJobs(async () => {
      throw new DelayedError();
    });
    await assert.rejects(() => delayed(job));
    const spans = exporter.getFinishedSpans();
    assert.equal(byName(spans, 'queue wait').length, 0, 'a retry records no queue wait of its own');
    const [failedRun, delayedRun] = byName(spans, 'process chat');
    const attempt = byName(spans, 'vendor attempt')[0]!;
    assert.equal(attempt.status.code, SpanStatusCode.ERROR);
    assert.equal(attempt.attributes['error.type'], 'vendor_error');
    assert.equal(attempt.attributes['switchyard.error.status'], 502);
    assert.equal(attempt.attributes['switchyard.attempt'], 2);
    assert.equal(failedRun!.status.code, SpanStatusCode.ERROR);
    assert.equal(failedRun!.attributes['switchyard.outcome'], 'retry');
    assert.equal(delayedRun!.attributes['switchyard.outcome'], 'delayed');
    assert.equal(delayedRun!.status.code, SpanStatusCode.UNSET);
  });

  it("a run's end by its error's class: the client gone is cancelled, a failure answered (held or async) is failed", async () => {
    exporter.reset();
    const job = fakeJob({ trace: { traceparent: traceparent() } });
    const wire = new GatewayError(404, 'gone from the catalog', { code: 'model_not_found' }).toWire();
    for (const error of [new ClientGoneError(), new AnsweredFailure(wire), new AsyncJobFailure(wire)]) {
      await assert.rejects(() => traceJobs(async () => Promise.reject(error))(job));
    }
    const [gone, held, asyncJob] = byName(exporter.getFinishedSpans(), 'process chat');
    assert.equal(gone!.attributes['switchyard.outcome'], 'cancelled');
    assert.equal(gone!.status.code, SpanStatusCode.UNSET);
    for (const run of [held!, asyncJob!]) {
      assert.equal(run.attributes['switchyard.outcome'], 'failed');
      assert.equal(run.status.code, SpanStatusCode.ERROR);
    }
  });

  it('the call observer tells the vendor attempt what the run tells it, and nothing before the call started', async () => {
    exporter.reset();
    const job = fakeJob({ trace: { traceparent: traceparent() } });
    await assert.rejects(() =>
      traceJobs(async (run) => {
        const call = new CallObserver();
        // A route or slot that failed: no call was made, so nothing is recorded.
        call.failed(new GatewayError(503, 'resting', { code: 'channels_cooling_down' }));
        call.started(run, route, new AbortController().signal);
        call.vendorDone();
        call.failed(new GatewayError(502, 'The vendor failed.', { code: 'vendor_error', retryable: true }));
        call.end();
        call.end();
        throw new GatewayError(502, 'The vendor failed.', { code: 'vendor_error', retryable: true });
      })(job),
    );
    const attempts = byName(exporter.getFinishedSpans(), 'vendor attempt');
    assert.equal(attempts.length, 1);
    assert.equal(attempts[0]!.attributes['error.type'], 'vendor_error');
    assert.equal(attempts[0]!.attributes['switchyard.outcome'], 'error');
  });

  it('names a span by its route template, and errs a refused admission (not the 4xx server span)', async () => {
    exporter.reset();
    const spans = await spansAfter(await fetch(`${url}/v1/models/gpt-4o`, { headers: { traceparent: traceparent() } }));
    assert.deepEqual(
      spans.map((span) => span.name),
      ['GET /v1/models/:id'],
    );
    assert.equal(spans[0]!.attributes['url.path'], '/v1/models/gpt-4o');

    exporter.reset();
    const refused = await spansAfter(
      await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { traceparent: traceparent(), 'x-refuse': '1' },
      }),
    );
    const admission = byName(refused, 'admission')[0]!;
    assert.equal(admission.status.code, SpanStatusCode.ERROR);
    assert.equal(admission.attributes['error.type'], 'rate_limit_exceeded');
    const server = byName(refused, 'POST /v1/chat/completions')[0]!;
    assert.equal(server.status.code, SpanStatusCode.UNSET);
    assert.equal(server.attributes['http.response.status_code'], 429);

    exporter.reset();
    const unknown = await spansAfter(await fetch(`${url}/nowhere/42`, { headers: { traceparent: traceparent() } }));
    assert.deepEqual(
      unknown.map((span) => span.name),
      ['GET'],
      'an unknown URL does not name a span',
    );

    exporter.reset();
    assert.deepEqual(
      await spansAfter(await fetch(`${url}/healthz`, { headers: { traceparent: traceparent() } })),
      [],
      'probes are not traced',
    );
  });

  it('follows an unsampled traceparent (parentbased_always_on): nothing recorded, the job carries the decision', async () => {
    exporter.reset();
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { traceparent: traceparent('00') },
    });
    const { carrier } = (await response.json()) as { carrier: Record<string, string> };
    await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(exporter.getFinishedSpans(), []);
    assert.match(carrier.traceparent!, /-00$/);
    await traceJobs(async () => ({}))(fakeJob({ trace: carrier }));
    assert.deepEqual(exporter.getFinishedSpans(), [], 'the worker follows the decision');
    assert.equal(trace.getSpan(contextOf(carrier))?.spanContext().traceId, clientTraceId);
  });
});

describe('OTEL_TRACES_SAMPLER', () => {
  it('traceidratio with 0 records nothing, even under a sampled client span; always_on ignores an unsampled one', async () => {
    for (const [env, flags, recorded] of [
      [{ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' }, '01', false],
      [{ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' }, '01', true],
      [{ OTEL_TRACES_SAMPLER: 'always_on' }, '00', true],
      [{ OTEL_TRACES_SAMPLER: 'parentbased_always_off' }, '01', true],
    ] as const) {
      const exporter = new InMemorySpanExporter();
      const tracing = (await startTracing(
        loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', ...env }).tracing,
        'worker',
        { exporter },
      ))!;
      await traceJobs(async () => ({}))(fakeJob({ trace: { traceparent: traceparent(flags) } }));
      assert.equal(exporter.getFinishedSpans().length > 0, recorded, `${JSON.stringify(env)} under flags ${flags}`);
      await tracing.shutdown();
    }
  });

  it('refuses a ratio outside 0..1 and an unknown sampler at start', () => {
    assert.throws(
      () => loadConfig({ OTEL_TRACES_SAMPLER_ARG: '1.5' }),
      /OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1, got "1.5"/,
    );
    assert.throws(() => loadConfig({ OTEL_TRACES_SAMPLER: 'jaeger_remote' }), /OTEL_TRACES_SAMPLER must be /);
    assert.equal(loadConfig({ OTEL_TRACES_SAMPLER: 'TraceIdRatio' }).tracing.sampler, 'traceidratio');
  });
});
