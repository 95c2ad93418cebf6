import { z } from 'zod';
import { loadMcpServers, type McpServer } from './mcp/servers.js';
import type { QueueName } from './queues.js';
import { queueNames } from './queues.js';
import { decimalRatio, type ServiceTierPrices } from './scheduling/service-tier.js';
import { serviceTiers, type ServiceTier } from './scheduling/vocabulary.js';
import { vendorDefinitions } from './vendor-definitions.js';
import {
  type EnvironmentVariable,
  type Family,
  type SettingDefault,
  choice,
  family,
  flag,
  decimalMultiplier,
  fraction,
  hostList,
  httpUrl,
  integer,
  keyList,
  nameList,
  wordList,
  percentList,
  optionalFlag,
  optionalInteger,
  optionalText,
  aliasList,
  queueList,
  addressList,
  setting,
  switchAliases,
  text,
  usdAmount,
  teamMap,
  textList,
  type TeamMapEntry,
} from './setting-kinds.js';

/**
 * Every setting of the gateway, read from the environment in one place
 * (`loadConfig`, against the schema below: `environmentVariables`). Called by
 * the entry points; no other module reads the environment: each takes what it
 * needs from this.
 */
/** The scheduler's policy (shared/scheduling). */
export interface SchedulingConfig {
  /** QUEUE_WAITING_FLOOR: the waiting jobs any account may hold in a lane, whatever the others hold. */
  waitingFloor: number;
  /** QUEUE_RECOUNT_MS: how often a worker recounts each queue's backlog from the jobs that wait. */
  recountMs: number;
  /** SERVICE_TIERS_GRANTED: the tiers an account may use unless an admin set its own. */
  tiersGranted: ServiceTier[];
  /** SERVICE_TIER_NOT_GRANTED: a request for a tier not granted is served as `default`, or refused 403. */
  tierNotGranted: 'downgrade' | 'refuse';
  /** SERVICE_TIER_PRIORITY_LEAD_TOKENS: how far ahead of its account's fair place a priority request starts. */
  priorityLeadTokens: number;
  /** SERVICE_TIER_NATIVE_VENDORS: vendors that sell tiers themselves (sent the tier; their echo is billed). */
  nativeTierVendors: string[];
  /** SERVICE_TIER_FLEX_MIN_WAIT_MS: where the vendor does not sell flex, the wait that earns the flex price. */
  flexMinWaitMs: number;
}

/** Message Batches' limits (BATCH_*). */
export interface BatchLimits {
  maxRequests: number;
  maxBytes: number;
  /** Batches in progress (or canceling) per account. */
  maxOpen: number;
  /** How long a batch runs. */
  deadlineMs: number;
  /** How long a batch and its results are kept once ended. */
  resultsKeepMs: number;
  /** Between sweeps of the open batches. */
  sweepIntervalMs: number;
  /** The fewest requests of one batch queued at once (more where a lane it uses has a wider cap). */
  window: number;
  /** An OpenAI batch's results held in Redis before they are written out as a part of its files. */
  spillResults: number;
}

export interface Config {
  port: number;
  host: string;
  redisUrl: string;
  /** Where Redis is: one server (`redisUrl`), a Cluster, or a primary found through Sentinels. */
  redis: RedisTarget;
  /**
   * Queue shards per capability: each a BullMQ queue of its own hash tag, so one capability spreads over Cluster
   * shards.
   */
  queueShards: Record<QueueName, number>;
  adminToken: string | undefined;
  /**
   * QUEUE_DASHBOARD_WRITE=on: the queue dashboard at /admin/queues may act on jobs and queues; off (the default):
   * read-only.
   */
  queueDashboardWrite: boolean;
  logLevel: string;
  /**
   * `pretty`: short lines for a person; `json`: one JSON object a line; `auto`: pretty on a terminal, JSON elsewhere.
   */
  logFormat: 'auto' | 'json' | 'pretty';
  catalogFile: string | undefined;
  /** Upstream MCP servers (shared/mcp/servers.ts): the file that lists them, and how often a worker checks them. */
  mcp: { serversFile: string | undefined; servers: readonly McpServer[]; checkIntervalMs: number };
  /** SECRETS_KEY: what seals secrets kept in the record (shared/secret-box.ts); unset: none are kept. */
  secretsKey: string | undefined;
  /** The response cache (shared/cache/): CACHE_*. */
  cache: {
    hitPrice: number;
    defaultTtlS: number;
    maxTtlS: number;
    maxEntryBytes: number;
    maxAccountBytes: number;
    maxRequestBytes: number;
  };
  /** MODEL_ALIASES: a name a client may send → the catalog model id it stands for. */
  modelAliases: ReadonlyMap<string, string>;
  /** Queues this worker process serves. */
  workerQueues: QueueName[];
  /** WORKER_QUEUES names `mcp` (or is unset): this worker process runs the upstream MCP servers' tool calls. */
  workerMcp: boolean;
  /** `npm start` without a role: workers in a child process (`on`), in the api's process (`off`), or by core count. */
  workerProcess: 'auto' | 'on' | 'off';
  concurrency: Record<QueueName, number>;
  /**
   * The Realtime API's worker side (workers/realtime/): sessions per worker, each vendor's session cap, a session's
   * longest life.
   */
  realtimeWorker: {
    /**
     * REALTIME_SESSIONS_PER_WORKER: the realtime queue's concurrency per worker process (unless
     * WORKER_CONCURRENCY_REALTIME says).
     */
    sessionsPerWorker: number;
    /**
     * REALTIME_VENDOR_SESSIONS_<VENDOR> as set, by vendor prefix (0: no cap); shared/realtime-queue.ts applies the
     * defaults.
     */
    vendorSessions: Record<string, number>;
    /** REALTIME_MAX_SESSION_MS: a session is closed this long after it opened, whatever it does. */
    maxSessionMs: number;
  };
  /**
   * The waiting room of each lane of a queue (its shared lane, each capped vendor's lane): shared out among the
   * accounts waiting.
   */
  maxWaiting: Record<QueueName, number>;
  /** The scheduler's policy (shared/scheduling): admission, tiers, the backlog recount. */
  scheduling: SchedulingConfig;
  /** How long a request may wait and run, per queue. */
  deadlineMs: Record<QueueName, number>;
  /** How long a flex request (`service_tier: "flex"`) may wait and run, in place of its queue's deadline. */
  flexDeadlineMs: number;
  /** Vendor attempts per job (first call included). */
  jobAttempts: number;
  retryBaseMs: number;
  /** RATE_LIMIT_WAIT_MS: the longest a request waits in all on vendor rate limits. */
  rateLimitWaitMs: number;
  /** BullMQ lock; a worker silent this long is presumed dead and its job handed on. */
  workerLockMs: number;
  sseKeepAliveMs: number;
  maxBodyBytes: number;
  /**
   * Deadlines of a client's socket: its headers, its whole request (headers and body), silence inside a body, an idle
   * keep-alive connection.
   */
  clientTimeouts: { headersMs: number; requestMs: number; bodyIdleMs: number; keepAliveMs: number };
  /** Job-event WebSockets one API key may hold open on one api process. */
  maxEventSocketsPerKey: number;
  /** The Realtime API's client side (api/realtime/): the start wait, frame bounds, idle close, sessions per key. */
  realtimeClient: {
    startWaitMs: number;
    maxFrameBytes: number;
    maxFramesPerSecond: number;
    idleMs: number;
    maxSessionsPerKey: number;
  };
  /** Bodies larger than this travel beside the job (Redis key), not inside it. */
  inlinePayloadBytes: number;
  shutdownGraceMs: number;
  /**
   * An api silent this long (no reply subscriber, no heartbeat) has its jobs cancelled: nobody would read their
   * answers.
   */
  orphanAfterMs: number;
  keyCacheTtlMs: number;
  /** A JSON price list (`{"models": {id: pricing}}`) over the catalog's prices. */
  pricingFile: string | undefined;
  /** Percent added to every vendor price. */
  pricingMarkupPercent: number;
  /** The token price of a request served in each tier, as a multiple of the listed price (`default` is 1). */
  serviceTierPrices: ServiceTierPrices;
  /** Rate limits of keys that set none; undefined = unlimited. */
  defaultKeyRpm: number | undefined;
  defaultKeyTpm: number | undefined;
  /** Keys (not revoked) an account may hold; the console's Playground key is not counted. */
  maxKeysPerAccount: number;
  /** The record (PostgreSQL); undefined: the embedded default under `dataDir`. */
  databaseUrl: string | undefined;
  /** Where the embedded record keeps its files. */
  dataDir: string;
  usageRetentionDays: number;
  /** Days of audit log rows kept; undefined: every row (storage/record/audit-log.ts). */
  auditRetentionDays: number | undefined;
  /** Settled usage entries Redis holds at most while they wait to be written to the record. */
  usageBufferRecords: number;
  /** One record per keyed request (how it was answered) beside its usage; off: usage rows only. */
  requestLog: boolean;
  /**
   * Budget alerts (docs/budgets.md): the thresholds the money scripts cross, and the webhook the worker delivers them
   * to.
   */
  alerts: AlertsConfig;
  console: ConsoleConfig;
  /** Where uploads and generated files are kept. */
  blobDir: string;
  /** How clients reach this gateway; signed file URLs start with it. Unset: the request's own scheme and host. */
  publicBaseUrl: string | undefined;
  /** Believe X-Forwarded-Proto/Host/For: only behind a proxy that sets them (a client could forge them otherwise). */
  trustProxy: boolean;
  blobUrlSecret: string | undefined;
  blobUrlTtlSeconds: number;
  /** Largest audio upload (OpenAI's limit is 25 MB). */
  maxAudioBytes: number;
  /** Largest image upload per file. */
  maxImageBytes: number;
  /** How long async job results (and videos) stay retrievable. */
  asyncResultTtlSeconds: number;
  /** How long a stored response stays retrievable (and chainable). */
  responseTtlSeconds: number;
  /** Message Batches (`/v1/messages/batches`): its limits, and how long a batch runs and its results are kept. */
  batches: BatchLimits;
  /**
   * OpenAI's Files API (`/v1/files`): the largest file of each purpose, and the most requests a batch input file holds.
   */
  files: { maxBytes: number; batchMaxBytes: number; batchMaxRequests: number };
  /** How long a stream's event log outlives its last event: the window to resume or replay it. */
  streamReplayTtlSeconds: number;
  /**
   * How long a stream whose client left keeps running, waiting for a resume, when the request asks for no grace (0:
   * cancelled at once).
   */
  streamResumeGraceMs: number;
  /** The most a request may ask for with `x-stream-resume-grace-ms`. */
  streamResumeGraceMaxMs: number;
  /** Seconds between sweeps of expired blobs (one process sweeps per interval); 0: never. */
  blobSweepIntervalSeconds: number;
  /** Prometheus metrics (`GET /metrics`). */
  metrics: {
    /** METRICS_PORT: a worker process's own metrics listener (`--role=worker`); unset: none. */
    port: number | undefined;
    /** METRICS_PER_KEY: a `key_id` label on request, token, cost and refusal metrics. */
    perKey: boolean;
    /** METRICS_PER_ACCOUNT: an `account` label on the queue wait and backlog metrics. */
    perAccount: boolean;
    /** METRICS_TOP_ACCOUNTS: how many accounts get series of their own (the rest: `account="other"`). */
    topAccounts: number;
    /** METRICS_TOKEN: the bearer token `/metrics` asks for; undefined: loopback scrapes only. */
    token: string | undefined;
  };
  /**
   * FETCH_ALLOW_HOSTS: hosts a worker may fetch vendor-supplied URLs from even
   * when they are not public (comma-separated: `images.internal`, `*.corp.example`,
   * `10.1.2.3`, `10.1.0.0/16`). Default: none. The channel's own base URL never needs listing.
   */
  fetchAllowHosts: string[];
  /** FETCH_ALLOW_PRIVATE=on: vendor-supplied URLs may point at any address (development only). Default: off. */
  fetchAllowPrivate: boolean;
  /**
   * `<VENDOR>_API_KEY`, `<VENDOR>_BASE_URL`, `<VENDOR>_MAX_CONCURRENCY`, `<VENDOR>_RPM` by vendor
   * prefix (`OPENAI`, `DEEPSEEK`, a channels-file vendor's): every prefix one of them names.
   */
  vendors: Record<string, VendorSettings>;
  /** CHANNELS_FILE: more channels per vendor, with weights (read by shared/vendors.ts). */
  channelsFile: string | undefined;
  mock: {
    /**
     * MOCK_VENDOR: `auto` serves the mock (standing in for every vendor) only when no vendor is configured; `auto`
     * under NODE_ENV=production loads as `off`.
     */
    mode: 'on' | 'off' | 'auto';
    /** MOCK_BILLING: mock answers are billed at the price of the model they answer for (never in production). */
    billed: boolean;
    /** Pause between mock stream chunks. */
    streamDelayMs: number;
    /** How long a mock video takes to render. */
    videoMs: number;
  };
  /** Lease of a vendor slot, renewed while the call runs. */
  vendorLeaseMs: number;
  /**
   * While a capped vendor is saturated, its calls start at least this fraction of (average call ÷ cap) apart (0: off).
   */
  vendorPace: number;
  /**
   * PROMPT_CACHE_AFFINITY_OFF: vendors whose channels are picked by weight alone, not by the prompt's cached prefix.
   */
  promptAffinityOff: string[];
  /**
   * PROMPT_CACHE_WARM_WAIT_MS: the longest a request waits for another with its prefix to write the vendor's cache (0:
   * none).
   */
  promptWarmWaitMs: number;
  /** PROMPT_CACHE_LIFETIME_MS: how long a prefix written on a channel is taken as cached there. */
  promptCacheLifetimeMs: number;
  /** How long a channel rests after failures (the router's cooldown policy). */
  channelCooldowns: {
    /** The vendor refused its credentials or quota. */
    authMs: number;
    /** Repeated retryable failures. */
    failureMs: number;
    /** Retryable failures within 30 s that start a rest. */
    failureThreshold: number;
  };
  /** Timeouts of every vendor call (0: none). */
  vendorTimeouts: { connectMs: number; firstByteMs: number; idleMs: number };
  /** Pause between polls of a FLUX task. */
  bflPollIntervalMs: number;
  /** Pause between polls of a vendor video job. */
  videoPollIntervalMs: number;
  /** S3-compatible storage instead of `blobDir`; set when S3_BUCKET is. */
  s3: S3Config | undefined;
  /** OpenTelemetry tracing: off unless OTEL_EXPORTER_OTLP_ENDPOINT is set. */
  tracing: TracingConfig;
}

