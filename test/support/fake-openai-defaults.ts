/**
 * The built-in answers of the fake OpenAI upstream: what a well-formed OpenAI
 * returns, including its refusals of malformed requests. Bodies are cached
 * per model so the zero-latency path costs a map lookup, not a serialization.
 */
import type { RecordedRequest } from './fake-openai.js';

export interface DefaultOptions {
  /** When set, only this key is accepted; otherwise any `Bearer` key is. */
  apiKey?: string;
  /** Pause between the events of default streams (0: the whole stream in one write). */
  streamChunkDelayMs?: number;
}

export type DefaultAnswer =
  { kind: 'json'; status: number; body: Buffer } | { kind: 'sse'; body: Buffer; events: Buffer[] };

export const FAKE_REPLY_PIECES = ['Hello', ' from', ' fake', ' upstream'] as const;
export const FAKE_REPLY_TEXT = FAKE_REPLY_PIECES.join('');
export const FAKE_CREATED = 1_730_000_000;
export const FAKE_USAGE = {
  prompt_tokens: 12,
  completion_tokens: FAKE_REPLY_PIECES.length,
  total_tokens: 12 + FAKE_REPLY_PIECES.length,
};
export const FAKE_MODELS = ['gpt-4o-mini', 'gpt-4o', 'text-embedding-3-small', 'gpt-3.5-turbo-instruct'];

const CACHE_LIMIT = 1_000;
const cache = new Map<string, DefaultAnswer>();

function cached(key: string, build: () => DefaultAnswer): DefaultAnswer {
  let answer = cache.get(key);
  if (answer === undefined) {
    if (cache.size >= CACHE_LIMIT) cache.clear();
    answer = build();
    cache.set(key, answer);
  }
  return answer;
}

function json(status: number, value: unknown): DefaultAnswer {
  return { kind: 'json', status, body: Buffer.from(JSON.stringify(value)) };
}

function openaiError(status: number, message: string, type: string, param: string | null, code: string | null) {
  return json(status, { error: { message, type, param, code } });
}

const missingParameter = (name: string) =>
  openaiError(
    400,
    `Missing required parameter: '${name}'.`,
    'invalid_request_error',
    name,
    'missing_required_parameter',
  );

function sse(chunks: unknown[]): DefaultAnswer {
  const events = [...chunks.map((chunk) => `data: ${JSON.stringify(chunk)}\n\n`), 'data: [DONE]\n\n'].map((event) =>
    Buffer.from(event),
  );
  return { kind: 'sse', body: Buffer.concat(events), events };
}

function wantsUsage(body: Record<string, unknown>): boolean {
  const streamOptions = body.stream_options as { include_usage?: unknown } | null | undefined;
  return streamOptions?.include_usage === true;
}

function chatAnswer(model: string, stream: boolean, includeUsage: boolean): DefaultAnswer {
  const base = {
    id: 'chatcmpl-fake',
    object: 'chat.completion.chunk',
    created: FAKE_CREATED,
    model,
    system_fingerprint: 'fp_fake',
  };
  if (!stream) {
    return json(200, {
      id: 'chatcmpl-fake',
      object: 'chat.completion',
      created: FAKE_CREATED,
      model,
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: FAKE_REPLY_TEXT, refusal: null, annotations: [] },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage: FAKE_USAGE,
      system_fingerprint: 'fp_fake',
    });
  }
  // With include_usage, OpenAI puts `"usage":null` on every chunk but the last.
  const usageField = includeUsage ? { usage: null } : {};
  const choice = (delta: unknown, finishReason: string | null) => [
    { index: 0, delta, logprobs: null, finish_reason: finishReason },
  ];
  const chunks: unknown[] = [
    { ...base, choices: choice({ role: 'assistant', content: '', refusal: null }, null), ...usageField },
    ...FAKE_REPLY_PIECES.map((piece) => ({ ...base, choices: choice({ content: piece }, null), ...usageField })),
    { ...base, choices: choice({}, 'stop'), ...usageField },
  ];
  if (includeUsage) chunks.push({ ...base, choices: [], usage: FAKE_USAGE });
  return sse(chunks);
}

/**
 * A chat completions stream as an OpenAI-compatible vendor writes it, one SSE event per piece (the fake writes one
 * event per `chunkDelayMs` when it is enqueued with one): the role, the pieces, the finish, the usage chunk when
 * asked, and `[DONE]`.
 */
export function chatStreamSse(pieces: readonly string[], options: { model?: string; usage?: boolean } = {}): string {
  const base = {
    id: 'chatcmpl-slow',
    object: 'chat.completion.chunk',
    created: 1,
    model: options.model ?? 'gpt-4o-mini',
    system_fingerprint: 'fp',
  };
  const chunks = [
    { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] },
    ...pieces.map((content) => ({ ...base, choices: [{ index: 0, delta: { content }, finish_reason: null }] })),
    { ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] },
    ...(options.usage
      ? [
          {
            ...base,
            choices: [],
            usage: { prompt_tokens: 9, completion_tokens: pieces.length, total_tokens: 9 + pieces.length },
          },
        ]
      : []),
  ];
  return [...chunks.map((chunk) => `data: ${JSON.stringify(chunk)}\n\n`), 'data: [DONE]\n\n'].join('');
}

