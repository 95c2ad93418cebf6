import { useMemo, useRef, useState } from 'preact/hooks';
import { apiBase, teamQuery } from '../api';
import { BarChart, type Series } from '../components/bar-chart';
import { type Column, DataTable } from '../components/data-table';
import { ButtonIcon, ErrorMessage, FilterSelect, PageHeader, useApi, useTitle } from '../components/ui';
import { balance, compactCount, count, dayLabel, daysBetween, duration, money, number, percent } from '../format';
import { useAccount } from '../app-context';
import { Link } from '../router';
import type { Account, Key, KeyName, KeyUsageRow, List, ModelLatency, UsageReport, UsageRow } from '../types';

const palette = ['#6366f1', '#10b981', '#f59e0b', '#ef4444', '#06b6d4', '#8b5cf6', '#ec4899', '#84cc16'];
const otherColor = '#cbd5e1';
const zero: UsageRow = {
  requests: 0,
  input_tokens: 0,
  cached_tokens: 0,
  cache_write_tokens: 0,
  output_tokens: 0,
  images: 0,
  audio_seconds: 0,
  video_seconds: 0,
  cost_usd: 0,
  saved_micros: 0,
  prompt_cache_saved_micros: 0,
  refused: 0,
  failed: 0,
  cancelled: 0,
  cache_hits: 0,
};

/** The Range filter's choices: so many days back. */
const ranges = [
  { value: '7', label: 'Last 7 days' },
  { value: '30', label: 'Last 30 days' },
  { value: '90', label: 'Last 90 days' },
];

/** How many of some requests did not complete, as a note: "2 refused · 1 failed" (nothing when all completed). */
function outcomes(row: UsageRow): string {
  const parts: string[] = [];
  if (row.refused) parts.push(`${count(row.refused)} refused`);
  if (row.failed) parts.push(`${count(row.failed)} failed`);
  if (row.cancelled) parts.push(`${count(row.cancelled)} cancelled`);
  return parts.join(' · ');
}

/** What the response cache saved some requests, and on how many hits: "$0.000036 on 4 hits". */
function cacheSaving(row: UsageRow): string {
  return `${money(row.saved_micros / 1_000_000)} on ${count(row.cache_hits)} hit${row.cache_hits === 1 ? '' : 's'}`;
}

/**
 * What the vendors' prompt caches saved some requests, and the prompt tokens read from and written to them: "prompt
 * cache saved $0.0123: 2,048 tokens read from it, 1,024 written" (nothing when they read and wrote none).
 */
function promptCacheSaving(row: UsageRow): string | undefined {
  if (row.cached_tokens === 0 && row.cache_write_tokens === 0 && row.prompt_cache_saved_micros === 0) return undefined;
  const written = row.cache_write_tokens > 0 ? `, ${count(row.cache_write_tokens)} written` : '';
  return (
    `prompt cache saved ${money(row.prompt_cache_saved_micros / 1_000_000)}: ${count(row.cached_tokens)} tokens ` +
    `read from it${written}`
  );
}

