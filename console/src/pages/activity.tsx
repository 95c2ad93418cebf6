import { Fragment, type ComponentChildren } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { useAccount, useTeam } from '../app-context';
import { BarChart, type Series } from '../components/bar-chart';
import { type Column, PagedTable } from '../components/data-table';
import { ButtonIcon, Dialog, ErrorMessage, FilterSelect, PageHeader, useApi, useTitle } from '../components/ui';
import { barLabel, compactCount, count, duration, fullTime, money, number, requestTimeHalves } from '../format';
import { usePagedList } from '../paged-list';
import { Link, navigate, useSearch } from '../router';
import { mayUseKeys } from '../teams';
import {
  requestStatuses,
  serviceTiers,
  type Account,
  type ActivityPage,
  type ActivityRow,
  type Key,
  type KeyName,
  type List,
  type RequestCounts,
  type RequestHistogram,
} from '../types';

/*
 * The request log: every request of the account's keys (every account's, for
 * an admin), newest first, a page at a time, with a chart of the range. The
 * filters live in the query string, so a reload or a shared link shows the
 * same, and the back button steps back through them.
 */

const pagePath = '/console/activity';
const pageSize = 50;

const ranges = [
  { value: '1h', label: 'Last hour', seconds: 3600 },
  { value: '24h', label: 'Last 24 hours', seconds: 86_400 },
  { value: '7d', label: 'Last 7 days', seconds: 7 * 86_400 },
  { value: '30d', label: 'Last 30 days', seconds: 30 * 86_400 },
] as const;
const defaultRange = '24h';

interface Filters {
  range: string;
  key_id: string;
  model: string;
  status: string;
  service_tier: string;
  account_id: string;
  /** How the response cache took part: `hit`, `miss`, `coalesced`, or `none` (not cached). */
  cache: string;
  /** A batch's id: its requests alone (the Batches page links here). */
  batch: string;
}

/** The cache filter's choices, as the address and the server name them. */
const cacheChoices = [
  { value: 'hit', label: 'Hits' },
  { value: 'coalesced', label: 'Shared calls' },
  { value: 'miss', label: 'Misses (stored)' },
  { value: 'none', label: 'Not cached' },
] as const;

/** The filters a query string holds; anything unknown reads as its default. */
function filtersOf(search: string): Filters {
  const query = new URLSearchParams(search);
  const range = query.get('range') ?? '';
  const status = query.get('status') ?? '';
  const tier = query.get('service_tier') ?? '';
  return {
    range: ranges.some((r) => r.value === range) ? range : defaultRange,
    key_id: query.get('key_id') ?? '',
    model: query.get('model') ?? '',
    status: (requestStatuses as readonly string[]).includes(status) ? status : '',
    service_tier: (serviceTiers as readonly string[]).includes(tier) ? tier : '',
    account_id: query.get('account_id') ?? '',
    cache: cacheChoices.some((c) => c.value === query.get('cache')) ? query.get('cache')! : '',
    batch: query.get('batch') ?? '',
  };
}

/** The page's address for some filters: defaults left out, in a fixed order. */
function addressOf(filters: Filters): string {
  const query = new URLSearchParams();
  if (filters.range !== defaultRange) query.set('range', filters.range);
  for (const name of ['account_id', 'key_id', 'model', 'status', 'service_tier', 'cache', 'batch'] as const)
    if (filters[name]) query.set(name, filters[name]);
  const text = query.toString();
  return text ? `${pagePath}?${text}` : pagePath;
}

const bucketNames: Record<number, string> = {
  60: 'minute',
  300: '5 minutes',
  900: '15 minutes',
  3600: 'hour',
  21_600: '6 hours',
  86_400: 'day',
};

const statusBadge: Record<string, string> = {
  completed: 'badge-ok',
  failed: 'badge-danger',
  refused: 'badge-warn',
  cancelled: '',
};

function StatusBadge({ status }: { status: string }) {
  return <span class={`badge badge-cap ${statusBadge[status] ?? ''}`}>{status}</span>;
}

const tierLabel = (tier: string) => tier[0]!.toUpperCase() + tier.slice(1);

/**
 * How the response cache took part: answered from it, shared another request's vendor call, or missed it and stored its
 * answer.
 */
const cacheBadges: Partial<Record<string, { label: string; title: string; class: string }>> = {
  hit: { label: 'cache hit', title: 'Answered from the response cache: no vendor call', class: 'cache-hit' },
  coalesced: { label: 'shared call', title: "Shared an identical request's vendor call", class: 'cache-shared' },
  miss: {
    label: 'cache miss',
    title: 'Not in the response cache: the vendor answered, and the answer was stored for later',
    class: 'cache-miss',
  },
};

