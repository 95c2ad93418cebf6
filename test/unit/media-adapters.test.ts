import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import { pino } from 'pino';
import { loadCatalog } from '../../shared/catalog.js';
import { loadConfig } from '../../shared/config.js';
import { LocalBlobStore } from '../../storage/local-blob-store.js';
import type { BlobRef, MediaContext } from '../../workers/vendors/types.js';
import type { TranscriptionInput, VideoInput } from '../../shared/schemas/media-inputs.js';
import { buildMp4 } from '../../workers/vendors/mock/mp4.js';
import { transcribeMock, translateMock } from '../../workers/vendors/mock/transcriptions.js';
import { generateMockVideo } from '../../workers/vendors/mock/videos.js';
import { openaiAdapter } from '../../workers/vendors/openai/index.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import {
  createFakeOpenAIMedia,
  FAKE_SRT,
  FAKE_TRANSCRIPT_TEXT,
  FAKE_TRANSLATION_SRT,
  FAKE_TRANSLATION_TEXT,
  FAKE_VTT,
  fakeVideoBytes,
  type FakeOpenAIMedia,
} from '../support/fake-openai-media.js';
import { gatewayError } from '../support/assertions.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';

const http = createVendorHttp(loadConfig({ VIDEO_POLL_INTERVAL_MS: '20', MOCK_VIDEO_MS: '100' }));

const KEY = 'sk-test-media-key-0123456789';
const catalog = loadCatalog();
const log = pino({ level: 'silent' });
// Valid UTF-8 on purpose (NUL, control bytes, a two-byte character): the fake records bodies as text.
const AUDIO = Buffer.concat([
  Buffer.from('RIFF\u0024\u0000\u0000\u0000WAVEfmt '),
  Buffer.from([0, 1, 2, 3, 0x7f, 0xc3, 0xa9, 10, 13]),
]);

let fake: FakeOpenAI;
let media: FakeOpenAIMedia;
let blobDir: string;
let blobs: LocalBlobStore;
let requestCounter = 0;

interface Harness {
  ctx: MediaContext;
  progress: number[];
  checkpoint: {
    state: Record<string, unknown> | undefined;
    writes: Array<{ state: Record<string, unknown>; requestsSoFar: number }>;
  };
}

function harness(
  options: {
    model?: string;
    upstreamModel?: string;
    vendor?: string;
    signal?: AbortSignal;
    state?: Record<string, unknown>;
    onProgress?: (percent: number) => void;
  } = {},
): Harness {
  const progress: number[] = [];
  const checkpoint: Harness['checkpoint'] = { state: options.state, writes: [] };
  const model = catalog.get(options.model ?? 'sora-2');
  assert.ok(model, 'catalog model');
  const ctx: MediaContext = {
    requestId: `req_media_${(requestCounter += 1)}`,
    signal: options.signal ?? new AbortController().signal,
    channel: { vendor: options.vendor ?? 'openai', baseUrl: fake.url, apiKey: KEY },
    upstreamModel: options.upstreamModel ?? model.routes[0]!.model ?? model.id,
    model,
    log,
    http,
    blobs,
    progress: async (percent) => {
      progress.push(percent);
      options.onProgress?.(percent);
    },
    checkpoint: {
      read: <T extends Record<string, unknown>>() => checkpoint.state as T | undefined,
      write: async (state) => {
        checkpoint.state = state;
        checkpoint.writes.push({ state, requestsSoFar: fake.requests.length });
      },
    },
  };
  return { ctx, progress, checkpoint };
}

async function upload(name: string | undefined, contentType: string, bytes: Buffer = AUDIO): Promise<BlobRef> {
  return blobs.put(`uploads/${(requestCounter += 1)}/file`, bytes, contentType, name);
}

const transcription = (file: BlobRef, extra: Partial<TranscriptionInput> = {}): TranscriptionInput => ({
  file,
  response_format: 'json',
  ...extra,
});

