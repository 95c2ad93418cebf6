/**
 * A Realtime session between the api that holds the client's WebSocket and the worker that holds the vendor's.
 *
 * The session is a job on the `realtime` queue (its job id is the session's id, `sess_…`), placed fairly like any
 * request. The api answers the client's upgrade only once a worker has taken the job and opened the vendor's socket
 * (`started` on the down channel), or with an HTTP status when it cannot be (`refused`, or no start within the wait).
 * From then on events cross Redis on two channels of the session's own, one each way, each message one line of kind
 * (an `event` also its sender's clock when the frame reached it, epoch ms with a fraction, so the other side measures
 * the latency the relay added) then its payload untouched:
 *
 *   up (api → worker):   `event <ms>\n<client event JSON>`, `close\n<RealtimeClose JSON>`, `beat\n`
 *   down (worker → api): `started\n<RealtimeStarted JSON>`, `refused\n<WireError JSON>`, `event <ms>\n<server event
 *   JSON>`,
 *                        `close\n<RealtimeClose JSON>`, `beat\n`
 *
 * Each side beats every `realtimeBeatMs` while the session lives and takes the other for dead after
 * `realtimePeerDeadMs` of silence: the api then sends the client an `error` event and closes with 1011; the worker
 * closes the vendor's socket (what ran is billed: each response settles as its `response.done` arrives). Either side's
 * `close` ends the session on the other at once.
 */

export { realtimeDownChannel, realtimeUpChannel } from './redis-keys.js';
import type { BudgetInForce } from './money/budgets.js';

export type RealtimeUpKind = 'event' | 'close' | 'beat';
export type RealtimeDownKind = 'started' | 'refused' | 'event' | 'close' | 'beat';

export function encodeRealtime(kind: RealtimeUpKind | RealtimeDownKind, payload = '', stampMs?: number): string {
  return stampMs === undefined ? `${kind}\n${payload}` : `${kind} ${stampMs}\n${payload}`;
}

export function decodeRealtime(message: string): { kind: string; stampMs?: number; payload: string } | undefined {
  const newline = message.indexOf('\n');
  if (newline < 0) return undefined;
  const head = message.slice(0, newline);
  const space = head.indexOf(' ');
  const payload = message.slice(newline + 1);
  if (space < 0) return { kind: head, payload };
  const stampMs = Number(head.slice(space + 1));
  return Number.isFinite(stampMs)
    ? { kind: head.slice(0, space), stampMs, payload }
    : { kind: head.slice(0, space), payload };
}

/** The clock an `event` is stamped with: epoch ms with a fraction. */
export function realtimeClockMs(): number {
  return performance.timeOrigin + performance.now();
}

/** How often each side says it is alive. */
export const realtimeBeatMs = 1000;
/** Silence after which a side takes the other for dead. */
export const realtimePeerDeadMs = 5000;

/** What the worker says once the vendor's socket is open. */
export interface RealtimeStarted {
  /** The worker process holding the vendor's socket (for logs). */
  worker: string;
  /** The channel's vendor (metrics by vendor on the api's side). */
  vendor: string;
}

/** Why a session ended, said by the side that ended it; the api closes the client's socket with `code`. */
export interface RealtimeClose {
  code: number;
  reason: string;
  /** When the worker ends it for a reason the client should read (an `error` event is sent before the close). */
  error?: { type: string; code: string; message: string };
}

/**
 * What a session's job carries (added by the api on `realtimeQueueName`'s queue, shared/realtime-queue.ts, through
 * the same fair `enqueue` as every request: `claim` set, the reservation of its first response taken under
 * `requestId`). Shaped as a GatewayJobData (`endpoint: 'realtime'`, `stream: false`) so the shared enqueue, the queue
 * dashboard and the recount read it; the worker reads only the fields below.
 */
export interface RealtimeJobData {
  /**
   * The upgrade request's id: money (the reservation, each response's settlement) and the session's request-log row.
   */
  requestId: string;
  /** The session's id (`sess_…`), also the job's id and the channels' name. */
  jobId: string;
  keyId: string;
  accountId: string;
  endpoint: 'realtime';
  /** The catalog model's id. */
  model: string;
  /** The model as the client named it (an alias): what `session.model` says to it. */
  clientModel?: string;
  stream: false;
  /** Epoch ms past which the api no longer waits for `started`: a worker taking the session later opens nothing. */
  deadline: number;
  /** The api's reply channel (unused by the worker; there for the shape). */
  replyTo: string;
  /** Epoch ms of the upgrade's arrival (the session's row's time). */
  arrived?: number;
  /**
   * The key's spending limit in force at the upgrade (micro-dollars), if it has one. The worker holds each renewal of
   * the reservation to the limit in force at that moment (`CurrentAccess`), this one only when the key cannot be read.
   */
  keyLimitMicros?: number;
  /**
   * The budgets per period in force at the upgrade: as `keyLimitMicros`, the worker holds renewals to the current ones.
   */
  budgets?: readonly BudgetInForce[];
  /** The key's account's name, for a refusal by a member's cap in it. */
  accountName?: string;
}
