import { listOf } from '../api';
import { type Column, DataTable } from '../components/data-table';
import { ErrorMessage, PageHeader, useApi, useTitle } from '../components/ui';
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

const channelColumns: Column<Channel>[] = [
  { id: 'id', label: 'ID', lead: true, class: 'mono cell-strong', cell: (channel) => channel.id },
  { id: 'vendor', label: 'Vendor', cell: (channel) => channel.vendor },
  { id: 'base-url', label: 'Base URL', class: 'mono small', cell: (channel) => channel.base_url ?? <span class="muted">default</span> },
  { id: 'models', label: 'Models', numeric: true, cell: (channel) => count(channel.models) },
  { id: 'status', label: 'Status', cell: (channel) => (channel.status === 'ok' ? <span class="badge badge-ok">OK</span> : <span class="badge badge-warn">Cooling down</span>) },
  { id: 'cooling-until', label: 'Cooling until', class: 'nowrap', cell: (channel) => (channel.cooling_until == null ? <span class="muted">—</span> : moment(channel.cooling_until)) },
  { id: 'reason', label: 'Reason', cell: (channel) => channel.reason ?? <span class="muted">—</span> },
];

export function ChannelsPage() {
  useTitle('Channels');
  const channels = useApi<List<Channel> | Channel[]>('/admin/channels', 5000);
  const list = channels.data ? listOf(channels.data) : undefined;
  const updated = useUpdatedAt(channels.data);
  const cooling = list?.filter((c) => c.status !== 'ok').length ?? 0;
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
      <DataTable label="Channels" columns={channelColumns} rows={list} rowKey={(channel) => channel.id} skeletonRows={4} empty="No channels are configured." />
    </>
  );
}
