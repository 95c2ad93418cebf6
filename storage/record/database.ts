import { Kysely, PostgresDialect, sql, type Generated } from 'kysely';
import { recordUnreachable } from '../../shared/errors.js';
import pg from 'pg';
import type { UsageMetric } from '../../shared/accounts.js';
import type { RequestLogColumns, UsageColumns } from '../../shared/money/usage.js';
import type { AlertKind, AlertState } from '../../shared/alerts.js';
import { ensureIndexes, migrateRecord } from './migrations.js';

/**
 * The record: accounts, keys (hashed secrets only), credits and the ledger,
 * and one usage row per finished request, in PostgreSQL. Every process reads
 * and writes it over the PostgreSQL wire through `pg` — a server named by
 * `DATABASE_URL`, or the embedded default (`embedded.ts`) that `npm start`
 * serves on a socket under `DATA_DIR` — so there is one driver and one SQL
 * dialect. Money is integer micro-dollars (`bigint`), read back as numbers
 * (exact below 2^53 micro-dollars, 9 billion USD).
 */

export interface AccountsTable {
  id: string;
  email: string;
  name: string;
  role: string;
  created: number;
  password: string;
  unlimited: boolean;
  disabled: boolean;
  deleted: boolean;
  /** Sum of the ledger. */
  credits_micros: number;
  /** Sum of the cost of the usage rows written (balance = credits − settled). */
  settled_micros: number;
  playground_key: string | null;
  /** Its share of contended capacity (1–100, default 1): `shared/scheduling`. */
  weight: Generated<number>;
  /**
   * The service tiers an admin granted it, a comma list (`priority,default`); null: the configured default
   * (SERVICE_TIERS_GRANTED).
   */
  service_tiers: Generated<string | null>;
  /**
   * The longest its answers stay in the response cache, seconds (an admin's cap); 0: never cached; null: no cap of its
   * own.
   */
  cache_max_ttl_s: Generated<number | null>;
  /** 'person' (someone who signs in; every account before teams) or 'team' (shared by the people in `team_members`). */
  kind: Generated<'person' | 'team'>;
  /** The team's budget per `budget_period`, micros; null: none (the balance alone bounds it). */
  budget_micros: Generated<number | null>;
  budget_period: Generated<BudgetPeriod | null>;
  /** A person signed in through OpenID Connect: its provider's issuer and its subject there. */
  oidc_issuer: Generated<string | null>;
  oidc_subject: Generated<string | null>;
  /**
   * The MCP tools its keys may use, a JSON list of `server/tool` patterns (shared/mcp/tool-rules.ts); null: every tool.
   */
  mcp_tools: Generated<string | null>;
}

/** How often a budget starts again: at 00:00 UTC each day, each Monday, each month's first day. */
export type BudgetPeriod = 'day' | 'week' | 'month';
export type TeamRole = 'owner' | 'member' | 'viewer';

/** Who besides its own person is in a team (a person's own account is a team of one it owns, without a row here). */
export interface TeamMembersTable {
  team_id: string;
  /** A person's account id. */
  member_id: string;
  role: TeamRole;
  /** What the keys this member made in the team may spend per `cap_period`, micros; null: no cap of their own. */
  cap_micros: number | null;
  cap_period: BudgetPeriod | null;
  /** Who put them there: the console (a team owner), an admin, or the identity provider's groups at sign-in. */
  source: Generated<'console' | 'admin' | 'oidc'>;
  created: number;
}

export interface ApiKeysTable {
  id: string;
  account_id: string;
  name: string;
  created: number;
  hash: string;
  hint: string;
  limit_micros: number | null;
  rpm: number | null;
  tpm: number | null;
  models: string | null;
  expires: number | null;
  /** Sum of the cost of the key's usage rows written. */
  spent_micros: number;
  /** Unix seconds of its newest usage row written. */
  last_used: number | null;
  /** Unix seconds; null while the key works. */
  revoked: number | null;
  /** The limits an admin set (null: none): ceilings a member of the account may only tighten below. */
  admin_limit_micros: number | null;
  admin_rpm: number | null;
  admin_tpm: number | null;
  admin_models: string | null;
  admin_expires: number | null;
  /**
   * Its default response-cache TTL, seconds (a request without Cache-Control is cached as with `max-age=<it>`); null or
   * 0: none. Not a limit: no `admin_` ceiling.
   */
  cache_ttl_s: Generated<number | null>;
  /**
   * The person (account id) who made it; null for keys made before teams (their account's own) and by the admin API.
   */
  created_by: Generated<string | null>;
  /** Its budget per `budget_period`, micros, beside the lifetime `limit_micros`; null: none. */
  budget_micros: Generated<number | null>;
  budget_period: Generated<BudgetPeriod | null>;
  /**
   * The MCP tools it may use within its account's, a JSON list of `server/tool` patterns; null: every tool its account
   * allows.
   */
  mcp_tools: Generated<string | null>;
}

