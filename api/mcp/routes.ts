import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type Router from '@koa/router';
import { z } from 'zod';
import type { KeyAccess } from '../../shared/accounts.js';
import { accessRefusalMessage } from '../../shared/access/index.js';
import type { Config } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import {
  mcpEndpointOf,
  prefixedToolName,
  splitToolName,
  type McpCallJobData,
  type McpForwardedMethod,
} from '../../shared/mcp/calls.js';
import type { McpServer, McpServerHealth, McpTool } from '../../shared/mcp/servers.js';
import type { McpRegistry } from '../../shared/mcp/registry.js';
import type { McpQueues } from '../../shared/mcp/queues.js';
import { callRefusal, mayReachServer, toolRefusal } from '../../shared/mcp/tool-rules.js';
import { appendRequestLog, loggedMessageChars } from '../../shared/request-log.js';
import { sseJson } from '../../shared/sse.js';
import { cancelChannel, mcpHealthKey, mcpSessionKey } from '../../shared/redis-keys.js';
import type { QueueShards } from '../../shared/queue-shards.js';
import type { KeyCache } from '../accounts/key-store.js';
import { readJsonBody } from '../http/request-body.js';
import { createRouter } from '../http/canonical-path.js';
import type { GatewayContext } from '../http/context.js';
import { enqueue } from '../requests/enqueue.js';
import { holdForReply } from '../relay/hold-for-reply.js';
import type { ReplyHub } from '../relay/reply-hub.js';

/** The protocol revisions served, newest first: a client asking for another is answered with the newest. */
const protocolVersions = ['2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'];
/** A session not used for this long is forgotten (its client starts a new one, as the protocol says). */
const sessionIdleSeconds = 24 * 3600;
/** The session ids `initialize` issues. */
const sessionIdPattern = /^mcp_[0-9a-f]{32}$/;
/** The largest JSON-RPC message taken (a tool's arguments included). */
const maxMessageBytes = 4 * 1024 * 1024;

// JSON-RPC 2.0's error codes, and the protocol's.
const parseError = -32700;
const invalidRequestCode = -32600;
const methodNotFound = -32601;
const invalidParams = -32602;
/** MCP's: a resource no server has. */
const resourceNotFound = -32002;
const internalError = -32603;
/** The gateway refused or could not complete the call (a limit, a timeout, the upstream): `data` says which. */
const gatewayRefusal = -32000;

const messageSchema = z.object({
  jsonrpc: z.literal('2.0'),
  id: z.union([z.string().max(256), z.number().int()]).optional(),
  method: z.string().min(1).max(256),
  params: z.record(z.string(), z.unknown()).optional(),
});
type RpcMessage = z.infer<typeof messageSchema>;

const callParamsSchema = z.object({
  name: z.string().min(1).max(512),
  arguments: z.record(z.string(), z.unknown()).optional(),
});

const promptParamsSchema = z.object({
  name: z.string().min(1).max(512),
  arguments: z.record(z.string(), z.string()).optional(),
});

/** The progress token a request carries (`params._meta.progressToken`), when it is one. */
function progressTokenOf(message: RpcMessage): string | number | undefined {
  const meta = message.params?._meta;
  const token = meta && typeof meta === 'object' ? (meta as { progressToken?: unknown }).progressToken : undefined;
  return (typeof token === 'string' && token.length <= 256) || (typeof token === 'number' && Number.isFinite(token))
    ? token
    : undefined;
}

/**
 * On `/mcp`, a resource's URI (and a template's) is named with its server: `switchyard-mcp://<server>/<the server's
 * URI>`.
 */
const uriPrefix = 'switchyard-mcp://';

function prefixedUri(server: string, uri: string): string {
  return `${uriPrefix}${server}/${uri}`;
}

/** The server and its own URI a `/mcp` resource URI stands for. */
function splitUri(uri: string): { server: string; uri: string } | undefined {
  if (!uri.startsWith(uriPrefix)) return undefined;
  const rest = uri.slice(uriPrefix.length);
  const slash = rest.indexOf('/');
  if (slash <= 0 || slash === rest.length - 1) return undefined;
  return { server: rest.slice(0, slash), uri: rest.slice(slash + 1) };
}

