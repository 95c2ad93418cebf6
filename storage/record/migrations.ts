import { randomBytes } from 'node:crypto';
import { sql, type Kysely } from 'kysely';
import { Migrator, type Migration, type MigrationProvider } from 'kysely/migration';

/**
 * The record's schema, versioned: Kysely's migrator applies what is missing
 * at start, under PostgreSQL's advisory lock, so several processes starting
 * at once apply each migration once. A migration never rewrites or locks a
 * large table for long: new columns are nullable or have constant defaults,
 * and an index on a table that may already be large is built CONCURRENTLY
 * after the migrations (`ensureIndexes`), outside their lock and any
 * transaction. Each migration opens its own transaction.
 */
const migrations: Record<string, Migration> = {
  '0001_record': {
    async up(db: Kysely<unknown>) {
      await db.transaction().execute(async (db) => {
        await sql`
        create table accounts (
          id text primary key,
          email text not null default '',
          name text not null default '',
          role text not null default 'member',
          created bigint not null,
          password text not null default '',
          unlimited boolean not null default false,
          disabled boolean not null default false,
          deleted boolean not null default false,
          credits_micros bigint not null default 0,
          settled_micros bigint not null default 0,
          playground_key text
        )`.execute(db);
        // An email names one live account, in any letter case.
        await sql`create unique index accounts_email on accounts (lower(email)) where email <> '' and not deleted`.execute(
          db,
        );
        await sql`
        create table api_keys (
          id text primary key,
          account_id text not null references accounts (id),
          name text not null default '',
          created bigint not null,
          hash text not null unique,
          hint text not null default '',
          limit_micros bigint,
          rpm integer,
          tpm integer,
          models text,
          expires bigint,
          spent_micros bigint not null default 0,
          last_used bigint,
          revoked bigint
        )`.execute(db);
        await sql`create index api_keys_account on api_keys (account_id)`.execute(db);
        await sql`
        create table ledger (
          id bigserial primary key,
          account_id text not null references accounts (id),
          amount_micros bigint not null,
          balance_micros bigint,
          note text not null default '',
          time bigint not null
        )`.execute(db);
        await sql`create index ledger_account on ledger (account_id, id desc)`.execute(db);
        await sql`
        create table usage (
          request_id text primary key,
          account_id text not null,
          key_id text not null,
          model text not null,
          vendor text not null default '',
          input_tokens bigint not null default 0,
          cached_tokens bigint not null default 0,
          output_tokens bigint not null default 0,
          images integer not null default 0,
          audio_seconds double precision not null default 0,
          video_seconds double precision not null default 0,
          cost_micros bigint not null default 0,
          status text not null,
          created bigint not null,
          duration_ms integer not null default 0
        )`.execute(db);
        await sql`create index usage_account_created on usage (account_id, created desc)`.execute(db);
        // Retention deletes the oldest rows in small batches through this index.
        await sql`create index usage_created on usage (created)`.execute(db);
        await sql`
        create table usage_daily (
          day date not null,
          account_id text not null,
          key_id text not null,
          model text not null,
          requests bigint not null default 0,
          input_tokens bigint not null default 0,
          cached_tokens bigint not null default 0,
          output_tokens bigint not null default 0,
          images bigint not null default 0,
          audio_seconds bigint not null default 0,
          video_seconds bigint not null default 0,
          cost_micros bigint not null default 0,
          primary key (account_id, day, key_id, model)
        )`.execute(db);
        await sql`create index usage_daily_day on usage_daily (day)`.execute(db);
        await sql`create table record_meta (name text primary key, value text not null)`.execute(db);
      });
    },
  },
  // The request log is the usage row: every keyed request gets one, written from the api's event (how it was
  // answered) and the worker's settlement (what it used), in either order. `settled` says the settlement is in
  // (and counted in the totals); rows written before the log existed were all settled.
  '0002_request_log': {
    async up(db: Kysely<unknown>) {
      await db.transaction().execute(async (db) => {
        await sql`
          alter table usage
            add column settled boolean not null default true,
            add column answer_id text,
            add column endpoint text,
            add column channel text,
            add column stream boolean,
            add column http_status smallint,
            add column error_code text,
            add column finish_reason text,
            add column latency_ms integer,
            add column ttft_ms integer,
            add column queue_ms integer,
            add column attempts smallint,
            add column fallback text`.execute(db);
      });
    },
  },
  // The limits an admin set on a key, beside the key's own (in force) values: ceilings its account's members may
  // only tighten below. Keys of member accounts made before could have been set by an admin or by the member:
  // whoever it was, their limits become ceilings (an admin can lift them).
  '0003_key_admin_limits': {
    async up(db: Kysely<unknown>) {
      await db.transaction().execute(async (db) => {
        await sql`
          alter table api_keys
            add column admin_limit_micros bigint,
            add column admin_rpm integer,
            add column admin_tpm integer,
            add column admin_models text,
            add column admin_expires bigint`.execute(db);
        await sql`
          update api_keys k
            set admin_limit_micros = k.limit_micros, admin_rpm = k.rpm, admin_tpm = k.tpm, admin_models = k.models, admin_expires = k.expires
            from accounts a
            where a.id = k.account_id and a.role = 'member' and k.revoked is null`.execute(db);
      });
    },
  },
  // Which record this is, for the stamp on Redis's hot state (hot-state.ts): a random id made once, and a
  // high-water mark every process raises as it runs. A restore brings back the mark the backup had, behind Redis's.
  '0004_record_identity': {
    async up(db: Kysely<unknown>) {
      await db.transaction().execute(async (db) => {
        await sql`
          create table record_identity (
            one boolean primary key default true check (one),
            id text not null,
            epoch bigint not null default 0,
            created bigint not null
          )`.execute(db);
        await sql`insert into record_identity (id, created) values (${`rec_${randomBytes(12).toString('hex')}`}, ${Math.floor(Date.now() / 1000)})`.execute(
          db,
        );
      });
    },
  },
  // An account's share of contended capacity against the others' (shared/scheduling); set by an admin.
  '0005_account_weight': {
    async up(db: Kysely<unknown>) {
      await sql`alter table accounts add column if not exists weight integer not null default 1 check (weight between 1 and 100)`.execute(
        db,
      );
    },
  },
  // The tier that served each request (`service_tier`: priority, default or flex), billed at its own prices. A constant
  // default: the column is added without rewriting the table, and rows from before were all served as default.
  '0006_service_tier': {
    async up(db: Kysely<unknown>) {
      await sql`alter table usage add column if not exists service_tier text not null default 'default'`.execute(db);
    },
  },
  // The service tiers an admin granted an account (shared/scheduling/service-tier.ts): a comma list in the tiers'
  // order, `priority,default,flex` at most; NULL (every account before) is the configured default
  // (SERVICE_TIERS_GRANTED).
  '0007_account_service_tiers': {
    async up(db: Kysely<unknown>) {
      await sql`
        alter table accounts add column if not exists service_tiers text
          constraint accounts_service_tiers_check check (service_tiers ~ '^(priority|default|flex)(,(priority|default|flex))*$')`.execute(
        db,
      );
    },
  },
  // How the response cache took part in each request (`cache`: hit, miss or coalesced; NULL, as every row before,
  // when it did not) and what it saved (`saved_micros`), summed in the day totals too. Nullable or with a constant
  // default: added without rewriting either table. The check is added NOT VALID, so the usage table is not scanned
  // under the lock: every row before is NULL, and every row written after is checked.
  '0008_cache_marks': {
    async up(db: Kysely<unknown>) {
      await db.transaction().execute(async (db) => {
        await sql`
          alter table usage
            add column if not exists cache text,
            add column if not exists saved_micros bigint not null default 0`.execute(db);
        const checked = await sql`select 1 from pg_constraint where conname = 'usage_cache_check'`.execute(db);
        if (checked.rows.length === 0) {
          await sql`alter table usage add constraint usage_cache_check check (cache in ('hit', 'miss', 'coalesced')) not valid`.execute(
            db,
          );
        }
        await sql`alter table usage_daily add column if not exists saved_micros bigint not null default 0`.execute(db);
      });
    },
  },
  // The response cache's two settings: a key's default TTL (`api_keys.cache_ttl_s`, set by its owner: a request of
  // the key without Cache-Control is cached as with `max-age=<it>`) and an account's cap (`accounts.cache_max_ttl_s`,
  // an admin's; 0 forbids caching). Seconds; NULL (every row before) is none. Nullable without a default: added
  // without rewriting either table (their checks read the rows once: accounts and keys, never the large usage tables).
  '0009_cache_settings': {
    async up(db: Kysely<unknown>) {
      await db.transaction().execute(async (db) => {
        await sql`
          alter table api_keys add column if not exists cache_ttl_s integer
            constraint api_keys_cache_ttl_s_check check (cache_ttl_s >= 0)`.execute(db);
        await sql`
          alter table accounts add column if not exists cache_max_ttl_s integer
            constraint accounts_cache_max_ttl_s_check check (cache_max_ttl_s >= 0)`.execute(db);
      });
    },
  },
  // The message a request's error told its client (`error_message`, its first 500 characters), beside its code: the
  // console's Activity shows what the client read. Nullable without a default (every row before has none): added
  // without rewriting the table.
  '0010_error_message': {
    async up(db: Kysely<unknown>) {
      await sql`alter table usage add column if not exists error_message text`.execute(db);
    },
  },
  // Teams, the people in them, and budgets that reset. An account is a team: it holds the money (balance, keys,
  // weight, tiers, history) as before. A person is an account of kind 'person' (every account before this one is,
  // each the one owner of its own team of one, with nothing to move); a team made for several people is an account of
  // kind 'team', with no email or password of its own. `team_members` names who else is in a team and their role
  // (owner: members, keys, limits; member: own keys, own usage; viewer: usage only), with an optional cap on what
  // the keys they made may spend per period. A key remembers who made it (`created_by`, a person's account id; NULL
  // for keys from before, which are their account's own). A team's and a key's budget per day, week or month sit
  // beside the key's lifetime limit. A person signed in through OpenID Connect is found again by its issuer and
  // subject. Every column is nullable or has a constant default: nothing is rewritten.
  '0011_teams': {
    async up(db: Kysely<unknown>) {
      await db.transaction().execute(async (db) => {
        await sql`
          alter table accounts
            add column if not exists kind text not null default 'person'
              constraint accounts_kind_check check (kind in ('person', 'team')),
            add column if not exists budget_micros bigint
              constraint accounts_budget_micros_check check (budget_micros >= 0),
            add column if not exists budget_period text
              constraint accounts_budget_period_check check (budget_period in ('day', 'week', 'month')),
            add column if not exists oidc_issuer text,
            add column if not exists oidc_subject text`.execute(db);
        await sql`create unique index if not exists accounts_oidc on accounts (oidc_issuer, oidc_subject) where oidc_subject is not null`.execute(
          db,
        );
        await sql`
          alter table api_keys
            add column if not exists created_by text,
            add column if not exists budget_micros bigint
              constraint api_keys_budget_micros_check check (budget_micros >= 0),
            add column if not exists budget_period text
              constraint api_keys_budget_period_check check (budget_period in ('day', 'week', 'month'))`.execute(db);
        await sql`
          create table if not exists team_members (
            team_id text not null references accounts (id),
            member_id text not null references accounts (id),
            role text not null check (role in ('owner', 'member', 'viewer')),
            cap_micros bigint check (cap_micros >= 0),
            cap_period text check (cap_period in ('day', 'week', 'month')),
            source text not null default 'console' check (source in ('console', 'admin', 'oidc')),
            created bigint not null,
            primary key (team_id, member_id)
          )`.execute(db);
        await sql`create index if not exists team_members_member on team_members (member_id)`.execute(db);
      });
    },
  },
  // The audit log (storage/record/audit-log.ts): who changed what, when and from where, one row per change, each row
  // chained to the one before by a SHA-256 hash. Append-only: a trigger refuses every UPDATE, every TRUNCATE, and every
  // DELETE but the retention's, which names (in a setting local to its own transaction) the newest id it prunes and may
  // delete only rows up to it. The trigger stops the gateway's own code and a careless hand; an attacker who owns the
  // database can disable it, and `npm run audit -- verify` is what finds what they did.
  '0012_audit_log': {
    async up(db: Kysely<unknown>) {
      await db.transaction().execute(async (db) => {
        await sql`
          create table if not exists audit_log (
            id bigserial primary key,
            time bigint not null,
            actor text not null,
            actor_email text,
            team_id text,
            action text not null,
            target text,
            ip text,
            user_agent text,
            before jsonb,
            after jsonb,
            prev_hash text not null,
            hash text not null
          )`.execute(db);
        await sql`create index if not exists audit_log_team on audit_log (team_id, id desc) where team_id is not null`.execute(
          db,
        );
        await sql`create index if not exists audit_log_action on audit_log (action, id desc)`.execute(db);
        await sql`create index if not exists audit_log_time on audit_log (time)`.execute(db);
        await sql`
          create or replace function audit_log_guard() returns trigger language plpgsql as $$
          declare
            through text := current_setting('switchyard.audit_prune_through', true);
          begin
            if tg_op = 'DELETE' and coalesce(through, '') ~ '^[0-9]{1,18}$' then
              if old.id <= through::bigint then
                return old;
              end if;
            end if;
            raise exception 'audit_log is append-only: % refused', tg_op using errcode = 'insufficient_privilege';
          end
          $$`.execute(db);
        await sql`drop trigger if exists audit_log_append_only on audit_log`.execute(db);
        await sql`create trigger audit_log_append_only before update or delete on audit_log for each row execute function audit_log_guard()`.execute(
          db,
        );
        await sql`drop trigger if exists audit_log_no_truncate on audit_log`.execute(db);
        await sql`create trigger audit_log_no_truncate before truncate on audit_log for each statement execute function audit_log_guard()`.execute(
          db,
        );
      });
    },
  },
  // Budget alerts: one row per threshold crossed, by its id (team, budget,
  // period, threshold), so a crossing written twice is one row; its delivery's state beside it (shared/alerts.ts).
  '0013_alerts': {
    async up(db: Kysely<unknown>) {
      await db.transaction().execute(async (db) => {
        await sql`
          create table if not exists alerts (
            id text primary key,
            team_id text not null,
            kind text not null check (kind in ('team', 'key', 'member', 'key_lifetime')),
            scope_id text not null,
            period text check (period in ('day', 'week', 'month')),
            period_start bigint,
            period_end bigint,
            threshold_percent integer not null check (threshold_percent between 1 and 100),
            limit_micros bigint not null,
            spent_micros bigint not null,
            created bigint not null,
            state text not null check (state in ('pending', 'delivered', 'failed', 'no_webhook')),
            attempts integer not null default 0,
            last_status integer,
            last_error text,
            delivered_at bigint
          )`.execute(db);
        await sql`create index if not exists alerts_team on alerts (team_id, created desc, id desc)`.execute(db);
        await sql`create index if not exists alerts_created on alerts (created desc, id desc)`.execute(db);
      });
    },
  },
  // The MCP tools a key and a team may use (shared/mcp/tool-rules.ts): a JSON list of `server/tool` patterns; null:
  // every tool.
  '0014_mcp_tools': {
    async up(db: Kysely<unknown>) {
      await db.transaction().execute(async (db) => {
        await sql`alter table api_keys add column if not exists mcp_tools text`.execute(db);
        await sql`alter table accounts add column if not exists mcp_tools text`.execute(db);
      });
    },
  },
  // An MCP call's bytes in and out, and its arguments where its server keeps them (nullable: nothing rewritten).
  '0015_request_bytes': {
    async up(db: Kysely<unknown>) {
      await db.transaction().execute(async (db) => {
        await sql`alter table usage add column if not exists bytes_in bigint, add column if not exists bytes_out bigint, add column if not exists arguments text`.execute(
          db,
        );
      });
    },
  },
  // Upstream MCP servers added by an admin (storage/record/mcp-servers.ts): a server's URL and headers sealed with
  // SECRETS_KEY.
  '0016_mcp_servers': {
    async up(db: Kysely<unknown>) {
      await sql`create table if not exists mcp_servers (
          name text primary key,
          url text not null,
          transport text not null check (transport in ('streamable-http', 'sse')),
          header_names text not null default '[]',
          secret text,
          max_concurrency integer not null,
          timeout_ms integer not null,
          price_per_call_micros bigint not null default 0,
          keep_arguments boolean not null default false,
          created bigint not null,
          updated bigint not null
        )`.execute(db);
    },
  },
  // What the vendor's prompt cache did for each request: the prompt tokens it wrote to that cache
  // (`cache_write_tokens`, beside `cached_tokens`, those it read) and what that saved (`prompt_cache_saved_micros`,
  // signed: a cache write is dearer than plain input), summed in the day totals too. A constant default: added without
  // rewriting either table, and every row before reads 0 (nothing was kept of either).
  '0017_prompt_cache_saving': {
    async up(db: Kysely<unknown>) {
      await db.transaction().execute(async (db) => {
        await sql`
          alter table usage
            add column if not exists cache_write_tokens bigint not null default 0,
            add column if not exists prompt_cache_saved_micros bigint not null default 0`.execute(db);
        await sql`
          alter table usage_daily
            add column if not exists cache_write_tokens bigint not null default 0,
            add column if not exists prompt_cache_saved_micros bigint not null default 0`.execute(db);
      });
    },
  },
};

