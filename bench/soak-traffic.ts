/**
 * The soak's clients (bench/soak.ts): each kind of request a busy tenant sends,
 * sent as its client would, and what the client saw of it kept as one record —
 * the request id the gateway answered with (`x-request-id`), the status, whether
 * the answer was whole, a hash of its body — for the check after the run.
 */
import { bodyHash as hash, errorCodeOf, type Outcome, type Part } from './soak-records.js';
import { asyncChat, messageBatch, openaiBatch, realtimeSession, type SessionOptions } from './soak-sessions.js';

export type { Outcome, Part } from './soak-records.js';

export interface ClientRecord extends Part {
  seq: number;
  kind: KindName;
  /** Which key (by its soak name) sent it. */
  key: string;
  /** Which api process it was sent to. */
  api: number;
  /** ms since the traffic started. */
  startedMs: number;
}

export type KindName =
  | 'chat'
  | 'chat-stream'
  | 'messages'
  | 'messages-stream'
  | 'gemini'
  | 'gemini-stream'
  | 'embeddings'
  | 'image'
  | 'speech'
  | 'async-chat'
  | 'realtime'
  | 'realtime-left'
  | 'message-batch'
  | 'openai-batch'
  | 'cached-chat'
  | 'stream-left'
  | 'over-limit'
  | 'over-rpm'
  | 'over-budget'
  | 'poor'
  | 'invalid';

export interface Kind {
  name: KindName;
  /** Relative share of the traffic. */
  weight: number;
  /** The soak key that sends it. */
  key: string;
  /** What the client sends (one request). */
  request?(seq: number): {
    path: string;
    body: unknown;
    headers?: Record<string, string>;
    stream?: 'openai' | 'anthropic' | 'gemini';
  };
  /** Or a few exchanges (bench/soak-sessions.ts), a record per part. */
  run?(seq: number, options: SessionOptions): Promise<Part[]>;
  /** The client leaves after the first content of the stream. */
  leave?: boolean;
}

const prompt = (seq: number) => [{ role: 'user', content: `Soak request ${seq}: say hello.` }];
/**
 * A handful of prompts asked again and again with `Cache-Control: max-age`: hits, and identical calls in flight shared.
 */
const cachedPrompts = ['What is a queue?', 'Name a colour.', 'Say hello.', 'Count to three.'];