/** The web console at `/console`. */
export interface ConsoleConfig {
  /** `open`: anyone may create a member account; `off`: only admins make accounts. */
  signup: 'open' | 'off';
  /** Starting balance of an account made by sign-up, USD. */
  signupCreditUsd: number;
  /** The pricing page (and its JSON) readable without signing in. */
  publicPricing: boolean;
  /** An admin ensured at start (created, or its password and role set) when both are given. */
  adminEmail: string | undefined;
  adminPassword: string | undefined;
  /** A session unused this long ends. */
  sessionIdleSeconds: number;
  /** A session ends this long after sign-in, however busy. */
  sessionMaxSeconds: number;
  /** Sign-in through an OpenID Connect provider; undefined: off (OIDC_ISSUER unset). */
  oidc: OidcConfig | undefined;
}

/** The console's sign-in through an OpenID Connect provider (api/console/oidc.ts, docs/sso.md). */
export interface OidcConfig {
  /** The provider's issuer URL; its metadata is read from `<issuer>/.well-known/openid-configuration`. */
  issuer: string;
  clientId: string;
  /** Undefined: a public client (PKCE alone proves the code's exchange). */
  clientSecret: string | undefined;
  /** Undefined: `<PUBLIC_BASE_URL or the request's origin>/console/api/oidc/callback`. */
  redirectUrl: string | undefined;
  scopes: string;
  /** The claim (in the ID token, else from userinfo) that lists a person's groups. */
  groupsClaim: string;
  /** Which group makes a person what in which team. */
  teamMap: TeamMapEntry[];
  /** Groups whose people are admins of the gateway; empty: roles are not taken from the provider. */
  adminGroups: string[];
  /** Password sign-in refused but for `breakGlass`, and sign-up closed. */
  only: boolean;
  /** Lower-cased emails of the admins who may still sign in with a password under `only`. */
  breakGlass: string[];
  /** The sign-in button's label. */
  name: string;
  /** The most each call to the provider (discovery, token, keys, userinfo) may take. */
  timeoutMs: number;
}

/** A vendor's settings from its `<VENDOR>_*` variables; a prefix none of them names has no entry. */
export interface VendorSettings {
  /** `<VENDOR>_API_KEY`, split at commas: each key is a channel. */
  apiKeys: string[];
  /** `<VENDOR>_BASE_URL` without trailing slashes; unset: the vendor's own. */
  baseUrl: string | undefined;
  /** `<VENDOR>_MAX_CONCURRENCY`; unset or 0: no cap. */
  maxConcurrency: number | undefined;
  /** `<VENDOR>_RPM`; unset or 0: no cap. */
  rpm: number | undefined;
}

/** OTEL_TRACES_SAMPLER values the gateway supports (the OpenTelemetry specification's names). */
export const traceSamplers = [
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
  'always_on',
  'always_off',
  'traceidratio',
] as const;
export type TraceSampler = (typeof traceSamplers)[number];

/** OpenTelemetry tracing, by the standard OTEL_* variables (shared/tracing.ts). */
export interface TracingConfig {
  /** OTLP/HTTP base URL (`/v1/traces` is appended); unset: tracing is off. */
  endpoint: string | undefined;
  /** `service.name`; unset: `switchyard-api`, `switchyard-worker` or `switchyard`, by role. */
  serviceName: string | undefined;
  sampler: TraceSampler;
  /** Ratio of the `traceidratio` samplers. */
  samplerArg: number;
  /** Delay between two exports of the batch processor. */
  exportDelayMs: number;
}

export interface S3Config {
  bucket: string;
  region: string;
  endpoint?: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  forcePathStyle: boolean;
  prefix: string;
}

export interface AlertsConfig {
  /** Ascending percentages (1–100). */
  thresholds: number[];
  webhookUrl: string | undefined;
  /** Set whenever `webhookUrl` is. */
  webhookSecret: string | undefined;
  timeoutMs: number;
  attempts: number;
  backoffMs: number;
}

export type RedisAddress = { host: string; port: number };

/** How the gateway reaches Redis. Credentials, TLS and the database come from `REDIS_URL` in every form. */
export type RedisTarget =
  | { kind: 'single'; url: string }
  | { kind: 'cluster'; nodes: RedisAddress[]; url: string }
  | { kind: 'sentinel'; sentinels: RedisAddress[]; name: string; url: string };

type Env = Record<string, string | undefined>;

const vendorMember = (suffix: string) => new RegExp(`^([A-Z][A-Z0-9_]*)_${suffix}$`);
const queueMember = (prefix: string) => new RegExp(`^${prefix}_(${queueNames.map((q) => q.toUpperCase()).join('|')})$`);

const queueDefaults = {
  concurrency: { chat: 4096, embeddings: 1024, image: 128, audio: 64, video: 256, realtime: 100 },
  maxWaiting: { chat: 10_000, embeddings: 10_000, image: 5_000, audio: 1_000, video: 5_000, realtime: 1_000 },
  deadlineMs: {
    chat: 600_000,
    embeddings: 120_000,
    image: 600_000,
    audio: 600_000,
    video: 3_600_000,
    realtime: 3_700_000,
  },
} as const satisfies Record<string, Record<QueueName, number>>;

const builtInBaseUrls = Object.fromEntries(
  vendorDefinitions.filter((v) => v.defaultBaseUrl).map((v) => [`${v.envPrefix}_BASE_URL`, v.defaultBaseUrl]),
);

