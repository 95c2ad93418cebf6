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

/** "3 failures in the last 15 min", "no failures in the last 15 min". */
function failuresText(failures: number, windowMin: number): string {
  return `${failures === 0 ? 'No' : count(failures)} failure${failures === 1 ? '' : 's'} in the last ${windowMin} min`;
}

/** The channel's own rest (its credential refused: every model rests), as opposed to one model's. */
const channelWideRest = (channel: Channel) =>
  channel.cooldowns
    .filter((rest) => rest.model === null && rest.until > Date.now())
    .sort((a, b) => b.until - a.until)[0];

/**
 * Each model on the channel that failed lately or rests now: its own badge (only a resting model is marked), its count.
 */
function ModelHealth({ channel }: { channel: Channel }) {
  if (channel.model_health.length === 0)
    return <span class="muted">{failuresText(0, channel.failure_window_min)}</span>;
  return (
    <ul class="channel-models">
      {channel.model_health.map((entry) => (
        <li key={entry.model} class="channel-model">
          <span class="mono channel-model-name" title={entry.model}>
            {entry.model}
          </span>{' '}
          {entry.cooling_until !== null ? (
            <span class="badge badge-warn">Cooling down until {moment(entry.cooling_until)}</span>
          ) : (
            <span class="badge badge-ok">OK</span>
          )}
          <span class="cell-sub muted channel-model-failures">
            {failuresText(entry.failures, channel.failure_window_min)}
            {entry.cooling_until !== null && entry.reason ? ` · ${entry.reason}` : ''}
          </span>
        </li>
      ))}
    </ul>
  );
}

const channelColumns: Column<Channel>[] = [
  {
    id: 'id',
    label: 'ID',
    lead: true,
    class: 'mono cell-strong channel-id-cell',
    title: (channel) => channel.id,
    cell: (channel) => channel.id,
  },
  { id: 'vendor', label: 'Vendor', cell: (channel) => channel.vendor },
  {
    id: 'status',
    label: 'Channel',
    class: 'channel-status-cell',
    cell: (channel) => {
      // Only a rest of the whole channel marks it; one model resting is that model's line in the next column.
      const rest = channelWideRest(channel);
      return rest ? (
        <>
          <span class="badge badge-warn">Cooling down</span>
          <span class="cell-sub muted nowrap">until {moment(rest.until)}</span>
        </>
      ) : (
        <span class="badge badge-ok">OK</span>
      );
    },
  },
  {
    id: 'health',
    label: 'Models',
    note: 'recent failures, cool-downs',
    class: 'channel-health-cell',
    cell: (channel) => <ModelHealth channel={channel} />,
  },
  { id: 'models', label: 'Models served', numeric: true, priority: 'wide', cell: (channel) => count(channel.models) },
  {
    id: 'base-url',
    label: 'Base URL',
    priority: 'detail',
    class: 'mono small',
    cell: (channel) => channel.base_url ?? <span class="muted">default</span>,
  },
  {
    id: 'reason',
    label: 'Why it rests',
    priority: 'detail',
    cell: (channel) => channel.reason ?? <span class="muted">—</span>,
  },
];

export function ChannelsPage() {
  useTitle('Channels');
  const channels = useApi<List<Channel> | Channel[]>('/admin/channels', 5000);
  const list = channels.data ? listOf(channels.data) : undefined;
  const updated = useUpdatedAt(channels.data);
  const cooling = list?.filter((c) => channelWideRest(c)).length ?? 0;
  const models =
    list?.reduce((sum, c) => sum + c.model_health.filter((entry) => entry.cooling_until !== null).length, 0) ?? 0;
  return (
    <>
      <PageHeader
        title="Channels"
        description="The vendor connections requests are routed over. A model that keeps failing on a channel rests there until its cool-down ends; a refused credential rests the whole channel."
      />
      <div class="section-head">
        <span class="muted">
          {list
            ? `${list.length} channel${list.length === 1 ? '' : 's'}, ${cooling} cooling down · ${models} model${models === 1 ? '' : 's'} cooling down on ${models === 1 ? 'its channel' : 'their channels'}`
            : '\u00a0'}
        </span>
        <span class="muted live-note">
          <span class="live-dot" aria-hidden="true" />
          {updated}
        </span>
      </div>
      <ErrorMessage message={channels.error} />
      <DataTable
        label="Channels"
        columns={channelColumns}
        rows={list}
        rowKey={(channel) => channel.id}
        skeletonRows={4}
        empty="No channels are configured."
      />
    </>
  );
}
