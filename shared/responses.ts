import type { ChatCompletionRequest } from './schemas/chat.js';
import type { ServiceTier } from './scheduling/vocabulary.js';
import type { McpLoopPlan } from './mcp/tool-loop.js';

/**
 * The Responses API (`/v1/responses`) over the chat queue: the api turns a
 * Responses request into a chat request for the vendor adapters, and carries
 * the fields the response object echoes (the shell) to the worker, whose
 * Responses encoder writes the events and the final object.
 */

/** The fields of a response object that echo the request: the same in every event and in the stored object. */
export interface ResponseShell {
  id: string;
  created_at: number;
  /** The catalog model id the client asked for. */
  model: string;
  instructions: string | null;
  previous_response_id: string | null;
  /** The request's tools, as the client sent them (flat Responses form). */
  tools: unknown[];
  tool_choice: unknown;
  parallel_tool_calls: boolean;
  temperature: number | null;
  top_p: number | null;
  max_output_tokens: number | null;
  text: { format: Record<string, unknown> };
  reasoning: { effort: string | null; summary: string | null };
  metadata: Record<string, string>;
  store: boolean;
  background: boolean;
  user: string | null;
  /**
   * The tier that serves it (`service_tier` of the response object); absent in a shell stored before tiers: `default`.
   */
  service_tier?: ServiceTier;
}

/** What a `responses` job carries: the chat request the adapters run, and the shell of the response object. */
export interface ResponsesJob {
  chat: ChatCompletionRequest;
  shell: ResponseShell;
  /** Its `mcp` tools: the gateway runs the tool loop on the servers they name (shared/mcp/tool-loop.ts). */
  mcp?: McpLoopPlan;
  /** Its `prompt_cache_key`: which of a vendor's channels holds its cached prefix (shared/prompt-affinity.ts). */
  promptCacheKey?: string;
}

export type ResponseStatus = 'completed' | 'failed' | 'in_progress' | 'cancelled' | 'queued' | 'incomplete';

/** `{code, message}` of a failed response. */
export interface ResponseError {
  code: string;
  message: string;
}

/**
 * One item of a conversation as stored: input items as the api normalised
 * them (each with an id), and output items as the encoder wrote them. Typed
 * loosely: the translation to chat messages reads them by `type`.
 */
export interface ConversationItem {
  type: string;
  id: string;
  [field: string]: unknown;
}