/** Every variable with a fixed name: its type and range, default and meaning. */
const fixed = {
  PORT: setting(integer(0, 8080, 65535), 'api port (`0` picks a free one)'),
  HOST: setting(
    text('127.0.0.1'),
    "api bind address: this machine only by default, so a laptop's `npm start` does not show the console and " +
      '`/metrics` to its network; containers set `0.0.0.0` (the Dockerfile and `docker-compose.yml` do)',
  ),
  REDIS_URL: setting(
    text('redis://127.0.0.1:6379'),
    'Redis for queues, keys, replies; unset: the private `redis-server` under `DATA_DIR` (started when none runs ' +
      'there, stopped by the last process using it), or the one at this address only when `redis-server` is not ' +
      'installed',
  ),
  REDIS_CLUSTER_NODES: setting(
    addressList(),
    'seed nodes of a Redis Cluster (`host:port,…`): the gateway then runs on the Cluster (`REDIS_URL` still gives a password or `rediss:`); `REDIS_URL=redis+cluster://host:port,…` says the same',
  ),
  REDIS_SENTINELS: setting(
    addressList(),
    'Sentinels (`host:port,…`) that name the Redis primary (with `REDIS_SENTINEL_NAME`); `REDIS_URL` still gives ' +
      'a password, TLS or database',
  ),
  REDIS_SENTINEL_NAME: setting(text('mymaster'), "the primary's name the Sentinels monitor"),
  ADMIN_TOKEN: setting(
    optionalText(),
    'enables the admin API (`/admin/accounts`, `/admin/keys`, `/admin/usage`) and the queue dashboard ' +
      '(`/admin/queues`) for `Authorization: Bearer $ADMIN_TOKEN`',
  ),
  LOG_LEVEL: setting(choice(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], 'info'), 'pino level'),
  LOG_FORMAT: setting(
    choice(['auto', 'json', 'pretty'], 'auto'),
    '`json`: one JSON object a line (pino), for log collectors; `pretty`: a short line a person reads; `auto`: ' +
      'pretty when stdout is a terminal, JSON otherwise (a container, a pipe, a file)',
  ),
  CATALOG_FILE: setting(
    optionalText(),
    'JSON `{"models":[…]}` whose entries add to or replace built-in catalog entries by id',
  ),
  MCP_SERVERS_FILE: setting(
    optionalText(),
    'JSON `{"servers":{"<name>":{"url":…}}}`: the upstream MCP servers, reached by URL or run by the workers as ' +
      'a `command`, the headers or variables each needs (kept on the server, never shown), caps, timeouts and ' +
      'prices per call (docs/mcp.md)',
  ),
  SECRETS_KEY: setting(
    optionalText({ kind: 'unset', note: 'servers added by an admin may not carry headers' }),
    'the key (at least 32 characters) that seals what must stay secret in the record: the headers and URLs of ' +
      'MCP servers added by an admin (AES-256-GCM); keep it outside the database, the same on every api and worker',
  ),
  MCP_CHECK_INTERVAL_MS: setting(
    integer(1000, 30_000, 3_600_000),
    'how often a worker connects to each upstream MCP server and lists its tools (`GET /admin/mcp/servers` shows ' +
      'what it found)',
  ),
  CACHE_HIT_PRICE: setting(
    fraction(0),
    "what a cache hit (or a request that shared an identical request's vendor call) costs, as a fraction of the " +
      "stored answer's price: 0, free, by default; 1, the full price",
  ),
  CACHE_DEFAULT_TTL_S: setting(
    integer(0, 3600, 2_592_000),
    'how long the answer of a `Cache-Control: no-cache` request (which names no `max-age`) is kept, in seconds',
  ),
  CACHE_MAX_TTL_S: setting(
    integer(0, 86_400, 2_592_000),
    'the longest an answer is kept whatever `max-age` a request names, in seconds; 0 turns the cache off',
  ),
  CACHE_MAX_ENTRY_BYTES: setting(
    integer(1024, 1_048_576, 64 * 1_048_576),
    'the largest answer kept, in bytes as stored (gzipped past 2 KiB): a larger one is answered, not kept',
  ),
  CACHE_MAX_ACCOUNT_BYTES: setting(
    integer(1024, 67_108_864, 2 ** 40),
    'the most bytes of answers one account keeps; past it the entries that expire soonest go first',
  ),
  CACHE_MAX_REQUEST_BYTES: setting(
    integer(1024, 262_144, 64 * 1_048_576),
    'requests larger than this (their body, in bytes) are not cached: hashing them would hold the event loop',
  ),
  MODEL_ALIASES: setting(
    aliasList(),
    'model names a client may send for catalog models ' +
      '(`claude-sonnet-4-5=gpt-4o-mini,claude-haiku-4-5=deepseek-chat`): a request naming the alias is served, ' +
      'priced and logged as that model, and answers with the name it sent where its API echoes it ' +
      '(`/v1/messages`); an alias of an unknown model fails the start',
  ),
  CHANNELS_FILE: setting(
    optionalText(),
    'JSON `{"channels":[…]}`: more channels per vendor, with weights, and vendors not built in',
  ),
  VENDOR_LEASE_MS: setting(
    integer(1, 30_000),
    "lease of a vendor slot, renewed while the call runs; a dead worker's slot frees after this",
  ),
  VENDOR_PACE_PERCENT: setting(
    integer(0, 85, 100),
    "while a capped vendor's slots are all taken, its calls start at least this percent of (its average call " +
      'time ÷ its cap) apart, so its slots free one by one rather than in step and a waiter waits for the next of ' +
      'many, not a whole call; 0: off',
  ),
  PROMPT_CACHE_AFFINITY_OFF: setting(
    wordList([]),
    'vendors whose channels are picked by weight alone; every other vendor with more than one channel sends a ' +
      "prompt to the channel its cached prefix picks (docs/scaling.md, Prompt-cache affinity), where the vendor's " +
      'cache of it lives',
  ),
  PROMPT_CACHE_WARM_WAIT_MS: setting(
    integer(0, 5000, 60_000),
    'the longest a request waits, when others with its cached prefix wait too and the prefix is not cached on ' +
      'its channel, for the first of them to start answering (the vendor has then written the prefix); `0`: none ' +
      'wait',
  ),
  PROMPT_CACHE_LIFETIME_MS: setting(
    integer(1000, 300_000, 86_400_000),
    "how long a prefix sent to a channel is taken as in its vendor's cache (the vendors keep one about 5 minutes " +
      'from its last use)',
  ),
  CHANNEL_AUTH_COOLDOWN_MS: setting(integer(0, 300_000), 'rest for a channel whose credentials the vendor refused'),
  CHANNEL_FAILURE_THRESHOLD: setting(
    integer(1, 3),
    'retryable failures (5xx, network) within 30 s that rest a model on a channel',
  ),
  CHANNEL_COOLDOWN_MS: setting(integer(0, 30_000), 'that rest; a 429 rests it for its `retry-after` (else 5 s)'),
  RATE_LIMIT_WAIT_MS: setting(
    integer(0, 20_000),
    "longest a request waits in all on vendors' 429s (and channels resting after one) before it is answered 429 " +
      'with `retry-after`; never past its deadline (then 504, with `retry-after`)',
  ),
  BFL_POLL_INTERVAL_MS: setting(integer(0, 500), 'pause between polls of a FLUX task'),
  VIDEO_POLL_INTERVAL_MS: setting(integer(0, 2_000), 'pause between polls of a vendor video job'),
  NODE_ENV: setting(
    text('development'),
    '`production`: the mock vendor never serves unless `MOCK_VENDOR=on` names it, and `MOCK_BILLING` is refused',
  ),
  MOCK_VENDOR: setting(
    choice(['on', 'off', 'auto'], 'auto', switchAliases),
    '`on` (mock models beside real vendors), `off`, or `auto`: the mock serves (standing in for every vendor) ' +
      'when no vendor is configured, except with `NODE_ENV=production`, where `auto` is `off`',
  ),
  MOCK_BILLING: setting(
    choice(['on', 'off'], 'off', switchAliases),
    '`on` bills mock answers at the price of the model they answer for, to try the money path without a vendor ' +
      '(refused with `NODE_ENV=production`); `off`: the mock is never billed',
  ),
  MOCK_VIDEO_MS: setting(integer(0, 1_500), 'how long a mock video takes to render'),
  MOCK_STREAM_DELAY_MS: setting(integer(0, 20), 'pause between mock stream chunks'),
  VENDOR_CONNECT_TIMEOUT_MS: setting(integer(0, 10_000), 'vendor connect timeout'),
  VENDOR_FIRST_BYTE_TIMEOUT_MS: setting(
    integer(0, 120_000),
    'vendor response-headers timeout; undici times it in steps of about a second, so a value under 1000 acts as ' +
      'about 1 s',
  ),
  VENDOR_IDLE_TIMEOUT_MS: setting(
    integer(0, 120_000),
    "longest silence between vendor body chunks (about a second's resolution, as above)",
  ),
  WORKER_QUEUES: setting(
    queueList(),
    "queues a worker process serves; `mcp`: the upstream MCP servers' tool calls (docs/mcp.md)",
  ),
  REALTIME_SESSIONS_PER_WORKER: setting(
    integer(1, 100, 100_000),
    "Realtime sessions one worker process holds at once (the `realtime` queue's concurrency; " +
      '`WORKER_CONCURRENCY` does not set it, `WORKER_CONCURRENCY_REALTIME` does)',
  ),
  REALTIME_MAX_SESSION_MS: setting(
    integer(1000, 3_600_000, 86_400_000),
    'a Realtime session is closed this long after it opened (1000, with an `error` event saying why), whatever ' +
      "it does: OpenAI's own limit is 60 minutes",
  ),
  WORKER_PROCESS: setting(
    choice(['auto', 'on', 'off'], 'auto', switchAliases),
    '`npm start` (no `--role`): `on` runs the workers in a child process, on their own event loop; `off` keeps ' +
      "them on the api's; `auto`: a child process when more than one core is available",
  ),
  WORKER_CONCURRENCY: setting(
    optionalInteger(1, { kind: 'perQueue', value: queueDefaults.concurrency }),
    'jobs in flight per worker process, every queue',
  ),
  QUEUE_MAX_WAITING: setting(
    optionalInteger(1, { kind: 'perQueue', value: queueDefaults.maxWaiting }),
    "the waiting room of each lane of every queue (the shared lane, each capped vendor's): shared out among the " +
      'accounts waiting by weight; an account past its share is refused 429 with `retry-after`, never another ' +
      'account',
  ),
  QUEUE_WAITING_FLOOR: setting(
    integer(1, 10, 100_000),
    'waiting jobs any account may hold in a lane whatever the others hold (its share of the waiting room is ' +
      'never less)',
  ),
  QUEUE_RECOUNT_MS: setting(
    integer(1000, 30_000, 3_600_000),
    "how often a worker recounts each queue's backlog by account and tier from the jobs that wait, repairing any drift",
  ),
  REQUEST_DEADLINE_MS: setting(
    optionalInteger(1, { kind: 'perQueue', value: queueDefaults.deadlineMs }),
    'how long a request may wait and run, every queue',
  ),
  FLEX_DEADLINE_MS: setting(
    integer(1, 1_800_000),
    'how long a flex request (`service_tier: "flex"`) may wait and run, in place of the chat queue\'s ' +
      '`REQUEST_DEADLINE_MS`: flex takes only capacity nothing else wants, so it may wait long',
  ),
  JOB_ATTEMPTS: setting(integer(1, 4), 'vendor attempts per request (the first included)'),
  RETRY_BASE_MS: setting(integer(1, 250), 'base of the exponential backoff (full jitter)'),
  WORKER_LOCK_MS: setting(integer(1000, 10_000), 'a worker silent this long is presumed dead and its job handed on'),
  SSE_KEEPALIVE_MS: setting(integer(100, 15_000), 'comment frames on a stream that is still waiting'),
  MAX_BODY_BYTES: setting(integer(1024, 50 * 1024 * 1024), 'largest JSON body; over → 413'),
  HEADERS_TIMEOUT_MS: setting(
    integer(100, 30_000),
    "a request's headers must all arrive within this of its first byte; then 408 and the socket is closed",
  ),
  REQUEST_RECEIVE_TIMEOUT_MS: setting(
    integer(100, 300_000),
    'a whole request, headers and body, must arrive within this; then 408 (or, once an answer has started, ' +
      'nothing) and the socket is closed; the answer is not counted: a held or streamed reply runs until ' +
      '`REQUEST_DEADLINE_MS`',
  ),
  BODY_IDLE_TIMEOUT_MS: setting(
    integer(100, 30_000),
    'longest silence while a request body is read; then 408 and the socket is closed',
  ),
  KEEPALIVE_TIMEOUT_MS: setting(
    integer(100, 65_000),
    'an idle keep-alive connection is closed after this; keep it above the idle timeout of the balancer in front ' +
      '(60 s on most), so that the balancer closes first and never sends a request on a connection the gateway is ' +
      'closing',
  ),
  MAX_EVENT_SOCKETS_PER_KEY: setting(
    integer(1, 100),
    'job-event WebSockets (`/v1/jobs/{id}/events`, `/v1/videos/{id}/events`) one API key may hold open on one ' +
      'api process; one more is refused with a 429 before the upgrade',
  ),
  REALTIME_START_WAIT_MS: setting(
    integer(100, 10_000, 600_000),
    'how long a Realtime upgrade (`GET /v1/realtime`) waits for a worker to take the session and open the ' +
      'vendor; then 503 with `retry-after` and the session is taken out of the queue',
  ),
  REALTIME_MAX_FRAME_BYTES: setting(
    integer(1024, 1024 * 1024, 64 * 1024 * 1024),
    'largest client event on a Realtime socket; a larger one gets an `error` event and is dropped (one past ' +
      'twice this closes the socket with 1009 unread)',
  ),
  REALTIME_MAX_FRAMES_PER_SECOND: setting(
    integer(1, 100, 100_000),
    'client events one Realtime socket may send in a second; past it they get an `error` event and are dropped',
  ),
  REALTIME_IDLE_MS: setting(
    integer(1000, 600_000),
    'a Realtime session with no client event for this long is closed (1000)',
  ),
  MAX_REALTIME_SESSIONS_PER_KEY: setting(
    integer(1, 100),
    'Realtime sessions one API key may hold open (or be opening) on one api process; one more is refused with ' +
      '429 `too_many_sessions` at the upgrade',
  ),
  INLINE_PAYLOAD_BYTES: setting(integer(0, 64 * 1024), 'bodies larger than this are stored beside the job, not in it'),
  SHUTDOWN_GRACE_MS: setting(
    integer(0, 25_000),
    'on SIGTERM or Ctrl-C, how long in-flight requests may finish (new ones get a 503 meanwhile); a hard ' +
      'deadline: what has not finished then is given up (the log says what) and the process exits within 4 s more, ' +
      "Redis there or not; keep it 5 s below the orchestrator's own grace (Kubernetes: 30 s, compose: " +
      '`stop_grace_period`); a second Ctrl-C exits at once',
  ),
  ORPHAN_AFTER_MS: setting(
    integer(1000, 15_000),
    'an api gone this long (no reply subscriber, no heartbeat) has its jobs cancelled by the workers',
  ),
  KEY_CACHE_TTL_MS: setting(integer(0, 60_000), 'how long an api process trusts a cached API key'),
  PRICING_FILE: setting(
    optionalText({ kind: 'unset', note: 'the catalog prices' }),
    'JSON `{"models":{"<id>":{…pricing}}}` replacing the prices of those models',
  ),
  PRICING_MARKUP_PERCENT: setting(integer(0, 0, 1000), 'percent added to every price before it is charged'),
  SERVICE_TIER_PRICE_FLEX: setting(
    decimalMultiplier('0.5'),
    'token prices of a request served as flex (`service_tier: "flex"`), as a multiple of the listed price',
  ),
  SERVICE_TIERS_GRANTED: setting(
    nameList(serviceTiers, ['default', 'flex']),
    'the service tiers an account may ask for unless an admin set its own (`PATCH /admin/accounts/{id}` ' +
      '`service_tiers`): `priority` only where an admin grants it',
  ),
  SERVICE_TIER_NOT_GRANTED: setting(
    choice(['downgrade', 'refuse'], 'downgrade'),
    "a request for a tier its account may not use: `downgrade` serves it as `default` (its answer's " +
      '`service_tier` says so), `refuse` answers 403 `service_tier_not_granted`',
  ),
  SERVICE_TIER_PRIORITY_LEAD_TOKENS: setting(
    integer(0, 16_384, 1_000_000),
    "how far ahead of its account's fair place a priority request starts, in tokens of service (priority and " +
      "default share one band: an account's priority requests are still counted in its share, so they cannot " +
      'starve another account)',
  ),
  SERVICE_TIER_NATIVE_VENDORS: setting(
    wordList(['openai']),
    'vendors that sell service tiers themselves: they are sent the tier, and the tier their answer says they ' +
      'served is the one billed and echoed; every other vendor never sees `service_tier`; `mock` makes the mock ' +
      'vendor serve every tier as sent (to try tiers offline)',
  ),
  SERVICE_TIER_FLEX_MIN_WAIT_MS: setting(
    integer(0, 1000, 3_600_000),
    'on a vendor that does not sell flex, a flex request is billed at the flex price only when it waited at ' +
      'least this long for capacity (it was deferred); served at once, it is billed and echoed as `default`',
  ),
  SERVICE_TIER_PRICE_PRIORITY: setting(
    decimalMultiplier('2'),
    'token prices of a request served as priority (`service_tier: "priority"`), as a multiple of the listed price',
  ),
  DEFAULT_KEY_RPM: setting(
    optionalInteger(1, { kind: 'unset', note: 'unlimited' }),
    'requests per minute of a key that sets no `rpm`, and the most a member may set on a key of theirs where an ' +
      'admin set none',
  ),
  DEFAULT_KEY_TPM: setting(
    optionalInteger(1, { kind: 'unset', note: 'unlimited' }),
    'tokens per minute of a key that sets no `tpm`, and the most a member may set on a key of theirs where an ' +
      'admin set none',
  ),
  MAX_KEYS_PER_ACCOUNT: setting(
    integer(1, 50, 1_000_000),
    'keys (not revoked) one account may hold, however they are made (console, admin API, `npm run keys`); one ' +
      'more is refused with 409 `too_many_keys`',
  ),
  DATABASE_URL: setting(
    optionalText({ kind: 'unset', note: 'the embedded database under `DATA_DIR`' }),
    'the record — accounts, keys, credits, ledger, usage — in PostgreSQL (`postgres://user:password@host:5432/db`); unset: a PostgreSQL server the gateway runs itself under `DATA_DIR`, for one machine (`npm run record -- copy` moves it to a server)',
  ),
  DATA_DIR: setting(
    text('.data'),
    'what `npm start` keeps: the private Redis when `REDIS_URL` is unset (`redis.url`, its append-only file), ' +
      'the blobs when `BLOB_DIR` is unset (`DATA_DIR/blobs`), and the embedded record when `DATABASE_URL` is ' +
      'unset: the cluster (`DATA_DIR/postgres`, its socket inside), its password file and its log; made 0700, its ' +
      "files 0600, whatever the umask, and as root all root's but the cluster folder, which is the record's own " +
      "user's (`switchyard-record`) (at most about 75 characters: a socket path is limited)",
  ),
  USAGE_RETENTION_DAYS: setting(
    integer(1, 30, 3650),
    'days of per-request usage rows kept in the record (older ones are deleted in small batches; daily totals stay)',
  ),
  AUDIT_RETENTION_DAYS: setting(
    optionalInteger(1, { kind: 'unset', note: 'kept for ever' }),
    'days of audit log rows kept (older ones are pruned hourly by the workers, and the chain anchored at the ' +
      'last one pruned, so `npm run audit -- verify` still passes); unset: every row is kept',
  ),
  USAGE_BUFFER_RECORDS: setting(
    integer(1000, 1_000_000, 100_000_000),
    'settled usage entries each of the 16 billing buckets holds at most while the record (PostgreSQL) is away; ' +
      'past it the oldest are dropped',
  ),
  REQUEST_LOG: setting(
    flag(true),
    "the request log: each keyed request's status, HTTP status, error, latency and time to first token recorded " +
      "beside its usage (`GET /v1/generation`, `GET /admin/requests`, the console's Activity page); `off` keeps " +
      'the usage rows only',
  ),
  ALERT_THRESHOLDS: setting(
    percentList([50, 80, 100]),
    "percentages of a budget, a member's cap or a key's lifetime limit whose first crossing by settled spend " +
      'raises an alert (once per period; for a lifetime limit, once): recorded (`GET /admin/alerts`) and sent to ' +
      '`ALERT_WEBHOOK_URL` when set (docs/budgets.md)',
  ),
  ALERT_WEBHOOK_URL: setting(
    httpUrl({ kind: 'unset', note: 'alerts are recorded only (`no_webhook`)' }, false),
    'where each alert is POSTed as JSON, signed with `ALERT_WEBHOOK_SECRET` in `Switchyard-Signature` ' +
      '(docs/budgets.md says how to verify it)',
  ),
  ALERT_WEBHOOK_SECRET: setting(
    optionalText(),
    "the HMAC-SHA256 key of the alerts' signature; required with `ALERT_WEBHOOK_URL` (at least 16 characters)",
  ),
  ALERT_WEBHOOK_TIMEOUT_MS: setting(
    integer(100, 10_000, 120_000),
    'how long one delivery of an alert may take (connect to the last byte of the answer) before it counts as ' +
      'failed and is tried again',
  ),
  ALERT_WEBHOOK_ATTEMPTS: setting(
    integer(1, 10, 50),
    'deliveries of an alert tried at most while the webhook fails with a 5xx, 408, 429, a network error or a ' +
      'timeout (any other 4xx ends them at once)',
  ),
  ALERT_WEBHOOK_BACKOFF_MS: setting(
    integer(1, 5000, 3_600_000),
    'the wait before the second delivery of an alert; doubled before each next one',
  ),
  CONSOLE_SIGNUP: setting(
    choice(['off', 'open'], 'off', { ...switchAliases, on: 'open', true: 'open', '1': 'open', yes: 'open' }),
    '`open` (or any word for on) lets anyone create a `member` account in the console; `off`: accounts come from ' +
      'an admin',
  ),
  SIGNUP_CREDIT_USD: setting(usdAmount(0, 1e6), 'starting balance of an account made by console sign-up'),
  CONSOLE_PUBLIC_PRICING: setting(flag(true), "the console's pricing page readable without signing in"),
  ADMIN_EMAIL: setting(
    optionalText(),
    'with `ADMIN_PASSWORD`: an `admin` console account ensured at start (made, or its password and role reset)',
  ),
  ADMIN_PASSWORD: setting(optionalText(), 'password of `ADMIN_EMAIL` (at least 8 characters)'),
  CONSOLE_SESSION_IDLE_S: setting(integer(60, 86_400), 'a console session unused this long ends'),
  CONSOLE_SESSION_MAX_S: setting(
    integer(60, 7 * 86_400),
    'a console session ends this long after sign-in, however busy',
  ),
  OIDC_ISSUER: setting(
    httpUrl({ kind: 'unset', note: 'sign-in through a provider off' }, true),
    'the OpenID Connect provider the console signs people in with (its metadata from ' +
      '`/.well-known/openid-configuration`): docs/sso.md',
  ),
  OIDC_CLIENT_ID: setting(optionalText(), "the gateway's client id at the provider (needed with `OIDC_ISSUER`)"),
  OIDC_CLIENT_SECRET: setting(
    optionalText({ kind: 'unset', note: 'a public client: PKCE alone' }),
    "the client's secret at the provider",
  ),
  OIDC_REDIRECT_URL: setting(
    httpUrl({ kind: 'derived', text: "`<PUBLIC_BASE_URL or the request's origin>/console/api/oidc/callback`" }, false),
    'the redirect URL registered at the provider',
  ),
  OIDC_SCOPES: setting(
    text('openid email profile'),
    'the scopes asked of the provider (space-separated; `openid` is always asked)',
  ),
  OIDC_GROUPS_CLAIM: setting(
    text('groups'),
    "the claim of the ID token (else of userinfo) that lists a person's groups",
  ),
  OIDC_TEAM_MAP: setting(
    teamMap(),
    'which group makes a person what in which team: `group=Team name:role` entries (role `owner`, `member` or ' +
      '`viewer`), comma-separated; a team is made when first named',
  ),
  OIDC_ADMIN_GROUPS: setting(
    textList('comma-separated group names'),
    "groups whose people are the gateway's admins (set at each sign-in); empty: roles stay as the gateway has them",
  ),
  OIDC_ONLY: setting(
    flag(false),
    '`on`: password sign-in is refused but for `OIDC_BREAK_GLASS`, and sign-up is closed',
  ),
  OIDC_BREAK_GLASS: setting(
    textList('comma-separated emails'),
    'emails of admin accounts that may still sign in with a password under `OIDC_ONLY`',
  ),
  OIDC_NAME: setting(text('Sign in with SSO'), "the label of the console's sign-in button"),
  OIDC_TIMEOUT_MS: setting(
    integer(100, 10_000, 120_000),
    'the most each call to the provider may take; past it the sign-in is refused',
  ),
  QUEUE_DASHBOARD_WRITE: setting(
    flag(false),
    '`on` lets the queue dashboard (`/admin/queues`) act on jobs and queues (retry a failed job, remove, ' +
      'promote, pause, empty…); `off`: read-only',
  ),
  BLOB_DIR: setting(optionalText({ kind: 'unset', note: '`DATA_DIR/blobs`' }), 'local blob store directory'),
  S3_BUCKET: setting(optionalText(), 'use S3-compatible storage instead of `BLOB_DIR`'),
  S3_ENDPOINT: setting(httpUrl({ kind: 'unset', note: 'AWS' }, false), 'S3-compatible endpoint (MinIO, R2, …)'),
  S3_REGION: setting(text('us-east-1'), 'S3 region'),
  S3_ACCESS_KEY_ID: setting(optionalText({ kind: 'unset', note: 'the AWS default chain' }), 'S3 access key id'),
  S3_SECRET_ACCESS_KEY: setting(optionalText({ kind: 'unset', note: 'the AWS default chain' }), 'S3 secret access key'),
  S3_FORCE_PATH_STYLE: setting(
    optionalFlag({ kind: 'derived', text: '`true` with `S3_ENDPOINT`, else `false`' }),
    'path-style bucket URLs',
  ),
  S3_PREFIX: setting(text(''), 'key prefix inside the bucket'),
  PUBLIC_BASE_URL: setting(
    httpUrl({ kind: 'unset', note: 'the scheme and `Host` of each request' }, true),
    'how clients reach the gateway: signed file links start with it',
  ),
  FETCH_ALLOW_HOSTS: setting(
    hostList(),
    'hosts, IP addresses and CIDR ranges that URLs handed over by vendors may reach although not public',
  ),
  FETCH_ALLOW_PRIVATE: setting(
    flag(false),
    '`on` lets URLs handed over by vendors reach any address (development only)',
  ),
  TRUST_PROXY: setting(
    flag(false),
    '`on` only behind a proxy that sets `X-Forwarded-Proto`/`-Host`/`-For`: then they are believed',
  ),
  BLOB_URL_SECRET: setting(
    optionalText({ kind: 'unset', note: 'generated once, kept in Redis' }),
    'HMAC secret of signed file links',
  ),
  BLOB_URL_TTL_S: setting(integer(1, 3600), 'lifetime of a signed file link'),
  MAX_AUDIO_BYTES: setting(integer(1, 25 * 1024 * 1024), 'largest audio upload; over → 413'),
  MAX_IMAGE_BYTES: setting(integer(1, 50 * 1024 * 1024), 'largest image upload per file'),
  ASYNC_RESULT_TTL_S: setting(integer(60, 86_400), 'how long async job results and videos stay retrievable'),
  BATCH_MAX_REQUESTS: setting(
    integer(1, 10_000, 100_000),
    'the most requests a message batch (`POST /v1/messages/batches`) may hold; more → 400',
  ),
  BATCH_MAX_BYTES: setting(
    integer(1024, 32 * 1024 * 1024, 256 * 1024 * 1024),
    'the largest body of a message batch; over → 413',
  ),
  BATCH_MAX_OPEN: setting(
    integer(1, 20, 10_000),
    'the most batches an account may have in progress (or canceling) at once; one more → 429',
  ),
  BATCH_DEADLINE_S: setting(
    integer(1, 86_400, 86_400),
    "how long a message batch runs: its requests not answered by then are `expired` (Anthropic's `expires_at`, 24 h)",
  ),
  BATCH_SWEEP_INTERVAL_S: setting(
    integer(1, 10, 3600),
    'seconds between sweeps of the open batches (one api at a time): a batch past its deadline has its waiting ' +
      'requests `expired` and ends, a canceled one whose api died midway is finished',
  ),
  BATCH_WINDOW: setting(
    integer(1, 256, 100_000),
    'the requests of one message batch queued at once (at least twice the cap of the widest capped vendor it ' +
      'uses): the rest wait in Redis and an api queues an eighth more each time that many are answered, so one ' +
      "account's batches share its turns",
  ),
  BATCH_RESULTS_TTL_S: setting(
    integer(60, 29 * 86_400, 60 * 86_400),
    'how long a batch and its results stay retrievable after it ends (Anthropic keeps them 29 days)',
  ),
  FILES_MAX_BYTES: setting(
    integer(1, 512 * 1024 * 1024),
    "the largest file `POST /v1/files` stores (`purpose: user_data`; OpenAI's 512 MB); over → 413, nothing kept",
  ),
  FILES_BATCH_MAX_BYTES: setting(
    integer(1, 200 * 1024 * 1024),
    "the largest batch input file (`purpose: batch`; OpenAI's 200 MB); over → 413, nothing kept",
  ),
  FILES_BATCH_MAX_REQUESTS: setting(
    integer(1, 50_000),
    "the most requests (lines) a batch input file may hold (OpenAI's 50,000): more fails the batch at validation",
  ),
  FILES_BATCH_SPILL_RESULTS: setting(
    integer(10, 1000, 1_000_000),
    'the results of an OpenAI batch (`/v1/batches`) held in Redis before an api writes them out to its output ' +
      "and error files as a part: Redis holds at most about this many of a batch's results (an embedding's is " +
      'about 20 KB), whatever its size',
  ),
  RESPONSE_TTL_S: setting(
    integer(60, 30 * 86_400),
    'how long a stored response (`store`, the default) can be retrieved and chained with `previous_response_id`',
  ),
  STREAM_REPLAY_TTL_S: setting(
    integer(10, 600),
    'how long after its last event a stream (chat, completions, Responses) can still be resumed or replayed from ' +
      'its event log',
  ),
  STREAM_RESUME_GRACE_MS: setting(
    integer(0, 0),
    'a streaming client that disconnects leaves its request running this long for a resume unless the request ' +
      'asks otherwise (`x-stream-resume-grace-ms`); `0` cancels it (and its spend) within a second, as clients ' +
      'expect of closing a stream',
  ),
  STREAM_RESUME_GRACE_MAX_MS: setting(
    integer(0, 60_000, 3_600_000),
    'the most a request may ask for with `x-stream-resume-grace-ms`; a larger ask is cut to it',
  ),
  BLOB_SWEEP_INTERVAL_S: setting(integer(0, 600), 'seconds between sweeps of expired blobs; `0` disables them'),
  METRICS_PORT: setting(
    optionalInteger(0, { kind: 'unset', note: 'no listener' }, 65535),
    "port of a worker process's own `GET /metrics` listener (`--role=worker`; `0` picks a free one); the api " +
      'serves `/metrics` on `PORT`',
  ),
  METRICS_TOKEN: setting(
    optionalText({ kind: 'unset', note: '`/metrics` answered to this machine (loopback) only' }),
    "when set, `GET /metrics` (the api's, and a worker's METRICS_PORT listener) asks every scraper for " +
      "`Authorization: Bearer <token>`; unset, it answers loopback peers only (the socket's address, never " +
      '`X-Forwarded-For`) and refuses others 403',
  ),
  METRICS_PER_KEY: setting(
    flag(false),
    '`on` adds a `key_id` label to the request, token, cost and refusal metrics (a series per key: only with few keys)',
  ),
  METRICS_PER_ACCOUNT: setting(
    flag(false),
    "`on` adds an `account` label (the paying account's id) to `switchyard_queue_wait_seconds` and " +
      '`switchyard_queue_backlog` for the busiest `METRICS_TOP_ACCOUNTS` accounts, the rest under ' +
      '`account="other"` (it shows those accounts\' traffic to whoever reads `/metrics`)',
  ),
  METRICS_TOP_ACCOUNTS: setting(
    integer(1, 20, 1000),
    'with `METRICS_PER_ACCOUNT=on`: how many accounts (the busiest) get series of their own',
  ),
  OTEL_EXPORTER_OTLP_ENDPOINT: setting(
    httpUrl({ kind: 'unset', note: 'tracing off' }, true),
    'OpenTelemetry collector (OTLP/HTTP) base URL: set, every request is traced and its spans sent to ' +
      '`<url>/v1/traces`',
  ),
  OTEL_SERVICE_NAME: setting(
    optionalText({
      kind: 'derived',
      text: '`switchyard-api`, `switchyard-worker`, or `switchyard` for both in one process',
    }),
    '`service.name` of the exported spans',
  ),
  OTEL_TRACES_SAMPLER: setting(
    choice(traceSamplers, 'parentbased_always_on'),
    'which requests are traced: `parentbased_*` keep the decision of a `traceparent` the client sends and decide ' +
      'the rest by the rest of the name; the others ignore it',
  ),
  OTEL_TRACES_SAMPLER_ARG: setting(fraction(1), 'the ratio of traces the `traceidratio` samplers keep'),
  OTEL_BSP_SCHEDULE_DELAY: setting(
    integer(1, 5000),
    'ms between two exports of buffered spans (all are sent at shutdown)',
  ),
};

