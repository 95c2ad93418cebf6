import { useMemo, useState } from 'preact/hooks';
import { apiBase } from '../api';
import { PagedTable, type Column } from '../components/data-table';
import { PageHeader, useTitle } from '../components/ui';
import { useAccount, useApp } from '../app-context';
import { switchableTeams, teamName } from '../teams';
import { requestTime } from '../format';
import { usePagedList } from '../paged-list';
import { navigate, useSearch } from '../router';
import { auditActions, type AuditPage, type AuditRowView } from '../../../shared/audit-actions.js';

/*
 * The audit log: who changed what, when and from where, newest first. An
 * administrator reads every row; anyone else the rows of the teams they own.
 * The filters live in the query string, so a filtered view is a link, and the
 * Export button downloads the same rows as JSON Lines.
 */

const filterNames = ['action', 'actor', 'team', 'from', 'to'] as const;

/** A date input's value (local) as the API's instant: the start of that day, or with `end`, the start of the next. */
function dayBound(value: string, end: boolean): string | undefined {
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(value);
  if (!match) return undefined;
  return String(new Date(Number(match[1]), Number(match[2]) - 1, Number(match[3]) + (end ? 1 : 0)).getTime());
}

/** The changed fields as short text: `name: "a" → "b"`, one line a field. */
function Changes({ row }: { row: AuditRowView }) {
  const before = (row.before ?? {}) as Record<string, unknown>;
  const after = (row.after ?? {}) as Record<string, unknown>;
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])];
  if (names.length === 0) return <span class="muted">—</span>;
  const show = (value: unknown) => (value === undefined ? '—' : JSON.stringify(value));
  return (
    <ul class="audit-changes">
      {names.map((name) => (
        <li key={name}>
          <code>{name}</code>: {name in before ? `${show(before[name])} → ` : ''}
          {show(after[name])}
        </li>
      ))}
    </ul>
  );
}

/** A row with what a person knows its ids by (the page's `names`): an account's email or name, a key's name. */
type NamedRow = AuditRowView & { names: Record<string, string> };

/** An id by its name where one is known, the id itself in the tooltip. */
const named = (row: NamedRow, id: string | null) => (id === null ? '—' : (row.names[id] ?? id));

const columns: Array<Column<NamedRow>> = [
  {
    id: 'time',
    label: 'Time',
    lead: true,
    cell: (row) => requestTime(row.time / 1000),
    title: (row) => new Date(row.time).toISOString(),
  },
  {
    id: 'who',
    label: 'Who',
    cell: (row) => row.actor_email || named(row, row.actor),
    title: (row) => row.actor,
    class: 'audit-cut',
  },
  { id: 'action', label: 'Action', cell: (row) => <code>{row.action}</code> },
  {
    id: 'target',
    label: 'Target',
    cell: (row) => named(row, row.target),
    title: (row) => row.target ?? undefined,
    class: 'audit-cut',
  },
  {
    id: 'from',
    label: 'From where',
    priority: 'wide',
    cell: (row) => row.ip ?? '—',
    title: (row) => row.user_agent ?? undefined,
  },
  {
    id: 'team',
    label: 'Team',
    priority: 'detail',
    cell: (row) => named(row, row.team_id),
    title: (row) => row.team_id ?? undefined,
  },
  { id: 'agent', label: 'User agent', priority: 'detail', cell: (row) => row.user_agent ?? '—', class: 'audit-wrap' },
  {
    id: 'changes',
    label: 'Before → after',
    priority: 'detail',
    cell: (row) => <Changes row={row} />,
    class: 'audit-wrap',
  },
  { id: 'hash', label: 'Hash', priority: 'detail', cell: (row) => <code>{row.hash}</code>, class: 'audit-wrap' },
];

