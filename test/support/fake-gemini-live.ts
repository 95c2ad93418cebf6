/**
 * A strict fake of Gemini Live (the Gemini API's `BidiGenerateContent` WebSocket) for tests.
 *
 * It refuses what the real service refuses, the way it does: a WebSocket upgrade anywhere but the Live path is an
 * HTTP 404; a message that is not JSON, not exactly one of `setup`/`clientContent`/`realtimeInput`/`toolResponse`,
 * or that carries a field Google's schema does not have is answered by a close with 1007 and Google's wording
 * ("Invalid JSON payload received. Unknown name …"); a key it does not know is a 1007 ("API key not valid") at
 * `setup`; a model it does not serve is a 1008. `setup` must come first and only once; audio must be
 * `audio/pcm;rate=16000` (what Gemini hears: the fake checks the gateway resampled), even-length, valid base64;
 * activity signals only when automatic activity detection is off; a function response must name a pending call's
 * id and name.
 *
 * It answers as Gemini does: `setupComplete`, then per turn (a `clientContent` with `turnComplete`, an
 * `activityEnd` after audio, an `audioStreamEnd` or a `realtimeInput.text` with automatic detection) an input
 * transcription when asked, the model's audio (pcm16 at 24 kHz, a 440 Hz tone) or text parts, output
 * transcriptions when asked, `generationComplete`, then `turnComplete` with `usageMetadata`. A turn whose text
 * mentions "weather", on a session that declared functions, is a `toolCall` of the first one (`{"city":"Paris"}`,
 * id `fc-<n>`); the function's response is answered `Tool said: <response>`. A turn whose text says "hold" sends
 * its first chunk, then waits for `release()`.
 *
 * Every session is kept (`sessions`): the setup and every message as received, the audio heard, the usage sent,
 * how it closed. A test can close a session with any code, send `goAway`, and count the open ones.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { closeServer, listenOnLoopback } from './fake-server.js';

export const GEMINI_LIVE_PATH = '/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent';

/** The text the fake speaks (its output transcription) or writes, chunk by chunk. */
export const FAKE_LIVE_CHUNKS = ['Hello ', 'from ', 'Gemini ', 'Live.'];
export const FAKE_LIVE_TEXT = FAKE_LIVE_CHUNKS.join('');
/** The tone the fake speaks, and how much of it per chunk (40 ms at 24 kHz). */
export const FAKE_LIVE_TONE_HZ = 440;
export const FAKE_LIVE_CHUNK_SAMPLES = 960;
/** Usage the fake reports per turn: text prompt tokens, plus 32 per second of audio heard; 10 per chunk out. */
export const FAKE_LIVE_PROMPT_TEXT_TOKENS = 120;
export const FAKE_LIVE_TOKENS_PER_CHUNK = 10;

type Json = Record<string, unknown>;

export interface FakeLiveSession {
  /** Index among every session the fake took. */
  index: number;
  headers: IncomingMessage['headers'];
  query: URLSearchParams;
  setup: Json | undefined;
  /** Every client message after `setup`, parsed, in order. */
  messages: Json[];
  /** Every byte of audio heard (pcm16 at 16 kHz), and the MIME types it came under. */
  audio: Buffer;
  audioMimeTypes: string[];
  /** Every `usageMetadata` sent, in order. */
  usageSent: Json[];
  /** How it closed, by whom. */
  closed: { code: number; reason: string; by: 'fake' | 'client' } | undefined;
  /** Ends a held turn ("hold"). */
  release(): void;
  /** Closes with this code and reason, as Gemini ends a session. */
  close(code: number, reason: string): void;
  /** Sends Gemini's `goAway` (e.g. `"5s"` left). */
  goAway(timeLeft: string): void;
  /** Sends a raw frame as it is. */
  send(message: unknown): void;
}