/** Patterned families: every variable of the environment whose name matches (and is not a fixed one) is read. */
const families = {
  apiKey: family(
    '<VENDOR>_API_KEY',
    vendorMember('API_KEY'),
    keyList(),
    'key(s) of a vendor; comma-separated keys are separate channels',
  ),
  baseUrl: family(
    '<VENDOR>_BASE_URL',
    // Built-in vendors only (others take their URL from CHANNELS_FILE): an unrelated FOO_BASE_URL in the environment is
    // none of ours.
    new RegExp(`^(${vendorDefinitions.map((v) => v.envPrefix).join('|')})_BASE_URL$`),
    httpUrl({ kind: 'derived', text: "the vendor's own", instances: builtInBaseUrls }, true),
    "base URL of a vendor's API",
  ),
  maxConcurrency: family(
    '<VENDOR>_MAX_CONCURRENCY',
    vendorMember('MAX_CONCURRENCY'),
    optionalInteger(0, { kind: 'unset', note: 'no cap' }),
    'calls in flight to that vendor across all workers (`0`: no cap)',
  ),
  rpm: family(
    '<VENDOR>_RPM',
    vendorMember('RPM'),
    optionalInteger(0, { kind: 'unset', note: 'no cap' }),
    'calls started per rolling minute to that vendor across all workers (`0`: no cap)',
  ),
  concurrency: family(
    'WORKER_CONCURRENCY_<QUEUE>',
    queueMember('WORKER_CONCURRENCY'),
    optionalInteger(1, { kind: 'derived', text: '`WORKER_CONCURRENCY`' }),
    'jobs in flight per worker process, one queue',
  ),
  maxWaiting: family(
    'QUEUE_MAX_WAITING_<QUEUE>',
    queueMember('QUEUE_MAX_WAITING'),
    optionalInteger(1, { kind: 'derived', text: '`QUEUE_MAX_WAITING`' }),
    'the waiting room of each lane of one queue',
  ),
  queueShards: family(
    'QUEUE_SHARDS_<QUEUE>',
    queueMember('QUEUE_SHARDS'),
    optionalInteger(1, { kind: 'derived', text: '`1`: one queue' }),
    'BullMQ queues one capability is spread over, each under its own hash tag (a Cluster runs them on different ' +
      'shards); workers serve all of them',
  ),
  realtimeVendorSessions: family(
    'REALTIME_VENDOR_SESSIONS_<VENDOR>',
    /^REALTIME_VENDOR_SESSIONS_([A-Z][A-Z0-9_]*)$/,
    optionalInteger(0, { kind: 'derived', text: '`100`; the mock: no cap' }),
    'Realtime sessions open at once with that vendor across all workers (`0`: no cap): each holds a slot for its ' +
      'life, and starts past the cap wait in the queue, fair between accounts',
  ),
  deadlineMs: family(
    'REQUEST_DEADLINE_MS_<QUEUE>',
    queueMember('REQUEST_DEADLINE_MS'),
    optionalInteger(1, { kind: 'derived', text: '`REQUEST_DEADLINE_MS`' }),
    'how long a request may wait and run, one queue',
  ),
};

