import { setTimeout as sleep } from 'node:timers/promises';
import { budgetRefusal, budgetsArgument, type BudgetInForce } from '../../shared/money/budgets.js';
import type { Redis } from 'ioredis';
import type { CatalogModel } from '../../shared/catalog.js';
import type { Config } from '../../shared/config.js';
import type { Logger } from '../../shared/logger.js';
import { moneyRefusal, releaseReservation } from '../../shared/money/billing.js';
import type { PriceList } from '../../shared/money/pricing.js';
import {
  appendRealtimeSessionRow,
  readmitRealtimeReservation,
  readRealtimeUsage,
  realtimeChannelReservationMicros,
  realtimeCharged,
  realtimePromptCacheSavedMicros,
  realtimeResponseCostMicros,
  realtimeTotals,
  realtimeUnfinishedResponse,
  settleRealtimeResponse,
  touchRealtimeReservation,
  type RealtimeTokens,
} from '../../shared/money/realtime.js';
import type { SettledStatus, UsageEntry } from '../../shared/money/usage.js';
import type { RealtimeJobData } from '../../shared/realtime.js';
import { isMockChannel, type ChannelConfig } from '../../shared/vendors.js';
import { usageSettled } from '../metrics.js';

/**
 * A session's bill (shared/money/realtime.ts): each `response.done` settled as it arrives, once per response id
 * (here, and in Redis by the response's own settled mark, so the same event twice or a run again changes nothing),
 * each on a usage row of its own (`<request id>:<response id>`, endpoint `realtime.response`) that the record's
 * writer moves to PostgreSQL as every settlement; the session's reservation renewed for the next response in the
 * same step, and its deadline kept fresh while the session lives (a dead worker's is given back by the reservation
 * sweep about two minutes after). At the end: the reservation given back and the session's own row written (its
 * sums, duration, responses and why it closed; a rollup the writer adds to no total).
 */

/** How far ahead a live session's reservation deadline is kept (touched every `reservationTouchMs`). */
export const reservationHoldMs = 60_000;
export const reservationTouchMs = 10_000;
const settleAttempts = 6;

export interface SessionBillingDeps {
  config: Pick<Config, 'mock' | 'usageBufferRecords' | 'realtimeWorker' | 'alerts'>;
  redis: Redis;
  prices: PriceList;
  log: Logger;
}

export interface SessionSums {
  responses: number;
  input: number;
  cached: number;
  output: number;
  costMicros: number;
  /** What the vendor's prompt cache saved the responses (`UsageEntry.prompt_cache_saved_micros`). */
  promptCacheSavedMicros: number;
}

/** What one settlement said of the session's next response. */
export type NextResponse = 'covered' | 'not_covered';

/**
 * The limits a reservation of the next response is held to: the key's and its budgets' as they are now
 * (`CurrentAccess`, read just before), never the ones captured at the upgrade.
 */
export interface LimitsNow {
  keyLimitMicros: number | undefined;
  budgets: readonly BudgetInForce[];
  /** The account's name, for a refusal by a member's cap in it. */
  accountName?: string | undefined;
}

export class SessionBilling {
  readonly sums: SessionSums = {
    responses: 0,
    input: 0,
    cached: 0,
    output: 0,
    costMicros: 0,
    promptCacheSavedMicros: 0,
  };
  private readonly settled = new Set<string>();
  private readonly charged: boolean;
  private readonly nextMicros: number;
  private readonly started = new Map<string, number>();
  private touch: NodeJS.Timeout | undefined;
  private unnamed = 0;
  /**
   * Why the next response was not covered, when a budget refused it (the client's error says which, and when it
   * resets).
   */
  refusal: string | undefined;

  constructor(
    private readonly deps: SessionBillingDeps,
    private readonly data: RealtimeJobData,
    private readonly model: CatalogModel,
    private readonly channel: Pick<ChannelConfig, 'vendor' | 'protocol' | 'id'>,
  ) {
    this.charged = realtimeCharged(deps.config, deps.prices, model.id, isMockChannel(channel));
    this.nextMicros = realtimeChannelReservationMicros(deps.config, deps.prices, model, channel);
    // The api reserved the first response under the limits of the upgrade.
    this.heldUnder = limitsKey({ keyLimitMicros: data.keyLimitMicros, budgets: data.budgets ?? [] }, Date.now());
  }

  /** The limits the reservation held now was admitted under (`limitsKey`); undefined when none is held. */
  private heldUnder: string | undefined;

  /**
   * Whether the held reservation must be admitted again under `limits`: they differ from those it was admitted under
   * (a limit or budget changed, or a budget's period began since). Unchanged limits admitted it already.
   */
  needsReadmit(limits: LimitsNow, now = Date.now()): boolean {
    return this.reserving && this.heldUnder !== limitsKey(limits, now);
  }

  /** Whether the session's responses are reserved for (a charged model): else no limit can refuse one. */
  get reserving(): boolean {
    return this.nextMicros > 0;
  }

