import type { Redis } from 'ioredis';
import type { CatalogModel } from '../catalog.js';
import type { Config } from '../config.js';
import {
  billKey,
  billingBucket,
  deadlineMember,
  reservationDeadlinesKey,
  settledKey,
  usageStreamKey,
  alertStreamKey,
} from '../redis-keys.js';
import { isMockChannel, mockAnswers, type ChannelConfig, type VendorConfig } from '../vendors.js';
import { usdToMicros, type PriceList, type Pricing } from './pricing.js';
import { realtimeReadmitScript, realtimeSettleScript } from './scripts.js';
import type { UsageEntry } from './usage.js';
import { journalSettlement, readCrossings, type AlertCrossing } from './billing.js';
import { budgetsArgument, type BudgetInForce } from './budgets.js';

/**
 * A Realtime session's money: each response is billed as its `response.done` arrives, from the usage the vendor
 * reports (OpenAI's GA shape: text, audio and cached tokens, each at its price), once per response however often the
 * event comes; the session's reservation, taken by the api for the first response, is renewed for the next in the
 * same Redis step (`lua/realtime-settle.lua`), or, when the account or key cannot cover one more response, not:
 * the session is then closed before another response can start, so the balance never goes below zero.
 *
 * The worst case of one response (`realtimeResponseWorstCaseMicros`): the model's whole context window read at its
 * dearest input price (a response reads at most the conversation, which the window bounds), plus its most output
 * (`max_output_tokens`) at its dearest output price, markup included. The api reserves it at the upgrade
 * (`realtimeReservationMicros`) and the worker again after each response.
 */

/** The context a response is taken to read when the catalog gives none (OpenAI's realtime models' window). */
export const realtimeDefaultContextTokens = 32_000;
/**
 * The output a response is taken to write when the catalog gives none (OpenAI's `max_response_output_tokens` default,
 * `inf`, capped as its models are).
 */
export const realtimeDefaultMaxOutputTokens = 4_096;

/** One response's usage, split as it is priced. */
export interface RealtimeTokens {
  textInput: number;
  cachedTextInput: number;
  audioInput: number;
  cachedAudioInput: number;
  textOutput: number;
  audioOutput: number;
}

/** Totals as the usage row keeps them. */
export function realtimeTotals(tokens: RealtimeTokens): { input: number; cached: number; output: number } {
  const cached = tokens.cachedTextInput + tokens.cachedAudioInput;
  return {
    input: tokens.textInput + tokens.audioInput + cached,
    cached,
    output: tokens.textOutput + tokens.audioOutput,
  };
}

const maxCount = 100_000_000;
const count = (value: unknown): number =>
  typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.min(maxCount, Math.floor(value)) : 0;
const object = (value: unknown): Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {};

/**
 * A `response.done`'s `response.usage` as OpenAI writes it, read defensively (a vendor's or a translator's numbers:
 * anything not a non-negative number counts 0). Image input tokens are priced as text. Where the details are missing
 * the totals are taken as text.
 */
export function readRealtimeUsage(usage: unknown): RealtimeTokens {
  const u = object(usage);
  const input = object(u.input_token_details);
  const cachedDetails = object(input.cached_tokens_details);
  const output = object(u.output_token_details);
  const hasInputDetails = 'text_tokens' in input || 'audio_tokens' in input;
  const cachedAudio = count(cachedDetails.audio_tokens);
  const cachedText =
    'text_tokens' in cachedDetails || 'image_tokens' in cachedDetails
      ? count(cachedDetails.text_tokens) + count(cachedDetails.image_tokens)
      : Math.max(0, count(input.cached_tokens) - cachedAudio);
  const textAll = hasInputDetails ? count(input.text_tokens) + count(input.image_tokens) : count(u.input_tokens);
  const audioAll = count(input.audio_tokens);
  const hasOutputDetails = 'text_tokens' in output || 'audio_tokens' in output;
  return {
    cachedTextInput: Math.min(cachedText, textAll),
    textInput: Math.max(0, textAll - cachedText),
    cachedAudioInput: Math.min(cachedAudio, audioAll),
    audioInput: Math.max(0, audioAll - cachedAudio),
    textOutput: hasOutputDetails ? count(output.text_tokens) : count(u.output_tokens),
    audioOutput: hasOutputDetails ? count(output.audio_tokens) : 0,
  };
}

