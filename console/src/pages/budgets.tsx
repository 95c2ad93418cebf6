import type { TargetedSubmitEvent } from 'preact';
import { useState } from 'preact/hooks';
import { api } from '../api';
import { useAccount, useTeam } from '../app-context';
import { type Column, DataTable } from '../components/data-table';
import {
  ChoiceSelect,
  Dialog,
  DialogFormActions,
  ErrorMessage,
  PageHeader,
  Spinner,
  StatusMessage,
  useApi,
  useSending,
  useTitle,
} from '../components/ui';
import { count, dateTime, money } from '../format';
import { mayManageTeam, teamName } from '../teams';
import type { AlertList, AlertView, BudgetPeriod, MemberCapView, TeamBudgetView } from '../types';

/*
 * The Budgets page: what the current team may spend per period (a day, a week or a month, from 00:00 UTC), what it
 * spent in this one and when it resets; each member's cap (what the keys they made in the team may spend per
 * period) with their spend; and the alerts sent as budgets fill. Everyone in the team reads it; its owners (and
 * admins) set the budget and the caps. Admission enforces them (the server decides and says why it refuses); the
 * page only shows and sets them.
 */

const periods: BudgetPeriod[] = ['day', 'week', 'month'];
const periodNames: Record<BudgetPeriod, string> = { day: 'Daily', week: 'Weekly', month: 'Monthly' };
const perPeriod: Record<BudgetPeriod, string> = { day: 'per day', week: 'per week', month: 'per month' };

/** An ISO time as the console writes times. */
const isoTime = (iso: string | null) => (iso ? dateTime(Date.parse(iso) / 1000) : '—');

/**
 * Spent against a limit: the amounts, and a bar while there is a limit (red from 90 %); a dash without one (its cap
 * says None beside it).
 */
function SpendBar({ spent, limit, wide }: { spent: number | null; limit: number | null; wide?: boolean }) {
  if (limit === null) return <span class="muted">—</span>;
  const share = limit > 0 ? Math.min(1, (spent ?? 0) / limit) : 1;
  return (
    <span class={`budget-spend ${wide ? 'budget-spend-wide' : ''}`}>
      <span class="nowrap">{money(spent ?? 0)}</span> <span class="muted nowrap">/ {money(limit)}</span>
      <span
        class={`meter ${wide ? 'meter-wide' : ''} ${share >= 0.9 ? 'meter-high' : ''}`}
        role="meter"
        aria-valuemin={0}
        aria-valuemax={100}
        aria-valuenow={Math.round(share * 100)}
        aria-label={`${Math.round(share * 100)} % spent`}
      >
        <span class="meter-fill" style={{ width: `${Math.round(share * 100)}%` }} />
      </span>
    </span>
  );
}

/** An amount and a period, the form both the team's budget and a member's cap are set with. */
function BudgetFields({
  idPrefix,
  amount,
  period,
  onAmount,
  onPeriod,
}: {
  idPrefix: string;
  amount: string;
  period: BudgetPeriod;
  onAmount: (value: string) => void;
  onPeriod: (value: BudgetPeriod) => void;
}) {
  return (
    <div class="form-grid">
      <div class="field">
        <label for={`${idPrefix}-amount`}>Amount (USD)</label>
        <input
          id={`${idPrefix}-amount`}
          type="number"
          inputMode="decimal"
          min="0"
          step="0.01"
          value={amount}
          onInput={(e) => onAmount(e.currentTarget.value)}
          autoComplete="off"
        />
      </div>
      <div class="field">
        <label for={`${idPrefix}-period`}>Period</label>
        <ChoiceSelect
          id={`${idPrefix}-period`}
          value={period}
          choices={periods}
          names={periodNames}
          onChange={onPeriod}
        />
      </div>
    </div>
  );
}

/** The amount typed: a number of dollars, or a message saying what is wrong with it. */
function parseAmount(text: string): number | string {
  const value = Number(text.trim());
  if (text.trim() === '' || !Number.isFinite(value) || value < 0) return 'Enter an amount in dollars (0 or more).';
  return value;
}

