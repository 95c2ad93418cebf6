import { useApp } from '../app-context';
import { type Column, DataTable } from '../components/data-table';
import { ErrorMessage, PageHeader, useApi, useTitle } from '../components/ui';
import { count } from '../format';
import { Link } from '../router';
import type { QueueCounts, QueueList } from '../types';
import { useUpdatedAt } from './admin-channels';

/** A queue's name, marked when it is paused. */
function QueueName({ queue }: { queue: QueueCounts }) {
  return (
    <>
      {queue.name}
      {queue.paused && (
        <span class="badge badge-warn" title="Paused from the queue dashboard: its jobs wait until it is resumed">
          paused
        </span>
      )}
    </>
  );
}

/** A keeping time as it is configured: "60 s", "1 h", "1 d". */
function span(seconds: number): string {
  if (seconds < 120) return `${count(seconds)} s`;
  if (seconds < 3600) return `${count(Math.round(seconds / 60))} min`;
  if (seconds < 2 * 86_400) return `${count(Math.round(seconds / 3600))} h`;
  return `${count(Math.round(seconds / 86_400))} d`;
}

/**
 * The columns; the finished jobs' are of the jobs BullMQ still keeps (`keeps`), not totals: the request log has every
 * request.
 */
function queueColumns(keeps: QueueList['keeps'] | undefined): Column<QueueCounts>[] {
  const kept = (seconds: number | undefined, most: number | undefined) =>
    seconds !== undefined && most !== undefined ? `last ${span(seconds)}, at most ${count(most)}` : 'recent only';
  return [
    { id: 'name', label: 'Name', lead: true, class: 'mono cell-strong', cell: (queue) => <QueueName queue={queue} /> },
    { id: 'waiting', label: 'Waiting', numeric: true, cell: (queue) => count(queue.waiting) },
    { id: 'active', label: 'Active', numeric: true, cell: (queue) => count(queue.active) },
    { id: 'delayed', label: 'Delayed', numeric: true, cell: (queue) => count(queue.delayed) },
    {
      id: 'failed',
      label: 'Kept failed',
      note: kept(keeps?.failed_seconds, keeps?.failed_count),
      numeric: true,
      headerClass: 'wrap-head',
      class: (queue) => (queue.failed ? 'text-danger' : undefined),
      cell: (queue) => count(queue.failed),
    },
    {
      id: 'completed',
      label: 'Kept completed',
      note: kept(keeps?.completed_seconds, keeps?.completed_count),
      numeric: true,
      headerClass: 'wrap-head',
      cell: (queue) => count(queue.completed),
    },
  ];
}

export function QueuesPage() {
  useTitle('Queues');
  const { config } = useApp();
  const queues = useApi<QueueList>('/admin/queues', 5000);
  const list = queues.data?.data;
  const updated = useUpdatedAt(queues.data);
  const dashboard = queues.data ? queues.data.dashboard : config.queue_dashboard;
  return (
    <>
      <PageHeader
        title="Queues"
        description="Jobs per capability queue: waiting for a worker (a paused queue's jobs wait too), running, delayed for a retry, and the finished jobs BullMQ still keeps."
        actions={
          dashboard ? (
            // A page of its own, beside the console (a tab of its own, the console left where it was).
            <a class="button button-secondary" href={dashboard} target="_blank" rel="noopener">
              Queue dashboard
            </a>
          ) : undefined
        }
      />
      <div class="section-head">
        <span class="muted">{list ? `${list.length} queue${list.length === 1 ? '' : 's'}` : '\u00a0'}</span>
        <span class="muted live-note">
          <span class="live-dot" aria-hidden="true" />
          {updated}
        </span>
      </div>
      <ErrorMessage message={queues.error} />
      <DataTable
        label="Queues"
        columns={queueColumns(queues.data?.keeps)}
        rows={list}
        rowKey={(queue) => queue.name}
        skeletonRows={5}
        empty="No queues."
      />
      {/* With the rows (in the same render), so it never moves as they come in. */}
      {queues.data && (
        <p class="table-note muted small queue-keeps-note">
          Kept completed and kept failed count the finished jobs BullMQ still holds, not every job that ran: a waiting
          client’s job is dropped {span(queues.data.keeps.completed_seconds)} after it completes (
          {span(queues.data.keeps.failed_seconds)} after it fails), and beyond the last{' '}
          {count(queues.data.keeps.completed_count)} completed ({count(queues.data.keeps.failed_count)} failed); an
          async job after {span(queues.data.keeps.async_seconds)}. The request log has every request: see{' '}
          <Link href="/console/activity">Activity</Link> and <Link href="/console/usage">Usage</Link>.
        </p>
      )}
    </>
  );
}