export function AuditPage() {
  useTitle('Audit log');
  const me = useAccount();
  const search = useSearch();
  const params = useMemo(() => new URLSearchParams(search), [search]);
  const value = (name: (typeof filterNames)[number]) => params.get(name) ?? '';
  const [actor, setActor] = useState(value('actor'));
  const { teams } = useApp();
  // The teams whose changes this person reads: an admin's every team, anyone else's the teams they own.
  const readable = teams ? switchableTeams(teams).filter((one) => me.role === 'admin' || one.role === 'owner') : [];
  const team = value('team');

  // The API's query: the page's filters, the days turned into instants.
  const query = new URLSearchParams();
  if (value('action')) query.set('action', value('action'));
  if (value('actor')) query.set('actor', value('actor'));
  if (value('team')) query.set('team', value('team'));
  const from = dayBound(value('from'), false);
  const to = dayBound(value('to'), true);
  if (from) query.set('from', from);
  if (to) query.set('to', to);
  const [refreshes, setRefreshes] = useState(0);
  const list = usePagedList<AuditPage, NamedRow>(`/audit?${query}`, refreshes, {
    rows: (page) => page.data.map((row) => ({ ...row, names: page.names ?? {} })),
    hasMore: (page) => page.has_more,
    next: (page) => (page.next_cursor ? `cursor=${encodeURIComponent(page.next_cursor)}` : undefined),
  });

  const apply = (changes: Partial<Record<(typeof filterNames)[number], string>>) => {
    const next = new URLSearchParams();
    for (const name of filterNames) {
      const given = name in changes ? changes[name]! : value(name);
      if (given.trim()) next.set(name, given.trim());
    }
    const text = next.toString();
    navigate(text ? `/console/audit?${text}` : '/console/audit');
  };

  return (
    <>
      <PageHeader
        title="Audit log"
        description={
          me.role === 'admin'
            ? 'Every change made on this gateway, newest first: who made it, when, from where, and what it changed.'
            : 'The changes made in the teams you own, newest first: who made them, when, from where, and what they ' +
              'changed.'
        }
        actions={
          <>
            <button type="button" class="button button-secondary" onClick={() => setRefreshes((n) => n + 1)}>
              Refresh
            </button>
            <a class="button button-secondary" href={`${apiBase}/audit.jsonl?${query}`} download>
              Export
            </a>
          </>
        }
      />
      <form
        class="filters audit-filters"
        role="search"
        aria-label="Filters"
        onSubmit={(event) => {
          event.preventDefault();
          apply({ actor });
        }}
      >
        <div class="field field-inline">
          <label for="audit-action">Action</label>
          <select
            id="audit-action"
            value={value('action')}
            onChange={(event) => apply({ action: event.currentTarget.value, actor })}
          >
            <option value="">All actions</option>
            {auditActions.map((action) => (
              <option value={action} key={action}>
                {action}
              </option>
            ))}
          </select>
        </div>
        <div class="field field-inline">
          <label for="audit-actor">Who</label>
          <input
            id="audit-actor"
            type="search"
            placeholder="email or account id"
            value={actor}
            onInput={(event) => setActor(event.currentTarget.value)}
            onBlur={() => apply({ actor })}
          />
        </div>
        <div class="field field-inline">
          <label for="audit-team">Team</label>
          <select id="audit-team" value={team} onChange={(event) => apply({ team: event.currentTarget.value, actor })}>
            <option value="">{me.role === 'admin' ? 'All teams' : 'All my teams'}</option>
            {readable.map((one) => (
              <option value={one.id} key={one.id}>
                {teamName(one, me.id)}
              </option>
            ))}
            {team && !readable.some((one) => one.id === team) && <option value={team}>{team}</option>}
          </select>
        </div>
        <div class="field field-inline">
          <label for="audit-from">From</label>
          <input
            id="audit-from"
            type="date"
            value={value('from')}
            onChange={(event) => apply({ from: event.currentTarget.value, actor })}
          />
        </div>
        <div class="field field-inline">
          <label for="audit-to">To</label>
          <input
            id="audit-to"
            type="date"
            value={value('to')}
            onChange={(event) => apply({ to: event.currentTarget.value, actor })}
          />
        </div>
        <button type="submit" class="visually-hidden" tabIndex={-1}>
          Apply
        </button>
      </form>
      <section class="section" aria-labelledby="audit-heading">
        <div class="section-head">
          <h2 id="audit-heading">Changes</h2>
        </div>
        <PagedTable
          labelledBy="audit-heading"
          class="audit-table"
          columns={columns}
          list={list as never}
          what="audit log"
          onRetry={() => setRefreshes((n) => n + 1)}
          rowKey={(row) => String(row.id)}
          skeletonRows={5}
          empty={search ? 'No change matches these filters.' : 'No changes recorded yet.'}
        />
      </section>
    </>
  );
}
