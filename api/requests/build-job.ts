import type { Config } from '../../shared/config.js';
import { endpoints, type Endpoint } from '../../shared/endpoints.js';
import type { AsyncJobRecord, GatewayJobData } from '../../shared/jobs.js';
import type { VideoInput } from '../../shared/schemas/media-inputs.js';
import type { AnswerMode, JobPlan } from './enqueue.js';
import type { Accepted } from './endpoint-handlers.js';

/** Who asks and where the answer goes: what the job takes from the request beyond the handler's payload. */
export interface JobOrigin {
  /** The request's id (its `x-request-id`): what its money and its request-log row are keyed by. */
  requestId: string;
  /** The api instance's reply channel. */
  replyTo: string;
  keyId: string;
  /** The account that pays, when the key is billed. */
  accountId?: string;
  /** The catalog id the model resolved to. */
  model: string;
  /** How the client reached the gateway, for links to stored images. */
  baseUrl: string;
  /** The request's trace context, when tracing is on. */
  trace?: Record<string, string>;
  /** The capped vendor's lane its job waits in (`shared/scheduling`); absent: the capability's shared lane. */
  lane?: string;
}

/**
 * A job's data, and its payload's JSON when that is kept apart (past INLINE_PAYLOAD_BYTES): a request's job
 * (`buildJob`) and each of a Message Batch's (api/batches/job-entry.ts, `mode` 'batch': no reply, its batch's
 * deadline).
 */
export function jobData<E extends Endpoint>(
  name: E,
  accepted: Accepted<E>,
  origin: JobOrigin,
  mode: AnswerMode | 'batch',
  deadline: number,
  config: Config,
): { data: GatewayJobData; storedPayload?: string } {
  const data: GatewayJobData = {
    requestId: origin.requestId,
    jobId: accepted.jobId ?? origin.requestId,
    replyTo: origin.replyTo,
    keyId: origin.keyId,
    endpoint: name,
    model: origin.model,
    stream: accepted.stream ?? false,
    deadline,
    ...(origin.accountId ? { accountId: origin.accountId } : {}),
    // Stored images are linked from the answer: X-Forwarded-Proto/Host count only with TRUST_PROXY; PUBLIC_BASE_URL
    // overrides both. An async speech job's audio is linked the same way.
    ...(name.startsWith('images.') || name === 'audio.speech'
      ? { baseUrl: config.publicBaseUrl ?? origin.baseUrl }
      : {}),
    ...(origin.trace ? { trace: origin.trace } : {}),
    ...(mode === 'async' ? { async: true } : {}),
    ...(mode === 'background' ? { background: true } : {}),
    ...(accepted.serviceTier ? { serviceTier: accepted.serviceTier } : {}),
  };
  // Measured as the text it would be kept as: past INLINE_PAYLOAD_BYTES it is stored apart (this text, not made again)
  // and the job stays small. The body's own length does not bound it (a Responses payload carries its stored history,
  // a multipart one only its uploads' keys); an inline payload is serialised again inside BullMQ's add, at most
  // 64 KiB of it: about 35 µs at that size, 0.3 µs for a short chat, against about 1 ms of CPU per request.
  const serialized = JSON.stringify(accepted.payload);
  if (serialized.length > config.inlinePayloadBytes) return { data, storedPayload: serialized };
  data.payload = accepted.payload;
  return { data };
}

export function buildJob<E extends Endpoint>(
  name: E,
  accepted: Accepted<E>,
  origin: JobOrigin,
  mode: AnswerMode,
  config: Config,
): JobPlan {
  const row = endpoints[name];
  const id = accepted.jobId ?? origin.requestId;
  // Flex takes only capacity nothing else wants and may wait long: its own deadline replaces its queue's.
  const deadline = Date.now() + (accepted.serviceTier === 'flex' ? config.flexDeadlineMs : row.deadlineMs(config));
  const { data, storedPayload } = jobData(name, accepted, origin, mode, deadline, config);
  const stored = storedPayload !== undefined ? { storedPayload } : {};
  const retries = { jobId: id, attempts: config.jobAttempts, backoff: { type: 'gateway' } };
  if (mode === 'async') {
    const ttl = config.asyncResultTtlSeconds;
    const asyncRecord: AsyncJobRecord = {
      queue: row.queue,
      ...(origin.lane ? { lane: origin.lane } : {}),
      keyId: origin.keyId,
      endpoint: name,
      model: origin.model,
      created: Math.floor(Date.now() / 1000),
      ...(accepted.contentType ? { contentType: accepted.contentType } : {}),
      ...(name === 'videos' ? { request: accepted.payload as VideoInput } : {}),
    };
    const options = { ...retries, removeOnComplete: { age: ttl }, removeOnFail: { age: ttl } };
    return {
      id,
      queue: row.queue,
      ...(origin.lane ? { lane: origin.lane } : {}),
      mode,
      data,
      payload: accepted.payload,
      options,
      deadline,
      asyncRecord,
      ...stored,
    };
  }
  // A job answered through pub/sub (or run in the background): kept briefly once finished, as its row says.
  const options = {
    ...retries,
    removeOnComplete: { age: row.keep.completedSeconds, count: row.keep.completedCount },
    removeOnFail: { age: row.keep.failedSeconds, count: row.keep.failedCount },
  };
  return {
    id,
    queue: row.queue,
    ...(origin.lane ? { lane: origin.lane } : {}),
    mode,
    data,
    payload: accepted.payload,
    options,
    deadline,
    ...stored,
  };
}
