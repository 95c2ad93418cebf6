import { promisify } from 'node:util';
import { gunzip, gzip } from 'node:zlib';
import type { Endpoint } from '../endpoints.js';

/**
 * What the cache stores: an answer in both its forms (the body, and the stream's events), so a stream can be replayed
 * to a client that asked for a body and the reverse; what a hit needs to say and bill; and how an entry is encoded.
 */

/** One event of a stored stream: its `event:` name where the dialect has one (Anthropic's), and its data. */
export interface StoredEvent {
  e?: string;
  d: string;
}

/** The two forms of a stored answer, as the worker makes them from what the vendor answered. */
export interface CacheableAnswer {
  /** The body a client that asked for no stream gets. */
  body: string;
  /**
   * The stream's events, without the usage chunk and the `[DONE]` trailer of OpenAI's streams (absent: no stream form,
   * embeddings).
   */
  events?: StoredEvent[];
  /** OpenAI's usage chunk, sent to a client that asked `stream_options.include_usage`. */
  usage?: string;
  /** The trailer an OpenAI stream ends with (`data: [DONE]`); Anthropic's streams have none. */
  trailer?: string;
}

/** An entry as stored: the answer, and what a hit needs to say and bill. */
export interface CacheEntry extends CacheableAnswer {
  v: 1;
  /** Epoch ms it was stored. */
  created: number;
  /** Epoch ms it expires. */
  expires: number;
  endpoint: Endpoint;
  model: string;
  /** What the answer cost when it was asked for: what a hit saves. */
  costMicros: number;
  /** The answer's usage as billed (input, cached, output tokens), for the hit's record. */
  tokens: { input: number; cached: number; output: number };
}

/** What the job of a request that opted in carries (`GatewayJobData.cache`). */
export interface JobCachePlan {
  hash: string;
  /**
   * Milliseconds the answer is kept; 0: not stored for later requests (`max-age=0`: its call is only shared while it
   * runs).
   */
  ttlMs: number;
  /**
   * Its job leads: it holds the request's lead mark, identical requests follow it, and it tells them how it ended.
   * The field keeps the name jobs have always carried it under, so that a job queued by an api of one version is
   * read as its api meant by a worker of another while they are upgraded one after the other.
   */
  flight: boolean;
}

const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip);
/** Smaller entries are stored as JSON; larger ones gzipped, which pays on text (a first byte 0x1f says which). */
const compressFrom = 2048;

export async function encodeEntry(entry: CacheEntry): Promise<Buffer> {
  const json = Buffer.from(JSON.stringify(entry));
  return json.length < compressFrom ? json : gzipAsync(json);
}

export async function decodeEntry(stored: Buffer): Promise<CacheEntry | undefined> {
  try {
    const json = stored[0] === 0x1f ? await gunzipAsync(stored) : stored;
    const entry = JSON.parse(json.toString('utf8')) as CacheEntry;
    return entry?.v === 1 && typeof entry.body === 'string' ? entry : undefined;
  } catch {
    // An entry that does not read is a miss, never a failure.
    return undefined;
  }
}
