/**
 * A strict fake of the Black Forest Labs API for tests: submit a task, poll
 * it, download the image. Requests are checked the way BFL checks them (the
 * key header, FastAPI-style 422s for bad fields, 404 for unknown endpoints)
 * before any scripted outcome is used, so every test also checks the
 * outgoing request. Tasks stay `Pending` (with growing `progress`) for
 * `pollsUntilReady` polls, then turn `Ready` with a sample URL serving a PNG.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { crc32, deflateSync } from 'node:zlib';
import { PNG } from 'pngjs';
import { closeServer, listenOnLoopback } from './fake-server.js';

export interface RecordedBflRequest {
  method: string;
  /** Path with query, e.g. `/v1/flux-pro-1.1` or `/v1/get_result?id=…`. */
  path: string;
  headers: IncomingHttpHeaders;
  body: unknown;
  aborted: boolean;
}

/** An HTTP answer that replaces the next submit or poll (after the request was checked). */
export interface BflHttpScript {
  status: number;
  json?: unknown;
  headers?: Record<string, string>;
}

/** How the next submitted task ends. Default: `Ready` after `pollsUntilReady` pending polls. */
export type BflOutcome =
  | { status: 'Ready'; afterPolls?: number; sampleExpired?: boolean }
  | { status: 'Error' | 'Failed' | 'Content Moderated' | 'Request Moderated'; details?: unknown; afterPolls?: number };

export interface FakeBflTask {
  id: string;
  endpoint: string;
  body: Record<string, unknown>;
  polls: number;
  outcome: BflOutcome;
}

export interface FakeBflOptions {
  /** When set, any other `x-key` is refused with 401. */
  apiKey?: string;
  /** Pending polls before `Ready` (default 2). */
  pollsUntilReady?: number;
  /** Report `progress` on a 0–100 scale instead of BFL's documented 0–1. */
  progressScale?: 1 | 100;
  /** Origin put into `polling_url` instead of the fake's own (to test polling URLs on foreign hosts). */
  pollingOrigin?: string;
}

export interface FakeBfl {
  /** Base URL without `/v1`, like `https://api.bfl.ai`. */
  url: string;
  requests: RecordedBflRequest[];
  tasks: Map<string, FakeBflTask>;
  /** Tasks created (a resumed job must not add any). */
  readonly submissions: number;
  /** `get_result` requests answered or hung, known ids or not. */
  readonly polls: number;
  readonly downloads: number;
  readonly abortedRequests: number;
  pollsUntilReady: number;
  /** Requests of these kinds are never answered (the connection stays open). */
  hang: { submit?: boolean; poll?: boolean; sample?: boolean };
  /** Outcomes for the next tasks, in submission order. */
  scriptOutcomes(...outcomes: BflOutcome[]): void;
  failSubmits(...answers: BflHttpScript[]): void;
  failPolls(...answers: BflHttpScript[]): void;
  reset(): void;
  close(): Promise<void>;
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

function pngChunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'ascii');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])) >>> 0, 0);
  return Buffer.concat([head, data, crc]);
}

