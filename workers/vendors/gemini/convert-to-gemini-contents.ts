import { invalidRequest } from '../../../shared/errors.js';
import type { ChatMessage } from '../../../shared/schemas/chat.js';
import { readThoughtSignature, SKIP_THOUGHT_SIGNATURE } from './thought-signature.js';

export interface GeminiPart {
  text?: string;
  inlineData?: { mimeType: string; data: string };
  fileData?: { mimeType: string; fileUri: string };
  functionCall?: { name: string; args: Record<string, unknown> };
  functionResponse?: { name: string; response: Record<string, unknown> };
  thoughtSignature?: string;
}

export interface GeminiContent {
  role: 'user' | 'model';
  parts: GeminiPart[];
}

export interface GeminiPrompt {
  systemInstruction?: { parts: Array<{ text: string }> };
  contents: GeminiContent[];
}

type TextContent = string | ReadonlyArray<{ type: string; text?: string }> | null | undefined;

const IMAGE_TYPES: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  webp: 'image/webp',
  gif: 'image/gif',
  heic: 'image/heic',
  heif: 'image/heif',
};
const FILE_TYPES: Record<string, string> = {
  pdf: 'application/pdf',
  txt: 'text/plain',
  md: 'text/markdown',
  csv: 'text/csv',
  html: 'text/html',
};
const AUDIO_TYPES: Record<string, string> = { wav: 'audio/wav', mp3: 'audio/mp3' };

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function extensionOf(path: string): string {
  const dot = path.lastIndexOf('.');
  return dot === -1 || dot < path.lastIndexOf('/') ? '' : path.slice(dot + 1).toLowerCase();
}

/** Text of a string or of text parts (refusal parts of an assistant message count as its text). */
function textsOf(content: TextContent): string[] {
  if (content == null) return [];
  if (typeof content === 'string') return content.length > 0 ? [content] : [];
  const texts: string[] = [];
  for (const part of content) {
    const text = part.type === 'refusal' ? (part as { refusal?: string }).refusal : part.text;
    if (text) texts.push(text);
  }
  return texts;
}

/** `data:<mime>[;…];base64,<data>`; Gemini takes only base64 bytes. */
function parseDataUrl(url: string, param: string): { mimeType: string | undefined; data: string } {
  const comma = url.indexOf(',');
  const header = comma === -1 ? '' : url.slice(5, comma);
  if (comma === -1 || !header.endsWith(';base64')) throw invalidRequest('Data URLs must be base64-encoded.', param);
  const mimeType = header.split(';')[0];
  return { mimeType: mimeType || undefined, data: url.slice(comma + 1) };
}

