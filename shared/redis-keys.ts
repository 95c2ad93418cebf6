import slotOf from 'cluster-key-slot';
import { createHash } from 'node:crypto';

/** The names of the Redis keys and channels the gateway owns; BullMQ's own keys live under `bull:`. */

/**
 * Key prefix of every Redis key the gateway owns (BullMQ keys live under `bull:`).
 * A request's own keys (payload, result, replay log, stored response) hash by
 * their whole name, so on a Redis Cluster they spread over every shard.
 */
export const keyPrefix = 'sy:';
/**
 * The directory (accounts, API keys, console sessions, the record's load
 * marks) shares one hash tag, `{acct}`; money is spread over the billing
 * buckets' tags below, each account's in one, so its reservation and its
 * settlement each stay one script over one slot on a Cluster as on one server.
 */
export const accountsPrefix = `${keyPrefix}{acct}:`;

// ---- Message Batches (shared/batches/): each batch's keys under its own hash tag, so one script records a result ----

/** A batch: who made it, when it expires, its status and its request counts (a hash). */
export const batchKey = (batchId: string) => `${keyPrefix}batch:{${batchId}}`;
/** The requests of a batch whose result is recorded (a hash: index → its outcome), so each is counted once. */
export const batchDoneKey = (batchId: string) => `${keyPrefix}batch:{${batchId}}:done`;
/** A batch's results as they came (a stream: `custom_id`, `result` JSON), read page by page by `…/results`. */
export const batchResultsKey = (batchId: string) => `${keyPrefix}batch:{${batchId}}:results`;
/**
 * A batch's requests not yet recorded, as their jobs will be queued (a hash: index → its queue's name and its job's
 * data, JSON): each leaves it when its result is recorded, so it shrinks as the batch runs.
 */
export const batchPendingKey = (batchId: string) => `${keyPrefix}batch:{${batchId}}:pending`;
/** A batch's requests queued and not yet recorded (a sorted set: index by when it was queued, ms): its window. */
export const batchQueuedKey = (batchId: string) => `${keyPrefix}batch:{${batchId}}:queued`;
/** Held by the api storing a batch's requests while it stores them (a string with a TTL, renewed each round). */
export const batchIntakeKey = (batchId: string) => `${keyPrefix}batch:{${batchId}}:intake`;
/** Held by the api writing an OpenAI batch's files or a part of its results (api/batches/openai-finalize.ts). */
export const batchFinalizeLeaseKey = (batchId: string) => `${keyPrefix}batch:{${batchId}}:finalize`;
/**
 * Where a worker asks the apis to refill a batch's window (the message: the batch's id); any api that hears it does.
 */
export const batchRefillChannel = `${keyPrefix}batches:refill`;
/**
 * Batches not yet ended, by their expiry (a sorted set, ms): what the sweep ends at their deadline or after a cancel.
 */
export const openBatchesKey = `${keyPrefix}batches:open`;
/** The sweep's lock: one api at a time walks the open batches. */
export const batchSweepLockKey = `${keyPrefix}batches:sweep-lock`;
/** An account's batches by creation time (a sorted set, ms), for the list. */
export const accountBatchesKey = (accountId: string) => `${keyPrefix}batches:{${accountId}}`;

// ---- an account's files (`/v1/files`, storage/account-files.ts): each account's under its own hash tag ----

/**
 * A file's object (a hash: the file object's fields, its place `seq` and its blob's key). A deleted file leaves its
 * place alone here for a day (`deleted`), so a list cursor naming it still pages on.
 */
export const accountFileKey = (accountId: string, fileId: string) => `${keyPrefix}files:{${accountId}}:file:${fileId}`;
/** An account's files by place (a sorted set scored by `seq`, which grows with creation): all, or one purpose's. */
export const accountFilesKey = (accountId: string, purpose?: string) =>
  `${keyPrefix}files:{${accountId}}:${purpose === undefined ? 'all' : `purpose:${purpose}`}`;
/** An account's file counter: each new file's place in its lists. */
export const accountFilesSeqKey = (accountId: string) => `${keyPrefix}files:{${accountId}}:seq`;
/** Files that expire, by when (a sorted set, epoch ms; member `fileMember`): the blob janitor deletes them when due. */
export const expiringFilesKey = `${keyPrefix}files:expiring`;
/**
 * Uploads under way, by start (a sorted set, epoch ms; member `fileMember`): the bytes of one whose api died are swept.
 */
