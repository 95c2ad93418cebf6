import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { gunzip, gzip } from 'node:zlib';
import type { Redis } from 'ioredis';
import type { Endpoint, EndpointRequest } from './endpoints.js';
import { withScripts } from './redis.js';
import { cacheBytesKey, cacheEntryKey, cacheEventsChannel, cacheFlightKey, cacheIndexKey, cacheMetaKey } from './redis-keys.js';

/**
 * The response cache: an exact answer cache per account, opted into per
 * request with the standard `Cache-Control` request header, and the
 * coalescing of identical requests in flight. The api reads entries (a hit
 * never enters the queue) and marks a job that may store its answer; the
 * worker writes the entry once the answer ended well. An entry holds the
 * answer in both forms, the body and the stream's events, so a stream can be
 * replayed to a client that asked for a body and the reverse.
 */

/** What a request's `Cache-Control` asks (RFC 9111 §5.2.1): absent fields ask nothing. */
export interface CacheDirective {
  /** `max-age=N`: an answer up to N seconds old will do (and the answer is kept that long). */
  maxAgeS?: number;
  /** `no-cache`: ask the vendor again, and store its answer. */
  noCache: boolean;
  /** `no-store`: neither read nor write. */
  noStore: boolean;
}

/** Reads a `Cache-Control` request header; directives this cache has no use for are ignored, as RFC 9111 says. */
export function readCacheControl(header: string): CacheDirective {
  const directive: CacheDirective = { noCache: false, noStore: false };
  for (const part of header.split(',')) {
    const [name = '', value] = part.trim().split('=', 2) as [string, string | undefined];
    const key = name.trim().toLowerCase();
    if (key === 'no-cache') directive.noCache = true;
    else if (key === 'no-store') directive.noStore = true;
    else if (key === 'max-age' && value !== undefined) {
      // delta-seconds: digits only (RFC 9111 §1.2.2), quoted or not; an empty value means nothing.
      const digits = value.trim().replace(/^"(.*)"$/, '$1');
      // A value past what is represented is 2^31 (RFC 9111 §1.2.2), however many digits it has.
      if (/^\d+$/.test(digits)) {
        const significant = digits.replace(/^0+(?=\d)/, '');
        directive.maxAgeS = significant.length > 10 ? 2 ** 31 : Math.min(Number(significant), 2 ** 31);
      }
    }
  }
  return directive;
}

/** The endpoints whose answers are cached: text answers, whose request says all that shapes them. */
export const cachedEndpoints: ReadonlySet<Endpoint> = new Set([
  'chat.completions',
  'completions',
  'embeddings',
  // Moderations: the same input to the same model gets the same judgement (a hit's answer has an id of its own).
  'moderations',
  'messages',
  'responses',
  'images.generations',
  'images.edits',
  'images.variations',
  'audio.transcriptions',
  'audio.translations',
  // Speech: the same text, voice, format, speed and instructions give the same audio (voice menus, read-aloud pages).
  'audio.speech',
  'gemini.generate',
  'gemini.embed',
  'gemini.batch_embed',
]);

/**
 * Google's Gemini API: its request as the client wrote it is what shapes the answer (the path's model is the
 * catalog model the hash names; whether it streams, and in which form, is the path's too), so it is hashed alone:
 * `streamGenerateContent` in either form and `generateContent` of one body share one entry.
 */
const geminiEndpoints: ReadonlySet<Endpoint> = new Set(['gemini.generate', 'gemini.embed', 'gemini.batch_embed']);

/** The endpoints whose requests carry uploads: an upload is in a request's hash by its bytes' digest, not its stored name. */
const uploadEndpoints: ReadonlySet<Endpoint> = new Set(['images.edits', 'images.variations', 'audio.transcriptions', 'audio.translations']);

/** Fields that do not change an answer: left out of a request's hash, so requests that differ only there share one. */
const answerNeutral: Readonly<Record<string, ReadonlySet<string>>> = {
  'chat.completions': new Set(['stream', 'stream_options', 'user', 'service_tier', 'metadata', 'store', 'safety_identifier', 'prompt_cache_key']),
  completions: new Set(['stream', 'stream_options', 'user', 'service_tier']),
  embeddings: new Set(['user']),
  messages: new Set(['stream', 'metadata', 'service_tier']),
  // A Responses job's chat form (always streamed to the vendor) beside its shell: the shell's id and time are the
  // response's own, `store` and `background` are never cached, `user` changes nothing.
  responses: new Set(['id', 'created_at', 'store', 'background', 'user', 'service_tier', 'stream', 'stream_options']),
  'images.generations': new Set(['user']),
  'images.edits': new Set(['user']),
  'images.variations': new Set(['user']),
  'audio.transcriptions': new Set(['user']),
};

