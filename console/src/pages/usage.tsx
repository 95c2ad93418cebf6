import { useMemo, useRef, useState } from 'preact/hooks';
import { apiBase } from '../api';
import { BarChart, type Series } from '../components/bar-chart';
import { type Column, DataTable } from '../components/data-table';
import { ErrorMessage, PageHeader, useApi, useTitle } from '../components/ui';
import { balance, compactCount, count, dayLabel, daysBetween, duration, money, number, percent } from '../format';
import { useAccount } from '../app-context';
import { Link } from '../router';
import type { Account, Key, List, ModelLatency, UsageReport, UsageTotals, KeyUsageTotals } from '../types';

const palette = ['#6366f1', '#10b981', '#f59e0b', '#ef4444', '#06b6d4', '#8b5cf6', '#ec4899', '#84cc16'];
const otherColor = '#cbd5e1';
const zero: UsageTotals = { requests: 0, input_tokens: 0, cached_tokens: 0, output_tokens: 0, images: 0, audio_seconds: 0, video_seconds: 0, cost_usd: 0, saved_micros: 0 };

function media(row: UsageTotals): string {
  const parts: string[] = [];
  if (row.images) parts.push(`${count(row.images)} image${row.images === 1 ? '' : 's'}`);
  if (row.audio_seconds) parts.push(`${number(row.audio_seconds)} s audio`);
  if (row.video_seconds) parts.push(`${number(row.video_seconds)} s video`);
  return parts.join(' · ') || '—';
}

function axisMoney(value: number): string {
  if (value === 0) return '$0';
  return money(value);
}

function Stat({ label, value, loading, note }: { label: string; value: string; loading: boolean; note?: string | undefined }) {
  return (
    <div class="stat">
      <dt class="stat-label">{label}</dt>
      <dd class="stat-value">{loading ? <span class="skeleton skeleton-stat" aria-hidden="true" /> : value}</dd>
      {/* Under the value: beside it, a stat's narrow box would cut it off. */}
      {note && !loading && <dd class="stat-note muted small">{note}</dd>}
    </div>
  );
}

/** A key's name in the by-key table: a revoked key keeps it, marked; on an admin's report of every account, its account under it. */
function KeyName({ row, account }: { row: KeyUsageTotals; account?: string }) {
  return (
    <>
      {row.key_name ?? <span class="muted mono">{row.key_id || 'Unknown key'}</span>}
      {row.key_revoked && (
        <span class="badge badge-cap key-revoked" title="This key was revoked: it no longer works, its usage stays">
          revoked
        </span>
      )}
      {account && <span class="cell-sub muted">{account}</span>}
    </>
  );
}

/** The sums every breakdown shows of its rows, after the row's name. */
const amountColumns: Column<UsageTotals>[] = [
  { id: 'requests', label: 'Requests', numeric: true, cell: (row) => count(row.requests) },
  { id: 'input', label: 'Input tokens', numeric: true, cell: (row) => count(row.input_tokens) },
  { id: 'cached', label: 'Cached tokens', numeric: true, cell: (row) => count(row.cached_tokens) },
  { id: 'output', label: 'Output tokens', numeric: true, cell: (row) => count(row.output_tokens) },
  { id: 'media', label: 'Media', class: 'muted nowrap', cell: media },
  { id: 'spend', label: 'Spend', numeric: true, class: 'cell-strong', cell: (row) => money(row.cost_usd) },
];

const byModelColumns: Column<UsageTotals>[] = [{ id: 'model', label: 'Model', lead: true, class: 'mono cell-strong nowrap', cell: (row) => row.model }, ...amountColumns];

/** By key: the same sums but the cached tokens. */
const byKeyColumns: Column<KeyUsageTotals>[] = amountColumns.filter((column) => column.id !== 'cached');

const latencyColumns: Column<ModelLatency>[] = [
  { id: 'model', label: 'Model', lead: true, class: 'mono cell-strong nowrap', cell: (row) => row.model || <span class="muted">Unknown model</span> },
  { id: 'requests', label: 'Requests', numeric: true, cell: (row) => count(row.requests) },
  { id: 'error-rate', label: 'Error rate', numeric: true, class: (row) => (row.errors > 0 ? 'text-danger' : undefined), cell: (row) => percent(row.error_rate) },
  { id: 'latency-p50', label: 'p50 latency', numeric: true, cell: (row) => duration(row.latency_p50_ms) },
  { id: 'latency-p95', label: 'p95 latency', numeric: true, cell: (row) => duration(row.latency_p95_ms) },
  { id: 'ttft-p50', label: 'p50 TTFT', numeric: true, cell: (row) => duration(row.ttft_p50_ms) },
  { id: 'ttft-p95', label: 'p95 TTFT', numeric: true, cell: (row) => duration(row.ttft_p95_ms) },
];