/**
 * What the team's budget form and a member's cap dialog share: an amount and a period, checked, then `put` with the
 * limit (null clears it). Each is drawn afresh (keyed by its limit) once saved, so it starts from what the server kept.
 */
function useLimitForm(
  limit: number | null,
  limitPeriod: BudgetPeriod | null,
  put: (usd: number | null, period: BudgetPeriod) => Promise<void>,
) {
  const [amount, setAmount] = useState(limit === null ? '' : String(limit));
  const [period, setPeriod] = useState<BudgetPeriod>(limitPeriod ?? 'month');
  const { busy, error, setError, send } = useSending();
  const submit = (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    const value = parseAmount(amount);
    if (typeof value === 'string') return setError(value);
    void send(() => put(value, period));
  };
  const clear = () => void send(() => put(null, period));
  const fields = (idPrefix: string) => (
    <BudgetFields idPrefix={idPrefix} amount={amount} period={period} onAmount={setAmount} onPeriod={setPeriod} />
  );
  return { busy, error, submit, clear, fields };
}

/** The owner's form for the team's budget: set (amount and period) or clear it. */
function TeamBudgetForm({
  budget,
  onSaved,
}: {
  budget: TeamBudgetView;
  onSaved: (view: TeamBudgetView, message: string) => void;
}) {
  const { busy, error, submit, clear, fields } = useLimitForm(
    budget.budget_usd,
    budget.budget_period,
    async (usd, period) => {
      const view = await api<TeamBudgetView>(
        'PUT',
        `/teams/${encodeURIComponent(budget.team_id)}/budget`,
        usd === null ? { budget_usd: null } : { budget_usd: usd, budget_period: period },
      );
      onSaved(
        view,
        usd === null ? 'The team’s budget was cleared.' : `The team’s budget is ${money(usd)} ${perPeriod[period]}.`,
      );
    },
  );

  return (
    <form onSubmit={submit} noValidate class="budget-form" aria-label="Team budget">
      {fields('team-budget')}
      <ErrorMessage message={error} />
      <div class="form-actions">
        <button type="submit" class="button button-primary" disabled={busy}>
          {busy && <Spinner />}
          Save budget
        </button>
        {budget.budget_usd !== null && (
          <button type="button" class="button button-secondary" disabled={busy} onClick={clear}>
            Clear budget
          </button>
        )}
      </div>
    </form>
  );
}

/** The team's budget: the bar, the period and its reset, and the owner's form. */
function TeamBudgetCard({
  budget,
  name,
  manage,
  onSaved,
}: {
  budget: TeamBudgetView | undefined;
  name: string;
  manage: boolean;
  onSaved: (view: TeamBudgetView, message: string) => void;
}) {
  return (
    <section class="card budget-card" aria-labelledby="team-budget-heading">
      <h2 id="team-budget-heading" class="card-title">
        Budget of {name}
      </h2>
      {!budget ? (
        <p class="muted">Loading…</p>
      ) : budget.budget_usd === null ? (
        <p class="muted">No budget: the team spends up to its balance. {manage ? 'Set one below.' : ''}</p>
      ) : (
        <dl class="budget-facts">
          <div>
            <dt>Spent this period</dt>
            <dd>
              <SpendBar spent={budget.budget_spent_usd} limit={budget.budget_usd} wide />
            </dd>
          </div>
          <div>
            <dt>Period</dt>
            <dd>{periodNames[budget.budget_period!]}, from 00:00 UTC</dd>
          </div>
          <div>
            <dt>Resets at</dt>
            <dd class="nowrap">{isoTime(budget.budget_resets_at)}</dd>
          </div>
        </dl>
      )}
      {budget && manage && (
        <TeamBudgetForm key={`${budget.budget_usd}-${budget.budget_period}`} budget={budget} onSaved={onSaved} />
      )}
    </section>
  );
}

