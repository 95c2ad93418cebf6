/**
 * Token counting with the o200k_base encoding (GPT-4o and later). Only this
 * encoding's module is imported, so one rank table loads, once, at import.
 */
import { countTokens, decode, encode } from 'gpt-tokenizer/encoding/o200k_base';
import bpeRanks from 'gpt-tokenizer/bpeRanks/o200k_base';
import type { ChatMessage } from './schemas/chat.js';
import { loopSlices } from './loop-slices.js';

/**
 * Client text may contain strings such as `<|endoftext|>`; the tokenizer
 * throws on them by default. Vendors count them as ordinary text, so do we.
 */
const plainText = { disallowedSpecial: new Set<string>() };

/** OpenAI's published chat accounting: every message costs a few tokens of framing. */
const TOKENS_PER_MESSAGE = 3;
const TOKENS_PER_NAME = 1;
/** Every reply is primed with `<|start|>assistant<|message|>`. */
const TOKENS_FOR_REPLY_PRIMING = 3;
/** Fixed vision costs: 765 is a 1024×1024 tile set at high detail (85 base + 4×170); low detail is a flat 85. */
export const IMAGE_TOKENS_HIGH_DETAIL = 765;
export const IMAGE_TOKENS_LOW_DETAIL = 85;
/** Tool definitions are rendered into a system preamble whose framing the JSON count does not see. */
const TOKENS_FOR_TOOL_PREAMBLE = 12;
/** Per call framing around a function name and its arguments in an assistant turn. */
const TOKENS_PER_TOOL_CALL = 8;
/** A file referenced by id only: its size is unknown here, so assume a few pages. */
const TOKENS_FOR_FILE_BY_ID = 2_000;
/** Audio input runs at about 10 tokens per second; 16 kB of compressed audio is at least a second. */
const AUDIO_TOKENS_PER_16_KB = 10;

/**
 * Byte-pair encoding is superlinear in the length of one pre-token: 130,000
 * × 'a', or a long run of CJK text without spaces, takes seconds to minutes in
 * one piece. Text is therefore fed to the encoder in pieces: cut just before a
 * space that follows a non-space (always a pre-token boundary in o200k, so
 * ordinary text counts exactly as in one piece), and a run with no such space
 * is hard-cut every `MAX_RUN` characters (the count there is an estimate, a
 * few tokens off per cut). The cost is linear in the text.
 */
const MAX_PIECE = 1024;
const MAX_RUN = 256;

export function* tokenizerPieces(text: string): Generator<string> {
  let start = 0;
  while (start < text.length) {
    if (text.length - start <= MAX_RUN) {
      yield start === 0 ? text : text.slice(start);
      return;
    }
    let lastCut = -1;
    let i = start + 1;
    for (; i < text.length; i++) {
      if (text.charCodeAt(i) === 0x20 && !isWhitespace(text.charCodeAt(i - 1))) lastCut = i;
      if (i - (lastCut > start ? lastCut : start) >= MAX_RUN || i - start >= MAX_PIECE) break;
    }
    if (i >= text.length) {
      yield text.slice(start);
      return;
    }
    let cut = lastCut > start ? lastCut : i;
    // Never split a surrogate pair.
    if (cut > start + 1 && isHighSurrogate(text.charCodeAt(cut - 1))) cut--;
    yield text.slice(start, cut);
    start = cut;
  }
}

