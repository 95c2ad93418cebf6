import type { McpTool } from '../../shared/mcp/servers.js';
import type { McpCallError } from '../../shared/mcp/tool-loop.js';

/**
 * The one answer model every text adapter produces and every encoder reads.
 *
 * A vendor adapter turns the vendor's answer into these events (a stream) or
 * into an `Answer` (a plain call, the same facts folded); an encoder writes
 * them in the client's wire form: chat-completion and text-completion chunks
 * and bodies today (`chat-encoder.ts`), the Responses API's events and items
 * next, with no vendor code added. A failure is not an event: the adapter
 * throws a GatewayError, which ends the stream.
 */
export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter' | 'function_call';

/** OpenAI-shaped usage, as vendors report it (or as counted for the mock). Extra fields (token details) are kept. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  [extra: string]: unknown;
}

/**
 * `wire`: the vendor's own chunk, when the vendor already speaks the client's
 * chat wire form (OpenAI-compatible vendors, the mock). The chat encoder then
 * sends it untouched, so fields the model has no place for (logprobs,
 * system_fingerprint, refusal, annotations) reach the client; an empty string
 * means the chunk went out with an earlier event of the same read. Other
 * encoders ignore it.
 */
interface Carried {
  wire?: string;
}

/** The answer begins: its id and creation time (Unix seconds), once per stream. */
export interface StartEvent extends Carried {
  type: 'start';
  id: string;
  created: number;
  /** The model name the answer carries; the encoder uses the client's model id when absent. */
  model?: string;
  systemFingerprint?: string;
  /**
   * The `service_tier` the vendor's first chunk says it served the answer in,
   * as written (`default`, `flex`, `priority`, `scale`, …); absent when it
   * says none. Read only for a vendor that sells tiers (`shared/scheduling/served-tier.ts`).
   */
  serviceTier?: string;
}

/** A choice (candidate) begins: the assistant's turn. */
export interface RoleEvent extends Carried {
  type: 'role';
  choice: number;
}

export interface TextEvent extends Carried {
  type: 'text';
  choice: number;
  text: string;
}

/**
 * A piece of the model's visible reasoning, where its vendor shows it (DeepSeek's and xAI's `reasoning_content`,
 * Gemini's thought parts): Anthropic's Messages API writes it as a thinking block; the chat encoder sends it only
 * inside the vendor's own chunk (`wire`).
 */
export interface ReasoningEvent extends Carried {
  type: 'reasoning';
  choice: number;
  text: string;
}

/**
 * A piece of one tool call. The first piece of a call has its `id` and
 * `name`; the following ones only more `arguments` text (JSON, in pieces).
 * `index` counts calls within the choice, from 0.
 */
export interface ToolCallEvent extends Carried {
  type: 'tool-call';
  choice: number;
  index: number;
  id?: string;
  name?: string;
  arguments: string;
}

export interface FinishEvent extends Carried {
  type: 'finish';
  choice: number;
  reason: FinishReason;
}

/** What the whole answer used, for billing; sent once, at the end. */
export interface UsageEvent extends Carried {
  type: 'usage';
  usage: Usage;
}

/**
 * The gateway's tool loop (workers/mcp/tool-loop.ts) offers the model an MCP server's tools: the Responses API's
 * `mcp_list_tools` item. `error`: the server's tools could not be listed (none offered).
 */
export interface McpListEvent extends Carried {
  type: 'mcp-list';
  server: string;
  tools: McpTool[];
  error?: string;
}

/**
 * The model called an MCP server's tool, which the gateway runs (Responses: an `mcp_call` item; Messages: an
 * `mcp_tool_use` block). `approvalRequestId`: the call the client approved.
 */
export interface McpCallEvent extends Carried {
  type: 'mcp-call';
  id: string;
  server: string;
  tool: string;
  /** The arguments, as JSON. */
  arguments: string;
  approvalRequestId?: string;
}

/** What the call answered (its text, and its content as the server gave it), or why it failed (`error`). */
export interface McpResultEvent extends Carried {
  type: 'mcp-result';
  id: string;
  output: string;
  content: unknown[];
  error?: McpCallError;
}

/** A call that waits for the client's approval, not run (the Responses API's `mcp_approval_request` item). */
export interface McpApprovalEvent extends Carried {
  type: 'mcp-approval';
  id: string;
  server: string;
  tool: string;
  arguments: string;
}

export type McpLoopEvent = McpListEvent | McpCallEvent | McpResultEvent | McpApprovalEvent;

export type AnswerEvent =
  StartEvent | RoleEvent | TextEvent | ReasoningEvent | ToolCallEvent | FinishEvent | UsageEvent | McpLoopEvent;

/** One complete tool call of a plain answer. */
export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}

export interface AnswerChoice {
  index: number;
  /** The text, or null when the choice only called tools. */
  text: string | null;
  toolCalls: ToolCall[];
  finishReason: FinishReason;
}

/**
 * A plain (non-stream) answer: the events of a stream, folded. `wire` is the
 * vendor's whole body when it already is the client's wire form, sent as is
 * by the encoder of that form.
 */
export interface Answer {
  id: string;
  created: number;
  model?: string;
  systemFingerprint?: string;
  choices: AnswerChoice[];
  usage?: Usage;
  wire?: string;
  /**
   * The `service_tier` the vendor's body says it served the answer in, as written; absent when it says none (see
   * `StartEvent`).
   */
  serviceTier?: string;
}

/**
 * A finished embeddings call: the body in the client's form (a list of vectors has one form), and usage for billing.
 */
export interface EmbeddingsAnswer {
  body: string;
  usage?: Usage;
}