/** Every variable the gateway reads, fixed names first, then the families: docs/configuration.md's table lists each. */
export const environmentVariables: readonly EnvironmentVariable[] = [
  ...Object.entries(fixed).map(([name, variable]): EnvironmentVariable => ({ name, ...variable })),
  ...Object.values(families),
];

/** How docs/configuration.md's table prints a default. */
export function formatDefault(fallback: SettingDefault): string {
  switch (fallback.kind) {
    case 'value': {
      const { value } = fallback;
      if (value === '' || (Array.isArray(value) && value.length === 0)) return 'empty';
      if (typeof value === 'boolean') return value ? '`on`' : '`off`';
      return `\`${Array.isArray(value) ? value.join(',') : String(value)}\``;
    }
    case 'perQueue':
      return queueNames.map((queue) => `${queue} \`${fallback.value[queue]}\``).join(', ');
    case 'unset':
      return fallback.note === undefined ? 'unset' : `unset (${fallback.note})`;
    case 'derived':
      return fallback.text;
  }
}

const isFixed = (name: string): name is keyof typeof fixed => Object.hasOwn(fixed, name);

/** The schema of one environment: every fixed variable, and each member of a family the environment holds. */
export function environmentSchema(env: Env) {
  const shape: Record<string, z.ZodType> = {};
  for (const [name, variable] of Object.entries(fixed)) shape[name] = variable.schema;
  for (const name of Object.keys(env)) {
    if (isFixed(name)) continue;
    const member = Object.values(families).find((f) => f.pattern.test(name));
    if (member) shape[name] = member.schema;
  }
  return z.object(shape);
}

