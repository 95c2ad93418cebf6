import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { accessRefusalMessage, mayUseModel, modelNotAllowed, type CurrentAccess } from '../../shared/access/index.js';
import type { KeyAccess } from '../../shared/accounts.js';
import { GatewayError } from '../../shared/errors.js';
import { prefixedToolName } from '../../shared/mcp/calls.js';
import type { McpRegistry } from '../../shared/mcp/registry.js';
import type { McpServer, McpServerHealth, McpTool } from '../../shared/mcp/servers.js';
import {
  maxLoopToolCalls,
  needsApproval,
  requestAllows,
  type McpCallOutcome,
  type McpLoopPlan,
  type McpToolUse,
} from '../../shared/mcp/tool-loop.js';
import { toolRefusal } from '../../shared/mcp/tool-rules.js';
import { mcpHealthKey, mcpLoopCalledKey } from '../../shared/redis-keys.js';
import type { Config } from '../../shared/config.js';
import type { EndpointRequest } from '../../shared/endpoints.js';
import { worstCase } from '../../shared/money/charge.js';
import { refusedForMoney, releaseReservation, reserve } from '../../shared/money/billing.js';
import type { PriceList } from '../../shared/money/pricing.js';
import { countChatPromptTokensAsync } from '../../shared/tokens.js';
import type { ChatCompletionRequest, ChatMessage } from '../../shared/schemas/chat.js';
import type { AnswerEvent, FinishEvent, McpLoopEvent, Usage } from '../answers/events.js';
import type { LoopCaller, McpLoopCalls } from './loop-calls.js';

/*
 * The gateway's tool loop, around any chat adapter's stream: the tools of the MCP servers a request names (its
 * Responses `mcp` tools, its Messages `mcp_servers`) are declared to the model as functions named
 * `<server>__<tool>`; when a turn of the model ends calling some of them, each call is made through the server's
 * queue (workers/mcp/loop-calls.ts), the calls and their results are said as the loop's events (the client's
 * `mcp_call` items or `mcp_tool_use` blocks), and the model is asked again with the results, until it answers
 * without calling one, calls a tool of the client's own (the answer then ends with it, as any tool call does), or a
 * call waits for the client's approval. The events out are one answer: one start, one finish, and the usage of every
 * turn added up (said after each turn, so an answer cut off is billed for the turns that ran).
 *
 * Every step reads what the key may do now: each turn after the first is made only while the key stands and may
 * still use the model, and each call only while it may still use the tool (at the call's worker too).
 */

export interface ToolLoopDeps {
  redis: Redis;
  registry: McpRegistry;
  access: CurrentAccess;
  calls: McpLoopCalls;
  /** What a turn may cost at most, reserved before it is asked (the first turn's was reserved with the request). */
  config: Config;
  prices: PriceList;
}

export interface ToolLoopRun {
  plan: McpLoopPlan;
  /** The vendor that serves the model (a turn the mock answers is reserved as it is billed). */
  vendor: string;
  chat: ChatCompletionRequest;
  /** The model's stream for one turn. */
  turn: (chat: ChatCompletionRequest) => AsyncIterable<AnswerEvent[]>;
  caller: LoopCaller;
  /** The catalog model the request asked for (a key that may no longer use it ends the loop). */
  model: string;
  signal: AbortSignal;
  /** A call is about to be made: the job may not be run again (tools are not idempotent). */
  sideEffect: () => void;
  /** Runs `release` once the request's settlement has billed what the turns used (their reservations held till then). */
  afterSettlement: (release: () => unknown) => void;
}

/** One tool the loop offers the model: the server's tool under its chat name. */
interface Offered {
  use: McpToolUse;
  server: McpServer;
  tool: McpTool;
}

/** A call the model made of an offered tool, its arguments gathered. */
interface HeldCall {
  id: string;
  name: string;
  pieces: string[];
}

const randomId = (prefix: string) => `${prefix}_${randomBytes(16).toString('hex')}`;

/** What the model is told of a call the client declined. */
const declinedOutput = 'The user declined this tool call.';

