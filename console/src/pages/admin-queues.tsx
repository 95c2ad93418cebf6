import { useApp } from '../app-context';
import { EmptyRow, ErrorMessage, PageHeader, SkeletonRows, TableCard, useApi, useTitle } from '../components/ui';
import { count } from '../format';
import type { QueueCounts } from '../types';
import { useUpdatedAt } from './admin-channels';

interface QueuesAnswer {
  object: 'list';
  data: QueueCounts[];
  dashboard: string | null;
}

export function QueuesPage() {
  useTitle('Queues');
  const { config } = useApp();
  const queues = useApi<QueuesAnswer>('/admin/queues', 5000);
  const list = queues.data?.data;
  const updated = useUpdatedAt(queues.data);
  const dashboard = queues.data ? queues.data.dashboard : config.queue_dashboard;
  const columns = 6;
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
      <TableCard label="Queues">
        <table class="table" aria-label="Queues">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col" class="num">
                Waiting
              </th>
              <th scope="col" class="num">
                Active
              </th>
              <th scope="col" class="num">
                Delayed
              </th>
              <th scope="col" class="num">
                Failed
              </th>
              <th scope="col" class="num">
                Completed
              </th>
            </tr>
          </thead>
          <tbody>
            {!list && <SkeletonRows columns={columns} rows={5} />}
            {list && list.length === 0 && <EmptyRow columns={columns}>No queues.</EmptyRow>}
            {list?.map((queue) => (
              <tr key={queue.name}>
                <td class="mono cell-strong">
                  {queue.name}
                  {queue.paused && (
                    <span class="badge badge-warn" title="Paused from the queue dashboard: its jobs wait until it is resumed">
                      paused
                    </span>
                  )}
                </td>
                <td class="num">{count(queue.waiting)}</td>
                <td class="num">{count(queue.active)}</td>
                <td class="num">{count(queue.delayed)}</td>
                <td class={`num ${queue.failed ? 'text-danger' : ''}`}>{count(queue.failed)}</td>
                <td class="num">{count(queue.completed)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableCard>
    </>
  );
}
