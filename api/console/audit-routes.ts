import type Router from '@koa/router';
import { Readable } from 'node:stream';
import { z } from 'zod';
import type { Account } from '../../shared/accounts.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import { storableText } from '../../shared/schemas/common.js';
import { parseStrict } from '../accounts/account-requests.js';
import { teamRole } from '../accounts/team-roles.js';
import {
  auditActions,
  decodeAuditCursor,
  exportAudit,
  listAudit,
  type AuditFilter,
} from '../../storage/record/audit-log.js';
import type { RecordDb } from '../../storage/record/database.js';
import type { AuditPage, AuditRowView } from '../../shared/audit-actions.js';
import { requireSession, type ConsoleDeps } from './console-session.js';

/*
 * The audit log in the console, at /console/api/audit (a page, newest first)
 * and /console/api/audit.jsonl (every row the filters pick, oldest first).
 * An admin reads every row; anyone else the rows of the teams they own (their
 * own account is a team of one they own; team_members rows with role owner
 * add others); asking for a team they are only a member or viewer of, or not
 * in, is 403.
 */

const id = storableText().min(1).max(256);

/** Unix milliseconds, or an ISO 8601 date or date-time (UTC unless it says). */
const instant = z
  .string()
  .max(40)
  .transform((text, ctx) => {
    if (/^\d{1,15}$/.test(text)) return Number(text);
    const ms = /^\d{4}-\d{2}-\d{2}([T ][\d:.]+(Z|[+-]\d{2}:?\d{2})?)?$/.test(text)
      ? Date.parse(text.length === 10 ? `${text}T00:00:00Z` : text)
      : Number.NaN;
    if (Number.isNaN(ms)) {
      ctx.issues.push({ code: 'custom', message: 'expected unix milliseconds or an ISO 8601 date-time', input: text });
      return z.NEVER;
    }
    return ms;
  });

const filterFields = {
  action: z.enum(auditActions).optional(),
  /** An account id, its email, or `admin-token`, `cli`, `system`, `anonymous`. */
  actor: id.optional(),
  team: id.optional(),
  from: instant.optional(),
  to: instant.optional(),
};

const exportQuerySchema = z.strictObject(filterFields);
const listQuerySchema = z.strictObject({
  ...filterFields,
  limit: z
    .string()
    .regex(/^\d{1,4}$/, 'expected a whole number')
    .transform(Number)
    .pipe(z.number().int().min(1).max(100))
    .optional(),
  cursor: z.string().max(100).optional(),
});

type FilterQuery = z.output<z.ZodObject<typeof filterFields>>;

const notOwner = () =>
  new GatewayError(403, "Only an administrator or the team's owner may read its audit log.", {
    code: 'audit_forbidden',
    param: 'team',
  });

/** The filter a person may read: an admin's as asked, anyone else's narrowed to the teams they own. */
async function scopedFilter(record: RecordDb, account: Account, query: FilterQuery): Promise<AuditFilter> {
  const filter: AuditFilter = {
    ...(query.action !== undefined ? { action: query.action } : {}),
    ...(query.actor !== undefined ? { actor: query.actor } : {}),
    ...(query.team !== undefined ? { teamId: query.team } : {}),
    ...(query.from !== undefined ? { since: query.from } : {}),
    ...(query.to !== undefined ? { until: query.to } : {}),
  };
  if (account.role === 'admin') return filter;
  if (query.team !== undefined) {
    if ((await teamRole(record, query.team, account)) !== 'owner') throw notOwner();
    return filter;
  }
  const owned = await record
    .selectFrom('team_members')
    .select('team_id')
    .where('member_id', '=', account.id)
    .where('role', '=', 'owner')
    .execute();
  return { ...filter, teamIds: [account.id, ...owned.map((row) => row.team_id)] };
}

/**
 * What a person knows each account and key id of a page's rows by: an account's email (else its name), a key's name.
 */
async function namesOf(record: RecordDb, rows: readonly AuditRowView[]): Promise<Record<string, string>> {
  const ids = new Set<string>();
  for (const row of rows)
    for (const value of [row.actor, row.team_id, row.target]) if (value && /^(acct|key)_/.test(value)) ids.add(value);
  const accounts = [...ids].filter((value) => value.startsWith('acct_'));
  const keys = [...ids].filter((value) => value.startsWith('key_'));
  const names: Record<string, string> = {};
  if (accounts.length > 0) {
    for (const row of await record
      .selectFrom('accounts')
      .select(['id', 'email', 'name'])
      .where('id', 'in', accounts)
      .execute()) {
      const known = row.email || row.name;
      if (known) names[row.id] = known;
    }
  }
  if (keys.length > 0)
    for (const row of await record.selectFrom('api_keys').select(['id', 'name']).where('id', 'in', keys).execute())
      names[row.id] = row.name;
  return names;
}

export function addAuditConsoleRoutes(router: Router, deps: ConsoleDeps): void {
  const record = deps.keyStore.record;

  router.get('/api/audit', async (ctx) => {
    const { account } = await requireSession(ctx, deps);
    const { limit, cursor, ...query } = parseStrict(listQuerySchema, ctx.query);
    const before = cursor === undefined ? undefined : decodeAuditCursor(cursor);
    if (cursor !== undefined && before === undefined)
      throw invalidRequest('The cursor is not one this API gave out.', 'cursor');
    const page = await listAudit(record, await scopedFilter(record, account, query), limit ?? 50, before);
    ctx.body = { ...page, names: await namesOf(record, page.data) } satisfies AuditPage;
  });

  router.get('/api/audit.jsonl', async (ctx) => {
    const { account } = await requireSession(ctx, deps);
    const filter = await scopedFilter(record, account, parseStrict(exportQuerySchema, ctx.query));
    ctx.type = 'application/jsonl; charset=utf-8';
    ctx.attachment(`audit-${new Date().toISOString().slice(0, 10)}.jsonl`);
    ctx.body = Readable.from(exportAudit(record, filter));
  });
}