function CacheBadge({ cache }: { cache: string | null | undefined }) {
  const badge = cache ? cacheBadges[cache] : undefined;
  return badge ? (
    <span class={`badge cache-badge ${badge.class}`} title={badge.title}>
      {badge.label}
    </span>
  ) : null;
}

const cacheLabels: Record<string, string> = {
  hit: 'Hit (answered from the cache)',
  miss: 'Miss (answer stored)',
  coalesced: 'Shared a vendor call',
};

/** What the cache saved a request, as its row says it: what the call would have cost. */
const savedText = (row: ActivityRow) =>
  row.saved_micros > 0 ? `saved ${money(row.saved_micros / 1_000_000)}` : undefined;

/**
 * What the vendor's prompt caching saved a settled request (its prompt at the plain input price less what it was
 * billed), as its details say it: the amount, and whose it is (the vendor's cache, not the gateway's response cache,
 * whose saving is beside the cost). Below zero, it says why.
 */
function PromptCacheSaved({ row }: { row: ActivityRow }) {
  if (!row.settled) return <>—</>;
  const saved = row.prompt_cache_saved_micros;
  // A request that neither read nor wrote the vendor's cache: nothing to explain.
  if (saved === 0 && row.cached_tokens === 0 && row.cache_write_tokens === 0) return <>{money(0)}</>;
  return (
    <>
      {money(saved / 1_000_000)}
      <span class="muted small">
        {saved < 0
          ? ' (by the vendor’s prompt caching: its cache writes cost more than its reads saved)'
          : ' (by the vendor’s prompt caching)'}
      </span>
    </>
  );
}

/** A request of a batch: no HTTP answer of its own, timed by its worker alone. */
const isBatch = (row: ActivityRow) => row.batch_id !== null;

/** The Batches page, its batch marked. */
const batchAddress = (id: string) => `/console/batches?batch=${encodeURIComponent(id)}`;

/**
 * A batch's id: a link to it on the Batches page for whoever has that page (owners and members), plain text for a
 * viewer (the page is not theirs: the link would land on Usage).
 */
function BatchRef({
  id,
  label,
  class: className,
  stop,
  children,
}: {
  id: string;
  label: string;
  class?: string;
  stop?: boolean;
  children: ComponentChildren;
}) {
  if (!mayUseKeys(useTeam().role)) return <span class={className}>{children}</span>;
  return (
    <Link
      href={batchAddress(id)}
      class={className}
      aria-label={label}
      onClick={stop ? (event) => event.stopPropagation() : undefined}
    >
      {children}
    </Link>
  );
}

/** A batch id, short enough for a cell: its last 8 characters after an ellipsis (the whole in the link's name). */
const shortBatch = (id: string) => (id.length > 16 ? `…${id.slice(-8)}` : id);

/** A long name or email with places to wrap after its @ and before its dots, never inside a word. */
function Breakable({ text }: { text: string }) {
  const parts = text.split(/(?<=@)|(?=\.)/);
  return (
    <span class="activity-breakable">
      {parts.map((part, i) => (
        <Fragment key={i}>
          {i > 0 && <wbr />}
          {part}
        </Fragment>
      ))}
    </span>
  );
}

/**
 * Endpoints whose rows read better by name than by the log's key. A Realtime session is one row for its whole
 * life (endpoint `realtime`, its amounts the sum of its responses'), and each response it billed a row of its own.
 */
const endpointLabels: Record<string, string> = {
  realtime: 'Realtime session',
  'realtime.response': 'Realtime response',
  'audio.speech': 'Speech',
};

function endpointLabel(endpoint: string | null): string {
  return endpoint === null ? '—' : (endpointLabels[endpoint] ?? endpoint);
}

const isSession = (row: ActivityRow) => row.endpoint === 'realtime';
const isSpeech = (row: ActivityRow) => row.endpoint === 'audio.speech';

/** How long a session lasted: its worker's count, else the api's. */
const sessionLength = (row: ActivityRow) => row.session?.duration_ms ?? row.latency_ms;

/** Why a Realtime session ended, as its row's finish reason says it. */
const closeReasons: Record<string, string> = {
  client_closed: 'Closed by the client',
  api_gone: 'The gateway lost the client',
  vendor_closed: 'Closed by the vendor',
  vendor_failed: 'The vendor failed',
  insufficient_quota: 'Out of credit',
  max_duration: 'Reached the longest session',
  idle: 'Idle too long',
  cancelled: 'Cancelled',
  worker_shutdown: 'The worker shut down',
  worker_lost: 'The worker was lost',
  start_wait_over: 'Waited too long to start',
  refused: 'Refused',
};

/**
 * A speech request's audio as billed: its seconds (whole ones, as billing counts them: a 2.16 s clip is 3 s here,
 * its own length is the Playground's to say), and its audio tokens when the model bills by the token.
 */
