import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import { countChatPromptTokensAsync, countTextTokens } from '../../../shared/tokens.js';
import type { CallContext } from '../types.js';
import type { Answer, Usage } from '../../answers/events.js';
import { chatCompletionId, MOCK_SYSTEM_FINGERPRINT, nowInSeconds, toolCallId } from './ids.js';
import { readMockMarkers, throwIfErrorMarker, type MockMarkers } from './markers.js';
import { buildChatReplyText, findLastUserText, limitReply } from './reply-text.js';
import { planToolUse, type PlannedCall } from './tool-calls.js';

export type ChatFinishReason = 'stop' | 'length' | 'tool_calls' | 'function_call';

export interface PlannedToolCall extends PlannedCall {
  id: string;
}

/** One choice of the answer, decided up front so the stream and the plain body say the same thing. */
export interface ChoicePlan {
  index: number;
  content: string | null;
  toolCalls?: PlannedToolCall[];
  functionCall?: PlannedCall;
  finishReason: ChatFinishReason;
  completionTokens: number;
}

export interface ChatPlan {
  id: string;
  created: number;
  model: string;
  choices: ChoicePlan[];
  usage: Usage;
  markers: MockMarkers;
}

export function buildUsage(promptTokens: number, completionTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0 },
  };
}

const countCallTokens = (call: PlannedCall) => countTextTokens(call.name) + countTextTokens(call.arguments);

/**
 * The calls a model would get out within `maxTokens` output tokens: whole
 * calls while they fit, then the one that does not cut inside its arguments
 * (as a real model's output ends mid-JSON at the limit), and none after it.
 */
function limitCalls(
  calls: readonly PlannedCall[],
  maxTokens: number | null | undefined,
): { calls: PlannedCall[]; completionTokens: number; cut: boolean } {
  let used = 0;
  const kept: PlannedCall[] = [];
  for (const call of calls) {
    const cost = countCallTokens(call);
    if (maxTokens == null || used + cost <= maxTokens) {
      kept.push(call);
      used += cost;
      continue;
    }
    const nameTokens = countTextTokens(call.name);
    const room = maxTokens - used - nameTokens;
    if (room >= 0) kept.push({ name: call.name, arguments: limitReply(call.arguments, { maxTokens: room }).text });
    return { calls: kept, completionTokens: maxTokens, cut: true };
  }
  return { calls: kept, completionTokens: used, cut: false };
}

/**
 * Every choice gets the same answer (the mock is deterministic); only tool
 * call ids differ per choice. Tool calls honour max_tokens like text: past
 * it the arguments end where the limit falls and the finish reason is
 * `length`, so no answer costs more than the output its request reserved.
 */
function planChoices(request: ChatCompletionRequest, ctx: CallContext): ChoicePlan[] {
  const choiceCount = request.n ?? 1;
  const indices = Array.from({ length: choiceCount }, (_, index) => index);
  const tools = planToolUse(request);
  const maxTokens = request.max_completion_tokens ?? request.max_tokens;
  if (tools.kind === 'tool_calls') {
    const limited = limitCalls(tools.calls, maxTokens);
    return indices.map((index) => ({
      index,
      content: null,
      toolCalls: limited.calls.map((call, callIndex) => ({ id: toolCallId(ctx.requestId, index, callIndex), ...call })),
      finishReason: limited.cut ? 'length' : 'tool_calls',
      completionTokens: limited.completionTokens,
    }));
  }
  if (tools.kind === 'function_call') {
    const limited = limitCalls([tools.call], maxTokens);
    const call = limited.calls[0] ?? { name: tools.call.name, arguments: '' };
    return indices.map((index) => ({
      index,
      content: null,
      functionCall: call,
      finishReason: limited.cut ? 'length' : 'function_call',
      completionTokens: limited.completionTokens,
    }));
  }
  const reply = limitReply(buildChatReplyText(request.messages), { stop: request.stop, maxTokens });
  return indices.map((index) => ({
    index,
    content: reply.text,
    finishReason: reply.finishReason,
    completionTokens: reply.completionTokens,
  }));
}

/** Decides the whole answer, or throws the failure a `[mock:error:…]` marker asks for. */
export async function planChatCompletion(request: ChatCompletionRequest, ctx: CallContext): Promise<ChatPlan> {
  ctx.signal.throwIfAborted();
  const markers = readMockMarkers([findLastUserText(request.messages)]);
  throwIfErrorMarker(markers);

  const choices = planChoices(request, ctx);
  // A long prompt is counted without holding the event loop (with `npm start` the api shares it).
  const promptTokens = await countChatPromptTokensAsync(request.messages, request.tools ?? request.functions);
  const completionTokens = choices.reduce((sum, choice) => sum + choice.completionTokens, 0);
  return {
    id: chatCompletionId(ctx.requestId),
    created: nowInSeconds(),
    model: ctx.upstreamModel,
    choices,
    usage: buildUsage(promptTokens, completionTokens),
    markers,
  };
}

function renderMessage(choice: ChoicePlan): Record<string, unknown> {
  const message: Record<string, unknown> = { role: 'assistant', content: choice.content, refusal: null };
  if (choice.toolCalls) {
    message.tool_calls = choice.toolCalls.map((call) => ({
      id: call.id,
      type: 'function',
      function: { name: call.name, arguments: call.arguments },
    }));
  }
  if (choice.functionCall) message.function_call = { ...choice.functionCall };
  return message;
}

/** The `chat.completion` body. `logprobs` is always null: the mock has no token probabilities to report. */
export function renderChatCompletion(plan: ChatPlan): string {
  return JSON.stringify({
    id: plan.id,
    object: 'chat.completion',
    created: plan.created,
    model: plan.model,
    choices: plan.choices.map((choice) => ({
      index: choice.index,
      message: renderMessage(choice),
      logprobs: null,
      finish_reason: choice.finishReason,
    })),
    usage: plan.usage,
    system_fingerprint: MOCK_SYSTEM_FINGERPRINT,
  });
}

/**
 * The plain answer: the body above as `wire` (clients of the chat wire form get
 * it byte for byte), and the same facts as fields for other encoders. A legacy
 * function_call is the choice's one tool call, with no id (functions have none).
 */
export function toChatAnswer(plan: ChatPlan): Answer {
  return {
    id: plan.id,
    created: plan.created,
    model: plan.model,
    systemFingerprint: MOCK_SYSTEM_FINGERPRINT,
    choices: plan.choices.map((choice) => ({
      index: choice.index,
      text: choice.content,
      toolCalls: choice.toolCalls
        ? choice.toolCalls.map((call) => ({ id: call.id, name: call.name, arguments: call.arguments }))
        : choice.functionCall
          ? [{ id: '', name: choice.functionCall.name, arguments: choice.functionCall.arguments }]
          : [],
      finishReason: choice.finishReason,
    })),
    usage: plan.usage,
    wire: renderChatCompletion(plan),
  };
}
