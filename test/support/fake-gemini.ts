/**
 * A strict fake of the Gemini API (Generative Language API, `/v1beta`, and the `/v1` spelling) for tests.
 * It refuses what the real API refuses, with Google's error envelope, before any scripted answer is used
 * (`fake-gemini-requests.ts` holds the checks): so every test also checks the outgoing request, and a gateway
 * passing a client's request through is held to what Google takes. It keeps every request as it arrived
 * (`requests`: a thought signature or a safety setting can be compared byte for byte).
 *
 * By default it plays the conversation every fake vendor plays: a request that offers function declarations
 * and has no function response last is answered by a call of the first one (`{"city":"Oslo"}`, or the
 * arguments `toolArguments` names for it), carrying a thought signature on a thinking model (Gemini 2.5 and 3,
 * which later accept only the signatures issued); a function response is answered `Tool said: <response>`;
 * anything else with text. `countTokens` counts a quarter token per character, `embedContent` and
 * `batchEmbedContents` answer `fakeEmbedding` of each text on an embedding model. A stream is answered in the
 * form asked: SSE events with `alt=sse`, else Google's default, one JSON array sent in pieces.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { closeServer, FakePauses, listenOnLoopback, writeFlushed } from './fake-server.js';
import {
  checkBatchEmbedRequest,
  checkCountRequest,
  checkEmbedContent,
  checkGenerateRequest,
  declarationsOf,
  invalid,
  isObject,
  Refusal,
} from './fake-gemini-requests.js';
import type { Json } from './fake-gemini-requests.js';

export interface RecordedRequest {
  method: string;
  /** Path with query, e.g. `/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse`. */
  path: string;
  headers: IncomingHttpHeaders;
  body: unknown;
  rawBody: string;
  aborted: boolean;
}

interface Timing {
  delayMs?: number;
}
interface SseOptions extends Timing {
  status?: number;
  headers?: Record<string, string>;
  /** Cut the body into pieces of this many bytes (may cut inside `\r\n` or a UTF-8 character). */
  chunkSize?: number;
  /** Pause between events (or `chunkSize` pieces). */
  chunkDelayMs?: number;
  /** Keep the connection open after the body. */
  hang?: boolean;
  /** Drop the connection after the body. */
  destroyAtEnd?: boolean;
}

export type FakeGeminiResponse =
  | (Timing & { status?: number; headers?: Record<string, string>; json: unknown })
  | (Timing & { status: number; headers?: Record<string, string>; text: string })
  /**
   * Payloads framed as Gemini frames them: `data: <json>\r\n\r\n`, no terminator, with `alt=sse`; else elements of one
   * JSON array.
   */
  | (SseOptions & { chunks: unknown[] })
  /** A recorded `.chunks.jsonl` fixture, one payload per line, framed like `chunks`. */
  | (SseOptions & { chunksFile: string })
  | (SseOptions & { sse: string })
  | (Timing & { hang: true })
  | (Timing & { destroy: true });

export type FakeGeminiHandler = (request: RecordedRequest) => FakeGeminiResponse | undefined;

export interface FakeGemini {
  /** Base URL without the version path, like `https://generativelanguage.googleapis.com`. */
  url: string;
  requests: RecordedRequest[];
  readonly inFlight: number;
  readonly maxInFlight: number;
  readonly abortedRequests: number;
  /** Every thought signature the fake handed out; Gemini 3 models accept only these (or Google's bypass value). */
  readonly issuedSignatures: ReadonlySet<string>;
  enqueue(...responses: FakeGeminiResponse[]): void;
  setDefault(handler: FakeGeminiHandler | null): void;
  reset(): void;
  close(): Promise<void>;
}

export const FAKE_GEMINI_PIECES = ['Hello', ' from', ' fake', ' upstream'] as const;
export const FAKE_GEMINI_TEXT = FAKE_GEMINI_PIECES.join('');
export const FAKE_GEMINI_USAGE = { promptTokenCount: 12, candidatesTokenCount: 4, totalTokenCount: 16 };
export const FAKE_TOOL_ARGS = { city: 'Oslo' };

/** Deterministic vector for a text: what the fake's `batchEmbedContents` returns. */
export function fakeEmbedding(text: string, dimensions = 8): number[] {
  const hash = createHash('sha256').update(text).digest();
  return Array.from({ length: dimensions }, (_, index) => ((hash[index % 32]! + index) % 256) / 128 - 1);
}