export const fileUploadsKey = `${keyPrefix}files:uploading`;
/** A file's member in the two gateway-wide sets above. */
export const fileMember = (accountId: string, fileId: string) => `${accountId} ${fileId}`;

// ---- the response cache (shared/cache/): each account's entries under its own hash tag ----

/** One stored answer: the account's, for one request hash (a hash of the request's canonical form). */
export const cacheEntryKey = (accountId: string, hash: string) => `${keyPrefix}cache:{${accountId}}:e:${hash}`;
/**
 * The lead mark, set while a job answers that request (its leader): identical requests that opted in follow it instead
 * of queuing their own.
 */
export const cacheLeadKey = (accountId: string, hash: string) => `${keyPrefix}cache:{${accountId}}:f:${hash}`;
/**
 * The account's entries by expiry (member `hash keyId model`, score epoch ms) and their total size, for its bound and
 * purges.
 */
export const cacheIndexKey = (accountId: string) => `${keyPrefix}cache:{${accountId}}:index`;
export const cacheBytesKey = (accountId: string) => `${keyPrefix}cache:{${accountId}}:bytes`;
/** Each entry's stored size, key and model (`size keyId model`), by hash: what the bound and a purge read. */
export const cacheMetaKey = (accountId: string) => `${keyPrefix}cache:{${accountId}}:meta`;
/** Where a leading job tells how it ended (stored, failed, gone): the apis of its followers hear it. */
export const cacheOutcomesChannel = `${keyPrefix}cache-events`;

// ---- a request's own keys ----

/** A job's request body, when too large to ride in the job itself. */
export const payloadKey = (jobId: string) => `${keyPrefix}payload:${jobId}`;
/** A plain request's answer, when too large to publish: the api reads it once. */
export const resultKey = (jobId: string) => `${keyPrefix}result:${jobId}`;
/** A stream's replay log (stream): what a client that resumes or arrives late reads. */
export const replayStreamKey = (jobId: string) => `${keyPrefix}replay:${jobId}`;
/**
 * Set (with a short TTL) while someone follows a stream's log: a stream whose first client left keeps running while it
 * exists.
 */
export const streamWatchKey = (jobId: string) => `${keyPrefix}watch:${jobId}`;
/** The answer id a chat stream's chunks carry, naming its request: a client may resume by either. */
export const streamAliasKey = (answerId: string) => `${keyPrefix}stream-id:${answerId}`;
/** A stored response: whose it is, what went in, and the response object. */
export const responseKey = (id: string) => `${keyPrefix}response:${id}`;
/** Where an async job lives and whose it is (an AsyncJobRecord). */
export const asyncJobKey = (id: string) => `${keyPrefix}async:${id}`;
/** A key's videos, newest last (sorted set scored by creation time). */
export const videosOfKey = (keyId: string) => `${keyPrefix}videos:${keyId}`;

// ---- between api and workers ----

/**
 * A prompt's cached prefix on one vendor channel (workers/prompt-warming.ts): `w` while it is taken as in the vendor's
 * cache, `p:<job id>` while the request that writes it is at the vendor. Keyed by the channel and the prefix's affinity
 * key.
 */
export const promptWarmKey = (channelId: string, affinityKey: string) => `${keyPrefix}warm:${channelId}:${affinityKey}`;

/** An api instance's channel: its workers' replies (chunks, answers, errors) to the requests it holds. */
export const replyChannel = (apiInstanceId: string) => `${keyPrefix}reply:${apiInstanceId}`;
/** A worker process's channel for the answers of its tool loop's calls (workers/mcp/loop-calls.ts). */
export const mcpLoopReplyChannel = (processId: string) => `${keyPrefix}mcp-loop:${processId}`;
/**
 * Set (with a TTL) by a live api for its reply channel: a worker whose answers reach nobody checks it before giving up.
 */
export const apiAliveKey = (replyTo: string) => `${keyPrefix}alive:${replyTo}`;
/** Every worker hears here the job ids whose requests were cancelled or abandoned. */
export const cancelChannel = `${keyPrefix}cancel`;
/** A Realtime session's channels (shared/realtime.ts): the api's client events up to the worker, the worker's down. */
export const realtimeUpChannel = (sessionId: string) => `${keyPrefix}rt:{${sessionId}}:up`;
export const realtimeDownChannel = (sessionId: string) => `${keyPrefix}rt:{${sessionId}}:down`;
/** Job lifecycle events (queued, progress, completed, failed) of async jobs, for WebSocket watchers. */
export const jobEventsChannel = `${keyPrefix}job-events`;