export interface LedgerTable {
  id: Generated<string>;
  account_id: string;
  amount_micros: number;
  /** The account's hot balance right after the entry, as admission saw it. */
  balance_micros: number | null;
  note: string;
  time: number;
}

export interface UsageTable extends Omit<UsageColumns, 'cache_write_tokens'>, RequestLogColumns {
  status: string;
  /** Prompt tokens written to the vendor's prompt cache (part of `input_tokens`); 0 on rows from before it was kept. */
  cache_write_tokens: Generated<number>;
  /** The worker's settlement is in (and counted in the totals); false on a row only the api's log event wrote. */
  settled: Generated<boolean>;
  /** The tier that served it (priority, default or flex): its token prices were that tier's. */
  service_tier: Generated<string>;
  /**
   * How the response cache took part (`hit`, `miss`, `coalesced`, shared/money/usage.ts `cacheMarks`); null when it did
   * not.
   */
  cache: string | null;
  /** Integer micro-dollars the response cache saved the request (0 when none). */
  saved_micros: Generated<number>;
  /**
   * Integer micro-dollars the vendor's prompt cache saved the request, signed (0 when none, and on rows from before it
   * was kept).
   */
  prompt_cache_saved_micros: Generated<number>;
}

/** One row per UTC day, account, key and model: the sums of its usage rows, one column per usage metric. */
export type UsageDailyTable = { day: string; account_id: string; key_id: string; model: string } & Record<
  UsageMetric,
  number
>;

export interface RecordMetaTable {
  name: string;
  value: string;
}

/**
 * One change, as the audit log keeps it (storage/record/audit-log.ts): append-only, chained by `prev_hash` and `hash`.
 */
export interface AuditLogTable {
  id: Generated<number>;
  /** Unix milliseconds. */
  time: number;
  /** An account id, or `admin-token`, `cli`, `system`, `anonymous`. */
  actor: string;
  actor_email: string | null;
  /** The team (account) the change concerns. */
  team_id: string | null;
  action: string;
  /** What it concerns: a key id, an account id, a channel. */
  target: string | null;
  ip: string | null;
  user_agent: string | null;
  /** The changed fields only, before and after. */
  before: unknown;
  after: unknown;
  prev_hash: string;
  hash: string;
}

/** A budget alert and its delivery (shared/alerts.ts; migration 0013_alerts). Times in unix ms. */
export interface AlertsTable {
  id: string;
  team_id: string;
  kind: AlertKind;
  scope_id: string;
  period: BudgetPeriod | null;
  /** Unix seconds; null for a key's lifetime limit. */
  period_start: number | null;
  period_end: number | null;
  threshold_percent: number;
  limit_micros: number;
  spent_micros: number;
  /** When the settlement crossed it (unix ms). */
  created: number;
  state: AlertState;
  attempts: Generated<number>;
  /** The webhook's HTTP status at the last attempt; null when it gave none (a network error, a timeout). */
  last_status: number | null;
  last_error: string | null;
  delivered_at: number | null;
}

/**
 * An upstream MCP server an admin added (storage/record/mcp-servers.ts; migration 0016_mcp_servers). Times in unix ms.
 */
export interface McpServersTable {
  name: string;
  /** Where it is reached, as it may be shown (no user, password, query or fragment). */
  url: string;
  transport: 'streamable-http' | 'sse';
  /** A JSON list of the names of the headers it is sent. */
  header_names: string;
  /** Its whole URL and headers, sealed with SECRETS_KEY (shared/secret-box.ts); null when it has neither to hide. */
  secret: string | null;
  max_concurrency: number;
  timeout_ms: number;
  price_per_call_micros: number;
  keep_arguments: boolean;
  created: number;
  updated: number;
}

export interface RecordTables {
  accounts: AccountsTable;
  api_keys: ApiKeysTable;
  team_members: TeamMembersTable;
  ledger: LedgerTable;
  usage: UsageTable;
  usage_daily: UsageDailyTable;
  record_meta: RecordMetaTable;
  audit_log: AuditLogTable;
  alerts: AlertsTable;
  mcp_servers: McpServersTable;
}

