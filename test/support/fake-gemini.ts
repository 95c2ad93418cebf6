/**
 * A strict fake of the Gemini API (Generative Language API, v1beta) for tests.
 * It refuses what the real API refuses, with Google's error envelope, before
 * any scripted answer is used: so every test also checks the outgoing request.
 * By default it answers text, or a function call (with a thought signature)
 * when tools are declared, or echoes a function response.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { closeServer, FakePauses, listenOnLoopback } from './fake-server.js';

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
  /** Payloads framed as Gemini frames them: `data: <json>\r\n\r\n`, no terminator. */
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
const BYPASS_SIGNATURES = new Set(['skip_thought_signature_validator', 'context_engineering_is_the_way_to_go']);

/** Deterministic vector for a text: what the fake's `batchEmbedContents` returns. */
export function fakeEmbedding(text: string, dimensions = 8): number[] {
  const hash = createHash('sha256').update(text).digest();
  return Array.from({ length: dimensions }, (_, index) => ((hash[index % 32]! + index) % 256) / 128 - 1);
}

export const geminiError = (code: number, status: string, message: string, details?: unknown[]) => ({
  error: { code, message, status, ...(details ? { details } : {}) },
});

class Refusal {
  constructor(
    readonly code: number,
    readonly status: string,
    readonly message: string,
    readonly details?: unknown[],
  ) {}
}
const invalid = (message: string) => new Refusal(400, 'INVALID_ARGUMENT', message);
const unknownName = (name: string, at?: string) =>
  invalid(`Invalid JSON payload received. Unknown name "${name}"${at ? ` at '${at}'` : ''}: Cannot find field.`);

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

function allowOnly(value: Json, allowed: ReadonlySet<string>, at?: string): void {
  for (const key of Object.keys(value)) if (!allowed.has(key)) throw unknownName(key, at);
}

const TOP_LEVEL = new Set(['contents', 'systemInstruction', 'tools', 'toolConfig', 'generationConfig', 'safetySettings', 'cachedContent']);
const GENERATION = new Set([
  'stopSequences', 'responseMimeType', 'responseSchema', 'responseJsonSchema', 'responseModalities', 'candidateCount',
  'maxOutputTokens', 'temperature', 'topP', 'topK', 'seed', 'presencePenalty', 'frequencyPenalty', 'responseLogprobs',
  'logprobs', 'thinkingConfig', 'mediaResolution', 'imageConfig', 'speechConfig',
]);
const PART = new Set(['text', 'inlineData', 'fileData', 'functionCall', 'functionResponse', 'thought', 'thoughtSignature', 'executableCode', 'codeExecutionResult', 'videoMetadata']);
const PART_DATA = ['text', 'inlineData', 'fileData', 'functionCall', 'functionResponse', 'executableCode', 'codeExecutionResult'];
const SCHEMA = new Set([
  'type', 'format', 'title', 'description', 'nullable', 'enum', 'maxItems', 'minItems', 'properties', 'required',
  'minProperties', 'maxProperties', 'minLength', 'maxLength', 'pattern', 'example', 'anyOf', 'propertyOrdering',
  'default', 'items', 'minimum', 'maximum',
]);
const TYPES = new Set(['string', 'number', 'integer', 'boolean', 'array', 'object', 'null']);
const DECLARATION = new Set(['name', 'description', 'parameters', 'parametersJsonSchema', 'response', 'behavior']);
const EMBED_REQUEST = new Set(['model', 'content', 'taskType', 'title', 'outputDimensionality']);

function checkSchema(schema: unknown, at: string): void {
  if (!isObject(schema)) throw invalid(`Invalid value at '${at}': expected a schema object.`);
  allowOnly(schema, SCHEMA, at);
  if (schema.type !== undefined && !(typeof schema.type === 'string' && TYPES.has(schema.type.toLowerCase()))) {
    throw invalid(`Invalid value at '${at}.type' (type.googleapis.com/google.ai.generativelanguage.v1beta.Type), ${JSON.stringify(schema.type)}`);
  }
  if (schema.enum !== undefined && !(Array.isArray(schema.enum) && schema.enum.every((value) => typeof value === 'string'))) {
    throw invalid(`Invalid value at '${at}.enum': only strings are allowed.`);
  }
  if (isObject(schema.properties)) for (const [name, value] of Object.entries(schema.properties)) checkSchema(value, `${at}.properties[${name}]`);
  if (schema.items !== undefined) checkSchema(schema.items, `${at}.items`);
  if (Array.isArray(schema.anyOf)) schema.anyOf.forEach((member, index) => checkSchema(member, `${at}.any_of[${index}]`));
}