function audioOut(row: ActivityRow): string {
  if (!row.settled) return '—';
  const parts: string[] = [];
  if (row.audio_seconds) parts.push(`${count(row.audio_seconds)} s billed (whole seconds)`);
  if (row.output_tokens) parts.push(`${count(row.output_tokens)} audio tokens`);
  return parts.join(' · ') || '—';
}

/** What a request cost: nothing for a refusal, "—" while its settlement is still to come. */
function cost(row: ActivityRow): string {
  if (row.settled || row.status === 'refused') return money(row.cost_usd);
  return '—';
}

/**
 * The time a row shows: its latency, a session's length, or a batch request's run on its worker ("batch" when not
 * timed).
 */
function rowLatency(row: ActivityRow): string {
  if (isSession(row)) return duration(sessionLength(row));
  if (row.latency_ms !== null) return duration(row.latency_ms);
  if (isBatch(row)) return row.duration_ms > 0 ? duration(row.duration_ms) : 'batch';
  return '—';
}

/**
 * A token count for a narrow cell: whole up to 99,999, then short ("1.2M"); the whole number is in the cell's title.
 */
const cellCount = (n: number) => (n < 100_000 ? count(n) : compactCount(n));

/**
 * A row's tokens in and out, as its cell shows them: in, then out, each kept whole and on two lines where the column
 * is narrower than both. Speech: the text's tokens in (none counted for a model billed by the character), the
 * seconds of audio billed out (whole seconds: the clip's own length is the Playground's to say).
 */
function tokenHalves(row: ActivityRow): [string, string] | undefined {
  // A hit billed no tokens: its row says what it saved instead (the stored answer's tokens are not recorded).
  if (!row.settled || row.cache === 'hit') return undefined;
  if (isSpeech(row))
    return [
      `${row.input_tokens ? cellCount(row.input_tokens) : '—'} /`,
      row.audio_seconds ? `${count(row.audio_seconds)} s audio` : cellCount(row.output_tokens),
    ];
  return [`${cellCount(row.input_tokens)} /`, cellCount(row.output_tokens)];
}

function tokens(row: ActivityRow) {
  const halves = tokenHalves(row);
  if (!halves) return '—';
  return (
    <>
      <span class="nowrap">{halves[0]}</span> <span class="nowrap">{halves[1]}</span>
    </>
  );
}

/** What a row's tokens cell says in full, in its title. */
function tokensTitle(row: ActivityRow): string | undefined {
  if (!row.settled) return undefined;
  if (row.cache === 'hit') return 'Answered from the cache: no tokens billed';
  if (isSpeech(row)) {
    const heard = row.audio_seconds
      ? `${count(row.audio_seconds)} s of audio billed (whole seconds)`
      : `${count(row.output_tokens)} audio tokens`;
    return `${row.input_tokens ? `${count(row.input_tokens)} tokens in` : 'Billed by the character'}; ${heard}`;
  }
  return `${count(row.input_tokens)} tokens in, ${count(row.output_tokens)} out`;
}

function media(row: ActivityRow): string {
  const parts: string[] = [];
  if (row.images) parts.push(`${count(row.images)} image${row.images === 1 ? '' : 's'}`);
  if (row.audio_seconds) parts.push(`${number(row.audio_seconds)} s audio`);
  if (row.video_seconds) parts.push(`${number(row.video_seconds)} s video`);
  return parts.join(' · ') || '—';
}

function Detail({
  label,
  children,
  mono,
  class: className,
}: {
  label: string;
  children: ComponentChildren;
  mono?: boolean;
  class?: string;
}) {
  return (
    <div class={className ? `detail ${className}` : 'detail'}>
      <dt>{label}</dt>
      <dd class={mono ? 'mono' : undefined}>{children ?? '—'}</dd>
    </div>
  );
}

