import { sql, type Kysely } from 'kysely';
import { Migrator, type Migration, type MigrationProvider } from 'kysely/migration';

/**
 * The record's schema, versioned: Kysely's migrator applies what is missing
 * at start, under PostgreSQL's advisory lock, so several processes starting
 * at once apply each migration once. A migration never rewrites or locks a
 * large table for long: new columns are nullable or have constant defaults,
 * and an index on a table that may already be large is built CONCURRENTLY in
 * a migration of its own (outside a transaction).
 */
const migrations: Record<string, Migration> = {
  '0001_record': {
    async up(db: Kysely<unknown>) {
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
      await sql`create unique index accounts_email on accounts (lower(email)) where email <> '' and not deleted`.execute(db);
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
    },
  },
};

const provider: MigrationProvider = { getMigrations: async () => migrations };

/** Applies every migration not applied yet; throws with the failing one's name. */
export async function migrateRecord(db: Kysely<unknown>): Promise<void> {
  const migrator = new Migrator({ db, provider, migrationTableName: 'record_migrations', migrationLockTableName: 'record_migrations_lock' });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error');
    throw new Error(`the record's migration ${failed?.migrationName ?? ''} failed: ${error instanceof Error ? error.message : String(error)}`);
  }
}
