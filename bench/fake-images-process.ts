/**
 * The fake OpenAI image vendor of `bench/images.ts`, in a process of its own
 * (its CPU apart from the load generator's and the gateway's).
 *
 * It is the test fake (`startFakeOpenAI({record:false})` with
 * `setDefault(createFakeOpenAIImages())`, so requests are checked as OpenAI
 * checks them), wrapped so that a successful `POST /v1/images/generations`
 *   - is answered after a fixed latency (env BENCH_IMAGE_LATENCY_MS, default 200),
 *   - carries a realistic image: a valid 1024x1024 RGB PNG of about
 *     BENCH_IMAGE_BYTES (default 1.5 MiB: half of each row is noise, so it does
 *     not compress), built once at start; the answer body is spliced from a
 *     pre-encoded base64 string, so the fake's CPU per answer is a copy,
 *   - is refused with 429 (and counted) when more than BENCH_IMAGE_CAP
 *     (default 8; 0: no cap) are already in flight, as a capped vendor would.
 * In flight means from the request's arrival until its answer is written
 * (the fake's own counter).
 *
 * A control server on a port of its own (its requests are not counted):
 *   GET  /__stats  {maxInFlight, requests, status429, inFlight, served, otherRequests, aborted,
 *                   connections (new since the reset), slotUse, cap, latencyMs, imageBytes}
 *   POST /__reset  zeroes the counters (maxInFlight restarts from what is in flight now)
 *   GET  /__image  the PNG every answer carries (to check what the gateway hands back)
 *
 * Prints one line `{"url","controlUrl","pid","imageBytes","latencyMs","cap"}`
 * on stdout when it listens. Exits on SIGTERM/SIGINT or when stdin closes
 * (its parent went away).
 */
import { randomBytes } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { deflateSync } from 'node:zlib';
import { startFakeOpenAI, type FakeHandler, type FakeResponse } from '../test/support/fake-openai.js';
import { createFakeOpenAIImages } from '../test/support/fake-openai-images.js';
import { closeWithParent } from './parent-watch.js';

function intEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer, got "${raw}"`);
  return value;
}

const latencyMs = intEnv('BENCH_IMAGE_LATENCY_MS', 200);
const cap = intEnv('BENCH_IMAGE_CAP', 8);
const targetBytes = intEnv('BENCH_IMAGE_BYTES', 1536 * 1024);
const apiKey = process.env.BENCH_IMAGE_API_KEY || 'sk-bench';

// ---- the image: a valid PNG, built once ------------------------------------------------

const crcTable = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k += 1) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(data: Buffer): number {
  let c = 0xffffffff;
  for (let i = 0; i < data.length; i += 1) c = crcTable[(c ^ data[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0);
  return Buffer.concat([head, data, crc]);
}

/** 1024x1024 RGB; the first `noisy` bytes of each row are random (incompressible), the rest black. */
function buildPng(bytes: number): Buffer {
  const width = 1024;
  const height = 1024;
  const rowBytes = width * 3;
  const noisy = Math.max(1, Math.min(rowBytes, Math.round(bytes / height)));
  const raw = Buffer.alloc(height * (rowBytes + 1));
  const noise = randomBytes(height * noisy);
  for (let y = 0; y < height; y += 1) {
    const at = y * (rowBytes + 1);
    raw[at] = 0; // filter: none
    noise.copy(raw, at + 1, y * noisy, (y + 1) * noisy);
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // colour type: RGB
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([
    signature,
    chunk('IHDR', ihdr),
    chunk('IDAT', deflateSync(raw, { level: 6 })),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

const png = buildPng(targetBytes);
/** The fake answers raw bytes only from files (`sseFile`). */
const pngFile = join(tmpdir(), `switchyard-bench-image-${process.pid}.png`);
writeFileSync(pngFile, png);
process.on('exit', () => rmSync(pngFile, { force: true }));
/** JSON-escaped already: base64 has nothing to escape, so the quotes are all it needs. */
const b64Literal = `"${png.toString('base64')}"`;
const PLACEHOLDER = '"__BENCH_IMAGE__"';

// ---- the fake and its wrapper ---------------------------------------------------------

const openai = await startFakeOpenAI({ record: false });
const images = createFakeOpenAIImages({ apiKey });

let requests = 0;
let served = 0;
let status429 = 0;
let other = 0;
let maxInFlight = 0;
let connectionsAtReset = 0;
let abortedAtReset = 0;
/** When each generation the fake answered (not refused) arrived, ms. */
const arrivals: number[] = [];
const MAX_ARRIVALS = 100_000;

const rateLimited: FakeResponse = {
  status: 429,
  headers: { 'retry-after': '1' },
  json: {
    error: {
      message: `Rate limit reached: more than ${cap} image requests in flight.`,
      type: 'requests',
      param: null,
      code: 'rate_limit_exceeded',
    },
  },
};

/** The checked answer, with each image replaced by the big PNG, sent after the latency. */
function withBigImage(answer: FakeResponse): FakeResponse {
  if (!('json' in answer) || (answer.status ?? 200) !== 200) return answer;
  const body = answer.json as { data?: Array<Record<string, unknown>> };
  for (const item of body.data ?? []) {
    if ('b64_json' in item) item.b64_json = '__BENCH_IMAGE__';
    else if ('url' in item) item.url = String(item.url).replace(/\/\d+\.png$/, '/bench.png');
  }
  const text = JSON.stringify(body).split(PLACEHOLDER).join(b64Literal);
  return {
    status: 200,
    headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) },
    text,
    delayMs: latencyMs,
  };
}

const handler: FakeHandler = async (request) => {
  const path = request.path.split('?')[0] ?? '';
  if (request.method === 'GET' && path === '/fake-images/bench.png') {
    // A vendor `url` answer's download (the gateway asks for b64_json, so this is not expected).
    other += 1;
    return { sseFile: pngFile, headers: { 'content-type': 'image/png', 'content-length': String(png.length) } };
  }
  if (request.method !== 'POST' || path !== '/v1/images/generations') {
    other += 1;
    return images(request);
  }
  requests += 1;
  // The fake counts a request in flight from its arrival: this one is included.
  const inFlight = openai.inFlight;
  if (inFlight > maxInFlight) maxInFlight = inFlight;
  if (cap > 0 && inFlight > cap) {
    status429 += 1;
    return rateLimited;
  }
  const answer = await images(request);
  if (answer !== undefined && 'json' in answer && (answer.status ?? 200) === 200) {
    served += 1;
    if (arrivals.length < MAX_ARRIVALS) arrivals.push(performance.now());
  }
  return answer === undefined ? undefined : withBigImage(answer);
};
openai.setDefault(handler);

/**
 * With the cap reached and a fixed latency, the k-th generation to arrive took
 * the slot the (k − cap)-th one freed: arrival[k] − arrival[k − cap] − latency
 * is how long that slot sat idle between the vendor's answer being sent and
 * the next request (answer transfer, the gateway's work until it releases the
 * slot, its wait for a free slot). Also: the share of cap × span the vendor
 * spent generating.
 */
function slotUse() {
  if (cap === 0 || latencyMs === 0 || arrivals.length <= cap) return null;
  const gaps = arrivals
    .slice(cap)
    .map((at, i) => Math.max(0, at - arrivals[i]! - latencyMs))
    .sort((a, b) => a - b);
  const at = (q: number) => gaps[Math.min(gaps.length - 1, Math.max(0, Math.ceil(q * gaps.length) - 1))]!;
  const round = (v: number) => Math.round(v * 10) / 10;
  const span = arrivals[arrivals.length - 1]! + latencyMs - arrivals[0]!;
  return {
    handoffs: gaps.length,
    gapMs: {
      p50: round(at(0.5)),
      p90: round(at(0.9)),
      p99: round(at(0.99)),
      max: round(gaps[gaps.length - 1]!),
      mean: round(gaps.reduce((a, b) => a + b, 0) / gaps.length),
    },
    /** From the first arrival to the last answer's latency ending. */
    spanMs: Math.round(span),
    utilisation: Math.round(((arrivals.length * latencyMs) / (cap * span)) * 1000) / 1000,
  };
}

function stats() {
  return {
    maxInFlight,
    requests,
    status429,
    inFlight: openai.inFlight,
    served,
    otherRequests: other,
    aborted: openai.abortedRequests - abortedAtReset,
    connections: openai.connections - connectionsAtReset,
    slotUse: slotUse(),
    cap,
    latencyMs,
    imageBytes: png.length,
  };
}

function control(req: IncomingMessage, res: ServerResponse): void {
  const url = new URL(req.url ?? '/', 'http://control');
  req.resume();
  const reply = (status: number, value: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(value));
  };
  if (req.method === 'GET' && url.pathname === '/__stats') return reply(200, stats());
  if (req.method === 'POST' && url.pathname === '/__reset') {
    // Not openai.reset(): that would drop the default handler too.
    requests = 0;
    served = 0;
    status429 = 0;
    other = 0;
    maxInFlight = openai.inFlight;
    connectionsAtReset = openai.connections;
    abortedAtReset = openai.abortedRequests;
    arrivals.length = 0;
    return reply(200, stats());
  }
  if (req.method === 'GET' && url.pathname === '/__image') {
    res.writeHead(200, { 'content-type': 'image/png', 'content-length': String(png.length) });
    res.end(png);
    return;
  }
  reply(404, { error: 'not found' });
}

const controlServer = createServer(control);
await new Promise<void>((resolve) => controlServer.listen(0, '127.0.0.1', resolve));
const controlUrl = `http://127.0.0.1:${(controlServer.address() as AddressInfo).port}`;

process.stdout.write(
  `${JSON.stringify({ url: openai.url, controlUrl, pid: process.pid, imageBytes: png.length, latencyMs, cap })}\n`,
);

closeWithParent(controlServer, () => [openai.close()]);