before(async () => {
  fake = await startFakeOpenAI({ apiKey: KEY });
  media = createFakeOpenAIMedia({ pollsToComplete: 3 });
  blobDir = await mkdtemp(join(tmpdir(), 'media-adapters-'));
  blobs = new LocalBlobStore(blobDir);
});
after(async () => {
  await http.close();
  await fake.close();
  await media.close();
  await rm(blobDir, { recursive: true, force: true });
});
beforeEach(() => {
  fake.reset();
  media.reset();
  fake.setDefault(media.handler);
});

describe('openai transcriptions', () => {
  it('sends the upload and every field as multipart, in order, with the file name, type and bytes kept', async () => {
    const file = await upload('speech.wav', 'audio/wav');
    const { ctx } = harness({ model: 'whisper-1' });
    const input = transcription(file, {
      language: 'en',
      prompt: 'Names: Ada.',
      response_format: 'verbose_json',
      temperature: 0.2,
      timestamp_granularities: ['word', 'segment'],
    });
    await openaiAdapter.transcribe!(input, ctx);

    const sent = fake.requests[0]!;
    assert.equal(sent.method, 'POST');
    assert.equal(sent.path, '/v1/audio/transcriptions');
    assert.equal(sent.headers.authorization, `Bearer ${KEY}`);
    assert.match(String(sent.headers['content-type']), /^multipart\/form-data; boundary=/);
    assert.equal(sent.rawBody.match(/name="timestamp_granularities\[\]"/g)?.length, 2);
    assert.deepEqual(media.transcriptions[0], [
      { name: 'file', filename: 'speech.wav', type: 'audio/wav', bytes: AUDIO },
      { name: 'model', value: 'whisper-1' },
      { name: 'language', value: 'en' },
      { name: 'prompt', value: 'Names: Ada.' },
      { name: 'response_format', value: 'verbose_json' },
      { name: 'temperature', value: '0.2' },
      { name: 'timestamp_granularities[]', value: 'word' },
      { name: 'timestamp_granularities[]', value: 'segment' },
    ]);
  });

  it('names a nameless upload after its content type, and leaves out fields the client did not give', async () => {
    const { ctx } = harness({ model: 'whisper-1' });
    await openaiAdapter.transcribe!(transcription(await upload(undefined, 'audio/mpeg')), ctx);
    const parts = media.transcriptions[0]!;
    assert.deepEqual(
      parts.map((part) => part.name),
      ['file', 'model', 'response_format'],
    );
    assert.equal((parts[0] as { filename: string }).filename, 'audio.mp3');
  });

  it('hands every response format on exactly as the vendor sent it, with its content type', async () => {
    const file = await upload('speech.wav', 'audio/wav');
    const expected: Record<TranscriptionInput['response_format'], { body: string | RegExp; type: RegExp }> = {
      json: {
        body: JSON.stringify({ text: FAKE_TRANSCRIPT_TEXT, usage: { type: 'duration', seconds: 4 } }, null, 2),
        type: /^application\/json/,
      },
      text: { body: `${FAKE_TRANSCRIPT_TEXT}\n`, type: /^text\/plain/ },
      srt: { body: FAKE_SRT, type: /^text\/plain/ },
      vtt: { body: FAKE_VTT, type: /^text\/plain/ },
      verbose_json: { body: /^\{\n {2}"task": "transcribe",\n/, type: /^application\/json/ },
    };
    for (const [format, want] of Object.entries(expected)) {
      const { ctx } = harness({ model: 'whisper-1' });
      const result = await openaiAdapter.transcribe!(
        transcription(file, { response_format: format as TranscriptionInput['response_format'] }),
        ctx,
      );
      if (typeof want.body === 'string') assert.equal(result.body, want.body, format);
      else assert.match(result.body, want.body, format);
      assert.match(result.contentType, want.type, format);
    }
  });

  it('refuses srt, vtt and verbose_json for gpt-4o transcribe models before calling, naming what works', async () => {
    const file = await upload('speech.wav', 'audio/wav');
    for (const model of ['gpt-4o-transcribe', 'gpt-4o-mini-transcribe']) {
      for (const format of ['srt', 'vtt', 'verbose_json'] as const) {
        const error = await gatewayError(
          openaiAdapter.transcribe!(transcription(file, { response_format: format }), harness({ model }).ctx),
        );
        assert.equal(error.status, 400);
        assert.equal(error.param, 'response_format');
        assert.match(error.message, new RegExp(`'${format}' is not supported by ${model}; use json or text`));
      }
    }
    assert.equal(fake.requests.length, 0);
    for (const format of ['json', 'text'] as const) {
      const result = await openaiAdapter.transcribe!(
        transcription(file, { response_format: format }),
        harness({ model: 'gpt-4o-transcribe' }).ctx,
      );
      assert.match(result.body, /Hello from the fake/);
    }
  });

  it('maps vendor errors the OpenAI way', async () => {
    const file = await upload('speech.wav', 'audio/wav');
    fake.enqueue({
      status: 400,
      json: {
        error: {
          message: 'Audio file is too short.',
          type: 'invalid_request_error',
          param: 'file',
          code: 'audio_too_short',
        },
      },
    });
    const refused = await gatewayError(
      openaiAdapter.transcribe!(transcription(file), harness({ model: 'whisper-1' }).ctx),
    );
    assert.deepEqual(
      [refused.status, refused.param, refused.code, refused.retryable],
      [400, 'file', 'audio_too_short', false],
    );
    fake.enqueue({
      status: 503,
      json: { error: { message: 'Overloaded', type: 'server_error', param: null, code: null } },
    });
    const overloaded = await gatewayError(
      openaiAdapter.transcribe!(transcription(file), harness({ model: 'whisper-1' }).ctx),
    );
    assert.equal(overloaded.retryable, true);
  });
});

describe('openai translations', () => {
  it("sends the upload and the translation's fields to /audio/translations, and hands the answer on as sent", async () => {
    const file = await upload('rede.wav', 'audio/wav');
    const result = await openaiAdapter.translate!(
      { file, prompt: 'A talk.', response_format: 'srt', temperature: 0.4 },
      harness({ model: 'whisper-1' }).ctx,
    );
    assert.equal(fake.requests[0]!.path, '/v1/audio/translations');
    assert.deepEqual(media.translations[0], [
      { name: 'file', filename: 'rede.wav', type: 'audio/wav', bytes: AUDIO },
      { name: 'model', value: 'whisper-1' },
      { name: 'prompt', value: 'A talk.' },
      { name: 'response_format', value: 'srt' },
      { name: 'temperature', value: '0.4' },
    ]);
    assert.deepEqual(result, { body: FAKE_TRANSLATION_SRT, contentType: 'text/plain; charset=utf-8' });
    const json = await openaiAdapter.translate!({ file, response_format: 'json' }, harness({ model: 'whisper-1' }).ctx);
    assert.equal(json.body, JSON.stringify({ text: FAKE_TRANSLATION_TEXT }, null, 2));
  });

  it("maps the vendor's refusal the OpenAI way", async () => {
    const file = await upload('rede.wav', 'audio/wav');
    const refused = await gatewayError(
      openaiAdapter.translate!({ file, response_format: 'json' }, harness({ model: 'gpt-4o-transcribe' }).ctx),
    );
    assert.deepEqual([refused.status, refused.param, refused.retryable], [400, 'model', false]);
  });
});

const videoInput = (extra: Partial<VideoInput> = {}): VideoInput => ({
  prompt: 'A lighthouse at dusk',
  seconds: '8',
  size: '1280x720',
  ...extra,
});

describe('openai videos', () => {
  it('creates, checkpoints the id before polling, reports progress, and stores video and thumbnail', async () => {
    const run = harness();
    const result = await openaiAdapter.generateVideo!(videoInput(), run.ctx);

    const create = fake.requests[0]!;
    assert.equal(create.path, '/v1/videos');
    assert.equal(create.headers['content-type'], 'application/json');
    assert.deepEqual(create.body, { model: 'sora-2', prompt: 'A lighthouse at dusk', seconds: '8', size: '1280x720' });
    // Written once, right after the create answered and before the first poll went out.
    assert.deepEqual(run.checkpoint.writes, [{ state: { openaiVideoId: 'video_fake0001' }, requestsSoFar: 1 }]);
    assert.deepEqual(run.progress, [0, 33, 66, 100]);
    assert.deepEqual(
      fake.requests.map((request) => `${request.method} ${request.path}`),
      [
        'POST /v1/videos',
        'GET /v1/videos/video_fake0001',
        'GET /v1/videos/video_fake0001',
        'GET /v1/videos/video_fake0001',
        'GET /v1/videos/video_fake0001/content',
        'GET /v1/videos/video_fake0001/content?variant=thumbnail',
      ],
    );

    assert.deepEqual(result.video, {
      key: `videos/${run.ctx.requestId}/video.mp4`,
      contentType: 'video/mp4',
      size: fakeVideoBytes('video_fake0001').length,
    });
    assert.deepEqual(await blobs.get(result.video.key), fakeVideoBytes('video_fake0001'));
    assert.equal(result.thumbnail?.contentType, 'image/webp');
    assert.deepEqual(await blobs.get(result.thumbnail!.key), fakeVideoBytes('video_fake0001', 'thumbnail'));
  });

  it("uses a catalog alias's default size when the client gave none", async () => {
    await openaiAdapter.generateVideo!(videoInput({ size: '' }), harness({ model: 'sora-2-landscape' }).ctx);
    assert.deepEqual(fake.requests[0]!.body, {
      model: 'sora-2',
      prompt: 'A lighthouse at dusk',
      seconds: '8',
      size: '1280x720',
    });
  });

  it('sends a reference image as a multipart file part', async () => {
    const png = Buffer.from('\u0089PNG\r\n\u001a\nfake image');
    const reference = await blobs.put('uploads/ref/image', png, 'image/png', 'first-frame.png');
    await openaiAdapter.generateVideo!(videoInput({ input_reference: reference }), harness().ctx);
    assert.match(String(fake.requests[0]!.headers['content-type']), /^multipart\/form-data/);
    assert.deepEqual(media.videos.get('video_fake0001')!.parts, [
      { name: 'model', value: 'sora-2' },
      { name: 'prompt', value: 'A lighthouse at dusk' },
      { name: 'seconds', value: '8' },
      { name: 'size', value: '1280x720' },
      { name: 'input_reference', filename: 'first-frame.png', type: 'image/png', bytes: png },
    ]);
  });

  it('stops at once when cancelled while polling, leaving the checkpoint for a resume', async () => {
    const controller = new AbortController();
    const reason = new Error('client gone');
    const run = harness({ signal: controller.signal, onProgress: () => controller.abort(reason) });
    await assert.rejects(openaiAdapter.generateVideo!(videoInput(), run.ctx), (error) => error === reason);
    assert.deepEqual(run.checkpoint.state, { openaiVideoId: 'video_fake0001' });
    assert.deepEqual(
      fake.requests.map((request) => request.method),
      ['POST'],
    );
  });

  it('a restarted worker resumes polling the checkpointed video instead of creating another', async () => {
    const controller = new AbortController();
    const first = harness({ signal: controller.signal, onProgress: () => controller.abort(new Error('worker died')) });
    await assert.rejects(openaiAdapter.generateVideo!(videoInput(), first.ctx));

    const second = harness({ state: first.checkpoint.state });
    const result = await openaiAdapter.generateVideo!(videoInput(), second.ctx);
    assert.equal(media.created, 1);
    assert.equal(fake.requests.filter((request) => request.method === 'POST').length, 1);
    assert.deepEqual(second.checkpoint.writes, []);
    assert.deepEqual(await blobs.get(result.video.key), fakeVideoBytes('video_fake0001'));
    assert.equal(second.progress.at(-1), 100);
  });

  it('a resumed video the vendor no longer knows fails without creating a new one', async () => {
    const error = await gatewayError(
      openaiAdapter.generateVideo!(videoInput(), harness({ state: { openaiVideoId: 'video_gone' } }).ctx),
    );
    assert.deepEqual([error.status, error.code, error.retryable], [502, 'vendor_job_lost', false]);
    assert.equal(media.created, 0);
  });

  it('a failed render is a 500 with the vendor reason and retry advice; a moderation block is a 400', async () => {
    media.failNextVideo({ code: 'internal_error', message: 'Render node crashed' });
    const failed = await gatewayError(openaiAdapter.generateVideo!(videoInput(), harness().ctx));
    assert.deepEqual([failed.status, failed.type, failed.code], [500, 'server_error', 'video_generation_failed']);
    assert.match(failed.message, /Render node crashed.*You can retry the request\./);

    media.failNextVideo({ code: 'moderation_blocked', message: 'The output was blocked by moderation.' });
    const blocked = await gatewayError(openaiAdapter.generateVideo!(videoInput(), harness().ctx));
    assert.deepEqual([blocked.status, blocked.code, blocked.param], [400, 'content_policy_violation', 'prompt']);
  });

  it('rides out a transient poll failure', async () => {
    const run = harness();
    fake.setDefault(async (request) => {
      if (request.method === 'GET' && fake.requests.filter((sent) => sent.method === 'GET').length === 1) {
        return { status: 503, json: { error: { message: 'busy', type: 'server_error', param: null, code: null } } };
      }
      return media.handler(request);
    });
    const result = await openaiAdapter.generateVideo!(videoInput(), run.ctx);
    assert.equal(result.video.contentType, 'video/mp4');
    assert.equal(media.created, 1);
  });
});

describe('mock transcriptions', () => {
  const file: BlobRef = { key: 'uploads/x/file', contentType: 'audio/wav', size: 48_000, filename: 'speech.wav' };
  const text = 'Mock transcription of speech.wav (48000 bytes).';
  const run = (extra: Partial<TranscriptionInput>) =>
    transcribeMock(transcription(file, extra), harness({ model: 'whisper-1', vendor: 'mock' }).ctx);

  it('answers json with text and duration usage', async () => {
    const result = await run({});
    assert.equal(result.contentType, 'application/json');
    assert.deepEqual(JSON.parse(result.body), { text, usage: { type: 'duration', seconds: 3 } });
  });

  it('answers text, srt and vtt as plain text in their own syntax', async () => {
    assert.equal((await run({ response_format: 'text' })).body, `${text}\n`);
    const srt = await run({ response_format: 'srt' });
    assert.match(srt.contentType, /^text\/plain/);
    assert.match(srt.body, /^(\d+\n\d{2}:\d{2}:\d{2},\d{3} --> \d{2}:\d{2}:\d{2},\d{3}\n[^\n]+\n\n)+$/);
    assert.ok(srt.body.startsWith('1\n00:00:00,000 --> '));
    assert.equal([...srt.body.matchAll(/^\d+$/gm)].map((match) => match[0]).join(','), '1,2');
    const vtt = await run({ response_format: 'vtt' });
    assert.match(vtt.body, /^WEBVTT\n\n(\d{2}:\d{2}:\d{2}\.\d{3} --> \d{2}:\d{2}:\d{2}\.\d{3}\n[^\n]+\n\n)+$/);
    assert.ok(vtt.body.includes('00:00:00.000 --> '));
    assert.ok(vtt.body.trimEnd().endsWith('(48000 bytes).'));
  });

  it('answers verbose_json with segments, words, or both as the granularities ask', async () => {
    const plain = JSON.parse((await run({ response_format: 'verbose_json', language: 'fr' })).body);
    assert.deepEqual([plain.task, plain.language, plain.duration, plain.text], ['transcribe', 'french', 3, text]);
    assert.equal(plain.words, undefined);
    assert.equal(plain.segments.length, 2);
    assert.equal(plain.segments.at(-1).end, 3);
    const words = JSON.parse((await run({ response_format: 'verbose_json', timestamp_granularities: ['word'] })).body);
    assert.equal(words.segments, undefined);
    assert.deepEqual(
      words.words.map((word: { word: string }) => word.word),
      ['Mock', 'transcription', 'of', 'speech.wav', '48000', 'bytes'],
    );
    const both = JSON.parse(
      (await run({ response_format: 'verbose_json', timestamp_granularities: ['word', 'segment'] })).body,
    );
    assert.ok(both.words.length > 0 && both.segments.length > 0);
  });

  it('fails on an error marker in the file name or the prompt', async () => {
    const marked = { ...file, filename: 'clip[mock:error:503].wav' };
    const error = await gatewayError(transcribeMock(transcription(marked), harness({ vendor: 'mock' }).ctx));
    assert.deepEqual([error.status, error.retryable], [503, true]);
    assert.equal((await gatewayError(run({ prompt: '[mock:error:400]' }))).status, 400);
  });
});

describe('mock translations', () => {
  const file: BlobRef = { key: 'uploads/x/file', contentType: 'audio/wav', size: 48_000, filename: 'rede.wav' };
  const text = 'Mock translation into English of rede.wav (48000 bytes).';
  const run = (extra: Partial<TranscriptionInput>) =>
    translateMock(transcription(file, extra), harness({ model: 'whisper-1', vendor: 'mock' }).ctx);

  it('answers json with the English text alone, as OpenAI writes a translation', async () => {
    assert.deepEqual(JSON.parse((await run({})).body), { text });
  });

  it('answers verbose_json in English with segments and the duration, no words and no usage', async () => {
    const verbose = JSON.parse((await run({ response_format: 'verbose_json' })).body);
    assert.deepEqual(
      [verbose.task, verbose.language, verbose.duration, verbose.text],
      ['translate', 'english', 3, text],
    );
    assert.equal(verbose.segments.length, 2);
    assert.equal(verbose.segments.at(-1).end, 3);
    assert.equal(verbose.words, undefined);
    assert.equal(verbose.usage, undefined);
  });

  it('answers text, srt and vtt in their own syntax, and heeds the markers', async () => {
    assert.equal((await run({ response_format: 'text' })).body, `${text}\n`);
    assert.match(
      (await run({ response_format: 'srt' })).body,
      /^1\n00:00:00,000 --> 00:00:01,500\nMock translation into English\n\n2\n/,
    );
    assert.match(
      (await run({ response_format: 'vtt' })).body,
      /^WEBVTT\n\n00:00:00\.000 --> 00:00:01\.500\nMock translation into English\n\n/,
    );
    assert.equal((await gatewayError(run({ prompt: '[mock:error:503]' }))).status, 503);
  });
});

interface Box {
  type: string;
  start: number;
  end: number;
  children: Box[];
}

const CONTAINERS = new Set(['moov', 'trak', 'mdia', 'minf', 'dinf', 'stbl']);

/** Walks ISO BMFF boxes, checking that every size fits its parent exactly. */
function walk(data: Buffer, start = 0, end = data.length): Box[] {
  const boxes: Box[] = [];
  for (let offset = start; offset < end;) {
    const size = data.readUInt32BE(offset);
    const type = data.toString('latin1', offset + 4, offset + 8);
    assert.ok(size >= 8 && offset + size <= end, `box ${type} at ${offset} has size ${size}`);
    boxes.push({
      type,
      start: offset,
      end: offset + size,
      children: CONTAINERS.has(type) ? walk(data, offset + 8, offset + size) : [],
    });
    offset += size;
  }
  return boxes;
}

function find(boxes: Box[], path: string): Box {
  const [head, ...rest] = path.split('/');
  const box = boxes.find((candidate) => candidate.type === head);
  assert.ok(box, `missing box ${head}`);
  return rest.length === 0 ? box : find(box.children, rest.join('/'));
}

/** Reads width and height back out of an SPS, independently of the writer. */
function readSpsSize(sps: Buffer): { width: number; height: number } {
  const rbsp = Buffer.from(
    sps
      .subarray(1)
      .filter(
        (_, index, bytes) => !(index >= 2 && bytes[index] === 3 && bytes[index - 1] === 0 && bytes[index - 2] === 0),
      ),
  );
  let bit = 24; // past profile, constraints and level
  const read = () => (rbsp[bit >> 3]! >> (7 - (bit++ & 7))) & 1;
  const ue = () => {
    let zeros = 0;
    while (read() === 0) zeros += 1;
    let value = 1;
    for (let index = 0; index < zeros; index += 1) value = (value << 1) | read();
    return value - 1;
  };
  ue(); // sps id
  ue(); // log2_max_frame_num_minus4
  assert.equal(ue(), 2, 'pic_order_cnt_type');
  ue(); // max_num_ref_frames
  read(); // gaps
  const widthInMbs = ue() + 1;
  const heightInMbs = ue() + 1;
  assert.equal(read(), 1, 'frame_mbs_only_flag');
  read(); // direct_8x8_inference_flag
  let [left, right, top, bottom] = [0, 0, 0, 0];
  if (read() === 1) [left, right, top, bottom] = [ue(), ue(), ue(), ue()];
  return { width: widthInMbs * 16 - 2 * (left + right), height: heightInMbs * 16 - 2 * (top + bottom) };
}

function checkMp4(data: Buffer, width: number, height: number, seconds: number): void {
  const boxes = walk(data);
  assert.equal(boxes.at(-1)!.end, data.length);
  assert.deepEqual(
    boxes.map((box) => box.type),
    ['ftyp', 'moov', 'mdat'],
  );
  assert.equal(data.toString('latin1', 8, 12), 'isom');
  const mvhd = find(boxes, 'moov/mvhd');
  assert.equal(data.readUInt32BE(mvhd.start + 24) / data.readUInt32BE(mvhd.start + 20), seconds);
  const tkhd = find(boxes, 'moov/trak/tkhd');
  assert.deepEqual(
    [data.readUInt32BE(tkhd.start + 84) / 0x10000, data.readUInt32BE(tkhd.start + 88) / 0x10000],
    [width, height],
  );
  const hdlr = find(boxes, 'moov/trak/mdia/hdlr');
  assert.equal(data.toString('latin1', hdlr.start + 16, hdlr.start + 20), 'vide');
  find(boxes, 'moov/trak/mdia/minf/vmhd');
  const stsd = find(boxes, 'moov/trak/mdia/minf/stbl/stsd');
  const avc1 = stsd.start + 16;
  assert.equal(data.toString('latin1', avc1 + 4, avc1 + 8), 'avc1');
  assert.deepEqual([data.readUInt16BE(avc1 + 32), data.readUInt16BE(avc1 + 34)], [width, height]);
  const avcC = avc1 + 86;
  assert.equal(data.toString('latin1', avcC + 4, avcC + 8), 'avcC');
  const spsLength = data.readUInt16BE(avcC + 14);
  assert.deepEqual(readSpsSize(data.subarray(avcC + 16, avcC + 16 + spsLength)), { width, height });

  const stsz = find(boxes, 'moov/trak/mdia/minf/stbl/stsz');
  const count = data.readUInt32BE(stsz.start + 16);
  assert.equal(count, seconds * 24);
  let total = 0;
  for (let index = 0; index < count; index += 1) total += data.readUInt32BE(stsz.start + 20 + index * 4);
  const mdat = find(boxes, 'mdat');
  assert.equal(total, mdat.end - mdat.start - 8);
  const stco = find(boxes, 'moov/trak/mdia/minf/stbl/stco');
  const offset = data.readUInt32BE(stco.start + 16);
  assert.equal(offset, mdat.start + 8);
  assert.equal(data[offset + 4]! & 0x1f, 5, 'the first sample is an IDR picture');
  for (const type of ['stts', 'stss', 'stsc']) find(boxes, `moov/trak/mdia/minf/stbl/${type}`);
}

describe('mock mp4', () => {
  it('builds a well-formed MP4 of the requested size and length', () => {
    checkMp4(buildMp4({ width: 720, height: 1280, seconds: 4 }), 720, 1280, 4);
    checkMp4(buildMp4({ width: 1792, height: 1024, seconds: 12 }), 1792, 1024, 12);
    // Sides that are not multiples of 16 are cropped in the SPS.
    checkMp4(buildMp4({ width: 1000, height: 562, seconds: 1 }), 1000, 562, 1);
  });

  it('is deterministic and small', () => {
    const video = buildMp4({ width: 1792, height: 1024, seconds: 12 });
    assert.deepEqual(video, buildMp4({ width: 1792, height: 1024, seconds: 12 }));
    assert.ok(video.length < 150_000, `${video.length} bytes`);
  });
});

describe('mock videos', () => {
  it('checkpoints its start, reports rising progress, and stores an MP4 of the requested shape', async () => {
    const run = harness({ vendor: 'mock' });
    const result = await generateMockVideo({ prompt: 'a cat', seconds: '4', size: '1280x720' }, run.ctx);
    assert.equal(run.checkpoint.writes.length, 1);
    assert.equal(typeof run.checkpoint.writes[0]!.state.mockVideoStartedAt, 'number');
    assert.equal(run.progress[0], 0);
    assert.equal(run.progress.at(-1), 100);
    assert.ok(run.progress.length >= 3, String(run.progress));
    assert.deepEqual(
      run.progress,
      [...run.progress].sort((a, b) => a - b),
    );
    assert.deepEqual(result.video, {
      key: `videos/${run.ctx.requestId}/video.mp4`,
      contentType: 'video/mp4',
      size: result.video.size,
    });
    checkMp4(await blobs.get(result.video.key), 1280, 720, 4);
  });

  it('resumes from the checkpointed start instead of starting over', async () => {
    const done = harness({
      vendor: 'mock',
      model: 'sora-2-portrait',
      state: { mockVideoStartedAt: Date.now() - 10_000 },
    });
    const result = await generateMockVideo({ prompt: 'a cat', seconds: '4', size: '' }, done.ctx);
    assert.deepEqual(done.progress, [100]);
    assert.deepEqual(done.checkpoint.writes, []);
    checkMp4(await blobs.get(result.video.key), 720, 1280, 4);

    const halfway = harness({ vendor: 'mock', state: { mockVideoStartedAt: Date.now() - 60 } });
    await generateMockVideo({ prompt: 'a cat', seconds: '4', size: '720x1280' }, halfway.ctx);
    assert.ok(halfway.progress[0]! >= 50, String(halfway.progress));
  });

  it('fails on markers, and stops at once when cancelled', async () => {
    const failed = await gatewayError(
      generateMockVideo(
        { prompt: 'a cat [mock:fail]', seconds: '4', size: '720x1280' },
        harness({ vendor: 'mock' }).ctx,
      ),
    );
    assert.deepEqual([failed.status, failed.type, failed.code], [500, 'server_error', 'video_generation_failed']);
    assert.match(failed.message, /You can retry the request\./);
    const limited = await gatewayError(
      generateMockVideo(
        { prompt: '[mock:error:429]', seconds: '4', size: '720x1280' },
        harness({ vendor: 'mock' }).ctx,
      ),
    );
    assert.equal(limited.status, 429);

    const controller = new AbortController();
    const reason = new Error('client gone');
    const run = harness({ vendor: 'mock', signal: controller.signal, onProgress: () => controller.abort(reason) });
    await assert.rejects(
      generateMockVideo({ prompt: 'a cat', seconds: '4', size: '720x1280' }, run.ctx),
      (error) => error === reason,
    );
  });
});
