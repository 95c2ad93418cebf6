import { GatewayError } from '../../shared/errors.js';
import { appendAudit, type AuditEntry } from '../../storage/record/audit-log.js';
import type { RecordDb } from '../../storage/record/database.js';

/**
 * The api's way to the audit log: a change made through the admin API or the
 * console is appended after it took effect (accounts and keys live in Redis
 * and the record both, so no one transaction holds a change and its row). An
 * append that fails is never passed over: the request answers 500
 * `audit_not_recorded`, saying the change was made, and the error is logged
 * as every 500 is, so the operator can see what went unrecorded.
 */
/** Who made a change, for its audit row: where it came from (`auditSource`). */
export type AuditBy = Pick<AuditEntry, 'actor' | 'actorEmail' | 'ip' | 'userAgent'>;

export async function recordChange(record: RecordDb, entry: AuditEntry): Promise<void> {
  try {
    await appendAudit(record, entry);
  } catch (error) {
    throw new GatewayError(
      500,
      `The change was made, but the audit log could not record it (${entry.action}${entry.target ? ` ${entry.target}` : ''}); do not repeat it.`,
      {
        code: 'audit_not_recorded',
        cause: error,
      },
    );
  }
}
