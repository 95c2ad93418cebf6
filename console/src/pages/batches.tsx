import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import { useAccount, useApp } from '../app-context';
import { type Column, PagedTable } from '../components/data-table';
import { CopyButton, PageHeader, useApi, useTitle } from '../components/ui';
import { count, fullTime, money, shortDateTime } from '../format';
import { usePagedList } from '../paged-list';
import type { Account, Batch, BatchPage, BatchStatus, List, OpenAIBatchStatus } from '../types';

/*
 * The account's batches of both APIs (`POST /v1/messages/batches`, and
 * OpenAI's `POST /v1/batches` over a file), newest first, a page at a time:
 * which API and endpoint, an OpenAI batch's files by name, how far each has
 * come, by outcome, what it has cost so far, and, once ended, where its
 * results are read (with an API key: the console's session does not read
 * them). An admin picks the account.
 */

const pageSize = 20;

const statusLabel: Record<BatchStatus, string> = { validating: 'validating', in_progress: 'in progress', canceling: 'canceling', ended: 'ended' };
const statusBadge: Record<BatchStatus, string> = { validating: 'badge-accent', in_progress: 'badge-accent', canceling: 'badge-warn', ended: 'badge-ok' };
const openAIStatusBadge: Record<OpenAIBatchStatus, string> = {
  validating: 'badge-accent',
  in_progress: 'badge-accent',
  finalizing: 'badge-accent',
  cancelling: 'badge-warn',
  completed: 'badge-ok',
  expired: 'badge-warn',
  cancelled: 'badge-warn',
  failed: 'badge-danger',
};

/** Its status as its own API says it (OpenAI's: `completed`, `failed`, …). */
function Status({ batch }: { batch: Batch }) {
  if (batch.openai_status) return <span class={`badge badge-cap ${openAIStatusBadge[batch.openai_status]}`}>{batch.openai_status.replace('_', ' ')}</span>;
  return <span class={`badge badge-cap ${statusBadge[batch.status]}`}>{statusLabel[batch.status]}</span>;
}

/** Under its status: the API it was made with, the endpoint its requests call, and an OpenAI batch's input file. */
function Made({ batch }: { batch: Batch }) {
  const input = batch.files?.input;
  return (
    <span class="cell-sub muted">
      {batch.dialect === 'openai' ? 'Batch API' : 'Message Batches'} · <span class="mono">{batch.endpoint}</span>
      {input && (
        <>
          {' · '}
          <span title={input.id}>{input.filename ?? input.id}</span>
        </>
      )}
    </span>
  );
}

/** The outcomes a batch has so far, the ones with none left out: "3 succeeded · 1 errored · 2 processing" (wrapped between them only). */
function Outcomes({ batch }: { batch: Batch }) {
  const { counts } = batch;
  const parts = (['succeeded', 'errored', 'canceled', 'expired', 'processing'] as const).filter((name) => counts[name] > 0);
  if (parts.length === 0) return <span class="cell-sub muted">no requests</span>;
  return (
    <span class="cell-sub muted batch-outcomes">
      {parts.map((name, i) => (
        <Fragment key={name}>
          {i > 0 && ' · '}
          <span class="nowrap">
            {count(counts[name])} {name}
          </span>
        </Fragment>
      ))}
    </span>
  );
}

function Progress({ batch }: { batch: Batch }) {
  const done = batch.total - batch.counts.processing;
  return (
    <>
      <span class="batch-progress">
        <progress max={Math.max(1, batch.total)} value={batch.total === 0 ? 1 : done} aria-label={`${batch.id}: ${count(done)} of ${count(batch.total)} requests done`} />
        <span class="batch-done">
          {count(done)}/{count(batch.total)}
        </span>
      </span>
      <Outcomes batch={batch} />
    </>
  );
}

/** When it ended; before that, when it expires (and when a cancel was asked). */
function Ends({ batch }: { batch: Batch }) {
  const ended = batch.ended_at !== null;
  const at = batch.ended_at ?? batch.expires_at;
  return (
    <>
      <span title={fullTime(at)}>{shortDateTime(at)}</span>
      <span class="cell-sub muted">{ended ? 'ended' : batch.cancel_initiated_at !== null ? `expires · cancel asked ${shortDateTime(batch.cancel_initiated_at)}` : 'expires'}</span>
    </>
  );
}

/** One results file: its path in a curl line to copy, read with an API key of the account. */
function ResultsLine({ batch, path, what, baseUrl }: { batch: Batch; path: string; what: string; baseUrl: string }) {
  const header = batch.dialect === 'openai' ? '-H "Authorization: Bearer $SWITCHYARD_API_KEY"' : '-H "x-api-key: $SWITCHYARD_API_KEY"';
  const curl = `curl ${baseUrl.replace(/\/+$/, '')}${path} ${header}`;
  return (
    <div class="batch-results">
      <span class="muted small">{what} (JSONL), read with an API key of this account:</span>
      <code class="batch-curl" aria-label={`${what} of ${batch.id}`}>
        {curl}
      </code>
      <CopyButton text={curl} label={`Copy the ${what.toLowerCase()} command of ${batch.id}`} />
    </div>
  );
}

