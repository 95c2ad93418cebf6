import { setTimeout as sleep } from 'node:timers/promises';
import { GatewayError } from '../../../shared/errors.js';
import { guardedGet, readBoundedBytes } from '../guarded-fetch.js';
import {
  malformedResponse,
  parseJsonObject,
  readBodyText,
  readCappedText,
  requireOk,
  type VendorResponse,
} from '../http.js';
import type { GeneratedImage, MediaContext } from '../types.js';
import type { CallContext } from '../types.js';
import { bflApi, bflPollUrl, isBflRegionalUrl } from './api.js';
import { bflModerationError, bflTaskFailedError, bflTaskLostError, mapBflError } from './map-bfl-error.js';

/** A submitted task, exactly as recorded in the job's checkpoint. */
export interface BflTask {
  id: string;
  polling_url?: string;
}

export type BflPollState =
  /** `progress` is 0–99 when the vendor gave one: a task is not done until it is `Ready`. */
  | { kind: 'pending'; progress: number | undefined }
  | { kind: 'ready'; sample: string }
  | { kind: 'moderated'; status: string; details: unknown }
  | { kind: 'failed'; status: string; details: unknown }
  | { kind: 'not_found' };

/** A freshly generated image is a few MB at most (4 MP PNG); far more means something is wrong. */
const MAX_SAMPLE_BYTES = 64 * 1024 * 1024;

/**
 * Consecutive `Task not found` answers tolerated before a task counts as lost:
 * right after a submit, the polling host may not know the task yet.
 */
const NOT_FOUND_LIMIT = 3;

