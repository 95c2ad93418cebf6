/**
 * A strict fake of the Anthropic Messages API for tests. It refuses
 * malformed requests as the real API does (auth and version headers,
 * unknown fields, roles, alternation, tool_use/tool_result pairing, ranges,
 * image sources) with Anthropic error bodies, then answers by default with
 * text, a tool call, or a reply to a tool result. Scripted responses replace
 * the default answer (never the checks) one request at a time.
 */
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { closeServer, listenOnLoopback } from './fake-server.js';

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: unknown;
  rawBody: string;
  /** The client went away before the answer was complete. */
  aborted: boolean;
}

interface StreamOptions {
  delayMs?: number;
  status?: number;
  headers?: Record<string, string>;
  /** Cut the body into pieces of this many bytes. */
  chunkSize?: number;
  /** Pause between pieces; without `chunkSize` the body is cut after each event. */
  chunkDelayMs?: number;
  /** Keep the connection open after the body (an upstream stalled mid-stream). */
  hang?: boolean;
}

export type FakeAnthropicResponse =
  | { delayMs?: number; status?: number; headers?: Record<string, string>; json: unknown }
  | (StreamOptions & { sse: string })
  /** Anthropic event payloads, framed as `event: <type>\ndata: <json>\n\n`. */
  | (StreamOptions & { events: unknown[] })
  /** A recorded `.chunks.jsonl` file (one payload per line), framed like `events`. */
  | (StreamOptions & { chunksFile: string })
  | { delayMs?: number; hang: true };

export interface FakeAnthropicOptions {
  /** When set, only this key is accepted; otherwise any non-empty `x-api-key` is. */
  apiKey?: string;
}

export interface FakeAnthropic {
  /** Base URL without `/v1`, as the Anthropic SDK's `baseURL`. */
  url: string;
  requests: RecordedRequest[];
  readonly inFlight: number;
  readonly maxInFlight: number;
  readonly abortedRequests: number;
  enqueue(...responses: FakeAnthropicResponse[]): void;
  reset(): void;
  close(): Promise<void>;
}

export const FAKE_ANTHROPIC_TEXT = 'Hello from fake upstream';
export const FAKE_ANTHROPIC_MESSAGE_ID = 'msg_fake_01';
export const FAKE_ANTHROPIC_TOOL_USE_ID = 'toolu_fake_01';
export const FAKE_ANTHROPIC_USAGE = { input_tokens: 20, cache_creation_input_tokens: 3, cache_read_input_tokens: 5 };

export const anthropicError = (type: string, message: string, extra: Record<string, unknown> = {}) => ({
  type: 'error',
  error: { type, message, ...extra },
  request_id: 'req_fake',
});

/** Frames Anthropic event payloads as the API sends them. */
export const frameAnthropicEvents = (events: unknown[]) =>
  events.map((event) => `event: ${(event as { type: string }).type}\ndata: ${JSON.stringify(event)}\n\n`).join('');

class Refusal extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
  ) {
    super(message);
  }
}

const invalid = (message: string) => new Refusal(400, 'invalid_request_error', message);

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const TOP_LEVEL_FIELDS = new Set([
  'model',
  'messages',
  'max_tokens',
  'system',
  'metadata',
  'stop_sequences',
  'stream',
  'temperature',
  'top_p',
  'top_k',
  'tools',
  'tool_choice',
  'thinking',
  'output_config',
  'service_tier',
  'container',
  'inference_geo',
  'cache_control',
]);
/** Fields the API takes only with their beta flag in `anthropic-beta` (Claude Code sends both). */
const BETA_FIELDS: Record<string, string> = { context_management: 'context-management-', mcp_servers: 'mcp-client-' };
/** A server tool's versioned type: Anthropic runs it (`web_search_20250305`, `bash_20250124`, …). */
const SERVER_TOOL_TYPE = /^[a-z_]+_\d{8}$/;
/** What the fake signs a thinking block with, and checks when it comes back. */
export const FAKE_THINKING_SIGNATURE = 'sig_fake_thinking_01';
export const FAKE_THINKING_TEXT = 'Let me think about that.';
const IMAGE_TYPES = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);
const TOOL_ID = /^[a-zA-Z0-9_-]+$/;
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,128}$/;