/** Sets or clears a member's cap (an owner's dialog). */
function CapDialog({
  teamId,
  member,
  onClose,
  onSaved,
}: {
  teamId: string;
  member: MemberCapView;
  onClose: () => void;
  onSaved: (member: MemberCapView) => void;
}) {
  const { busy, error, submit, clear, fields } = useLimitForm(member.cap_usd, member.cap_period, async (usd, period) =>
    onSaved(
      await api<MemberCapView>(
        'PUT',
        `/teams/${encodeURIComponent(teamId)}/members/${encodeURIComponent(member.id)}/cap`,
        usd === null ? { cap_usd: null } : { cap_usd: usd, cap_period: period },
      ),
    ),
  );

  return (
    <Dialog title={`Cap for ${member.email || member.name}`} onClose={onClose}>
      <form onSubmit={submit} noValidate>
        <p class="muted small">What the keys they made in this team may spend per period, beside the team’s budget.</p>
        {fields('member-cap')}
        <ErrorMessage message={error} />
        {member.cap_usd !== null && (
          <p>
            <button type="button" class="button button-ghost-danger button-small" disabled={busy} onClick={clear}>
              Remove the cap
            </button>
          </p>
        )}
        <DialogFormActions onCancel={onClose} busy={busy} submit="Save cap" />
      </form>
    </Dialog>
  );
}

const kindNames: Record<AlertView['kind'], string> = {
  team: 'Team budget',
  key: 'Key budget',
  member: 'Member cap',
  key_lifetime: 'Key limit',
};
const deliveryNames: Record<AlertView['state'], string> = {
  pending: 'Sending',
  delivered: 'Delivered',
  failed: 'Failed',
  no_webhook: 'Not sent (no webhook)',
};

/**
 * The team's alerts; a key's budget is named by the key's name, a member's cap by their address (the id when either is
 * gone).
 */
function AlertsSection({ teamId }: { teamId: string }) {
  const alerts = useApi<AlertList>(`/teams/${encodeURIComponent(teamId)}/alerts`);
  const scopeName = (alert: AlertView) => (alert.kind === 'team' ? '' : alert.scope_name || alert.scope_id);
  const columns: Column<AlertView>[] = [
    { id: 'when', label: 'When', lead: true, class: 'nowrap', cell: (alert) => dateTime(alert.created) },
    {
      id: 'what',
      label: 'Budget',
      class: 'alert-budget-cell',
      cell: (alert) => (
        <>
          {kindNames[alert.kind]}
          {alert.kind !== 'team' && <span class="cell-sub muted">{scopeName(alert)}</span>}
        </>
      ),
    },
    { id: 'threshold', label: 'Reached', numeric: true, cell: (alert) => `${alert.threshold_percent} %` },
    {
      id: 'spent',
      label: 'Spent',
      numeric: true,
      priority: 'wide',
      cell: (alert) => `$${alert.spent_usd} of $${alert.limit_usd}`,
    },
    { id: 'delivery', label: 'Delivery', cell: (alert) => deliveryNames[alert.state] },
    { id: 'attempts', label: 'Attempts', numeric: true, priority: 'wide', cell: (alert) => count(alert.attempts) },
    {
      id: 'error',
      label: 'Last error',
      priority: 'detail',
      cell: (alert) => alert.last_error ?? (alert.last_status === null ? '—' : `HTTP ${alert.last_status}`),
    },
  ];
  return (
    <section class="section" aria-labelledby="alerts-heading">
      <div class="section-head">
        <h2 id="alerts-heading">Alerts</h2>
      </div>
      <p class="section-note muted small">
        Sent once per period as spend passes a threshold of a budget, a cap or a key’s limit.
      </p>
      <ErrorMessage message={alerts.error} />
      <DataTable
        labelledBy="alerts-heading"
        class="table-compact alerts-table"
        columns={columns}
        rows={alerts.data?.data}
        rowKey={(alert) => alert.id}
        skeletonRows={2}
        empty="No alerts yet."
      />
    </section>
  );
}

