import type { ChatMessage } from '../../../shared/schemas/chat.js';
import { countTextTokens, decodeTokens, encodeText } from '../../../shared/tokens.js';

/** How much of the user's text the mock quotes back. */
const QUOTED_CHARS = 200;
/** Tokens per streamed content delta: a few, like a real model. */
const TOKENS_PER_PIECE = 3;

export type TextFinishReason = 'stop' | 'length';

export interface LimitedText {
  text: string;
  finishReason: TextFinishReason;
  completionTokens: number;
}

export function textOfContent(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  const texts: string[] = [];
  for (const part of content as Array<{ type?: string; text?: unknown }>) {
    if (part.type === 'text' && typeof part.text === 'string') texts.push(part.text);
  }
  return texts.join('\n');
}

export function findLastUserText(messages: readonly ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (message?.role === 'user') return textOfContent(message.content);
  }
  return '';
}

/** The deterministic answer: a quote of the last user turn, or of the tool result when a tool just answered. */
export function buildChatReplyText(messages: readonly ChatMessage[]): string {
  const last = messages[messages.length - 1];
  if (last?.role === 'tool' || last?.role === 'function') {
    return `Mock reply using tool result: ${textOfContent(last.content).slice(0, QUOTED_CHARS)}`;
  }
  return `Mock reply to: "${findLastUserText(messages).slice(0, QUOTED_CHARS)}"`;
}

export function buildCompletionText(prompt: string): string {
  return ` Mock completion of: "${prompt.slice(0, QUOTED_CHARS)}"`;
}

/** Cuts at the earliest stop sequence; the stop sequence itself is not part of the output, as with OpenAI. */
function cutAtStop(text: string, stop: string | readonly string[] | null | undefined): string | undefined {
  const sequences = typeof stop === 'string' ? [stop] : (stop ?? []);
  let cut: number | undefined;
  for (const sequence of sequences) {
    if (sequence.length === 0) continue;
    const at = text.indexOf(sequence);
    if (at >= 0 && (cut === undefined || at < cut)) cut = at;
  }
  return cut === undefined ? undefined : text.slice(0, cut);
}

/**
 * Longest prefix of `tokens` that decodes to whole characters: a token limit
 * can fall inside a multi-byte character, and the client should not get half of it.
 */
function decodeWholeCharacters(tokens: readonly number[]): string {
  const decoded = decodeTokens(tokens);
  return decoded.endsWith('\uFFFD') ? decoded.replace(/\uFFFD+$/, '') : decoded;
}

/** Applies `stop` and the output token limit the way a model run would end. */
export function limitReply(
  text: string,
  options: { stop?: string | readonly string[] | null; maxTokens?: number | null },
): LimitedText {
  const stopped = cutAtStop(text, options.stop);
  const candidate = stopped ?? text;
  const maxTokens = options.maxTokens;
  if (maxTokens != null) {
    const tokens = encodeText(candidate);
    if (tokens.length > maxTokens) {
      return {
        text: decodeWholeCharacters(tokens.slice(0, maxTokens)),
        finishReason: 'length',
        completionTokens: maxTokens,
      };
    }
    return { text: candidate, finishReason: 'stop', completionTokens: tokens.length };
  }
  return { text: candidate, finishReason: 'stop', completionTokens: countTextTokens(candidate) };
}

/**
 * Splits text into streamed pieces of a few tokens each. Pieces are cut on
 * whole characters, so they always concatenate back to the text.
 */
export function splitIntoPieces(text: string, tokensPerPiece = TOKENS_PER_PIECE): string[] {
  if (text.length === 0) return [];
  const tokens = encodeText(text);
  const pieces: string[] = [];
  let emitted = 0;
  for (let end = tokensPerPiece; emitted < text.length; end += tokensPerPiece) {
    const prefix = end >= tokens.length ? text : decodeWholeCharacters(tokens.slice(0, end));
    if (prefix.length > emitted) {
      pieces.push(text.slice(emitted, prefix.length));
      emitted = prefix.length;
    }
  }
  return pieces;
}