function RequestDetails({
  row,
  keyName,
  accountName,
  onClose,
}: {
  row: ActivityRow;
  keyName: string | undefined;
  accountName: string | undefined;
  onClose: () => void;
}) {
  const text = (value: string | number | null | undefined) =>
    value === null || value === undefined || value === '' ? '—' : String(value);
  const session = isSession(row);
  const speech = isSpeech(row);
  const label = endpointLabel(row.endpoint);
  // A response of a session: its row's id is the session's and the response's (`<session>:<response>`).
  const partOf =
    row.endpoint === 'realtime.response' && row.id.includes(':') ? row.id.slice(0, row.id.indexOf(':')) : undefined;
  const reason = row.finish_reason ?? '';
  return (
    <Dialog title={session ? 'Session details' : 'Request details'} onClose={onClose} wide>
      <p class="dialog-lead request-lead">
        <StatusBadge status={row.status} />
        <span class="mono">{row.model || 'no model'}</span>
        <span class="muted">{fullTime(row.created)}</span>
      </p>
      <h3 class="detail-heading">Timing</h3>
      {session ? (
        <dl class="details">
          <Detail label="Duration">{duration(sessionLength(row))}</Detail>
          <Detail label="Wait to start">{duration(row.queue_ms)}</Detail>
          <Detail label="Service tier">{tierLabel(row.service_tier)}</Detail>
        </dl>
      ) : (
        <dl class="details">
          <Detail label="Latency">
            {isBatch(row) && row.latency_ms === null ? (
              <>
                {row.duration_ms > 0 ? duration(row.duration_ms) : '—'}
                <span class="muted small"> (a batch request: its run on the worker)</span>
              </>
            ) : (
              duration(row.latency_ms)
            )}
          </Detail>
          <Detail label={speech ? 'Time to first audio' : 'Time to first token'}>{duration(row.ttft_ms)}</Detail>
          <Detail label="Queue time">{duration(row.queue_ms)}</Detail>
          <Detail label="Service tier">{tierLabel(row.service_tier)}</Detail>
          <Detail label="Attempts">{text(row.attempts)}</Detail>
        </dl>
      )}
      <h3 class="detail-heading">Usage</h3>
      <dl class="details">
        <Detail label="Cost">
          {cost(row)}
          {!row.settled && row.status !== 'refused' && <span class="muted small"> (not settled yet)</span>}
          {row.saved_micros > 0 && <span class="muted small"> ({savedText(row)}: what the call would have cost)</span>}
          {session && row.settled && <span class="muted small"> (its responses’ sum)</span>}
        </Detail>
        {session && <Detail label="Responses">{row.session ? count(row.session.responses) : '—'}</Detail>}
        {speech ? (
          <>
            <Detail label="Text in">
              {row.settled ? (row.input_tokens ? `${count(row.input_tokens)} tokens` : 'Billed by the character') : '—'}
            </Detail>
            <Detail label="Audio out">{audioOut(row)}</Detail>
          </>
        ) : (
          <>
            <Detail label="Input tokens">{row.settled ? count(row.input_tokens) : '—'}</Detail>
            <Detail label="Cached tokens">{row.settled ? count(row.cached_tokens) : '—'}</Detail>
            <Detail label="Cache-write tokens">{row.settled ? count(row.cache_write_tokens) : '—'}</Detail>
            <Detail label="Prompt cache saved">
              <PromptCacheSaved row={row} />
            </Detail>
            <Detail label="Output tokens">{row.settled ? count(row.output_tokens) : '—'}</Detail>
          </>
        )}
        {!session && !speech && <Detail label="Media">{row.settled ? media(row) : '—'}</Detail>}
        {row.cache && <Detail label="Response cache">{cacheLabels[row.cache] ?? row.cache}</Detail>}
        {row.bytes_in !== null && <Detail label="Bytes to the tool server">{count(row.bytes_in)}</Detail>}
        {row.bytes_out !== null && <Detail label="Bytes answered">{count(row.bytes_out)}</Detail>}
        {row.arguments !== null && (
          <Detail label="Arguments" mono>
            {row.arguments}
          </Detail>
        )}
      </dl>
      <h3 class="detail-heading">Outcome</h3>
      <dl class="details">
        <Detail label="Endpoint" mono={label === row.endpoint}>
          {label === row.endpoint || row.endpoint === null ? text(row.endpoint) : `${label} (${row.endpoint})`}
        </Detail>
        {!session && <Detail label="Stream">{row.stream === null ? '—' : row.stream ? 'Yes' : 'No'}</Detail>}
        <Detail label="HTTP status">
          {row.http_status === null && isBatch(row) ? (
            <span class="muted">None (a batch request)</span>
          ) : (
            text(row.http_status)
          )}
        </Detail>
        {session ? (
          <Detail label="Close reason">
            {reason ? (
              <>
                {closeReasons[reason] ?? reason}
                {closeReasons[reason] && <span class="muted small mono"> ({reason})</span>}
              </>
            ) : (
              '—'
            )}
          </Detail>
        ) : (
          <Detail label="Finish reason" mono>
            {text(row.finish_reason)}
          </Detail>
        )}
        <Detail label="Error code" mono>
          {text(row.error_code)}
        </Detail>
        {row.error_message && (
          <Detail label="Message" class="activity-message">
            {row.error_message}
          </Detail>
        )}
        <Detail label="Vendor">{text(row.vendor)}</Detail>
        <Detail label="Channel" mono>
          {text(row.channel)}
        </Detail>
        {!session && (
          <Detail label="Fallback" mono>
            {text(row.fallback)}
          </Detail>
        )}
      </dl>
      <h3 class="detail-heading">Identifiers</h3>
      <dl class="details details-wide">
        <Detail label={session ? 'Session ID' : 'Request ID'} mono>
          {row.id}
        </Detail>
        {partOf && (
          <Detail label="Session" mono>
            {partOf}
          </Detail>
        )}
        <Detail label={session ? 'Job ID' : partOf ? 'Response ID' : 'Answer ID'} mono>
          {text(row.answer_id)}
        </Detail>
        {row.batch_id && (
          <Detail label="Batch" mono>
            <BatchRef id={row.batch_id} label={`Batch ${row.batch_id} on the Batches page`}>
              <Breakable text={row.batch_id} />
            </BatchRef>
          </Detail>
        )}
        <Detail label="Key" class="activity-words">
          {keyName !== undefined ? <Breakable text={keyName} /> : <span class="mono">{row.key_id}</span>}
        </Detail>
        {accountName !== undefined && (
          <Detail label="Account" class="activity-words">
            <Breakable text={accountName} />
          </Detail>
        )}
      </dl>
    </Dialog>
  );
}