function onlyKeys(value: Json, allowed: string[], path: string): void {
  for (const key of Object.keys(value))
    if (!allowed.includes(key)) throw invalid(`${path}.${key}: Extra inputs are not permitted`);
}

function checkRange(body: Json, field: string): void {
  const value = body[field];
  if (value === undefined) return;
  if (typeof value !== 'number' || value < 0 || value > 1) throw invalid(`${field}: range: 0..1`);
}

function checkSource(source: unknown, kind: 'image' | 'document', path: string): void {
  if (!isObject(source)) throw invalid(`${path}.source: Field required`);
  if (source.type === 'url') {
    if (typeof source.url !== 'string') throw invalid(`${path}.source.url: Field required`);
    return;
  }
  if (source.type !== 'base64') throw invalid(`${path}.source.type: Input should be 'base64' or 'url'`);
  const allowed = kind === 'image' ? IMAGE_TYPES : new Set(['application/pdf']);
  if (typeof source.media_type !== 'string' || !allowed.has(source.media_type)) {
    throw invalid(`${path}.source.media_type: Input should be ${[...allowed].map((t) => `'${t}'`).join(', ')}`);
  }
  if (typeof source.data !== 'string' || source.data.length === 0) throw invalid(`${path}.source.data: Field required`);
}

function checkText(text: unknown, path: string): void {
  if (typeof text !== 'string' || text.length === 0) throw invalid(`${path}: text content blocks must be non-empty`);
}

/** Checks one message's blocks; returns the tool_use ids (assistant) or tool_result ids (user) it holds. */
function checkBlocks(message: Json, index: number, previousToolUses: Set<string>): Set<string> {
  const role = message.role;
  const ids = new Set<string>();
  if (typeof message.content === 'string') {
    if (message.content.length === 0) throw invalid(`messages.${index}: all messages must have non-empty content`);
    return ids;
  }
  if (!Array.isArray(message.content) || message.content.length === 0) {
    throw invalid(`messages.${index}: all messages must have non-empty content`);
  }
  let sawOther = false;
  message.content.forEach((block: unknown, blockIndex) => {
    const path = `messages.${index}.content.${blockIndex}`;
    if (!isObject(block)) throw invalid(`${path}: Input should be an object`);
    switch (block.type) {
      case 'text':
        onlyKeys(block, ['type', 'text', 'cache_control', 'citations'], path);
        checkText(block.text, `${path}.text`);
        sawOther = true;
        break;
      case 'image':
      case 'document':
        if (role !== 'user') throw invalid(`${path}: ${block.type} blocks are only allowed in user messages`);
        checkSource(block.source, block.type, path);
        sawOther = true;
        break;
      case 'tool_use':
        if (role !== 'assistant') throw invalid(`${path}: tool_use blocks are only allowed in assistant messages`);
        if (typeof block.id !== 'string' || !TOOL_ID.test(block.id))
          throw invalid(`${path}.id: String should match pattern '^[a-zA-Z0-9_-]+$'`);
        if (typeof block.name !== 'string') throw invalid(`${path}.name: Field required`);
        if (!isObject(block.input)) throw invalid(`${path}.input: Input should be a valid dictionary`);
        ids.add(block.id);
        break;
      case 'tool_result':
        if (role !== 'user') throw invalid(`${path}: tool_result blocks are only allowed in user messages`);
        if (sawOther)
          throw invalid(`messages.${index}: tool_result blocks must come before any other content in a user message`);
        if (typeof block.tool_use_id !== 'string' || !previousToolUses.has(block.tool_use_id)) {
          throw invalid(
            `${path}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${String(block.tool_use_id)}. ` +
              `Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`,
          );
        }
        ids.add(block.tool_use_id);
        break;
      case 'thinking':
        if (role !== 'assistant') throw invalid(`${path}: thinking blocks are only allowed in assistant messages`);
        onlyKeys(block, ['type', 'thinking', 'signature'], path);
        // A thinking block must come back exactly as it was signed.
        if (typeof block.signature !== 'string' || block.signature !== FAKE_THINKING_SIGNATURE)
          throw invalid(`${path}.signature: Invalid \`signature\` in \`thinking\` block`);
        break;
      case 'redacted_thinking':
        if (role !== 'assistant')
          throw invalid(`${path}: redacted_thinking blocks are only allowed in assistant messages`);
        onlyKeys(block, ['type', 'data'], path);
        break;
      default:
        throw invalid(
          `${path}.type: Input tag '${String(block.type)}' found using 'type' does not match any of the expected tags`,
        );
    }
  });
  return ids;
}

