/**
 * The response cache: an exact answer cache per account, opted into per request, and the coalescing of identical
 * requests under way into one vendor call. What it decides, and where:
 *
 * - Which requests   cached-endpoints.ts names the endpoints whose answers are kept (text answers, whose request
 *                    says all that shapes them). A request opts in with `Cache-Control` (`max-age`, `no-cache`) or
 *                    its key's default TTL, and `no-store` opts it out; the api decides it per request, with the
 *                    account's and the gateway's caps (api/cache/response-cache.ts `plan`).
 * - The key          request-hash.ts: a hash of the endpoint, the catalog model the request resolved to and its
 *                    payload in canonical form, without the fields that change no answer; uploads by their digest.
 *                    Entries are never shared across accounts: the account is in the key's name.
 * - What is stored   entry.ts: the answer in both its forms (the body and the stream's events, so either replays
 *                    to either), its price and usage; JSON, gzipped when large. Stored by the worker once the answer
 *                    ended well (never a failed, cut or filtered one), kept the request's `max-age` (capped), the
 *                    account kept under its bound by evicting what expires soonest (store.ts). A hit is read by the
 *                    api and never enters the queue.
 * - Coalescing       coalescing.ts: the first of identical requests to claim the lead mark is the leader, and its
 *                    job calls the vendor; the others are its followers, which follow its stream as it comes or wait
 *                    for its stored answer. The leading job announces how it ended (stored, failed, gone); followers
 *                    of a call that failed run their own, those of a job that never ran contend for the lead again.
 * - HTTP's headers   cache-control.ts reads the request's `Cache-Control`; cache-status.ts writes `Cache-Status`
 *                    (RFC 9211: hit with its ttl, collapsed for a follower, fwd=miss or fwd=request, stored), and
 *                    the api sends `Age` with an answer it did not ask the vendor for.
 *
 * The two halves: the api's (api/cache/) reads, coalesces and answers; the worker's (workers/cached-job-end.ts)
 * stores a job's answer and announces a leading job's outcome. The Redis scripts are in lua/, declared in scripts.ts.
 */
export { readCacheControl, type CacheDirective } from './cache-control.js';
export { collapsedStatus, forwardedStatus, hitStatus } from './cache-status.js';
export { cachedEndpoints } from './cached-endpoints.js';
export {
  announceOutcome,
  claimLead,
  followersEntryName,
  leadHolder,
  readLeadHolder,
  streamForm,
  type LeadOutcome,
} from './coalescing.js';
export {
  decodeEntry,
  encodeEntry,
  type CacheableAnswer,
  type CacheEntry,
  type JobCachePlan,
  type StoredEvent,
} from './entry.js';
export { canonicalJson, hashable, requestHash } from './request-hash.js';
export { accountsWithEntries, purgeEntries, readEntry, storeEntry, type StoreLimits } from './store.js';