type FixedValues = { [K in keyof typeof fixed]: z.output<(typeof fixed)[K]['schema']> };

/** The members of a family among the parsed values: [vendor prefix or queue, value]. */
function members<T>(values: Record<string, unknown>, of: Family<T>): Array<[string, T]> {
  const found: Array<[string, T]> = [];
  for (const [name, value] of Object.entries(values)) {
    const match = isFixed(name) ? null : of.pattern.exec(name);
    if (match) found.push([match[1]!, value as T]);
  }
  return found;
}

function perQueue(
  values: Record<string, unknown>,
  shared: number | undefined,
  of: Family<number | undefined>,
  defaults: Record<QueueName, number>,
): Record<QueueName, number> {
  const out = { ...defaults };
  if (shared !== undefined) for (const queue of queueNames) out[queue] = shared;
  for (const [queue, value] of members(values, of))
    if (value !== undefined) out[queue.toLowerCase() as QueueName] = value;
  return out;
}

/** The words each switch takes besides its own values, in pairs, in any case (`switchAliases`). */
const switchWordPairs = [
  ['on', 'off'],
  ['true', 'false'],
  ['yes', 'no'],
  ['1', '0'],
] as const;

/**
 * What a refused switch's message adds: the other words it takes. Switches are
 * found by what their schemas do (`yes` and `no` give different values, a stray
 * word is refused), so a new one gets the same message and the note cannot
 * drift from the parsing.
 */