function checkMessages(messages: unknown, betas: string): void {
  if (!Array.isArray(messages) || messages.length === 0) throw invalid('messages: Field required');
  let previousRole: unknown;
  let previousToolUses = new Set<string>();
  messages.forEach((message: unknown, index) => {
    if (!isObject(message)) throw invalid(`messages.${index}: Input should be an object`);
    onlyKeys(message, ['role', 'content'], `messages.${index}`);
    // A system turn in the conversation is taken only with its beta flag; it stands outside the alternation.
    if (message.role === 'system' && betas.includes('mid-conversation-system-')) {
      if (
        typeof message.content !== 'string' &&
        !(Array.isArray(message.content) && message.content.every((block) => isObject(block) && block.type === 'text'))
      ) {
        throw invalid(`messages.${index}.content: a system message holds text only`);
      }
      return;
    }
    if (message.role !== 'user' && message.role !== 'assistant') {
      throw invalid(`messages.${index}.role: Input should be 'user' or 'assistant'`);
    }
    if (index === 0 && message.role !== 'user') throw invalid('messages: first message must use the "user" role');
    if (message.role === previousRole) {
      throw invalid(
        `messages: roles must alternate between "user" and "assistant", but found multiple "${message.role}" ` +
          `roles in a row`,
      );
    }
    const ids = checkBlocks(message, index, message.role === 'user' ? previousToolUses : new Set());
    if (message.role === 'user') {
      const missing = [...previousToolUses].filter((id) => !ids.has(id));
      if (missing.length > 0) {
        throw invalid(
          `messages.${index - 1}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(', ')}`,
        );
      }
    }
    previousToolUses = message.role === 'assistant' ? ids : new Set();
    previousRole = message.role;
  });
}

function checkTools(body: Json): void {
  const names = new Set<string>();
  if (body.tools !== undefined) {
    if (!Array.isArray(body.tools)) throw invalid('tools: Input should be a valid list');
    body.tools.forEach((tool: unknown, index) => {
      if (!isObject(tool)) throw invalid(`tools.${index}: Input should be an object`);
      if (typeof tool.type === 'string' && tool.type !== 'custom') {
        if (!SERVER_TOOL_TYPE.test(tool.type))
          throw invalid(`tools.${index}.type: Input tag '${tool.type}' does not match any of the expected tags`);
        if (typeof tool.name !== 'string') throw invalid(`tools.${index}.name: Field required`);
        names.add(tool.name);
        return;
      }
      onlyKeys(tool, ['type', 'name', 'description', 'input_schema', 'strict', 'cache_control'], `tools.${index}`);
      if (typeof tool.name !== 'string' || !TOOL_NAME.test(tool.name))
        throw invalid(`tools.${index}.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'`);
      if (!isObject(tool.input_schema) || tool.input_schema.type !== 'object') {
        throw invalid(`tools.${index}.input_schema.type: Input should be 'object'`);
      }
      names.add(tool.name);
    });
  }
  const choice = body.tool_choice;
  if (choice === undefined) return;
  if (!isObject(choice)) throw invalid('tool_choice: Input should be a valid dictionary or object');
  if (choice.type === 'none') return onlyKeys(choice, ['type'], 'tool_choice');
  if (choice.type !== 'auto' && choice.type !== 'any' && choice.type !== 'tool') {
    throw invalid(`tool_choice.type: Input tag '${String(choice.type)}' does not match 'auto', 'any', 'tool', 'none'`);
  }
  onlyKeys(
    choice,
    choice.type === 'tool' ? ['type', 'name', 'disable_parallel_tool_use'] : ['type', 'disable_parallel_tool_use'],
    'tool_choice',
  );
  if (choice.type === 'tool' && (typeof choice.name !== 'string' || !names.has(choice.name))) {
    throw invalid(`tool_choice.name: tool \`${String(choice.name)}\` is not among the request's tools`);
  }
}