export interface FakeGeminiLiveOptions {
  apiKey?: string;
  /** Models served (`models/` left off). */
  models?: string[];
  /** Models that speak natively (refuse TEXT output, as native-audio models do). */
  nativeAudioModels?: string[];
  /** Model audio chunks per answer. */
  audioChunks?: number;
  /** Reports `cachedContentTokenCount` of this many text tokens per turn. */
  cachedTokens?: number;
  /** False: pings go unanswered, as from a vendor that hangs (default true). */
  answerPings?: boolean;
  /**
   * How long the model takes to start its answer to a function's response (default 0: at once). Gemini's model
   * takes a while to its first token, so a client's `response.create` sent right behind the function's output
   * reaches the gateway's translation first; a test of that round trip says so with a delay.
   */
  toolAnswerDelayMs?: number;
}

export interface FakeGeminiLive {
  /** The channel's base URL (`http://127.0.0.1:<port>`). */
  url: string;
  apiKey: string;
  sessions: FakeLiveSession[];
  openSessions(): number;
  /** Resolves once `count` sessions have been taken. */
  waitForSessions(count: number): Promise<FakeLiveSession>;
  close(): Promise<void>;
}

const CLOSE_INVALID = 1007;
const CLOSE_POLICY = 1008;

const unknownField = (name: string, where: string) =>
  `Invalid JSON payload received. Unknown name "${name}" at '${where}': Cannot find field.`;

class Refused extends Error {
  constructor(
    readonly code: number,
    reason: string,
  ) {
    super(reason);
  }
}

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function only(value: unknown, where: string, allowed: readonly string[]): Json {
  if (!isObject(value)) throw new Refused(CLOSE_INVALID, `Invalid value at '${where}', expected an object.`);
  for (const key of Object.keys(value))
    if (!allowed.includes(key)) throw new Refused(CLOSE_INVALID, unknownField(key, where));
  return value;
}

function checkBase64Pcm(data: unknown, where: string): Buffer {
  if (typeof data !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(data) || data.length % 4 !== 0) {
    throw new Refused(CLOSE_INVALID, `Invalid value at '${where}' (TYPE_BYTES), Base64 decoding failed.`);
  }
  const bytes = Buffer.from(data, 'base64');
  if (bytes.length % 2 !== 0)
    throw new Refused(CLOSE_INVALID, `Invalid audio at '${where}': pcm16 needs an even number of bytes.`);
  return bytes;
}

function checkContent(value: unknown, where: string): Json {
  const content = only(value, where, ['role', 'parts']);
  if (content.role !== undefined && content.role !== 'user' && content.role !== 'model') {
    throw new Refused(CLOSE_INVALID, `Invalid value at '${where}.role': "${String(content.role)}".`);
  }
  if (!Array.isArray(content.parts) || content.parts.length === 0)
    throw new Refused(CLOSE_INVALID, `'${where}.parts' must not be empty.`);
  content.parts.forEach((part, i) => {
    const checked = only(part, `${where}.parts[${i}]`, ['text', 'inlineData']);
    if (checked.text !== undefined && typeof checked.text !== 'string')
      throw new Refused(CLOSE_INVALID, `Invalid value at '${where}.parts[${i}].text'.`);
    if (checked.inlineData !== undefined)
      only(checked.inlineData, `${where}.parts[${i}].inlineData`, ['mimeType', 'data']);
  });
  return content;
}

