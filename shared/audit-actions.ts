/**
 * Every action the audit log records (storage/record/audit-log.ts), and what the console's audit page lists in its
 * filter. A feature that records a new kind of change adds its action here, `<thing>.<what happened>`.
 */
export const auditActions = [
  'signin.succeeded',
  'signin.failed',
  'account.created',
  'account.updated',
  'account.deleted',
  'credit.granted',
  'key.created',
  'key.updated',
  'key.revoked',
  'cache.purged',
  'channel.updated',
  'team.created',
  'team.updated',
  'team.member_added',
  'team.member_updated',
  'team.member_removed',
  'budget.updated',
  'audit.pruned',
  'mcp_server.created',
  'mcp_server.updated',
  'mcp_server.deleted',
] as const;
export type AuditAction = (typeof auditActions)[number];

/** A row of the audit log as the console and the export read it: unix milliseconds, the changed fields only. */
export interface AuditRowView {
  id: number;
  time: number;
  /** An account id, or `admin-token`, `cli`, `system`, `anonymous`. */
  actor: string;
  actor_email: string | null;
  team_id: string | null;
  action: string;
  target: string | null;
  ip: string | null;
  user_agent: string | null;
  before: unknown;
  after: unknown;
  prev_hash: string;
  hash: string;
}

export interface AuditPage {
  object: 'list';
  data: AuditRowView[];
  /**
   * The console's page only: each account and key id its rows name (actor, team, target) with what a person knows it
   * by (an account's email, else its name; a key's name), where the record has one. The rows themselves, hashed as
   * written, keep the ids.
   */
  names?: Record<string, string>;
  has_more: boolean;
  next_cursor: string | null;
}