function convertImageUrl(url: string, param: string): GeminiPart {
  if (url.startsWith('data:')) {
    const { mimeType, data } = parseDataUrl(url, param);
    return { inlineData: { mimeType: mimeType ?? 'image/jpeg', data } };
  }
  if (/^(https?|gs):\/\//i.test(url)) {
    // Gemini wants a MIME type with every file reference; the URL's extension is the only hint without fetching it.
    const path = url.split(/[?#]/, 1)[0]!;
    return { fileData: { mimeType: IMAGE_TYPES[extensionOf(path)] ?? 'image/jpeg', fileUri: url } };
  }
  throw invalidRequest('Image URLs must be http(s), gs:// or base64 data URLs.', param);
}

function convertFile(file: { file_id?: string; file_data?: string; filename?: string }, param: string): GeminiPart {
  if (!file.file_data)
    throw invalidRequest('Gemini models take files as `file_data`; file ids are not supported.', param);
  const guessed = FILE_TYPES[extensionOf(file.filename ?? '')] ?? 'application/pdf';
  if (!file.file_data.startsWith('data:')) return { inlineData: { mimeType: guessed, data: file.file_data } };
  const { mimeType, data } = parseDataUrl(file.file_data, param);
  return { inlineData: { mimeType: mimeType ?? guessed, data } };
}

function convertUserContent(message: Extract<ChatMessage, { role: 'user' }>, index: number): GeminiPart[] {
  if (typeof message.content === 'string') return message.content.length > 0 ? [{ text: message.content }] : [];
  const parts: GeminiPart[] = [];
  message.content.forEach((part, partIndex) => {
    const param = `messages[${index}].content[${partIndex}]`;
    switch (part.type) {
      case 'text':
        // Gemini refuses empty text parts ("empty text parameter").
        if (part.text.length > 0) parts.push({ text: part.text });
        break;
      case 'image_url':
        parts.push(convertImageUrl(part.image_url.url, `${param}.image_url.url`));
        break;
      case 'input_audio': {
        const format = part.input_audio.format.toLowerCase();
        parts.push({ inlineData: { mimeType: AUDIO_TYPES[format] ?? `audio/${format}`, data: part.input_audio.data } });
        break;
      }
      case 'file':
        parts.push(convertFile(part.file, `${param}.file`));
        break;
    }
  });
  return parts;
}

function parseArguments(text: string, param: string): Record<string, unknown> {
  let args: unknown;
  try {
    args = JSON.parse(text || '{}');
  } catch {
    throw invalidRequest('Tool call arguments must be valid JSON.', param);
  }
  if (!isObject(args)) throw invalidRequest('Tool call arguments must be a JSON object.', param);
  return args;
}

/** A JSON object result is passed as the response itself; anything else is wrapped as `{content}`. */
function toFunctionResponse(name: string, content: TextContent): GeminiPart {
  const text = textsOf(content).join('');
  if (text.trimStart().startsWith('{')) {
    try {
      const parsed: unknown = JSON.parse(text);
      if (isObject(parsed)) return { functionResponse: { name, response: parsed } };
    } catch {
      // Not JSON after all: sent as text.
    }
  }
  return { functionResponse: { name, response: { content: text } } };
}

/**
 * Gemini 3 refuses a replayed function-call step whose first call has no
 * signature. Calls minted by another model (or ids a client rewrote) get
 * Google's documented bypass value instead of a 400 the client cannot fix.
 */
function signUnsignedCalls(contents: GeminiContent[]): void {
  for (const content of contents) {
    if (content.role !== 'model') continue;
    const calls = content.parts.filter((part) => part.functionCall !== undefined);
    if (calls.length > 0 && calls.every((part) => part.thoughtSignature === undefined)) {
      calls[0]!.thoughtSignature = SKIP_THOUGHT_SIGNATURE;
    }
  }
}

/**
 * OpenAI messages → Gemini `systemInstruction` + `contents`. System and
 * developer messages (all, in order) go to the system instruction; the rest
 * become strictly alternating user/model turns, merging neighbours that end
 * up with the same role (tool results and a following user message included).
 */
export function convertToGeminiContents(messages: readonly ChatMessage[]): GeminiPrompt {
  const systemParts: Array<{ text: string }> = [];
  const contents: GeminiContent[] = [];
  // Gemini matches results to calls by function name; OpenAI tool messages only carry the call id.
  const callNames = new Map<string, string>();

  const push = (role: GeminiContent['role'], parts: GeminiPart[]) => {
    if (parts.length === 0) return;
    const last = contents.at(-1);
    if (last?.role === role) last.parts.push(...parts);
    else contents.push({ role, parts });
  };

  messages.forEach((message, index) => {
    switch (message.role) {
      case 'system':
      case 'developer':
        for (const text of textsOf(message.content)) systemParts.push({ text });
        break;
      case 'user':
        push('user', convertUserContent(message, index));
        break;
      case 'assistant': {
        const parts: GeminiPart[] = textsOf(message.content).map((text) => ({ text }));
        message.tool_calls?.forEach((call, callIndex) => {
          callNames.set(call.id, call.function.name);
          const part: GeminiPart = {
            functionCall: {
              name: call.function.name,
              args: parseArguments(
                call.function.arguments,
                `messages[${index}].tool_calls[${callIndex}].function.arguments`,
              ),
            },
          };
          const signature = readThoughtSignature(call.id);
          if (signature !== undefined) part.thoughtSignature = signature;
          parts.push(part);
        });
        if (message.function_call) {
          const { name, arguments: text } = message.function_call;
          parts.push({
            functionCall: { name, args: parseArguments(text, `messages[${index}].function_call.arguments`) },
          });
        }
        push('model', parts);
        break;
      }
      case 'tool': {
        const name = callNames.get(message.tool_call_id) ?? (message as { name?: unknown }).name;
        if (typeof name !== 'string' || name.length === 0) {
          throw invalidRequest(
            `No earlier assistant tool call has the id \`${message.tool_call_id}\`; Gemini needs the function ` +
              `name of every tool result.`,
            `messages[${index}].tool_call_id`,
          );
        }
        push('user', [toFunctionResponse(name, message.content)]);
        break;
      }
      case 'function':
        push('user', [toFunctionResponse(message.name, message.content)]);
        break;
    }
  });

  if (contents.length === 0) {
    throw invalidRequest('Gemini models need at least one user or assistant message with content.', 'messages');
  }
  signUnsignedCalls(contents);
  return systemParts.length > 0 ? { systemInstruction: { parts: systemParts }, contents } : { contents };
}
