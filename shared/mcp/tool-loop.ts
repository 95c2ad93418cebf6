/**
 * The tool loop the gateway runs for a Responses request's `mcp` tools and a Messages request's `mcp_servers`, on
 * any chat model: the api checks the servers named (servers of the gateway the key may reach) and puts this plan in
 * the job; the chat worker declares their tools to the model as functions named `<server>__<tool>`, runs each call
 * the model makes as a job on the server's queue (workers/mcp/tool-loop.ts), gives the model the results, and asks
 * it again, until it answers without calling one of them.
 */

/** One server the request lets the model use. */
export interface McpToolUse {
  /** The gateway's server (the request's `server_label`, or an `mcp_servers` entry's `name`). */
  server: string;
  /** The tools the request allows of it (`allowed_tools`); absent: every tool the key may use. */
  allowedTools?: string[];
  /** Tools the request turns off (a Messages `mcp_toolset`'s configs). */
  excludedTools?: string[];
  /** Only the tools the server marks `readOnlyHint` (the Responses API's `allowed_tools.read_only`). */
  readOnly?: boolean;
  /**
   * Which calls wait for the client's approval (the Responses API's `require_approval`): `always` unless named in
   * `never`; `never` unless named in `always`. A Messages request has no approvals: `never`.
   */
  approval: { default: 'always' | 'never'; always?: string[]; never?: string[] };
}

/** A call the client approved or declined (a Responses `mcp_approval_response` to the model's call of a tool). */
export interface McpApproval {
  /** The approval request's id: the call is said as an `mcp_call` item with it as `approval_request_id`. */
  requestId: string;
  server: string;
  tool: string;
  /** The arguments the model gave, as JSON. */
  arguments: string;
  approve: boolean;
}

/** What a job that runs the tool loop carries. */
export interface McpLoopPlan {
  uses: McpToolUse[];
  /** Calls the client decided on, run (or declined) before the model is asked again (Responses only). */
  approvals?: McpApproval[];
  /** The request requires a tool call (`tool_choice` `required`, Messages `any`): the first turn must call one. */
  requireCall?: boolean;
  /** The most tool calls the loop makes (the Responses API's `max_tool_calls`); absent: `maxLoopToolCalls`. */
  maxToolCalls?: number;
}

/** The most tool calls one answer makes unless the request says fewer; then the model must answer without them. */
export const maxLoopToolCalls = 32;

/** Whether a call of this tool waits for the client's approval. */
export function needsApproval(use: McpToolUse, tool: string): boolean {
  const { approval } = use;
  if (approval.default === 'always') return !(approval.never ?? []).includes(tool);
  return (approval.always ?? []).includes(tool);
}

/** Whether the request lets the model use this tool of the server (the key's own rules apart). */
export function requestAllows(use: McpToolUse, tool: string, readOnlyHint: boolean): boolean {
  if (use.allowedTools !== undefined && !use.allowedTools.includes(tool)) return false;
  if (use.excludedTools?.includes(tool)) return false;
  return use.readOnly !== true || readOnlyHint;
}

/**
 * Why a call of the loop failed, in the Responses API's terms: the server's JSON-RPC error, the tool's own error
 * (`isError`, with what it said), or the gateway's (a limit, a timeout, the server unreachable) with its HTTP status.
 */
export type McpCallError =
  | { type: 'mcp_protocol_error'; code: number; message: string }
  | { type: 'mcp_tool_execution_error'; content: unknown[] }
  | { type: 'http_error'; code: number; message: string };

/**
 * What a call of the loop answered: its text (what the model reads) and its content as the server gave it, or its
 * error.
 */
export interface McpCallOutcome {
  output: string;
  content: unknown[];
  error?: McpCallError;
}