// ---- scheduling and vendors ----

/**
 * The scheduler's keys of one queue (`shared/scheduling`), all under the queue's own hash tag (`{chat}`,
 * `{chat@openai}`): one Cluster slot with the BullMQ keys its scripts touch. In the order the scripts take them.
 */
export function fairKeys(queueName: string): string[] {
  const base = `${keyPrefix}fair:${queueName}`;
  return [
    `${base}:tags:default`, // finish tags of the interactive band (priority and default): account -> tag
    `${base}:tags:flex`, // finish tags of the flex band
    `${base}:clock:default`, // the interactive band's virtual time
    `${base}:clock:flex`, // the flex band's virtual time
    `${base}:count:default`, // jobs of the interactive band waiting or on their way to the queue
    `${base}:count:flex`, // jobs of the flex band, likewise
    backlogKey(queueName),
    fairMembersKey(queueName), // every job counted, by id: its member encoding (lua/fair.lua)
    `${base}:weights`, // the weights of the accounts that wait: account -> weight
  ];
}
/**
 * Every job counted in a queue's backlog, by id (hash: job id -> its member encoding, shared/scheduling/lua/fair.lua).
 */
export const fairMembersKey = (queueName: string) => `${keyPrefix}fair:${queueName}:members`;
/**
 * Jobs waiting in a queue by tier and account (hash: `tier|account` -> count): admission's shares and `/metrics`'
 * backlog.
 */
export const backlogKey = (queueName: string) => `${keyPrefix}fair:${queueName}:waiting`;
/** The weights of the accounts waiting in a queue (hash: account -> weight): admission's shares. */
export const waitingWeightsKey = (queueName: string) => `${keyPrefix}fair:${queueName}:weights`;
/** Held by the worker recounting a queue's backlog (`QUEUE_RECOUNT_MS`), so one does it per interval. */
export const recountLockKey = (queueName: string) => `${keyPrefix}fair:${queueName}:recount`;
/** The lanes served, by lane queue name: who serves each and with what caps, until when (hash: name -> JSON). */
export const lanesServedKey = `${keyPrefix}lanes:served`;
/** Every lane queue an api ever routed requests to (set): a lane nobody serves any more is found from here. */
export const lanesKnownKey = `${keyPrefix}lanes:known`;
/** A vendor's calls in flight: leases (sorted set) scored by their expiry. */
export const vendorInflightKey = (vendor: string) => `${keyPrefix}limit:{${vendor}}:inflight`;
/** A vendor's calls started in the rolling minute (sorted set scored by start); beside its leases, on one slot. */
export const vendorRpmKey = (vendor: string) => `${keyPrefix}limit:{${vendor}}:rpm`;
/**
 * A capped vendor's pace (hash beside its leases): `avg` call ms (moving average), `last` start ms, `busy` ms until
 * which its slots count as all taken.
 */
export const vendorPaceKey = (vendor: string) => `${keyPrefix}limit:{${vendor}}:pace`;
/** Every worker hears a released slot here (message: the vendor), so waiters retry at once instead of polling. */
export const slotFreedChannel = `${keyPrefix}limit-freed`;
/**
 * Shared by every worker (and read by the console's channel page): channel id, or `<channel id>|<upstream model>`
 * for a rest of one model on it → `<until ms>:<reason>:<status>`.
 */
export const channelCooldownsKey = `${keyPrefix}cooldowns`;
/**
 * A channel's failed vendor calls, one hash a minute (unix minute): `<channel id>|<upstream model>` → how many failed
 * in it. Every worker adds to it, the console's channel page sums the last quarter hour; each hash expires soon after.
 * One hash tag, so the page reads them all from one slot on a Cluster.
 */
export const channelFailuresKey = (minute: number) => `${keyPrefix}{channel-health}:failures:${minute}`;

// ---- console sign-in, beside the accounts (one slot) ----

/**
 * A console session (hash: account, csrf, created, and for a sign-in through a provider: ends, id_token), under the
 * SHA-256 of its token; TTL = its idle expiry.
 */
