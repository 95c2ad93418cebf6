/**
 * OpenAI's speech endpoint for tests and benchmarks, strict as the spec writes it: `POST /v1/audio/speech` with the
 * fields of `CreateSpeechRequest` and no other (an unknown field is OpenAI's 400), its three models, `instructions`
 * and `stream_format: "sse"` only for gpt-4o-mini-tts, a bearer key. The audio is a tone as long as the text (50 ms a
 * character at speed 1), real pcm, wav and mp3 (the other formats are bytes of their own, relayed, not decoded), sent
 * chunked in `pieces` writes with `pauseMs` between them: the audio itself under its content type, or the spec's
 * `speech.audio.delta` events and a `speech.audio.done` with usage. A test can hold a response after its first
 * piece until it releases it (`hold`), or cut the connection after it (`failNext`).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { PcmFormatter } from '../../workers/audio/encode.js';
import { closeServer, listenOnLoopback } from './fake-server.js';

export const FAKE_SPEECH_MODELS = ['tts-1', 'tts-1-hd', 'gpt-4o-mini-tts'];
const speechFields = new Set(['model', 'input', 'voice', 'instructions', 'response_format', 'speed', 'stream_format']);
const contentTypes: Record<string, string> = {
  mp3: 'audio/mpeg',
  opus: 'audio/opus',
  aac: 'audio/aac',
  flac: 'audio/flac',
  wav: 'audio/wav',
  pcm: 'audio/pcm',
};
/**
 * The fake's speech: 50 ms a character, 21 audio tokens a second (gpt-4o-mini-tts's rate), a token per 4 characters in.
 */
export const FAKE_SPEECH_SECONDS_PER_CHARACTER = 0.05;
const sampleRate = 24_000;

export interface FakeSpeechRequest {
  body: Record<string, unknown>;
  headers: IncomingMessage['headers'];
}

export interface FakeOpenAISpeech {
  /** Base URL including `/v1`. */
  url: string;
  requests: FakeSpeechRequest[];
  /** The usage each sse answer reported, in order. */
  usages: Array<{ input_tokens: number; output_tokens: number; total_tokens: number }>;
  /** The bytes of each answer's audio, in order (sse answers included). */
  audios: Buffer[];
  /**
   * The next answer waits after its first piece until `release` is called; `reached` resolves once that piece
   * was written.
   */
  hold(): { reached: Promise<void>; release(): void };
  /** The next answer writes its first piece, then its connection is destroyed. */
  failNext(): void;
  reset(): void;
  close(): Promise<void>;
}

/** The fake's audio of a text: a tone of 440 Hz, as long as the text takes. */
export async function fakeSpeechAudio(input: string, format: string, speed: number): Promise<Buffer> {
  const samples = Math.max(
    1200,
    Math.round((Array.from(input).length * FAKE_SPEECH_SECONDS_PER_CHARACTER * sampleRate) / speed),
  );
  const pcm = Buffer.alloc(samples * 2);
  for (let n = 0; n < samples; n++)
    pcm.writeInt16LE(Math.round(12_000 * Math.sin((2 * Math.PI * 440 * n) / sampleRate)), n * 2);
  if (format !== 'pcm' && format !== 'wav' && format !== 'mp3') {
    // Formats OpenAI encodes and the gateway only relays: bytes of their own, named by the format.
    return Buffer.concat([Buffer.from(`fake-${format}:`), pcm.subarray(0, Math.min(pcm.length, 4096))]);
  }
  const formatter = new PcmFormatter(format, sampleRate);
  const out: Buffer[] = [];
  for await (const bytes of formatter.write(pcm)) out.push(bytes);
  out.push(formatter.end());
  return Buffer.concat(out);
}

function refuse(
  res: ServerResponse,
  status: number,
  message: string,
  param: string | null = null,
  code: string | null = null,
): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: { message, type: 'invalid_request_error', param, code } }));
}

/** Why OpenAI would refuse this body, or undefined. */
function refusal(body: Record<string, unknown>): { message: string; param: string } | undefined {
  for (const key of Object.keys(body))
    if (!speechFields.has(key)) return { message: `Unrecognized request argument supplied: ${key}`, param: key };
  const { model, input, voice, instructions, response_format: format, speed, stream_format: stream } = body;
  if (typeof model !== 'string' || !FAKE_SPEECH_MODELS.includes(model))
    return { message: `Invalid model: ${String(model)}`, param: 'model' };
  if (typeof input !== 'string' || input.length === 0 || Array.from(input).length > 4096)
    return { message: 'input must be 1 to 4096 characters', param: 'input' };
  const customVoice =
    typeof voice === 'object' &&
    voice !== null &&
    Object.keys(voice).join() === 'id' &&
    typeof (voice as { id: unknown }).id === 'string';
  if (typeof voice !== 'string' && !customVoice)
    return { message: 'voice must be a voice name or {id}', param: 'voice' };
  if (instructions !== undefined && (typeof instructions !== 'string' || model !== 'gpt-4o-mini-tts'))
    return { message: 'instructions are not supported for this model', param: 'instructions' };
  if (format !== undefined && (typeof format !== 'string' || !(format in contentTypes)))
    return { message: `Invalid response_format: ${String(format)}`, param: 'response_format' };
  if (speed !== undefined && (typeof speed !== 'number' || speed < 0.25 || speed > 4))
    return { message: 'speed must be between 0.25 and 4', param: 'speed' };
  if (stream !== undefined && stream !== 'audio' && stream !== 'sse')
    return { message: `Invalid stream_format: ${String(stream)}`, param: 'stream_format' };
  if (stream === 'sse' && model !== 'gpt-4o-mini-tts')
    return { message: 'stream_format sse is not supported for tts-1 or tts-1-hd', param: 'stream_format' };
  return undefined;
}