/** BFL documents 0–1; some answers have been seen on a 0–100 scale. Anything above 1 is read as a percentage. */
export function normaliseBflProgress(value: unknown): number | undefined {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) return undefined;
  const percent = value <= 1 ? value * 100 : value;
  return Math.min(99, Math.floor(percent));
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Reads one poll answer. The Vercel SDK also accepts `state` for `status`; so does this. */
export function readBflPollAnswer(payload: Record<string, unknown>): BflPollState {
  const status =
    typeof payload.status === 'string' ? payload.status : typeof payload.state === 'string' ? payload.state : undefined;
  switch (status) {
    case undefined:
      throw malformedResponse(payload);
    case 'Ready': {
      const sample = isObject(payload.result) ? payload.result.sample : undefined;
      if (typeof sample !== 'string' || !/^https?:\/\//i.test(sample)) throw malformedResponse(payload);
      return { kind: 'ready', sample };
    }
    case 'Error':
    case 'Failed':
      return { kind: 'failed', status, details: payload.details };
    case 'Content Moderated':
    case 'Request Moderated':
      return { kind: 'moderated', status, details: payload.details };
    case 'Task not found':
      return { kind: 'not_found' };
    default:
      // `Pending`, and any queueing state BFL may add: keep polling; the job's deadline bounds the wait.
      return { kind: 'pending', progress: normaliseBflProgress(payload.progress) };
  }
}

/** A poll is a small JSON answer: far less than the image downloads get. */
const POLL_TIMEOUT_MS = 60_000;
const SAMPLE_TIMEOUT_MS = 120_000;

/** One poll of a task's state; `pollUrl` comes from `bflPollUrl`. */
function getBflResult(pollUrl: string, ctx: CallContext): Promise<VendorResponse> {
  let regional: string[] = [];
  try {
    const url = new URL(pollUrl);
    if (isBflRegionalUrl(ctx.channel.baseUrl, url)) regional = [url.origin];
  } catch {
    // guardedGet refuses it.
  }
  return guardedGet(pollUrl, ctx, {
    headers: { accept: 'application/json' },
    credentials: bflApi.headers(ctx.channel.apiKey),
    credentialOrigins: regional,
    timeoutMs: POLL_TIMEOUT_MS,
  });
}

/** One `GET` of the task's state. A 404 whose body says `Task not found` is that state, not a routing error. */
export async function pollBflTask(task: BflTask, ctx: CallContext): Promise<BflPollState> {
  const response = await getBflResult(bflPollUrl(ctx.channel.baseUrl, task), ctx);
  if (response.status !== 404) {
    await requireOk(response, ctx, mapBflError);
    return readBflPollAnswer(parseJsonObject(await readBodyText(response, ctx)));
  }
  const bodyText = await readCappedText(response, ctx);
  try {
    const state = readBflPollAnswer(parseJsonObject(bodyText));
    if (state.kind === 'not_found') return state;
  } catch {
    // Not a task state: mapped below like any other 404.
  }
  throw mapBflError({ status: response.status, headers: response.headers, bodyText }, [ctx.channel.apiKey]);
}

const sampleTooLarge = () =>
  new GatewayError(502, 'The generated image is larger than the gateway accepts.', {
    type: 'server_error',
    code: 'vendor_bad_response',
  });

/**
 * Downloads a finished image at once: the sample URL is signed and expires
 * (about 10 minutes). An expired or refused link is not retried: every retry
 * would poll the same task and get the same dead link.
 */
export async function downloadBflSample(
  sampleUrl: string,
  fallbackType: string,
  ctx: CallContext,
): Promise<GeneratedImage> {
  // The sample URL is pre-signed (and may be a CDN host), so it gets no key.
  const response = await guardedGet(sampleUrl, ctx, { headers: { accept: 'image/*' }, timeoutMs: SAMPLE_TIMEOUT_MS });
  if ([401, 403, 404, 410].includes(response.status)) {
    await readCappedText(response, ctx, 1024);
    throw new GatewayError(
      502,
      'The generated image expired at the vendor before it could be downloaded. Please retry the request.',
      {
        type: 'server_error',
        code: 'vendor_result_expired',
        retryable: false,
        cause: { status: response.status },
      },
    );
  }
  await requireOk(response, ctx, mapBflError);
  const bytes = await readBoundedBytes(response, MAX_SAMPLE_BYTES, ctx, sampleTooLarge);
  if (bytes.length === 0) throw malformedResponse();
  const header = response.headers['content-type'];
  const declaredType = (Array.isArray(header) ? header[0] : header)?.split(';')[0]?.trim().toLowerCase();
  return { bytes, contentType: declaredType?.startsWith('image/') ? declaredType : fallbackType };
}

/** Waits `ms`, or throws the abort reason the moment the signal fires (client gone, deadline). */
async function pause(ms: number, signal: AbortSignal): Promise<void> {
  try {
    await sleep(ms, undefined, { signal });
  } catch (error) {
    throw signal.reason ?? error;
  }
}

/**
 * Polls every task, one round at a time, until all are `Ready`, downloading
 * each image as soon as its task is done. Progress is the mean over the
 * tasks, reported only when it grows. The first terminal failure ends the
 * call (BFL has no way to cancel the other tasks). Only `ctx.signal` bounds
 * the wait: the job's deadline and the client leaving both fire it.
 */
export async function waitForBflTasks(
  tasks: readonly BflTask[],
  fallbackType: string,
  ctx: MediaContext,
): Promise<GeneratedImage[]> {
  const images: Array<GeneratedImage | undefined> = tasks.map(() => undefined);
  const progress = tasks.map(() => 0);
  const notFound = tasks.map(() => 0);
  let reported = -1;
  for (;;) {
    for (const [index, task] of tasks.entries()) {
      if (images[index] !== undefined) continue;
      const state = await pollBflTask(task, ctx);
      if (state.kind === 'moderated') throw bflModerationError(state.status, state.details, [ctx.channel.apiKey]);
      if (state.kind === 'failed') throw bflTaskFailedError(state.status, state.details);
      if (state.kind === 'not_found') {
        notFound[index] = notFound[index]! + 1;
        if (notFound[index]! >= NOT_FOUND_LIMIT) throw bflTaskLostError(task.id);
        continue;
      }
      notFound[index] = 0;
      if (state.kind === 'pending') {
        if (state.progress !== undefined) progress[index] = Math.max(progress[index]!, state.progress);
        continue;
      }
      images[index] = await downloadBflSample(state.sample, fallbackType, ctx);
      progress[index] = 100;
    }
    if (images.every((image) => image !== undefined)) return images as GeneratedImage[];
    const percent = Math.floor(progress.reduce((sum, value) => sum + value, 0) / tasks.length);
    if (percent > reported) {
      reported = percent;
      await ctx.progress(percent);
    }
    await pause(ctx.http.bflPollIntervalMs, ctx.signal);
  }
}