export const kinds: Kind[] = [
  {
    name: 'chat',
    weight: 14,
    key: 'main',
    request: (seq) => ({
      path: '/v1/chat/completions',
      body: { model: 'gpt-4o-mini', messages: prompt(seq), max_tokens: 64 },
    }),
  },
  {
    name: 'chat-stream',
    weight: 12,
    key: 'main',
    request: (seq) => ({
      path: '/v1/chat/completions',
      body: {
        model: 'gpt-4o-mini',
        messages: prompt(seq),
        max_tokens: 64,
        stream: true,
        stream_options: { include_usage: true },
      },
      stream: 'openai',
    }),
  },
  {
    name: 'messages',
    weight: 6,
    key: 'second',
    request: (seq) => ({
      path: '/v1/messages',
      body: { model: 'claude-sonnet-4-5', max_tokens: 64, messages: prompt(seq) },
      headers: { 'anthropic-version': '2023-06-01' },
    }),
  },
  {
    name: 'messages-stream',
    weight: 6,
    key: 'second',
    request: (seq) => ({
      path: '/v1/messages',
      body: { model: 'claude-sonnet-4-5', max_tokens: 64, messages: prompt(seq), stream: true },
      headers: { 'anthropic-version': '2023-06-01' },
      stream: 'anthropic',
    }),
  },
  {
    name: 'gemini',
    weight: 5,
    key: 'second',
    request: (seq) => ({
      path: '/v1beta/models/gemini-2.5-flash:generateContent',
      body: {
        contents: [{ role: 'user', parts: [{ text: `Soak request ${seq}: say hello.` }] }],
        generationConfig: { maxOutputTokens: 64 },
      },
    }),
  },
  {
    name: 'gemini-stream',
    weight: 5,
    key: 'second',
    request: (seq) => ({
      path: '/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse',
      body: {
        contents: [{ role: 'user', parts: [{ text: `Soak request ${seq}: say hello.` }] }],
        generationConfig: { maxOutputTokens: 64 },
      },
      stream: 'gemini',
    }),
  },
  {
    name: 'embeddings',
    weight: 8,
    key: 'main',
    request: (seq) => ({
      path: '/v1/embeddings',
      body: { model: 'text-embedding-3-small', input: [`soak ${seq}`, `line ${seq}`] },
    }),
  },
  {
    name: 'image',
    weight: 2,
    key: 'main',
    request: (seq) => ({
      path: '/v1/images/generations',
      body: { model: 'dall-e-2', prompt: `soak picture ${seq}`, size: '256x256', response_format: 'b64_json' },
    }),
  },
  {
    name: 'speech',
    weight: 2,
    key: 'main',
    request: (seq) => ({
      path: '/v1/audio/speech',
      body: { model: 'tts-1', voice: 'alloy', input: `Soak speech ${seq}.`, response_format: 'mp3' },
    }),
  },
  { name: 'async-chat', weight: 2, key: 'second', run: asyncChat },
  { name: 'realtime', weight: 2, key: 'main', run: (seq, options) => realtimeSession(seq, options, false) },
  { name: 'realtime-left', weight: 1, key: 'main', run: (seq, options) => realtimeSession(seq, options, true) },
  { name: 'message-batch', weight: 0.5, key: 'second', run: messageBatch },
  { name: 'openai-batch', weight: 0.5, key: 'main', run: openaiBatch },
  {
    name: 'cached-chat',
    weight: 8,
    key: 'cache',
    request: (seq) => ({
      path: '/v1/chat/completions',
      body: {
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: cachedPrompts[seq % cachedPrompts.length] }],
        max_tokens: 64,
      },
      headers: { 'cache-control': 'max-age=20' },
    }),
  },
  {
    name: 'stream-left',
    weight: 4,
    key: 'main',
    leave: true,
    request: (seq) => ({
      path: '/v1/chat/completions',
      body: { model: 'gpt-4o-mini', messages: prompt(seq), max_tokens: 64, stream: true },
      stream: 'openai',
    }),
  },
  // Refused by design: each key below runs out, or is held to its rate, early in the run.
  {
    name: 'over-limit',
    weight: 4,
    key: 'limited',
    request: (seq) => ({
      path: '/v1/chat/completions',
      body: { model: 'gpt-4o-mini', messages: prompt(seq), max_tokens: 64 },
    }),
  },
  {
    name: 'over-rpm',
    weight: 5,
    key: 'rpm',
    request: (seq) => ({
      path: '/v1/chat/completions',
      body: { model: 'gpt-4o-mini', messages: prompt(seq), max_tokens: 64 },
    }),
  },
  {
    name: 'over-budget',
    weight: 4,
    key: 'budget',
    request: (seq) => ({
      path: '/v1/chat/completions',
      body: { model: 'gpt-4o-mini', messages: prompt(seq), max_tokens: 64 },
    }),
  },
  {
    name: 'poor',
    weight: 4,
    key: 'poor',
    request: (seq) => ({
      path: '/v1/chat/completions',
      body: { model: 'gpt-4o-mini', messages: prompt(seq), max_tokens: 64 },
    }),
  },
  {
    name: 'invalid',
    weight: 1,
    key: 'main',
    request: () => ({ path: '/v1/chat/completions', body: { model: 'gpt-4o-mini', messages: [] } }),
  },
];

export const kindNames = kinds.map((k) => k.name);

/** Picks a kind by weight from a random number in [0, 1). */
export function pickKind(random: number): Kind {
  const total = kinds.reduce((sum, k) => sum + k.weight, 0);
  let at = random * total;
  for (const kind of kinds) {
    at -= kind.weight;
    if (at < 0) return kind;
  }
  return kinds[kinds.length - 1]!;
}