export function BudgetsPage() {
  useTitle('Budgets');
  const me = useAccount();
  const team = useTeam();
  const budget = useApi<TeamBudgetView>(`/teams/${encodeURIComponent(team.id)}/budget`);
  const [status, setStatus] = useState<string | undefined>(undefined);
  const [editing, setEditing] = useState<MemberCapView | undefined>(undefined);
  const manage = mayManageTeam(team.role);
  const name = teamName(team, me.id);
  // A person's own account has no member caps: they are its only person, and its budget is theirs.
  const caps = team.kind === 'team';

  const columns: Array<Column<MemberCapView> | false> = [
    {
      id: 'member',
      label: 'Member',
      lead: true,
      class: 'cell-strong team-member-cell',
      title: (member) => member.email || member.name,
      cell: (member) => (
        <>
          <span class="team-member-email">{member.email || member.name}</span>
          {member.id === me.id && <span class="cell-sub muted">You</span>}
        </>
      ),
    },
    {
      id: 'cap',
      label: 'Cap',
      cell: (member) =>
        member.cap_usd === null ? (
          <span class="muted">None</span>
        ) : (
          `${money(member.cap_usd)} ${perPeriod[member.cap_period!]}`
        ),
    },
    {
      id: 'spent',
      label: 'Spent this period',
      cell: (member) => <SpendBar spent={member.cap_spent_usd} limit={member.cap_usd} />,
    },
    {
      id: 'resets',
      label: 'Resets at',
      priority: 'wide',
      class: 'nowrap',
      cell: (member) => isoTime(member.cap_resets_at),
    },
    manage && {
      id: 'actions',
      label: 'Actions',
      hideLabel: true,
      actions: true,
      class: 'row-actions',
      cell: (member) => (
        <button
          type="button"
          class="button button-secondary button-small"
          onClick={() => setEditing(member)}
          aria-label={`Edit the cap of ${member.email || member.name}`}
        >
          Edit cap
        </button>
      ),
    },
  ];

  return (
    <>
      <PageHeader
        title="Budgets"
        description={`What ${name} may spend per day, week or month (UTC), beside its balance${caps ? ', and what each member’s keys may spend' : ''}. A request that could pass a budget is refused with the budget’s name and when it resets.`}
      />
      <StatusMessage message={status} />
      <ErrorMessage message={budget.error} />
      <TeamBudgetCard
        budget={budget.data}
        name={name}
        manage={manage}
        onSaved={(view, message) => {
          budget.setData(() => view);
          setStatus(message);
        }}
      />
      {caps && (
        <section class="section" aria-labelledby="caps-heading">
          <div class="section-head">
            <h2 id="caps-heading">Members’ caps</h2>
            <span class="muted">
              {budget.data
                ? `${budget.data.members.length} ${budget.data.members.length === 1 ? 'person' : 'people'}`
                : '\u00a0'}
            </span>
          </div>
          <DataTable
            labelledBy="caps-heading"
            class="table-compact caps-table"
            columns={columns}
            rows={budget.data?.members}
            rowKey={(member) => member.id}
            skeletonRows={2}
            empty="Nobody is in this team yet."
          />
        </section>
      )}
      <AlertsSection teamId={team.id} />
      {editing && (
        <CapDialog
          teamId={team.id}
          member={editing}
          onClose={() => setEditing(undefined)}
          onSaved={(member) => {
            setEditing(undefined);
            budget.setData(
              (previous) =>
                previous && { ...previous, members: previous.members.map((m) => (m.id === member.id ? member : m)) },
            );
            setStatus(
              member.cap_usd === null
                ? `${member.email || member.name} has no cap now.`
                : `${member.email || member.name} may spend ${money(member.cap_usd)} ${perPeriod[member.cap_period!]}.`,
            );
          }}
        />
      )}
    </>
  );
}