export const sessionKey = (tokenHash: string) => `${accountsPrefix}session:${tokenHash}`;
/** The session hashes of one account (set), to end them all at once. */
export const accountSessionsKey = (accountId: string) => `${accountsPrefix}account-sessions:${accountId}`;
/** Failed sign-ins of one email or address in the current window (TTL = the window), under a hash of the value. */
export const signinFailuresKey = (scope: 'email' | 'ip', value: string) =>
  `${accountsPrefix}signin-fail:${scope}:${createHash('sha256').update(value).digest('hex').slice(0, 32)}`;
/**
 * One OpenID Connect sign-in under way (a string, JSON: the browser it is bound to, its PKCE verifier, its nonce,
 * its redirect URL), under its `state`; taken once (GETDEL) by the callback; TTL = the time a sign-in may take.
 */
export const oidcAttemptKey = (state: string) =>
  `${accountsPrefix}oidc-attempt:${createHash('sha256').update(state).digest('hex')}`;

// ---- one for the whole gateway ----

/** Held by the worker that sweeps old blobs for the current interval. */
export const janitorLockKey = `${keyPrefix}janitor`;
/**
 * The secret blob download URLs are signed with, when `BLOB_URL_SECRET` is unset: generated once, by whichever process
 * comes first.
 */
export const blobUrlSecretKey = `${keyPrefix}blob-url-secret`;

// ---- accounts, keys and money ----

/**
 * Accounts, keys, reservations and usage as they live in Redis: the layout
 * both halves (and the admin API, the CLI and the billing scripts) read.
 * Money is integer micro-dollars (1 USD = 1,000,000) everywhere in Redis.
 *
 * The directory (who the accounts and keys are, what a key may do) carries
 * the hash tag `{acct}` (written `sy:{acct}:account:<id>` in full; shortened to `sy:` here).
 * No request touches it: each api caches what a key may do (dropped on
 * `accessChangedChannel`).
 *
 *   sy:account:<id>          hash  id, email, name, role, created, password (scrypt, optional),
 *                                  unlimited ('1': spends without a balance), disabled, deleted ('1'), playground_key,
 *                                  weight (1–100), tiers (the service tiers granted, comma list; '' = the default),
 *                                  cache_max_ttl (the response cache's cap, s; '' = none of its own, '0' = no caching)
 *   sy:accounts              zset  account id → created
 *   sy:account-emails        hash  lower-cased email → account id
 *   sy:key:<id>              hash  id, name, created, hash, hint, account, limit (micros, '' = none),
 *                                  rpm, tpm ('' = none), models (JSON array, '' = all), expires ('' = never),
 *                                  cache_ttl (default response-cache TTL, s; '' = none)
 *   sy:keyhash               hash  sha256(secret) → key id
 *   sy:keyids                set   key ids
 *   sy:account-keys:<id>     set   key ids of one account
 *   sy:session:<sha256(token)> hash account, csrf, created (ms), ends (ms) and id_token (signed in through a
 *                                  provider): a console session, TTL = its idle expiry
 *   sy:account-sessions:<id> set   session hashes of one account, to end them all at once
 *   sy:signin-fail:<email|ip> string sign-in attempts in the current window, counted before the password check (TTL =
 *   the window) sy:oidc-attempt:<sha256(state)> string an OpenID Connect sign-in under way (JSON), taken once by its
 *   callback (TTL) sy:record-loaded         string set once the hot state was loaded from the record (PostgreSQL), to
 *   the stamp of
 *                                  that record ('<record id> <system id> <database oid>'): missing after a flush, which
 *                                  makes the next start or first use load it again; another stamp makes a start reload
 *   sy:record-epoch          string the highest high-water mark of that record seen (a restored record's is behind it)
 *   sy:record-loading        string held while one process loads it (TTL)
 *   sy:usage-set-aside       stream usage entries left in the usage streams when Redis was loaded from another or a
 *                                  restored record: not that record's, kept (a month) for the operator, never written
 *
 * Money is spread over `billingBuckets` hash tags `{b<k>-<n>}` (written
 * `sy:{b}:` here), each on its own slot, evenly over a Cluster's slot range; an
 * account's bucket follows from its id. Everything one request's admission
 * and settlement touch lives in its account's bucket, so each is one script on
 * one slot, and different accounts bill on different primaries:
 *
 *   sy:{b}:bill:<account>    hash  id, unlimited ('1'), balance (micros), reserved (micros held by requests in flight),
 *                                  credits (the record's credits the balance counts) and credits_at (as of which ledger
 *                                  entry); per key: <key>.spent, <key>.reserved, <key>.used (unix s), <key>.rpm and
 *                                  <key>.tpm (GCRA theoretical arrival times, ms); per request in flight:
 *                                  r:<request> = '<key> <micros> <tokens> <tpm limit> <budgets> <key limit>', what
 *                                  admission holds for it (budgets: '<counter>=<micros>,…', the counters it held);
 *                                  per budget (shared/money/budgets.ts): b:t (the team's), b:k:<key>, b:m:<member> =
 *                                  its current counter '<budget>:<d|w|m><period start, unix s>', and per counter
 *                                  <counter>.spent, <counter>.reserved, <counter>.alerted (highest alert % sent); a
 *                                  past period's counter is deleted once nothing is held in it; <key>.alerted likewise
 *                                  for a key's lifetime limit
 *   sy:{b}:resv-deadlines    zset  '<account> <request>' → deadline (ms), to release reservations of lost jobs
 *   sy:{b}:settled:<request> string set once a request is settled (kept 1 min once its job completes, else until
 *                                  15 min past its deadline): settlement runs once
 *   sy:{b}:usage             stream one record per settled request, until the record's writer has committed it
 *   sy:{b}:alerts            stream one entry per alert threshold crossed (account, crossing '<counter or
 *   key>|<percent>|
 *                                  <limit>|<spent>'), added by the settlement that decided it in the same step; the
 *                                  record's alert writer moves each to the \`alerts\` table (storage/record/alerts.ts).
 *                                  Never trimmed: an alert is rare (a few per budget and period) and none may be lost
 *   sy:{b}:usage:dead        stream the records of that stream the record refused again and again, moved aside with
 *                                  where they came from and why: kept (never trimmed) for the operator to write again
 *
 * The record (PostgreSQL, storage/record/) is what these are rebuilt from: accounts, keys, the ledger and the usage
 * rows. A gateway that kept everything in Redis (before the record) kept the money fields in the directory's hashes,
 * ledgers in `sy:ledger:<id>`, usage in `sy:usage` and day totals in `sy:usage-day:*`: read once, to import them.
 */