/** The servers' tools the key and the request allow, said as `mcp-list` events, and the functions that declare them. */
async function offer(
  deps: ToolLoopDeps,
  plan: McpLoopPlan,
  access: KeyAccess,
): Promise<{ offered: Map<string, Offered>; lists: McpLoopEvent[] }> {
  const names = plan.uses.map((use) => use.server);
  const found = names.length === 0 ? [] : await deps.redis.hmget(mcpHealthKey, ...names);
  const offered = new Map<string, Offered>();
  const lists: McpLoopEvent[] = [];
  plan.uses.forEach((use, i) => {
    const server = deps.registry.get(use.server);
    const health = found[i] ? (JSON.parse(found[i]!) as McpServerHealth) : undefined;
    if (!server || server.unusable !== undefined || !health?.ok) {
      const why = !server
        ? 'the server was removed'
        : (server.unusable ?? health?.error ?? 'the server has not been checked yet');
      lists.push({
        type: 'mcp-list',
        server: use.server,
        tools: [],
        error: `The tools of ${use.server} could not be listed: ${why}.`,
      });
      return;
    }
    const tools = health.tools.filter(
      (tool) =>
        toolRefusal(access, server.name, tool.name) === undefined &&
        requestAllows(use, tool.name, tool.annotations?.readOnlyHint === true),
    );
    for (const tool of tools) offered.set(prefixedToolName(server.name, tool.name), { use, server, tool });
    lists.push({ type: 'mcp-list', server: use.server, tools });
  });
  return { offered, lists };
}

/** The offered tools as chat functions, beside the request's own. */
function withTools(chat: ChatCompletionRequest, offered: ReadonlyMap<string, Offered>): ChatCompletionRequest {
  if (offered.size === 0) return chat;
  const functions = [...offered].map(([name, { tool }]) => ({
    type: 'function' as const,
    function: {
      name,
      description: tool.description ?? tool.title ?? '',
      parameters: tool.inputSchema ?? { type: 'object', properties: {} },
    },
  }));
  return { ...chat, tools: [...(chat.tools ?? []), ...functions] } as ChatCompletionRequest;
}

/** Chat usage added up over the turns (the token details too, where they are counts). */
export function addUsage(total: Usage | undefined, more: Usage | undefined): Usage | undefined {
  if (!more) return total;
  if (!total) return { ...more };
  const sum: Usage = {
    ...total,
    prompt_tokens: total.prompt_tokens + more.prompt_tokens,
    completion_tokens: total.completion_tokens + more.completion_tokens,
    total_tokens: total.total_tokens + more.total_tokens,
  };
  for (const field of ['prompt_tokens_details', 'completion_tokens_details'] as const) {
    const a = (total[field] ?? {}) as Record<string, unknown>;
    const b = (more[field] ?? {}) as Record<string, unknown>;
    const details: Record<string, unknown> = { ...a };
    for (const [name, value] of Object.entries(b))
      details[name] =
        typeof value === 'number' && typeof a[name] === 'number' ? (a[name] as number) + value : (a[name] ?? value);
    if (Object.keys(details).length > 0) sum[field] = details;
  }
  return sum;
}

/** What the model reads of a call: its output, or its failure said as one (chat has no field for it). */
function toolMessage(outcome: McpCallOutcome): string {
  return outcome.error === undefined ? outcome.output : `Error: ${outcome.output}`;
}

