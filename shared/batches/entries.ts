import type { GatewayJobData } from '../jobs.js';

/**
 * A batch's request as it waits to be queued (its pending entry, JSON): the job it will be, or, for a request refused
 * when its batch came in (an OpenAI batch's line whose body or model is refused: a failure of that request, not of
 * its batch, as OpenAI has it), its result already written. The intake encodes them, the window's queueing
 * (queueing.ts) and the sweep decode them.
 */

/** A request of a batch as it waits to be queued: its queue, its attempts, and its job's data. */
export interface BatchEntry {
  queue: string;
  attempts: number;
  data: GatewayJobData & { claim: NonNullable<GatewayJobData['claim']> };
}

/** A request refused at intake: its custom_id, and its result (`errored`) as its batch records it. */
export interface RefusedEntry {
  refused: { customId: string; result: string };
}

export const encodeBatchEntry = (entry: BatchEntry | RefusedEntry): string => JSON.stringify(entry);

/** An entry's parts, undefined for text that is no entry ('' included). */
function parseEntry(text: string): Partial<BatchEntry & RefusedEntry> | undefined {
  if (!text) return undefined;
  try {
    const entry = JSON.parse(text) as Partial<BatchEntry & RefusedEntry> | null;
    return entry !== null && typeof entry === 'object' ? entry : undefined;
  } catch {
    return undefined;
  }
}

const asJobEntry = (entry: Partial<BatchEntry & RefusedEntry> | undefined): BatchEntry | undefined =>
  typeof entry?.queue === 'string' && entry.data?.claim ? (entry as BatchEntry) : undefined;
const asRefused = (entry: Partial<BatchEntry & RefusedEntry> | undefined): RefusedEntry['refused'] | undefined => {
  const refused = entry?.refused;
  return typeof refused?.customId === 'string' && typeof refused.result === 'string' ? refused : undefined;
};

/**
 * An entry read once: the job to queue, or the refused request's result to record (neither: no entry to queue from).
 */
export function decodeEntry(text: string): { job?: BatchEntry; refused?: RefusedEntry['refused'] } {
  const parsed = parseEntry(text);
  const refused = asRefused(parsed);
  if (refused) return { refused };
  const job = asJobEntry(parsed);
  return job ? { job } : {};
}

/** The entry of a request to queue (undefined for a refused one, or text that is no entry). */
export function decodeBatchEntry(text: string): BatchEntry | undefined {
  return asJobEntry(parseEntry(text));
}

/** The custom_id an entry carries (`#<index>` when it has none to say). */
export function entryCustomId(text: string, index: number): string {
  const entry = parseEntry(text);
  const customId = entry?.data?.batch?.customId ?? entry?.refused?.customId;
  return typeof customId === 'string' ? customId : `#${index}`;
}
