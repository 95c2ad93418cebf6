import type { FairClaim } from '../scheduling/index.js';

/**
 * A tool call as a job (api/mcp/ queues it, workers/mcp/ runs it): one BullMQ queue per upstream server, capped in
 * BullMQ at the server's `max_concurrency`, so the calls past the cap wait in the queue in their fair order.
 */
export function mcpQueueName(server: string): string {
  return `{mcp@${server}}`;
}

/** The endpoint a tool call is logged and billed under. */
export const mcpCallEndpoint = 'mcp.tools/call';

/**
 * The messages a worker sends on to a server for a client: a tool call (billed at the server's price), and the
 * reads of a resource and a prompt (counted by the key's limits and logged, not priced). Lists are answered from the
 * servers' checks (workers/mcp/server-checks.ts).
 */
export type McpForwardedMethod = 'tools/call' | 'resources/read' | 'prompts/get';

/** The endpoint each forwarded message is logged under (`mcp.tools/call`, `mcp.resources/read`, `mcp.prompts/get`). */
export const mcpEndpointOf = (method: McpForwardedMethod): string => `mcp.${method}`;

export interface McpCallJobData {
  /** The request's id: money and the request log. */
  requestId: string;
  /** What is asked of the server (absent in jobs queued before reads were forwarded: a tool call). */
  method?: McpForwardedMethod;
  endpoint: string;
  /** Pub/sub channel of the api holding the client. */
  replyTo: string;
  keyId: string;
  accountId: string;
  server: string;
  /** The tool's name as its server knows it (a prompt's for `prompts/get`, the resource's URI for `resources/read`). */
  tool: string;
  /** The tool's or the prompt's arguments (none for a resource). */
  arguments: Record<string, unknown>;
  /** The client's JSON-RPC id: the worker writes the whole response, so the api relays it as it comes. */
  rpcId: string | number;
  /**
   * The client's progress token, when it asked for progress and takes events: the call is then a stream of the
   * server's `notifications/progress` (with this token) and ends with its response, each an SSE `message` event.
   */
  progressToken?: string | number;
  /** Epoch ms: past it nobody waits, and the call is not made (or is cut off). */
  deadline: number;
  /** Epoch ms the call was queued. */
  queuedAt: number;
  /** Run again once already, its first worker lost (a call safe to repeat: workers/mcp/tool-calls.ts). */
  retried?: boolean;
  /** Its place in the fair order (set by the enqueue). */
  claim?: FairClaim;
  contended?: boolean;
}

/** `server__tool`: how `/mcp` names a tool of one of its servers. */
export const mcpToolSeparator = '__';

export function prefixedToolName(server: string, tool: string): string {
  return `${server}${mcpToolSeparator}${tool}`;
}

/** The server and tool a `/mcp` tool name stands for; undefined when it has no server part. */
export function splitToolName(name: string): { server: string; tool: string } | undefined {
  const at = name.indexOf(mcpToolSeparator);
  if (at <= 0) return undefined;
  return { server: name.slice(0, at), tool: name.slice(at + mcpToolSeparator.length) };
}