/**
 * The request list's columns; an admin's name each row's account (`accountNames`), every list its key (`keyNames`).
 * The endpoint is under the model, not a column of its own. Within 1280 px: the account, key, HTTP status and tokens
 * are `wide` (below 1100 px of window they are in the row's details); time to first token is in the request's dialog.
 * On a phone the page's own grid (styles.css, `.activity-table`) shows time, status, model, cost, key and latency.
 */
function requestColumns({
  accountNames,
  keyNames,
  open,
}: {
  accountNames: Map<string, string> | undefined;
  keyNames: Map<string, string>;
  open: (row: ActivityRow) => void;
}): Array<Column<ActivityRow> | false> {
  return [
    {
      id: 'time',
      label: 'Time',
      class: 'col-time',
      title: (row) => fullTime(row.created),
      cell: (row) => {
        // The day and the time with its zone, on two lines where the column is narrower than both.
        const [day, time] = requestTimeHalves(row.created);
        return (
          <button
            type="button"
            class="link-button row-open"
            aria-label={`Details of the ${row.status} request at ${fullTime(row.created)}`}
            onClick={(event) => {
              event.stopPropagation();
              open(row);
            }}
          >
            {day && <span class="nowrap">{day}</span>} <span class="nowrap">{time}</span>
          </button>
        );
      },
    },
    !!accountNames && {
      id: 'account',
      label: 'Account',
      priority: 'wide',
      class: 'cell-clip account-cell col-account',
      title: (row) => accountNames.get(row.account_id) ?? row.account_id,
      cell: (row) => accountNames.get(row.account_id) ?? <span class="mono">{row.account_id}</span>,
    },
    {
      id: 'key',
      label: 'Key',
      priority: 'wide',
      class: 'cell-clip col-key',
      // The key's id in the tooltip, its name in the cell (a key not listed, as one of another account's, by its id).
      title: (row) => (keyNames.has(row.key_id) ? `${keyNames.get(row.key_id)} (${row.key_id})` : row.key_id),
      cell: (row) => keyNames.get(row.key_id) ?? <span class="mono">{row.key_id || '—'}</span>,
    },
    {
      id: 'model',
      label: 'Model',
      note: 'endpoint',
      lead: true,
      class: 'mono cell-strong cell-clip col-model',
      title: (row) => (row.endpoint ? `${row.model} (${row.endpoint})` : row.model),
      cell: (row) => (
        <>
          {row.model || <span class="muted">—</span>}
          <span class="cell-sub muted endpoint-cell">{endpointLabel(row.endpoint)}</span>
        </>
      ),
    },
    {
      id: 'status',
      label: 'Status',
      class: 'col-status',
      cell: (row) => (
        <>
          <span class="activity-badges">
            <StatusBadge status={row.status} />
            {/* The tier, when not the default one (the details always say it). */}
            {row.service_tier !== 'default' && (
              <span class="badge tier-badge" title={`Served as ${row.service_tier}`}>
                {row.service_tier}
              </span>
            )}
            <CacheBadge cache={row.cache} />
          </span>
          {row.batch_id && (
            <span class="cell-sub activity-batch">
              <BatchRef id={row.batch_id} label={`Batch ${row.batch_id}`} stop>
                batch {shortBatch(row.batch_id)}
              </BatchRef>
            </span>
          )}
        </>
      ),
    },
    {
      id: 'http',
      label: 'HTTP',
      numeric: true,
      priority: 'wide',
      class: 'col-http',
      // A batch request has no HTTP answer of its own: its outcome's code, or "batch".
      title: (row) =>
        row.http_status === null && isBatch(row) ? 'A batch request: no HTTP answer of its own' : undefined,
      cell: (row) =>
        row.http_status ?? (isBatch(row) ? <span class="muted mono small">{row.error_code ?? 'batch'}</span> : '—'),
    },
    {
      id: 'latency',
      label: 'Latency',
      numeric: true,
      // A session's row: how long it lasted, and how many responses it billed; a batch request's: its worker's run.
      class: (row) =>
        isSession(row)
          ? 'col-latency col-duration'
          : isBatch(row) && row.latency_ms === null && !(row.duration_ms > 0)
            ? 'col-latency col-untimed'
            : 'col-latency',
      title: (row) =>
        isSession(row)
          ? `Session of ${duration(sessionLength(row))}${row.session ? `, ${count(row.session.responses)} response${row.session.responses === 1 ? '' : 's'}` : ''}`
          : isBatch(row) && row.latency_ms === null
            ? row.duration_ms > 0
              ? 'A batch request: its run on the worker'
              : 'A batch request: not timed'
            : undefined,
      cell: rowLatency,
    },
    {
      id: 'tokens',
      label: 'Tokens',
      note: 'in / out',
      numeric: true,
      priority: 'wide',
      headerClass: 'wrap-head',
      class: 'col-tokens',
      title: tokensTitle,
      cell: tokens,
    },
    {
      id: 'cost',
      label: 'Cost',
      numeric: true,
      class: (row) => `col-cost ${row.settled || row.status === 'refused' ? 'cell-strong' : 'muted'}`,
      title: (row) =>
        row.saved_micros > 0
          ? `The response cache saved ${money(row.saved_micros / 1_000_000)}: what the call would have cost`
          : undefined,
      cell: (row) => (
        <>
          {cost(row)}
          {row.saved_micros > 0 && <span class="cell-sub activity-saved">{savedText(row)}</span>}
        </>
      ),
    },
  ];
}