/** The arguments the model gave, as the object a call takes (undefined: not a JSON object). */
function parseArguments(json: string): Record<string, unknown> | undefined {
  if (json.trim() === '') return {};
  try {
    const value = JSON.parse(json) as unknown;
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Reserves what the next turn may cost at most (its prompt as it now stands, the model's most output), under a name of
 * its own beside the request's reservation: refused, the loop ends with the refusal the client's next request would
 * get. The request's settlement bills what every turn used; the turns' reservations are given back once it ends.
 */
async function reserveTurn(
  deps: ToolLoopDeps,
  run: ToolLoopRun,
  access: KeyAccess,
  chat: ChatCompletionRequest,
  turn: number,
  held: string[],
): Promise<void> {
  const prompt = await countChatPromptTokensAsync(chat.messages, chat.tools ?? null);
  const { micros } = worstCase(
    deps.config,
    deps.prices,
    { endpoint: 'chat.completions', payload: chat } as EndpointRequest,
    run.model,
    run.vendor,
    prompt,
  );
  if (micros === 0) return;
  const requestId = `${run.caller.requestId}-turn${turn}`;
  const outcome = await reserve(
    deps.redis,
    {
      requestId,
      keyId: run.caller.keyId,
      accountId: run.caller.accountId,
      micros,
      tokens: 0,
      deadline: Date.now() + 600_000,
    },
    {
      ...(access.limitMicros !== undefined ? { limitMicros: access.limitMicros } : {}),
      ...(access.budgets ? { budgets: access.budgets } : {}),
    },
  );
  if (outcome.ok) {
    held.push(requestId);
    return;
  }
  throw new GatewayError(429, refusedForMoney(outcome, access.accountName), {
    type: 'insufficient_quota',
    code: 'insufficient_quota',
  });
}

/**
 * The key as it stands now; a key that may no longer make the request ends the loop with the refusal its client would
 * get.
 */
async function standing(deps: ToolLoopDeps, run: ToolLoopRun): Promise<KeyAccess> {
  const now = await deps.access.of(run.caller.keyId);
  if ('refused' in now) throw new GatewayError(401, accessRefusalMessage(now.refused), { code: 'invalid_api_key' });
  if (!mayUseModel(now.access, run.model)) throw modelNotAllowed(run.model);
  return now.access;
}

/**
 * Runs the loop: the events of one answer, written by the dialect's encoder as any chat adapter's are.
 */
export async function* toolLoop(deps: ToolLoopDeps, run: ToolLoopRun): AsyncGenerator<AnswerEvent[]> {
  const reserved: string[] = [];
  try {
    yield* loop(deps, run, reserved);
  } finally {
    // The turns' reservations are held until the request's settlement has billed what they used.
    if (reserved.length > 0)
      run.afterSettlement(() =>
        Promise.allSettled(reserved.map((id) => releaseReservation(deps.redis, run.caller.accountId, id))),
      );
  }
}

async function* loop(deps: ToolLoopDeps, run: ToolLoopRun, reserved: string[]): AsyncGenerator<AnswerEvent[]> {
  // A run of a job whose earlier run called a tool (its worker died): not run again, tools are not idempotent.
  const calledKey = mcpLoopCalledKey(run.caller.requestId);
  const [before, access0] = await Promise.all([deps.redis.exists(calledKey), standing(deps, run)]);
  if (before === 1) {
    run.sideEffect();
    throw new GatewayError(
      502,
      "The answer's worker was lost after it had called a tool; it is not run again (tools are not idempotent).",
      { code: 'worker_lost' },
    );
  }
  let access = access0;
  let marked = false;
  /** Said before a call is made: the job's run called a tool (a retry after its worker died will not run it again). */
  const calling = async () => {
    run.sideEffect();
    if (marked) return;
    marked = true;
    await deps.redis.set(calledKey, '1', 'EX', 86_400);
  };
  const { offered, lists } = await offer(deps, run.plan, access);
  const chat = withTools(run.chat, offered);
  const messages: ChatMessage[] = [...chat.messages];
  const maxCalls = run.plan.maxToolCalls ?? maxLoopToolCalls;
  let callsMade = 0;
  let total: Usage | undefined;
  // What is said before the model's first event: the lists, and the calls the client decided on (run first).
  const preamble: AnswerEvent[] = [...lists];
  const decided: ChatMessage[] = [];
  for (const approval of run.plan.approvals ?? []) {
    const name = prefixedToolName(approval.server, approval.tool);
    const call = {
      id: approval.requestId,
      type: 'function' as const,
      function: { name, arguments: approval.arguments },
    };
    if (!approval.approve) {
      decided.push(
        { role: 'assistant', content: null, tool_calls: [call] },
        { role: 'tool', tool_call_id: approval.requestId, content: declinedOutput },
      );
      continue;
    }
    const id = randomId('mcp');
    const found = offered.get(name);
    const args = parseArguments(approval.arguments);
    let outcome: McpCallOutcome;
    if (!found)
      outcome = {
        output: `The tool ${approval.tool} of ${approval.server} may not be used now.`,
        content: [],
        error: {
          type: 'http_error',
          code: 403,
          message: `The tool ${approval.tool} of ${approval.server} may not be used now.`,
        },
      };
    else if (!args)
      outcome = {
        output: 'The arguments are not a JSON object.',
        content: [],
        error: { type: 'mcp_protocol_error', code: -32602, message: 'The arguments are not a JSON object.' },
      };
    else {
      await calling();
      callsMade++;
      outcome = await deps.calls.call(run.caller, access, found.server, found.tool.name, args, run.signal);
    }
    preamble.push({
      type: 'mcp-call',
      id,
      server: approval.server,
      tool: approval.tool,
      arguments: approval.arguments,
      approvalRequestId: approval.requestId,
    });
    preamble.push({ type: 'mcp-result', id, ...outcome });
    decided.push(
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: approval.requestId, content: toolMessage(outcome) },
    );
  }
  messages.push(...decided);

  let started = false;
  let roled = false;
  /** The client's own tool calls said so far, numbered across turns. */
  let clientCalls = 0;
  for (let turn = 0; ; turn++) {
    // Out of calls: the model is asked without the servers' tools, and must answer.
    const offering = callsMade < maxCalls;
    // A call required: of the first turn only (the model then answers with what the calls said).
    const required =
      turn === 0 && run.plan.requireCall === true && offered.size > 0 ? { tool_choice: 'required' as const } : {};
    const request = offering ? { ...chat, messages, ...required } : { ...run.chat, messages };
    const held = new Map<number, HeldCall>();
    const passed = new Map<number, number>();
    const text: string[] = [];
    let finish: FinishEvent | undefined;
    let usage: Usage | undefined;
    for await (const batch of run.turn(request)) {
      const out: AnswerEvent[] = [];
      for (const event of batch) {
        switch (event.type) {
          case 'start':
            if (!started) {
              started = true;
              out.push(event, ...preamble);
            }
            break;
          case 'role':
            if (event.choice === 0 && !roled) {
              roled = true;
              out.push(event);
            }
            break;
          case 'usage':
            usage = event.usage;
            break;
          case 'finish':
            if (event.choice === 0) finish = event;
            break;
          case 'text':
            if (event.choice !== 0) break;
            text.push(event.text);
            out.push(event);
            break;
          case 'tool-call': {
            if (event.choice !== 0) break;
            const mine = held.get(event.index);
            if (mine) {
              mine.pieces.push(event.arguments);
              break;
            }
            if (event.name !== undefined && offering && offered.has(event.name) && !passed.has(event.index)) {
              held.set(event.index, { id: event.id ?? randomId('call'), name: event.name, pieces: [event.arguments] });
              break;
            }
            let index = passed.get(event.index);
            if (index === undefined) passed.set(event.index, (index = clientCalls++));
            out.push({ ...event, index });
            break;
          }
          default:
            out.push(event);
        }
      }
      if (out.length > 0) yield out;
    }
    total = addUsage(total, usage);
    const ends =
      held.size === 0 || passed.size > 0 || finish?.reason === 'length' || finish?.reason === 'content_filter';
    if (ends && held.size === 0) {
      yield [...(finish ? [finish] : []), ...(total ? [{ type: 'usage' as const, usage: total }] : [])];
      return;
    }
    // The turn called the servers' tools: said, made (those that need no approval), and given to the model.
    if (total) yield [{ type: 'usage', usage: total }];
    const calls = [...held.values()];
    const toolMessages: ChatMessage[] = [];
    let waitsForClient = passed.size > 0;
    const made: Array<{
      call: HeldCall;
      id: string;
      offered: Offered;
      outcome: Promise<McpCallOutcome> | McpCallOutcome;
    }> = [];
    for (const call of calls) {
      const found = offered.get(call.name)!;
      const json = call.pieces.join('');
      if (needsApproval(found.use, found.tool.name)) {
        waitsForClient = true;
        yield [
          {
            type: 'mcp-approval',
            id: call.id.startsWith('mcpr_') ? call.id : randomId('mcpr'),
            server: found.server.name,
            tool: found.tool.name,
            arguments: json,
          },
        ];
        continue;
      }
      const args = parseArguments(json);
      const id = randomId('mcp');
      if (!args || callsMade >= maxCalls) {
        const message = !args
          ? 'The arguments are not a JSON object.'
          : `No more tool calls: this answer made its ${maxCalls}.`;
        made.push({
          call,
          id,
          offered: found,
          outcome: { output: message, content: [], error: { type: 'mcp_protocol_error', code: -32602, message } },
        });
        continue;
      }
      callsMade++;
      await calling();
      made.push({
        call,
        id,
        offered: found,
        outcome: deps.calls.call(run.caller, access, found.server, found.tool.name, args, run.signal),
      });
    }
    // A call that waits for the client (approval, or its own tool) ends the answer: what ran is said, the rest waits.
    for (const { call, id, offered: found, outcome } of made) {
      yield [
        { type: 'mcp-call', id, server: found.server.name, tool: found.tool.name, arguments: call.pieces.join('') },
      ];
      const result = await outcome;
      yield [{ type: 'mcp-result', id, ...result }];
      toolMessages.push({ role: 'tool', tool_call_id: call.id, content: toolMessage(result) });
    }
    if (waitsForClient || ends) {
      yield [
        {
          ...(finish ?? { type: 'finish', choice: 0 }),
          reason: passed.size > 0 ? 'tool_calls' : finish?.reason === 'length' ? 'length' : 'stop',
        } as FinishEvent,
        ...(total ? [{ type: 'usage' as const, usage: total }] : []),
      ];
      return;
    }
    messages.push({
      role: 'assistant',
      content: text.join('') === '' ? null : text.join(''),
      tool_calls: calls.map((call) => ({
        id: call.id,
        type: 'function' as const,
        function: { name: call.name, arguments: call.pieces.join('') },
      })),
    });
    messages.push(...toolMessages);
    // The next turn is made only while the key may still make it.
    if (run.signal.aborted) throw run.signal.reason;
    access = await standing(deps, run);
    await reserveTurn(deps, run, access, { ...chat, messages }, turn + 1, reserved);
  }
}