function checkSetup(
  value: unknown,
  options: Required<Omit<FakeGeminiLiveOptions, 'cachedTokens' | 'answerPings' | 'toolAnswerDelayMs'>>,
): Json {
  const setup = only(value, 'setup', [
    'model',
    'generationConfig',
    'systemInstruction',
    'tools',
    'realtimeInputConfig',
    'sessionResumption',
    'contextWindowCompression',
    'inputAudioTranscription',
    'outputAudioTranscription',
    'proactivity',
  ]);
  const model = typeof setup.model === 'string' ? setup.model : '';
  const id = model.startsWith('models/') ? model.slice('models/'.length) : '';
  if (!options.models.includes(id)) {
    throw new Refused(
      CLOSE_POLICY,
      `models/${id || model} is not found for API version v1beta, or is not supported for bidiGenerateContent. ` +
        `Call ListModels to see the list of available models and their supported methods.`,
    );
  }
  if (setup.generationConfig !== undefined) {
    const config = only(setup.generationConfig, 'setup.generation_config', [
      'responseModalities',
      'speechConfig',
      'maxOutputTokens',
      'temperature',
      'topP',
      'topK',
      'candidateCount',
      'presencePenalty',
      'frequencyPenalty',
      'mediaResolution',
      'thinkingConfig',
      'enableAffectiveDialog',
    ]);
    if (config.responseModalities !== undefined) {
      const modalities = config.responseModalities;
      if (
        !Array.isArray(modalities) ||
        modalities.length !== 1 ||
        !['AUDIO', 'TEXT'].includes(modalities[0] as string)
      ) {
        throw new Refused(
          CLOSE_INVALID,
          "Invalid value at 'setup.generation_config.response_modalities': exactly one of AUDIO or TEXT.",
        );
      }
      if (modalities[0] === 'TEXT' && options.nativeAudioModels.includes(id)) {
        throw new Refused(CLOSE_INVALID, 'Text output is not supported for native audio output model.');
      }
    }
    if (
      config.maxOutputTokens !== undefined &&
      (!Number.isInteger(config.maxOutputTokens) || (config.maxOutputTokens as number) < 1)
    ) {
      throw new Refused(CLOSE_INVALID, "Invalid value at 'setup.generation_config.max_output_tokens'.");
    }
    if (config.speechConfig !== undefined) {
      const speech = only(config.speechConfig, 'setup.generation_config.speech_config', [
        'voiceConfig',
        'languageCode',
      ]);
      const voice = only(speech.voiceConfig, 'setup.generation_config.speech_config.voice_config', [
        'prebuiltVoiceConfig',
      ]);
      const prebuilt = only(
        voice.prebuiltVoiceConfig,
        'setup.generation_config.speech_config.voice_config.prebuilt_voice_config',
        ['voiceName'],
      );
      if (typeof prebuilt.voiceName !== 'string') throw new Refused(CLOSE_INVALID, "Invalid value at 'voice_name'.");
    }
  }
  if (setup.systemInstruction !== undefined) checkContent(setup.systemInstruction, 'setup.system_instruction');
  if (setup.tools !== undefined) {
    if (!Array.isArray(setup.tools)) throw new Refused(CLOSE_INVALID, "Invalid value at 'setup.tools'.");
    setup.tools.forEach((tool, t) => {
      const checked = only(tool, `setup.tools[${t}]`, ['functionDeclarations', 'googleSearch', 'codeExecution']);
      if (checked.functionDeclarations === undefined) return;
      if (!Array.isArray(checked.functionDeclarations))
        throw new Refused(CLOSE_INVALID, `Invalid value at 'setup.tools[${t}].function_declarations'.`);
      checked.functionDeclarations.forEach((declaration, d) => {
        const fn = only(declaration, `setup.tools[${t}].function_declarations[${d}]`, [
          'name',
          'description',
          'parameters',
          'parametersJsonSchema',
          'behavior',
          'response',
        ]);
        if (typeof fn.name !== 'string' || !/^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$/.test(fn.name)) {
          throw new Refused(
            CLOSE_INVALID,
            `Invalid function name at 'setup.tools[${t}].function_declarations[${d}].name'.`,
          );
        }
      });
    });
  }
  if (setup.realtimeInputConfig !== undefined) {
    const config = only(setup.realtimeInputConfig, 'setup.realtime_input_config', [
      'automaticActivityDetection',
      'activityHandling',
      'turnCoverage',
    ]);
    if (config.automaticActivityDetection !== undefined) {
      only(config.automaticActivityDetection, 'setup.realtime_input_config.automatic_activity_detection', [
        'disabled',
        'startOfSpeechSensitivity',
        'endOfSpeechSensitivity',
        'prefixPaddingMs',
        'silenceDurationMs',
      ]);
    }
  }
  if (setup.inputAudioTranscription !== undefined)
    only(setup.inputAudioTranscription, 'setup.input_audio_transcription', []);
  if (setup.outputAudioTranscription !== undefined)
    only(setup.outputAudioTranscription, 'setup.output_audio_transcription', []);
  return setup;
}

