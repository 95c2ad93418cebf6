import type { BatchRecord } from './types.js';

/** A batch as Anthropic's API answers it (`MessageBatch`); `resultsUrl` once it has ended. */
export function batchView(batch: BatchRecord, resultsUrl: string): Record<string, unknown> {
  const time = (ms: number | undefined) => (ms === undefined ? null : new Date(ms).toISOString());
  return {
    id: batch.id,
    type: 'message_batch',
    // Never validating (only OpenAI's batches are, and Anthropic's paths do not serve them).
    processing_status: batch.status === 'validating' ? 'in_progress' : batch.status,
    request_counts: {
      processing: batch.counts.processing,
      succeeded: batch.counts.succeeded,
      errored: batch.counts.errored,
      canceled: batch.counts.canceled,
      expired: batch.counts.expired,
    },
    ended_at: time(batch.endedAt),
    created_at: time(batch.created),
    expires_at: time(batch.expires),
    archived_at: null,
    cancel_initiated_at: time(batch.cancelAt),
    results_url: batch.status === 'ended' ? resultsUrl : null,
  };
}