/** `count_tokens` takes the prompt only: nothing about sampling or the answer. */
const COUNTING_REFUSES = new Set([
  'max_tokens',
  'stream',
  'temperature',
  'top_p',
  'top_k',
  'stop_sequences',
  'metadata',
  'service_tier',
  'container',
  'inference_geo',
]);

function checkThinking(body: Json): void {
  const thinking = body.thinking;
  if (thinking === undefined) return;
  if (!isObject(thinking)) throw invalid('thinking: Input should be an object');
  if (thinking.type === 'enabled') {
    onlyKeys(thinking, ['type', 'budget_tokens', 'display'], 'thinking');
    if (!Number.isInteger(thinking.budget_tokens) || (thinking.budget_tokens as number) < 1024)
      throw invalid('thinking.budget_tokens: Input should be greater than or equal to 1024');
  } else if (thinking.type === 'adaptive') onlyKeys(thinking, ['type', 'display'], 'thinking');
  else if (thinking.type === 'disabled') onlyKeys(thinking, ['type'], 'thinking');
  else
    throw invalid(
      `thinking.type: Input tag '${String(thinking.type)}' does not match 'enabled', 'disabled', 'adaptive'`,
    );
}

/** A rough count, as the fake's answer to `count_tokens`: a token per four characters of the JSON. */
export function fakeTokenCount(body: Json): number {
  return Math.ceil(JSON.stringify({ system: body.system, messages: body.messages, tools: body.tools }).length / 4);
}

function checkRequest(request: RecordedRequest, options: FakeAnthropicOptions): Json {
  const key = request.headers['x-api-key'];
  if (typeof key !== 'string' || key.length === 0)
    throw new Refusal(401, 'authentication_error', 'x-api-key header is required');
  if (options.apiKey !== undefined && key !== options.apiKey)
    throw new Refusal(401, 'authentication_error', 'invalid x-api-key');
  if (!request.headers['anthropic-version']) throw invalid('anthropic-version: header is required');
  const path = request.path.split('?')[0];
  const counting = path === '/v1/messages/count_tokens';
  if (request.method !== 'POST' || (path !== '/v1/messages' && !counting))
    throw new Refusal(404, 'not_found_error', 'Not Found');
  const body = request.body;
  if (!isObject(body)) throw invalid('There was an issue with your request body: it must be a JSON object');
  const betas = String(request.headers['anthropic-beta'] ?? '');
  for (const field of Object.keys(body)) {
    const beta = BETA_FIELDS[field];
    if (beta !== undefined && betas.split(',').some((flag) => flag.trim().startsWith(beta))) continue;
    if (!TOP_LEVEL_FIELDS.has(field) || (counting && COUNTING_REFUSES.has(field)))
      throw invalid(`${field}: Extra inputs are not permitted`);
  }
  if (typeof body.model !== 'string' || body.model.length === 0) throw invalid('model: Field required');
  checkThinking(body);
  if (counting) {
    checkTools(body);
    checkMessages(body.messages, betas);
    return body;
  }
  if (body.max_tokens === undefined) throw invalid('max_tokens: Field required');
  if (!Number.isInteger(body.max_tokens) || (body.max_tokens as number) < 1)
    throw invalid('max_tokens: Input should be a positive integer');
  const thinking = body.thinking as Json | undefined;
  if (thinking?.type === 'enabled' && (thinking.budget_tokens as number) >= (body.max_tokens as number))
    throw invalid('max_tokens must be greater than thinking.budget_tokens');
  if (body.stream !== undefined && typeof body.stream !== 'boolean')
    throw invalid('stream: Input should be a valid boolean');
  checkRange(body, 'temperature');
  checkRange(body, 'top_p');
  if (body.system !== undefined && typeof body.system !== 'string') {
    if (!Array.isArray(body.system)) throw invalid('system: Input should be a valid string or list');
    body.system.forEach((block: unknown, index) => {
      if (!isObject(block) || block.type !== 'text') throw invalid(`system.${index}.type: Input should be 'text'`);
      onlyKeys(block, ['type', 'text', 'cache_control', 'citations'], `system.${index}`);
      checkText(block.text, `system.${index}.text`);
    });
  }
  if (
    body.stop_sequences !== undefined &&
    (!Array.isArray(body.stop_sequences) || !body.stop_sequences.every((s) => typeof s === 'string'))
  ) {
    throw invalid('stop_sequences: Input should be a valid list of strings');
  }
  if (body.metadata !== undefined) {
    if (!isObject(body.metadata)) throw invalid('metadata: Input should be an object');
    onlyKeys(body.metadata, ['user_id'], 'metadata');
  }
  if (body.output_config !== undefined) {
    if (!isObject(body.output_config)) throw invalid('output_config: Input should be an object');
    onlyKeys(body.output_config, ['format', 'effort'], 'output_config');
    const format = body.output_config.format;
    if (format !== undefined && (!isObject(format) || format.type !== 'json_schema' || !isObject(format.schema))) {
      throw invalid('output_config.format: Input should be {"type":"json_schema","schema":{...}}');
    }
  }
  checkTools(body);
  checkMessages(body.messages, betas);
  return body;
}