function toneChunk(offset: number): string {
  const pcm = Buffer.alloc(FAKE_LIVE_CHUNK_SAMPLES * 2);
  for (let i = 0; i < FAKE_LIVE_CHUNK_SAMPLES; i++) {
    pcm.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * FAKE_LIVE_TONE_HZ * (offset + i)) / 24_000)), i * 2);
  }
  return pcm.toString('base64');
}

export async function startFakeGeminiLive(options: FakeGeminiLiveOptions = {}): Promise<FakeGeminiLive> {
  const settings = {
    apiKey: options.apiKey ?? 'gemini-test-key',
    models: options.models ?? ['gemini-2.5-flash-native-audio-preview-09-2025', 'gemini-live-2.5-flash-preview'],
    nativeAudioModels: options.nativeAudioModels ?? ['gemini-2.5-flash-native-audio-preview-09-2025'],
    audioChunks: options.audioChunks ?? 4,
  };
  const sessions: FakeLiveSession[] = [];
  const waiters: Array<{ count: number; resolve: (session: FakeLiveSession) => void }> = [];
  const server: Server = createServer((_request, response) => {
    response.writeHead(404, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ error: { code: 404, message: 'Not Found', status: 'NOT_FOUND' } }));
  });
  const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, autoPong: options.answerPings ?? true });

  server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(request.url ?? '/', 'http://fake');
    if (url.pathname !== GEMINI_LIVE_PATH) {
      socket.end(
        'HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\nconnection: ' +
          'close\r\n\r\n{"error":{"code":404,"message":"Not Found","status":"NOT_FOUND"}}',
      );
      return;
    }
    wss.handleUpgrade(request, socket, head, (ws) => serve(ws, request, url.searchParams));
  });

  function serve(ws: WebSocket, request: IncomingMessage, query: URLSearchParams) {
    let setup: Json | undefined;
    let releaseHold: (() => void) | undefined;
    let audioInTurn = 0;
    let activityOpen = false;
    let pendingText: string[] = [];
    let callCount = 0;
    const pendingCalls = new Map<string, string>();
    let turnRunning = false;
    let toneOffset = 0;

    const session: FakeLiveSession = {
      index: sessions.length,
      headers: request.headers,
      query,
      setup: undefined,
      messages: [],
      audio: Buffer.alloc(0),
      audioMimeTypes: [],
      usageSent: [],
      closed: undefined,
      release: () => {
        const release = releaseHold;
        releaseHold = undefined;
        release?.();
      },
      close: (code, reason) => end(code, reason),
      goAway: (timeLeft) => send({ goAway: { timeLeft } }),
      send: (message) => send(message),
    };
    sessions.push(session);
    for (const waiter of waiters.filter((w) => sessions.length >= w.count)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve(sessions[waiter.count - 1]!);
    }

    function send(message: unknown) {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(message));
    }
    function end(code: number, reason: string) {
      if (session.closed) return;
      session.closed = { code, reason, by: 'fake' };
      session.release();
      ws.close(code, reason.slice(0, 120));
    }
    ws.on('close', (code, reason) => {
      session.closed ??= { code, reason: reason.toString(), by: 'client' };
      session.release();
    });

    const generation = () => (setup!.generationConfig as Json | undefined) ?? {};
    const speaks = () => ((generation().responseModalities as string[] | undefined)?.[0] ?? 'AUDIO') === 'AUDIO';
    const automatic = () =>
      (((setup!.realtimeInputConfig as Json | undefined)?.automaticActivityDetection as Json | undefined)?.disabled as
        boolean | undefined) !== true;
    const declarations = () =>
      ((setup!.tools as Json[] | undefined) ?? []).flatMap(
        (tool) => (tool.functionDeclarations as Json[] | undefined) ?? [],
      );

    function usage(audioBytes: number, chunks: number, kind: 'AUDIO' | 'TEXT'): Json {
      const audioTokens = Math.ceil((audioBytes / 2 / 16_000) * 32);
      const promptTokens = FAKE_LIVE_PROMPT_TEXT_TOKENS + audioTokens;
      const responseTokens = chunks * FAKE_LIVE_TOKENS_PER_CHUNK;
      const metadata: Json = {
        promptTokenCount: promptTokens,
        responseTokenCount: responseTokens,
        totalTokenCount: promptTokens + responseTokens,
        promptTokensDetails: [
          { modality: 'TEXT', tokenCount: FAKE_LIVE_PROMPT_TEXT_TOKENS },
          ...(audioTokens > 0 ? [{ modality: 'AUDIO', tokenCount: audioTokens }] : []),
        ],
        responseTokensDetails: [{ modality: kind, tokenCount: responseTokens }],
      };
      if (options.cachedTokens) {
        metadata.cachedContentTokenCount = options.cachedTokens;
        metadata.cacheTokensDetails = [{ modality: 'TEXT', tokenCount: options.cachedTokens }];
      }
      session.usageSent.push(metadata);
      return metadata;
    }

    async function runTurn(text: string, audioBytes: number) {
      turnRunning = true;
      try {
        if (audioBytes > 0 && setup!.inputAudioTranscription !== undefined) {
          send({ serverContent: { inputTranscription: { text: `heard ${Math.round(audioBytes / 32)} ms` } } });
          send({ serverContent: { inputTranscription: { finished: true } } });
        }
        const fn = declarations()[0];
        if (fn !== undefined && /weather/i.test(text)) {
          const id = `fc-${++callCount}`;
          pendingCalls.set(id, fn.name as string);
          send({
            toolCall: { functionCalls: [{ id, name: fn.name, args: { city: 'Paris' } }] },
            usageMetadata: usage(audioBytes, 1, 'TEXT'),
          });
          return;
        }
        await answer(
          text === '' ? FAKE_LIVE_CHUNKS : /^Tool said: /.test(text) ? [text] : FAKE_LIVE_CHUNKS,
          /hold/i.test(text),
          audioBytes,
        );
      } finally {
        turnRunning = false;
      }
    }

    async function answer(chunks: string[], hold: boolean, audioBytes: number) {
      const audio = speaks();
      const transcribe = setup!.outputAudioTranscription !== undefined;
      const count = audio ? Math.max(settings.audioChunks, chunks.length) : chunks.length;
      for (let i = 0; i < count; i++) {
        if (session.closed) return;
        if (audio) {
          send({
            serverContent: {
              modelTurn: { parts: [{ inlineData: { mimeType: 'audio/pcm;rate=24000', data: toneChunk(toneOffset) } }] },
            },
          });
          toneOffset += FAKE_LIVE_CHUNK_SAMPLES;
          if (transcribe && chunks[i] !== undefined)
            send({ serverContent: { outputTranscription: { text: chunks[i] } } });
        } else {
          send({ serverContent: { modelTurn: { role: 'model', parts: [{ text: chunks[i] }] } } });
        }
        if (i === 0 && hold) await new Promise<void>((resolve) => (releaseHold = resolve));
      }
      if (session.closed) return;
      send({ serverContent: { generationComplete: true } });
      send({
        serverContent: { turnComplete: true },
        usageMetadata: usage(audioBytes, count, audio ? 'AUDIO' : 'TEXT'),
      });
    }

    function startTurn(text: string) {
      if (turnRunning) throw new Refused(CLOSE_INVALID, 'A turn is already being generated.');
      const audioBytes = audioInTurn;
      audioInTurn = 0;
      void runTurn(text, audioBytes).catch((error: unknown) =>
        end(1011, `Internal error: ${(error as Error).message}`),
      );
    }

    function handle(message: Json) {
      const keys = Object.keys(message);
      if (keys.length !== 1)
        throw new Refused(
          CLOSE_INVALID,
          keys.length === 0
            ? 'Empty message.'
            : `Exactly one of setup, clientContent, realtimeInput, toolResponse per message (got ${keys.join(', ')}).`,
        );
      const [kind] = keys as [string];
      if (!['setup', 'clientContent', 'realtimeInput', 'toolResponse'].includes(kind))
        throw new Refused(CLOSE_INVALID, unknownField(kind, ''));
      if (kind === 'setup') {
        if (setup !== undefined)
          throw new Refused(CLOSE_INVALID, 'setup must be sent only once, as the first message.');
        const key = request.headers['x-goog-api-key'] ?? query.get('key');
        if (key !== settings.apiKey)
          throw new Refused(CLOSE_INVALID, 'API key not valid. Please pass a valid API key.');
        setup = checkSetup(message.setup, settings);
        session.setup = setup;
        send({ setupComplete: {} });
        return;
      }
      if (setup === undefined) throw new Refused(CLOSE_INVALID, 'The first message must be setup.');
      session.messages.push(message);

      if (kind === 'clientContent') {
        const content = only(message.clientContent, 'client_content', ['turns', 'turnComplete']);
        if (content.turns !== undefined) {
          if (!Array.isArray(content.turns))
            throw new Refused(CLOSE_INVALID, "Invalid value at 'client_content.turns'.");
          content.turns.forEach((turn, i) => {
            const checked = checkContent(turn, `client_content.turns[${i}]`);
            if (checked.role !== 'model')
              for (const part of checked.parts as Json[])
                if (typeof part.text === 'string') pendingText.push(part.text);
          });
        }
        if (content.turnComplete === true) {
          const text = pendingText.join(' ');
          pendingText = [];
          startTurn(text);
        }
        return;
      }

      if (kind === 'realtimeInput') {
        const input = only(message.realtimeInput, 'realtime_input', [
          'audio',
          'video',
          'text',
          'activityStart',
          'activityEnd',
          'audioStreamEnd',
          'mediaChunks',
        ]);
        if (Object.keys(input).length !== 1)
          throw new Refused(CLOSE_INVALID, 'realtime_input takes exactly one of its fields per message.');
        if (input.audio !== undefined) {
          const blob = only(input.audio, 'realtime_input.audio', ['data', 'mimeType']);
          if (blob.mimeType !== 'audio/pcm;rate=16000') {
            throw new Refused(
              CLOSE_INVALID,
              `Unsupported audio mime type "${String(blob.mimeType)}": this fake hears only audio/pcm;rate=16000.`,
            );
          }
          if (!automatic() && !activityOpen)
            throw new Refused(
              CLOSE_INVALID,
              'Audio outside an activity while automatic activity detection is disabled.',
            );
          const bytes = checkBase64Pcm(blob.data, 'realtime_input.audio.data');
          session.audio = Buffer.concat([session.audio, bytes]);
          session.audioMimeTypes.push(blob.mimeType);
          audioInTurn += bytes.length;
          return;
        }
        if (input.activityStart !== undefined || input.activityEnd !== undefined) {
          if (automatic())
            throw new Refused(
              CLOSE_INVALID,
              'Explicit activity control is not supported when automatic activity detection is enabled.',
            );
          only(input.activityStart ?? input.activityEnd, 'realtime_input.activity', []);
          if (input.activityStart !== undefined) {
            if (activityOpen) throw new Refused(CLOSE_INVALID, 'activityStart while an activity is open.');
            activityOpen = true;
            return;
          }
          if (!activityOpen) throw new Refused(CLOSE_INVALID, 'activityEnd without activityStart.');
          activityOpen = false;
          startTurn(pendingText.splice(0).join(' '));
          return;
        }
        if (input.audioStreamEnd !== undefined) {
          if (input.audioStreamEnd !== true)
            throw new Refused(CLOSE_INVALID, "Invalid value at 'realtime_input.audio_stream_end'.");
          if (audioInTurn > 0) startTurn('');
          return;
        }
        if (input.text !== undefined) {
          if (typeof input.text !== 'string')
            throw new Refused(CLOSE_INVALID, "Invalid value at 'realtime_input.text'.");
          if (automatic()) startTurn(input.text);
          else pendingText.push(input.text);
          return;
        }
        throw new Refused(CLOSE_INVALID, 'realtime_input: video and media chunks are not served by this fake.');
      }

      const response = only(message.toolResponse, 'tool_response', ['functionResponses']);
      if (!Array.isArray(response.functionResponses) || response.functionResponses.length === 0) {
        throw new Refused(CLOSE_INVALID, "'tool_response.function_responses' must not be empty.");
      }
      const said: string[] = [];
      response.functionResponses.forEach((item, i) => {
        const fn = only(item, `tool_response.function_responses[${i}]`, [
          'id',
          'name',
          'response',
          'scheduling',
          'willContinue',
        ]);
        const name = typeof fn.id === 'string' ? pendingCalls.get(fn.id) : undefined;
        if (name === undefined)
          throw new Refused(CLOSE_INVALID, `Function response id "${String(fn.id)}" matches no pending function call.`);
        if (fn.name !== name)
          throw new Refused(
            CLOSE_INVALID,
            `Function response name "${String(fn.name)}" is not the call's ("${name}").`,
          );
        if (!isObject(fn.response))
          throw new Refused(
            CLOSE_INVALID,
            `Invalid value at 'tool_response.function_responses[${i}].response', expected an object.`,
          );
        pendingCalls.delete(fn.id as string);
        said.push(JSON.stringify(fn.response));
      });
      if (pendingCalls.size === 0) {
        const answer = () => {
          if (!session.closed) startTurn(`Tool said: ${said.join(' ')}`);
        };
        if (options.toolAnswerDelayMs) setTimeout(answer, options.toolAnswerDelayMs);
        else answer();
      }
    }

    ws.on('message', (data, isBinary) => {
      if (session.closed) return;
      try {
        let parsed: unknown;
        try {
          parsed = JSON.parse(isBinary ? Buffer.from(data as Buffer).toString('utf8') : data.toString());
        } catch {
          throw new Refused(CLOSE_INVALID, 'Invalid JSON payload received.');
        }
        if (!isObject(parsed)) throw new Refused(CLOSE_INVALID, 'Invalid JSON payload received. Expected an object.');
        handle(parsed);
      } catch (error) {
        if (error instanceof Refused) end(error.code, error.message);
        else end(1011, `Internal error: ${(error as Error).message}`);
      }
    });
  }

  const port = await listenOnLoopback(server);
  return {
    url: `http://127.0.0.1:${port}`,
    apiKey: settings.apiKey,
    sessions,
    openSessions: () => sessions.filter((session) => session.closed === undefined).length,
    waitForSessions: (count) =>
      sessions.length >= count
        ? Promise.resolve(sessions[count - 1]!)
        : new Promise((resolve) => waiters.push({ count, resolve })),
    close: async () => {
      for (const session of sessions) session.release();
      for (const client of wss.clients) client.terminate();
      wss.close();
      await closeServer(server);
    },
  };
}