const switchNotes = new Map(
  Object.entries(fixed).flatMap(([name, variable]): Array<[string, string]> => {
    const yes = variable.schema.safeParse('yes');
    const no = variable.schema.safeParse('no');
    if (!yes.success || !no.success || yes.data === no.data || variable.schema.safeParse('maybe').success) return [];
    const own = new Set(variable.type.split(/,\s*|\s+or\s+/));
    const also = switchWordPairs.filter((pair) => !pair.every((word) => own.has(word))).map((pair) => pair.join('/'));
    return [[name, ` (also ${also.slice(0, -1).join(', ')} or ${also.at(-1)}, in any case)`]];
  }),
);

/** One line naming each bad variable and what it must be. */
function describeIssues(issues: readonly z.core.$ZodIssue[], env: Env): string {
  const lines = new Map<string, string>();
  for (const issue of issues) {
    const name = String(issue.path[0] ?? '');
    if (lines.has(name)) continue;
    const quoted = issue.code === 'custom' && issue.params?.quotesValue === true;
    lines.set(
      name,
      quoted
        ? `${name} ${issue.message}`
        : `${name} ${issue.message}${switchNotes.get(name) ?? ''}, got "${env[name]}"`,
    );
  }
  return [...lines.values()].join('; ');
}

/**
 * The realtime queue's concurrency: WORKER_CONCURRENCY_REALTIME when set, else REALTIME_SESSIONS_PER_WORKER
 * (WORKER_CONCURRENCY sets the other queues).
 */
function realtimeSessionsPerWorker(
  values: Record<string, unknown>,
  sessions: number,
  concurrency: Record<QueueName, number>,
): Record<QueueName, number> {
  const own = members(values, families.concurrency).find(
    ([queue, value]) => queue === 'REALTIME' && value !== undefined,
  );
  return { ...concurrency, realtime: own ? (own[1] as number) : sessions };
}

/**
 * Cluster when nodes are named (by `REDIS_CLUSTER_NODES` or a `redis+cluster://` URL), else Sentinel when Sentinels
 * are, else one server.
 */