  /** Keeps the reservation held while the session lives. */
  hold(): void {
    const touch = () =>
      touchRealtimeReservation(
        this.deps.redis,
        this.data.accountId,
        this.data.requestId,
        Date.now() + reservationHoldMs,
      ).catch((error: unknown) => this.deps.log.debug({ err: error }, 'could not touch the realtime reservation'));
    void touch();
    this.touch = setInterval(() => void touch(), reservationTouchMs);
    this.touch.unref();
  }

  /** A response began (its `response.created`): its row's duration counts from here. */
  responseCreated(event: Record<string, unknown>): void {
    const id = responseIdOf(event);
    if (id !== undefined && !this.started.has(id)) this.started.set(id, Date.now());
  }

  /**
   * Settles one `response.done` (once per response id) and, given `next` (the limits in force now), renews the
   * reservation for the next response. Resolves to whether they cover the next response (`covered` when none was
   * asked: the session is ending); `undefined` when this event changed nothing (seen before).
   */
  async settle(event: Record<string, unknown>, next: LimitsNow | undefined): Promise<NextResponse | undefined> {
    const response = (event.response ?? {}) as Record<string, unknown>;
    const id = responseIdOf(event) ?? `r${++this.unnamed}`;
    if (this.settled.has(id)) return undefined;
    const tokens = readRealtimeUsage(response.usage);
    const cost = this.charged ? realtimeResponseCostMicros(this.deps.prices, this.model.id, tokens) : 0;
    const status = typeof response.status === 'string' ? response.status : 'completed';
    return this.record(id, tokens, cost, status, next);
  }

  /**
   * Settles a response that was cut off and whose `response.done` never came (the vendor did not answer the cancel
   * in time, or its socket went): the output counted as it passed and the worst case of its input
   * (`realtimeUnfinishedResponse`), never more than its reservation held. No renewal: the session is ending.
   */
  async settleUnfinished(vendorId: string, output: { text: number; audio: number }): Promise<void> {
    const id = /^[\w.-]{1,100}$/.test(vendorId) ? vendorId : `r${++this.unnamed}`;
    if (this.settled.has(id)) return;
    const unfinished = realtimeUnfinishedResponse(this.deps.prices, this.model, output);
    // Cut off (its row `cancelled`), and what it is billed at is not the vendor's count (`finish_reason: incomplete`).
    await this.record(
      id,
      unfinished.tokens,
      this.charged ? unfinished.costMicros : 0,
      'cancelled',
      undefined,
      'incomplete',
    );
  }

  /** Whether a response's settlement was made (or tried) here. */
  isSettled(id: string): boolean {
    return this.settled.has(id);
  }

  /**
   * The session's held reservation admitted again under the limits in force now (a key's limit, a budget lowered;
   * budgets of a new period): `not_covered` ends the session (`refusal` says why), the reservation left as it was.
   */
  async readmit(limits: LimitsNow): Promise<NextResponse> {
    for (let attempt = 1; ; attempt++) {
      try {
        const now = Date.now();
        const result = await readmitRealtimeReservation(
          this.deps.redis,
          this.data.accountId,
          this.data.keyId,
          this.data.requestId,
          this.nextMicros,
          now + reservationHoldMs,
          limits.keyLimitMicros,
          limits.budgets,
          now,
        );
        if (result.verdict !== 'refused') {
          this.heldUnder = limitsKey(limits, now);
          return 'covered';
        }
        this.refusal = result.refusedBy
          ? budgetRefusal(result.refusedBy, now, limits.accountName ?? this.data.accountName)
          : result.reason === 'key_limit' || result.reason === 'no_access'
            ? moneyRefusal(result.reason)
            : undefined;
        return 'not_covered';
      } catch (error) {
        if (attempt >= settleAttempts) {
          this.deps.log.error({ err: error }, 'could not admit the realtime reservation again');
          return 'not_covered';
        }
        this.deps.log.warn({ err: error, attempt }, 'realtime readmission failed; retrying');
        await sleep(Math.min(200 * 2 ** attempt, 4_000));
      }
    }
  }

