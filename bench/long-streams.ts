/**
 * One long streamed answer (N text deltas) in each vendor's exact SSE framing,
 * for the translation benchmark: built once, then served in one write by the
 * fakes so the network is not what is measured.
 *
 * - OpenAI: `data: <chunk>\n\n` per chunk (a role chunk, N content chunks, a
 *   finish chunk, the usage chunk as with `include_usage`), then `data: [DONE]\n\n`.
 * - Anthropic: `event: <type>\ndata: <payload>\n\n` for message_start,
 *   content_block_start, ping, N content_block_delta, content_block_stop,
 *   message_delta, message_stop.
 * - Gemini: `data: <GenerateContentResponse>\r\n\r\n` per chunk, no terminator,
 *   finishReason and usageMetadata on the last chunk.
 */
import { frameAnthropicEvents } from '../test/support/fake-anthropic.js';

export type Protocol = 'openai' | 'anthropic' | 'gemini';
export const protocols: readonly Protocol[] = ['openai', 'anthropic', 'gemini'];

/** The catalog model each protocol is measured with (and the upstream model id sent). */
export const protocolModels: Record<Protocol, string> = {
  openai: 'gpt-4o-mini',
  anthropic: 'claude-sonnet-4-5',
  gemini: 'gemini-2.5-flash',
};

/** The vendor name of each protocol's built-in channel. */
export const protocolVendors: Record<Protocol, string> = { openai: 'openai', anthropic: 'anthropic', gemini: 'google' };

/** Token-sized text deltas, with a newline, quotes and non-ASCII so JSON escaping is exercised too. */
const PIECES = [
  ' The',
  ' quick',
  ' brown',
  ' fox',
  ' jumps',
  ' over',
  ' the',
  ' lazy',
  ' dog',
  '.',
  '\n',
  ' "Quoted"',
  ' café',
  ' naïve',
  ' 42',
  ',',
];

export function streamPieces(count: number): string[] {
  return Array.from({ length: count }, (_, i) => PIECES[i % PIECES.length]!);
}

export function expectedText(count: number): string {
  return streamPieces(count).join('');
}

const PROMPT_TOKENS = 12;
const CREATED = 1_730_000_000;

function openaiStream(count: number, model: string): string {
  const base = {
    id: 'chatcmpl-bench',
    object: 'chat.completion.chunk',
    created: CREATED,
    model,
    system_fingerprint: 'fp_bench',
  };
  const choice = (delta: unknown, finishReason: string | null) => [
    { index: 0, delta, logprobs: null, finish_reason: finishReason },
  ];
  const chunks: unknown[] = [
    { ...base, choices: choice({ role: 'assistant', content: '', refusal: null }, null), usage: null },
    ...streamPieces(count).map((content) => ({ ...base, choices: choice({ content }, null), usage: null })),
    { ...base, choices: choice({}, 'stop'), usage: null },
    {
      ...base,
      choices: [],
      usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: count, total_tokens: PROMPT_TOKENS + count },
    },
  ];
  return `${chunks.map((chunk) => `data: ${JSON.stringify(chunk)}\n\n`).join('')}data: [DONE]\n\n`;
}

function anthropicStream(count: number, model: string): string {
  const events: unknown[] = [
    {
      type: 'message_start',
      message: {
        id: 'msg_bench_01',
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: {
          input_tokens: PROMPT_TOKENS,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 0,
          output_tokens: 1,
        },
      },
    },
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    { type: 'ping' },
    ...streamPieces(count).map((text) => ({
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'text_delta', text },
    })),
    { type: 'content_block_stop', index: 0 },
    { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: count } },
    { type: 'message_stop' },
  ];
  return frameAnthropicEvents(events);
}

function geminiStream(count: number, model: string): string {
  const envelope = { modelVersion: model, responseId: 'bench-response-01' };
  const pieces = streamPieces(count);
  return pieces
    .map((text, index) => {
      const last = index === pieces.length - 1;
      const candidate = {
        content: { role: 'model', parts: [{ text }] },
        ...(last ? { finishReason: 'STOP' } : {}),
        index: 0,
      };
      const usage = last
        ? {
            usageMetadata: {
              promptTokenCount: PROMPT_TOKENS,
              candidatesTokenCount: count,
              totalTokenCount: PROMPT_TOKENS + count,
            },
          }
        : {};
      return `data: ${JSON.stringify({ candidates: [candidate], ...usage, ...envelope })}\r\n\r\n`;
    })
    .join('');
}

/** The SSE body of one long answer in `protocol`'s framing. */
export function longStream(protocol: Protocol, count: number): string {
  const model = protocolModels[protocol];
  if (protocol === 'openai') return openaiStream(count, model);
  if (protocol === 'anthropic') return anthropicStream(count, model);
  return geminiStream(count, model);
}

/** What a client sends each vendor directly for the same stream (for the direct-to-fake baseline). */
export function directRequest(
  protocol: Protocol,
  baseUrl: string,
  apiKey: string,
): { url: string; headers: Record<string, string>; body: string } {
  const model = protocolModels[protocol];
  if (protocol === 'openai') {
    return {
      url: `${baseUrl}/chat/completions`,
      headers: { authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({
        model,
        messages: [{ role: 'user', content: 'Say hello.' }],
        stream: true,
        stream_options: { include_usage: true },
      }),
    };
  }
  if (protocol === 'anthropic') {
    return {
      url: `${baseUrl}/v1/messages`,
      headers: { 'x-api-key': apiKey, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({
        model,
        max_tokens: 4096,
        messages: [{ role: 'user', content: 'Say hello.' }],
        stream: true,
      }),
    };
  }
  return {
    url: `${baseUrl}/v1beta/models/${model}:streamGenerateContent?alt=sse`,
    headers: { 'x-goog-api-key': apiKey },
    body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'Say hello.' }] }] }),
  };
}
