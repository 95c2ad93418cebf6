import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import type { CallContext, StreamEvent } from '../types.js';
import { planChatCompletion, type ChatPlan, type ChoicePlan } from './chat.js';
import { MOCK_SYSTEM_FINGERPRINT } from './ids.js';
import { interleave, pace, resolveChunkDelayMs } from './pacing.js';
import { splitIntoPieces } from './reply-text.js';

type Delta = Record<string, unknown>;
interface ChoiceChunk {
  delta: Delta;
  finishReason: string | null;
}

/**
 * The deltas of one choice in OpenAI's order: role first (with `content: ""`
 * for text, `content: null` plus the first call fragment for tools), then
 * content or argument pieces, then an empty delta carrying the finish reason.
 */
function buildChoiceChunks(choice: ChoicePlan): ChoiceChunk[] {
  const deltas: Delta[] = [];
  if (choice.toolCalls) {
    choice.toolCalls.forEach((call, index) => {
      const opening: Delta = {
        tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }],
      };
      deltas.push(index === 0 ? { role: 'assistant', content: null, ...opening } : opening);
      for (const piece of splitIntoPieces(call.arguments)) deltas.push({ tool_calls: [{ index, function: { arguments: piece } }] });
    });
  } else if (choice.functionCall) {
    const call = choice.functionCall;
    deltas.push({ role: 'assistant', content: null, function_call: { name: call.name, arguments: '' } });
    for (const piece of splitIntoPieces(call.arguments)) deltas.push({ function_call: { arguments: piece } });
  } else {
    deltas.push({ role: 'assistant', content: '' });
    for (const piece of splitIntoPieces(choice.content ?? '')) deltas.push({ content: piece });
  }
  const chunks: ChoiceChunk[] = deltas.map((delta) => ({ delta, finishReason: null }));
  chunks.push({ delta: {}, finishReason: choice.finishReason });
  return chunks;
}

function* renderChunks(plan: ChatPlan): Generator<StreamEvent> {
  const envelope = { id: plan.id, object: 'chat.completion.chunk', created: plan.created, model: plan.model, system_fingerprint: MOCK_SYSTEM_FINGERPRINT };
  const perChoice = plan.choices.map((choice) => buildChoiceChunks(choice).map((chunk) => ({ index: choice.index, ...chunk })));
  for (const chunk of interleave(perChoice)) {
    const choice = { index: chunk.index, delta: chunk.delta, logprobs: null, finish_reason: chunk.finishReason };
    yield { data: JSON.stringify({ ...envelope, choices: [choice] }) };
  }
}

function renderUsageChunk(plan: ChatPlan): StreamEvent {
  const data = JSON.stringify({
    id: plan.id,
    object: 'chat.completion.chunk',
    created: plan.created,
    model: plan.model,
    system_fingerprint: MOCK_SYSTEM_FINGERPRINT,
    choices: [],
    usage: plan.usage,
  });
  return { data, usage: plan.usage, usageOnly: true };
}

/** A `chat.completion.chunk` stream. Planning runs on the first `next()`, so a marker error surfaces before any chunk. */
export async function* streamChatCompletion(request: ChatCompletionRequest, ctx: CallContext): AsyncGenerator<StreamEvent> {
  const plan = await planChatCompletion(request, ctx);
  yield* pace(renderChunks(plan), renderUsageChunk(plan), resolveChunkDelayMs(plan.markers.slowMs), ctx.signal);
}