function checkPart(part: unknown, at: string): Json {
  if (!isObject(part)) throw invalid(`Invalid value at '${at}': expected a part object.`);
  allowOnly(part, PART, at);
  const data = PART_DATA.filter((key) => part[key] !== undefined);
  if (data.length !== 1) throw invalid(`* GenerateContentRequest.${at}.data: required oneof field 'data' must have one initialized field`);
  if (part.text === '') throw invalid('Unable to submit request because it has an empty text parameter. Add a value to the parameter and try again.');
  if (part.inlineData !== undefined && !(isObject(part.inlineData) && part.inlineData.mimeType && part.inlineData.data)) {
    throw invalid(`* GenerateContentRequest.${at}.inline_data: mime_type and data are required`);
  }
  if (part.fileData !== undefined && !(isObject(part.fileData) && part.fileData.fileUri)) throw invalid(`* GenerateContentRequest.${at}.file_data.file_uri: is required`);
  return part;
}

function checkContents(contents: unknown, model: string, issued: ReadonlySet<string>): Json[] {
  if (!Array.isArray(contents) || contents.length === 0) throw invalid('* GenerateContentRequest.contents: contents is not specified');
  const turns = contents.map((content: unknown, index) => {
    if (!isObject(content)) throw invalid(`Invalid value at 'contents[${index}]'`);
    allowOnly(content, new Set(['role', 'parts']), `contents[${index}]`);
    if (content.role !== 'user' && content.role !== 'model') throw invalid('Please use a valid role: user, model.');
    if (!Array.isArray(content.parts) || content.parts.length === 0) {
      throw invalid(`* GenerateContentRequest.contents[${index}].parts: contents.parts must not be empty.`);
    }
    return { role: content.role, parts: content.parts.map((part: unknown, p) => checkPart(part, `contents[${index}].parts[${p}]`)) };
  });
  turns.forEach((turn, index) => {
    const calls = turn.parts.filter((part) => part.functionCall !== undefined);
    const responses = turn.parts.filter((part) => part.functionResponse !== undefined);
    if (turn.role === 'user' && calls.length > 0) throw invalid('Please ensure that function call turns come from the model.');
    if (turn.role === 'model' && responses.length > 0) throw invalid('Please ensure that function responses come in a user turn.');
    if (responses.length > 0) {
      const previous = turns[index - 1];
      const called = previous?.role === 'model' ? previous.parts.filter((part) => part.functionCall !== undefined) : [];
      const calledNames = new Set(called.map((part) => (part.functionCall as Json).name));
      if (called.length === 0 || responses.some((part) => !calledNames.has((part.functionResponse as Json).name))) {
        throw invalid('Please ensure that function response turn comes immediately after a function call turn.');
      }
      if (called.length !== responses.length) {
        throw invalid('Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.');
      }
    }
    // Gemini 3 checks the first call of every replayed step for the signature it issued with it.
    if (model.includes('gemini-3') && calls.length > 0) {
      const signature = calls[0]!.thoughtSignature;
      if (typeof signature !== 'string') {
        const name = (calls[0]!.functionCall as Json).name as string;
        throw invalid(
          `Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call \`default_api:${name}\` , position ${index + 1}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.`,
        );
      }
      if (!issued.has(signature) && !BYPASS_SIGNATURES.has(signature)) throw invalid('Corrupted thought signature.');
    }
  });
  return turns;
}

