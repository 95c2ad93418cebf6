import { createHash } from 'node:crypto';
import type { EndpointRequest } from './endpoints.js';

/*
 * Prompt-cache affinity. Vendors cache a prompt's long prefix per key (and per deployment): the next request with
 * the same prefix on the same key reads it at a tenth or a quarter of the price. A request's affinity key names its
 * cacheable prefix; the router sends every request of one key to the same channel of a vendor (rendezvous hashing
 * over the channels that can serve it, weights kept), so the prefix is written once and read after, and when that
 * channel rests the requests go to the next channel in the key's own order, the same for every worker.
 *
 * The prefix is what a vendor caches:
 * - the client's own key: `prompt_cache_key` (OpenAI's routing hint) or Gemini's `cachedContent`;
 * - Anthropic's breakpoints: the tools, the system prompt and the messages up to the first `cache_control` (the part
 *   every turn of a conversation shares; a later breakpoint moves with each turn, and the cache of the longer prefix
 *   lives on the same channel anyway);
 * - otherwise (vendors that cache by themselves, past 1,024 tokens): the tools and the leading messages, as JSON, up
 *   to `autoPrefixChars`. A prompt shorter than that is not cached by the vendor, and has no key: it goes by weight.
 */

/**
 * About 1,024 tokens of JSON: OpenAI caches prompts from there, and the shortest prefix Anthropic and Gemini cache is
 * about as long.
 */
export const autoPrefixChars = 4096;

const digest = (text: string) => createHash('sha256').update(text).digest('base64url').slice(0, 22);

/**
 * The JSON of `parts` up to `limit` characters, serialized one part at a time and every string in them cut at `limit`
 * first: a long prompt (a megabyte of text, an inline image) costs what its first `limit` characters do, not its size.
 */
function leading(parts: readonly unknown[], limit: number): string | undefined {
  const cut = (_: string, value: unknown) =>
    typeof value === 'string' && value.length > limit ? value.slice(0, limit) : value;
  let text = '';
  for (const part of parts) {
    text += JSON.stringify(part, cut) ?? 'null';
    if (text.length >= limit) return text.slice(0, limit);
  }
  return undefined;
}

/** Whether a block of an Anthropic request (a tool, a system block, a message's block) sets a breakpoint. */
const breaks = (block: unknown): boolean =>
  typeof block === 'object' && block !== null && (block as { cache_control?: unknown }).cache_control != null;

/**
 * An Anthropic request's prefix up to its first breakpoint (tools, then system, then messages, Anthropic's order);
 * undefined without one.
 */
function anthropicPrefix(request: {
  tools?: readonly unknown[];
  system?: unknown;
  messages: readonly { role: string; content: unknown }[];
}): string | undefined {
  const parts: unknown[] = [];
  for (const tool of request.tools ?? []) {
    parts.push(tool);
    if (breaks(tool)) return JSON.stringify(parts);
  }
  for (const block of Array.isArray(request.system)
    ? request.system
    : request.system === undefined
      ? []
      : [request.system]) {
    parts.push(block);
    if (breaks(block)) return JSON.stringify(parts);
  }
  for (const message of request.messages) {
    if (!Array.isArray(message.content)) {
      parts.push(message);
      continue;
    }
    for (const block of message.content) {
      parts.push(block);
      if (breaks(block)) return JSON.stringify(parts);
    }
  }
  return undefined;
}

/** A chat request's automatic prefix: its tools, then its messages, to `autoPrefixChars`. */
function chatPrefix(chat: { tools?: readonly unknown[] | null; messages: readonly unknown[] }): string | undefined {
  return leading([...(chat.tools ?? []), ...chat.messages], autoPrefixChars);
}

/**
 * The request's affinity key, or undefined when nothing of it is cached (a short prompt, an endpoint that caches
 * nothing).
 */
export function affinityKey(request: EndpointRequest): string | undefined {
  const named = (key: unknown) => (typeof key === 'string' && key !== '' ? `k:${digest(key)}` : undefined);
  const prefixed = (prefix: string | undefined) => (prefix === undefined ? undefined : `p:${digest(prefix)}`);
  switch (request.endpoint) {
    case 'chat.completions':
      return (
        named((request.payload as { prompt_cache_key?: unknown }).prompt_cache_key) ??
        prefixed(chatPrefix(request.payload))
      );
    case 'responses':
      return named(request.payload.promptCacheKey) ?? prefixed(chatPrefix(request.payload.chat));
    case 'messages':
      return prefixed(anthropicPrefix(request.payload.anthropic) ?? chatPrefix(request.payload.chat));
    case 'gemini.generate':
      return named(request.payload.gemini.cachedContent) ?? prefixed(chatPrefix(request.payload.chat));
    default:
      return undefined;
  }
}

/** A channel's place in a key's order: weighted rendezvous (highest random weight) hashing. */
function score(key: string, id: string, weight: number): number {
  const hash = createHash('sha256').update(`${key}\n${id}`).digest();
  // 52 bits of the hash as a number in (0, 1): -w / ln(u) is the weighted score (a channel of twice the weight wins
  // twice as many keys), and a channel added or removed moves only the keys it wins or held.
  const u = (Number(hash.readBigUInt64BE(0) >> 12n) + 1) / (2 ** 52 + 2);
  return -weight / Math.log(u);
}

/**
 * The channels in the key's order: the first is where its prefix lives; each next one is where it goes when those
 * before rest.
 */
export function rendezvousOrder<T extends { id: string; weight: number }>(key: string, channels: readonly T[]): T[] {
  return channels
    .map((channel) => ({ channel, score: score(key, channel.id, channel.weight) }))
    .sort((a, b) => b.score - a.score)
    .map(({ channel }) => channel);
}

/** The first of the key's order among `channels` (those that can serve now). */
export function rendezvousPick<T extends { id: string; weight: number }>(key: string, channels: readonly T[]): T {
  let best = channels[0]!;
  let bestScore = -Infinity;
  for (const channel of channels) {
    const s = score(key, channel.id, channel.weight);
    if (s > bestScore) {
      best = channel;
      bestScore = s;
    }
  }
  return best;
}
