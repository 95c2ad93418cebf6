import { Fragment } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { api, isAbort, messageOf } from '../api';
import { useAccount, useApp } from '../app-context';
import { type Column, PagedTable } from '../components/data-table';
import { ConfirmDialog, CopyButton, ErrorMessage, PageHeader, useApi, useTitle } from '../components/ui';
import { count, fullTime, moment, money, shortDateTime, timeOfDay } from '../format';
import type { PagedList } from '../paged-list';
import { Link, navigate, useSearch } from '../router';
import type { Account, Batch, BatchPage, BatchStatus, List, OpenAIBatchStatus } from '../types';

/*
 * The account's batches of both APIs (`POST /v1/messages/batches`, and
 * OpenAI's `POST /v1/batches` over a file), newest first, a page at a time:
 * which API and endpoint, an OpenAI batch's files by name, how far each has
 * come, by outcome, what it has cost so far, and, once ended, where its
 * results are read (with an API key: the console's session does not read
 * them). Live while any listed batch runs (read again every 5 s while the
 * page is in sight); a running batch canceled and an ended one deleted from
 * its row. An admin sees every account's unless they pick one; the batch
 * `?batch=<id>` names is marked and scrolled to, whichever account is picked.
 */

const pageSize = 20;

const statusLabel: Record<BatchStatus, string> = {
  validating: 'validating',
  in_progress: 'in progress',
  canceling: 'canceling',
  ended: 'ended',
};
const statusBadge: Record<BatchStatus, string> = {
  validating: 'badge-accent',
  in_progress: 'badge-accent',
  canceling: 'badge-warn',
  ended: 'badge-ok',
};
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
  if (batch.openai_status)
    return (
      <span class={`badge badge-cap ${openAIStatusBadge[batch.openai_status]}`}>
        {batch.openai_status.replace('_', ' ')}
      </span>
    );
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

/**
 * The outcomes a batch has so far, the ones with none left out: "3 succeeded · 1 errored · 2 processing" (wrapped
 * between them only).
 */
function Outcomes({ batch }: { batch: Batch }) {
  const { counts } = batch;
  const parts = (['succeeded', 'errored', 'canceled', 'expired', 'processing'] as const).filter(
    (name) => counts[name] > 0,
  );
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
        <progress
          max={Math.max(1, batch.total)}
          value={batch.total === 0 ? 1 : done}
          aria-label={`${batch.id}: ${count(done)} of ${count(batch.total)} requests done`}
        />
        <span class="batch-done">
          {count(done)}/{count(batch.total)}
        </span>
      </span>
      <Outcomes batch={batch} />
    </>
  );
}

/** When it ended; before that, when it expires (when a cancel was asked is said under a canceling batch's row). */
function Ends({ batch }: { batch: Batch }) {
  const ended = batch.ended_at !== null;
  const at = batch.ended_at ?? batch.expires_at;
  return (
    <>
      <span title={fullTime(at)}>{shortDateTime(at)}</span>
      <span class="cell-sub muted">{ended ? 'ended' : 'expires'}</span>
    </>
  );
}

/**
 * One results file: its path in a curl line to copy, read with an API key of the account (`$SWITCHYARD_KEY`, as the
 * README names it).
 */