/** Micros per 1M tokens of each kind, an absent price falling back as the vendor's does. */
type RealtimeRates = RealtimeTokens;
/** Every kind of token a response is priced by. */
const tokenKinds = [
  'textInput',
  'cachedTextInput',
  'audioInput',
  'cachedAudioInput',
  'textOutput',
  'audioOutput',
] as const satisfies ReadonlyArray<keyof RealtimeTokens>;

function realtimeRates(pricing: Pricing & { cached_audio_input_per_1m?: number }): RealtimeRates {
  const text = pricing.input_per_1m ?? 0;
  const audio = pricing.audio_input_per_1m ?? text;
  const output = pricing.output_per_1m ?? 0;
  return {
    textInput: usdToMicros(text),
    cachedTextInput: usdToMicros(pricing.cached_input_per_1m ?? text),
    audioInput: usdToMicros(audio),
    cachedAudioInput: usdToMicros(pricing.cached_audio_input_per_1m ?? pricing.cached_input_per_1m ?? audio),
    textOutput: usdToMicros(output),
    audioOutput: usdToMicros(pricing.audio_output_per_1m ?? output),
  };
}

/** ceil(tokens × micros per 1M ÷ 1M), exact. */
function tokenMicros(tokens: number, rate: number): number {
  if (tokens === 0 || rate === 0) return 0;
  const product = BigInt(tokens) * BigInt(rate);
  return Number((product + 999_999n) / 1_000_000n);
}

function marked(prices: PriceList, micros: number): number {
  const markup = prices.markupPercent;
  return markup === 0 ? micros : Number((BigInt(micros) * BigInt(100 + markup) + 99n) / 100n);
}

/** What one response costs at the model's prices (markup included), in integer micro-dollars. */
export function realtimeResponseCostMicros(prices: PriceList, modelId: string, tokens: RealtimeTokens): number {
  const rates = realtimeRates(prices.pricing(modelId));
  let cost = 0;
  for (const kind of tokenKinds) cost += tokenMicros(tokens[kind], rates[kind]);
  return marked(prices, cost);
}

/**
 * What the vendor's prompt cache saved one response: its price had its cached text and audio tokens been billed as
 * plain text and audio input, less what it was billed (`costMicros`, its `realtimeResponseCostMicros`). A Realtime
 * vendor bills no cache writes, so this is never below 0 at prices where a cached token is the cheaper.
 */
export function realtimePromptCacheSavedMicros(
  prices: PriceList,
  modelId: string,
  tokens: RealtimeTokens,
  costMicros: number,
): number {
  if (tokens.cachedTextInput + tokens.cachedAudioInput === 0) return 0;
  const uncached: RealtimeTokens = {
    ...tokens,
    textInput: tokens.textInput + tokens.cachedTextInput,
    cachedTextInput: 0,
    audioInput: tokens.audioInput + tokens.cachedAudioInput,
    cachedAudioInput: 0,
  };
  return realtimeResponseCostMicros(prices, modelId, uncached) - costMicros;
}

/**
 * The most one response can cost: its context window at the dearest input price, its most output at the dearest output
 * price.
 */
export function realtimeResponseWorstCaseMicros(
  prices: PriceList,
  model: Pick<CatalogModel, 'id' | 'context_window' | 'max_output_tokens'>,
): number {
  const rates = realtimeRates(prices.pricing(model.id));
  const context = model.context_window > 0 ? model.context_window : realtimeDefaultContextTokens;
  const output = model.max_output_tokens > 0 ? model.max_output_tokens : realtimeDefaultMaxOutputTokens;
  return marked(
    prices,
    tokenMicros(context, Math.max(rates.textInput, rates.audioInput)) +
      tokenMicros(output, Math.max(rates.textOutput, rates.audioOutput)),
  );
}

/** Audio the model speaks, as OpenAI counts it: a token each 50 ms (24 kHz pcm16: 2,400 bytes). */
export const realtimeAudioOutputBytesPerToken = 2_400;

/** Output tokens of `bytes` of the model's pcm16 (24 kHz mono) audio, as OpenAI counts them. */
export function realtimeAudioOutputTokens(bytes: number): number {
  return bytes > 0 ? Math.ceil(bytes / realtimeAudioOutputBytesPerToken) : 0;
}

