import { randomUUID } from 'node:crypto';
import {
  context,
  diag,
  DiagLogLevel,
  propagation,
  ROOT_CONTEXT,
  SpanStatusCode,
  trace,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import type { SpanExporter } from '@opentelemetry/sdk-trace';
import type { TraceSampler, TracingConfig } from './config.js';
import type { Logger } from './logger.js';

/**
 * OpenTelemetry tracing of the gateway: off unless OTEL_EXPORTER_OTLP_ENDPOINT
 * is set. Off, nothing is registered with `@opentelemetry/api` (its tracer is
 * the no-op one) and `tracingEnabled()` is false, so the api and the workers
 * install none of their hooks. On, one tracer provider per process exports
 * over OTLP/HTTP (JSON) through a batch processor, flushed by `shutdown()`.
 *
 * A request's trace context travels from the api to the worker inside the
 * job's data (`GatewayJobData.trace`, a W3C `traceparent`/`tracestate`
 * carrier), so the spans of both processes form one tree.
 */

/** Which half of the gateway this process runs (`bin/start.ts --role`). */
export type TracingRole = 'all' | 'api' | 'worker';

/** A W3C trace context as text headers: `traceparent`, and `tracestate` when there is one. */
export type TraceCarrier = Record<string, string>;

export interface Tracing {
  /** Exports what is buffered now. */
  flush(): Promise<void>;
  /** Exports what is buffered, then unregisters everything (the api's no-op tracer again). */
  shutdown(): Promise<void>;
}

export interface TracingOptions {
  /** Instead of OTLP/HTTP (tests): spans go here, one by one as they end (a simple processor). */
  exporter?: SpanExporter;
  /** Where the SDK's own warnings go (a failing collector, dropped spans). */
  log?: Logger;
}

const instrumentationName = 'switchyard';
let tracer: Tracer | undefined;

/**
 * Whether this process records spans: checked once where hooks are installed, so the hot path pays nothing when off.
 */
export function tracingEnabled(): boolean {
  return tracer !== undefined;
}

/** The gateway's tracer (the api's no-op one when tracing is off). */
export function getTracer(): Tracer {
  return tracer ?? trace.getTracer(instrumentationName);
}

/** `service.name` when OTEL_SERVICE_NAME does not say: by role. */
export function defaultServiceName(role: TracingRole): string {
  return role === 'all' ? 'switchyard' : `switchyard-${role}`;
}

/**
 * The exporter's URL: OTEL_EXPORTER_OTLP_ENDPOINT is a base, to which the traces path is appended (as the OTLP spec
 * says).
 */
export function tracesUrl(endpoint: string): string {
  return `${endpoint.replace(/\/+$/, '')}/v1/traces`;
}

/**
 * Turns tracing on when the configuration names an OTLP endpoint (or a test
 * hands an exporter); does nothing and returns undefined otherwise. The SDK
 * is loaded only then, so a gateway without tracing never loads it.
 */
export async function startTracing(
  config: TracingConfig,
  role: TracingRole,
  options: TracingOptions = {},
): Promise<Tracing | undefined> {
  if (tracer) throw new Error('tracing is already started in this process');
  if (config.endpoint === undefined && !options.exporter) return undefined;
  const [{ AsyncLocalStorageContextManager }, { W3CTraceContextPropagator }, resources, sdk] = await Promise.all([
    import('@opentelemetry/context-async-hooks'),
    import('@opentelemetry/core'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/sdk-trace'),
  ]);
  let exporter = options.exporter;
  if (!exporter) {
    const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http');
    // Headers, timeout, compression and certificates: the exporter reads its own OTEL_EXPORTER_OTLP_* variables.
    exporter = new OTLPTraceExporter({ url: tracesUrl(config.endpoint!) });
  }
  const processor = options.exporter
    ? new sdk.SimpleSpanProcessor({ exporter })
    : new sdk.BatchSpanProcessor({ exporter, scheduledDelayMillis: config.exportDelayMs });
  const resource = resources.defaultResource().merge(
    resources.resourceFromAttributes({
      'service.name': config.serviceName ?? defaultServiceName(role),
      'service.instance.id': randomUUID(),
      'switchyard.role': role,
    }),
  );
  const provider = new sdk.TracerProvider({
    resource,
    sampler: makeSampler(sdk, config.sampler, config.samplerArg),
    spanProcessors: [processor],
  });

  if (options.log) {
    const log = options.log;
    diag.setLogger(
      {
        error: (message, ...args) => log.warn({ otel: args }, `tracing: ${message}`),
        warn: (message, ...args) => log.warn({ otel: args }, `tracing: ${message}`),
        info: () => undefined,
        debug: () => undefined,
        verbose: () => undefined,
      },
      DiagLogLevel.WARN,
    );
  }
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  // Trace context only: baggage from a client is not carried into the gateway.
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  tracer = provider.getTracer(instrumentationName);

  let stopped: Promise<void> | undefined;
  return {
    flush: () => provider.forceFlush(),
    shutdown() {
      stopped ??= (async () => {
        try {
          await provider.shutdown();
        } finally {
          tracer = undefined;
          trace.disable();
          propagation.disable();
          context.disable();
          diag.disable();
        }
      })();
      return stopped;
    },
  };
}

type Sdk = typeof import('@opentelemetry/sdk-trace');

/** OTEL_TRACES_SAMPLER and its argument, as the OpenTelemetry specification names them. */
function makeSampler(sdk: Sdk, name: TraceSampler, ratio: number) {
  switch (name) {
    case 'always_on':
      return new sdk.AlwaysOnSampler();
    case 'always_off':
      return new sdk.AlwaysOffSampler();
    case 'traceidratio':
      return new sdk.TraceIdRatioBasedSampler(ratio);
    case 'parentbased_always_off':
      return new sdk.ParentBasedSampler({ root: new sdk.AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new sdk.ParentBasedSampler({ root: new sdk.TraceIdRatioBasedSampler(ratio) });
    case 'parentbased_always_on':
      return new sdk.ParentBasedSampler({ root: new sdk.AlwaysOnSampler() });
  }
}

/** The trace context of `ctx` as a carrier for a job; undefined when there is none (tracing off). */
export function carrierOf(ctx: Context): TraceCarrier | undefined {
  const carrier: TraceCarrier = {};
  propagation.inject(ctx, carrier);
  return carrier.traceparent ? carrier : undefined;
}

/** The remote parent a carrier names (the root context when it names none, or names it wrongly). */
export function contextOf(carrier: TraceCarrier | undefined): Context {
  return carrier ? propagation.extract(ROOT_CONTEXT, carrier) : ROOT_CONTEXT;
}

/** The span's status is an error, with `error.type` (the gateway's error code, or the error's name). */
export function markFailed(span: Span, error: unknown, message?: string): void {
  const typed = error as { code?: unknown; name?: unknown; message?: unknown } | null | undefined;
  const type = typeof typed?.code === 'string' ? typed.code : typeof typed?.name === 'string' ? typed.name : 'error';
  span.setAttribute('error.type', type);
  span.setStatus({
    code: SpanStatusCode.ERROR,
    message: message ?? (typeof typed?.message === 'string' ? typed.message : type),
  });
}