/** The default answer's content: a reply to tool results, a call of the first tool, or the greeting. */
function defaultContent(body: Json): Json[] {
  const messages = body.messages as Json[];
  const last = messages[messages.length - 1]!;
  const results = Array.isArray(last.content)
    ? (last.content as Json[]).filter((block) => block.type === 'tool_result')
    : [];
  if (last.role === 'user' && results.length > 0) {
    const said = results.map((result) =>
      typeof result.content === 'string'
        ? result.content
        : ((result.content as Json[] | undefined) ?? []).map((b) => b.text).join(''),
    );
    return [{ type: 'text', text: `Tool said: ${said.join('; ')}` }];
  }
  const tools = body.tools as Json[] | undefined;
  if (tools !== undefined && tools.length > 0) {
    return [{ type: 'tool_use', id: FAKE_ANTHROPIC_TOOL_USE_ID, name: tools[0]!.name, input: { city: 'Oslo' } }];
  }
  return [{ type: 'text', text: FAKE_ANTHROPIC_TEXT }];
}

/** The events of one default stream: message_start, per block start/ping/deltas/stop, message_delta, message_stop. */
function defaultEvents(body: Json, content: Json[], outputTokens: number): unknown[] {
  const block = content.at(-1)!;
  const at = content.length - 1;
  const events: unknown[] = [
    {
      type: 'message_start',
      message: {
        id: FAKE_ANTHROPIC_MESSAGE_ID,
        type: 'message',
        role: 'assistant',
        model: body.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { ...FAKE_ANTHROPIC_USAGE, output_tokens: 1 },
      },
    },
  ];
  if (content.length > 1) {
    events.push(
      { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: FAKE_THINKING_TEXT } },
      { type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: FAKE_THINKING_SIGNATURE } },
      { type: 'content_block_stop', index: 0 },
    );
  }
  if (block.type === 'text') {
    events.push(
      { type: 'content_block_start', index: at, content_block: { type: 'text', text: '' } },
      { type: 'ping' },
    );
    for (const piece of (block.text as string).split(/(?= )/)) {
      events.push({ type: 'content_block_delta', index: at, delta: { type: 'text_delta', text: piece } });
    }
  } else {
    events.push(
      { type: 'content_block_start', index: at, content_block: { ...block, input: {} } },
      { type: 'ping' },
      ...['', '{"city": ', '"Oslo"}'].map((partial_json) => ({
        type: 'content_block_delta',
        index: at,
        delta: { type: 'input_json_delta', partial_json },
      })),
    );
  }
  events.push(
    { type: 'content_block_stop', index: at },
    {
      type: 'message_delta',
      delta: { stop_reason: block.type === 'tool_use' ? 'tool_use' : 'end_turn', stop_sequence: null },
      usage: { output_tokens: outputTokens },
    },
    { type: 'message_stop' },
  );
  return events;
}

async function chunksFileEvents(path: string): Promise<string> {
  const lines = (await readFile(path, 'utf8')).split('\n').filter((line) => line.trim().length > 0);
  // SOURCES.md: each recorded line is a `data:` payload whose `event:` is its `type`.
  return lines.map((line) => `event: ${(JSON.parse(line) as { type: string }).type}\ndata: ${line}\n\n`).join('');
}

