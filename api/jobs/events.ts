import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Redis } from 'ioredis';
import { WebSocketServer, type WebSocket } from 'ws';
import { canonicalPath } from '../http/canonical-path.js';
import { writeRawError } from '../http/raw-http-errors.js';
import { GatewayError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { jobEventsChannel } from '../../shared/redis-keys.js';
import type { QueueShards } from '../../shared/queue-shards.js';
import type { BlobStore } from '../../storage/blob-store.js';
import type { KeyCache } from '../accounts/key-store.js';
import { loadOwnedJob, renderJob, renderVideo, type OwnedJob } from './views.js';

import type { ReplyHub } from '../relay/reply-hub.js';

interface Deps {
  redis: Redis;
  queues: QueueShards;
  blobs: BlobStore;
  keys: KeyCache;
  log: Logger;
  videoExpirySeconds: number;
  /** MAX_EVENT_SOCKETS_PER_KEY: sockets one key may hold open here (upgrades under way included). */
  maxSocketsPerKey: number;
}

interface Watcher {
  keyId: string;
  kind: 'jobs' | 'videos';
}

const eventsPath = /^\/v1\/(jobs|videos)\/([A-Za-z0-9_-]{1,100})\/events$/;

/**
 * The largest message a watcher may send. The socket only speaks (the server
 * never reads a message), and control frames (ping, close) are at most 125
 * bytes by the protocol; a larger frame closes the socket with 1009 as soon
 * as its header says its length, before its payload is buffered.
 */
const maxWatcherMessageBytes = 1024;

/**
 * `GET /v1/jobs/{id}/events` and `/v1/videos/{id}/events` over WebSocket: the
 * job's owner gets its current state, then every event (progress, completed,
 * failed) until it ends. Events reach every api process on one shared channel
 * (on the process's single subscriber), so any instance can serve any watcher.
 */
export class JobEvents {
  private readonly watchers = new Map<string, Set<WebSocket>>();
  private readonly watcherOf = new WeakMap<WebSocket, Watcher>();
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: maxWatcherMessageBytes });
  /** Open sockets (and upgrades under way) per key. */
  private readonly socketsOf = new Map<string, number>();

  constructor(
    hub: ReplyHub,
    private readonly deps: Deps,
  ) {
    hub.on(jobEventsChannel, (message) => this.dispatch(message));
  }

  attach(server: Server): void {
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      void this.upgrade(req, socket, head).catch((error: unknown) => {
        // The same answer, and the same bounded linger after it, as every refusal on a bare socket.
        writeRawError(
          socket,
          error instanceof GatewayError ? error : new GatewayError(500, 'Could not open the event stream.'),
        );
      });
    });
  }

  close(): void {
    for (const set of this.watchers.values()) for (const ws of set) ws.close(1001, 'server shutting down');
    this.wss.close();
  }

  private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    // The same path rule as every HTTP route (api/http/canonical-path.ts).
    const path = canonicalPath((req.url ?? '/').split('?', 1)[0]!);
    const match = path === undefined ? null : eventsPath.exec(path);
    if (!match) throw new GatewayError(404, 'Unknown WebSocket URL.', { code: 'unknown_url' });
    const kind = match[1] as 'jobs' | 'videos';
    const id = match[2]!;
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '')?.[1];
    const keyId = bearer ? (await this.deps.keys.resolve(bearer))?.keyId : undefined;
    if (!keyId) throw new GatewayError(401, 'Incorrect or missing API key.', { code: 'invalid_api_key' });
    // The key's slot is taken before anything is awaited, so that upgrades racing each other count each other too.
    const held = this.socketsOf.get(keyId) ?? 0;
    if (held >= this.deps.maxSocketsPerKey) {
      throw new GatewayError(
        429,
        `This API key already holds ${held} job event sockets; close one before opening another.`,
        {
          code: 'too_many_sockets',
          headers: { 'retry-after': '1' },
        },
      );
    }
    this.socketsOf.set(keyId, held + 1);
    let ws: WebSocket;
    try {
      await loadOwnedJob(this.deps.redis, this.deps.queues, id, keyId, kind === 'videos' ? 'video' : 'job');
      ws = await new Promise<WebSocket>((resolve, reject) => {
        socket.once('close', () => reject(new Error('the client left during the upgrade')));
        this.wss.handleUpgrade(req, socket, head, resolve);
      });
    } catch (error) {
      this.release(keyId);
      throw error;
    }
    ws.on('close', () => this.release(keyId));
    // A frame past maxPayload or against the protocol: ws has sent its close frame (1009, 1002…) and reports it
    // here (unheard, that report would end the process). ws would go on reading, and dropping, the rest of the
    // frame while it waits for the client's close frame (up to 30 s); instead the socket stops reading (after
    // ws's own resume, on this same tick), says its goodbye (FIN after the close frame), and is cut a second on.
    ws.on('error', (error) => {
      this.deps.log.debug({ err: error, job: id }, 'job events socket closed on a bad frame');
      process.nextTick(() => socket.pause());
      socket.end();
      setTimeout(() => ws.terminate(), 1000).unref();
    });
    this.watcherOf.set(ws, { keyId, kind });
    const set = this.watchers.get(id) ?? new Set<WebSocket>();
    set.add(ws);
    this.watchers.set(id, set);
    ws.on('close', () => {
      set.delete(ws);
      if (set.size === 0) this.watchers.delete(id);
    });
    // Registered first, then the snapshot: an event in between is not lost (at worst seen twice).
    const owned = await loadOwnedJob(this.deps.redis, this.deps.queues, id, keyId, kind === 'videos' ? 'video' : 'job');
    await this.send(
      ws,
      owned,
      owned.status === 'completed' ? 'completed' : owned.status === 'failed' ? 'failed' : 'status',
      kind,
    );
  }

  private release(keyId: string): void {
    const held = (this.socketsOf.get(keyId) ?? 1) - 1;
    if (held > 0) this.socketsOf.set(keyId, held);
    else this.socketsOf.delete(keyId);
  }

  private async send(ws: WebSocket, owned: OwnedJob, type: string, kind: string): Promise<void> {
    const view =
      kind === 'videos' ? renderVideo(owned, this.deps.videoExpirySeconds) : await renderJob(owned, this.deps.blobs);
    ws.send(JSON.stringify({ type, ...view }));
    if (owned.status === 'completed' || owned.status === 'failed') ws.close(1000, owned.status);
  }

  private dispatch(message: string): void {
    const newline = message.indexOf('\n');
    const id = message.slice(0, newline);
    const set = this.watchers.get(id);
    if (!set || set.size === 0) return;
    const event = JSON.parse(message.slice(newline + 1)) as { type: string; status: string; progress?: number };
    for (const ws of set) {
      const watcher = this.watcherOf.get(ws);
      if (event.type === 'progress' || !watcher) {
        ws.send(JSON.stringify(event));
        continue;
      }
      // The end of the job (announced once BullMQ has recorded it): send the full view (result or error) and close.
      void loadOwnedJob(
        this.deps.redis,
        this.deps.queues,
        id,
        watcher.keyId,
        watcher.kind === 'videos' ? 'video' : 'job',
      )
        .then((owned) => this.send(ws, owned, event.type, watcher.kind))
        .catch((error: unknown) => this.deps.log.warn({ err: error, job: id }, 'could not send job event'));
    }
  }
}