/** An upload as a request's hash knows it: its bytes' digest, size and type (its stored name is the request's own). */
function uploadContent(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(uploadContent);
  if (value === null || typeof value !== 'object' || !('key' in value) || !('size' in value)) return value;
  const { sha256, size, contentType } = value as unknown as { sha256?: string; size: number; contentType: string };
  if (typeof sha256 !== 'string') throw new Error('an upload without its digest cannot be cached');
  return { sha256, size, contentType };
}

/** Whether a request can be cached at all: every upload it carries was digested as it arrived. */
export function hashable(request: EndpointRequest): boolean {
  if (!uploadEndpoints.has(request.endpoint)) return true;
  try {
    for (const value of Object.values(request.payload as Record<string, unknown>)) uploadContent(value);
    return true;
  } catch {
    return false;
  }
}

/** JSON with every object's keys in order: two requests that differ only in key order or spacing write the same text. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map((item) => canonicalJson(item === undefined ? null : item)).join(',')}]`;
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record)
    .filter((key) => record[key] !== undefined)
    .sort();
  return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(record[key])}`).join(',')}}`;
}

/**
 * The hash a request is stored and found by: its endpoint, the catalog model it resolved to, and its payload in
 * canonical form without the fields that do not change the answer. The account is in the key's name, never here:
 * entries are never shared across accounts.
 */
export function requestHash(request: EndpointRequest, modelId: string): string {
  const neutral = answerNeutral[request.endpoint] ?? new Set<string>();
  const kept = (payload: Record<string, unknown>) => {
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(payload)) if (!neutral.has(key) && key !== 'model') out[key] = value;
    return out;
  };
  const form =
    request.endpoint === 'messages'
      ? { ...kept(request.payload.anthropic as unknown as Record<string, unknown>), [betasField]: betaSet(request.payload.betas) }
      : request.endpoint === 'responses'
        ? { chat: kept(request.payload.chat as unknown as Record<string, unknown>), shell: kept(request.payload.shell as unknown as Record<string, unknown>) }
        : geminiEndpoints.has(request.endpoint)
          ? kept((request.payload as { gemini: Record<string, unknown> }).gemini)
        : uploadEndpoints.has(request.endpoint)
          ? Object.fromEntries(Object.entries(kept(request.payload as Record<string, unknown>)).map(([key, value]) => [key, uploadContent(value)]))
          : kept(request.payload as Record<string, unknown>);
  return createHash('sha256').update(`${request.endpoint}\n${modelId}\n${canonicalJson(form)}`).digest('hex');
}

/**
 * Where a Messages request's `anthropic-beta` flags stand in its hashed form: a header, but one that changes the
 * answer (longer output, interleaved thinking…). A name no body field can have, so it never meets one.
 */
const betasField = ' anthropic-beta';

/** The flags as a set: their order and spacing in the header change nothing; their spelling is kept as sent. */
function betaSet(header: string | undefined): string[] | undefined {
  const flags = [...new Set((header ?? '').split(',').map((flag) => flag.trim()).filter((flag) => flag !== ''))].sort();
  return flags.length > 0 ? flags : undefined;
}

/** One event of a stored stream: its `event:` name where the dialect has one (Anthropic's), and its data. */
export interface StoredEvent {
  e?: string;
  d: string;
}

