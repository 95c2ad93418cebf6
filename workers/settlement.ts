import { setTimeout as sleep } from 'node:timers/promises';
import type { CacheableAnswer } from '../shared/cache/index.js';
import type { Redis } from 'ioredis';
import { defaultAccountId } from '../shared/accounts.js';
import { settle, type SettlePolicy } from '../shared/money/billing.js';
import type { RunDetail, SettledStatus, UsageEntry } from '../shared/money/usage.js';
import type { EndpointRequest } from '../shared/endpoints.js';
import type { Logger } from '../shared/logger.js';
import type { GatewayJobData } from '../shared/jobs.js';
import type { Config } from '../shared/config.js';
import { actualCost } from '../shared/money/charge.js';
import type { Metered, PriceList } from '../shared/money/pricing.js';
import type { ChannelConfig } from '../shared/vendors.js';
import type { ServiceTier } from '../shared/scheduling/vocabulary.js';
import { countChatPromptTokensAsync, countTextTokensAsync } from '../shared/tokens.js';
import type { Usage } from './answers/events.js';
import { settlementOverran, usageSettled } from './metrics.js';
import type { OverrunReport } from './overrun-report.js';

/** What a settlement billed a job for (the response cache's entry and the call's span tell it). */
export interface BilledUsage {
  costMicros: number;
  input: number;
  cached: number;
  cacheWrite?: number;
  output: number;
  /**
   * What the vendor's prompt cache saved (micro-dollars; negative when only writes were billed above the input price).
   */
  promptCacheSavedMicros?: number;
}

/**
 * What one job produced, filled in as it runs: the vendor's usage when it
 * reports one, else the streamed output (counted at settlement), and the
 * media made. A job cut short (the client left, the vendor failed mid-stream)
 * is billed for what the meter holds.
 */
export class Meter {
  usage: Usage | undefined;
  /** Streamed text and tool-call arguments, counted only when no usage came. */
  readonly output: string[] = [];
  images = 0;
  audioSeconds = 0;
  videoSeconds = 0;
  /** Characters of text spoken (speech billed by the character): set once the vendor began to speak them. */
  characters = 0;
  readonly started = Date.now();
  /** For the request log: the answer's own id and its first choice's finish reason, once seen. */
  answerId: string | undefined;
  finishReason: string | undefined;
  /**
   * The tier that served the answer (`shared/scheduling/served-tier.ts`): set once the job has a channel, and again
   * when a vendor that sells tiers says which it served. What it is billed at and recorded as; unset (it
   * reached no vendor, and used nothing), the band it was queued in.
   */
  servedTier: ServiceTier | undefined;
  /** The answer in both client forms, for the response cache: set by a pipeline when the job's answer may be kept. */
  cacheable: CacheableAnswer | undefined;
  /** What the settlement billed (for the cache entry: what a hit saves). */
  billed: BilledUsage | undefined;
  /** Told once, at the answer's first output (text, reasoning or a tool call): the vendor has read the whole prompt. */
  onFirstOutput: (() => void) | undefined;
  private outputSeen = false;
  /** The answer's first output came. */
  outputStarted(): void {
    if (this.outputSeen) return;
    this.outputSeen = true;
    this.onFirstOutput?.();
  }
  /**
   * Tool calls the gateway's tool loop made for the answer: a job that made one is not run again (tools are not
   * idempotent).
   */
  toolsCalled = 0;
  private settledOnce = false;
  private readonly untilSettled: Array<() => unknown> = [];
  /**
   * Runs `release` once the job's settlement has billed it (at once when it has): what is held for the answer beside
   * its reservation (the tool loop's turns) is given back only when the bill has replaced it.
   */
  afterSettlement(release: () => unknown): void {
    if (this.settledOnce) void release();
    else this.untilSettled.push(release);
  }
  /** The settlement is done (billed, or found done before): what waited for it is released. */
  settled(): void {
    this.settledOnce = true;
    for (const release of this.untilSettled.splice(0)) void release();
  }
}

/** A count from the usage's `prompt_tokens_details` (0 when the vendor reports none). */
function promptDetail(usage: Usage, name: 'cached_tokens' | 'cache_write_tokens'): number {
  const details = usage.prompt_tokens_details as Record<string, unknown> | undefined;
  const value = details?.[name];
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : 0;
}

