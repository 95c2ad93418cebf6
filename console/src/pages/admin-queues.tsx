import { useApp } from '../app-context';
import { type Column, DataTable } from '../components/data-table';
import { ErrorMessage, PageHeader, useApi, useTitle } from '../components/ui';
import { count } from '../format';
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

const queueColumns: Column<QueueCounts>[] = [
  { id: 'name', label: 'Name', lead: true, class: 'mono cell-strong', cell: (queue) => <QueueName queue={queue} /> },
  { id: 'waiting', label: 'Waiting', numeric: true, cell: (queue) => count(queue.waiting) },
  { id: 'active', label: 'Active', numeric: true, cell: (queue) => count(queue.active) },
  { id: 'delayed', label: 'Delayed', numeric: true, cell: (queue) => count(queue.delayed) },
  { id: 'failed', label: 'Failed', numeric: true, class: (queue) => (queue.failed ? 'text-danger' : undefined), cell: (queue) => count(queue.failed) },
  { id: 'completed', label: 'Completed', numeric: true, cell: (queue) => count(queue.completed) },
];

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
        description="Jobs per capability queue: waiting for a worker (a paused queue's jobs wait too), running, delayed for a retry, failed and completed."
        actions={
          dashboard ? (
            <a class="button button-secondary" href={dashboard}>
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
      <DataTable label="Queues" columns={queueColumns} rows={list} rowKey={(queue) => queue.name} skeletonRows={5} empty="No queues." />
    </>
  );
}