/**
 * What a response cut off without its `response.done` (the vendor never answered the cancel) is billed as: the output
 * counted as it passed (`output`: its text and audio tokens) and the worst case of its input, the model's whole context
 * window at its dearest input price, which is what its reservation assumed; never more than the reservation held
 * (`realtimeResponseWorstCaseMicros`).
 */
export function realtimeUnfinishedResponse(
  prices: PriceList,
  model: Pick<CatalogModel, 'id' | 'context_window' | 'max_output_tokens'>,
  output: { text: number; audio: number },
): { tokens: RealtimeTokens; costMicros: number } {
  const rates = realtimeRates(prices.pricing(model.id));
  const context = model.context_window > 0 ? model.context_window : realtimeDefaultContextTokens;
  const audioDearer = rates.audioInput > rates.textInput;
  const tokens: RealtimeTokens = {
    textInput: audioDearer ? 0 : context,
    cachedTextInput: 0,
    audioInput: audioDearer ? context : 0,
    cachedAudioInput: 0,
    textOutput: Math.min(maxCount, Math.max(0, Math.floor(output.text))),
    audioOutput: Math.min(maxCount, Math.max(0, Math.floor(output.audio))),
  };
  return {
    tokens,
    costMicros: Math.min(
      realtimeResponseCostMicros(prices, model.id, tokens),
      realtimeResponseWorstCaseMicros(prices, model),
    ),
  };
}

/** Whether a session's responses are charged: a priced model, not answered by the mock (unless MOCK_BILLING). */
export function realtimeCharged(
  config: { mock: Pick<Config['mock'], 'billed'> },
  prices: PriceList,
  modelId: string,
  mockAnswered: boolean,
): boolean {
  return prices.has(modelId) && (config.mock.billed || !mockAnswered);
}

/** What the api reserves at the upgrade for a session's first response (0 when its responses are free). */
export function realtimeReservationMicros(config: VendorConfig, prices: PriceList, model: CatalogModel): number {
  return realtimeCharged(config, prices, model.id, mockAnswers(config, model.routes[0]?.vendor))
    ? realtimeResponseWorstCaseMicros(prices, model)
    : 0;
}

/** As `realtimeReservationMicros`, once the session's channel is known (the worker's renewals). */
export function realtimeChannelReservationMicros(
  config: { mock: Pick<Config['mock'], 'billed'> },
  prices: PriceList,
  model: CatalogModel,
  channel: Pick<ChannelConfig, 'vendor' | 'protocol'>,
): number {
  return realtimeCharged(config, prices, model.id, isMockChannel(channel))
    ? realtimeResponseWorstCaseMicros(prices, model)
    : 0;
}

/** What a response's settlement did. */
export interface RealtimeSettlement {
  /** False when the response was settled before (the same `response.done` again). */
  applied: boolean;
  /**
   * Whether the next response is reserved: `held`, `refused` (the account, the key or a budget cannot cover it), or
   * `none` asked.
   */
  next: 'held' | 'refused' | 'none';
  /** The budget that refused the next response, when one did. */
  refusedBy?: BudgetInForce;
  /** The alert thresholds this settlement crossed. */
  alerts: AlertCrossing[];
}

/**
 * Settles one response (its usage entry's `request_id` is the response's own, `<session request id>:<response id>`)
 * and renews the session's reservation (under `sessionRequestId`) for `nextMicros`, in one script.
 */
