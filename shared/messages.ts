import type { ChatCompletionRequest } from './schemas/chat.js';
import type { MessagesRequest } from './schemas/messages.js';
import type { McpLoopPlan } from './mcp/tool-loop.js';

/**
 * Anthropic's Messages API (`/v1/messages`) over the chat queue. The api
 * validates the request and translates it to chat once; the worker sends a
 * model served by Anthropic the request as the client wrote it (thinking
 * signatures, `cache_control`, fields the gateway does not know, the
 * client's `anthropic-beta` flags) and relays Anthropic's own events, and
 * runs every other vendor's chat adapter on the translation, its answer
 * events written as Anthropic's.
 */
export interface MessagesJob {
  /** The request as the client sent it (validated; `max_tokens` clamped to the model's limit). */
  anthropic: MessagesRequest;
  /** The same request in chat form, for vendors that speak chat. */
  chat: ChatCompletionRequest;
  /** The model name the answer says: the one the client asked for (an alias as written). */
  model: string;
  /**
   * The prompt's tokens as counted at the api: `message_start` says them when a vendor tells its count only at the end.
   */
  inputTokens: number;
  /** The client's `anthropic-beta` header, passed to Anthropic as sent. */
  betas?: string;
  /** Its `mcp_servers`: the gateway runs the tool loop on them, on any vendor (shared/mcp/tool-loop.ts). */
  mcp?: McpLoopPlan;
}

/** Anthropic's error types, by the HTTP status they come with. */
export type AnthropicErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'billing_error'
  | 'permission_error'
  | 'not_found_error'
  | 'request_too_large'
  | 'rate_limit_error'
  | 'api_error'
  | 'timeout_error'
  | 'overloaded_error';

/** Anthropic's type for an error of this status (the status as the gateway chose it, before `anthropicStatus`). */
export function anthropicErrorType(status: number): AnthropicErrorType {
  switch (status) {
    case 401:
      return 'authentication_error';
    case 402:
      return 'billing_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 503:
    case 529:
      return 'overloaded_error';
    case 504:
      return 'timeout_error';
    default:
      return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

/**
 * The status an Anthropic client gets: a gateway that cannot take the request now (a full queue, a drain, Redis
 * away) answers 529 as Anthropic does when overloaded, which its clients retry; every other status is the same.
 */
export function anthropicStatus(status: number): number {
  return status === 503 ? 529 : status;
}

/** `{"type":"error","error":{type,message},"request_id"}`: Anthropic's error body. */
export function anthropicErrorBody(status: number, message: string, requestId?: string): Record<string, unknown> {
  return {
    type: 'error',
    error: { type: anthropicErrorType(status), message },
    ...(requestId ? { request_id: requestId } : {}),
  };
}

/** The paths that speak Anthropic's dialect (a canonical path): the Messages API and what hangs under it. */
export function speaksAnthropic(path: string): boolean {
  return path === '/v1/messages' || path.startsWith('/v1/messages/');
}