export async function startFakeOpenAISpeech(
  options: { apiKey?: string; pieces?: number; pauseMs?: number } = {},
): Promise<FakeOpenAISpeech> {
  const apiKey = options.apiKey ?? 'sk-openai-test';
  const pieces = options.pieces ?? 4;
  const pauseMs = options.pauseMs ?? 5;
  const requests: FakeSpeechRequest[] = [];
  const usages: FakeOpenAISpeech['usages'] = [];
  const audios: Buffer[] = [];
  let held: { reached: () => void; released: Promise<void> } | undefined;
  let failing = false;
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      void (async () => {
        if (req.method !== 'POST' || req.url !== '/v1/audio/speech') return refuse(res, 404, `Unknown path ${req.url}`);
        if (req.headers.authorization !== `Bearer ${apiKey}`)
          return refuse(res, 401, 'Incorrect API key provided.', null, 'invalid_api_key');
        if (!/^application\/json/.test(req.headers['content-type'] ?? ''))
          return refuse(res, 400, 'Expected a JSON body.');
        let body: Record<string, unknown>;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
        } catch {
          return refuse(res, 400, 'We could not parse the JSON body of your request.');
        }
        if (typeof body !== 'object' || body === null || Array.isArray(body))
          return refuse(res, 400, 'The body must be a JSON object.');
        requests.push({ body, headers: req.headers });
        const refused = refusal(body);
        if (refused) return refuse(res, 400, refused.message, refused.param);
        const format = (body.response_format as string | undefined) ?? 'mp3';
        const input = body.input as string;
        const audio = await fakeSpeechAudio(input, format, (body.speed as number | undefined) ?? 1);
        audios.push(audio);
        const hold = held;
        held = undefined;
        const fail = failing;
        failing = false;
        const sse = body.stream_format === 'sse';
        res.writeHead(
          200,
          sse ? { 'content-type': 'text/event-stream; charset=utf-8' } : { 'content-type': contentTypes[format]! },
        );
        const size = Math.ceil(audio.length / pieces);
        for (let at = 0, n = 0; at < audio.length; at += size, n++) {
          const piece = audio.subarray(at, at + size);
          res.write(
            sse
              ? `data: ${JSON.stringify({ type: 'speech.audio.delta', audio: piece.toString('base64') })}\n\n`
              : piece,
          );
          if (n === 0 && fail) {
            await sleep(pauseMs);
            res.destroy();
            return;
          }
          if (n === 0 && hold) {
            hold.reached();
            await hold.released;
          } else await sleep(pauseMs);
          if (res.destroyed) return;
        }
        if (sse) {
          const seconds =
            (Array.from(input).length * FAKE_SPEECH_SECONDS_PER_CHARACTER) / ((body.speed as number | undefined) ?? 1);
          const inputTokens =
            Math.ceil(Array.from(input).length / 4) +
            (typeof body.instructions === 'string' ? Math.ceil(body.instructions.length / 4) : 0);
          const usage = { input_tokens: inputTokens, output_tokens: Math.ceil(seconds * 21), total_tokens: 0 };
          usage.total_tokens = usage.input_tokens + usage.output_tokens;
          usages.push(usage);
          res.write(`data: ${JSON.stringify({ type: 'speech.audio.done', usage })}\n\n`);
        }
        res.end();
      })();
    });
  });
  const port = await listenOnLoopback(server);
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    usages,
    audios,
    hold() {
      let reached!: () => void;
      let release!: () => void;
      const reachedPromise = new Promise<void>((resolve) => (reached = resolve));
      const released = new Promise<void>((resolve) => (release = resolve));
      held = { reached, released };
      return { reached: reachedPromise, release };
    },
    failNext() {
      failing = true;
    },
    reset() {
      requests.length = 0;
      usages.length = 0;
      audios.length = 0;
      held = undefined;
      failing = false;
    },
    close: () => closeServer(server),
  };
}
