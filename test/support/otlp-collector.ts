/**
 * A minimal OpenTelemetry collector for tests: an HTTP server that takes
 * OTLP/HTTP trace exports (`POST /v1/traces`, JSON, as
 * @opentelemetry/exporter-trace-otlp-http sends them) and keeps every span,
 * flattened, with the service that sent it.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { gunzipSync } from 'node:zlib';
import { closeServer, listenOnLoopback } from './fake-server.js';

export type AttributeValue = string | number | boolean | null | AttributeValue[];

export interface CollectedSpan {
  traceId: string;
  spanId: string;
  /** Empty for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP's span kind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  /** `service.name` of the process that sent it. */
  service: string;
  attributes: Record<string, AttributeValue>;
  /** OTLP's status code: 0 unset, 1 ok, 2 error. */
  status: number;
  startNs: bigint;
  endNs: bigint;
}

export interface OtlpCollector {
  /** Base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it (the exporter appends `/v1/traces`). */
  url: string;
  spans: CollectedSpan[];
  /** Export requests received, whatever their path. */
  readonly exports: number;
  /** Anything that was not a JSON trace export (a protobuf body, another path). */
  refused: string[];
  /** The spans of one trace. */
  trace(traceId: string): CollectedSpan[];
  close(): Promise<void>;
}

interface OtlpAnyValue {
  stringValue?: string;
  intValue?: number | string;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: OtlpAnyValue[] };
}

interface OtlpExport {
  resourceSpans?: Array<{
    resource?: { attributes?: Array<{ key: string; value: OtlpAnyValue }> };
    scopeSpans?: Array<{
      spans?: Array<{
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind?: number;
        startTimeUnixNano: string | number;
        endTimeUnixNano: string | number;
        attributes?: Array<{ key: string; value: OtlpAnyValue }>;
        status?: { code?: number };
      }>;
    }>;
  }>;
}

function valueOf(value: OtlpAnyValue): AttributeValue {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.arrayValue) return (value.arrayValue.values ?? []).map(valueOf);
  return null;
}

const attributesOf = (list: Array<{ key: string; value: OtlpAnyValue }> = []) =>
  Object.fromEntries(list.map(({ key, value }) => [key, valueOf(value)]));

export async function startOtlpCollector(): Promise<OtlpCollector> {
  const spans: CollectedSpan[] = [];
  const refused: string[] = [];
  let exports = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      exports += 1;
      let body = Buffer.concat(chunks);
      if (req.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
      if (
        req.method !== 'POST' ||
        req.url !== '/v1/traces' ||
        !/^application\/json/.test(req.headers['content-type'] ?? '')
      ) {
        refused.push(`${req.method} ${req.url} ${req.headers['content-type']}`);
        res.writeHead(415).end();
        return;
      }
      const payload = JSON.parse(body.toString('utf8')) as OtlpExport;
      for (const resourceSpans of payload.resourceSpans ?? []) {
        const resource = attributesOf(resourceSpans.resource?.attributes);
        for (const scope of resourceSpans.scopeSpans ?? []) {
          for (const span of scope.spans ?? []) {
            spans.push({
              traceId: span.traceId,
              spanId: span.spanId,
              parentSpanId: span.parentSpanId ?? '',
              name: span.name,
              kind: span.kind ?? 0,
              service: String(resource['service.name'] ?? ''),
              attributes: attributesOf(span.attributes),
              status: span.status?.code ?? 0,
              startNs: BigInt(span.startTimeUnixNano),
              endNs: BigInt(span.endTimeUnixNano),
            });
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  const url = `http://127.0.0.1:${await listenOnLoopback(server)}`;
  return {
    url,
    spans,
    refused,
    get exports() {
      return exports;
    },
    trace: (traceId) => spans.filter((span) => span.traceId === traceId),
    close: () => closeServer(server),
  };
}