/** A `resources/read` answer's contents named as on `/mcp` (an answer that is not a result passes as it is). */
function renameContents(raw: string, server: string): string {
  const response = JSON.parse(raw) as { result?: { contents?: Array<{ uri?: unknown }> } };
  const contents = response.result?.contents;
  if (!Array.isArray(contents)) return raw;
  for (const content of contents) if (typeof content?.uri === 'string') content.uri = prefixedUri(server, content.uri);
  return JSON.stringify(response);
}

/** An answer to one message: a JSON-RPC response (a status besides 200 when the HTTP layer says something too). */
class RpcFailure extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly status = 200,
    readonly data?: Record<string, unknown>,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

export interface McpRouteDeps {
  config: Config;
  redis: Redis;
  keys: KeyCache;
  hub: ReplyHub;
  queues: QueueShards;
  log: Logger;
}

/** The key a request carries: `Authorization: Bearer` (how agents send a header to a remote server) or `x-api-key`. */
function presentedKey(ctx: GatewayContext): string | undefined {
  const bearer = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get('authorization'))?.[1];
  const apiKey = ctx.get('x-api-key').trim();
  return bearer ?? (/^\S+$/.test(apiKey) ? apiKey : undefined);
}

/**
 * How long an api uses what it read of the checks before reading them again (a check runs every few seconds at most).
 */
const checksFreshMs = 1000;

/**
 * What the workers' checks found of every server (the servers whose tools can be listed and called now), read from
 * Redis at most once a second per api, not once per message.
 */
class CheckedServers {
  private read: { at: number; health: Promise<Map<string, McpServerHealth>> } | undefined;

  constructor(private readonly redis: Redis) {}

  async of(servers: readonly McpServer[]): Promise<Map<string, McpServerHealth>> {
    if (servers.length === 0) return new Map();
    const now = Date.now();
    if (!this.read || now - this.read.at > checksFreshMs) {
      const health = this.load();
      this.read = { at: now, health };
      health.catch(() => (this.read = undefined));
    }
    const all = await this.read.health;
    return new Map(
      servers.flatMap((server): Array<[string, McpServerHealth]> => {
        // A server whose secrets will not open is failing, whatever a check found before.
        if (server.unusable !== undefined)
          return [[server.name, { ok: false, checkedAt: now, latencyMs: 0, error: server.unusable, tools: [] }]];
        return all.has(server.name) ? [[server.name, all.get(server.name)!]] : [];
      }),
    );
  }

  private async load(): Promise<Map<string, McpServerHealth>> {
    const found = await this.redis.hgetall(mcpHealthKey);
    return new Map(Object.entries(found).map(([name, text]) => [name, JSON.parse(text) as McpServerHealth]));
  }
}

/**
 * The MCP endpoint (Streamable HTTP): `/mcp` serves every upstream server's tools, each named `server__tool`;
 * `/mcp/{server}` one server's, with their names unchanged. The client authenticates with its Switchyard key.
 * Every `tools/call` is a job on its server's queue (workers/mcp/tool-calls.ts): reserved and billed at the server's
 * price per call, counted by the key's rate limits, capped at the server's concurrency, logged.
 */
