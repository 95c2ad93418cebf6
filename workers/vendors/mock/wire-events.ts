import type { AnswerEvent, StartEvent } from '../../answers/events.js';
import { MOCK_SYSTEM_FINGERPRINT } from './ids.js';

/**
 * One chunk the mock sends: the exact JSON an OpenAI-compatible vendor would
 * send (what chat clients get, byte for byte), and what it says as answer
 * events (what other encoders, such as the Responses API's, read).
 */
export interface RenderedChunk {
  wire: string;
  events: AnswerEvent[];
}

export function startEvent(plan: { id: string; created: number; model: string }): StartEvent {
  return {
    type: 'start',
    id: plan.id,
    created: plan.created,
    model: plan.model,
    systemFingerprint: MOCK_SYSTEM_FINGERPRINT,
  };
}

function carry(chunk: RenderedChunk): AnswerEvent[] {
  // The first event takes the chunk; '' on the others tells the chat encoder it already went out.
  return chunk.events.map((event, position) => ({ ...event, wire: position === 0 ? chunk.wire : '' }));
}

/**
 * The batches of a mock stream, one per chunk. `start` opens the first batch,
 * since every encoder needs it before anything else, and carries that chunk.
 * With no other chunk (a completion of no prompts) it opens the usage batch
 * without the chunk: the usage event keeps it, sent only to clients that asked.
 */
export function toBatches(
  start: StartEvent,
  chunks: readonly RenderedChunk[],
  tail: RenderedChunk,
): { batches: AnswerEvent[][]; tail: AnswerEvent[] } {
  const [first, ...rest] = chunks;
  if (first === undefined) return { batches: [], tail: [start, ...carry(tail)] };
  const batches = [carry({ wire: first.wire, events: [start, ...first.events] }), ...rest.map(carry)];
  return { batches, tail: carry(tail) };
}