export const geminiError = (code: number, status: string, message: string, details?: unknown[]) => ({
  error: { code, message, status, ...(details ? { details } : {}) },
});

/**
 * The fake's count of a text: a quarter token per character, rounded up (what `countTokens` and no other answer says).
 */
export const fakeTokenCount = (text: string) => Math.ceil(text.length / 4);

/** Models that think, and so sign their function calls: Gemini 2.5 and 3, and the aliases that name them. */
export const isThinkingModel = (model: string) => /^gemini-(2\.5|3)|^gemini-(flash|pro|flash-lite)-latest$/.test(model);

/** Models that embed (and only embed): Google's embedding models. */
const isEmbeddingModel = (model: string) => /embedding/.test(model);

export interface FakeGeminiOptions {
  /** The one key accepted (x-goog-api-key or ?key=); any key when unset. */
  apiKey?: string;
  /** Record requests in `requests` (default true). */
  record?: boolean;
  /** The arguments the default answer calls a function with, by its name (default `FAKE_TOOL_ARGS`). */
  toolArguments?: Record<string, Json>;
}

/** An embedding answer for one request: `fakeEmbedding` of its texts, as long as it asked (default 8). */
function embeddingOf(request: Json): { values: number[] } {
  const text = ((request.content as Json).parts as Json[]).map((part) => part.text ?? '').join('');
  return { values: fakeEmbedding(text, Number(request.outputDimensionality ?? 8)) };
}

