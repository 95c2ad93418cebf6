import { invalidRequest } from '../../../shared/errors.js';
import type { CompletionRequest } from '../../../shared/schemas/completions.js';
import { countTextTokensAsync, decodeTokens } from '../../../shared/tokens.js';
import type { CallContext } from '../types.js';
import type { Answer, AnswerEvent, Usage } from '../../answers/events.js';
import { completionId, MOCK_SYSTEM_FINGERPRINT, nowInSeconds } from './ids.js';
import { readMockMarkers, throwIfErrorMarker, type MockMarkers } from './markers.js';
import { sleep } from '../sleep.js';
import { interleave, pace, resolveChunkDelayMs } from './pacing.js';
import { buildCompletionText, limitReply, splitIntoPieces, type TextFinishReason } from './reply-text.js';
import { startEvent, toBatches, type RenderedChunk } from './wire-events.js';

/** The legacy endpoint's documented default when `max_tokens` is absent. */
const DEFAULT_MAX_TOKENS = 16;

interface Prompt {
  text: string;
  tokenCount: number;
}

interface CompletionChoicePlan {
  index: number;
  echo: string;
  text: string;
  finishReason: TextFinishReason;
}

interface CompletionPlan {
  id: string;
  created: number;
  model: string;
  choices: CompletionChoicePlan[];
  usage: Usage;
  markers: MockMarkers;
}

function decodePrompt(tokens: readonly number[]): Prompt {
  try {
    return { text: decodeTokens(tokens), tokenCount: tokens.length };
  } catch {
    throw invalidRequest('The prompt contains a token id outside the vocabulary.', 'prompt');
  }
}

/** `prompt` may be one string, several, one token array or several; each is its own prompt. */
async function readPrompts(prompt: CompletionRequest['prompt']): Promise<Prompt[]> {
  if (typeof prompt === 'string') return [{ text: prompt, tokenCount: await countTextTokensAsync(prompt) }];
  if (prompt.length === 0) return [];
  if (typeof prompt[0] === 'number') return [decodePrompt(prompt as number[])];
  const prompts: Prompt[] = [];
  for (const item of prompt as Array<string | number[]>) {
    prompts.push(
      typeof item === 'string' ? { text: item, tokenCount: await countTextTokensAsync(item) } : decodePrompt(item),
    );
  }
  return prompts;
}

async function planCompletion(request: CompletionRequest, ctx: CallContext): Promise<CompletionPlan> {
  ctx.signal.throwIfAborted();
  const prompts = await readPrompts(request.prompt);
  const markers = readMockMarkers(prompts.map((prompt) => prompt.text));
  throwIfErrorMarker(markers);

  const choiceCount = request.n ?? 1;
  const choices: CompletionChoicePlan[] = [];
  let completionTokens = 0;
  // `suffix` is ignored: the mock's text does not depend on what follows the insertion point.
  prompts.forEach((prompt, promptIndex) => {
    const reply = limitReply(buildCompletionText(prompt.text), {
      stop: request.stop,
      maxTokens: request.max_tokens ?? DEFAULT_MAX_TOKENS,
    });
    for (let i = 0; i < choiceCount; i++) {
      // OpenAI numbers choices prompt by prompt: prompt p, choice i is index p * n + i.
      choices.push({
        index: promptIndex * choiceCount + i,
        echo: request.echo ? prompt.text : '',
        text: reply.text,
        finishReason: reply.finishReason,
      });
      completionTokens += reply.completionTokens;
    }
  });
  const promptTokens = prompts.reduce((sum, prompt) => sum + prompt.tokenCount, 0);
  return {
    id: completionId(ctx.requestId),
    created: nowInSeconds(),
    model: ctx.upstreamModel,
    choices,
    usage: {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
    },
    markers,
  };
}

function envelope(plan: CompletionPlan) {
  return {
    id: plan.id,
    object: 'text_completion',
    created: plan.created,
    model: plan.model,
    system_fingerprint: MOCK_SYSTEM_FINGERPRINT,
  };
}

/**
 * A `text_completion` answer: the body as `wire`, byte for byte what clients of
 * that form get, and the same facts as fields. `logprobs` is always null, even
 * when asked for: the mock has no token probabilities.
 */
export async function createCompletion(request: CompletionRequest, ctx: CallContext): Promise<Answer> {
  const plan = await planCompletion(request, ctx);
  if (plan.markers.slowMs !== undefined) await sleep(plan.markers.slowMs, ctx.signal);
  const body = JSON.stringify({
    ...envelope(plan),
    choices: plan.choices.map((choice) => ({
      text: choice.echo + choice.text,
      index: choice.index,
      logprobs: null,
      finish_reason: choice.finishReason,
    })),
    usage: plan.usage,
  });
  return {
    id: plan.id,
    created: plan.created,
    model: plan.model,
    systemFingerprint: MOCK_SYSTEM_FINGERPRINT,
    choices: plan.choices.map((choice) => ({
      index: choice.index,
      text: choice.echo + choice.text,
      toolCalls: [],
      finishReason: choice.finishReason,
    })),
    usage: plan.usage,
    wire: body,
  };
}

interface CompletionChunk {
  index: number;
  text: string;
  finishReason: TextFinishReason | null;
}

/**
 * The echoed prompt arrives whole, as the model does not generate it; the finish reason rides on a last empty piece.
 */
function buildChoiceChunks(choice: CompletionChoicePlan): CompletionChunk[] {
  const chunks: CompletionChunk[] = [];
  if (choice.echo) chunks.push({ index: choice.index, text: choice.echo, finishReason: null });
  for (const piece of splitIntoPieces(choice.text))
    chunks.push({ index: choice.index, text: piece, finishReason: null });
  chunks.push({ index: choice.index, text: '', finishReason: choice.finishReason });
  return chunks;
}

/** The echo is text like any other piece; the last, empty piece says only the finish. */
function eventsOf(chunk: CompletionChunk): AnswerEvent[] {
  if (chunk.finishReason !== null) return [{ type: 'finish', choice: chunk.index, reason: chunk.finishReason }];
  return [{ type: 'text', choice: chunk.index, text: chunk.text }];
}

function renderChunks(plan: CompletionPlan): RenderedChunk[] {
  const base = envelope(plan);
  return [...interleave(plan.choices.map(buildChoiceChunks))].map((chunk) => {
    const choice = { text: chunk.text, index: chunk.index, logprobs: null, finish_reason: chunk.finishReason };
    return { wire: JSON.stringify({ ...base, choices: [choice] }), events: eventsOf(chunk) };
  });
}

/**
 * Every chunk is a whole `text_completion` object holding only the new text;
 * a `choices: []` usage chunk ends it. One batch of events per chunk.
 */
export async function* streamCompletion(request: CompletionRequest, ctx: CallContext): AsyncGenerator<AnswerEvent[]> {
  const plan = await planCompletion(request, ctx);
  const usageChunk: RenderedChunk = {
    wire: JSON.stringify({ ...envelope(plan), choices: [], usage: plan.usage }),
    events: [{ type: 'usage', usage: plan.usage }],
  };
  const { batches, tail } = toBatches(startEvent(plan), renderChunks(plan), usageChunk);
  yield* pace(batches, tail, resolveChunkDelayMs(plan.markers.slowMs, ctx), ctx.signal);
}
