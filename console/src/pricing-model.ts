import { price, size } from './format';
import type { PricedModel, Prices } from './types';

export const textCapabilities = new Set(['chat', 'reasoning', 'completion', 'embedding']);

function cheapest(table: Record<string, number> | undefined): number | undefined {
  if (!table) return undefined;
  const values = Object.values(table).filter((v) => Number.isFinite(v));
  return values.length ? Math.min(...values) : undefined;
}

/** The price a model is sorted by: per 1M input tokens for text, the cheapest image, per minute, per second. */
export function sortPrice(model: PricedModel): number | undefined {
  const p = model.prices;
  if (!p) return undefined;
  if (model.capability === 'image') return cheapest(p.per_image) ?? p.input_per_1m;
  if (model.capability === 'transcription') return p.per_minute ?? p.input_per_1m ?? p.audio_input_per_1m;
  if (model.capability === 'video') return p.per_second ?? cheapest(p.per_second_by_size);
  if (model.capability === 'speech') return p.per_1m_characters ?? p.input_per_1m;
  return p.input_per_1m ?? cheapest(p.per_image) ?? p.per_minute ?? p.per_second ?? cheapest(p.per_second_by_size);
}

export interface PriceLine {
  label: string;
  /** One price, or several (per quality) shown side by side. */
  value: string | string[];
}

/** Image prices grouped by size: "1024×1024" → "$0.04" or "$0.011 low · $0.042 medium". */
function imageLines(perImage: Record<string, number>): PriceLine[] {
  const bySize = new Map<string, { quality: string | undefined; value: number }[]>();
  for (const [key, value] of Object.entries(perImage)) {
    const [dims = key, quality] = key.split('/');
    const list = bySize.get(dims) ?? [];
    list.push({ quality, value });
    bySize.set(dims, list);
  }
  return [...bySize].map(([dims, list]) => ({
    label: dims === 'auto' ? 'Auto size' : size(dims),
    value:
      list.length === 1 && !list[0]!.quality
        ? `${price(list[0]!.value)} / image`
        : list.sort((a, b) => a.value - b.value).map((q) => `${price(q.value)}${q.quality ? ` ${q.quality}` : ''}`),
  }));
}

/** The prices that are not per-1M input/cached/output text tokens, each as a line. */
export function otherPrices(p: Prices | null): PriceLine[] {
  if (!p) return [];
  const lines: PriceLine[] = [];
  if (p.per_image) lines.push(...imageLines(p.per_image));
  if (p.per_minute !== undefined) lines.push({ label: 'Audio', value: `${price(p.per_minute)} / minute` });
  if (p.per_second !== undefined) lines.push({ label: 'Video', value: `${price(p.per_second)} / second` });
  if (p.per_second_by_size) {
    for (const [key, value] of Object.entries(p.per_second_by_size))
      lines.push({ label: `Video ${size(key)}`, value: `${price(value)} / second` });
  }
  if (p.cache_write_per_1m !== undefined)
    lines.push({ label: 'Cache write', value: `${price(p.cache_write_per_1m)} / 1M` });
  if (p.audio_input_per_1m !== undefined)
    lines.push({ label: 'Audio in', value: `${price(p.audio_input_per_1m)} / 1M` });
  if (p.cached_audio_input_per_1m !== undefined)
    lines.push({ label: 'Cached audio in', value: `${price(p.cached_audio_input_per_1m)} / 1M` });
  if (p.audio_output_per_1m !== undefined)
    lines.push({ label: 'Audio out', value: `${price(p.audio_output_per_1m)} / 1M` });
  if (p.per_1m_characters !== undefined)
    lines.push({ label: 'Speech', value: `${price(p.per_1m_characters)} / 1M characters` });
  if (p.long_context) {
    const lc = p.long_context;
    const parts = [
      lc.input_per_1m !== undefined ? `in ${price(lc.input_per_1m)}` : '',
      lc.output_per_1m !== undefined ? `out ${price(lc.output_per_1m)}` : '',
    ].filter(Boolean);
    if (parts.length)
      lines.push({ label: `Over ${Math.round(lc.above_tokens / 1000)}K tokens`, value: `${parts.join(', ')} / 1M` });
  }
  return lines;
}

export const capabilityNames: Record<string, string> = {
  chat: 'Chat',
  reasoning: 'Reasoning',
  completion: 'Completion',
  embedding: 'Embedding',
  image: 'Image',
  video: 'Video',
  transcription: 'Transcription',
  speech: 'Speech',
  realtime: 'Realtime',
  moderation: 'Moderation',
};

export function capabilityName(capability: string): string {
  return capabilityNames[capability] ?? capability;
}
