import { sql, type Selectable } from 'kysely';
import type { Alert, AlertState } from '../../shared/alerts.js';
import type { AlertsTable, RecordDb } from './database.js';

/**
 * The `alerts` table (migration 0013_alerts): each budget alert the money scripts decided, written once by its id,
 * and where its delivery stands. The alert writer (alert-writer.ts) inserts; the delivery worker
 * (workers/alert-delivery.ts) updates each attempt; the admin API and the console read (`listAlerts`).
 */

export type AlertRow = Selectable<AlertsTable>;

/**
 * An alert as the admin API, the console and the webhook show it: the row, its team's name, and what its budget
 * belongs to by name (a key's name, a member's email; '' for the team's own budget), each as it is now.
 */
export type ListedAlert = AlertRow & { team_name: string; scope_name: string };

/** The alerts with the names they are shown with (`ListedAlert`). */
const namedAlerts = (record: RecordDb) =>
  record
    .selectFrom('alerts')
    .leftJoin('accounts', 'accounts.id', 'alerts.team_id')
    .leftJoin('api_keys', (join) =>
      join.onRef('api_keys.id', '=', 'alerts.scope_id').on('alerts.kind', 'in', ['key', 'key_lifetime']),
    )
    .leftJoin('accounts as member', (join) =>
      join.onRef('member.id', '=', 'alerts.scope_id').on('alerts.kind', '=', 'member'),
    )
    .selectAll('alerts')
    .select((eb) => [
      eb.fn.coalesce('accounts.name', eb.val('')).as('team_name'),
      eb.fn.coalesce('api_keys.name', 'member.email', eb.val('')).as('scope_name'),
    ]);

/**
 * Inserts the alerts not written before (by id), each in `state` (`pending` when a webhook will be tried,
 * `no_webhook` when none is set). Returns the ids whose row is still `pending` — new or written before and not yet
 * delivered — for the caller to queue (a job queued twice is one job: its id is the alert's).
 */
export async function writeAlerts(
  record: RecordDb,
  alerts: readonly Alert[],
  state: Extract<AlertState, 'pending' | 'no_webhook'>,
): Promise<string[]> {
  if (alerts.length === 0) return [];
  const unique = [...new Map(alerts.map((alert) => [alert.id, alert])).values()].sort((a, b) => (a.id < b.id ? -1 : 1));
  await record
    .insertInto('alerts')
    .values(
      unique.map((alert) => ({
        id: alert.id,
        team_id: alert.teamId,
        kind: alert.kind,
        scope_id: alert.scopeId,
        period: alert.period,
        period_start: alert.periodStart,
        period_end: alert.periodEnd,
        threshold_percent: alert.thresholdPercent,
        limit_micros: alert.limitMicros,
        spent_micros: alert.spentMicros,
        created: alert.createdMs,
        state,
        last_status: null,
        last_error: null,
        delivered_at: null,
      })),
    )
    .onConflict((oc) => oc.column('id').doNothing())
    .execute();
  const pending = await record
    .selectFrom('alerts')
    .select('id')
    .where(
      'id',
      'in',
      unique.map((alert) => alert.id),
    )
    .where('state', '=', 'pending')
    .execute();
  return pending.map((row) => row.id);
}

/** One alert with its names (as they are now: a team renamed since is sent by its new name). */
export async function readAlert(record: RecordDb, id: string): Promise<ListedAlert | undefined> {
  return namedAlerts(record).where('alerts.id', '=', id).executeTakeFirst();
}

/** What one delivery attempt came to. */
export interface DeliveryAttempt {
  state: AlertState;
  /** The webhook's HTTP status; null when it gave none. */
  status: number | null;
  /** A short reason when the attempt failed (at most 200 characters kept). */
  error: string | null;
  /** When it was delivered (ms), for `delivered`. */
  deliveredAt?: number;
}

/** Counts an attempt on the alert's row and sets what it came to. A delivered alert stays delivered. */
export async function recordDeliveryAttempt(record: RecordDb, id: string, attempt: DeliveryAttempt): Promise<void> {
  await record
    .updateTable('alerts')
    .set((eb) => ({
      attempts: eb('attempts', '+', 1),
      state: attempt.state,
      last_status: attempt.status,
      last_error: attempt.error === null ? null : attempt.error.slice(0, 200),
      delivered_at: attempt.deliveredAt ?? null,
    }))
    .where('id', '=', id)
    .where('state', '<>', 'delivered')
    .execute();
}

export interface ListAlertsOptions {
  /** One team's alerts; all teams' when unset (an admin's view). */
  teamId?: string;
  /** At most this many (the caller bounds it). */
  limit: number;
  /** The id of the last alert of the page before: the page goes on after it (newest first). */
  before?: string;
}

/**
 * Alerts newest first (by creation, then id), with their teams' names: the console's alerts list and
 * `GET /admin/alerts`. Pages by the last id seen (`before`); an id that names no alert gives an empty page.
 */
export async function listAlerts(record: RecordDb, options: ListAlertsOptions): Promise<ListedAlert[]> {
  let query = namedAlerts(record);
  if (options.teamId !== undefined) query = query.where('alerts.team_id', '=', options.teamId);
  if (options.before !== undefined) {
    const before = options.before;
    query = query.where(
      sql<boolean>`(alerts.created, alerts.id) < (select created, id from alerts where id = ${before})`,
    );
  }
  return query.orderBy('alerts.created', 'desc').orderBy('alerts.id', 'desc').limit(options.limit).execute();
}