/** What the count line says: the requests, and how many of them did not complete ("87 requests, 6 of them refused"). */
function countLine(counts: RequestCounts): string {
  const head = `${count(counts.requests)} ${counts.requests === 1 ? 'request' : 'requests'}`;
  const ended = (
    [
      [counts.refused, 'refused'],
      [counts.failed, 'failed'],
      [counts.cancelled, 'cancelled'],
    ] as const
  )
    .filter(([n]) => n > 0)
    .map(([n, how], i) => `${count(n)}${i === 0 ? ' of them' : ''} ${how}`);
  if (ended.length === 0) return head;
  const last = ended.pop()!;
  return `${head}, ${ended.length > 0 ? `${ended.join(', ')} and ${last}` : last}`;
}

export function ActivityPage() {
  useTitle('Activity');
  const me = useAccount();
  const admin = me.role === 'admin';
  const search = useSearch();
  const filters = useMemo(() => filtersOf(search), [search]);
  const range = ranges.find((r) => r.value === filters.range)!;
  /**
   * "Now" for the range: taken at each change of filters and on Refresh, so the list and the chart read the same range.
   */
  const [refreshes, setRefreshes] = useState(0);
  const now = useMemo(() => Math.floor(Date.now() / 1000), [search, refreshes]);

  const since = now - range.seconds;
  const query = new URLSearchParams({ since: String(since) });
  if (admin && filters.account_id) query.set('account_id', filters.account_id);
  if (filters.key_id) query.set('key_id', filters.key_id);
  if (filters.model) query.set('model', filters.model);
  if (filters.status) query.set('status', filters.status);
  if (filters.service_tier) query.set('service_tier', filters.service_tier);
  if (filters.cache) query.set('cache', filters.cache);
  if (filters.batch) query.set('batch', filters.batch);
  const listPath = `/requests?${query}&limit=${pageSize}`;
  const histogram = useApi<RequestHistogram>(`/requests/histogram?${query}`);

  const list = usePagedList(listPath, refreshes, {
    rows: (page: ActivityPage) => page.data,
    hasMore: (page) => !!page.next_cursor,
    next: (page) => (page.next_cursor ? `cursor=${encodeURIComponent(page.next_cursor)}` : undefined),
  });
  const { current, rows } = list;
  // The filter's counts come with its first page (a page after it has none): kept while more pages load.
  const countsOf = useRef<{ path: string; counts: RequestCounts } | undefined>(undefined);
  if (current?.page.counts && countsOf.current?.path !== current.path)
    countsOf.current = { path: current.path, counts: current.page.counts };
  const counts = current && countsOf.current?.path === current.path ? countsOf.current.counts : undefined;
  const [open, setOpen] = useState<ActivityRow | undefined>(undefined);
  // `?request=<id>` (the Playground's link to a request it made): its row marked, its details opened once it is listed.
  const wanted = useMemo(() => new URLSearchParams(search).get('request') ?? '', [search]);
  const opened = useRef('');
  useEffect(() => {
    if (!wanted || opened.current === wanted) return;
    const row = rows.find((r) => r.id === wanted);
    if (!row) return;
    opened.current = wanted;
    setOpen(row);
  }, [rows, wanted]);
  const close = () => {
    setOpen(undefined);
    if (wanted) navigate(addressOf(filters), { replace: true });
  };

  const refresh = () => {
    setRefreshes((n) => n + 1);
    histogram.reload();
  };

  // Anyone but an admin gets the names of the team's keys they read requests of (a viewer's too: they list no keys).
  const keys = useApi<List<Key | KeyName>>(admin ? '/admin/keys' : '/key-names');
  const accounts = useApi<List<Account>>(admin ? '/admin/accounts' : null);
  const keyNames = useMemo(() => new Map((keys.data?.data ?? []).map((key) => [key.id, key.name])), [keys.data]);
  const accountNames = useMemo(
    () =>
      new Map((accounts.data?.data ?? []).map((account) => [account.id, account.email || account.name || account.id])),
    [accounts.data],
  );
  const keyOptions = (keys.data?.data ?? []).filter(
    (key) => !filters.account_id || key.account_id === filters.account_id,
  );
  if (filters.key_id && !keyOptions.some((key) => key.id === filters.key_id))
    keyOptions.push({ id: filters.key_id, object: 'key_name', name: filters.key_id, account_id: '', revoked: false });

  // Models as they come up in the rows (and the one filtered by), kept while the filters change.
  const seenModels = useRef(new Set<string>());
  for (const row of rows) if (row.model) seenModels.current.add(row.model);
  if (filters.model) seenModels.current.add(filters.model);
  const modelOptions = [...seenModels.current].sort();

  const set = (name: keyof Filters, value: string) => {
    const next = { ...filters, [name]: value };
    // A key belongs to one account: picking another account drops it.
    if (name === 'account_id') next.key_id = '';
    navigate(addressOf(next));
  };
  const filtered = !!(
    filters.key_id ||
    filters.model ||
    filters.status ||
    filters.service_tier ||
    filters.cache ||
    filters.batch ||
    (admin && filters.account_id)
  );

  const chart = useMemo(() => {
    const data = histogram.data;
    if (!data) return { labels: [] as string[], series: [] as Series[], requests: 0, errors: 0, bucket: 0 };
    const size = data.bucket_seconds;
    const bars = new Map(data.data.map((bar) => [bar.start, bar]));
    const labels: string[] = [];
    const ok: number[] = [];
    const failed: number[] = [];
    const manyDays = data.until - data.since > 86_400;
    let requests = 0;
    let errors = 0;
    for (let start = Math.floor(data.since / size) * size; start < data.until && labels.length < 400; start += size) {
      const bar = bars.get(start);
      labels.push(barLabel(start, size, manyDays));
      ok.push(bar ? bar.requests - bar.errors : 0);
      failed.push(bar?.errors ?? 0);
      requests += bar?.requests ?? 0;
      errors += bar?.errors ?? 0;
    }
    return {
      labels,
      series: [
        { label: 'Completed', color: '#6366f1', values: ok },
        { label: 'Not completed', color: '#ef4444', values: failed },
      ],
      requests,
      errors,
      bucket: size,
    };
  }, [histogram.data]);

  // Until the chart's bars are in, its bucket is not known: the heading says "Requests", never "per 0 s".
  const bucketName = chart.bucket > 0 ? (bucketNames[chart.bucket] ?? `${chart.bucket} s`) : undefined;
  const columns = requestColumns({ accountNames: admin ? accountNames : undefined, keyNames, open: setOpen });

  return (
    <>
      <PageHeader
        title="Activity"
        description={
          admin
            ? 'Every request made with a key of this gateway: how it ended, how long it took and what it cost.'
            : 'Every request made with your keys: how it ended, how long it took and what it cost.'
        }
        actions={
          <button type="button" class="button button-secondary" onClick={refresh}>
            <ButtonIcon d="M16 10a6 6 0 1 1-1.8-4.3M16 4v3.5h-3.5" />
            Refresh
          </button>
        }
      />
      <div class="filters activity-filters" role="group" aria-label="Filters">
        <FilterSelect
          id="activity-range"
          label="Range"
          value={filters.range}
          onChange={(value) => set('range', value)}
          options={ranges}
        />
        {admin && (
          <FilterSelect
            id="activity-account"
            label="Account"
            value={filters.account_id}
            onChange={(value) => set('account_id', value)}
            any="All accounts"
            options={(accounts.data?.data ?? []).map((account) => ({
              value: account.id,
              label: account.email || account.name || account.id,
            }))}
          >
            {filters.account_id && !accountNames.has(filters.account_id) && (
              <option value={filters.account_id}>{filters.account_id}</option>
            )}
          </FilterSelect>
        )}
        <FilterSelect
          id="activity-key"
          label="Key"
          value={filters.key_id}
          onChange={(value) => set('key_id', value)}
          any="All keys"
          options={keyOptions.map((key) => ({
            value: key.id,
            label: [
              admin && !filters.account_id && 'account_email' in key && key.account_email
                ? `${key.name} (${key.account_email})`
                : key.name,
              'revoked' in key && key.revoked ? ' (revoked)' : '',
            ],
          }))}
        />
        <FilterSelect
          id="activity-model"
          label="Model"
          value={filters.model}
          onChange={(value) => set('model', value)}
          any="All models"
          options={modelOptions.map((m) => ({ value: m, label: m }))}
        />
        <FilterSelect
          id="activity-status"
          label="Status"
          short
          value={filters.status}
          onChange={(value) => set('status', value)}
          any="Any"
          options={requestStatuses.map((s) => ({ value: s, label: s[0]!.toUpperCase() + s.slice(1) }))}
        />
        <FilterSelect
          id="activity-tier"
          label="Tier"
          short
          value={filters.service_tier}
          onChange={(value) => set('service_tier', value)}
          any="Any"
          options={serviceTiers.map((tier) => ({ value: tier, label: tierLabel(tier) }))}
        />
        <FilterSelect
          id="activity-cache"
          label="Cache"
          short
          value={filters.cache}
          onChange={(value) => set('cache', value)}
          any="Any"
          options={cacheChoices}
        />
        {filters.batch && (
          <span class="activity-batch-filter">
            <span class="muted small">Batch</span>{' '}
            <BatchRef id={filters.batch} class="mono small" label={`Batch ${filters.batch} on the Batches page`}>
              {shortBatch(filters.batch)}
            </BatchRef>
            <button
              type="button"
              class="link-button small"
              aria-label="Show every batch's requests"
              onClick={() => set('batch', '')}
            >
              ×
            </button>
          </span>
        )}
        {filtered && (
          <button
            type="button"
            class="link-button filters-clear"
            onClick={() => navigate(addressOf({ ...filtersOf(''), range: filters.range }))}
          >
            Clear filters
          </button>
        )}
      </div>
      <section class="card chart-card activity-chart" aria-labelledby="activity-chart-heading">
        <div class="chart-head">
          <h2 id="activity-chart-heading" class="card-title">
            {bucketName ? `Requests per ${bucketName}` : 'Requests'}
          </h2>
          <p class="muted small" aria-live="polite">
            {histogram.data
              ? `${count(chart.requests)} requests · ${count(chart.errors)} not completed`
              : histogram.error
                ? ''
                : 'Loading…'}
          </p>
        </div>
        {histogram.error && <ErrorMessage message={`Could not load the chart: ${histogram.error}`} />}
        <BarChart
          class="chart-activity"
          labels={chart.labels}
          series={chart.series}
          stacked
          format={count}
          wholeNumbers
          axisFormat={compactCount}
          label={`${bucketName ? `Requests per ${bucketName}` : 'Requests'}, ${range.label.toLowerCase()}: ${count(chart.requests)} in total, ${count(chart.errors)} not completed. Each request is in the table below.`}
          empty={!!histogram.data && chart.requests === 0}
          emptyText="No requests in this range"
        />
      </section>
      <section class="section" aria-labelledby="requests-heading">
        <div class="section-head">
          <h2 id="requests-heading">Requests</h2>
          <p
            class="muted small activity-count"
            aria-live="polite"
            title="Every logged request of the range and filters, refusals included, each counted once (a Realtime session's responses, not the session)"
          >
            {current
              ? `${counts ? `${countLine(counts)} · ` : ''}${count(rows.length)}${current.hasMore ? '+' : ''} shown, newest first`
              : ''}
          </p>
        </div>
        <PagedTable
          labelledBy="requests-heading"
          class="table-compact activity-table"
          cardClass="activity-card"
          phone="own"
          columns={columns}
          list={list}
          what="requests"
          onRetry={refresh}
          rowKey={(row) => row.id}
          skeletonRows={6}
          onRowClick={setOpen}
          selected={(row) => row.id === wanted}
          empty={`No requests in this range${filtered ? ' match these filters' : ''}.`}
        />
      </section>
      {open && (
        <RequestDetails
          row={open}
          keyName={keyNames.get(open.key_id)}
          accountName={admin ? (accountNames.get(open.account_id) ?? open.account_id) : undefined}
          onClose={close}
        />
      )}
    </>
  );
}