export type RecordDb = Kysely<RecordTables>;

// int8 and numeric as numbers (micro-dollars and token counts stay far below 2^53); `date` as its text.
const int8 = 20;
const numeric = 1700;
const date = 1082;
const types = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === int8 || oid === numeric) return (text: string) => Number(text);
    if (oid === date) return (text: string) => text;
    return pg.types.getTypeParser(oid, format);
  },
};

export interface OpenRecordOptions {
  /** Connections this process keeps at most. */
  max?: number;
  /** Run the migrations before returning (each process may: they take a lock and skip what is done). */
  migrate?: boolean;
}

/** Opens the record at a `postgres://` URL (a server, or the embedded default's socket). */
export async function openRecord(url: string, options: OpenRecordOptions = {}): Promise<RecordDb> {
  const pool = new pg.Pool({
    connectionString: url,
    max: options.max ?? 8,
    types,
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: 30_000,
    // A statement that hangs (a lock held elsewhere) fails instead of holding a request.
    statement_timeout: 30_000,
    application_name: 'switchyard',
    // Idle connections do not keep a process alive that has nothing else to do (a CLI, a test).
    allowExitOnIdle: true,
  });
  // A connection the server ends (a restart, a terminated backend) is an 'error' event on its client. Idle in the pool,
  // the pool hears it; checked out between two statements (inside a transaction), only the client does, and an event
  // nobody listens to would end the process. The statement that next uses the client fails instead, and the pool
  // drops a client that can no longer be queried when it comes back.
  pool.on('error', () => undefined);
  pool.on('connect', (client) => client.on('error', () => undefined));
  // An error taking a connection is the server away (refused, reset, starting up), and so is a connection lost under a
  // statement (a restart, a network cut): marked so, an answer names the record, not the queue or a bug
  // (shared/errors.ts recordUnavailable).
  const marked = {
    connect: async () => {
      const client = await pool.connect().catch((error: unknown) => {
        throw markUnreachable(error);
      });
      if (!markedClients.has(client)) {
        markedClients.add(client);
        const query = client.query.bind(client) as (...args: unknown[]) => unknown;
        (client as { query: unknown }).query = (...args: unknown[]) => {
          const result = query(...args);
          // A statement's promise (Kysely's); a cursor or a callback's call is left as it is.
          if (result instanceof Promise)
            return result.catch((error: unknown) => {
              throw connectionLost(error) ? markUnreachable(error) : error;
            });
          return result;
        };
      }
      return client;
    },
    end: () => pool.end(),
    options: pool.options,
  };
  const db = new Kysely<RecordTables>({ dialect: new PostgresDialect({ pool: marked }) });
  if (options.migrate !== false) {
    try {
      await migrateRecord(db as unknown as Kysely<unknown>);
      await ensureIndexes(db as unknown as Kysely<unknown>);
    } catch (error) {
      await db.destroy().catch(() => undefined);
      throw error;
    }
  }
  return db;
}

/** The pooled clients whose statements mark a lost connection (each once: a client is handed out many times). */
const markedClients = new WeakSet<pg.PoolClient>();

/**
 * The errors of a connection lost under a statement, as `pg` and the socket give them (the server's answers have a
 * SQLSTATE).
 */
const lostConnection =
  /^(Connection terminated|Client has encountered a connection error|Client was closed and is not queryable)/;
const socketCodes = new Set([
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ECONNREFUSED',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTCONN',
]);

function connectionLost(error: unknown): boolean {
  if (!error || typeof error !== 'object' || error instanceof pg.DatabaseError) return false;
  const { code, message } = error as { code?: unknown; message?: unknown };
  return (
    (typeof code === 'string' && socketCodes.has(code)) || (typeof message === 'string' && lostConnection.test(message))
  );
}

function markUnreachable(error: unknown): unknown {
  if (error && typeof error === 'object' && !(recordUnreachable in error))
    Object.defineProperty(error, recordUnreachable, { value: true });
  return error;
}

/** True when the record answers a trivial query. */
export async function recordReachable(db: RecordDb): Promise<boolean> {
  try {
    await sql`select 1`.execute(db);
    return true;
  } catch {
    return false;
  }
}

/** A URL with its password hidden, for logs. */
export function redactDatabaseUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return 'postgres://…';
  }
}