function checkGenerateRequest(body: Json, model: string, issued: ReadonlySet<string>): Json[] {
  allowOnly(body, TOP_LEVEL);
  const turns = checkContents(body.contents, model, issued);
  if (body.systemInstruction !== undefined) {
    const instruction = body.systemInstruction;
    if (!isObject(instruction) || !Array.isArray(instruction.parts) || instruction.parts.length === 0) {
      throw invalid('* GenerateContentRequest.system_instruction.parts: contents.parts must not be empty.');
    }
    if (instruction.role !== undefined && instruction.role !== 'user' && instruction.role !== 'system') throw invalid('Please use a valid role: user, model.');
    instruction.parts.forEach((part: unknown, index) => checkPart(part, `system_instruction.parts[${index}]`));
  }
  if (body.generationConfig !== undefined) {
    if (!isObject(body.generationConfig)) throw invalid("Invalid value at 'generation_config'");
    allowOnly(body.generationConfig, GENERATION, 'generation_config');
    if (body.generationConfig.responseSchema !== undefined) checkSchema(body.generationConfig.responseSchema, 'generation_config.response_schema');
  }
  const names = declarationsOf(body).map((declaration, index) => {
    allowOnly(declaration, DECLARATION, `tools[0].function_declarations[${index}]`);
    if (typeof declaration.name !== 'string' || !/^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$/.test(declaration.name)) {
      throw invalid(`* GenerateContentRequest.tools[0].function_declarations[${index}].name: Invalid function name.`);
    }
    if (declaration.parameters !== undefined) checkSchema(declaration.parameters, `tools[0].function_declarations[${index}].parameters`);
    return declaration.name;
  });
  const config = isObject(body.toolConfig) ? body.toolConfig.functionCallingConfig : undefined;
  if (isObject(config)) {
    allowOnly(config, new Set(['mode', 'allowedFunctionNames']), 'tool_config.function_calling_config');
    if (!['AUTO', 'ANY', 'NONE', 'VALIDATED'].includes(config.mode as string)) throw invalid("Invalid value at 'tool_config.function_calling_config.mode'");
    const allowed = config.allowedFunctionNames;
    if (allowed !== undefined && config.mode !== 'ANY' && config.mode !== 'VALIDATED') {
      throw invalid('* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: only allowed when mode is ANY.');
    }
    if (Array.isArray(allowed) && allowed.some((name) => !names.includes(name as string))) {
      throw invalid('* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: unknown function name.');
    }
  }
  return turns;
}

function declarationsOf(body: Json): Json[] {
  if (body.tools === undefined) return [];
  if (!Array.isArray(body.tools)) throw invalid("Invalid value at 'tools'");
  return body.tools.flatMap((tool: unknown) => {
    if (!isObject(tool)) throw invalid("Invalid value at 'tools'");
    allowOnly(tool, new Set(['functionDeclarations', 'googleSearch', 'codeExecution', 'urlContext']), 'tools[0]');
    return Array.isArray(tool.functionDeclarations) ? tool.functionDeclarations.filter(isObject) : [];
  });
}

function checkEmbedRequest(body: Json, modelPath: string): Json[] {
  allowOnly(body, new Set(['requests']));
  if (!Array.isArray(body.requests) || body.requests.length === 0) throw invalid('* BatchEmbedContentsRequest.requests: is required');
  if (body.requests.length > 100) throw invalid('* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch\n');
  return body.requests.map((request: unknown, index) => {
    if (!isObject(request)) throw invalid(`Invalid value at 'requests[${index}]'`);
    allowOnly(request, EMBED_REQUEST, `requests[${index}]`);
    if (request.model !== modelPath) throw invalid(`* BatchEmbedContentsRequest.requests[${index}].model: model must be ${modelPath}.`);
    const parts = isObject(request.content) ? request.content.parts : undefined;
    if (!Array.isArray(parts) || parts.length === 0) throw invalid(`* BatchEmbedContentsRequest.requests[${index}].content.parts: must not be empty`);
    parts.forEach((part: unknown, p) => checkPart(part, `requests[${index}].content.parts[${p}]`));
    return request;
  });
}

const sseOf = (payloads: readonly unknown[]) => payloads.map((payload) => `data: ${JSON.stringify(payload)}\r\n\r\n`).join('');

