import type { ChatCompletionRequest, ChatMessage } from '../../shared/schemas/chat.js';
import { THINKING_BUDGETS, type ReasoningEffort } from '../../shared/thinking-budgets.js';

/*
 * The dialect layer: what every client dialect's request becomes on the chat side, in no dialect's words.
 *
 * Switchyard speaks OpenAI's chat completions and Responses API, Anthropic's Messages API and Google's Gemini API.
 * Every vendor adapter runs one request form (chat) and writes one answer model (workers/answers/events.ts). A
 * dialect is three parts around them, and adding one is writing those three:
 *
 * 1. A decoder, in the api (`api/<dialect>/translate*.ts`): the validated request as the job's chat request. It
 *    reads its own shapes (content blocks, parts, items) into chat messages, and says the rest in the neutral
 *    terms of this folder: its functions, tool choice and web search as `DeclaredTools` and `DeclaredChoice`
 *    (`chat-tools.ts`), its sampling, output limit, stop sequences, reasoning and structured output as
 *    `DeclaredSettings` (here). The policy (what chat gets, what is refused, what is left out) is written once, in
 *    these files; a piece of the request the decoder reads with a schema of its own fails at its place in the
 *    client's request (`field-path.ts`). The job carries the request as the client wrote it beside its chat form,
 *    and the endpoint's row in `shared/endpoints.ts` names the payload, the schema and the worker pipeline.
 * 2. An encoder, in the worker (`workers/answers/<dialect>-encoder.ts`): the answer events as the dialect's stream
 *    frames (`encode(events)`, `end()`, written with `shared/sse.ts`) and its body. It plugs into the one stream
 *    runner (`workers/answers/stream-run.ts`), which publishes, keeps the answer for the cache, meters and ends
 *    the stream the same way for every dialect; the worker's pipeline hands the job's run a `StreamedJob`, and
 *    `answerJob` runs the encoder and answers a client that reads no stream with its one body.
 * 3. Where the vendor speaks the dialect itself (Anthropic for Messages, Gemini for Gemini): a native pass-through.
 *    The vendor is sent the client's request as written (signatures, cache markers, settings chat has no word
 *    for), and its own events are relayed as they came, through the same runner with a `RelayEncoder` that
 *    writes them as they are (`workers/messages-run.ts`, `workers/gemini-run.ts`), so nothing is lost in a round
 *    trip through chat.
 *
 * Errors speak the dialect of the path (api/http/envelope.ts renders a `GatewayError` in it): decoders throw
 * `GatewayError`s with the client's field names as `param`, never a dialect's error body.
 */

/** A part of a chat user message (text, image, file). */
export type ChatUserPart = Exclude<Extract<ChatMessage, { role: 'user' }>['content'], string>[number];

/** A tool call of a chat assistant message. */
export type ChatToolCall = { id: string; type: 'function'; function: { name: string; arguments: string } };

type Effort = Exclude<ReasoningEffort, 'none'>;

/** The presets from the smallest budget up: the same table the Anthropic adapter turns an effort into a budget with. */
const presets = (Object.entries(THINKING_BUDGETS) as [Effort, number][]).sort((a, b) => a[1] - b[1]);

/**
 * The `reasoning_effort` for a thinking budget (Anthropic's `budget_tokens`, Gemini's `thinkingBudget`): the
 * largest preset at or below it, so a budget is never turned into more thinking than the client allowed. Below
 * the smallest preset it is the smallest, `minimal`: the client asked for some thinking.
 */
export function effortForBudget(budget: number): Effort {
  let effort = presets[0]![0];
  for (const [name, tokens] of presets) if (budget >= tokens) effort = name;
  return effort;
}

/** Structured output as a dialect asks for it: any JSON object, or JSON that follows a schema. */
export type DeclaredOutput =
  | { type: 'json' }
  | {
      type: 'schema';
      name: string;
      schema: Record<string, unknown> | undefined;
      strict?: boolean | null | undefined;
      description?: string | null | undefined;
    };

/** What a request says of how to answer, in no dialect's words (absent or null: the vendor's default). */
export interface DeclaredSettings {
  temperature?: number | null | undefined;
  topP?: number | null | undefined;
  /** The end user, for the vendor's abuse tracking. */
  user?: string | null | undefined;
  /** The most output tokens the client allows. */
  maxTokens?: number | null | undefined;
  /** The model's own output limit (the catalog's; 0: unknown): a larger `maxTokens` is clamped to it. */
  modelMaxTokens?: number | undefined;
  /** Stop sequences, and the request's field they are in (those chat has no room for are named in `dropped` by it). */
  stop?: { sequences: readonly string[]; field: string } | undefined;
  effort?: ReasoningEffort | null | undefined;
  output?: DeclaredOutput | undefined;
}

/** Chat takes at most this many stop sequences. */
const maxStops = 4;

/** Chat's `response_format` for a structured output. */
export function chatResponseFormat(output: DeclaredOutput): NonNullable<ChatCompletionRequest['response_format']> {
  if (output.type === 'json') return { type: 'json_object' };
  const { name, schema, strict, description } = output;
  return {
    type: 'json_schema',
    json_schema: { name, schema, ...(strict != null && { strict }), ...(description != null && { description }) },
  };
}

/**
 * Sets on `chat` the fields the settings have a chat form for. What chat cannot carry (stop sequences past its
 * fourth) is named in `dropped`, for the worker to log.
 */
export function applyChatSettings(
  chat: ChatCompletionRequest,
  settings: DeclaredSettings,
  dropped?: Set<string>,
): void {
  const { stop, maxTokens, modelMaxTokens } = settings;
  if (stop !== undefined && stop.sequences.length > 0) {
    chat.stop = stop.sequences.slice(0, maxStops);
    if (stop.sequences.length > maxStops) dropped?.add(`${stop.field}[${maxStops}:] (chat takes at most ${maxStops})`);
  }
  if (settings.temperature != null) chat.temperature = settings.temperature;
  if (settings.topP != null) chat.top_p = settings.topP;
  if (settings.user != null) chat.user = settings.user;
  if (maxTokens != null)
    chat.max_completion_tokens =
      modelMaxTokens !== undefined && modelMaxTokens > 0 ? Math.min(maxTokens, modelMaxTokens) : maxTokens;
  if (settings.effort != null) chat.reasoning_effort = settings.effort;
  if (settings.output !== undefined) chat.response_format = chatResponseFormat(settings.output);
}