/** The prompt of a text request, counted by the gateway when the vendor reported no usage. */
async function countPrompt(request: EndpointRequest): Promise<number> {
  switch (request.endpoint) {
    case 'chat.completions':
      return countChatPromptTokensAsync(
        request.payload.messages,
        request.payload.tools ?? request.payload.functions ?? null,
      );
    case 'responses':
    case 'messages':
    case 'gemini.generate':
      return countChatPromptTokensAsync(request.payload.chat.messages, request.payload.chat.tools ?? null);
    case 'completions':
    case 'embeddings':
    case 'gemini.embed':
    case 'gemini.batch_embed': {
      const input =
        request.endpoint === 'completions'
          ? request.payload.prompt
          : request.endpoint === 'embeddings'
            ? request.payload.input
            : request.payload.embedding.input;
      if (typeof input === 'string') return countTextTokensAsync(input);
      let total = 0;
      for (const item of input as Array<string | number | number[]>)
        total += typeof item === 'string' ? await countTextTokensAsync(item) : Array.isArray(item) ? item.length : 1;
      return total;
    }
    default:
      return 0;
  }
}

/** What a request used, as its price list bills it. */
export async function meter(request: EndpointRequest | undefined, produced: Meter): Promise<Metered> {
  const metered: Metered = {
    inputTokens: 0,
    cachedTokens: 0,
    outputTokens: 0,
    images: produced.images,
    audioSeconds: produced.audioSeconds,
    videoSeconds: produced.videoSeconds,
  };
  // A job that failed before its payload was read reached no vendor.
  if (request === undefined) return metered;
  if (request.endpoint === 'images.generations' || request.endpoint === 'images.edits') {
    if (request.payload.size) metered.imageSize = request.payload.size;
    if (request.payload.quality) metered.imageQuality = request.payload.quality;
  }
  // A variation is billed as a generation of its size (dall-e-2 prices images by size alone).
  if (request.endpoint === 'images.variations' && request.payload.size) metered.imageSize = request.payload.size;
  if (request.endpoint === 'videos') metered.videoSize = request.payload.size;
  if (request.endpoint === 'audio.speech') {
    // Speech is billed by its characters (tts-1), or by its text and audio tokens: every output token is audio.
    metered.characters = produced.characters;
    if (produced.usage) {
      metered.inputTokens = produced.usage.prompt_tokens;
      metered.outputTokens = produced.usage.completion_tokens;
      metered.audioOutputTokens = produced.usage.completion_tokens;
    }
    return metered;
  }
  if (produced.usage) {
    metered.inputTokens = produced.usage.prompt_tokens;
    metered.cachedTokens = promptDetail(produced.usage, 'cached_tokens');
    metered.cacheWriteTokens = promptDetail(produced.usage, 'cache_write_tokens');
    metered.outputTokens = produced.usage.completion_tokens;
  } else if (produced.output.length > 0) {
    // No usage from the vendor (a stream cut short, a vendor that reports none): the gateway counts
    // what went in and what came out. Nothing produced and nothing reported is billed nothing.
    metered.inputTokens = await countPrompt(request);
    metered.outputTokens = produced.output.length === 0 ? 0 : await countTextTokensAsync(produced.output.join(''));
  }
  return metered;
}

/**
 * What the vendor's prompt cache saved a request: its price had every cached and cache-write token been billed as
 * plain input, less what it was billed (`costMicros`), by the same rule (`actualCost`: same model, channel and tier,
 * so a request served free saved nothing, both being 0). Signed: a request that only wrote the cache, at a price above
 * the input's (Anthropic's 1.25×), paid more than it would have without it. Each price is rounded up as billed
 * (`costMicros`), so the saving is the difference of two charges, not the charge of a difference.
 */
function promptCacheSaved(
  deps: Pick<SettlementDeps, 'config' | 'prices'>,
  model: string,
  channel: Pick<ChannelConfig, 'vendor' | 'protocol'> | undefined,
  metered: Metered,
  tier: ServiceTier,
  costMicros: number,
): number {
  // Nothing read from the cache or written to it: nothing to compare (and no second pricing of every request).
  if (metered.cachedTokens <= 0 && (metered.cacheWriteTokens ?? 0) <= 0) return 0;
  return (
    actualCost(deps.config, deps.prices, model, channel, { ...metered, cachedTokens: 0, cacheWriteTokens: 0 }, tier) -
    costMicros
  );
}