/** An ended batch's results, on a line under its row: a message batch's results, an OpenAI batch's output and error files (by name). */
function Results({ batch, baseUrl }: { batch: Batch; baseUrl: string }) {
  const output = batch.files?.output;
  const errors = batch.files?.error;
  return batch.dialect === 'openai' ? (
    <>
      {output && <ResultsLine batch={batch} path={`/v1/files/${output.id}/content`} what={`Output ${output.filename ?? output.id}`} baseUrl={baseUrl} />}
      {errors && <ResultsLine batch={batch} path={`/v1/files/${errors.id}/content`} what={`Errors ${errors.filename ?? errors.id}`} baseUrl={baseUrl} />}
    </>
  ) : (
    batch.results_path && <ResultsLine batch={batch} path={batch.results_path} what="Results" baseUrl={baseUrl} />
  );
}

/** Whether the batch has anything to read yet. */
const hasResults = (batch: Batch) => (batch.dialect === 'openai' ? !!(batch.files?.output || batch.files?.error) : !!batch.results_path);

const batchColumns: Column<Batch>[] = [
  { id: 'id', label: 'Batch', lead: true, class: 'mono cell-strong nowrap', cell: (batch) => batch.id },
  {
    id: 'status',
    label: 'Status',
    cell: (batch) => (
      <>
        <Status batch={batch} />
        <Made batch={batch} />
      </>
    ),
  },
  { id: 'progress', label: 'Progress', note: 'done / total', class: 'batch-progress-cell', cell: (batch) => <Progress batch={batch} /> },
  { id: 'cost', label: 'Cost', note: 'so far', numeric: true, class: 'cell-strong', cell: (batch) => money(batch.cost_usd) },
  { id: 'created', label: 'Created', class: 'nowrap', title: (batch) => fullTime(batch.created_at), cell: (batch) => shortDateTime(batch.created_at) },
  { id: 'ends', label: 'Ends', note: 'ended or expires', class: 'nowrap', cell: (batch) => <Ends batch={batch} /> },
];

export function BatchesPage() {
  useTitle('Batches');
  const me = useAccount();
  const { config } = useApp();
  const admin = me.role === 'admin';
  // An admin reads their own account's batches unless they pick another.
  const [accountId, setAccountId] = useState('');
  const accounts = useApi<List<Account>>(admin ? '/admin/accounts' : null);
  const query = new URLSearchParams({ limit: String(pageSize) });
  if (admin && accountId) query.set('account_id', accountId);
  const listPath = `/batches?${query}`;

  const [refreshes, setRefreshes] = useState(0);
  const list = usePagedList(listPath, refreshes, {
    rows: (page: BatchPage) => page.data,
    hasMore: (page) => page.has_more,
    next: (_page, loadedRows) => {
      const last = loadedRows.at(-1);
      return last ? `after_id=${encodeURIComponent(last.id)}` : undefined;
    },
  });
  const { current, rows } = list;

  const others = (accounts.data?.data ?? []).filter((account) => account.id !== me.id);

  return (
    <>
      <PageHeader
        title="Batches"
        description={
          <>
            Batches made with <code>POST /v1/messages/batches</code> or <code>POST /v1/batches</code>{admin && accountId ? ' by this account’s keys' : ' by your keys'}, newest first. A batch’s results are read with an API key once it has ended.
          </>
        }
        actions={
          <button type="button" class="button button-secondary" onClick={() => setRefreshes((n) => n + 1)}>
            Refresh
          </button>
        }
      />
      {admin && (
        <div class="filters" role="group" aria-label="Filters">
          <div class="field field-inline">
            <label for="batches-account">Account</label>
            <select id="batches-account" value={accountId} onChange={(e) => setAccountId(e.currentTarget.value)}>
              <option value="">Your account</option>
              {others.map((account) => (
                <option value={account.id} key={account.id}>
                  {account.email || account.name || account.id}
                </option>
              ))}
            </select>
          </div>
        </div>
      )}
      <section class="section" aria-labelledby="batches-heading">
        <div class="section-head">
          <h2 id="batches-heading">Batches</h2>
          <p class="muted small" aria-live="polite">
            {current ? `${count(rows.length)}${current.hasMore ? '+' : ''} shown, newest first` : ''}
          </p>
        </div>
        <PagedTable
          labelledBy="batches-heading"
          class="batches-table"
          columns={batchColumns}
          list={list}
          what="batches"
          onRetry={() => setRefreshes((n) => n + 1)}
          rowKey={(batch) => batch.id}
          skeletonRows={3}
          rowClass={(batch) => (hasResults(batch) ? 'batch-row has-results' : 'batch-row')}
          rowDetail={(batch) => hasResults(batch) && <Results batch={batch} baseUrl={config.base_url} />}
          rowDetailClass="batch-results-row"
          empty="No batches yet: make one with POST /v1/messages/batches or POST /v1/batches and an API key."
        />
      </section>
    </>
  );
}