export function UsagePage() {
  useTitle('Usage');
  const me = useAccount();
  const admin = me.role === 'admin';
  const [days, setDays] = useState('30');
  // An admin's usage is every account's, as on Activity, unless one is picked.
  const [accountId, setAccountId] = useState('');
  const [keyId, setKeyId] = useState('');
  const [model, setModel] = useState('');
  const params = new URLSearchParams({ days });
  if (admin && accountId) params.set('account_id', accountId);
  if (keyId) params.set('key_id', keyId);
  if (model) params.set('model', model);
  const query = params.toString();
  const report = useApi<UsageReport>(`/usage?${query}`);
  // An admin's key filter lists every account's keys (the CLI's are the Default account's).
  const keys = useApi<List<Key>>(admin ? '/admin/keys' : '/keys');
  const accounts = useApi<List<Account>>(admin ? '/admin/accounts' : null);
  const accountNames = useMemo(() => new Map((accounts.data?.data ?? []).map((account) => [account.id, account.email || account.name || account.id])), [accounts.data]);
  const allAccounts = admin && !accountId;
  const seenModels = useRef(new Set<string>());

  const data = report.data;
  for (const row of data?.by_model ?? []) if (row.model) seenModels.current.add(row.model);
  if (model) seenModels.current.add(model);
  const modelOptions = [...seenModels.current].sort();

  const keyOptions = useMemo(() => {
    const options = new Map<string, string>();
    for (const key of keys.data?.data ?? []) {
      if (admin && accountId && key.account_id !== accountId) continue;
      options.set(key.id, allAccounts && (key.account_email || key.account_name) ? `${key.name} (${key.account_email || key.account_name})` : key.name);
    }
    for (const row of data?.by_key ?? []) if (row.key_id && !options.has(row.key_id)) options.set(row.key_id, `${row.key_name ?? row.key_id} (revoked)`);
    return [...options];
  }, [keys.data, data, admin, accountId, allAccounts]);

  const chart = useMemo(() => {
    if (!data) return { labels: [] as string[], spend: [] as Series[], requests: [] as Series[], empty: true };
    const dayList = daysBetween(data.from, data.to);
    const index = new Map(dayList.map((day, i) => [day, i]));
    const totalsByModel = new Map<string, number>();
    for (const row of data.daily) totalsByModel.set(row.model ?? '', (totalsByModel.get(row.model ?? '') ?? 0) + row.cost_usd);
    const ranked = [...totalsByModel].sort((a, b) => b[1] - a[1]).map(([name]) => name);
    const shown = ranked.length > palette.length ? ranked.slice(0, palette.length - 1) : ranked;
    const spend: Series[] = shown.map((name, i) => ({ label: name || 'Unknown model', color: palette[i % palette.length]!, values: dayList.map(() => 0) }));
    const other: Series = { label: 'Other models', color: otherColor, values: dayList.map(() => 0) };
    const requests = dayList.map(() => 0);
    for (const row of data.daily) {
      const i = index.get(row.day ?? '');
      if (i === undefined) continue;
      const at = shown.indexOf(row.model ?? '');
      const series = at >= 0 ? spend[at]! : other;
      series.values[i] = (series.values[i] ?? 0) + row.cost_usd;
      requests[i] = (requests[i] ?? 0) + row.requests;
    }
    if (ranked.length > shown.length) spend.push(other);
    return {
      labels: dayList.map(dayLabel),
      spend,
      requests: [{ label: 'Requests', color: '#6366f1', values: requests }],
      empty: data.daily.length === 0,
    };
  }, [data]);

  const totals = data?.totals ?? zero;
  const byModel = [...(data?.by_model ?? [])].sort((a, b) => b.cost_usd - a.cost_usd || b.requests - a.requests);
  const byKey = [...(data?.by_key ?? [])].sort((a, b) => b.cost_usd - a.cost_usd || b.requests - a.requests);
  const latency = [...(data?.latency ?? [])].sort((a, b) => b.requests - a.requests || (a.model < b.model ? -1 : 1));
  const loading = !data;
  const rangeText = data ? `${dayLabel(data.from)} – ${dayLabel(data.to)}` : '';

  return (
    <>
      <PageHeader
        title="Usage"
        description={allAccounts ? 'Spend and traffic of every key of this gateway, of every account, per UTC day.' : admin ? 'Spend and traffic of one account’s keys per UTC day.' : 'Spend and traffic of your keys per UTC day.'}
        actions={
          <a class="button button-secondary" href={`${apiBase}/usage.csv?${query}`} download>
            <svg viewBox="0 0 20 20" aria-hidden="true" class="button-icon">
              <path d="M10 3v9m0 0l-3.5-3.5M10 12l3.5-3.5M4 15v1.5h12V15" fill="none" stroke="currentColor" stroke-width="1.7" stroke-linecap="round" stroke-linejoin="round" />
            </svg>
            Download CSV
          </a>
        }
      />
      <div class="filters" role="group" aria-label="Filters">
        <div class="field field-inline">
          <label for="usage-range">Range</label>
          <select id="usage-range" value={days} onChange={(e) => setDays(e.currentTarget.value)}>
            <option value="7">Last 7 days</option>
            <option value="30">Last 30 days</option>
            <option value="90">Last 90 days</option>
          </select>
        </div>
        {admin && (
          <div class="field field-inline">
            <label for="usage-account">Account</label>
            <select
              id="usage-account"
              value={accountId}
              onChange={(e) => {
                setAccountId(e.currentTarget.value);
                setKeyId('');
              }}
            >
              <option value="">All accounts</option>
              {(accounts.data?.data ?? []).map((account) => (
                <option value={account.id} key={account.id}>
                  {account.email || account.name || account.id}
                </option>
              ))}
            </select>
          </div>
        )}
        <div class="field field-inline">
          <label for="usage-key">Key</label>
          <select id="usage-key" value={keyId} onChange={(e) => setKeyId(e.currentTarget.value)}>
            <option value="">All keys</option>
            {keyOptions.map(([id, name]) => (
              <option value={id} key={id}>
                {name}
              </option>
            ))}
          </select>
        </div>
        <div class="field field-inline">
          <label for="usage-model">Model</label>
          <select id="usage-model" value={model} onChange={(e) => setModel(e.currentTarget.value)}>
            <option value="">All models</option>
            {modelOptions.map((m) => (
              <option value={m} key={m}>
                {m}
              </option>
            ))}
          </select>
        </div>
        <p class="filters-note muted" aria-live="polite">
          {report.loading && data ? 'Updating…' : rangeText}
        </p>
      </div>
      <ErrorMessage message={report.error} />
      <dl class="stats" aria-busy={loading}>
        {/* What the response cache saved (its hits billed less than the answers they reused), when it saved anything. */}
        <Stat label="Spend" value={money(totals.cost_usd)} note={(totals.saved_micros ?? 0) > 0 ? `saved ${money(totals.saved_micros / 1_000_000)}` : undefined} loading={loading} />
        <Stat label="Requests" value={count(totals.requests)} loading={loading} />
        <Stat label="Input tokens" value={count(totals.input_tokens)} loading={loading} />
        <Stat label="Output tokens" value={count(totals.output_tokens)} loading={loading} />
        {allAccounts ? (
          <Stat label="Accounts" value={data ? count(new Set(data.by_key.map((row) => row.key_account_id ?? row.key_id)).size) : ''} loading={loading} />
        ) : (
          <Stat label="Balance" value={balance(data?.balance_usd ?? null)} loading={loading} />
        )}
      </dl>
      <div class="chart-grid">
        <section class="card chart-card" aria-labelledby="spend-chart-heading">
          <h2 id="spend-chart-heading" class="card-title">
            Spend per day
          </h2>
          <BarChart
            class="chart-tall"
            labels={chart.labels}
            series={chart.spend}
            stacked
            runningTotal={{ label: 'Running total', color: '#111827' }}
            format={money}
            axisFormat={axisMoney}
            label={`Spend per day by model, with the running total${rangeText ? `, ${rangeText}` : ''}. The numbers are in the By model table below.`}
            empty={!loading && chart.empty}
            emptyText="No spend in this range"
          />
        </section>
        <section class="card chart-card" aria-labelledby="requests-chart-heading">
          <h2 id="requests-chart-heading" class="card-title">
            Requests per day
          </h2>
          <BarChart
            class="chart-short"
            labels={chart.labels}
            series={chart.requests}
            format={count}
            wholeNumbers
            axisFormat={compactCount}
            label={`Requests per day${rangeText ? `, ${rangeText}` : ''}: ${count(totals.requests)} in total.`}
            empty={!loading && chart.empty}
            emptyText="No requests in this range"
          />
        </section>
      </div>
      <section class="section" aria-labelledby="by-model-heading">
        <h2 id="by-model-heading">By model</h2>
        <DataTable labelledBy="by-model-heading" columns={byModelColumns} rows={data && byModel} rowKey={(row) => row.model ?? ''} skeletonRows={3} empty="No usage in this range." />
      </section>
      <section class="section" aria-labelledby="by-key-heading">
        <h2 id="by-key-heading">By key</h2>
        <DataTable
          labelledBy="by-key-heading"
          columns={[
            {
              id: 'key',
              label: 'Key',
              lead: true,
              class: 'cell-strong',
              cell: (row) => <KeyName row={row} account={allAccounts && row.key_account_id ? (accountNames.get(row.key_account_id) ?? row.key_account_id) : undefined} />,
            },
            ...byKeyColumns,
          ]}
          rows={data && byKey}
          rowKey={(row) => row.key_id ?? ''}
          skeletonRows={2}
          empty="No usage in this range."
        />
      </section>
      <section class="section" aria-labelledby="latency-heading">
        <div class="section-head">
          <h2 id="latency-heading">Latency by model</h2>
          <Link href="/console/activity" class="small">
            View activity
          </Link>
        </div>
        <DataTable labelledBy="latency-heading" columns={latencyColumns} rows={data && latency} rowKey={(row) => row.model} skeletonRows={2} empty="No requests in this range." />
        <p class="table-note muted small">Over the same days, keys and models as above. Refused requests count as errors; TTFT is measured on streams only.</p>
      </section>
    </>
  );
}
