import type { AccountView, KeyView, OwnedKeyView } from '../../shared/console-api.js';
import type { ServiceTier } from '../../shared/scheduling/vocabulary.js';
export {
  requestStatuses,
  type KeyUsageTotals,
  type RequestStatus,
  type RequestView,
  type UsageTotals,
} from '../../shared/money/usage.js';
export { defaultAccountId, type AccountRole as Role } from '../../shared/accounts.js';
export { serviceTiers } from '../../shared/scheduling/vocabulary.js';
export type { BatchStatus, OpenAIBatchStatus } from '../../shared/batches/types.js';
export type { BudgetPeriod } from '../../shared/money/budgets.js';
export type {
  AccountList,
  AlertList,
  AlertView,
  MemberCapView,
  TeamBudgetView,
  ActivityPage,
  ActivityRow,
  BatchFile,
  BatchPage,
  ChannelView as Channel,
  ConsoleBatch as Batch,
  ConsoleBoot,
  ConsoleConfig,
  CreatedKeyView as CreatedKey,
  KeyName,
  KeyLimitValues,
  List,
  ModelLatency,
  QueueCounts,
  QueueList,
  RequestCounts,
  RequestHistogram,
  RequestPage,
  SessionAnswer,
  SessionFacts,
  SignOutAnswer,
  TeamDetail,
  TeamList,
  TeamMemberView as TeamMember,
  TeamRole,
  TeamView as Team,
  UsageReport,
  UsageRow,
  KeyUsageRow,
} from '../../shared/console-api.js';
export type { ServiceTier };

/*
 * The console API's shapes: what the server answers is declared once, in shared/console-api.ts (imported as types
 * only: the bundle takes no server code); what is the console's own (prices as it shows them, the runtime lists
 * its filters offer) is here.
 */

export type Account = AccountView;

/** A key of either list: the admin's names its account too. */
export type Key = KeyView &
  Partial<Pick<OwnedKeyView, 'account_email' | 'account_name' | 'account_kind' | 'account_cache_max_ttl_s'>>;

/** A model's prices as the server lists them (`GET /console/api/pricing`), markup included. */
export type { Pricing as Prices } from '../../shared/money/price-schema.js';
import type { Pricing as Prices } from '../../shared/money/price-schema.js';

export type Capability =
  | 'chat'
  | 'reasoning'
  | 'completion'
  | 'embedding'
  | 'image'
  | 'video'
  | 'transcription'
  | 'speech'
  | 'realtime'
  | 'moderation';

export interface PricedModel {
  id: string;
  vendor: string;
  capability: Capability | string;
  context_window: number;
  max_output_tokens: number;
  input_modalities: string[];
  image_sizes?: string[];
  image_qualities?: string[];
  /**
   * Speech models: the `response_format`s it can be given, the voices it takes (absent: its vendor's), and what else it
   * takes (`instructions`, `speed`, `sse`).
   */
  speech_formats?: string[];
  speech_voices?: string[];
  speech_options?: string[];
  prices: Prices | null;
}

/**
 * Each tier's token prices as a multiple of the listed ones, exact decimals (`GET /console/api/pricing`'s
 * `service_tiers`).
 */
export type TierMultiples = Record<ServiceTier, string>;
