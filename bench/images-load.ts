/**
 * The load of `bench/images.ts`: N image generations fired at once through
 * the gateway with undici, each answer checked against the fake vendor's
 * PNG; and, for `response_format=url`, the download of every signed link.
 */
import { performance } from 'node:perf_hooks';
import { Agent, request } from 'undici';

export type ImageFormat = 'b64_json' | 'url';

export interface LatencySummary {
  count: number;
  min: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

export function summarise(values: number[]): LatencySummary | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
  const round = (v: number) => Math.round(v * 10) / 10;
  return {
    count: sorted.length,
    min: round(sorted[0]!),
    p50: round(at(0.5)),
    p90: round(at(0.9)),
    p99: round(at(0.99)),
    max: round(sorted[sorted.length - 1]!),
    mean: round(sorted.reduce((a, b) => a + b, 0) / sorted.length),
  };
}

export interface Outcome {
  index: number;
  /** HTTP status, or 0 when no answer came (transport error, timeout). */
  status: number;
  ms: number;
  bytes: number;
  /** For a 2xx: whether the body held the vendor's image (b64) or a link (url). */
  valid: boolean;
  url?: string;
  error?: string;
  /** Start of a non-2xx or invalid body, for the report. */
  sample?: string;
}

export function createAgent(): Agent {
  return new Agent({
    connections: 512,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    headersTimeout: 120_000,
    bodyTimeout: 120_000,
  });
}

const b64Marker = Buffer.from('"b64_json":"');

/** Whether `body` is an ImagesResponse whose first image is exactly `expectedB64` (compared as bytes, no parse). */
function holdsImage(body: Buffer, expectedB64: Buffer): boolean {
  const at = body.indexOf(b64Marker);
  if (at < 0) return false;
  const start = at + b64Marker.length;
  const end = start + expectedB64.length;
  return end < body.length && body.compare(expectedB64, 0, expectedB64.length, start, end) === 0 && body[end] === 0x22; // closing quote
}

export interface FireOptions {
  gatewayUrl: string;
  apiKey: string;
  count: number;
  format: ImageFormat;
  agent: Agent;
  /** The PNG the fake vendor answers, base64 (ASCII bytes). */
  expectedB64: Buffer;
  /** Added to each prompt, so runs are told apart in logs. */
  tag: string;
}

export interface FireResult {
  outcomes: Outcome[];
  /** From the first request sent to the last answer read. */
  wallMs: number;
}

/** Fires `count` generations at once and waits for every answer. */
export async function fireImages(options: FireOptions): Promise<FireResult> {
  const { gatewayUrl, apiKey, count, format, agent, expectedB64, tag } = options;
  const started = performance.now();
  const one = async (index: number): Promise<Outcome> => {
    const t0 = performance.now();
    const body = JSON.stringify({
      model: 'dall-e-2',
      prompt: `A lighthouse on a cliff at dusk, oil painting (${tag} #${index})`,
      size: '1024x1024',
      response_format: format,
    });
    try {
      const response = await request(`${gatewayUrl}/v1/images/generations`, {
        method: 'POST',
        dispatcher: agent,
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body,
      });
      const buffer = Buffer.from(await response.body.arrayBuffer());
      const ms = performance.now() - t0;
      const outcome: Outcome = { index, status: response.statusCode, ms, bytes: buffer.length, valid: false };
      if (response.statusCode >= 200 && response.statusCode < 300) {
        if (format === 'b64_json') outcome.valid = holdsImage(buffer, expectedB64);
        else {
          try {
            const parsed = JSON.parse(buffer.toString('utf8')) as { data?: Array<{ url?: unknown }> };
            const url = parsed.data?.[0]?.url;
            if (typeof url === 'string' && url.includes('/v1/blobs/')) {
              outcome.url = url;
              outcome.valid = true;
            }
          } catch {
            outcome.valid = false;
          }
        }
      }
      if (!outcome.valid) outcome.sample = buffer.subarray(0, 300).toString('utf8');
      return outcome;
    } catch (error) {
      return { index, status: 0, ms: performance.now() - t0, bytes: 0, valid: false, error: (error as Error).message };
    }
  };
  const outcomes = await Promise.all(Array.from({ length: count }, (_, index) => one(index)));
  return { outcomes, wallMs: performance.now() - started };
}

export interface FetchResult {
  requested: number;
  /** 200 with exactly the vendor's PNG. */
  ok: number;
  /** 200 with other bytes. */
  wrongBytes: number;
  non200: number;
  errors: number;
  statusCodes: Record<string, number>;
  wallMs: number;
  latency: LatencySummary | null;
  bytes: number;
  samples: string[];
}

/** Downloads every signed link at once (no API key: the links are public) and compares the bytes. */
export async function fetchAll(urls: string[], agent: Agent, expected: Buffer): Promise<FetchResult> {
  const started = performance.now();
  const latencies: number[] = [];
  const statusCodes: Record<string, number> = {};
  const samples: string[] = [];
  let ok = 0;
  let wrongBytes = 0;
  let non200 = 0;
  let errors = 0;
  let bytes = 0;
  await Promise.all(
    urls.map(async (url) => {
      const t0 = performance.now();
      try {
        const response = await request(url, { dispatcher: agent });
        const buffer = Buffer.from(await response.body.arrayBuffer());
        latencies.push(performance.now() - t0);
        statusCodes[response.statusCode] = (statusCodes[response.statusCode] ?? 0) + 1;
        bytes += buffer.length;
        if (response.statusCode !== 200) {
          non200 += 1;
          if (samples.length < 5) samples.push(`${response.statusCode} ${buffer.subarray(0, 200).toString('utf8')}`);
        } else if (buffer.equals(expected)) ok += 1;
        else wrongBytes += 1;
      } catch (error) {
        errors += 1;
        statusCodes['0'] = (statusCodes['0'] ?? 0) + 1;
        if (samples.length < 5) samples.push(`error ${(error as Error).message}`);
      }
    }),
  );
  return {
    requested: urls.length,
    ok,
    wrongBytes,
    non200,
    errors,
    statusCodes,
    wallMs: performance.now() - started,
    latency: summarise(latencies),
    bytes,
    samples,
  };
}