/** The request log's indexes: name and definition (after `on usage`). */
export const requestLogIndexes: ReadonlyArray<readonly [string, string]> = [
  ['usage_log_account', '(account_id, created desc, request_id desc)'],
  ['usage_log_key', '(key_id, created desc, request_id desc)'],
  ['usage_log_created', '(created desc, request_id desc)'],
  ['usage_log_model', '(model, created desc, request_id desc)'],
  ['usage_log_status', "(status, created desc, request_id desc) where status <> 'completed'"],
  ['usage_log_answer', '(answer_id) where answer_id is not null'],
];

/**
 * Indexes the log's replace: by account (now with the tie-break), and by time (retention's deletes use
 * usage_log_created).
 */
const retiredIndexes = ['usage_account_created', 'usage_created'];
/** Held (without waiting) by the one process building the log's indexes. */
const indexLockId = 0x5377_6c6f;

/**
 * Builds the request log's indexes that are missing, CONCURRENTLY (writes go
 * on meanwhile); a build a crash left invalid is dropped and made again. This
 * runs after the migrations, outside their lock: a concurrent build waits for
 * every older snapshot, and a process waiting on the migrations' lock holds
 * one, so the two would deadlock. One process builds (a lock taken without
 * waiting); one that finds it taken goes on without them. A server's
 * statement timeout is lifted for the build (minutes at ten million rows).
 */
