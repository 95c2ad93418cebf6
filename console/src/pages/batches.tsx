import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import { useAccount, useApp } from '../app-context';
import { CopyButton, EmptyRow, ErrorMessage, PageHeader, PagedFooter, SkeletonRows, TableCard, useApi, useTitle } from '../components/ui';
import { count, fullTime, money, shortDateTime } from '../format';
import { usePagedList } from '../paged-list';
import type { Account, Batch, BatchPage, BatchStatus, List } from '../types';

/*
 * The account's message batches (`POST /v1/messages/batches`), newest first,
 * a page at a time: how far each has come, by outcome, what it has cost so
 * far, and, once ended, where its results are read (with an API key: the
 * console's session does not read them). An admin picks the account.
 */

const pageSize = 20;
const columns = 6;

const statusLabel: Record<BatchStatus, string> = { in_progress: 'in progress', canceling: 'canceling', ended: 'ended' };
const statusBadge: Record<BatchStatus, string> = { in_progress: 'badge-accent', canceling: 'badge-warn', ended: 'badge-ok' };

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

/** An ended batch's results: its path in a curl line to copy, read with an API key of the account. */
function Results({ batch, baseUrl }: { batch: Batch; baseUrl: string }) {
  const curl = `curl ${baseUrl.replace(/\/+$/, '')}${batch.results_path} -H "x-api-key: $SWITCHYARD_API_KEY"`;
  return (
    <tr class="batch-results-row">
      <td colSpan={columns}>
        <div class="batch-results">
          <span class="muted small">Results (JSONL), read with an API key of this account:</span>
          <code class="batch-curl" aria-label={`Results of ${batch.id}`}>
            {curl}
          </code>
          <CopyButton text={curl} label={`Copy the results command of ${batch.id}`} />
        </div>
      </td>
    </tr>
  );
}

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
  const { current, rows, error, loading, more, loadMore, dismissMoreError } = usePagedList(listPath, refreshes, {
    rows: (page: BatchPage) => page.data,
    hasMore: (page) => page.has_more,
    next: (_page, loadedRows) => {
      const last = loadedRows.at(-1);
      return last ? `after_id=${encodeURIComponent(last.id)}` : undefined;
    },
  });

  const others = (accounts.data?.data ?? []).filter((account) => account.id !== me.id);

  return (
    <>
      <PageHeader
        title="Batches"
        description={
          <>
            Message batches made with <code>POST /v1/messages/batches</code>{admin && accountId ? ' by this account’s keys' : ' by your keys'}, newest first. A batch’s results are read with an API key once it has ended.
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
        <TableCard labelledBy="batches-heading">
          <table class="table batches-table" aria-labelledby="batches-heading">
            <thead>
              <tr>
                <th scope="col">Batch</th>
                <th scope="col">Status</th>
                <th scope="col">
                  Progress <span class="th-note">done / total</span>
                </th>
                <th scope="col" class="num">
                  Cost <span class="th-note">so far</span>
                </th>
                <th scope="col">Created</th>
                <th scope="col">
                  Ends <span class="th-note">ended or expires</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {loading && <SkeletonRows columns={columns} rows={3} />}
              {error && !current && (
                <tr class="error-row">
                  <td colSpan={columns}>
                    <div class="retry-row">
                      <ErrorMessage message={`Could not load the batches: ${error}`} />
                      <button type="button" class="button button-secondary" onClick={() => setRefreshes((n) => n + 1)}>
                        Try again
                      </button>
                    </div>
                  </td>
                </tr>
              )}
              {current && rows.length === 0 && <EmptyRow columns={columns}>No batches yet: make one with POST /v1/messages/batches and an API key.</EmptyRow>}
              {rows.map((batch) => (
                <Fragment key={batch.id}>
                  <tr class={batch.results_path ? 'batch-row has-results' : 'batch-row'}>
                    <td class="mono cell-strong nowrap">{batch.id}</td>
                    <td class="nowrap">
                      <span class={`badge badge-cap ${statusBadge[batch.status]}`}>{statusLabel[batch.status]}</span>
                    </td>
                    <td class="batch-progress-cell">
                      <Progress batch={batch} />
                    </td>
                    <td class="num cell-strong">{money(batch.cost_usd)}</td>
                    <td class="nowrap" title={fullTime(batch.created_at)}>
                      {shortDateTime(batch.created_at)}
                    </td>
                    <td class="nowrap">
                      <Ends batch={batch} />
                    </td>
                  </tr>
                  {batch.results_path && <Results batch={batch} baseUrl={config.base_url} />}
                </Fragment>
              ))}
            </tbody>
          </table>
        </TableCard>
        <PagedFooter what="batches" error={error} refreshed={!!current} more={more} hasMore={!!current?.hasMore} onMore={() => void loadMore()} onDismiss={dismissMoreError} />
      </section>
    </>
  );
}
