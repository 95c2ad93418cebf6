import type { Redis } from 'ioredis';
import type { EndpointRequest } from '../endpoints.js';
import { cacheLeadKey, cacheOutcomesChannel } from '../redis-keys.js';
import { announceOutcomeScript, claimLeadScript } from './scripts.js';

/**
 * Identical requests under way share one vendor call. The first to claim a request's lead mark is its leader: its
 * job calls the vendor. The others are its followers: a follower that streams in the leader's form follows its
 * stream as the job writes it; any other waits for the job's end and is answered from the answer it stored. The
 * leading job tells its followers how it ended (`LeadOutcome`, published on `cacheOutcomesChannel`).
 */

/** What a leading job tells its followers when it ends, on `cacheOutcomesChannel`. */
export interface LeadOutcome {
  account: string;
  hash: string;
  /** The job whose end it tells (absent from a worker of an older version: taken as the end of whichever job). */
  job?: string;
  /**
   * `stored`: its answer is kept for them; `failed`: its call failed (each follower runs its own);
   * `gone`: it never ran (refused, or taken out of its queue): its followers contend for the lead again.
   */
  status: 'stored' | 'failed' | 'gone';
  /** What the answer cost (micros), when it ended well: a follower of its stream is billed from it. */
  cost?: number;
  /** The name its answer is stored under when not the request's hash (kept only for its followers). */
  entry?: string;
}

/** Claims the lead of a request for a job (resolves to '') or names the job that holds it (`leadHolder`'s value). */
export async function claimLead(
  redis: Redis,
  accountId: string,
  hash: string,
  holder: string,
  ttlMs: number,
): Promise<string> {
  return claimLeadScript(redis, { lead: cacheLeadKey(accountId, hash), holder, ttlMs: Math.max(1, ttlMs) });
}

/** A leading job ended (or was never queued): its lead mark goes, and its followers hear how it ended. */
export async function announceOutcome(
  redis: Redis,
  accountId: string,
  hash: string,
  jobId: string,
  status: LeadOutcome['status'],
  costMicros?: number,
): Promise<void> {
  const outcome: LeadOutcome = {
    account: accountId,
    hash,
    job: jobId,
    status,
    ...(costMicros !== undefined ? { cost: costMicros } : {}),
  };
  await announceOutcomeScript(redis, {
    lead: cacheLeadKey(accountId, hash),
    jobId,
    channel: cacheOutcomesChannel,
    outcome: JSON.stringify(outcome),
  });
}

/**
 * The name a leader's answer is kept under for its followers alone, when it is not to be served later (`max-age=0`).
 */
export function followersEntryName(hash: string, jobId: string): string {
  return `${hash}.${jobId}`;
}

/**
 * The lead mark's value: the leading job, the form its client reads (`streamForm`, '-' for a body: a follower that
 * streams the same form follows that job's stream as it comes), and its key (the owner of the stream's log).
 */
export function leadHolder(jobId: string, form: string | undefined, keyId: string): string {
  return `${jobId} ${form ?? '-'} ${keyId}`;
}

export function readLeadHolder(value: string): { jobId: string; form: string | undefined; keyId: string } {
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
  const usage =
    (request.payload as { stream_options?: { include_usage?: boolean | null } | null }).stream_options
      ?.include_usage === true;
  return usage ? 'chunks+usage' : 'chunks';
}