function media(row: UsageRow): string {
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

function Stat({
  label,
  value,
  loading,
  note,
}: {
  label: string;
  value: string;
  loading: boolean;
  note?: string | undefined;
}) {
  return (
    <div class="stat">
      <dt class="stat-label">{label}</dt>
      <dd class="stat-value">{loading ? <span class="skeleton skeleton-stat" aria-hidden="true" /> : value}</dd>
      {/* Under the value: beside it, a stat's narrow box would cut it off. */}
      {note && !loading && <dd class="stat-note muted small">{note}</dd>}
    </div>
  );
}

/**
 * A key's name in the by-key table: a revoked key keeps it, marked; on an admin's report of every account, its account
 * under it.
 */
function KeyName({ row, account }: { row: KeyUsageRow; account?: string }) {
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

/**
 * The sums every breakdown shows of its rows, after the row's name. Requests are every request the log holds,
 * refusals included (as Activity counts them); the amounts and spend are the settled requests'.
 */
const amountColumns: Column<UsageRow>[] = [
  {
    id: 'requests',
    label: 'Requests',
    numeric: true,
    cell: (row) => (
      <>
        {count(row.requests)}
        {outcomes(row) && <span class="cell-sub muted">{outcomes(row)}</span>}
      </>
    ),
  },
  {
    id: 'input',
    label: 'Input tokens',
    numeric: true,
    headerClass: 'wrap-head',
    cell: (row) => count(row.input_tokens),
  },
  {
    id: 'output',
    label: 'Output tokens',
    numeric: true,
    headerClass: 'wrap-head',
    cell: (row) => count(row.output_tokens),
  },
  // The vendor's prompt caching (input billed at the cached price), not the gateway's response cache: read apart from
  // the hits.
  {
    id: 'cached',
    label: 'Prompt-cache tokens',
    note: 'vendor’s prompt caching',
    numeric: true,
    priority: 'detail',
    cell: (row) => count(row.cached_tokens),
  },
  {
    id: 'cache-writes',
    label: 'Cache-write tokens',
    note: 'vendor’s prompt caching',
    numeric: true,
    priority: 'detail',
    cell: (row) => count(row.cache_write_tokens),
  },
  // What that caching saved, net: a column beside the input it lowered where the page is wide, else in the details.
  {
    id: 'prompt-cache-saved',
    label: 'Prompt cache saved',
    note: 'vendor’s prompt caching',
    numeric: true,
    headerClass: 'wrap-head',
    priority: 'wide',
    title: (row) =>
      row.prompt_cache_saved_micros < 0
        ? 'Below zero: its cache writes, billed above the input price, cost more than its reads saved'
        : undefined,
    cell: (row) => money(row.prompt_cache_saved_micros / 1_000_000),
  },
  { id: 'media', label: 'Media', class: 'muted nowrap', priority: 'detail', cell: media },
  {
    id: 'cache-hits',
    label: 'Cache hits',
    note: 'response cache',
    numeric: true,
    headerClass: 'wrap-head',
    cell: (row) => count(row.cache_hits),
  },
  {
    id: 'saved',
    label: 'Saved',
    note: 'by cache hits',
    numeric: true,
    headerClass: 'wrap-head',
    cell: (row) => money(row.saved_micros / 1_000_000),
  },
  { id: 'spend', label: 'Spend', numeric: true, class: 'cell-strong', cell: (row) => money(row.cost_usd) },
];

/** A model's name; requests that named no model this gateway serves are one row. */
function ModelName({ model }: { model: string | undefined }) {
  return model ? (
    <>{model}</>
  ) : (
    <span class="unknown-model" title="Requests refused because they named no model this gateway serves">
      Unknown model
    </span>
  );
}

const byModelColumns: Column<UsageRow>[] = [
  {
    id: 'model',
    label: 'Model',
    lead: true,
    class: 'mono cell-strong cell-clip',
    title: (row) => row.model || undefined,
    cell: (row) => <ModelName model={row.model} />,
  },
  ...amountColumns,
];

/**
 * By key: the same sums but the prompt-cache tokens; what the prompt cache saved is in a row's details, as the key's
 * name takes the width the model's column leaves.
 */
const byKeyColumns: Column<KeyUsageRow>[] = amountColumns
  .filter((column) => column.id !== 'cached' && column.id !== 'cache-writes')
  .map((column) => (column.id === 'prompt-cache-saved' ? { ...column, priority: 'detail' as const } : column));

const latencyColumns: Column<ModelLatency>[] = [
  {
    id: 'model',
    label: 'Model',
    lead: true,
    class: 'mono cell-strong cell-clip',
    title: (row) => row.model || undefined,
    cell: (row) => <ModelName model={row.model} />,
  },
  { id: 'requests', label: 'Requests', numeric: true, cell: (row) => count(row.requests) },
  {
    id: 'error-rate',
    label: 'Error rate',
    note: 'not completed',
    numeric: true,
    headerClass: 'wrap-head',
    class: (row) => (row.errors > 0 ? 'text-danger' : undefined),
    title: (row) => `${count(row.errors)} of ${count(row.requests)} not completed (${count(row.refused)} refused)`,
    cell: (row) => percent(row.error_rate),
  },
  {
    id: 'latency-p50',
    label: 'p50 latency',
    note: 'completed',
    numeric: true,
    headerClass: 'wrap-head',
    cell: (row) => duration(row.latency_p50_ms),
  },
  {
    id: 'latency-p95',
    label: 'p95 latency',
    note: 'completed',
    numeric: true,
    headerClass: 'wrap-head',
    cell: (row) => duration(row.latency_p95_ms),
  },
  {
    id: 'ttft-p50',
    label: 'p50 TTFT',
    note: 'streams',
    numeric: true,
    headerClass: 'wrap-head',
    cell: (row) => duration(row.ttft_p50_ms),
  },
  {
    id: 'ttft-p95',
    label: 'p95 TTFT',
    note: 'streams',
    numeric: true,
    headerClass: 'wrap-head',
    cell: (row) => duration(row.ttft_p95_ms),
  },
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
  // An admin's key filter lists every account's keys (the CLI's are the Default account's); anyone else's, the names
  // of the team's keys they read usage for (a viewer's too: they list no keys).
  const keys = useApi<List<Key | KeyName>>(admin ? '/admin/keys' : '/key-names');
  const accounts = useApi<List<Account>>(admin ? '/admin/accounts' : null);
  const accountNames = useMemo(
    () =>
      new Map((accounts.data?.data ?? []).map((account) => [account.id, account.email || account.name || account.id])),
    [accounts.data],
  );
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
      const owner = 'account_email' in key ? key.account_email || key.account_name : undefined;
      const revoked = 'revoked' in key && key.revoked ? ' (revoked)' : '';
      options.set(key.id, `${allAccounts && owner ? `${key.name} (${owner})` : key.name}${revoked}`);
    }
    // A key the list does not hold (an admin's list has live keys only): named and marked as the report has it.
    for (const row of data?.by_key ?? [])
      if (row.key_id && !options.has(row.key_id))
        options.set(row.key_id, `${row.key_name ?? row.key_id}${row.key_revoked ? ' (revoked)' : ''}`);
    return [...options];
  }, [keys.data, data, admin, accountId, allAccounts]);

  const chart = useMemo(() => {
    if (!data)
      return { labels: [] as string[], spend: [] as Series[], requests: [] as Series[], empty: true, noSpend: true };
    const dayList = daysBetween(data.from, data.to);
    const index = new Map(dayList.map((day, i) => [day, i]));
    const totalsByModel = new Map<string, number>();
    for (const row of data.daily)
      totalsByModel.set(row.model ?? '', (totalsByModel.get(row.model ?? '') ?? 0) + row.cost_usd);
    // Models that cost something (a model only refused, or only answered from the cache for free, has no bar).
    const ranked = [...totalsByModel]
      .filter(([, usd]) => usd > 0)
      .sort((a, b) => b[1] - a[1])
      .map(([name]) => name);
    const shown = ranked.length > palette.length ? ranked.slice(0, palette.length - 1) : ranked;
    const spend: Series[] = shown.map((name, i) => ({
      label: name || 'Unknown model',
      color: palette[i % palette.length]!,
      values: dayList.map(() => 0),
    }));
    const other: Series = { label: 'Other models', color: otherColor, values: dayList.map(() => 0) };
    const completed = dayList.map(() => 0);
    const notCompleted = dayList.map(() => 0);
    for (const row of data.daily) {
      const i = index.get(row.day ?? '');
      if (i === undefined) continue;
      const at = shown.indexOf(row.model ?? '');
      const series = at >= 0 ? spend[at]! : other;
      series.values[i] = (series.values[i] ?? 0) + row.cost_usd;
      const failed = row.refused + row.failed + row.cancelled;
      completed[i] = (completed[i] ?? 0) + row.requests - failed;
      notCompleted[i] = (notCompleted[i] ?? 0) + failed;
    }
    if (ranked.length > shown.length) spend.push(other);
    return {
      labels: dayList.map(dayLabel),
      spend,
      // As Activity's chart: the requests that completed, and those refused, failed or cancelled.
      requests: [
        { label: 'Completed', color: '#6366f1', values: completed },
        { label: 'Not completed', color: '#ef4444', values: notCompleted },
      ],
      empty: data.daily.length === 0,
      noSpend: !data.daily.some((row) => row.cost_usd > 0),
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
        description={
          allAccounts
            ? 'Spend and traffic of every key of this gateway, of every account, per UTC day.'
            : admin
              ? 'Spend and traffic of one account’s keys per UTC day.'
              : 'Spend and traffic of your keys per UTC day.'
        }
        actions={
          <a
            class="button button-secondary"
            href={`${apiBase}/usage.csv?${[query, teamQuery()].filter(Boolean).join('&')}`}
            download
          >
            <ButtonIcon d="M10 3v9m0 0l-3.5-3.5M10 12l3.5-3.5M4 15v1.5h12V15" />
            Download CSV
          </a>
        }
      />
      <div class="filters" role="group" aria-label="Filters">
        <FilterSelect id="usage-range" label="Range" value={days} onChange={setDays} options={ranges} />
        {admin && (
          <FilterSelect
            id="usage-account"
            label="Account"
            value={accountId}
            onChange={(value) => {
              setAccountId(value);
              setKeyId('');
            }}
            any="All accounts"
            options={(accounts.data?.data ?? []).map((account) => ({
              value: account.id,
              label: account.email || account.name || account.id,
            }))}
          />
        )}
        <FilterSelect
          id="usage-key"
          label="Key"
          value={keyId}
          onChange={setKeyId}
          any="All keys"
          options={keyOptions.map(([id, name]) => ({ value: id, label: name }))}
        />
        <FilterSelect
          id="usage-model"
          label="Model"
          value={model}
          onChange={setModel}
          any="All models"
          options={modelOptions.map((m) => ({ value: m, label: m }))}
        />
        <p class="filters-note muted" aria-live="polite">
          {report.loading && data ? 'Updating…' : rangeText}
        </p>
      </div>
      <ErrorMessage message={report.error} />
      <dl class="stats" aria-busy={loading}>
        {/* What the response cache saved (its hits billed less than the answers they reused), when it answered any. */}
        <Stat
          label="Spend"
          value={money(totals.cost_usd)}
          note={
            totals.cache_hits > 0 || totals.saved_micros > 0
              ? `saved by the response cache: ${cacheSaving(totals)}`
              : undefined
          }
          loading={loading}
        />
        {/* Every request, refusals included: the number Activity counts for the same days. */}
        <Stat
          label="Requests"
          value={count(totals.requests)}
          note={outcomes(totals) ? `of which ${outcomes(totals)}` : undefined}
          loading={loading}
        />
        {/* What the vendors' prompt caches saved, under the input they lowered: never mixed with the response cache's saving. */}
        <Stat
          label="Input tokens"
          value={count(totals.input_tokens)}
          note={promptCacheSaving(totals)}
          loading={loading}
        />
        <Stat label="Output tokens" value={count(totals.output_tokens)} loading={loading} />
        {allAccounts ? (
          <Stat
            label="Accounts"
            value={data?.accounts ? count(data.accounts.total) : ''}
            note={data?.accounts ? `${count(data.accounts.active)} with requests in range` : undefined}
            loading={loading}
          />
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
            empty={!loading && chart.noSpend}
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
            stacked
            format={count}
            wholeNumbers
            axisFormat={compactCount}
            label={`Requests per day${rangeText ? `, ${rangeText}` : ''}: ${count(totals.requests)} in total, ${count(totals.refused + totals.failed + totals.cancelled)} not completed.`}
            empty={!loading && chart.empty}
            emptyText="No requests in this range"
          />
        </section>
      </div>
      <section class="section" aria-labelledby="by-model-heading">
        <h2 id="by-model-heading">By model</h2>
        <DataTable
          labelledBy="by-model-heading"
          columns={byModelColumns}
          rows={data && byModel}
          rowKey={(row) => row.model ?? ''}
          skeletonRows={3}
          empty="No usage in this range."
        />
        <p class="table-note muted small">
          Requests: every request logged, refused ones included (Activity counts the same). Tokens and spend are the
          vendors’. Prompt cache saved: what the vendor’s prompt caching saved, net (the prompts at the plain input
          price less what they were billed; below zero where its cache writes, billed above the input price, cost more
          than its reads saved); the tokens it read and wrote are in a row’s details. Saved by cache hits: what the
          gateway’s response cache’s hits would have cost without it.
        </p>
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
              cell: (row) => (
                <KeyName
                  row={row}
                  account={
                    allAccounts && row.key_account_id
                      ? (accountNames.get(row.key_account_id) ?? row.key_account_id)
                      : undefined
                  }
                />
              ),
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
        <DataTable
          labelledBy="latency-heading"
          columns={latencyColumns}
          rows={data && latency}
          rowKey={(row) => row.model}
          skeletonRows={2}
          empty="No requests in this range."
        />
        <p class="table-note muted small">
          Over the same days, keys and models as above, with the same request counts as By model. Refused requests count
          as errors; latency is over completed requests only, TTFT over completed streams. Requests naming a model no
          vendor here serves are under “Unknown model”.
        </p>
      </section>
    </>
  );
}