function splitStream(text: string, options: StreamOptions): Buffer[] {
  const body = Buffer.from(text, 'utf8');
  if (options.chunkSize !== undefined) {
    const pieces: Buffer[] = [];
    for (let offset = 0; offset < body.length; offset += options.chunkSize)
      pieces.push(body.subarray(offset, offset + options.chunkSize));
    return pieces;
  }
  if (!options.chunkDelayMs) return [body];
  return text.split(/(?<=\n\n)/).map((event) => Buffer.from(event, 'utf8'));
}

export async function startFakeAnthropic(options: FakeAnthropicOptions = {}): Promise<FakeAnthropic> {
  const queue: FakeAnthropicResponse[] = [];
  const requests: RecordedRequest[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  let abortedRequests = 0;
  let closed = false;
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms).unref());

  function sendJson(res: ServerResponse, status: number, value: unknown, headers: Record<string, string> = {}): void {
    const payload = Buffer.from(JSON.stringify(value));
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': String(payload.length),
      'request-id': 'req_fake',
      ...headers,
    });
    res.end(payload);
  }

  async function sendStream(res: ServerResponse, text: string, stream: StreamOptions): Promise<void> {
    res.writeHead(stream.status ?? 200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      ...stream.headers,
    });
    const pieces = splitStream(text, stream);
    for (let index = 0; index < pieces.length; index += 1) {
      if (res.destroyed || closed) return;
      res.write(pieces[index]);
      if (stream.chunkDelayMs && index < pieces.length - 1) await sleep(stream.chunkDelayMs);
    }
    if (!stream.hang && !res.destroyed) res.end();
  }

  async function respond(res: ServerResponse, record: RecordedRequest): Promise<void> {
    let body: Json;
    try {
      body = checkRequest(record, options);
    } catch (error) {
      if (!(error instanceof Refusal)) throw error;
      return sendJson(res, error.status, anthropicError(error.type, error.message));
    }
    const scripted = queue.shift();
    if (scripted?.delayMs) await sleep(scripted.delayMs);
    if (res.destroyed || closed) return;
    if (scripted !== undefined) {
      if ('json' in scripted) return sendJson(res, scripted.status ?? 200, scripted.json, scripted.headers);
      if ('sse' in scripted) return sendStream(res, scripted.sse, scripted);
      if ('events' in scripted) return sendStream(res, frameAnthropicEvents(scripted.events), scripted);
      if ('chunksFile' in scripted) return sendStream(res, await chunksFileEvents(scripted.chunksFile), scripted);
      return; // hang: never answer
    }
    if (record.path.split('?')[0] === '/v1/messages/count_tokens')
      return sendJson(res, 200, { input_tokens: fakeTokenCount(body) });
    const content = defaultContent(body);
    const thinks = isObject(body.thinking) && body.thinking.type !== 'disabled';
    if (thinks) content.unshift({ type: 'thinking', thinking: FAKE_THINKING_TEXT, signature: FAKE_THINKING_SIGNATURE });
    const outputTokens = content.at(-1)!.type === 'text' ? (content.at(-1)!.text as string).split(' ').length : 12;
    if (body.stream === true)
      return sendStream(res, frameAnthropicEvents(defaultEvents(body, content, outputTokens)), {});
    sendJson(res, 200, {
      id: FAKE_ANTHROPIC_MESSAGE_ID,
      type: 'message',
      role: 'assistant',
      model: body.model,
      content,
      stop_reason: content.at(-1)!.type === 'tool_use' ? 'tool_use' : 'end_turn',
      stop_sequence: null,
      usage: { ...FAKE_ANTHROPIC_USAGE, output_tokens: outputTokens, service_tier: 'standard' },
    });
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
    res.on('close', () => {
      inFlight -= 1;
      if (!res.writableFinished && !closed) {
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
    requests.push(record);
    await respond(res, record);
  }

  const server = createServer({ keepAliveTimeout: 60_000, requestTimeout: 0 }, (req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent) res.destroy();
      else sendJson(res, 500, anthropicError('api_error', String(error)));
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
    enqueue(...responses) {
      queue.push(...responses);
    },
    reset() {
      queue.length = 0;
      requests.length = 0;
      maxInFlight = inFlight;
      abortedRequests = 0;
    },
    async close() {
      closed = true;
      await closeServer(server);
    },
  };
}
