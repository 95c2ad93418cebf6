import { listOf } from '../api';
import { EmptyRow, ErrorMessage, PageHeader, SkeletonRows, TableCard, useApi, useTitle } from '../components/ui';
import { count, moment, timeOfDay } from '../format';
import type { Channel, List } from '../types';
import { useEffect, useState } from 'preact/hooks';

/** "Updated 12:00:05 · refreshes every 5 s", changing whenever new data lands. */
export function useUpdatedAt(data: unknown): string {
  const [at, setAt] = useState<number | undefined>(undefined);
  useEffect(() => {
    if (data !== undefined) setAt(Date.now());
  }, [data]);
  return at ? `Updated ${timeOfDay(at)} · refreshes every 5 s` : 'Refreshes every 5 s';
}

export function ChannelsPage() {
  useTitle('Channels');
  const channels = useApi<List<Channel> | Channel[]>('/admin/channels', 5000);
  const list = channels.data ? listOf(channels.data) : undefined;
  const updated = useUpdatedAt(channels.data);
  const cooling = list?.filter((c) => c.status !== 'ok').length ?? 0;
  const columns = 7;
  return (
    <>
      <PageHeader title="Channels" description="The vendor connections requests are routed over. A channel that failed rests until its cool-down ends." />
      <div class="section-head">
        <span class="muted">{list ? `${list.length} channel${list.length === 1 ? '' : 's'}, ${cooling} cooling down` : '\u00a0'}</span>
        <span class="muted live-note">
          <span class="live-dot" aria-hidden="true" />
          {updated}
        </span>
      </div>
      <ErrorMessage message={channels.error} />
      <TableCard label="Channels">
        <table class="table" aria-label="Channels">
          <thead>
            <tr>
              <th scope="col">ID</th>
              <th scope="col">Vendor</th>
              <th scope="col">Base URL</th>
              <th scope="col" class="num">
                Models
              </th>
              <th scope="col">Status</th>
              <th scope="col">Cooling until</th>
              <th scope="col">Reason</th>
            </tr>
          </thead>
          <tbody>
            {!list && <SkeletonRows columns={columns} rows={4} />}
            {list && list.length === 0 && <EmptyRow columns={columns}>No channels are configured.</EmptyRow>}
            {list?.map((channel) => (
              <tr key={channel.id}>
                <td class="mono cell-strong">
                  {channel.id}
                </td>
                <td>{channel.vendor}</td>
                <td class="mono small">{channel.base_url ?? <span class="muted">default</span>}</td>
                <td class="num">{count(channel.models)}</td>
                <td>{channel.status === 'ok' ? <span class="badge badge-ok">OK</span> : <span class="badge badge-warn">Cooling down</span>}</td>
                <td class="nowrap">{channel.cooling_until == null ? <span class="muted">—</span> : moment(channel.cooling_until)}</td>
                <td>{channel.reason ?? <span class="muted">—</span>}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableCard>
    </>
  );
}
