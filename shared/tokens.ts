/**
 * Token counting with the o200k_base encoding (GPT-4o and later). Only this
 * encoding's module is imported, so one rank table loads, once, at import.
 */
import { countTokens, decode, encode } from 'gpt-tokenizer/encoding/o200k_base';
import bpeRanks from 'gpt-tokenizer/bpeRanks/o200k_base';
import type { ChatMessage } from './schemas/chat.js';

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

export function countTextTokens(text: string): number {
  if (text.length === 0) return 0;
  return countTokens(text, plainText);
}

export function encodeText(text: string): number[] {
  return encode(text, plainText);
}

const utf8 = new TextDecoder('utf-8');
const utf8Encoder = new TextEncoder();

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

function countPartTokens(part: ContentPart): number {
  switch (part.type) {
    case 'text':
      return countTextTokens(String(part.text ?? ''));
    case 'refusal':
      return countTextTokens(String(part.refusal ?? ''));
    case 'image_url': {
      const imageUrl = part.image_url as { detail?: string } | undefined;
      return imageUrl?.detail === 'low' ? IMAGE_TOKENS_LOW_DETAIL : IMAGE_TOKENS_HIGH_DETAIL;
    }
    case 'input_audio': {
      const audio = part.input_audio as { data?: string } | undefined;
      const bytes = base64ByteLength(audio?.data ?? '');
      return Math.max(AUDIO_TOKENS_PER_16_KB, Math.ceil((bytes / 16_384) * AUDIO_TOKENS_PER_16_KB));
    }
    case 'file': {
      const file = part.file as { file_data?: string; filename?: string } | undefined;
      const nameTokens = countTextTokens(file?.filename ?? '');
      // Extracted text stays under a token per 4 bytes, but page images are billed on top: one per 2 bytes stays above both.
      if (file?.file_data) return nameTokens + Math.ceil(base64ByteLength(file.file_data) / 2);
      return nameTokens + TOKENS_FOR_FILE_BY_ID;
    }
    default:
      return countTextTokens(JSON.stringify(part));
  }
}

function countContentTokens(content: unknown): number {
  if (content == null) return 0;
  if (typeof content === 'string') return countTextTokens(content);
  if (!Array.isArray(content)) return 0;
  let total = 0;
  for (const part of content as ContentPart[]) total += countPartTokens(part);
  return total;
}

interface FunctionCallLike {
  name: string;
  arguments: string;
}

function countFunctionCallTokens(call: FunctionCallLike): number {
  return TOKENS_PER_TOOL_CALL + countTextTokens(call.name) + countTextTokens(call.arguments);
}

function countMessageTokens(message: ChatMessage): number {
  let total = TOKENS_PER_MESSAGE + countTextTokens(message.role) + countContentTokens(message.content);
  if ('name' in message && typeof message.name === 'string') total += TOKENS_PER_NAME + countTextTokens(message.name);
  if (message.role === 'assistant') {
    if (message.refusal) total += countTextTokens(message.refusal);
    for (const call of message.tool_calls ?? []) total += countFunctionCallTokens(call.function);
    if (message.function_call) total += countFunctionCallTokens(message.function_call);
  }
  if (message.role === 'tool') total += countTextTokens(message.tool_call_id);
  return total;
}

/**
 * A conservative estimate of the prompt tokens of a chat request, after
 * OpenAI's published accounting (3 per message + role + content, 1 + name
 * for a name, 3 to prime the reply). Images count a fixed 765 tokens (85 at
 * `detail: "low"`); tool or function definitions count as their JSON text.
 * Used to reserve quota and by the mock vendor as its reported usage.
 */
export function countChatPromptTokens(messages: readonly ChatMessage[], tools?: readonly object[] | null): number {
  let total = TOKENS_FOR_REPLY_PRIMING;
  for (const message of messages) total += countMessageTokens(message);
  if (tools && tools.length > 0) total += TOKENS_FOR_TOOL_PREAMBLE + countTextTokens(JSON.stringify(tools));
  return total;
}