  private async record(
    id: string,
    tokens: RealtimeTokens,
    cost: number,
    status: string,
    next: LimitsNow | undefined,
    finishReason = status,
  ): Promise<NextResponse> {
    this.settled.add(id);
    const totals = realtimeTotals(tokens);
    // A response served free was billed nothing, so its cache saved it nothing either (as `settleJob` counts it).
    const promptCacheSaved = this.charged
      ? realtimePromptCacheSavedMicros(this.deps.prices, this.model.id, tokens, cost)
      : 0;
    const startedAt = this.started.get(id) ?? Date.now();
    this.started.delete(id);
    const entry: UsageEntry = {
      request_id: `${this.data.requestId}:${id}`,
      key_id: this.data.keyId,
      account_id: this.data.accountId,
      model: this.data.model,
      vendor: this.channel.vendor,
      input_tokens: totals.input,
      cached_tokens: totals.cached,
      // A Realtime vendor reports no cache writes: its prompt cache is written at the input price.
      cache_write_tokens: 0,
      output_tokens: totals.output,
      images: 0,
      audio_seconds: 0,
      video_seconds: 0,
      cost_micros: cost,
      prompt_cache_saved_micros: promptCacheSaved,
      service_tier: 'default',
      status: settledStatus(status),
      created: Math.floor(startedAt / 1000),
      duration_ms: Date.now() - startedAt,
      endpoint: 'realtime.response',
      answer_id: id,
      channel: this.channel.id,
      finish_reason: finishReason,
    };
    for (let attempt = 1; ; attempt++) {
      try {
        const now = Date.now();
        const result = await settleRealtimeResponse(
          this.deps.redis,
          this.data.requestId,
          entry,
          next ? this.nextMicros : 0,
          now + reservationHoldMs,
          next?.keyLimitMicros,
          {
            bufferRecords: this.deps.config.usageBufferRecords,
            keepSettledMs: this.deps.config.realtimeWorker.maxSessionMs + 15 * 60_000,
            alertThresholds: this.deps.config.alerts.thresholds,
          },
          next?.budgets ?? [],
          now,
        );
        if (result.refusedBy)
          this.refusal = budgetRefusal(result.refusedBy, now, next?.accountName ?? this.data.accountName);
        this.heldUnder = next && result.next === 'held' ? limitsKey(next, now) : undefined;
        if (result.applied) {
          this.sums.responses += 1;
          this.sums.input += totals.input;
          this.sums.cached += totals.cached;
          this.sums.output += totals.output;
          this.sums.costMicros += cost;
          this.sums.promptCacheSavedMicros += promptCacheSaved;
          usageSettled(entry);
        }
        return result.next === 'refused' ? 'not_covered' : 'covered';
      } catch (error) {
        if (attempt >= settleAttempts) {
          this.deps.log.error({ err: error, response: id }, 'could not settle a realtime response');
          // Unsettled money is not spent on: the session ends as if the next response were not covered.
          return 'not_covered';
        }
        this.deps.log.warn({ err: error, attempt }, 'realtime settlement failed; retrying');
        await sleep(Math.min(200 * 2 ** attempt, 4_000));
      }
    }
  }

  /** The session is over: its reservation given back, its row written. */
  async end(summary: {
    opened: number;
    queueMs: number;
    reason: string;
    status: SettledStatus;
    errorCode?: string | undefined;
  }): Promise<void> {
    clearInterval(this.touch);
    const { redis, log, config } = this.deps;
    await releaseReservation(redis, this.data.accountId, this.data.requestId).catch((error: unknown) =>
      log.warn({ err: error }, 'could not release the realtime reservation (the sweep will)'),
    );
    const row = {
      request_id: this.data.requestId,
      key_id: this.data.keyId,
      account_id: this.data.accountId,
      model: this.data.model,
      vendor: this.channel.vendor,
      input_tokens: this.sums.input,
      cached_tokens: this.sums.cached,
      cache_write_tokens: 0,
      output_tokens: this.sums.output,
      images: 0,
      audio_seconds: 0,
      video_seconds: 0,
      cost_micros: this.sums.costMicros,
      prompt_cache_saved_micros: this.sums.promptCacheSavedMicros,
      service_tier: 'default' as const,
      status: summary.status,
      created: Math.floor(summary.opened / 1000),
      duration_ms: Date.now() - summary.opened,
      endpoint: 'realtime',
      answer_id: this.data.jobId,
      channel: this.channel.id,
      attempts: 1,
      queue_ms: Math.max(0, summary.queueMs),
      finish_reason: summary.reason,
      ...(summary.errorCode !== undefined ? { error_code: summary.errorCode } : {}),
      rollup: true as const,
      responses: this.sums.responses,
    };
    await appendRealtimeSessionRow(redis, row, config.usageBufferRecords).catch((error: unknown) =>
      log.warn({ err: error }, 'could not write the realtime session row'),
    );
  }
}

function responseIdOf(event: Record<string, unknown>): string | undefined {
  const response = event.response as Record<string, unknown> | undefined;
  const id = response?.id;
  // The id names the settlement's mark and row: kept short and plain, whatever a vendor writes.
  return typeof id === 'string' && /^[\w.-]{1,100}$/.test(id) ? id : undefined;
}

function settledStatus(status: string): SettledStatus {
  if (status === 'cancelled') return 'cancelled';
  if (status === 'failed') return 'failed';
  return 'completed';
}

/** The limits a reservation is admitted under, as one text (the key's limit, each budget's counter and amount). */
function limitsKey(limits: Pick<LimitsNow, 'keyLimitMicros' | 'budgets'>, now: number): string {
  return `${limits.keyLimitMicros ?? ''}|${budgetsArgument(limits.budgets, now)}`;
}