export async function startFakeGemini(options: FakeGeminiOptions = {}): Promise<FakeGemini> {
  const queue: FakeGeminiResponse[] = [];
  const requests: RecordedRequest[] = [];
  const issued = new Set<string>();
  const pauses = new FakePauses();
  const wait = (ms: number) => pauses.wait(ms);
  let defaultHandler: FakeGeminiHandler | null = null;
  let inFlight = 0;
  let maxInFlight = 0;
  let abortedRequests = 0;

  /** The built-in answer: a function call while tools are offered and unanswered, else text. */
  function generate(model: string, turns: Json[], body: Json): { chunks: Json[]; whole: Json } {
    const lastUser = [...turns].reverse().find((turn) => turn.role === 'user');
    const answered = (lastUser?.parts as Json[] | undefined)?.find((part) => part.functionResponse !== undefined);
    const config = isObject(body.toolConfig) ? (body.toolConfig.functionCallingConfig as Json | undefined) : undefined;
    const declarations = declarationsOf(body);
    const count = Number((body.generationConfig as Json | undefined)?.candidateCount ?? 1);
    const envelope = { modelVersion: model, responseId: `fake-${randomBytes(6).toString('hex')}` };
    const candidates = (parts: Json[], finishReason?: string) =>
      Array.from({ length: count }, (_, index) => ({
        content: { role: 'model', parts },
        ...(finishReason ? { finishReason } : {}),
        index,
      }));

    if (answered === undefined && declarations.length > 0 && config?.mode !== 'NONE') {
      const allowed = config?.allowedFunctionNames as string[] | undefined;
      const name = allowed?.[0] ?? (declarations[0]!.name as string);
      const call: Json = { functionCall: { name, args: options.toolArguments?.[name] ?? FAKE_TOOL_ARGS } };
      if (isThinkingModel(model)) {
        const thoughtSignature = randomBytes(48).toString('base64');
        issued.add(thoughtSignature);
        call.thoughtSignature = thoughtSignature;
      }
      const usage = { ...FAKE_GEMINI_USAGE, candidatesTokenCount: 8, totalTokenCount: 20 };
      return {
        chunks: [
          { candidates: candidates([call]), ...envelope },
          { candidates: candidates([{ text: '' }], 'STOP'), usageMetadata: usage, ...envelope },
        ],
        whole: { candidates: candidates([call], 'STOP'), usageMetadata: usage, ...envelope },
      };
    }
    const text = answered
      ? `Tool said: ${JSON.stringify((answered.functionResponse as Json).response)}`
      : FAKE_GEMINI_TEXT;
    const pieces = answered ? [text] : [...FAKE_GEMINI_PIECES];
    const chunks = pieces.map((piece, index): Json => {
      const last = index === pieces.length - 1;
      return {
        candidates: candidates([{ text: piece }], last ? 'STOP' : undefined),
        ...(last ? { usageMetadata: FAKE_GEMINI_USAGE } : {}),
        ...envelope,
      };
    });
    return {
      chunks,
      whole: { candidates: candidates([{ text }], 'STOP'), usageMetadata: FAKE_GEMINI_USAGE, ...envelope },
    };
  }

  /** Validates like Google does; returns the default answer for a valid request or throws a Refusal. */
  function answer(request: RecordedRequest, url: URL): FakeGeminiResponse {
    const key = request.headers['x-goog-api-key'] ?? url.searchParams.get('key');
    if (!key) {
      throw new Refusal(
        403,
        'PERMISSION_DENIED',
        "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or " +
          'other form of API consumer identity to call this API.',
      );
    }
    if (options.apiKey !== undefined && key !== options.apiKey) {
      throw new Refusal(400, 'INVALID_ARGUMENT', 'API key not valid. Please pass a valid API key.', [
        { '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'API_KEY_INVALID', domain: 'googleapis.com' },
      ]);
    }
    const route = /^\/(v1beta|v1)\/((?:models|tunedModels)\/[^/:]+):(\w+)$/.exec(url.pathname);
    if (request.method !== 'POST' || route === null)
      throw new Refusal(404, 'NOT_FOUND', `Method not found: ${url.pathname}`);
    const [, version, modelPath, method] = route as unknown as [string, string, string, string];
    const model = modelPath.slice(modelPath.indexOf('/') + 1);
    const embeds = method === 'embedContent' || method === 'batchEmbedContents';
    const generates = method === 'generateContent' || method === 'streamGenerateContent' || method === 'countTokens';
    if (!embeds && !generates) throw new Refusal(404, 'NOT_FOUND', `Method not found: ${method}`);
    if (
      !/^models\/(gemini|gemma|text-embedding|embedding)/.test(modelPath) ||
      (embeds && !isEmbeddingModel(model)) ||
      (generates && isEmbeddingModel(model))
    ) {
      throw new Refusal(
        404,
        'NOT_FOUND',
        `${modelPath} is not found for API version ${version}, or is not supported for ${method}. Call ` +
          `ListModels to see the list of available models and their supported methods.`,
      );
    }
    if (!isObject(request.body))
      throw invalid(
        request.rawBody.trim() === ''
          ? '* contents: contents is not specified'
          : 'Invalid JSON payload received. Expected an object.',
      );
    if (method === 'batchEmbedContents') {
      return { json: { embeddings: checkBatchEmbedRequest(request.body, modelPath).map(embeddingOf) } };
    }
    if (method === 'embedContent')
      return { json: { embedding: embeddingOf(checkEmbedContent(request.body, undefined, modelPath)) } };
    if (method === 'countTokens') {
      const turns = checkCountRequest(request.body, model, issued);
      const inner = request.body.generateContentRequest as Json | undefined;
      const texts = [...turns, ...(isObject(inner?.systemInstruction) ? [inner.systemInstruction] : [])].flatMap(
        (turn) =>
          (turn.parts as Json[]).map((part) => (typeof part.text === 'string' ? part.text : JSON.stringify(part))),
      );
      const totalTokens = texts.reduce((sum, text) => sum + fakeTokenCount(text), 0);
      return { json: { totalTokens, promptTokensDetails: [{ modality: 'TEXT', tokenCount: totalTokens }] } };
    }
    const reply = generate(model, checkGenerateRequest(request.body, model, issued), request.body);
    return method === 'generateContent' ? { json: reply.whole } : { chunks: reply.chunks };
  }

  /**
   * Writes a stream's pieces: each event on its own after a pause (`chunkDelayMs`), or the whole cut every `chunkSize`
   * bytes.
   */
  async function writeStream(
    res: ServerResponse,
    response: SseOptions,
    events: readonly string[],
    contentType: string,
  ): Promise<void> {
    res.writeHead(response.status ?? 200, { 'content-type': contentType, ...response.headers });
    const delay = response.chunkDelayMs ?? 0;
    const body = Buffer.from(events.join(''));
    let pieces = [body];
    if (response.chunkSize !== undefined) {
      pieces = [];
      for (let offset = 0; offset < body.length; offset += response.chunkSize)
        pieces.push(body.subarray(offset, offset + response.chunkSize));
    } else if (delay > 0) {
      pieces = events.map((event) => Buffer.from(event));
    }
    for (let index = 0; index < pieces.length; index += 1) {
      if (res.destroyed) return;
      // Cut at the end: the last piece reaches the client before the socket closes.
      if (response.destroyAtEnd && index === pieces.length - 1) await writeFlushed(res, pieces[index]!);
      else res.write(pieces[index]);
      if (delay > 0 && index < pieces.length - 1) await wait(delay);
    }
    if (res.destroyed || response.hang) return;
    if (response.destroyAtEnd) res.socket?.end();
    else res.end();
  }

  /**
   * Chunks in the form the request asked: SSE events (`alt=sse`), or Google's default, one JSON array sent element by
   * element.
   */
  function writeChunks(
    res: ServerResponse,
    response: SseOptions,
    payloads: readonly string[],
    form: 'sse' | 'array',
  ): Promise<void> {
    if (form === 'sse')
      return writeStream(
        res,
        response,
        payloads.map((payload) => `data: ${payload}\r\n\r\n`),
        'text/event-stream',
      );
    const pretty = payloads.map((payload) => JSON.stringify(JSON.parse(payload), null, 2));
    const events = pretty.map((payload, index) => `${index === 0 ? '[' : ',\r\n'}${payload}\n`);
    return writeStream(
      res,
      response,
      [...events, ...(events.length === 0 ? ['['] : []), ']'],
      'application/json; charset=UTF-8',
    );
  }

  async function respond(res: ServerResponse, response: FakeGeminiResponse, form: 'sse' | 'array'): Promise<void> {
    if (response.delayMs) await wait(response.delayMs);
    if (res.destroyed || pauses.closed) return;
    if ('destroy' in response) return void res.socket?.destroy();
    if ('json' in response) {
      res.writeHead(response.status ?? 200, { 'content-type': 'application/json; charset=UTF-8', ...response.headers });
      return void res.end(JSON.stringify(response.json));
    }
    if ('text' in response) {
      res.writeHead(response.status, { 'content-type': 'text/plain', ...response.headers });
      return void res.end(response.text);
    }
    if ('chunks' in response)
      return writeChunks(
        res,
        response,
        response.chunks.map((chunk) => JSON.stringify(chunk)),
        form,
      );
    if ('chunksFile' in response) {
      const lines = (await readFile(response.chunksFile, 'utf8')).split('\n').filter((line) => line.trim().length > 0);
      return writeChunks(res, response, lines, form);
    }
    if ('sse' in response) return writeStream(res, response, response.sse.split(/(?<=\r\n\r\n)/), 'text/event-stream');
    // `hang`: never answer.
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    inFlight += 1;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const record: RecordedRequest = {
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      headers: req.headers,
      body: undefined,
      rawBody: '',
      aborted: false,
    };
    let droppedByFake = false;
    res.on('close', () => {
      inFlight -= 1;
      if (!res.writableFinished && !pauses.closed && !droppedByFake) {
        abortedRequests += 1;
        record.aborted = true;
      }
    });
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    record.rawBody = Buffer.concat(chunks).toString('utf8');
    try {
      record.body = JSON.parse(record.rawBody);
    } catch {
      record.body = undefined;
    }
    if (options.record !== false) requests.push(record);

    let response: FakeGeminiResponse;
    try {
      const fallback = answer(record, new URL(record.path, 'http://fake'));
      response = queue.shift() ?? defaultHandler?.(record) ?? fallback;
    } catch (error) {
      if (!(error instanceof Refusal)) throw error;
      response = { status: error.code, json: geminiError(error.code, error.status, error.message, error.details) };
    }
    droppedByFake = 'destroy' in response || ('destroyAtEnd' in response && response.destroyAtEnd === true);
    const asked = new URL(record.path, 'http://fake');
    await respond(
      res,
      response,
      asked.pathname.endsWith(':streamGenerateContent') && asked.searchParams.get('alt') !== 'sse' ? 'array' : 'sse',
    );
  }

  const server = createServer({ keepAliveTimeout: 60_000, requestTimeout: 0 }, (req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent) return void res.destroy();
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify(geminiError(500, 'INTERNAL', String(error))));
    });
  });
  const port = await listenOnLoopback(server);

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    get inFlight() {
      return inFlight;
    },
    get maxInFlight() {
      return maxInFlight;
    },
    get abortedRequests() {
      return abortedRequests;
    },
    issuedSignatures: issued,
    enqueue(...responses) {
      queue.push(...responses);
    },
    setDefault(handler) {
      defaultHandler = handler;
    },
    reset() {
      queue.length = 0;
      requests.length = 0;
      defaultHandler = null;
      maxInFlight = inFlight;
      abortedRequests = 0;
    },
    async close() {
      pauses.close();
      await closeServer(server);
    },
  };
}