export function mcpRoutes(deps: McpRouteDeps, registry: McpRegistry, queues: McpQueues): Router {
  const router = createRouter();
  const checked = new CheckedServers(deps.redis);

  const handle = async (ctx: GatewayContext, scope: McpServer | undefined) => {
    const key = presentedKey(ctx);
    const verdict = key === undefined ? undefined : await deps.keys.check(key);
    if (!verdict || 'refused' in verdict) {
      const message = !verdict
        ? 'Send your Switchyard API key as "Authorization: Bearer <key>".'
        : verdict.refused === 'disabled'
          ? accessRefusalMessage('disabled')
          : verdict.refused === 'expired'
            ? 'The API key provided has expired.'
            : 'Incorrect API key provided.';
      ctx.set('www-authenticate', 'Bearer realm="switchyard"');
      return reply(ctx, 401, {
        jsonrpc: '2.0',
        id: null,
        error: { code: invalidRequestCode, message, data: { type: 'invalid_api_key' } },
      });
    }
    const access = verdict.access;
    // A server none of whose tools the key may use is not served to it at all (its tools would list empty).
    if (scope && !mayReachServer(access, scope.name)) {
      return reply(ctx, 403, {
        jsonrpc: '2.0',
        id: null,
        error: {
          code: gatewayRefusal,
          message:
            `This API key may not use any tool of the MCP server ${scope.name}. Ask an administrator to change the ` +
            `key's or its team's mcp_tools.`,
          data: { type: 'tool_not_allowed', status: 403 },
        },
      });
    }
    const sessionId = ctx.get('mcp-session-id') || undefined;
    if (sessionId !== undefined) {
      // Read and kept alive in one command; an id not of the form this api issues is not looked up.
      const owner = sessionIdPattern.test(sessionId)
        ? await deps.redis.getex(mcpSessionKey(sessionId), 'EX', sessionIdleSeconds)
        : null;
      if (owner !== access.keyId)
        return reply(ctx, 404, {
          jsonrpc: '2.0',
          id: null,
          error: { code: invalidRequestCode, message: 'Session not found: start a new one with initialize.' },
        });
    }
    if (ctx.method === 'DELETE') {
      if (sessionId !== undefined) await deps.redis.del(mcpSessionKey(sessionId));
      ctx.status = 204;
      ctx.body = null;
      return;
    }
    if (ctx.method !== 'POST') {
      ctx.set('allow', 'POST, DELETE');
      return reply(ctx, 405, {
        jsonrpc: '2.0',
        id: null,
        error: {
          code: invalidRequestCode,
          message: `Method ${ctx.method} is not allowed: this server sends nothing unasked; POST JSON-RPC messages.`,
        },
      });
    }
    let message: RpcMessage;
    try {
      const { body } = await readJsonBody(ctx.req, maxMessageBytes);
      const parsed = messageSchema.safeParse(body);
      if (!parsed.success)
        return reply(ctx, 400, {
          jsonrpc: '2.0',
          id: null,
          error: {
            code: invalidRequestCode,
            message: `Not a JSON-RPC 2.0 message: ${parsed.error.issues[0]!.path.join('.') || 'the body'} ${parsed.error.issues[0]!.message}.`,
          },
        });
      message = parsed.data;
    } catch (error) {
      const status = error instanceof GatewayError ? error.status : 400;
      return reply(ctx, status === 413 ? 413 : 400, {
        jsonrpc: '2.0',
        id: null,
        error: { code: parseError, message: error instanceof Error ? error.message : 'The body could not be read.' },
      });
    }
    // A notification (or a response to nothing this server asked) is taken, and nothing is answered.
    if (message.id === undefined) {
      if (message.method === 'notifications/cancelled')
        await cancelCall(deps.redis, access.keyId, sessionId, message.params?.requestId);
      // The body first: Koa makes a status 204 when a body is set to null after it.
      ctx.body = null;
      ctx.status = 202;
      return;
    }
    const id = message.id;
    try {
      const result = await answer(ctx, access, scope, sessionId, message);
      // Answered as a stream already (a tool call's progress, then its response).
      if (ctx.respond === false) return;
      if (result.raw !== undefined) {
        ctx.status = 200;
        ctx.type = 'application/json';
        ctx.body = result.raw;
        return;
      }
      return reply(ctx, 200, { jsonrpc: '2.0', id, result: result.value });
    } catch (error) {
      const failure =
        error instanceof RpcFailure
          ? error
          : new RpcFailure(internalError, 'The gateway could not answer this message.');
      if (!(error instanceof RpcFailure)) ctx.state.log.warn({ err: error }, 'MCP message failed');
      for (const [name, value] of Object.entries(failure.headers)) ctx.set(name, value);
      // A JSON-RPC error in a 200, as MCP clients read a failed call; what the gateway's status would have been is in
      // `data`.
      return reply(ctx, 200, {
        jsonrpc: '2.0',
        id,
        error: { code: failure.code, message: failure.message, ...(failure.data ? { data: failure.data } : {}) },
      });
    }
  };

  /** One request's answer: a result, or a whole JSON-RPC response text the worker wrote (a tool's result). */
  const answer = async (
    ctx: GatewayContext,
    access: KeyAccess,
    scope: McpServer | undefined,
    sessionId: string | undefined,
    message: RpcMessage,
  ): Promise<{ value?: unknown; raw?: string }> => {
    switch (message.method) {
      case 'initialize': {
        const asked = typeof message.params?.protocolVersion === 'string' ? message.params.protocolVersion : undefined;
        const protocolVersion = asked !== undefined && protocolVersions.includes(asked) ? asked : protocolVersions[0]!;
        const session = `mcp_${randomBytes(16).toString('hex')}`;
        await deps.redis.set(mcpSessionKey(session), access.keyId, 'EX', sessionIdleSeconds);
        ctx.set('mcp-session-id', session);
        return {
          value: {
            protocolVersion,
            capabilities: {
              tools: { listChanged: false },
              resources: { subscribe: false, listChanged: false },
              prompts: { listChanged: false },
            },
            serverInfo: { name: scope ? `switchyard/${scope.name}` : 'switchyard', version: '1' },
            instructions: scope
              ? `The tools of ${scope.name}, through Switchyard.`
              : 'Tools of every server your key may use, through Switchyard; each is named <server>__<tool>.',
          },
        };
      }
      case 'ping':
        return { value: {} };
      case 'tools/list': {
        // Only the tools the key may use, read from what it may do now (a changed rule is heard within a second).
        const health = await checked.of(
          scope ? [scope] : registry.list().filter((server) => mayReachServer(access, server.name)),
        );
        const tools: McpTool[] = [];
        for (const [name, found] of health) {
          if (!found.ok) continue;
          for (const tool of found.tools) {
            if (toolRefusal(access, name, tool.name) !== undefined) continue;
            tools.push(scope ? tool : { ...tool, name: prefixedToolName(name, tool.name) });
          }
        }
        return { value: { tools } };
      }
      case 'resources/list':
      case 'resources/templates/list':
      case 'prompts/list': {
        // As the last check listed them (each server's whole list, one page), for the servers the key may reach.
        const health = await checked.of(
          scope ? [scope] : registry.list().filter((server) => mayReachServer(access, server.name)),
        );
        const field =
          message.method === 'resources/list'
            ? 'resources'
            : message.method === 'prompts/list'
              ? 'prompts'
              : 'resourceTemplates';
        const items: unknown[] = [];
        for (const [name, found] of health) {
          if (!found.ok) continue;
          for (const item of found[field] ?? []) {
            if (scope) items.push(item);
            else if (field === 'prompts') items.push({ ...item, name: prefixedToolName(name, String(item.name)) });
            else if (field === 'resources') items.push({ ...item, uri: prefixedUri(name, String(item.uri)) });
            else items.push({ ...item, uriTemplate: prefixedUri(name, String(item.uriTemplate)) });
          }
        }
        return { value: { [field]: items } };
      }
      case 'tools/call':
        return { raw: await callTool(ctx, access, scope, sessionId, message) };
      case 'resources/read':
      case 'prompts/get':
        return { raw: await readOne(ctx, access, scope, sessionId, message) };
      default:
        throw new RpcFailure(methodNotFound, `Method not found: ${message.method}.`);
    }
  };

  const callTool = async (
    ctx: GatewayContext,
    access: KeyAccess,
    scope: McpServer | undefined,
    sessionId: string | undefined,
    message: RpcMessage,
  ): Promise<string> => {
    const parsed = callParamsSchema.safeParse(message.params ?? {});
    if (!parsed.success)
      throw new RpcFailure(
        invalidParams,
        `Invalid tools/call params: ${parsed.error.issues[0]!.path.join('.') || 'params'} ${parsed.error.issues[0]!.message}.`,
      );
    const { name, arguments: args = {} } = parsed.data;
    const named = scope ? { server: scope.name, tool: name } : splitToolName(name);
    const server = named ? registry.get(named.server) : undefined;
    if (!named || !server)
      throw new RpcFailure(
        invalidParams,
        `Unknown tool: ${name}.${scope ? '' : ' Tools here are named <server>__<tool>.'}`,
      );
    const health = (await checked.of([server])).get(server.name);
    if (!health?.ok || !health.tools.some((tool) => tool.name === named.tool)) {
      throw new RpcFailure(
        invalidParams,
        health?.ok === false
          ? `The server ${server.name} is not answering (${health.error}); try again later.`
          : `Unknown tool: ${name}.`,
      );
    }
    // A tool the key may not use (now: the rules as last heard) is refused, and the refusal logged like any call.
    return forward(ctx, access, server, sessionId, message, {
      method: 'tools/call',
      target: named.tool,
      args,
      price: server.pricePerCallMicros,
      refusal: callRefusal(access, 'tools/call', server.name, named.tool),
    });
  };

  /**
   * `resources/read` and `prompts/get`: sent on to the server that has it, through its queue (on `/mcp`, named with its
   * server).
   */
  const readOne = async (
    ctx: GatewayContext,
    access: KeyAccess,
    scope: McpServer | undefined,
    sessionId: string | undefined,
    message: RpcMessage,
  ): Promise<string> => {
    const method = message.method as 'resources/read' | 'prompts/get';
    let server: McpServer | undefined;
    let target: string;
    let args: Record<string, unknown> = {};
    if (method === 'resources/read') {
      const uri = message.params?.uri;
      if (typeof uri !== 'string' || uri.length === 0 || uri.length > 8192)
        throw new RpcFailure(invalidParams, 'Invalid resources/read params: uri must be a string.');
      const named = scope ? { server: scope.name, uri } : splitUri(uri);
      server = named ? registry.get(named.server) : undefined;
      if (!named || !server)
        throw new RpcFailure(
          resourceNotFound,
          `Resource not found: ${uri.slice(0, 300)}.${scope ? '' : ` Resources here are named ${uriPrefix}<server>/<uri>.`}`,
          200,
          { uri },
        );
      target = named.uri;
    } else {
      const parsed = promptParamsSchema.safeParse(message.params ?? {});
      if (!parsed.success)
        throw new RpcFailure(
          invalidParams,
          `Invalid prompts/get params: ${parsed.error.issues[0]!.path.join('.') || 'params'} ${parsed.error.issues[0]!.message}.`,
        );
      const named = scope ? { server: scope.name, tool: parsed.data.name } : splitToolName(parsed.data.name);
      server = named ? registry.get(named.server) : undefined;
      if (!named || !server)
        throw new RpcFailure(
          invalidParams,
          `Unknown prompt: ${parsed.data.name}.${scope ? '' : ' Prompts here are named <server>__<prompt>.'}`,
        );
      target = named.tool;
      args = parsed.data.arguments ?? {};
    }
    const health = (await checked.of([server])).get(server.name);
    if (health?.ok === false)
      throw new RpcFailure(
        internalError,
        `The server ${server.name} is not answering (${health.error}); try again later.`,
      );
    const raw = await forward(ctx, access, server, sessionId, message, {
      method,
      target,
      args,
      price: 0,
      refusal: callRefusal(access, method, server.name, target),
    });
    // On `/mcp` the contents read are named as the client named the resource.
    if (scope || method !== 'resources/read' || raw === '') return raw;
    return renameContents(raw, server.name);
  };

  /**
   * One message sent on to a server as a job of its queue: admitted (the price reserved, the key's rate limits
   * counted, a fair place among the accounts waiting on the server), held for the worker's answer, logged.
   */
  const forward = async (
    ctx: GatewayContext,
    access: KeyAccess,
    server: McpServer,
    sessionId: string | undefined,
    message: RpcMessage,
    call: {
      method: McpForwardedMethod;
      target: string;
      args: Record<string, unknown>;
      price: number;
      refusal: string | undefined;
    },
  ): Promise<string> => {
    const requestId = ctx.state.requestId as string;
    const started = Date.now();
    const endpoint = mcpEndpointOf(call.method);
    // A call that asks for progress (and takes events) is answered as a stream: the server's progress as it comes, then
    // the response.
    const progressToken =
      call.method === 'tools/call' && /text\/event-stream/i.test(ctx.get('accept'))
        ? progressTokenOf(message)
        : undefined;
    // A call waits at most its server's timeout in the queue, then runs at most as long again.
    const deadline = started + 2 * server.timeoutMs;
    const data: McpCallJobData = {
      requestId,
      method: call.method,
      endpoint,
      replyTo: deps.hub.channel,
      keyId: access.keyId,
      accountId: access.accountId,
      server: server.name,
      tool: call.target,
      arguments: call.args,
      rpcId: message.id!,
      ...(progressToken !== undefined ? { progressToken } : {}),
      deadline,
      queuedAt: started,
    };
    const queue = queues.of(server.name);
    const log = ctx.state.log as Logger;
    const logged = (
      status: 'completed' | 'failed' | 'cancelled' | 'refused',
      httpStatus: number | null,
      error?: RpcFailure,
    ) =>
      void appendRequestLog(
        deps.redis,
        {
          request_id: requestId,
          account_id: access.accountId,
          key_id: access.keyId,
          endpoint,
          model: `${server.name}/${call.target}`.slice(0, 300),
          stream: false,
          status,
          http_status: httpStatus,
          error_code: error ? String(error.data?.type ?? error.code) : null,
          ...(error ? { error_message: error.message.slice(0, loggedMessageChars) } : {}),
          latency_ms: Date.now() - started,
          ttft_ms: null,
          created: Math.floor(started / 1000),
        },
        deps.config.usageBufferRecords,
      ).catch((e: unknown) => log.warn({ err: e }, 'could not log an MCP call'));
    if (call.refusal !== undefined) {
      const failure = new RpcFailure(gatewayRefusal, call.refusal, 403, { type: 'tool_not_allowed', status: 403 });
      logged('refused', 200, failure);
      throw failure;
    }
    // The call is heard before it is queued, so nothing its worker publishes is missed.
    const expected = deps.hub.expect(requestId, false);
    const callKey = mcpCallKey(access.keyId, sessionId, message.id!);
    let lateFailure: RpcFailure | undefined;
    try {
      let enqueued;
      try {
        enqueued = await enqueue(
          deps,
          queue,
          {
            id: requestId,
            mode: 'held',
            data,
            payload: {},
            options: {
              jobId: requestId,
              attempts: 1,
              removeOnComplete: { age: 60, count: 1000 },
              removeOnFail: { age: 3600, count: 5000 },
            },
            deadline,
          },
          {
            spend: { access, estimate: { micros: call.price, tokens: 0 } },
            fair: {
              accountId: access.accountId,
              weight: access.weight ?? 1,
              tokens: 1,
              tier: 'default',
              contended: true,
            },
          },
          log,
        );
      } catch (error) {
        const refusal = asRpcFailure(error);
        logged('refused', 200, refusal);
        throw refusal;
      }
      for (const [header, value] of Object.entries(enqueued.headers)) ctx.set(header, value);
      // Where a cancel notification finds the call: written beside the wait, not before it.
      void deps.redis.set(callKey, requestId, 'PX', deadline - started + 60_000).catch(() => undefined);
      try {
        await holdForReply(
          ctx,
          { config: deps.config, redis: deps.redis, hub: deps.hub, queues: deps.queues },
          expected,
          queue,
          {
            stream: progressToken !== undefined,
            dialect: 'mcp',
            deadline,
            notes: {
              firstChunk: () => undefined,
              failed: (code, text) => (lateFailure = new RpcFailure(gatewayRefusal, text, 200, { type: code })),
            },
            abandon: enqueued.abandon,
            lateError: (error) =>
              sseJson(
                {
                  jsonrpc: '2.0',
                  id: message.id,
                  error: {
                    code: gatewayRefusal,
                    message: error.message,
                    data: { type: error.code ?? error.type, status: error.status },
                  },
                },
                'message',
              ),
          },
        );
      } catch (error) {
        const failure = asRpcFailure(error);
        logged(failure.status === 499 ? 'cancelled' : 'failed', ctx.res.destroyed ? null : 200, failure);
        throw failure;
      }
      if (ctx.respond === false) {
        // Streamed: it ended with the response, with a late error, or without the client.
        if (ctx.res.destroyed && !ctx.res.writableFinished)
          logged(
            'cancelled',
            null,
            new RpcFailure(gatewayRefusal, 'The client left before the answer.', 499, { type: 'client_closed' }),
          );
        else logged(lateFailure ? 'failed' : 'completed', 200, lateFailure);
        return '';
      }
      const body = ctx.body;
      ctx.body = null;
      // Ended without an answer: the client left (its call cancelled; what ran is billed by its worker).
      if (typeof body !== 'string') {
        logged(
          'cancelled',
          null,
          new RpcFailure(gatewayRefusal, 'The client left before the answer.', 499, { type: 'client_closed' }),
        );
        return '';
      }
      // Answered (the server's own JSON-RPC error too: its worker settles that one `failed`, `upstream_error`, which
      // the record's merge of the two halves keeps over this `completed`).
      logged('completed', 200);
      return body;
    } finally {
      expected.release();
      void deps.redis.del(callKey).catch(() => undefined);
    }
  };

  for (const path of ['/mcp', '/mcp/:server']) {
    router.all(path, async (ctx) => {
      const name = (ctx.params as { server?: string }).server;
      const scope = name === undefined ? undefined : registry.get(name);
      if (name !== undefined && !scope) {
        return reply(ctx as unknown as GatewayContext, 404, {
          jsonrpc: '2.0',
          id: null,
          error: { code: invalidRequestCode, message: `No MCP server named ${name} here.` },
        });
      }
      await handle(ctx as unknown as GatewayContext, scope);
    });
  }
  return router;
}

