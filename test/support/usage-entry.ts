import type { UsageEntry } from '../../shared/money/usage.js';

/**
 * A settled request's usage entry: a small completed chat of key `k1` of account `a1`, unless `extra` says otherwise.
 */
export const usageEntry = (requestId: string, costMicros: number, extra: Partial<UsageEntry> = {}): UsageEntry => ({
  request_id: requestId,
  key_id: 'k1',
  account_id: 'a1',
  model: 'gpt-4o-mini',
  vendor: 'openai',
  input_tokens: 10,
  cached_tokens: 0,
  cache_write_tokens: 0,
  output_tokens: 5,
  images: 0,
  audio_seconds: 0,
  video_seconds: 0,
  cost_micros: costMicros,
  status: 'completed',
  created: Math.floor(Date.now() / 1000),
  duration_ms: 12,
  service_tier: 'default',
  ...extra,
});