export interface SettlementDeps {
  /** MOCK_BILLING: whether mock answers are charged. */
  config: { mock: Pick<Config['mock'], 'billed'> };
  redis: Redis;
  prices: PriceList;
  policy: SettlePolicy;
  log: Logger;
  /** Answers that cost more than their reservation, told in the log (one per process's settlements). */
  overruns: OverrunReport;
}

const settleAttempts = 8;
/** A reservation is released a minute past its deadline; the settled mark outlives that comfortably. */
const settledMarkMarginMs = 15 * 60_000;

/**
 * Bills a finished job exactly once: its actual cost replaces its
 * reservation. Redis being away does not lose it: the call is retried (about
 * 25 s in all) before the job may be marked done; a second settlement of the
 * same request id (a retried job, a replaced worker) changes nothing. The id is
 * the request's (`data.requestId`, its reservation's and its request-log row's),
 * never the job's own (a response's, a video's), so both halves of the row meet.
 */
export async function settleJob(
  deps: SettlementDeps,
  data: GatewayJobData,
  request: EndpointRequest | undefined,
  vendor: string,
  produced: Meter,
  status: SettledStatus,
  detail?: RunDetail,
  /** The channel that answered (none: the job never reached one); a free one's row is kept, at no cost. */
  channel?: Pick<ChannelConfig, 'vendor' | 'protocol'>,
): Promise<void> {
  const metered = await meter(request, produced);
  const tier = produced.servedTier ?? data.serviceTier ?? 'default';
  // At the prices of the tier that served it, not the one asked for (its reservation covers every tier it may be billed
  // at).
  const costMicros = actualCost(deps.config, deps.prices, data.model, channel, metered, tier);
  const entry: UsageEntry = {
    request_id: data.requestId,
    key_id: data.keyId,
    account_id: data.accountId ?? defaultAccountId,
    model: data.model,
    vendor,
    input_tokens: metered.inputTokens,
    cached_tokens: metered.cachedTokens,
    cache_write_tokens: metered.cacheWriteTokens ?? 0,
    output_tokens: metered.outputTokens,
    images: metered.images,
    audio_seconds: metered.audioSeconds,
    video_seconds: metered.videoSeconds,
    cost_micros: costMicros,
    prompt_cache_saved_micros: promptCacheSaved(deps, data.model, channel, metered, tier, costMicros),
    service_tier: tier,
    status,
    // A request that opted into the cache and went to the vendor (hits and shared calls are billed by the api).
    ...(data.cache ? { cache: 'miss' as const } : {}),
    created: Math.floor(produced.started / 1000),
    duration_ms: Date.now() - produced.started,
    // The run's detail with what the meter saw of the answer.
    ...(detail ? { ...detail, answer_id: produced.answerId, finish_reason: produced.finishReason } : {}),
  };
  produced.billed = {
    costMicros: entry.cost_micros,
    input: entry.input_tokens,
    cached: entry.cached_tokens,
    cacheWrite: entry.cache_write_tokens,
    output: entry.output_tokens,
    promptCacheSavedMicros: entry.prompt_cache_saved_micros ?? 0,
  };
  for (let attempt = 1; ; attempt++) {
    try {
      // Marked settled until well past the job's deadline, when no attempt of it can run any more.
      // Counted only when this settlement applied: a second one of the same request id changes nothing.
      const settled = await settle(
        deps.redis,
        entry,
        deps.policy,
        Date.now(),
        data.deadline - Date.now() + settledMarkMarginMs,
      );
      if (!settled.applied) return;
      usageSettled(entry);
      // Admission checked the reservation against the key's limit and the balance; what goes past it was never checked.
      if (settled.reservedMicros !== null && entry.cost_micros > settled.reservedMicros) {
        const overMicros = entry.cost_micros - settled.reservedMicros;
        settlementOverran(entry.model, vendor, overMicros);
        deps.overruns.add({
          requestId: entry.request_id,
          keyId: entry.key_id,
          accountId: entry.account_id,
          model: entry.model,
          vendor,
          reservedMicros: settled.reservedMicros,
          costMicros: entry.cost_micros,
          overMicros,
        });
      }
      return;
    } catch (error) {
      if (attempt >= settleAttempts) throw error;
      deps.log.warn({ err: error, attempt }, 'settlement failed; retrying');
      await sleep(Math.min(200 * 2 ** attempt, 8_000));
    }
  }
}
