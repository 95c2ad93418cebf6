import { createHash } from 'node:crypto';
import type { FakeResponse, RecordedRequest } from './fake-openai.js';

/**
 * A vendor's prompt cache as OpenAI keeps it, for the fake OpenAI: per API key, a prompt's prefix is cached once a
 * call with it was made on that key, and read by the next call on the same key within `lifetimeMs`, from 1,024 tokens
 * in steps of 128 (a token here is four characters of the tools' and messages' JSON). A call takes `firstTokenMs` to
 * start answering, and the prefix it writes can be read from then (the vendor has read the prompt), not before. Its
 * answers say the prompt's tokens and the cached part (`prompt_tokens_details.cached_tokens`), and it counts what it
 * was asked, what it read, and the cache writes, by key.
 */
export interface FakePromptCache {
  /** The fake OpenAI's default answer: a short reply whose usage says what the cache held. */
  handler(request: RecordedRequest): FakeResponse | undefined;
  /** Prompt tokens asked and read from the cache, in all and by key. */
  totals(): {
    prompt: number;
    prefix: number;
    cached: number;
    writes: number;
    byKey: Map<string, { calls: number; prompt: number; cached: number }>;
  };
  reset(): void;
}

const tokensPerStep = 128;
const minCached = 1024;
const charsPerToken = 4;

export function fakePromptCache(options: { lifetimeMs?: number; firstTokenMs?: number } = {}): FakePromptCache {
  const lifetimeMs = options.lifetimeMs ?? 300_000;
  const firstTokenMs = options.firstTokenMs ?? 0;
  /** Per key: the hashes of the prefixes written, with when they can be read and when they expire. */
  const written = new Map<string, Map<string, { readableAt: number; expires: number }>>();
  /** Calls of a cacheable prompt that read nothing from the cache: each wrote its prefix. */
  let writes = 0;
  /** Prompt tokens before each call's last message: what an earlier call could have cached. */
  let prefixTokens = 0;
  let byKey = new Map<string, { calls: number; prompt: number; cached: number }>();
  return {
    handler(request) {
      const body = request.body as
        | {
            model?: string;
            stream?: boolean;
            stream_options?: { include_usage?: boolean };
            tools?: unknown[];
            messages?: unknown[];
          }
        | undefined;
      if (!body?.messages || !request.path.endsWith('/chat/completions')) return undefined;
      const key = String(request.headers.authorization ?? '');
      const text = [...(body.tools ?? []), ...body.messages].map((part) => JSON.stringify(part)).join('');
      const prompt = Math.ceil(text.length / charsPerToken);
      prefixTokens += Math.floor((text.length - JSON.stringify(body.messages.at(-1)).length) / charsPerToken);
      const now = Date.now();
      const mine = written.get(key) ?? new Map<string, { readableAt: number; expires: number }>();
      written.set(key, mine);
      let cached = 0;
      for (let step = minCached; step <= prompt; step += tokensPerStep) {
        const hash = createHash('sha256')
          .update(text.slice(0, step * charsPerToken))
          .digest('hex');
        const entry = mine.get(hash);
        const live = entry !== undefined && entry.expires > now;
        if (live && entry.readableAt <= now) cached = step;
        mine.set(hash, { readableAt: live ? entry.readableAt : now + firstTokenMs, expires: now + lifetimeMs });
      }
      if (cached === 0 && prompt >= minCached) writes += 1;
      const counted = byKey.get(key) ?? { calls: 0, prompt: 0, cached: 0 };
      byKey.set(key, { calls: counted.calls + 1, prompt: counted.prompt + prompt, cached: counted.cached + cached });
      const usage = {
        prompt_tokens: prompt,
        completion_tokens: 3,
        total_tokens: prompt + 3,
        prompt_tokens_details: { cached_tokens: cached, audio_tokens: 0 },
      };
      const base = { id: `chatcmpl-cache${now}`, created: Math.floor(now / 1000), model: body.model ?? 'gpt-4o-mini' };
      if (!body.stream) {
        return {
          delayMs: firstTokenMs,
          json: {
            ...base,
            object: 'chat.completion',
            choices: [
              {
                index: 0,
                message: { role: 'assistant', content: 'Noted.', refusal: null },
                logprobs: null,
                finish_reason: 'stop',
              },
            ],
            usage,
          },
        };
      }
      const chunk = (rest: Record<string, unknown>) =>
        `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', ...rest })}\n\n`;
      return {
        delayMs: firstTokenMs,
        sse: [
          chunk({
            choices: [
              { index: 0, delta: { role: 'assistant', content: 'Noted.' }, logprobs: null, finish_reason: null },
            ],
          }),
          chunk({ choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }] }),
          ...(body.stream_options?.include_usage ? [chunk({ choices: [], usage })] : []),
          'data: [DONE]\n\n',
        ].join(''),
      };
    },
    totals() {
      let prompt = 0;
      let cached = 0;
      for (const counted of byKey.values()) {
        prompt += counted.prompt;
        cached += counted.cached;
      }
      return { prompt, prefix: prefixTokens, cached, writes, byKey: new Map(byKey) };
    },
    reset() {
      written.clear();
      writes = 0;
      prefixTokens = 0;
      byKey = new Map();
    },
  };
}