export async function startFakeGemini(options: { apiKey?: string; record?: boolean } = {}): Promise<FakeGemini> {
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
      Array.from({ length: count }, (_, index) => ({ content: { role: 'model', parts }, ...(finishReason ? { finishReason } : {}), index }));

    if (answered === undefined && declarations.length > 0 && config?.mode !== 'NONE') {
      const allowed = config?.allowedFunctionNames as string[] | undefined;
      const thoughtSignature = randomBytes(48).toString('base64');
      issued.add(thoughtSignature);
      const call = { functionCall: { name: allowed?.[0] ?? declarations[0]!.name, args: FAKE_TOOL_ARGS }, thoughtSignature };
      const usage = { ...FAKE_GEMINI_USAGE, candidatesTokenCount: 8, totalTokenCount: 20 };
      return {
        chunks: [{ candidates: candidates([call]), ...envelope }, { candidates: candidates([{ text: '' }], 'STOP'), usageMetadata: usage, ...envelope }],
        whole: { candidates: candidates([call], 'STOP'), usageMetadata: usage, ...envelope },
      };
    }
    const text = answered ? `Tool said: ${JSON.stringify((answered.functionResponse as Json).response)}` : FAKE_GEMINI_TEXT;
    const pieces = answered ? [text] : [...FAKE_GEMINI_PIECES];
    const chunks = pieces.map((piece, index): Json => {
      const last = index === pieces.length - 1;
      return { candidates: candidates([{ text: piece }], last ? 'STOP' : undefined), ...(last ? { usageMetadata: FAKE_GEMINI_USAGE } : {}), ...envelope };
    });
    return { chunks, whole: { candidates: candidates([{ text }], 'STOP'), usageMetadata: FAKE_GEMINI_USAGE, ...envelope } };
  }

  /** Validates like Google does; returns the default answer for a valid request or throws a Refusal. */
  function answer(request: RecordedRequest, url: URL): FakeGeminiResponse {
    const key = request.headers['x-goog-api-key'] ?? url.searchParams.get('key');
    if (!key) {
      throw new Refusal(403, 'PERMISSION_DENIED', "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.");
    }
    if (options.apiKey !== undefined && key !== options.apiKey) {
      throw new Refusal(400, 'INVALID_ARGUMENT', 'API key not valid. Please pass a valid API key.', [
        { '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'API_KEY_INVALID', domain: 'googleapis.com' },
      ]);
    }
    const route = /^\/v1beta\/((?:models|tunedModels)\/[^/:]+):(\w+)$/.exec(url.pathname);
    if (request.method !== 'POST' || route === null) throw new Refusal(404, 'NOT_FOUND', `Method not found: ${url.pathname}`);
    const [, modelPath, method] = route as unknown as [string, string, string];
    if (!/^models\/(gemini|gemma|text-embedding|embedding)/.test(modelPath)) {
      throw new Refusal(404, 'NOT_FOUND', `${modelPath} is not found for API version v1beta, or is not supported for ${method}. Call ListModels to see the list of available models and their supported methods.`);
    }
    if (!isObject(request.body)) throw invalid('Invalid JSON payload received. Expected an object.');
    const model = modelPath.slice('models/'.length);
    if (method === 'batchEmbedContents') {
      const embeds = checkEmbedRequest(request.body, modelPath);
      const embeddings = embeds.map((embed) => {
        const text = ((embed.content as Json).parts as Json[]).map((part) => part.text ?? '').join('');
        return { values: fakeEmbedding(text, (embed.outputDimensionality as number | undefined) ?? 8) };
      });
      return { json: { embeddings } };
    }
    if (method !== 'generateContent' && method !== 'streamGenerateContent') throw new Refusal(404, 'NOT_FOUND', `Method not found: ${method}`);
    if (method === 'streamGenerateContent' && url.searchParams.get('alt') !== 'sse') throw invalid('fake-gemini serves streams only with alt=sse');
    const reply = generate(model, checkGenerateRequest(request.body, model, issued), request.body);
    return method === 'generateContent' ? { json: reply.whole } : { chunks: reply.chunks };
  }

  async function writeSse(res: ServerResponse, response: SseOptions, body: Buffer, events: number): Promise<void> {
    res.writeHead(response.status ?? 200, { 'content-type': 'text/event-stream', ...response.headers });
    const delay = response.chunkDelayMs ?? 0;
    let pieces = [body];
    if (response.chunkSize !== undefined) {
      pieces = [];
      for (let offset = 0; offset < body.length; offset += response.chunkSize) pieces.push(body.subarray(offset, offset + response.chunkSize));
    } else if (delay > 0 && events > 1) {
      pieces = body.toString('utf8').split(/(?<=\r\n\r\n)/).map((piece) => Buffer.from(piece));
    }
    for (let index = 0; index < pieces.length; index += 1) {
      if (res.destroyed) return;
      res.write(pieces[index]);
      if (delay > 0 && index < pieces.length - 1) await wait(delay);
    }
    if (res.destroyed || response.hang) return;
    if (response.destroyAtEnd) res.socket?.end();
    else res.end();
  }

  async function respond(res: ServerResponse, response: FakeGeminiResponse): Promise<void> {
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
    if ('chunks' in response) return writeSse(res, response, Buffer.from(sseOf(response.chunks)), response.chunks.length);
    if ('chunksFile' in response) {
      const lines = (await readFile(response.chunksFile, 'utf8')).split('\n').filter((line) => line.trim().length > 0);
      return writeSse(res, response, Buffer.from(lines.map((line) => `data: ${line}\r\n\r\n`).join('')), lines.length);
    }
    if ('sse' in response) return writeSse(res, response, Buffer.from(response.sse), 2);
    // `hang`: never answer.
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    inFlight += 1;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const record: RecordedRequest = { method: req.method ?? 'GET', path: req.url ?? '/', headers: req.headers, body: undefined, rawBody: '', aborted: false };
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
    await respond(res, response);
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