function redisTarget(values: FixedValues): RedisTarget {
  const url = values.REDIS_URL;
  const clusterUrl = /^redis(s?)\+cluster:\/\/(?:([^@/]*)@)?([^/?#]+)(\/.*)?$/.exec(url);
  if (clusterUrl) {
    const nodes = addressList().schema.parse(clusterUrl[3]);
    if (!nodes || nodes.length === 0)
      throw new Error(`Invalid configuration: REDIS_URL names no Cluster node, got "${url}"`);
    // The node list is the cluster's; what stays is a plain URL for credentials and TLS.
    return {
      kind: 'cluster',
      nodes,
      url: `redis${clusterUrl[1]}://${clusterUrl[2] ? `${clusterUrl[2]}@` : ''}${nodes[0]!.host}:${nodes[0]!.port}`,
    };
  }
  if (values.REDIS_CLUSTER_NODES && values.REDIS_CLUSTER_NODES.length > 0)
    return { kind: 'cluster', nodes: values.REDIS_CLUSTER_NODES, url };
  if (values.REDIS_SENTINELS && values.REDIS_SENTINELS.length > 0)
    return { kind: 'sentinel', sentinels: values.REDIS_SENTINELS, name: values.REDIS_SENTINEL_NAME, url };
  return { kind: 'single', url };
}

/**
 * OIDC_*: undefined when OIDC_ISSUER is unset; a setting that means nothing without it, or a missing client id, fails
 * the start.
 */
function oidcConfig(values: FixedValues): OidcConfig | undefined {
  const issuer = values.OIDC_ISSUER;
  if (issuer === undefined) {
    const stray: string[] = (['OIDC_CLIENT_ID', 'OIDC_CLIENT_SECRET', 'OIDC_REDIRECT_URL'] as const).filter(
      (name) => values[name] !== undefined,
    );
    if (values.OIDC_ONLY) stray.unshift('OIDC_ONLY');
    if (values.OIDC_TEAM_MAP.length > 0) stray.push('OIDC_TEAM_MAP');
    if (values.OIDC_ADMIN_GROUPS.length > 0) stray.push('OIDC_ADMIN_GROUPS');
    if (stray.length > 0)
      throw new Error(
        `Invalid configuration: ${stray.join(', ')} ${stray.length > 1 ? 'are' : 'is'} set without OIDC_ISSUER (the provider to sign in with)`,
      );
    return undefined;
  }
  if (values.OIDC_CLIENT_ID === undefined)
    throw new Error(
      "Invalid configuration: OIDC_ISSUER is set without OIDC_CLIENT_ID (the gateway's client id at the provider)",
    );
  // `openid` makes it OpenID Connect: asked whatever the list says.
  const scopes = values.OIDC_SCOPES.split(/\s+/).filter(Boolean);
  if (!scopes.includes('openid')) scopes.unshift('openid');
  return {
    issuer,
    clientId: values.OIDC_CLIENT_ID,
    clientSecret: values.OIDC_CLIENT_SECRET,
    redirectUrl: values.OIDC_REDIRECT_URL,
    scopes: scopes.join(' '),
    groupsClaim: values.OIDC_GROUPS_CLAIM,
    teamMap: values.OIDC_TEAM_MAP,
    adminGroups: values.OIDC_ADMIN_GROUPS,
    only: values.OIDC_ONLY,
    breakGlass: values.OIDC_BREAK_GLASS.map((email) => email.toLowerCase()),
    name: values.OIDC_NAME,
    timeoutMs: values.OIDC_TIMEOUT_MS,
  };
}

/** Reads and validates the whole environment; a bad value throws one line naming the variable. */
export function loadConfig(env: Env = process.env): Config {
  const parsed = environmentSchema(env).safeParse(env);
  if (!parsed.success) throw new Error(`Invalid configuration: ${describeIssues(parsed.error.issues, env)}`);
  const all = parsed.data as Record<string, unknown>;
  const values = all as FixedValues;
  const production = values.NODE_ENV === 'production';
  // An alert no one can verify is worse than none: a webhook URL needs its secret.
  if (values.ALERT_WEBHOOK_URL !== undefined && values.ALERT_WEBHOOK_SECRET === undefined) {
    throw new Error(
      'Invalid configuration: ALERT_WEBHOOK_URL is set without ALERT_WEBHOOK_SECRET: alerts are signed with it ' +
        '(set both, or neither to only record alerts)',
    );
  }
  if (values.SECRETS_KEY !== undefined && values.SECRETS_KEY.length < 32) {
    throw new Error(
      'Invalid configuration: SECRETS_KEY must be at least 32 characters (e.g. `openssl rand -base64 32`)',
    );
  }
  if (values.ALERT_WEBHOOK_SECRET !== undefined && values.ALERT_WEBHOOK_SECRET.length < 16) {
    throw new Error('Invalid configuration: ALERT_WEBHOOK_SECRET must be at least 16 characters');
  }
  // Production never bills an answer no vendor gave.
  if (production && values.MOCK_BILLING === 'on')
    throw new Error(
      'Invalid configuration: MOCK_BILLING=on is refused with NODE_ENV=production (the mock is never billed in ' +
        'production)',
    );

  const vendors: Record<string, VendorSettings> = {};
  const vendor = (prefix: string) =>
    (vendors[prefix] ??= { apiKeys: [], baseUrl: undefined, maxConcurrency: undefined, rpm: undefined });
  for (const [prefix, keys] of members(all, families.apiKey)) vendor(prefix).apiKeys = keys;
  for (const [prefix, url] of members(all, families.baseUrl)) vendor(prefix).baseUrl = url;
  for (const [prefix, max] of members(all, families.maxConcurrency)) vendor(prefix).maxConcurrency = max;
  for (const [prefix, rpm] of members(all, families.rpm)) vendor(prefix).rpm = rpm;

  const oidc = oidcConfig(values);

  const s3: S3Config | undefined =
    values.S3_BUCKET === undefined
      ? undefined
      : {
          bucket: values.S3_BUCKET,
          region: values.S3_REGION,
          forcePathStyle: values.S3_FORCE_PATH_STYLE ?? values.S3_ENDPOINT !== undefined,
          prefix: values.S3_PREFIX,
          ...(values.S3_ENDPOINT === undefined ? {} : { endpoint: values.S3_ENDPOINT }),
          ...(values.S3_ACCESS_KEY_ID === undefined ? {} : { accessKeyId: values.S3_ACCESS_KEY_ID }),
          ...(values.S3_SECRET_ACCESS_KEY === undefined ? {} : { secretAccessKey: values.S3_SECRET_ACCESS_KEY }),
        };

  return {
    port: values.PORT,
    host: values.HOST,
    redisUrl: values.REDIS_URL,
    redis: redisTarget(values),
    queueShards: perQueue(all, undefined, families.queueShards, {
      chat: 1,
      embeddings: 1,
      image: 1,
      audio: 1,
      video: 1,
      realtime: 1,
    }),
    adminToken: values.ADMIN_TOKEN,
    queueDashboardWrite: values.QUEUE_DASHBOARD_WRITE,
    logLevel: values.LOG_LEVEL,
    logFormat: values.LOG_FORMAT,
    catalogFile: values.CATALOG_FILE,
    // Read at start, so a file the gateway cannot use stops it before it connects to anything.
    mcp: {
      serversFile: values.MCP_SERVERS_FILE,
      servers: loadMcpServers(values.MCP_SERVERS_FILE),
      checkIntervalMs: values.MCP_CHECK_INTERVAL_MS,
    },
    secretsKey: values.SECRETS_KEY,
    modelAliases: new Map(values.MODEL_ALIASES),
    cache: {
      hitPrice: values.CACHE_HIT_PRICE,
      defaultTtlS: values.CACHE_DEFAULT_TTL_S,
      maxTtlS: values.CACHE_MAX_TTL_S,
      maxEntryBytes: values.CACHE_MAX_ENTRY_BYTES,
      maxAccountBytes: values.CACHE_MAX_ACCOUNT_BYTES,
      maxRequestBytes: values.CACHE_MAX_REQUEST_BYTES,
    },
    workerQueues: values.WORKER_QUEUES.filter((name): name is QueueName => name !== 'mcp'),
    workerMcp: values.WORKER_QUEUES.includes('mcp'),
    workerProcess: values.WORKER_PROCESS,
    concurrency: realtimeSessionsPerWorker(
      all,
      values.REALTIME_SESSIONS_PER_WORKER,
      perQueue(all, values.WORKER_CONCURRENCY, families.concurrency, queueDefaults.concurrency),
    ),
    realtimeWorker: {
      sessionsPerWorker: values.REALTIME_SESSIONS_PER_WORKER,
      vendorSessions: Object.fromEntries(
        members(all, families.realtimeVendorSessions).filter(
          (entry): entry is [string, number] => entry[1] !== undefined,
        ),
      ),
      maxSessionMs: values.REALTIME_MAX_SESSION_MS,
    },
    maxWaiting: perQueue(all, values.QUEUE_MAX_WAITING, families.maxWaiting, queueDefaults.maxWaiting),
    scheduling: {
      waitingFloor: values.QUEUE_WAITING_FLOOR,
      recountMs: values.QUEUE_RECOUNT_MS,
      tiersGranted: values.SERVICE_TIERS_GRANTED,
      tierNotGranted: values.SERVICE_TIER_NOT_GRANTED,
      priorityLeadTokens: values.SERVICE_TIER_PRIORITY_LEAD_TOKENS,
      nativeTierVendors: values.SERVICE_TIER_NATIVE_VENDORS,
      flexMinWaitMs: values.SERVICE_TIER_FLEX_MIN_WAIT_MS,
    },
    deadlineMs: perQueue(all, values.REQUEST_DEADLINE_MS, families.deadlineMs, queueDefaults.deadlineMs),
    flexDeadlineMs: values.FLEX_DEADLINE_MS,
    jobAttempts: values.JOB_ATTEMPTS,
    retryBaseMs: values.RETRY_BASE_MS,
    rateLimitWaitMs: values.RATE_LIMIT_WAIT_MS,
    workerLockMs: values.WORKER_LOCK_MS,
    sseKeepAliveMs: values.SSE_KEEPALIVE_MS,
    maxBodyBytes: values.MAX_BODY_BYTES,
    clientTimeouts: {
      headersMs: values.HEADERS_TIMEOUT_MS,
      requestMs: values.REQUEST_RECEIVE_TIMEOUT_MS,
      bodyIdleMs: values.BODY_IDLE_TIMEOUT_MS,
      keepAliveMs: values.KEEPALIVE_TIMEOUT_MS,
    },
    maxEventSocketsPerKey: values.MAX_EVENT_SOCKETS_PER_KEY,
    realtimeClient: {
      startWaitMs: values.REALTIME_START_WAIT_MS,
      maxFrameBytes: values.REALTIME_MAX_FRAME_BYTES,
      maxFramesPerSecond: values.REALTIME_MAX_FRAMES_PER_SECOND,
      idleMs: values.REALTIME_IDLE_MS,
      maxSessionsPerKey: values.MAX_REALTIME_SESSIONS_PER_KEY,
    },
    inlinePayloadBytes: values.INLINE_PAYLOAD_BYTES,
    shutdownGraceMs: values.SHUTDOWN_GRACE_MS,
    orphanAfterMs: values.ORPHAN_AFTER_MS,
    keyCacheTtlMs: values.KEY_CACHE_TTL_MS,
    pricingFile: values.PRICING_FILE,
    pricingMarkupPercent: values.PRICING_MARKUP_PERCENT,
    serviceTierPrices: {
      priority: decimalRatio(values.SERVICE_TIER_PRICE_PRIORITY),
      default: { numerator: 1, denominator: 1 },
      flex: decimalRatio(values.SERVICE_TIER_PRICE_FLEX),
    },
    defaultKeyRpm: values.DEFAULT_KEY_RPM,
    defaultKeyTpm: values.DEFAULT_KEY_TPM,
    maxKeysPerAccount: values.MAX_KEYS_PER_ACCOUNT,
    databaseUrl: values.DATABASE_URL,
    dataDir: values.DATA_DIR,
    usageRetentionDays: values.USAGE_RETENTION_DAYS,
    auditRetentionDays: values.AUDIT_RETENTION_DAYS,
    usageBufferRecords: values.USAGE_BUFFER_RECORDS,
    requestLog: values.REQUEST_LOG,
    alerts: {
      thresholds: values.ALERT_THRESHOLDS,
      webhookUrl: values.ALERT_WEBHOOK_URL,
      webhookSecret: values.ALERT_WEBHOOK_SECRET,
      timeoutMs: values.ALERT_WEBHOOK_TIMEOUT_MS,
      attempts: values.ALERT_WEBHOOK_ATTEMPTS,
      backoffMs: values.ALERT_WEBHOOK_BACKOFF_MS,
    },
    console: {
      signup: values.CONSOLE_SIGNUP,
      signupCreditUsd: values.SIGNUP_CREDIT_USD,
      publicPricing: values.CONSOLE_PUBLIC_PRICING,
      adminEmail: values.ADMIN_EMAIL,
      adminPassword: values.ADMIN_PASSWORD,
      sessionIdleSeconds: values.CONSOLE_SESSION_IDLE_S,
      sessionMaxSeconds: values.CONSOLE_SESSION_MAX_S,
      oidc,
    },
    blobDir: values.BLOB_DIR ?? `${values.DATA_DIR.replace(/\/+$/, '')}/blobs`,
    publicBaseUrl: values.PUBLIC_BASE_URL,
    trustProxy: values.TRUST_PROXY,
    blobUrlSecret: values.BLOB_URL_SECRET,
    blobUrlTtlSeconds: values.BLOB_URL_TTL_S,
    maxAudioBytes: values.MAX_AUDIO_BYTES,
    maxImageBytes: values.MAX_IMAGE_BYTES,
    asyncResultTtlSeconds: values.ASYNC_RESULT_TTL_S,
    responseTtlSeconds: values.RESPONSE_TTL_S,
    batches: {
      maxRequests: values.BATCH_MAX_REQUESTS,
      maxBytes: values.BATCH_MAX_BYTES,
      maxOpen: values.BATCH_MAX_OPEN,
      deadlineMs: values.BATCH_DEADLINE_S * 1000,
      resultsKeepMs: values.BATCH_RESULTS_TTL_S * 1000,
      sweepIntervalMs: values.BATCH_SWEEP_INTERVAL_S * 1000,
      window: values.BATCH_WINDOW,
      spillResults: values.FILES_BATCH_SPILL_RESULTS,
    },
    files: {
      maxBytes: values.FILES_MAX_BYTES,
      batchMaxBytes: values.FILES_BATCH_MAX_BYTES,
      batchMaxRequests: values.FILES_BATCH_MAX_REQUESTS,
    },
    streamReplayTtlSeconds: values.STREAM_REPLAY_TTL_S,
    streamResumeGraceMs: values.STREAM_RESUME_GRACE_MS,
    streamResumeGraceMaxMs: values.STREAM_RESUME_GRACE_MAX_MS,
    blobSweepIntervalSeconds: values.BLOB_SWEEP_INTERVAL_S,
    metrics: {
      port: values.METRICS_PORT,
      perKey: values.METRICS_PER_KEY,
      perAccount: values.METRICS_PER_ACCOUNT,
      topAccounts: values.METRICS_TOP_ACCOUNTS,
      token: values.METRICS_TOKEN,
    },
    fetchAllowHosts: values.FETCH_ALLOW_HOSTS,
    fetchAllowPrivate: values.FETCH_ALLOW_PRIVATE,
    vendors,
    channelsFile: values.CHANNELS_FILE,
    mock: {
      mode: production && values.MOCK_VENDOR === 'auto' ? 'off' : values.MOCK_VENDOR,
      billed: values.MOCK_BILLING === 'on',
      streamDelayMs: values.MOCK_STREAM_DELAY_MS,
      videoMs: values.MOCK_VIDEO_MS,
    },
    vendorLeaseMs: values.VENDOR_LEASE_MS,
    vendorPace: values.VENDOR_PACE_PERCENT / 100,
    promptAffinityOff: values.PROMPT_CACHE_AFFINITY_OFF,
    promptWarmWaitMs: values.PROMPT_CACHE_WARM_WAIT_MS,
    promptCacheLifetimeMs: values.PROMPT_CACHE_LIFETIME_MS,
    channelCooldowns: {
      authMs: values.CHANNEL_AUTH_COOLDOWN_MS,
      failureMs: values.CHANNEL_COOLDOWN_MS,
      failureThreshold: values.CHANNEL_FAILURE_THRESHOLD,
    },
    vendorTimeouts: {
      connectMs: values.VENDOR_CONNECT_TIMEOUT_MS,
      firstByteMs: values.VENDOR_FIRST_BYTE_TIMEOUT_MS,
      idleMs: values.VENDOR_IDLE_TIMEOUT_MS,
    },
    bflPollIntervalMs: values.BFL_POLL_INTERVAL_MS,
    videoPollIntervalMs: values.VIDEO_POLL_INTERVAL_MS,
    s3,
    tracing: {
      endpoint: values.OTEL_EXPORTER_OTLP_ENDPOINT,
      serviceName: values.OTEL_SERVICE_NAME,
      sampler: values.OTEL_TRACES_SAMPLER,
      samplerArg: values.OTEL_TRACES_SAMPLER_ARG,
      exportDelayMs: values.OTEL_BSP_SCHEDULE_DELAY,
    },
  };
}