/** Whether a stream's text ends as its dialect ends a whole answer, with no error event. */
export function streamWhole(
  dialect: 'openai' | 'anthropic' | 'gemini',
  text: string,
): { whole: boolean; error: string | null } {
  if (dialect === 'openai') {
    const error = /^data: (\{"error".*)$/m.exec(text);
    if (error) return { whole: false, error: errorCodeOf(error[1]!) ?? 'stream_error' };
    return { whole: text.trimEnd().endsWith('data: [DONE]'), error: null };
  }
  if (dialect === 'anthropic') {
    if (/^event: error$/m.test(text))
      return { whole: false, error: /"type":"([a-z_]+_error)"/.exec(text)?.[1] ?? 'stream_error' };
    return { whole: /^event: message_stop$/m.test(text), error: null };
  }
  if (/"error"\s*:/.test(text)) return { whole: false, error: 'stream_error' };
  return { whole: /"finishReason"/.test(text), error: null };
}

/** The first content of a stream, in any dialect. */
const hasContent = (text: string) => /"content":"[^"]+"|"text_delta"|"text":"[^"]+"/.test(text);

export interface SendOptions {
  baseUrl: string;
  apiKey: string;
  timeoutMs: number;
}

/** Sends one request of `kind` and says what the client saw. Never throws. */
export async function send(kind: Kind, seq: number, options: SendOptions): Promise<Part> {
  const started = performance.now();
  const { path, body, headers, stream } = kind.request!(seq);
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new Error('timeout')), options.timeoutMs);
  const auth: Record<string, string> = path.startsWith('/v1beta/')
    ? { 'x-goog-api-key': options.apiKey }
    : { authorization: `Bearer ${options.apiKey}` };
  let status: number | null = null;
  let requestId: string | null = null;
  let cacheStatus: string | undefined;
  let text = '';
  const done = (outcome: Outcome, errorCode: string | null, detail?: string) => ({
    latencyMs: performance.now() - started,
    outcome,
    status,
    requestId,
    errorCode,
    bodyHash: hash(text),
    ...(detail ? { detail } : {}),
    ...(cacheStatus ? { cacheStatus } : {}),
  });
  try {
    const response = await fetch(`${options.baseUrl}${path}`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    status = response.status;
    requestId = response.headers.get('x-request-id');
    cacheStatus = response.headers.get('cache-status') ?? undefined;
    if (stream && status === 200 && response.body) {
      const decoder = new TextDecoder();
      const reader = response.body.getReader();
      for (;;) {
        const { value, done: ended } = await reader.read();
        if (ended) break;
        text += decoder.decode(value, { stream: true });
        if (kind.leave && hasContent(text)) {
          controller.abort(new Error('left'));
          await reader.cancel().catch(() => undefined);
          return done('left', null);
        }
      }
      const verdict = streamWhole(stream, text);
      // One answer, ended once: a stream whose end comes twice was answered twice.
      const ends = (
        text.match(
          stream === 'openai'
            ? /^data: \[DONE\]$/gm
            : stream === 'anthropic'
              ? /^event: message_stop$/gm
              : /"finishReason":\s*"/g,
        ) ?? []
      ).length;
      if (ends > 1) return done('answered', null, 'answered twice');
      if (verdict.whole) return done('answered', null);
      return done('failed', verdict.error ?? 'stream_cut', verdict.error ? 'error event' : 'stream ended unfinished');
    }
    text = await response.text();
    if (status >= 200 && status < 300) return done('answered', null);
    const code = errorCodeOf(text);
    if (status >= 400 && status < 500) return done('refused', code);
    return done('failed', code, `HTTP ${status}`);
  } catch (error) {
    const reason = controller.signal.aborted
      ? String((controller.signal.reason as Error | undefined)?.message ?? 'aborted')
      : connectionError(error);
    return done('failed', status === null ? 'no_answer' : 'cut', reason);
  } finally {
    clearTimeout(timer);
  }
}

function connectionError(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (error as Error).message ?? 'error';
}