export const accountKey = (id: string) => `${accountsPrefix}account:${id}`;
export const accountsIndexKey = `${accountsPrefix}accounts`;
export const accountEmailsKey = `${accountsPrefix}account-emails`;
/** Before the record: an account's ledger (read only to import it). */
export const ledgerKey = (accountId: string) => `${accountsPrefix}ledger:${accountId}`;
export const apiKeyRecordKey = (keyId: string) => `${accountsPrefix}key:${keyId}`;
export const apiKeyHashesKey = `${accountsPrefix}keyhash`;
export const apiKeyIdsKey = `${accountsPrefix}keyids`;
export const accountKeysKey = (accountId: string) => `${accountsPrefix}account-keys:${accountId}`;
/**
 * Before the record: the usage stream and day totals all accounts shared (read only to import them, and drained by the
 * writer).
 */
export const legacyUsageStreamKey = `${accountsPrefix}usage`;
export const usageDayKey = (day: string, accountId?: string) =>
  accountId === undefined ? `${accountsPrefix}usage-day:${day}` : `${accountsPrefix}usage-day:${day}:${accountId}`;
/** Named for the layout it marks loaded: a gateway that kept money in the directory's hashes loads the buckets anew. */
export const recordLoadedKey = `${accountsPrefix}record-loaded:buckets`;
export const recordLoadingKey = `${accountsPrefix}record-loading`;
/** Beside `recordLoadedKey` (one slot): the record's high-water mark as Redis last saw it. */
export const recordEpochKey = `${accountsPrefix}record-epoch`;
/** Usage entries of another record's timeline, taken out of the usage streams when Redis was loaded anew. */
export const usageSetAsideKey = `${accountsPrefix}usage-set-aside`;
/** How many hash tags money is spread over (a Cluster's primaries share them; see `bucketTag`). */
export const billingBuckets = 16;
const clusterSlots = 16_384;
/**
 * Bucket k's tag is the first `b<k>-<n>` whose slot lies in the k-th sixteenth of the slot range, so the buckets
 * spread over a Cluster's primaries as evenly as its slots do.
 */