function ResultsLine({ batch, path, what, baseUrl }: { batch: Batch; path: string; what: string; baseUrl: string }) {
  const header =
    batch.dialect === 'openai' ? '-H "Authorization: Bearer $SWITCHYARD_KEY"' : '-H "x-api-key: $SWITCHYARD_KEY"';
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

/**
 * An ended batch's results, on a line under its row: a message batch's results, an OpenAI batch's output and error
 * files (by name).
 */
function Results({ batch, baseUrl }: { batch: Batch; baseUrl: string }) {
  const output = batch.files?.output;
  const errors = batch.files?.error;
  return batch.dialect === 'openai' ? (
    <>
      {output && (
        <ResultsLine
          batch={batch}
          path={`/v1/files/${output.id}/content`}
          what={`Output ${output.filename ?? output.id}`}
          baseUrl={baseUrl}
        />
      )}
      {errors && (
        <ResultsLine
          batch={batch}
          path={`/v1/files/${errors.id}/content`}
          what={`Errors ${errors.filename ?? errors.id}`}
          baseUrl={baseUrl}
        />
      )}
    </>
  ) : (
    batch.results_path && <ResultsLine batch={batch} path={batch.results_path} what="Results" baseUrl={baseUrl} />
  );
}

/** Whether the batch has anything to read yet. */
const hasResults = (batch: Batch) =>
  batch.dialect === 'openai' ? !!(batch.files?.output || batch.files?.error) : !!batch.results_path;

/** Whether a batch may still change: not ended, or an OpenAI batch whose files are still being written. */
const isRunning = (batch: Batch) => batch.status !== 'ended' || batch.openai_status === 'finalizing';
/** Whether a cancel may be asked: validating or in progress. */
const canCancel = (batch: Batch) => batch.status === 'validating' || batch.status === 'in_progress';
/** Whether it may be deleted: ended, its files written. */
const canDelete = (batch: Batch) => !isRunning(batch);

/** Why a canceling batch still counts requests as processing, in a line under its row until it ends. */
function CancelingNote({ batch }: { batch: Batch }) {
  const left = batch.counts.processing;
  return (
    <p class="batch-canceling-note small">
      <strong>Canceling</strong> (asked {moment((batch.cancel_initiated_at ?? 0) * 1000)}). Requests that had not
      started are canceled and cost nothing.{' '}
      {left > 0
        ? `The ${count(left)} still shown as processing were already queued or sent to a vendor: those a vendor is ` +
          `answering finish (and are billed), the others are canceled when a worker reaches them. The batch ends ` +
          `when none is left.`
        : 'The batch ends in a moment.'}
    </p>
  );
}

/** The model a batch's requests name, or how many ("3 models", all of them in the row's details). */
function ModelCell({ batch }: { batch: Batch }) {
  const models = batch.models ?? [];
  if (models.length === 0) return <span class="muted">—</span>;
  if (models.length === 1) return <span class="mono">{models[0]}</span>;
  return <span title={models.join(', ')}>{count(models.length)} models</span>;
}

/** The multiple of the listed price batch requests cost, in words: "half the standard price". */
function flexWords(multiple: number): string {
  if (multiple === 0.5) return 'half the standard price';
  if (multiple === 1) return 'the standard price';
  return `${Number(multiple.toFixed(4))} times the standard price`;
}

type Acting = { batch: Batch; action: 'cancel' | 'delete' };

/** Asks before canceling or deleting a batch, then does it through the console's endpoint. */
function ConfirmAction({
  acting,
  accountName,
  onClose,
  onDone,
}: {
  acting: Acting;
  accountName: string | undefined;
  onClose: () => void;
  onDone: (batch: Batch, action: Acting['action']) => void;
}) {
  const { batch, action } = acting;
  const run = async () => {
    const path = `/batches/${encodeURIComponent(batch.id)}`;
    if (action === 'cancel') onDone(await api<Batch>('POST', `${path}/cancel`), action);
    else {
      await api('DELETE', path);
      onDone(batch, action);
    }
  };
  const whose = accountName ? ` of ${accountName}` : '';
  return (
    <ConfirmDialog
      title={action === 'cancel' ? 'Cancel this batch?' : 'Delete this batch?'}
      confirm={action === 'cancel' ? 'Cancel batch' : 'Delete batch'}
      cancel="Keep it"
      onClose={onClose}
      onConfirm={run}
    >
      <span class="mono">{batch.id}</span>
      {whose}
      {action === 'cancel'
        ? `: its ${count(batch.counts.processing)} requests not yet done stop. Those a vendor is already answering ` +
          `finish (and are billed); the rest are canceled. What has finished keeps its results. This cannot be ` +
          `undone.`
        : batch.dialect === 'openai'
          ? ': the batch is removed from the list and can no longer be read through the API. Its input, output and ' +
            'error files stay among the account’s files. This cannot be undone.'
          : ': the batch and its results are removed: its results can no longer be read through the API. This ' +
            'cannot be undone.'}
    </ConfirmDialog>
  );
}

/** The most rows one read returns: a live refresh reads the rows shown again, up to this many. */
const readMost = 100;

interface Listing {
  path: string;
  rows: Batch[];
  page: BatchPage;
  hasMore: boolean;
}

/**
 * The batches of `listPath`, a page at a time, read again every 5 s while one of them (or `alsoLive`) is running and
 * the page is in sight: the rows shown so far read again in one request (up to 100; those past that kept as they
 * were). `at`: when they were last read.
 */
function useLiveBatches(
  listPath: string,
  alsoLive: boolean,
): PagedList<BatchPage, Batch> & {
  at: number | undefined;
  live: boolean;
  refresh: () => void;
  replace: (batch: Batch) => void;
  remove: (id: string) => void;
} {
  const [loaded, setLoaded] = useState<Listing | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [more, setMore] = useState<{ busy: boolean; error?: string }>({ busy: false });
  const [generation, setGeneration] = useState(0);
  const [at, setAt] = useState<number | undefined>(undefined);
  const [visible, setVisible] = useState(() => document.visibilityState !== 'hidden');
  const current = loaded?.path === listPath ? loaded : undefined;
  const shownRef = useRef(0);
  shownRef.current = current?.rows.length ?? 0;

  useEffect(() => {
    const controller = new AbortController();
    setError(undefined);
    // The rows shown read again (a refresh), or the first page (a new list).
    const limit = Math.min(readMost, Math.max(pageSize, shownRef.current));
    api<BatchPage>('GET', `${listPath}&limit=${limit}`, undefined, { signal: controller.signal })
      .then((page) => {
        if (controller.signal.aborted) return;
        setLoaded((previous) => {
          const same = previous?.path === listPath;
          // Rows past what one read holds stay as they were, after the fresh ones.
          const kept =
            same && previous.rows.length > readMost
              ? previous.rows.slice(readMost).filter((row) => !page.data.some((fresh) => fresh.id === row.id))
              : [];
          return {
            path: listPath,
            rows: [...page.data, ...kept],
            page: kept.length > 0 ? previous!.page : page,
            hasMore: kept.length > 0 ? previous!.hasMore : page.has_more,
          };
        });
        setAt(Date.now());
      })
      .catch((caught: unknown) => {
        if (!isAbort(caught) && !controller.signal.aborted) setError(messageOf(caught));
      });
    return () => controller.abort();
  }, [listPath, generation]);

  useEffect(() => {
    const update = () => setVisible(document.visibilityState !== 'hidden');
    document.addEventListener('visibilitychange', update);
    return () => document.removeEventListener('visibilitychange', update);
  }, []);

  const live = alsoLive || !!current?.rows.some(isRunning);
  // While a batch runs and the page is in sight: read again 5 s after the last read (and at once on coming back into
  // sight).
  useEffect(() => {
    if (!live || !visible || !current) return;
    const wait = at === undefined ? 0 : Math.max(0, at + 5000 - Date.now());
    const timer = window.setTimeout(() => setGeneration((n) => n + 1), wait);
    return () => window.clearTimeout(timer);
  }, [live, visible, at, !!current]);

  const loadMore = async () => {
    const cursor = current?.hasMore ? current.page.next_cursor : null;
    if (!cursor || more.busy) return;
    setMore({ busy: true });
    try {
      const page = await api<BatchPage>('GET', `${listPath}&limit=${pageSize}&cursor=${encodeURIComponent(cursor)}`);
      setLoaded((previous) =>
        previous?.path === listPath
          ? {
              path: listPath,
              rows: [...previous.rows, ...page.data.filter((row) => !previous.rows.some((had) => had.id === row.id))],
              page,
              hasMore: page.has_more,
            }
          : previous,
      );
      setMore({ busy: false });
    } catch (caught) {
      setMore({ busy: false, error: messageOf(caught) });
    }
  };
  const edit = (change: (rows: Batch[]) => Batch[]) =>
    setLoaded((previous) => (previous ? { ...previous, rows: change(previous.rows) } : previous));

  return {
    current: current
      ? { path: current.path, rows: current.rows, hasMore: current.hasMore, page: current.page }
      : undefined,
    rows: current?.rows ?? [],
    error,
    loading: !current && !error,
    more,
    loadMore,
    dismissMoreError: () => setMore({ busy: false }),
    at,
    live,
    refresh: () => setGeneration((n) => n + 1),
    replace: (batch) => edit((rows) => rows.map((row) => (row.id === batch.id ? batch : row))),
    remove: (id) => edit((rows) => rows.filter((row) => row.id !== id)),
  };
}

function batchColumns({
  accountNames,
  showAccount,
  act,
}: {
  accountNames: Map<string, string>;
  showAccount: boolean;
  act: (acting: Acting) => void;
}): Array<Column<Batch> | false> {
  const accountOf = (batch: Batch) => accountNames.get(batch.account_id) ?? batch.account_id;
  return [
    {
      id: 'id',
      label: 'Batch',
      // Every account's: whose each is, under its id (cut short; whole in its title and its details).
      ...(showAccount ? { note: 'and account' } : {}),
      lead: true,
      class: 'batch-id-cell',
      title: showAccount ? (batch) => `${batch.id} · ${accountOf(batch)}` : undefined,
      cell: (batch) => (
        <>
          <span class="mono cell-strong batch-id" id={`batch-${batch.id}`}>
            {batch.id}
          </span>
          {showAccount && <span class="cell-sub muted batch-account">{accountOf(batch)}</span>}
        </>
      ),
    },
    {
      id: 'status',
      label: 'Status',
      class: 'nowrap',
      cell: (batch) => (
        <>
          <Status batch={batch} />
          <Link
            href={`/console/activity?batch=${encodeURIComponent(batch.id)}`}
            class="cell-sub batch-requests-link"
            aria-label={`Requests of ${batch.id} in Activity`}
          >
            Requests
          </Link>
        </>
      ),
    },
    {
      id: 'model',
      label: 'Model',
      class: 'cell-clip batch-model-cell',
      title: (batch) => batch.models?.join(', '),
      cell: (batch) => <ModelCell batch={batch} />,
    },
    {
      id: 'progress',
      label: 'Progress',
      note: 'done / total',
      class: 'batch-progress-cell',
      cell: (batch) => <Progress batch={batch} />,
    },
    {
      id: 'cost',
      label: 'Cost',
      note: 'so far',
      numeric: true,
      class: 'cell-strong',
      cell: (batch) => money(batch.cost_usd),
    },
    { id: 'ends', label: 'Ends', note: 'ended or expires', class: 'nowrap', cell: (batch) => <Ends batch={batch} /> },
    { id: 'made', label: 'Made with', priority: 'detail', cell: (batch) => <Made batch={batch} /> },
    {
      id: 'models',
      label: 'Models',
      priority: 'detail',
      cell: (batch) =>
        batch.models && batch.models.length > 0 ? (
          <span class="mono">{batch.models.join(', ')}</span>
        ) : (
          <span class="muted">not recorded</span>
        ),
    },
    {
      id: 'created',
      label: 'Created',
      priority: 'detail',
      title: (batch) => fullTime(batch.created_at),
      cell: (batch) => shortDateTime(batch.created_at),
    },
    showAccount && {
      id: 'account-whole',
      label: 'Account',
      priority: 'detail',
      class: 'batch-account-whole',
      cell: accountOf,
    },
    {
      id: 'actions',
      label: 'Actions',
      hideLabel: true,
      actions: true,
      class: 'batch-actions nowrap',
      cell: (batch) => (
        <span class="batch-actions-line">
          {canCancel(batch) ? (
            <button
              type="button"
              class="button button-secondary button-small"
              aria-label={`Cancel ${batch.id}`}
              onClick={() => act({ batch, action: 'cancel' })}
            >
              Cancel
            </button>
          ) : canDelete(batch) ? (
            <button
              type="button"
              class="button button-ghost-danger button-small"
              aria-label={`Delete ${batch.id}`}
              onClick={() => act({ batch, action: 'delete' })}
            >
              Delete
            </button>
          ) : null}
        </span>
      ),
    },
  ];
}

export function BatchesPage() {
  useTitle('Batches');
  const me = useAccount();
  const { config } = useApp();
  const admin = me.role === 'admin';
  const search = useSearch();
  const params = useMemo(() => new URLSearchParams(search), [search]);
  // An admin sees every account's batches unless the address names one (`?account_id=`).
  const accountId = admin ? (params.get('account_id') ?? '') : '';
  const wanted = params.get('batch') ?? '';
  const accounts = useApi<List<Account>>(admin ? '/admin/accounts' : null);
  const accountNames = useMemo(
    () =>
      new Map((accounts.data?.data ?? []).map((account) => [account.id, account.email || account.name || account.id])),
    [accounts.data],
  );
  const query = new URLSearchParams();
  if (accountId) query.set('account_id', accountId);
  const listPath = `/batches?${query}`;

  // The batch a link names, read on its own: shown (first) whatever account is picked, until it is in the list.
  const named = useApi<Batch>(wanted ? `/batches/${encodeURIComponent(wanted)}` : null);
  const namedBatch = named.data && named.data.id === wanted ? named.data : undefined;
  const list = useLiveBatches(listPath, !!namedBatch && isRunning(namedBatch));
  const { current } = list;
  const listed = current?.rows ?? [];
  const rows = current
    ? namedBatch && !listed.some((row) => row.id === namedBatch.id)
      ? [namedBatch, ...listed]
      : listed
    : undefined;
  const { reload: reloadNamed } = named;
  // The named batch read again with the list.
  useEffect(() => {
    if (wanted && list.at !== undefined && namedBatch && !listed.some((row) => row.id === wanted)) reloadNamed();
  }, [list.at]);

  // Scrolled to once it is shown.
  const scrolled = useRef('');
  useEffect(() => {
    if (!wanted || scrolled.current === wanted || !rows?.some((row) => row.id === wanted)) return;
    scrolled.current = wanted;
    document.getElementById(`batch-${wanted}`)?.scrollIntoView({ block: 'center' });
  }, [rows, wanted]);

  const [acting, setActing] = useState<Acting | undefined>(undefined);
  const [notice, setNotice] = useState<string | undefined>(undefined);
  const done = (batch: Batch, action: Acting['action']) => {
    setActing(undefined);
    if (action === 'cancel') {
      list.replace(batch);
      if (namedBatch?.id === batch.id) named.setData(() => batch);
      setNotice(`Cancel asked for ${batch.id}.`);
    } else {
      list.remove(batch.id);
      if (namedBatch?.id === batch.id)
        navigate(`/console/batches${accountId ? `?account_id=${encodeURIComponent(accountId)}` : ''}`, {
          replace: true,
        });
      setNotice(`Deleted ${batch.id}.`);
    }
    list.refresh();
  };

  const flex = current?.page.flex_price_multiple;
  const showAccount = admin && !accountId;
  const columns = batchColumns({ accountNames, showAccount, act: setActing });
  const pick = (value: string) => {
    const next = new URLSearchParams();
    if (value) next.set('account_id', value);
    if (wanted) next.set('batch', wanted);
    const text = next.toString();
    navigate(text ? `/console/batches?${text}` : '/console/batches');
  };

  return (
    <>
      <PageHeader
        title="Batches"
        description={
          <>
            Batches made with <code>POST /v1/messages/batches</code> or <code>POST /v1/batches</code>
            {admin ? (accountId ? ' by this account’s keys' : ' by every account’s keys') : ' by your keys'}, newest
            first. A batch’s results are read with an API key once it has ended.
          </>
        }
        actions={
          <button type="button" class="button button-secondary" onClick={list.refresh}>
            Refresh
          </button>
        }
      />
      {flex !== undefined && (
        <p class="batch-price-note small">
          Batch requests cost the flex price: {flexWords(flex)} (×{flex}), billed as each request finishes.
        </p>
      )}
      {admin && (
        <div class="filters" role="group" aria-label="Filters">
          <div class="field field-inline">
            <label for="batches-account">Account</label>
            <select id="batches-account" value={accountId} onChange={(e) => pick(e.currentTarget.value)}>
              <option value="">All accounts</option>
              {(accounts.data?.data ?? []).map((account) => (
                <option value={account.id} key={account.id}>
                  {account.email || account.name || account.id}
                  {account.id === me.id ? ' (you)' : ''}
                </option>
              ))}
              {accountId && !accountNames.has(accountId) && <option value={accountId}>{accountId}</option>}
            </select>
          </div>
        </div>
      )}
      {named.error && wanted && <ErrorMessage message={`The batch ${wanted} could not be shown: ${named.error}`} />}
      <section class="section" aria-labelledby="batches-heading">
        <div class="section-head">
          <h2 id="batches-heading">Batches</h2>
          <p class="muted small batch-updated">
            <span aria-live="polite">
              {current ? `${count(listed.length)}${current.hasMore ? '+' : ''} shown, newest first` : ''}
            </span>
            {list.at !== undefined && (
              <span class="batch-updated-at">
                {' · '}Updated {timeOfDay(list.at)}
                {list.live ? ' · refreshes every 5 s while a batch runs' : ''}
              </span>
            )}
          </p>
        </div>
        {notice && (
          <p class="visually-hidden" role="status">
            {notice}
          </p>
        )}
        <PagedTable
          labelledBy="batches-heading"
          class="batches-table"
          columns={columns}
          list={{ ...list, current: current && rows ? { ...current, rows } : undefined, rows: rows ?? [] }}
          what="batches"
          onRetry={list.refresh}
          rowKey={(batch) => batch.id}
          skeletonRows={3}
          selected={(batch) => batch.id === wanted}
          rowClass={(batch) =>
            hasResults(batch) || batch.status === 'canceling' ? 'batch-row has-results' : 'batch-row'
          }
          rowDetail={(batch) =>
            batch.status === 'canceling' ? (
              <CancelingNote batch={batch} />
            ) : (
              hasResults(batch) && <Results batch={batch} baseUrl={config.base_url} />
            )
          }
          rowDetailClass="batch-results-row"
          empty={
            admin && !accountId
              ? 'No batches yet in any account: make one with POST /v1/messages/batches or POST /v1/batches and an ' +
                'API key.'
              : 'No batches yet: make one with POST /v1/messages/batches or POST /v1/batches and an API key.'
          }
        />
      </section>
      {acting && (
        <ConfirmAction
          acting={acting}
          accountName={showAccount ? accountNames.get(acting.batch.account_id) : undefined}
          onClose={() => setActing(undefined)}
          onDone={done}
        />
      )}
    </>
  );
}
