import { ChatStreamEncoder, encodeChatAnswer, type ChatEncoderOptions } from '../../workers/answers/chat-encoder.js';
import type { Answer, AnswerEvent, Usage } from '../../workers/answers/events.js';

const defaults: ChatEncoderOptions = {
  form: 'chat.completion',
  model: 'test-model',
  includeUsage: true,
  legacyFunctions: false,
  serviceTier: 'default',
};

export interface EncodedStream {
  /** The JSON text after `data: ` of every frame, in order. */
  chunks: string[];
  /** The same, parsed. */
  parsed: Array<Record<string, any>>;
  /** Every batch the adapter yielded, as it yielded them. */
  batches: AnswerEvent[][];
  usage: Usage | undefined;
}

/**
 * Runs an adapter's event stream through the chat encoder, as the worker does (usage included unless told otherwise).
 */
export async function encodeStream(
  stream: AsyncIterable<AnswerEvent[]>,
  options: Partial<ChatEncoderOptions> = {},
): Promise<EncodedStream> {
  const encoder = new ChatStreamEncoder({ ...defaults, ...options });
  const batches: AnswerEvent[][] = [];
  let frames = '';
  for await (const batch of stream) {
    batches.push(batch);
    frames += encoder.encode(batch).frames;
  }
  const chunks = frames
    .split('\n\n')
    .filter((frame) => frame !== '')
    .map((frame, n) => {
      // Every frame is numbered, from 0, for a resume after it.
      const head = `id: ${n}\ndata: `;
      if (!frame.startsWith(head)) throw new Error(`not an SSE data frame numbered ${n}: ${frame}`);
      return frame.slice(head.length);
    });
  return {
    chunks,
    parsed: chunks.map((chunk) => JSON.parse(chunk) as Record<string, any>),
    batches,
    usage: encoder.usage,
  };
}

/** A plain answer as the client's body, as the worker writes it. */
export function encodeAnswer(
  answer: Answer,
  options: Partial<Omit<ChatEncoderOptions, 'includeUsage'>> = {},
): { body: string; parsed: Record<string, any> } {
  const body = encodeChatAnswer(answer, { ...defaults, ...options });
  return { body, parsed: JSON.parse(body) as Record<string, any> };
}