export async function ensureIndexes(db: Kysely<unknown>): Promise<void> {
  const present = await sql<{ name: string; valid: boolean }>`
    select c.relname as name, i.indisvalid as valid from pg_class c join pg_index i on i.indexrelid = c.oid
    where c.relname in (${sql.join([...requestLogIndexes.map(([name]) => name), ...retiredIndexes])})`.execute(db);
  const valid = new Set(present.rows.filter((row) => row.valid).map((row) => row.name));
  const todo = requestLogIndexes.filter(([name]) => !valid.has(name));
  const retired = retiredIndexes.filter((name) => present.rows.some((row) => row.name === name));
  if (todo.length === 0 && retired.length === 0) return;
  await db.connection().execute(async (conn) => {
    const locked = (await sql<{ locked: boolean }>`select pg_try_advisory_lock(${indexLockId}) as locked`.execute(conn))
      .rows[0]?.locked;
    if (!locked) return;
    try {
      await sql`set statement_timeout = 0`.execute(conn);
      for (const [name, definition] of todo) {
        if (present.rows.some((row) => row.name === name))
          await sql.raw(`drop index concurrently if exists ${name}`).execute(conn);
        await sql.raw(`create index concurrently if not exists ${name} on usage ${definition}`).execute(conn);
      }
      for (const name of retired) await sql.raw(`drop index concurrently if exists ${name}`).execute(conn);
    } finally {
      await sql`reset statement_timeout`.execute(conn).catch(() => undefined);
      await sql`select pg_advisory_unlock(${indexLockId})`.execute(conn).catch(() => undefined);
    }
  });
}

const provider: MigrationProvider = { getMigrations: async () => migrations };

/** Applies every migration not applied yet; throws with the failing one's name. */
export async function migrateRecord(db: Kysely<unknown>): Promise<void> {
  // Each migration opens its own transaction where it can have one: an index built CONCURRENTLY cannot.
  const migrator = new Migrator({
    db,
    provider,
    migrationTableName: 'record_migrations',
    migrationLockTableName: 'record_migrations_lock',
    disableTransactions: true,
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error');
    // No migration failed: the record was not reached at all (bin/cli.ts's reachRecord says that first at start).
    throw new Error(
      `${failed ? `the record's migration ${failed.migrationName} failed` : 'the record could not be migrated'}: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
}