/** The two forms of a stored answer, as the worker makes them from what the vendor answered. */
export interface CacheableAnswer {
  /** The body a client that asked for no stream gets. */
  body: string;
  /** The stream's events, without the usage chunk and the `[DONE]` trailer of OpenAI's streams (absent: no stream form, embeddings). */
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
  /** Milliseconds the answer is kept; 0: not stored (a `max-age=0` request shares calls in flight only). */
  ttlMs: number;
  /** It holds the flight mark: identical requests wait for it, and hear of its end. */
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

/**
 * Stores an entry and keeps the account's total under its bound, in one script over the account's slot: the
 * index's expired members are dropped (their entries expired by themselves), a replaced entry's size is taken
 * back, and past the bound the entries that expire soonest go first (never the one just stored).
 */
const storeScript = `
local now = tonumber(ARGV[4])
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
for _, h in ipairs(gone) do
  local size = redis.call('HGET', KEYS[4], h)
  if size then redis.call('DECRBY', KEYS[3], tonumber(string.match(size, '^(%d+)'))) end
  redis.call('HDEL', KEYS[4], h)
  redis.call('ZREM', KEYS[2], h)
end
local old = redis.call('HGET', KEYS[4], ARGV[5])
if old then redis.call('DECRBY', KEYS[3], tonumber(string.match(old, '^(%d+)'))) end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[5])
redis.call('HSET', KEYS[4], ARGV[5], ARGV[6])
local total = redis.call('INCRBY', KEYS[3], string.len(ARGV[1]))
local evicted = 0
while total > tonumber(ARGV[3]) do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not first or first == ARGV[5] then break end
  local size = redis.call('HGET', KEYS[4], first)
  if size then total = redis.call('DECRBY', KEYS[3], tonumber(string.match(size, '^(%d+)'))) end
  redis.call('DEL', ARGV[7] .. first)
  redis.call('HDEL', KEYS[4], first)
  redis.call('ZREM', KEYS[2], first)
  evicted = evicted + 1
end
local keep = tonumber(ARGV[2]) + 60000
for i = 2, 4 do if redis.call('PTTL', KEYS[i]) < keep then redis.call('PEXPIRE', KEYS[i], keep) end end
if ARGV[8] ~= '' then
  local held = redis.call('GET', KEYS[5])
  if held and string.sub(held, 1, string.len(ARGV[8]) + 1) == ARGV[8] .. ' ' then redis.call('DEL', KEYS[5]) end
  redis.call('PUBLISH', ARGV[9], ARGV[10])
end
return evicted`;


export interface StoreLimits {
  /** Largest entry stored, in bytes as stored (compressed or not). */
  maxEntryBytes: number;
  /** Most bytes of entries one account keeps. */
  maxAccountBytes: number;
}

/**
 * Stores an answer; resolves to its stored size, or 0 when it is past the entry bound (not stored). It is served
 * until `entry.expires`; Redis keeps it `keepMs` at least (the requests that shared its call read it after that).
 * With `landing` (the job holding the request's flight mark), the mark is dropped and the waiting apis told it is
 * stored in the same script (the mark shares the entries' hash tag): one round trip, not two.
 */
export async function storeEntry(redis: Redis, accountId: string, keyId: string, hash: string, entry: CacheEntry, limits: StoreLimits, keepMs = 0, landing?: { jobId: string; name?: string }): Promise<number> {
  const stored = await encodeEntry(entry);
  if (stored.length > limits.maxEntryBytes) return 0;
  const ttlMs = Math.max(1, entry.expires - Date.now(), keepMs);
  // An answer kept only for the requests sharing its call is stored under a name of its own: the request's entry,
  // which others may have stored fresh, is left as it was.
  const name = landing?.name ?? hash;
  const event: CacheEvent = { account: accountId, hash, status: 'stored', cost: entry.costMicros, ...(landing ? { job: landing.jobId } : {}), ...(name !== hash ? { entry: name } : {}) };
  await scripted(redis).cacheStore(
    cacheEntryKey(accountId, name),
    cacheIndexKey(accountId),
    cacheBytesKey(accountId),
    cacheMetaKey(accountId),
    cacheFlightKey(accountId, hash),
    stored,
    ttlMs,
    limits.maxAccountBytes,
    Date.now(),
    name,
    `${stored.length} ${keyId} ${entry.model}`,
    cacheEntryKey(accountId, ''),
    landing?.jobId ?? '',
    cacheEventsChannel,
    landing ? JSON.stringify(event) : '',
  );
  return stored.length;
}

/** The stored entry of a request, if any. */
export async function readEntry(redis: Redis, accountId: string, hash: string): Promise<CacheEntry | undefined> {
  const stored = await redis.getBuffer(cacheEntryKey(accountId, hash));
  return stored ? decodeEntry(stored) : undefined;
}

/** Takes the flight mark for a job (resolves to '') or names the job that holds it (`flightHolder`). */
const flightScript = `
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ''`;

export async function takeFlight(redis: Redis, accountId: string, hash: string, holder: string, ttlMs: number): Promise<string> {
  return scripted(redis).cacheFlight(cacheFlightKey(accountId, hash), holder, Math.max(1, ttlMs));
}

/** What a worker says on `cacheEventsChannel` when a cached request's job ends. */
export interface CacheEvent {
  account: string;
  hash: string;
  /** The job whose end it tells (absent from a worker of an older version: taken as the end of whichever job). */
  job?: string;
  /**
   * `stored`: its answer is kept for them; `failed`: its call failed (each request waiting on it runs its own);
   * `gone`: it never ran (refused, or taken out of its queue): the requests waiting on it contend for the mark again.
   */
  status: 'stored' | 'failed' | 'gone';
  /** What the answer cost (micros), when it ended well: a request that followed its stream is billed from it. */
  cost?: number;
  /** The name its answer is stored under when not the request's hash (kept only for the requests sharing its call). */
  entry?: string;
}

/** The name a job's answer is kept under for the requests sharing its call when it is not to be served later (`max-age=0`). */
export function sharedOnlyName(hash: string, jobId: string): string {
  return `${hash}.${jobId}`;
}

/**
 * The flight mark's value: the job holding it, the form its client reads (`streamForm`, '-' for a body: a client
 * that streams the same form follows that job's stream as it comes), and its key (the owner of the stream's log).
 */
export function flightHolder(jobId: string, form: string | undefined, keyId: string): string {
  return `${jobId} ${form ?? '-'} ${keyId}`;
}

export function readFlightHolder(value: string): { jobId: string; form: string | undefined; keyId: string } {
  const [jobId = '', form = '-', keyId = ''] = value.split(' ');
  return { jobId, form: form === '-' ? undefined : form, keyId };
}

/**
 * The form of a request's stream, when it streams: two streamed requests with one hash and one form read the same
 * frames (an OpenAI stream differs in its usage chunk, sent only when `stream_options.include_usage` asks).
 */
export function streamForm(request: EndpointRequest, stream: boolean): string | undefined {
  if (!stream) return undefined;
  // Google's two forms carry the same chunks in different framings: a stream follows only one of its own form.
  if (request.endpoint === 'gemini.generate') return `gemini-${request.payload.form ?? 'array'}`;
  // Speech's events are followed as any; its audio bytes are not (a follower could not read the log's base64 as
  // audio): an identical request waits for the answer to be stored, and is answered from it.
  if (request.endpoint === 'audio.speech') return request.payload.stream_format === 'sse' ? 'events' : undefined;
  if (request.endpoint !== 'chat.completions' && request.endpoint !== 'completions') return 'events';
  const usage = (request.payload as { stream_options?: { include_usage?: boolean | null } | null }).stream_options?.include_usage === true;
  return usage ? 'chunks+usage' : 'chunks';
}

/** Drops the flight mark if this job holds it, and tells every api how the job ended: one round trip. */
const landScript = `
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. ' ' then redis.call('DEL', KEYS[1]) end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 0`;

interface CacheRedis extends Redis {
  cacheStore(...args: Array<string | number | Buffer>): Promise<number>;
  cacheFlight(key: string, holder: string, ttlMs: number): Promise<string>;
  cacheLand(key: string, jobId: string, channel: string, event: string): Promise<number>;
}

/** The connection with the cache's scripts as commands (EVALSHA: their text is not sent on every call). */
const scripted = (redis: Redis) =>
  withScripts<CacheRedis>(redis, { cacheStore: { keys: 5, lua: storeScript }, cacheFlight: { keys: 1, lua: flightScript }, cacheLand: { keys: 1, lua: landScript } });

/** The job holding a request's flight mark ended (or was never queued): the mark goes, and the requests waiting on it hear how. */
export async function landFlight(redis: Redis, accountId: string, hash: string, jobId: string, status: CacheEvent['status'], costMicros?: number): Promise<void> {
  const event: CacheEvent = { account: accountId, hash, job: jobId, status, ...(costMicros !== undefined ? { cost: costMicros } : {}) };
  await scripted(redis).cacheLand(cacheFlightKey(accountId, hash), jobId, cacheEventsChannel, JSON.stringify(event));
}

/**
 * Removes an account's entries, all or those of one key or one model; resolves to how many went. The index names
 * every live entry with its key and model, so a purge reads the account's index only.
 */
export async function purgeEntries(redis: Redis, accountId: string, filter: { keyId?: string; model?: string } = {}): Promise<number> {
  const meta = await redis.hgetall(cacheMetaKey(accountId));
  let removed = 0;
  const batch = redis.multi();
  for (const [hash, value] of Object.entries(meta)) {
    const [size = '0', keyId, model] = value.split(' ');
    if ((filter.keyId !== undefined && keyId !== filter.keyId) || (filter.model !== undefined && model !== filter.model)) continue;
    batch.del(cacheEntryKey(accountId, hash)).hdel(cacheMetaKey(accountId), hash).zrem(cacheIndexKey(accountId), hash).decrby(cacheBytesKey(accountId), Number(size));
    removed += 1;
  }
  if (removed > 0) await batch.exec();
  else batch.discard();
  return removed;
}

/** The accounts that have entries (for a purge of every account by model): their index keys, found with SCAN. */
export async function accountsWithEntries(redis: Redis): Promise<string[]> {
  const accounts = new Set<string>();
  const pattern = cacheIndexKey('*');
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
    cursor = next;
    for (const key of keys) {
      const match = /\{([^}]+)\}:index$/.exec(key);
      if (match) accounts.add(match[1]!);
    }
  } while (cursor !== '0');
  return [...accounts];
}