/** Where a call in flight is found by its client's JSON-RPC id, so `notifications/cancelled` reaches its worker. */
function mcpCallKey(keyId: string, sessionId: string | undefined, rpcId: string | number): string {
  return mcpSessionKey(`${sessionId ?? 'none'}:${keyId}:call:${typeof rpcId}:${rpcId}`);
}

async function cancelCall(redis: Redis, keyId: string, sessionId: string | undefined, rpcId: unknown): Promise<void> {
  if (typeof rpcId !== 'string' && typeof rpcId !== 'number') return;
  const jobId = await redis.get(mcpCallKey(keyId, sessionId, rpcId));
  if (jobId) await redis.publish(cancelChannel, jobId);
}

/** A gateway error (a refusal, a timeout, the upstream's failure) as the JSON-RPC error the client reads. */
function asRpcFailure(error: unknown): RpcFailure {
  if (error instanceof RpcFailure) return error;
  if (error instanceof GatewayError) {
    const wire = error.toWire().error;
    return new RpcFailure(
      gatewayRefusal,
      wire.message,
      error.status,
      { type: wire.code ?? wire.type, status: error.status },
      error.headers ?? {},
    );
  }
  return new RpcFailure(internalError, 'The gateway could not complete the call.', 500);
}

function reply(ctx: GatewayContext, status: number, body: unknown): void {
  ctx.status = status;
  ctx.type = 'application/json';
  ctx.body = JSON.stringify(body);
}