export async function settleRealtimeResponse(
  redis: Redis,
  sessionRequestId: string,
  entry: UsageEntry,
  nextMicros: number,
  nextDeadline: number,
  keyLimitMicros: number | undefined,
  policy: { bufferRecords: number; keepSettledMs: number; alertThresholds?: readonly number[] },
  /** The budgets in force for the next response (its period's counters, from `now`). */
  budgets: readonly BudgetInForce[] = [],
  now = Date.now(),
): Promise<RealtimeSettlement> {
  const [applied, renewed, refusing, ...crossings] = await realtimeSettleScript(redis, {
    settled: settledKey(entry.account_id, entry.request_id),
    bill: billKey(entry.account_id),
    deadlines: reservationDeadlinesKey(billingBucket(entry.account_id)),
    usageStream: usageStreamKey(billingBucket(entry.account_id)),
    alertStream: alertStreamKey(billingBucket(entry.account_id)),
    accountId: entry.account_id,
    sessionRequestId,
    micros: entry.cost_micros,
    keyId: entry.key_id,
    streamMaxLength: policy.bufferRecords,
    keepSettledS: Math.max(60, Math.ceil(policy.keepSettledMs / 1000)),
    usage: JSON.stringify(entry),
    deadlineMember: deadlineMember(entry.account_id, sessionRequestId),
    nextMicros: Math.max(0, Math.floor(nextMicros)),
    nextDeadlineMs: nextDeadline,
    keyLimitMicros: keyLimitMicros ?? '',
    budgets: budgetsArgument(budgets, now),
    alertThresholds: (policy.alertThresholds ?? []).join(','),
  });
  if (Number(applied) === 1) journalSettlement(redis, entry, policy, policy.keepSettledMs);
  const refusedBy = Number(refusing) > 0 ? budgets[Number(refusing) - 1] : undefined;
  return {
    applied: Number(applied) === 1,
    next: Number(renewed) === 1 ? 'held' : Number(renewed) === 0 ? 'refused' : 'none',
    ...(refusedBy ? { refusedBy } : {}),
    alerts: readCrossings(crossings),
  };
}

/** What admitting a session's reservation again under the limits in force now did. */
export interface RealtimeReadmission {
  /**
   * `held`: reserved again; `refused`: not covered (nothing changed, the session must end); `none`: no reservation
   * held.
   */
  verdict: 'held' | 'refused' | 'none';
  /** Why it was refused. */
  reason?: 'key_limit' | 'account_balance' | 'no_access' | 'budget';
  /** The budget that refused it, when one did. */
  refusedBy?: BudgetInForce;
}

/**
 * Gives back the session's held reservation and reserves `micros` again under the same id, against the key's limit and
 * the budgets in force now (`lua/realtime-readmit.lua`), in one step; when they cannot cover it nothing changes (the
 * reservation still covers a response under way) and the caller ends the session.
 */
export async function readmitRealtimeReservation(
  redis: Redis,
  accountId: string,
  keyId: string,
  sessionRequestId: string,
  micros: number,
  deadline: number,
  keyLimitMicros: number | undefined,
  budgets: readonly BudgetInForce[] = [],
  now = Date.now(),
): Promise<RealtimeReadmission> {
  const [verdict, reason, refusing] = await realtimeReadmitScript(redis, {
    bill: billKey(accountId),
    deadlines: reservationDeadlinesKey(billingBucket(accountId)),
    sessionRequestId,
    keyId,
    micros: Math.max(0, Math.floor(micros)),
    deadlineMs: deadline,
    deadlineMember: deadlineMember(accountId, sessionRequestId),
    keyLimitMicros: keyLimitMicros ?? '',
    budgets: budgetsArgument(budgets, now),
  });
  if (Number(verdict) === 1) return { verdict: 'held' };
  if (Number(verdict) === -1) return { verdict: 'none' };
  const refusedBy = Number(refusing) > 0 ? budgets[Number(refusing) - 1] : undefined;
  const why =
    Number(reason) === 3
      ? 'key_limit'
      : Number(reason) === 4
        ? 'account_balance'
        : Number(reason) === 6
          ? 'budget'
          : 'no_access';
  return { verdict: 'refused', reason: why, ...(refusedBy ? { refusedBy } : {}) };
}

/**
 * Moves the session's reservation's deadline on (the reservation sweep gives back one past its deadline by a minute):
 * a live session's stays held, a dead worker's is given back soon after it stops touching it.
 */
export async function touchRealtimeReservation(
  redis: Redis,
  accountId: string,
  sessionRequestId: string,
  deadline: number,
): Promise<void> {
  await redis.zadd(
    reservationDeadlinesKey(billingBucket(accountId)),
    'XX',
    deadline,
    deadlineMember(accountId, sessionRequestId),
  );
}

/**
 * The session's own row in the request log (`rollup`: its amounts are its responses', each settled and counted on
 * its own row, so the record's writer adds it to no total), appended to the account's usage stream as a settlement's
 * entry.
 */
export async function appendRealtimeSessionRow(
  redis: Redis,
  entry: UsageEntry & { rollup: true; responses: number },
  bufferRecords: number,
): Promise<void> {
  await redis.xadd(
    usageStreamKey(billingBucket(entry.account_id)),
    'MAXLEN',
    '~',
    bufferRecords,
    '*',
    'usage',
    JSON.stringify(entry),
  );
}
