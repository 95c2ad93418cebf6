import { ProtocolError, type Client } from '@modelcontextprotocol/client';
import type { Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { accessRefusalMessage, type CurrentAccess } from '../../shared/access/index.js';
import type { Config } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { mcpQueueName, type McpCallJobData } from '../../shared/mcp/calls.js';
import { callRefusal } from '../../shared/mcp/tool-rules.js';
import type { McpServer, McpServerHealth } from '../../shared/mcp/servers.js';
import type { McpRegistry } from '../../shared/mcp/registry.js';
import type { McpQueues } from '../../shared/mcp/queues.js';
import { mcpHealthKey } from '../../shared/redis-keys.js';
import { settle, type SettlePolicy } from '../../shared/money/billing.js';
import { noAmounts, type SettledStatus, type UsageEntry } from '../../shared/money/usage.js';
import { leaveBacklog } from '../../shared/scheduling/index.js';
import { settledBy } from '../../shared/stop-deadline.js';
import type { CancelRegistry } from '../cancel-registry.js';
import { ClientGoneError } from '../client-gone-error.js';
import { ReplyPublisher } from '../reply-publisher.js';
import { sseJson } from '../../shared/sse.js';
import { upstreamClient, upstreamTransport } from './upstream.js';
import { StartingWorker } from '../starting-worker.js';

/** One connection to an upstream server, shared by the calls a worker runs on it; made again after it fails. */
class UpstreamConnection {
  private client: Promise<Client> | undefined;

  constructor(private readonly server: McpServer) {}

  get(signal: AbortSignal): Promise<Client> {
    this.client ??= this.connect().catch((error: unknown) => {
      this.client = undefined;
      throw error;
    });
    return Promise.race([
      this.client,
      new Promise<never>((_, reject) => {
        if (signal.aborted) reject(signal.reason);
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      }),
    ]);
  }

  private async connect(): Promise<Client> {
    const server = this.server;
    const client = upstreamClient();
    const transport = upstreamTransport(server);
    client.onclose = () => {
      this.client = undefined;
    };
    await client.connect(transport, { timeout: server.timeoutMs });
    return client;
  }

  /** Drops the connection (after a failure, or on close): the next call connects again. */
  drop(): void {
    const client = this.client;
    this.client = undefined;
    void client?.then((c) => c.close()).catch(() => undefined);
  }
}

export interface ToolCallDeps {
  config: Config;
  redis: Redis;
  log: Logger;
  /** The servers as they are now: a server added starts being served, one removed stops (within a second). */
  registry: McpRegistry;
  /** This process's handles on the servers' queues (the cap of each is set through them). */
  queues: McpQueues;
  cancels: CancelRegistry;
  access: CurrentAccess;
  policy: SettlePolicy;
}

/** What this worker runs for one server: its BullMQ worker and its connection, as the server was last set. */
interface Served {
  worker: StartingWorker<McpCallJobData, { body?: string; bodyRef?: string }>;
  upstream: UpstreamConnection;
  /** The server as set when its connection was made: a change of it makes the connection again. */
  settings: string;
}

/** How long a removed server's calls already queued are still answered (refused, unbilled) before its worker closes. */
const retireGraceMs = 5000;

/**
 * Runs the tool calls the api queued (api/mcp/routes.ts), one BullMQ queue per upstream server, capped in BullMQ at
 * the server's `max_concurrency` across every worker. Each call: read again what its key may do, call the tool within
 * the server's timeout (a cancel from the api aborts it, which the client sends upstream as
 * `notifications/cancelled`), settle it once (the server's price for a call that ran, nothing for one that did not),
 * and publish the whole JSON-RPC response to the api holding the client. A call is never run twice: tools are not
 * idempotent, so a worker that dies mid-call fails it (`maxStalledCount: 0`) and the client is told. The servers
 * follow the registry: one an admin adds is served at once, a change of one (its cap, its URL or headers) holds from
 * the next call, and one removed refuses what was queued for it and stops being served.
 */
export class McpToolWorkers {
  private readonly served = new Map<string, Served>();
  private readonly retiring = new Set<Promise<void>>();
  private stopChanges: (() => void) | undefined;
  private syncing: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(private readonly deps: ToolCallDeps) {}

  async start(): Promise<void> {
    this.stopChanges = this.deps.registry.onChange(({ servers }) => {
      this.syncing = this.syncing
        .then(() => this.sync(servers))
        .catch((error: unknown) => this.deps.log.warn({ err: error }, 'could not follow a change of the MCP servers'));
    });
    await this.sync(this.deps.registry.list());
  }

  async close(until: number): Promise<void> {
    this.closed = true;
    this.stopChanges?.();
    await settledBy(this.syncing, until);
    const workers = [...this.served.values()].map((served) => served.worker);
    const closed = await settledBy(
      Promise.allSettled([...workers.map((worker) => worker.close()), ...this.retiring]),
      until,
    );
    if (!closed) for (const worker of workers) void worker.close(true).catch(() => undefined);
    for (const served of this.served.values()) served.upstream.drop();
  }

  /** Serves the servers given: opens the new, follows the changed, retires the removed. */
  private async sync(servers: readonly McpServer[]): Promise<void> {
    if (this.closed) return;
    const names = new Set(servers.map((server) => server.name));
    for (const server of servers) {
      const settings = JSON.stringify(server);
      const served = this.served.get(server.name);
      if (!served) {
        await this.open(server, settings);
        continue;
      }
      if (served.settings === settings) continue;
      const was = JSON.parse(served.settings) as McpServer;
      if (was.maxConcurrency !== server.maxConcurrency) {
        await this.cap(server);
        served.worker.concurrency = server.maxConcurrency;
      }
      // Where and how it is reached changed: new calls connect anew; those running finish on the old connection,
      // closed once they had their time. A change of its price or cap alone keeps the connection.
      const reach = (s: McpServer) => JSON.stringify([s.transport, s.url, s.headers, s.command, s.unusable]);
      if (reach(was) !== reach(server)) {
        const old = served.upstream;
        served.upstream = new UpstreamConnection(server);
        setTimeout(() => old.drop(), was.timeoutMs + 1000).unref();
      }
      served.settings = settings;
    }
    for (const [name, served] of this.served) {
      if (names.has(name)) continue;
      this.served.delete(name);
      // Calls queued for it in the second before every api heard are answered (refused) first.
      const retired = new Promise<void>((resolve) => setTimeout(resolve, retireGraceMs).unref())
        .then(() => served.worker.close())
        .finally(() => {
          served.upstream.drop();
          this.retiring.delete(retired);
        });
      this.retiring.add(retired);
    }
  }

  /** The server's cap, held across every worker by BullMQ. */
  private async cap(server: McpServer): Promise<void> {
    await this.deps.queues.of(server.name).setGlobalConcurrency(server.maxConcurrency);
  }

  private async open(server: McpServer, settings: string): Promise<void> {
    const { config, redis, log } = this.deps;
    const name = mcpQueueName(server.name);
    await this.cap(server);
    const worker = new StartingWorker<McpCallJobData, { body?: string; bodyRef?: string }>(
      name,
      (job, token) => this.take(job, token),
      {
        connection: redis,
        concurrency: server.maxConcurrency,
        lockDuration: config.workerLockMs,
        stalledInterval: Math.max(500, Math.floor(config.workerLockMs / 2)),
        maxStalledCount: 0,
      },
    );
    worker.on('failed', (job, error) => void this.lost(job, error));
    worker.on('error', (error) => log.error({ err: error, queue: name }, 'MCP worker error'));
    this.served.set(server.name, { worker, upstream: new UpstreamConnection(server), settings });
    await worker.waitUntilReady();
  }

  /** A call taken: run on its server as it is now; a server removed meanwhile refuses it, unbilled. */
  private async take(job: Job<McpCallJobData>, token?: string): Promise<{ body?: string; bodyRef?: string }> {
    const server = this.deps.registry.get(job.data.server);
    const served = this.served.get(job.data.server);
    if (server && served && server.unusable === undefined) return this.run(server, served.upstream, job, token);
    const data = job.data;
    const error =
      server?.unusable !== undefined
        ? new GatewayError(502, `The MCP server ${data.server} cannot be reached: ${server.unusable}.`, {
            code: 'upstream_error',
          })
        : new GatewayError(404, `The MCP server ${data.server} was removed.`, { code: 'mcp_server_not_found' });
    await this.settle(data, 'failed', 0, Date.now(), error.code ?? 'upstream_error');
    await new ReplyPublisher(this.deps.redis, data.replyTo, job.id!, { stream: data.progressToken !== undefined })
      .error(error.toWire())
      .catch(() => undefined);
    return {};
  }

  private async run(
    server: McpServer,
    upstream: UpstreamConnection,
    job: Job<McpCallJobData>,
    _token?: string,
  ): Promise<{ body?: string; bodyRef?: string }> {
    const { redis, cancels, access } = this.deps;
    const data = job.data;
    void leaveBacklog(redis, job.queueName, job.id!, job.queueQualifiedName + ':' + job.id).catch(() => undefined);
    const method = data.method ?? 'tools/call';
    // A call whose client asked for progress is a stream: the server's progress as it comes, then the response.
    const streamed = data.progressToken !== undefined;
    const publisher = new ReplyPublisher(redis, data.replyTo, job.id!, { stream: streamed });
    // What was sent to the server, and what went back (progress included): the request log's bytes in and out.
    const sent = JSON.stringify(
      method === 'resources/read' ? { uri: data.tool } : { name: data.tool, arguments: data.arguments },
    );
    const sizes = { bytes_in: Buffer.byteLength(sent), ...(server.keepArguments ? { arguments: sent } : {}) };
    let progressBytes = 0;
    /** Settles the call with its answer's size, then relays the answer. */
    const answer = async (
      status: SettledStatus,
      cost: number,
      response: Record<string, unknown>,
      errorCode?: string,
    ): Promise<{ body?: string; bodyRef?: string }> => {
      const whole = streamed
        ? sseJson({ jsonrpc: '2.0', id: data.rpcId, ...response }, 'message')
        : JSON.stringify({ jsonrpc: '2.0', id: data.rpcId, ...response });
      await this.settle(data, status, cost, started, errorCode, {
        ...sizes,
        bytes_out: progressBytes + Buffer.byteLength(whole),
      });
      if (!streamed) return publisher.done(whole);
      await publisher.endStream(whole);
      return {};
    };
    const started = Date.now();
    const fail = async (status: SettledStatus, error: GatewayError, ran: boolean) => {
      await this.settle(
        data,
        status,
        ran && (data.method ?? 'tools/call') === 'tools/call' ? server.pricePerCallMicros : 0,
        started,
        error.code ?? 'server_error',
        { ...sizes, bytes_out: progressBytes },
      );
      // Told even when cancelled: a client that cancelled by notification still holds the call's request open.
      await publisher.error(error.toWire()).catch(() => undefined);
      return {};
    };
    const remaining = data.deadline - started;
    if (remaining <= 0)
      return fail(
        'failed',
        new GatewayError(504, 'The tool call waited in the queue past its deadline.', { code: 'timeout' }),
        false,
      );
    // What the key may do now: a key revoked (or an account disabled) while its call waited does not call the tool.
    const now = await access.of(data.keyId);
    if ('refused' in now)
      return fail(
        'failed',
        new GatewayError(401, accessRefusalMessage(now.refused), { code: 'invalid_api_key' }),
        false,
      );
    // And the tool (or the server, for a read): a rule changed while the call waited holds for it.
    const price = method === 'tools/call' ? server.pricePerCallMicros : 0;
    const refusal = callRefusal(now.access, method, data.server, data.tool);
    if (refusal !== undefined)
      return fail('failed', new GatewayError(403, refusal, { code: 'tool_not_allowed' }), false);
    const controller = cancels.start(job.id!);
    /** The server was asked: a cancel after that is billed (the tool may have run), one before is not. */
    let asked = false;
    const timeout = Math.min(server.timeoutMs, remaining);
    const timer = setTimeout(
      () =>
        controller.abort(new GatewayError(504, `The tool did not answer within ${timeout} ms.`, { code: 'timeout' })),
      timeout,
    );
    try {
      const client = await upstream.get(controller.signal);
      const onprogress = streamed
        ? (progress: Record<string, unknown>) => {
            const frame = sseJson(
              {
                jsonrpc: '2.0',
                method: 'notifications/progress',
                params: { ...progress, progressToken: data.progressToken },
              },
              'message',
            );
            progressBytes += Buffer.byteLength(frame);
            publisher.chunk(frame, 1);
          }
        : undefined;
      const options = { signal: controller.signal, timeout, ...(onprogress ? { onprogress } : {}) };
      asked = true;
      const result =
        method === 'tools/call'
          ? await client.callTool({ name: data.tool, arguments: data.arguments }, options)
          : method === 'resources/read'
            ? await client.readResource({ uri: data.tool }, { ...options, cacheMode: 'bypass' })
            : await client.getPrompt({ name: data.tool, arguments: data.arguments as Record<string, string> }, options);
      // The tool ran (an error it reports, `isError`, is its answer too): billed at the server's price.
      return await answer('completed', price, { result });
    } catch (caught) {
      const reason = controller.signal.aborted ? controller.signal.reason : caught;
      if (reason instanceof ClientGoneError)
        return fail(
          'cancelled',
          new GatewayError(499, 'The client cancelled the tool call.', { code: 'cancelled' }),
          asked,
        );
      if (reason instanceof GatewayError) return fail('failed', reason, true);
      // The server answered with a JSON-RPC error (an unknown tool, a resource it has not): its answer, relayed as it
      // gave it, on a connection that stays good. Nothing ran: nothing is billed.
      if (ProtocolError.isInstance(reason)) {
        const error = {
          code: reason.code,
          message: reason.message,
          ...(reason.data !== undefined ? { data: reason.data } : {}),
        };
        return await answer('failed', 0, { error }, 'upstream_error');
      }
      // The connection is suspect: the next call makes it again.
      upstream.drop();
      const message = reason instanceof Error ? reason.message.replace(/\s+/g, ' ').slice(0, 300) : String(reason);
      return fail(
        'failed',
        new GatewayError(502, `The MCP server ${server.name} failed the call: ${message}`, { code: 'upstream_error' }),
        false,
      );
    } finally {
      clearTimeout(timer);
      cancels.finish(job.id!);
    }
  }

  /** Whether a call may run again after its worker was lost. */
  private async safeToRepeat(data: McpCallJobData): Promise<boolean> {
    if ((data.method ?? 'tools/call') !== 'tools/call') return true;
    const text = await this.deps.redis.hget(mcpHealthKey, data.server);
    if (text === null) return false;
    const tool = (JSON.parse(text) as McpServerHealth).tools.find((candidate) => candidate.name === data.tool);
    return tool?.annotations?.idempotentHint === true;
  }

  /** Settles a call once (the settled mark stops a second), with its usage and the request log's worker half. */
  private async settle(
    data: McpCallJobData,
    status: SettledStatus,
    costMicros: number,
    started: number,
    errorCode?: string,
    sizes?: Pick<UsageEntry, 'bytes_in' | 'bytes_out' | 'arguments'>,
  ): Promise<void> {
    const usage: UsageEntry = {
      request_id: data.requestId,
      account_id: data.accountId,
      key_id: data.keyId,
      model: `${data.server}/${data.tool}`,
      vendor: 'mcp',
      channel: data.server,
      endpoint: data.endpoint,
      cost_micros: costMicros,
      created: Math.floor(data.queuedAt / 1000),
      duration_ms: Date.now() - started,
      queue_ms: started - data.queuedAt,
      attempts: 1,
      ...noAmounts,
      status,
      service_tier: 'default',
      ...(errorCode ? { error_code: errorCode } : {}),
      ...sizes,
    };
    await settle(this.deps.redis, usage, this.deps.policy);
  }

  /**
   * A call whose worker died (its job stalled, so failed). A call safe to repeat is run once more: a read
   * (`resources/read`, `prompts/get`), or a tool its server marks `idempotentHint` (as the last check listed it).
   * Any other is not run again: settled unbilled, its client told.
   */
  private async lost(job: Job<McpCallJobData> | undefined, error: Error): Promise<void> {
    if (!job || !/stalled/i.test(error.message)) return;
    const data = job.data;
    try {
      if (!data.retried && (await this.safeToRepeat(data))) {
        await job.updateData({ ...data, retried: true });
        await job.retry('failed');
        this.deps.log.info(
          { reqId: data.requestId, server: data.server, tool: data.tool },
          'a lost MCP call safe to repeat runs again',
        );
        return;
      }
    } catch (caught) {
      this.deps.log.warn({ err: caught, reqId: data.requestId }, 'could not run a lost MCP call again');
    }
    try {
      await this.settle(data, 'failed', 0, Date.now(), 'worker_lost');
      const lost = new GatewayError(
        502,
        data.retried
          ? 'The tool call could not be completed: its worker was lost twice.'
          : 'The tool call could not be completed: its worker was lost. It was not run again (the tool is not ' +
              'marked idempotent).',
        { code: 'worker_lost' },
      );
      await new ReplyPublisher(this.deps.redis, data.replyTo, job.id!, { stream: false }).error(lost.toWire());
    } catch (caught) {
      this.deps.log.warn({ err: caught, reqId: data.requestId }, 'could not answer a lost tool call');
    }
  }
}