export const FAKE_TOOL_CALL_ID = 'call_fake_01';
export const FAKE_TOOL_ARGUMENTS = '{"city":"Oslo"}';

/**
 * The conversation every fake vendor plays the same way: with tools and a
 * user turn last (system and developer messages after it aside), call the
 * first tool with `{"city":"Oslo"}`; after a tool result, answer
 * `Tool said: <content>`.
 */
function toolAnswer(
  fields: Record<string, unknown>,
  model: string,
  stream: boolean,
  includeUsage: boolean,
): DefaultAnswer | null {
  const messages = fields.messages as Array<{ role?: string; content?: unknown }>;
  const last = [...messages].reverse().find((message) => message.role !== 'system' && message.role !== 'developer');
  if (last?.role === 'tool') {
    const content = typeof last.content === 'string' ? last.content : JSON.stringify(last.content);
    return textAnswer(model, stream, includeUsage, `Tool said: ${content}`);
  }
  const tools = fields.tools as Array<{ function?: { name?: string } }> | undefined;
  const name = tools?.[0]?.function?.name;
  if (!name || last?.role !== 'user' || fields.tool_choice === 'none') return null;
  const base = {
    id: 'chatcmpl-fake',
    object: 'chat.completion.chunk',
    created: FAKE_CREATED,
    model,
    system_fingerprint: 'fp_fake',
  };
  const call = { id: FAKE_TOOL_CALL_ID, type: 'function', function: { name, arguments: FAKE_TOOL_ARGUMENTS } };
  if (!stream) {
    return json(200, {
      id: 'chatcmpl-fake',
      object: 'chat.completion',
      created: FAKE_CREATED,
      model,
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: null, refusal: null, tool_calls: [call] },
          logprobs: null,
          finish_reason: 'tool_calls',
        },
      ],
      usage: FAKE_USAGE,
    });
  }
  const usageField = includeUsage ? { usage: null } : {};
  const choice = (delta: unknown, finishReason: string | null) => [
    { index: 0, delta, logprobs: null, finish_reason: finishReason },
  ];
  const chunks: unknown[] = [
    {
      ...base,
      choices: choice(
        { role: 'assistant', content: null, tool_calls: [{ index: 0, ...call, function: { name, arguments: '' } }] },
        null,
      ),
      ...usageField,
    },
    {
      ...base,
      choices: choice({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }, null),
      ...usageField,
    },
    {
      ...base,
      choices: choice({ tool_calls: [{ index: 0, function: { arguments: '"Oslo"}' } }] }, null),
      ...usageField,
    },
    { ...base, choices: choice({}, 'tool_calls'), ...usageField },
  ];
  if (includeUsage) chunks.push({ ...base, choices: [], usage: FAKE_USAGE });
  return sse(chunks);
}

function textAnswer(model: string, stream: boolean, includeUsage: boolean, text: string): DefaultAnswer {
  const base = { id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: FAKE_CREATED, model };
  if (!stream) {
    return json(200, {
      id: 'chatcmpl-fake',
      object: 'chat.completion',
      created: FAKE_CREATED,
      model,
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: text, refusal: null },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage: FAKE_USAGE,
    });
  }
  const usageField = includeUsage ? { usage: null } : {};
  const choice = (delta: unknown, finishReason: string | null) => [
    { index: 0, delta, logprobs: null, finish_reason: finishReason },
  ];
  const chunks: unknown[] = [
    { ...base, choices: choice({ role: 'assistant', content: '' }, null), ...usageField },
    { ...base, choices: choice({ content: text }, null), ...usageField },
    { ...base, choices: choice({}, 'stop'), ...usageField },
  ];
  if (includeUsage) chunks.push({ ...base, choices: [], usage: FAKE_USAGE });
  return sse(chunks);
}

function completionAnswer(model: string, stream: boolean, includeUsage: boolean): DefaultAnswer {
  const base = { id: 'cmpl-fake', object: 'text_completion', created: FAKE_CREATED, model };
  const choice = (text: string, finishReason: string | null) => [
    { text, index: 0, logprobs: null, finish_reason: finishReason },
  ];
  if (!stream) return json(200, { ...base, choices: choice(FAKE_REPLY_TEXT, 'stop'), usage: FAKE_USAGE });
  const usageField = includeUsage ? { usage: null } : {};
  const chunks: unknown[] = [
    ...FAKE_REPLY_PIECES.map((piece) => ({ ...base, choices: choice(piece, null), ...usageField })),
    { ...base, choices: choice('', 'stop'), ...usageField },
  ];
  if (includeUsage) chunks.push({ ...base, choices: [], usage: FAKE_USAGE });
  return sse(chunks);
}

