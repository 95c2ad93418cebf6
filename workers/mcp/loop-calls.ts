import { randomBytes } from 'node:crypto';
import { Job, type Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { KeyAccess } from '../../shared/accounts.js';
import type { Config } from '../../shared/config.js';
import type { WireError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { mcpCallEndpoint, type McpCallJobData } from '../../shared/mcp/calls.js';
import type { McpQueues } from '../../shared/mcp/queues.js';
import type { McpServer } from '../../shared/mcp/servers.js';
import type { McpCallOutcome } from '../../shared/mcp/tool-loop.js';
import { callRefusal } from '../../shared/mcp/tool-rules.js';
import {
  limitsInForce,
  moneyRefusal,
  refusedForMoney,
  releaseReservation,
  reserve,
} from '../../shared/money/billing.js';
import { createRedis, isCluster } from '../../shared/redis.js';
import { cancelChannel, mcpLoopReplyChannel } from '../../shared/redis-keys.js';
import { decodeReply, repliesHeldHere, type ReplyMessage } from '../../shared/reply.js';
import { appendRequestLog, loggedMessageChars } from '../../shared/request-log.js';
import type { RequestStatus } from '../../shared/money/usage.js';
import { leaveBacklog, placeJob } from '../../shared/scheduling/index.js';

export interface LoopCallDeps {
  config: Config;
  redis: Redis;
  /** This process's handles on the servers' queues. */
  queues: McpQueues;
  log: Logger;
}

/** Who a loop's call is made for: the chat request's key and account, and the request id its calls are named after. */
export interface LoopCaller {
  requestId: string;
  keyId: string;
  accountId: string;
}

/** How long past a call's deadline its answer is still waited for (the worker answers a call it could not finish). */
const answerGraceMs = 10_000;

/**
 * The calls the gateway's tool loop makes (workers/mcp/tool-loop.ts), each admitted as a client's `tools/call` is at
 * the api (api/mcp/routes.ts): what the key may do now, the server's price reserved and the key's rate of requests
 * counted, a fair place among the accounts waiting on the server, then a job on the server's queue, capped there at
 * its concurrency and run by an `mcp` worker (workers/mcp/tool-calls.ts), settled and logged as a call of its own.
 * The worker answers on this process's own reply channel (in memory when it runs here), read by one subscription.
 */
export class McpLoopCalls {
  private readonly channel = mcpLoopReplyChannel(randomBytes(8).toString('hex'));
  private readonly waiting = new Map<string, (message: ReplyMessage) => void>();
  private subscriber: Redis | undefined;
  private listening: Promise<void> | undefined;
  private letGo: (() => void) | undefined;
  private sequence = 0;

  constructor(private readonly deps: LoopCallDeps) {}

  /**
   * Makes one call of `tool` on `server` for `caller` (whose key may do `access` now); never throws but for a cancel.
   */
  async call(
    caller: LoopCaller,
    access: KeyAccess,
    server: McpServer,
    tool: string,
    args: Record<string, unknown>,
    signal: AbortSignal,
  ): Promise<McpCallOutcome> {
    const { config, redis, log } = this.deps;
    const requestId = `${caller.requestId}-mcp${++this.sequence}`;
    const started = Date.now();
    const deadline = started + 2 * server.timeoutMs;
    const logged = (status: RequestStatus, error?: { code: string; message: string }) =>
      void appendRequestLog(
        redis,
        {
          request_id: requestId,
          account_id: caller.accountId,
          key_id: caller.keyId,
          endpoint: mcpCallEndpoint,
          model: `${server.name}/${tool}`.slice(0, 300),
          stream: false,
          status,
          http_status: status === 'cancelled' ? null : 200,
          error_code: error?.code ?? null,
          ...(error ? { error_message: error.message.slice(0, loggedMessageChars) } : {}),
          latency_ms: Date.now() - started,
          ttft_ms: null,
          created: Math.floor(started / 1000),
        },
        config.usageBufferRecords,
      ).catch((e: unknown) => log.warn({ err: e }, 'could not log a tool call of the loop'));
    const refused = (status: number, code: string, message: string): McpCallOutcome => {
      logged('refused', { code, message });
      return gatewayFailure(status, message);
    };
    const refusal = callRefusal(access, 'tools/call', server.name, tool);
    if (refusal !== undefined) return refused(403, 'tool_not_allowed', refusal);
    // The server's price reserved and the key's rate of requests counted, as for any request.
    // A tool call counts against the key's requests per minute, not its tokens.
    const { tpm: _tokens, ...limits } = limitsInForce(access, config);
    const outcome = await reserve(
      redis,
      {
        requestId,
        keyId: caller.keyId,
        accountId: caller.accountId,
        micros: server.pricePerCallMicros,
        tokens: 0,
        deadline,
      },
      limits,
    );
    if (!outcome.ok) {
      if (outcome.reason === 'rpm' || outcome.reason === 'tpm') {
        return refused(
          429,
          'rate_limit_exceeded',
          `Rate limit reached for requests: the tool call was not made. Try again in ` +
            `${Math.ceil(outcome.retryAfterMs / 1000)} s.`,
        );
      }
      if (outcome.reason === 'no_access') return refused(401, 'invalid_api_key', moneyRefusal('no_access'));
      return refused(429, 'insufficient_quota', refusedForMoney(outcome, access.accountName));
    }
    const queue = this.deps.queues.of(server.name);
    const data: McpCallJobData = {
      requestId,
      method: 'tools/call',
      endpoint: mcpCallEndpoint,
      replyTo: this.channel,
      keyId: caller.keyId,
      accountId: caller.accountId,
      server: server.name,
      tool,
      arguments: args,
      rpcId: requestId,
      deadline,
      queuedAt: started,
    };
    const claim = {
      accountId: caller.accountId,
      weight: access.weight ?? 1,
      tokens: 1,
      tier: 'default' as const,
      contended: true,
    };
    await this.listen();
    const answered = new Promise<ReplyMessage>((resolve) => this.waiting.set(requestId, resolve));
    try {
      try {
        const { priority } = await placeJob(redis, queue, requestId, claim);
        await queue.add(
          mcpCallEndpoint,
          { ...data, claim },
          {
            jobId: requestId,
            priority,
            attempts: 1,
            removeOnComplete: { age: 60, count: 1000 },
            removeOnFail: { age: 3600, count: 5000 },
          },
        );
      } catch (error) {
        await Promise.allSettled([
          releaseReservation(redis, caller.accountId, requestId),
          leaveBacklog(redis, queue.name, requestId),
        ]);
        log.warn({ err: error, server: server.name }, 'could not queue a tool call of the loop');
        return refused(503, 'queue_unavailable', 'The tool call could not be queued; try again.');
      }
      const message = await this.answer(answered, queue, requestId, deadline + answerGraceMs - Date.now(), signal);
      const result = await this.read(message);
      logged(
        result.error?.type === 'http_error' ? 'failed' : 'completed',
        result.error?.type === 'http_error' ? { code: 'upstream_error', message: result.error.message } : undefined,
      );
      return result;
    } catch (error) {
      logged('cancelled', { code: 'client_closed', message: 'The request that made the call was cancelled.' });
      throw error;
    } finally {
      this.waiting.delete(requestId);
    }
  }

  /** Stops listening (the queues are the process's, closed by it). */
  async close(): Promise<void> {
    this.letGo?.();
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    await subscriber?.quit().catch(() => undefined);
  }

  /** The worker's answer, or a timeout (the job read for the answer a missed message carried), or the cancel. */
  private async answer(
    answered: Promise<ReplyMessage>,
    queue: Queue,
    jobId: string,
    waitMs: number,
    signal: AbortSignal,
  ): Promise<ReplyMessage> {
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const cancelled = new Promise<never>((_, reject) => {
      onAbort = () => {
        // The call is stopped where it runs (its worker tells the server), and billed there for what ran.
        void this.deps.redis.publish(cancelChannel, jobId).catch(() => undefined);
        reject(signal.reason);
      };
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
    const late = new Promise<ReplyMessage>((resolve) => {
      timer = setTimeout(
        () => {
          void Job.fromId(queue, jobId).then(
            (job) => {
              const kept = job?.returnvalue as { body?: string } | undefined;
              if (typeof kept?.body === 'string') resolve({ kind: 'done', jobId, seq: 0, payload: kept.body });
              else {
                void this.deps.redis.publish(cancelChannel, jobId).catch(() => undefined);
                resolve({
                  kind: 'error',
                  jobId,
                  seq: 0,
                  payload: JSON.stringify({
                    error: { message: 'The tool call got no answer in time.', type: 'timeout', code: 'timeout' },
                    status: 504,
                  }),
                });
              }
            },
            () =>
              resolve({
                kind: 'error',
                jobId,
                seq: 0,
                payload: JSON.stringify({
                  error: { message: 'The tool call got no answer in time.', type: 'timeout', code: 'timeout' },
                  status: 504,
                }),
              }),
          );
        },
        Math.max(1000, waitMs),
      );
    });
    try {
      return await Promise.race([answered, late, cancelled]);
    } finally {
      clearTimeout(timer);
      if (onAbort) signal.removeEventListener('abort', onAbort);
    }
  }

  /** A worker's reply as the call's outcome. */
  private async read(message: ReplyMessage): Promise<McpCallOutcome> {
    if (message.kind === 'error') {
      const wire = JSON.parse(message.payload) as Partial<WireError>;
      return gatewayFailure(wire.status ?? 502, wire.error?.message ?? 'The tool call failed.');
    }
    const body =
      message.kind === 'done-ref' ? ((await this.deps.redis.getdel(message.payload)) ?? '') : message.payload;
    return outcomeOf(body);
  }

  /** One subscription for every call of this process's loops, opened at the first call. */
  private listen(): Promise<void> {
    this.listening ??= (async () => {
      const dispatch = (message: ReplyMessage) => this.waiting.get(message.jobId)?.(message);
      this.letGo = repliesHeldHere.hold(this.channel, dispatch);
      const subscriber = (this.subscriber = createRedis(this.deps.config.redis, { connectionName: 'worker-mcp-loop' }));
      const take = (channel: string, text: string) => {
        if (channel !== this.channel) return;
        const message = decodeReply(text);
        if (message) dispatch(message);
      };
      subscriber.on('message', take);
      subscriber.on('smessage', take);
      if (isCluster(this.deps.redis)) await subscriber.ssubscribe(this.channel);
      else await subscriber.subscribe(this.channel);
    })();
    this.listening.catch(() => (this.listening = undefined));
    return this.listening;
  }
}

/**
 * A failure of the gateway's (not the server's) as the call's outcome: what the model reads, and the API's
 * `http_error`.
 */
function gatewayFailure(status: number, message: string): McpCallOutcome {
  return { output: message, content: [], error: { type: 'http_error', code: status, message } };
}

/** The JSON-RPC response a worker wrote as the call's outcome: the tool's text, its own error, or the server's. */
export function outcomeOf(body: string): McpCallOutcome {
  let response: {
    result?: { content?: unknown; isError?: unknown; structuredContent?: unknown };
    error?: { code?: unknown; message?: unknown };
  };
  try {
    response = JSON.parse(body) as typeof response;
  } catch {
    return gatewayFailure(502, 'The tool call answered with something that is not JSON.');
  }
  if (response.error) {
    const message =
      typeof response.error.message === 'string' ? response.error.message : 'The MCP server refused the call.';
    return {
      output: message,
      content: [],
      error: {
        type: 'mcp_protocol_error',
        code: typeof response.error.code === 'number' ? response.error.code : -32603,
        message,
      },
    };
  }
  const content = Array.isArray(response.result?.content) ? (response.result.content as unknown[]) : [];
  const texts = content.map((part) => {
    const piece = part as { type?: unknown; text?: unknown };
    return piece.type === 'text' && typeof piece.text === 'string' ? piece.text : JSON.stringify(part);
  });
  const output =
    texts.length > 0
      ? texts.join('\n')
      : response.result?.structuredContent !== undefined
        ? JSON.stringify(response.result.structuredContent)
        : '';
  if (response.result?.isError === true)
    return { output, content, error: { type: 'mcp_tool_execution_error', content } };
  return { output, content };
}