/** A valid PNG of `size`×`size` pixels in one colour: small, and decodable by any image library. */
export function createFakePng(rgb: readonly [number, number, number] = [32, 96, 160], size = 2): Buffer {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(size, 0);
  header.writeUInt32BE(size, 4);
  header.set([8, 2, 0, 0, 0], 8); // 8-bit RGB, no interlace
  const row = Buffer.from([0, ...Array.from({ length: size }, () => rgb).flat()]);
  const pixels = deflateSync(Buffer.concat(Array.from({ length: size }, () => row)));
  return Buffer.concat([
    PNG_SIGNATURE,
    pngChunk('IHDR', header),
    pngChunk('IDAT', pixels),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}

export const FAKE_BFL_PNG = createFakePng();

export interface TestPngOptions {
  width: number;
  height: number;
  /** The colour type written: 0 grey, 2 RGB, 4 grey+alpha, 6 RGBA (8 bits per sample). */
  colourType: 0 | 2 | 4 | 6;
  /** One pixel as RGBA; channels the colour type lacks are dropped on writing. */
  pixel: (x: number, y: number) => readonly [number, number, number, number];
}

/** A PNG of the given colour type, pixel by pixel: for tests of code that reads masks. */
export function encodeTestPng(options: TestPngOptions): Buffer {
  const png = new PNG({ width: options.width, height: options.height });
  for (let y = 0; y < options.height; y++) {
    for (let x = 0; x < options.width; x++) png.data.set(options.pixel(x, y), (y * options.width + x) * 4);
  }
  return PNG.sync.write(png, { colorType: options.colourType });
}

/** Start and end markers only: enough for content-type checks; the fake makes no real JPEG. */
const FAKE_JPEG = Buffer.from([0xff, 0xd8, 0xff, 0xd9]);

type Json = Record<string, unknown>;
type SizeKind = 'dimensions32' | 'dimensions16' | 'aspect' | 'edit';

const COMMON = [
  'prompt',
  'seed',
  'safety_tolerance',
  'output_format',
  'prompt_upsampling',
  'webhook_url',
  'webhook_secret',
];
/** Kontext: `input_image` (optional: without it Kontext generates from the prompt) plus three more references. */
const KONTEXT = [...COMMON, 'aspect_ratio', 'input_image', 'input_image_2', 'input_image_3', 'input_image_4'];
/**
 * `required`: fields besides `prompt` the endpoint refuses to run without.
 * Fill also runs on an image whose alpha channel marks the area; the fake
 * takes the strict side and always wants `mask`.
 */
const ENDPOINTS: Record<string, { kind: SizeKind; fields: string[]; required?: string[] }> = {
  'flux-pro-1.1': { kind: 'dimensions32', fields: [...COMMON, 'width', 'height', 'image_prompt'] },
  'flux-pro': {
    kind: 'dimensions32',
    fields: [...COMMON, 'width', 'height', 'image_prompt', 'steps', 'guidance', 'interval'],
  },
  'flux-dev': { kind: 'dimensions32', fields: [...COMMON, 'width', 'height', 'image_prompt', 'steps', 'guidance'] },
  'flux-pro-1.1-ultra': {
    kind: 'aspect',
    fields: [...COMMON, 'aspect_ratio', 'raw', 'image_prompt', 'image_prompt_strength'],
  },
  'flux-kontext-pro': { kind: 'aspect', fields: KONTEXT },
  'flux-kontext-max': { kind: 'aspect', fields: KONTEXT },
  'flux-2-pro': { kind: 'dimensions16', fields: [...COMMON, 'width', 'height', 'input_image'] },
  'flux-2-flex': { kind: 'dimensions16', fields: [...COMMON, 'width', 'height', 'input_image', 'steps', 'guidance'] },
  'flux-pro-1.0-fill': {
    kind: 'edit',
    fields: [...COMMON, 'image', 'mask', 'steps', 'guidance'],
    required: ['image', 'mask'],
  },
  'flux-pro-1.0-expand': {
    kind: 'edit',
    fields: [...COMMON, 'image', 'top', 'bottom', 'left', 'right', 'steps', 'guidance'],
    required: ['image'],
  },
};
/** Fields holding an image: base64 (no `data:` prefix) or an http(s) URL. */
const IMAGE_FIELDS = new Set([
  'image',
  'mask',
  'image_prompt',
  'input_image',
  'input_image_2',
  'input_image_3',
  'input_image_4',
]);
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const LIMITS: Record<'dimensions32' | 'dimensions16', { multiple: number; min: number; max: number }> = {
  dimensions32: { multiple: 32, min: 256, max: 1440 },
  dimensions16: { multiple: 16, min: 64, max: 2048 },
};

/** FastAPI's validation answer. */
class Invalid {
  constructor(readonly items: Array<{ type: string; loc: string[]; msg: string; input?: unknown }>) {}
}
const invalid = (field: string, msg: string, type = 'value_error', input?: unknown) =>
  new Invalid([{ type, loc: ['body', field], msg, input }]);

function checkSubmit(endpoint: string, body: unknown): Json {
  const rule = ENDPOINTS[endpoint]!;
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new Invalid([
      { type: 'model_attributes_type', loc: ['body'], msg: 'Input should be a valid dictionary or object' },
    ]);
  const fields = body as Json;
  for (const key of Object.keys(fields))
    if (!rule.fields.includes(key))
      throw invalid(key, 'Extra inputs are not permitted', 'extra_forbidden', fields[key]);
  if (typeof fields.prompt !== 'string' || fields.prompt.trim() === '') {
    if (rule.kind !== 'edit' || fields.prompt !== undefined) throw invalid('prompt', 'Field required', 'missing');
  }
  for (const field of rule.required ?? [])
    if (fields[field] === undefined || fields[field] === null) throw invalid(field, 'Field required', 'missing');
  for (const field of Object.keys(fields).filter((key) => IMAGE_FIELDS.has(key))) {
    const value = fields[field];
    if (typeof value !== 'string') throw invalid(field, 'Input should be a valid string', 'string_type', value);
    if (!/^https?:\/\//.test(value) && (value === '' || !BASE64.test(value))) {
      throw invalid(
        field,
        'Invalid image: expected base64 image data or an http(s) URL',
        'value_error',
        value.slice(0, 32),
      );
    }
  }
  if (rule.kind === 'dimensions32' || rule.kind === 'dimensions16') {
    const { multiple, min, max } = LIMITS[rule.kind];
    for (const side of ['width', 'height'] as const) {
      const value = fields[side];
      if (value === undefined) continue;
      if (!Number.isInteger(value)) throw invalid(side, 'Input should be a valid integer', 'int_type', value);
      if ((value as number) % multiple !== 0)
        throw invalid(side, `Input should be a multiple of ${multiple}`, 'multiple_of', value);
      if ((value as number) < min || (value as number) > max)
        throw invalid(side, `Input should be between ${min} and ${max}`, 'less_than_equal', value);
    }
  }
  if (fields.aspect_ratio !== undefined) {
    const match = typeof fields.aspect_ratio === 'string' ? /^(\d+):(\d+)$/.exec(fields.aspect_ratio) : null;
    const ratio = match === null ? NaN : Number(match[1]) / Number(match[2]);
    if (!(ratio >= 9 / 21 - 1e-9 && ratio <= 21 / 9 + 1e-9))
      throw invalid('aspect_ratio', 'Aspect ratio must be between 21:9 and 9:21', 'value_error', fields.aspect_ratio);
  }
  const formats = rule.kind === 'dimensions16' ? ['jpeg', 'png', 'webp'] : ['jpeg', 'png'];
  if (fields.output_format !== undefined && !formats.includes(fields.output_format as string)) {
    throw invalid(
      'output_format',
      `Input should be ${formats.map((format) => `'${format}'`).join(' or ')}`,
      'enum',
      fields.output_format,
    );
  }
  if (fields.raw !== undefined && typeof fields.raw !== 'boolean')
    throw invalid('raw', 'Input should be a valid boolean', 'bool_type', fields.raw);
  return fields;
}

export async function startFakeBfl(options: FakeBflOptions = {}): Promise<FakeBfl> {
  const requests: RecordedBflRequest[] = [];
  const tasks = new Map<string, FakeBflTask>();
  const outcomes: BflOutcome[] = [];
  const submitAnswers: BflHttpScript[] = [];
  const pollAnswers: BflHttpScript[] = [];
  let submissions = 0;
  let polls = 0;
  let downloads = 0;
  let abortedRequests = 0;
  let closed = false;
  let url = '';

  const send = (res: ServerResponse, status: number, json: unknown, headers: Record<string, string> = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(json));
  };
  const sendScript = (res: ServerResponse, script: BflHttpScript) =>
    send(res, script.status, script.json ?? { detail: `HTTP ${script.status}` }, script.headers);

  function authorise(record: RecordedBflRequest): { status: number; detail: string } | undefined {
    const key = record.headers['x-key'];
    if (typeof key !== 'string' || key === '') return { status: 403, detail: 'Not authenticated' };
    if (options.apiKey !== undefined && key !== options.apiKey) return { status: 401, detail: 'Invalid API key' };
    return undefined;
  }

  function submit(
    res: ServerResponse,
    record: RecordedBflRequest,
    endpoint: string,
    contentType: string | undefined,
  ): void {
    if (!(endpoint in ENDPOINTS)) return send(res, 404, { detail: 'Not Found' });
    if (!contentType?.startsWith('application/json')) throw invalid('body', 'Content-Type must be application/json');
    const body = checkSubmit(endpoint, record.body);
    const scripted = submitAnswers.shift();
    if (scripted !== undefined) return sendScript(res, scripted);
    const id = randomUUID();
    submissions += 1;
    tasks.set(id, { id, endpoint, body, polls: 0, outcome: outcomes.shift() ?? { status: 'Ready' } });
    const pollingOrigin = options.pollingOrigin ?? url;
    send(res, 200, { id, polling_url: `${pollingOrigin}/v1/get_result?id=${id}`, cost: 4, input_mp: 0, output_mp: 1 });
  }

  function poll(res: ServerResponse, id: string | null): void {
    polls += 1;
    if (id === null || id === '') throw new Invalid([{ type: 'missing', loc: ['query', 'id'], msg: 'Field required' }]);
    const scripted = pollAnswers.shift();
    if (scripted !== undefined) return sendScript(res, scripted);
    const task = tasks.get(id);
    if (task === undefined)
      return send(res, 404, { id, status: 'Task not found', result: null, progress: null, details: null });
    task.polls += 1;
    const { outcome } = task;
    const pendingPolls = outcome.afterPolls ?? (outcome.status === 'Ready' ? fake.pollsUntilReady : 0);
    if (task.polls <= pendingPolls) {
      const fraction = Math.round((task.polls / (pendingPolls + 1)) * 100) / 100;
      const progress = options.progressScale === 100 ? Math.round(fraction * 100) : fraction;
      return send(res, 200, { id, status: 'Pending', result: null, progress, details: null, preview: null });
    }
    if (outcome.status !== 'Ready')
      return send(res, 200, {
        id,
        status: outcome.status,
        result: null,
        progress: null,
        details: outcome.details ?? null,
      });
    const extension = task.body.output_format === 'jpeg' ? 'jpeg' : 'png';
    const result = {
      sample: `${url}/samples/${id}.${extension}`,
      prompt: task.body.prompt,
      seed: 42,
      start_time: 1,
      end_time: 2,
      duration: 1,
    };
    send(res, 200, { id, status: 'Ready', result, progress: null, details: null, preview: null });
  }

  function sample(res: ServerResponse, name: string): void {
    downloads += 1;
    const match = /^([0-9a-f-]+)\.(png|jpeg)$/.exec(name);
    const task = match === null ? undefined : tasks.get(match[1]!);
    if (task === undefined || match === null) return send(res, 404, { detail: 'Not Found' });
    if (task.outcome.status === 'Ready' && task.outcome.sampleExpired) {
      res.writeHead(403, { 'content-type': 'application/xml' });
      return void res.end('<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>');
    }
    const bytes = match[2] === 'jpeg' ? FAKE_JPEG : FAKE_BFL_PNG;
    res.writeHead(200, {
      'content-type': match[2] === 'jpeg' ? 'image/jpeg' : 'image/png',
      'content-length': String(bytes.length),
    });
    res.end(bytes);
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const record: RecordedBflRequest = {
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      headers: req.headers,
      body: undefined,
      aborted: false,
    };
    res.on('close', () => {
      if (!res.writableFinished && !closed) {
        abortedRequests += 1;
        record.aborted = true;
      }
    });
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    try {
      record.body = raw === '' ? undefined : JSON.parse(raw);
    } catch {
      record.body = raw;
    }
    requests.push(record);
    const target = new URL(record.path, 'http://fake');

    if (record.method === 'GET' && target.pathname.startsWith('/samples/')) {
      if (fake.hang.sample) return;
      return sample(res, target.pathname.slice('/samples/'.length));
    }
    const refusal = authorise(record);
    if (refusal !== undefined) return send(res, refusal.status, { detail: refusal.detail });
    try {
      if (record.method === 'GET' && target.pathname === '/v1/get_result') {
        if (fake.hang.poll) return void (polls += 1);
        return poll(res, target.searchParams.get('id'));
      }
      const route = /^\/v1\/([A-Za-z0-9.-]+)$/.exec(target.pathname);
      if (record.method === 'POST' && route !== null) {
        if (fake.hang.submit) return;
        return submit(res, record, route[1]!, req.headers['content-type']);
      }
      send(res, 404, { detail: 'Not Found' });
    } catch (error) {
      if (!(error instanceof Invalid)) throw error;
      send(res, 422, { detail: error.items });
    }
  }

  const server = createServer({ keepAliveTimeout: 60_000, requestTimeout: 0 }, (req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent) return void res.destroy();
      send(res, 500, { detail: String(error) });
    });
  });
  url = `http://127.0.0.1:${await listenOnLoopback(server)}`;

  const fake: FakeBfl = {
    url,
    requests,
    tasks,
    get submissions() {
      return submissions;
    },
    get polls() {
      return polls;
    },
    get downloads() {
      return downloads;
    },
    get abortedRequests() {
      return abortedRequests;
    },
    pollsUntilReady: options.pollsUntilReady ?? 2,
    hang: {},
    scriptOutcomes(...next) {
      outcomes.push(...next);
    },
    failSubmits(...answers) {
      submitAnswers.push(...answers);
    },
    failPolls(...answers) {
      pollAnswers.push(...answers);
    },
    reset() {
      requests.length = 0;
      tasks.clear();
      outcomes.length = 0;
      submitAnswers.length = 0;
      pollAnswers.length = 0;
      submissions = 0;
      polls = 0;
      downloads = 0;
      abortedRequests = 0;
      fake.pollsUntilReady = options.pollsUntilReady ?? 2;
      fake.hang = {};
    },
    async close() {
      closed = true;
      await closeServer(server);
    },
  };
  return fake;
}