/** Values are multiples of 1/1024, exact in float32, so float and base64 answers carry the same numbers. */
function embeddingVector(index: number, dimensions: number): Float32Array {
  const vector = new Float32Array(dimensions);
  for (let j = 0; j < dimensions; j += 1) vector[j] = ((index * 31 + j * 17) % 1024) / 1024 - 0.5;
  return vector;
}

function embeddingsAnswer(body: Record<string, unknown>, model: string): DefaultAnswer {
  const input = body.input;
  if (input === undefined || input === null) return missingParameter('input');
  let inputs: unknown[];
  if (typeof input === 'string') inputs = [input];
  else if (Array.isArray(input) && input.length > 0)
    inputs = input.every((item) => typeof item === 'number') ? [input] : input;
  else return openaiError(400, "'input' must be a non-empty string or array.", 'invalid_request_error', 'input', null);

  const dimensions = body.dimensions ?? 8;
  if (typeof dimensions !== 'number' || !Number.isInteger(dimensions) || dimensions < 1) {
    return openaiError(400, "'dimensions' must be a positive integer.", 'invalid_request_error', 'dimensions', null);
  }
  const base64 = body.encoding_format === 'base64';
  let promptTokens = 0;
  const data = inputs.map((item, index) => {
    promptTokens +=
      typeof item === 'string' ? Math.max(1, Math.ceil(item.length / 4)) : Array.isArray(item) ? item.length : 1;
    const vector = embeddingVector(index, dimensions);
    const embedding = base64 ? Buffer.from(vector.buffer).toString('base64') : Array.from(vector);
    return { object: 'embedding', index, embedding };
  });
  return json(200, { object: 'list', data, model, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } });
}

function checkAuth(request: RecordedRequest, options: DefaultOptions): DefaultAnswer | null {
  const header = request.headers.authorization;
  const match = typeof header === 'string' ? /^Bearer\s+(\S+)$/.exec(header) : null;
  if (match === null) {
    return openaiError(
      401,
      "You didn't provide an API key. Send it in an Authorization header using Bearer auth (Authorization: " +
        'Bearer YOUR_KEY).',
      'invalid_request_error',
      null,
      null,
    );
  }
  const key = match[1]!;
  if (options.apiKey !== undefined && key !== options.apiKey) {
    const masked = key.length > 8 ? `${key.slice(0, 3)}${'*'.repeat(key.length - 7)}${key.slice(-4)}` : '***';
    return openaiError(401, `Incorrect API key provided: ${masked}.`, 'invalid_request_error', null, 'invalid_api_key');
  }
  return null;
}

export function buildDefaultResponse(request: RecordedRequest, options: DefaultOptions): DefaultAnswer {
  const refused = checkAuth(request, options);
  if (refused !== null) return refused;

  const path = request.path.split('?')[0] ?? '';
  if (request.method === 'GET' && path === '/v1/models') {
    return cached('models', () =>
      json(200, {
        object: 'list',
        data: FAKE_MODELS.map((id) => ({ id, object: 'model', created: FAKE_CREATED, owned_by: 'openai' })),
      }),
    );
  }
  const routes = ['/v1/chat/completions', '/v1/completions', '/v1/embeddings'];
  if (request.method !== 'POST' || !routes.includes(path)) {
    return openaiError(404, `Invalid URL (${request.method} ${path})`, 'invalid_request_error', null, null);
  }

  const body = request.body;
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return openaiError(
      400,
      'We could not parse the JSON body of your request. Send a JSON object with content-type application/json.',
      'invalid_request_error',
      null,
      null,
    );
  }
  const fields = body as Record<string, unknown>;
  const model = fields.model;
  if (typeof model !== 'string' || model.length === 0) {
    return openaiError(400, 'you must provide a model parameter', 'invalid_request_error', null, null);
  }
  const stream = fields.stream === true;
  const includeUsage = stream && wantsUsage(fields);
  if (!stream && fields.stream_options != null && path !== '/v1/embeddings') {
    return openaiError(
      400,
      "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
      'invalid_request_error',
      'stream_options',
      null,
    );
  }

  if (path === '/v1/chat/completions') {
    if (!Array.isArray(fields.messages) || fields.messages.length === 0) return missingParameter('messages');
    if (fields.tools !== undefined || (fields.messages as Array<{ role?: string }>).some((m) => m.role === 'tool')) {
      const answer = toolAnswer(fields, model, stream, includeUsage);
      if (answer) return answer;
    }
    return cached(`chat\0${model}\0${stream}\0${includeUsage}`, () => chatAnswer(model, stream, includeUsage));
  }
  if (path === '/v1/completions') {
    if (fields.prompt === undefined || fields.prompt === null) return missingParameter('prompt');
    return cached(`completion\0${model}\0${stream}\0${includeUsage}`, () =>
      completionAnswer(model, stream, includeUsage),
    );
  }
  return embeddingsAnswer(fields, model);
}