function isWhitespace(code: number): boolean {
  return (
    code === 0x20 ||
    (code >= 0x09 && code <= 0x0d) ||
    code === 0xa0 ||
    code === 0x3000 ||
    (code >= 0x2000 && code <= 0x200a)
  );
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

export function countTextTokens(text: string): number {
  if (text.length === 0) return 0;
  if (text.length <= MAX_RUN) return countTokens(text, plainText);
  let total = 0;
  for (const piece of tokenizerPieces(text)) total += countTokens(piece, plainText);
  return total;
}

export function encodeText(text: string): number[] {
  if (text.length <= MAX_RUN) return encode(text, plainText);
  const tokens: number[] = [];
  for (const piece of tokenizerPieces(text)) for (const token of encode(piece, plainText)) tokens.push(token);
  return tokens;
}

/**
 * `countTextTokens` for text that may be long, off the critical path of every
 * other request: it yields to the event loop every couple of milliseconds, and
 * stops as soon as the count passes `stopAbove` (the caller only needs to know
 * that a limit is exceeded), returning the count so far.
 */
export async function countTextTokensAsync(text: string, stopAbove = Number.POSITIVE_INFINITY): Promise<number> {
  if (text.length <= MAX_PIECE) return countTextTokens(text);
  let total = 0;
  const slice = loopSlices();
  for (const piece of tokenizerPieces(text)) {
    total += countTokens(piece, plainText);
    if (total > stopAbove) return total;
    await slice();
  }
  return total;
}

/** `encodeText` that yields to the event loop every couple of milliseconds. */
export async function encodeTextAsync(text: string): Promise<number[]> {
  if (text.length <= MAX_PIECE) return encodeText(text);
  const tokens: number[] = [];
  const slice = loopSlices();
  for (const piece of tokenizerPieces(text)) {
    for (const token of encode(piece, plainText)) tokens.push(token);
    await slice();
  }
  return tokens;
}

const utf8 = new TextDecoder('utf-8');

/**
 * gpt-tokenizer's own decode() shares one streaming TextDecoder across calls,
 * so a token list that ends inside a multi-byte character leaves bytes behind
 * that corrupt the next decode anywhere in the process. Byte-level tokens are
 * therefore joined and decoded here, non-streaming: a cut character becomes
 * U+FFFD instead. Throws on ids outside the vocabulary.
 */
export function decodeTokens(tokens: readonly number[]): string {
  let text = '';
  let pendingBytes: number[] = [];
  const flushBytes = () => {
    if (pendingBytes.length === 0) return;
    text += utf8.decode(Uint8Array.from(pendingBytes));
    pendingBytes = [];
  };
  for (const token of tokens) {
    const entry = Number.isInteger(token) ? bpeRanks[token] : undefined;
    if (Array.isArray(entry)) {
      pendingBytes.push(...entry);
      continue;
    }
    flushBytes();
    // Special tokens live outside the rank table; decode() handles those as whole strings.
    text += typeof entry === 'string' ? entry : decode([token]);
  }
  flushBytes();
  return text;
}

/** Decoded size in bytes of base64 text, without decoding it. */
function base64ByteLength(base64: string): number {
  return Math.floor((base64.length * 3) / 4);
}

type ContentPart = { type: string; [key: string]: unknown };

/**
 * What a chat prompt costs, before any text is tokenized: the fixed framing
 * tokens, and the texts whose tokens add to them. Sync and async counts share it.
 */
interface PromptTally {
  fixed: number;
  texts: string[];
}

function tallyPart(part: ContentPart, tally: PromptTally): void {
  switch (part.type) {
    case 'text':
      tally.texts.push(String(part.text ?? ''));
      return;
    case 'refusal':
      tally.texts.push(String(part.refusal ?? ''));
      return;
    case 'image_url': {
      const imageUrl = part.image_url as { detail?: string } | undefined;
      tally.fixed += imageUrl?.detail === 'low' ? IMAGE_TOKENS_LOW_DETAIL : IMAGE_TOKENS_HIGH_DETAIL;
      return;
    }
    case 'input_audio': {
      const audio = part.input_audio as { data?: string } | undefined;
      const bytes = base64ByteLength(audio?.data ?? '');
      tally.fixed += Math.max(AUDIO_TOKENS_PER_16_KB, Math.ceil((bytes / 16_384) * AUDIO_TOKENS_PER_16_KB));
      return;
    }
    case 'file': {
      const file = part.file as { file_data?: string; filename?: string } | undefined;
      tally.texts.push(file?.filename ?? '');
      // Extracted text stays under a token per 4 bytes, but page images are billed on top: one per 2 bytes stays above
      // both.
      tally.fixed += file?.file_data ? Math.ceil(base64ByteLength(file.file_data) / 2) : TOKENS_FOR_FILE_BY_ID;
      return;
    }
    default:
      tally.texts.push(JSON.stringify(part));
  }
}

function tallyContent(content: unknown, tally: PromptTally): void {
  if (content == null) return;
  if (typeof content === 'string') tally.texts.push(content);
  else if (Array.isArray(content)) for (const part of content as ContentPart[]) tallyPart(part, tally);
}

interface FunctionCallLike {
  name: string;
  arguments: string;
}

function tallyFunctionCall(call: FunctionCallLike, tally: PromptTally): void {
  tally.fixed += TOKENS_PER_TOOL_CALL;
  tally.texts.push(call.name, call.arguments);
}

function tallyMessage(message: ChatMessage, tally: PromptTally): void {
  tally.fixed += TOKENS_PER_MESSAGE;
  tally.texts.push(message.role);
  tallyContent(message.content, tally);
  if ('name' in message && typeof message.name === 'string') {
    tally.fixed += TOKENS_PER_NAME;
    tally.texts.push(message.name);
  }
  if (message.role === 'assistant') {
    if (message.refusal) tally.texts.push(message.refusal);
    for (const call of message.tool_calls ?? []) tallyFunctionCall(call.function, tally);
    if (message.function_call) tallyFunctionCall(message.function_call, tally);
  }
  if (message.role === 'tool') tally.texts.push(message.tool_call_id);
}

function tallyChatPrompt(messages: readonly ChatMessage[], tools?: readonly object[] | null): PromptTally {
  const tally: PromptTally = { fixed: TOKENS_FOR_REPLY_PRIMING, texts: [] };
  for (const message of messages) tallyMessage(message, tally);
  if (tools && tools.length > 0) {
    tally.fixed += TOKENS_FOR_TOOL_PREAMBLE;
    tally.texts.push(JSON.stringify(tools));
  }
  return tally;
}

/**
 * A conservative estimate of the prompt tokens of a chat request, after
 * OpenAI's published accounting (3 per message + role + content, 1 + name
 * for a name, 3 to prime the reply). Images count a fixed 765 tokens (85 at
 * `detail: "low"`); tool or function definitions count as their JSON text.
 * Used to reserve quota and by the mock vendor as its reported usage.
 */
export function countChatPromptTokens(messages: readonly ChatMessage[], tools?: readonly object[] | null): number {
  const tally = tallyChatPrompt(messages, tools);
  let total = tally.fixed;
  for (const text of tally.texts) total += countTextTokens(text);
  return total;
}

/**
 * `countChatPromptTokens` that yields to the event loop while it counts, and
 * stops once the count passes `stopAbove` (returning the count so far).
 */
export async function countChatPromptTokensAsync(
  messages: readonly ChatMessage[],
  tools?: readonly object[] | null,
  stopAbove = Number.POSITIVE_INFINITY,
): Promise<number> {
  const tally = tallyChatPrompt(messages, tools);
  let total = tally.fixed;
  const slice = loopSlices();
  for (const text of tally.texts) {
    total += await countTextTokensAsync(text, stopAbove - total);
    if (total > stopAbove) return total;
    // Many small texts (thousands of messages) add up too.
    await slice();
  }
  return total;
}
