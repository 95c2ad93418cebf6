import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import type { CallContext } from '../types.js';
import type { AnswerEvent } from '../../answers/events.js';
import { planChatCompletion, type ChatPlan, type ChoicePlan } from './chat.js';
import { MOCK_SYSTEM_FINGERPRINT } from './ids.js';
import { interleave, pace, resolveChunkDelayMs } from './pacing.js';
import { splitIntoPieces } from './reply-text.js';
import { startEvent, toBatches, type RenderedChunk } from './wire-events.js';

type Delta = Record<string, unknown>;
interface ChoiceChunk {
  index: number;
  delta: Delta;
  finishReason: string | null;
  /** What the delta says, for encoders other than chat's. */
  events: AnswerEvent[];
}

/**
 * The deltas of one choice in OpenAI's order: role first (with `content: ""`
 * for text, `content: null` plus the first call fragment for tools), then
 * content or argument pieces, then an empty delta carrying the finish reason.
 * A legacy function_call is tool call 0 of the choice, with no id (functions have none).
 */
function buildChoiceChunks(choice: ChoicePlan): ChoiceChunk[] {
  const index = choice.index;
  const chunks: ChoiceChunk[] = [];
  const push = (delta: Delta, ...events: AnswerEvent[]) => chunks.push({ index, delta, finishReason: null, events });
  const role: AnswerEvent = { type: 'role', choice: index };
  if (choice.toolCalls) {
    choice.toolCalls.forEach((call, callIndex) => {
      const opening: Delta = {
        tool_calls: [{ index: callIndex, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }],
      };
      const opened: AnswerEvent = {
        type: 'tool-call',
        choice: index,
        index: callIndex,
        id: call.id,
        name: call.name,
        arguments: '',
      };
      if (callIndex === 0) push({ role: 'assistant', content: null, ...opening }, role, opened);
      else push(opening, opened);
      for (const piece of splitIntoPieces(call.arguments)) {
        push(
          { tool_calls: [{ index: callIndex, function: { arguments: piece } }] },
          { type: 'tool-call', choice: index, index: callIndex, arguments: piece },
        );
      }
    });
  } else if (choice.functionCall) {
    const call = choice.functionCall;
    push({ role: 'assistant', content: null, function_call: { name: call.name, arguments: '' } }, role, {
      type: 'tool-call',
      choice: index,
      index: 0,
      name: call.name,
      arguments: '',
    });
    for (const piece of splitIntoPieces(call.arguments)) {
      push({ function_call: { arguments: piece } }, { type: 'tool-call', choice: index, index: 0, arguments: piece });
    }
  } else {
    push({ role: 'assistant', content: '' }, role);
    for (const piece of splitIntoPieces(choice.content ?? ''))
      push({ content: piece }, { type: 'text', choice: index, text: piece });
  }
  chunks.push({
    index,
    delta: {},
    finishReason: choice.finishReason,
    events: [{ type: 'finish', choice: index, reason: choice.finishReason }],
  });
  return chunks;
}

function renderChunks(plan: ChatPlan): RenderedChunk[] {
  const envelope = {
    id: plan.id,
    object: 'chat.completion.chunk',
    created: plan.created,
    model: plan.model,
    system_fingerprint: MOCK_SYSTEM_FINGERPRINT,
  };
  return [...interleave(plan.choices.map(buildChoiceChunks))].map((chunk) => {
    const choice = { index: chunk.index, delta: chunk.delta, logprobs: null, finish_reason: chunk.finishReason };
    return { wire: JSON.stringify({ ...envelope, choices: [choice] }), events: chunk.events };
  });
}

function renderUsageChunk(plan: ChatPlan): RenderedChunk {
  const wire = JSON.stringify({
    id: plan.id,
    object: 'chat.completion.chunk',
    created: plan.created,
    model: plan.model,
    system_fingerprint: MOCK_SYSTEM_FINGERPRINT,
    choices: [],
    usage: plan.usage,
  });
  return { wire, events: [{ type: 'usage', usage: plan.usage }] };
}

/**
 * A `chat.completion.chunk` stream: one batch of events per chunk. Planning
 * runs on the first `next()`, so a marker error surfaces before any chunk.
 */
export async function* streamChatCompletion(
  request: ChatCompletionRequest,
  ctx: CallContext,
): AsyncGenerator<AnswerEvent[]> {
  const plan = await planChatCompletion(request, ctx);
  const { batches, tail } = toBatches(startEvent(plan), renderChunks(plan), renderUsageChunk(plan));
  yield* pace(batches, tail, resolveChunkDelayMs(plan.markers.slowMs, ctx), ctx.signal);
}