const bucketTags = Array.from({ length: billingBuckets }, (_, k) => {
  for (let n = 0; ; n++) {
    const tag = `b${k}-${n}`;
    if (Math.floor(slotOf(tag) / (clusterSlots / billingBuckets)) === k) return tag;
  }
});
/**
 * The bucket of an account: the sixteenth of the slot range its own id hashes to (no table: any process computes it).
 */
export const billingBucket = (accountId: string): number =>
  Math.floor(slotOf(accountId) / (clusterSlots / billingBuckets));
const bucketPrefix = (bucket: number) => `${keyPrefix}{${bucketTags[bucket]}}:`;
export const billKey = (accountId: string) => `${bucketPrefix(billingBucket(accountId))}bill:${accountId}`;
export const settledKey = (accountId: string, requestId: string) =>
  `${bucketPrefix(billingBucket(accountId))}settled:${requestId}`;
export const reservationDeadlinesKey = (bucket: number) => `${bucketPrefix(bucket)}resv-deadlines`;
export const usageStreamKey = (bucket: number) => `${bucketPrefix(bucket)}usage`;
/** Every bucket's usage stream, and the one gateway-wide stream of a gateway before buckets (drained, then empty). */
export const usageStreamKeys: readonly string[] = [
  ...Array.from({ length: billingBuckets }, (_, k) => usageStreamKey(k)),
  legacyUsageStreamKey,
];
/** A bucket's stream of alert crossings, beside the bills whose settlements decide them (same slot). */
export const alertStreamKey = (bucket: number) => `${bucketPrefix(bucket)}alerts`;
export const alertStreamKeys: readonly string[] = Array.from({ length: billingBuckets }, (_, k) => alertStreamKey(k));
/**
 * A usage stream's dead letters: the entries the record refused again and again (text PostgreSQL cannot store, a
 * value out of its range), moved aside so they hold back nothing, and kept (never trimmed) for the operator to look
 * at and write again. Beside its stream, on the same slot, so the move is one transaction on a Cluster too.
 */
export const usageDeadLetterKey = (stream: string) => `${stream}:dead`;
/** A key's fields in its account's bill. */
export const keyBillField = (keyId: string, field: 'spent' | 'reserved' | 'used' | 'rpm' | 'tpm') =>
  `${keyId}.${field}`;
export const keyBillFields = (keyId: string) =>
  (['spent', 'reserved', 'used', 'rpm', 'tpm'] as const).map((field) => keyBillField(keyId, field));
/** A reservation's member in its bucket's deadlines. */
export const deadlineMember = (accountId: string, requestId: string) => `${accountId} ${requestId}`;

/**
 * Published with a key id when a key changes or is revoked, and with `account:<id>` when an account does: every api
 * drops what it cached.
 */
export const accessChangedChannel = `${keyPrefix}access-changed`;

/** Upstream MCP servers (shared/mcp/servers.ts): each one's last check, a field per server, written by a worker. */
export const mcpHealthKey = `${keyPrefix}mcp:health`;
/**
 * Set once a request's tool loop (workers/mcp/tool-loop.ts) made its first call: a run of the job after its worker died
 * is not run again.
 */
export const mcpLoopCalledKey = (requestId: string) => `${keyPrefix}mcp:loop-called:${requestId}`;
/**
 * Raised each time an admin adds, changes or removes an MCP server: every api and worker reads the servers again
 * (shared/mcp/registry.ts).
 */
export const mcpServersVersionKey = `${keyPrefix}mcp:servers-version`;
/** Held by the worker checking the MCP servers this interval, so one worker checks them, not each. */
export const mcpCheckLockKey = `${keyPrefix}mcp:check-lock`;
/**
 * An admin's "check it now" (a server's name): a worker checks that server at once (`mcpServerCheckLockKey` picks one).
 */
export const mcpCheckChannel = `${keyPrefix}mcp:check-now`;
/** Held by the worker checking one server at an admin's asking, for the check's time. */
export const mcpServerCheckLockKey = (server: string) => `${keyPrefix}mcp:check-lock:${server}`;
/** An MCP session (api/mcp/routes.ts): the key that opened it; calls in flight are found under it too. */
export const mcpSessionKey = (id: string) => `${keyPrefix}mcp:session:${id}`;
