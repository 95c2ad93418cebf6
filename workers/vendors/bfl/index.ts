import { malformedResponse, postJson, vendorRequest } from '../http.js';
import type { ImageGenerationInput, ImageResult, VendorAdapter, MediaContext } from '../types.js';
import type { ImageEditInput } from '../../../shared/schemas/media-inputs.js';
import { bflApi } from './api.js';
import {
  buildBflEditRequest,
  buildBflRequest,
  type BflOutputFormat,
  type BflTaskRequest,
  type BflUpload,
} from './build-bfl-request.js';
import { convertOpenAIMaskToBfl } from './convert-openai-mask.js';
import { mapBflError } from './map-bfl-error.js';
import { waitForBflTasks, type BflTask } from './poll-bfl-task.js';

export { BFL_DEFAULT_BASE_URL, bflPollUrl } from './api.js';
export { buildBflEditRequest, buildBflRequest, convertSizeToAspectRatio } from './build-bfl-request.js';
export type { BflEditRequest, BflTaskRequest, BflUpload } from './build-bfl-request.js';
export { convertOpenAIMaskToBfl } from './convert-openai-mask.js';
export { mapBflError, readBflError } from './map-bfl-error.js';
export { normaliseBflProgress, readBflPollAnswer } from './poll-bfl-task.js';
export type { BflTask } from './poll-bfl-task.js';

/** The checkpoint key holding the submitted tasks, `[{id, polling_url}]`, in submission order. */
export const BFL_CHECKPOINT_KEY = 'bflTasks';

/** The tasks a previous attempt recorded; entries that are not `{id, polling_url?}` are ignored. */
function readRecordedTasks(state: Record<string, unknown> | undefined): BflTask[] {
  const recorded = state?.[BFL_CHECKPOINT_KEY];
  if (!Array.isArray(recorded)) return [];
  const tasks: BflTask[] = [];
  for (const entry of recorded as unknown[]) {
    const { id, polling_url: pollingUrl } = (entry ?? {}) as { id?: unknown; polling_url?: unknown };
    if (typeof id !== 'string' || id === '') continue;
    tasks.push(typeof pollingUrl === 'string' ? { id, polling_url: pollingUrl } : { id });
  }
  return tasks;
}

/**
 * Creates one task. The body comes serialised: an edit's carries the uploads
 * as base64, and `n` tasks send the same one. Older hosts answer without
 * `polling_url`; polling then uses `get_result` on the channel.
 */
async function submitBflTask(endpoint: string, body: string, ctx: MediaContext): Promise<BflTask> {
  const { json: payload } = await postJson(
    ctx,
    vendorRequest(bflApi, ctx, bflApi.paths.submit(endpoint), body),
    mapBflError,
  );
  if (typeof payload.id !== 'string' || payload.id === '') throw malformedResponse(payload);
  return typeof payload.polling_url === 'string'
    ? { id: payload.id, polling_url: payload.polling_url }
    : { id: payload.id };
}

/**
 * One task per image, each recorded in the job's checkpoint the moment BFL
 * accepts it and before any poll, so a worker that dies mid-job leaves the
 * next one a task to poll, not one to pay for twice. Tasks a previous attempt
 * recorded are resumed; only the missing ones (an attempt that died between
 * submissions) are submitted, and `prepareBody` runs only then. A death
 * between BFL's answer and the checkpoint write cannot be closed from here:
 * that one task would be submitted again.
 */
async function runBflTasks(
  count: number,
  outputFormat: BflOutputFormat,
  prepareBody: () => Promise<BflTaskRequest>,
  ctx: MediaContext,
): Promise<ImageResult> {
  const state = ctx.checkpoint.read<Record<string, unknown>>();
  const tasks = readRecordedTasks(state).slice(0, count);
  if (tasks.length > 0)
    ctx.log.info({ reqId: ctx.requestId, tasks: tasks.length }, 'resuming BFL tasks from the checkpoint');
  if (tasks.length < count) {
    const body = JSON.stringify(await prepareBody());
    while (tasks.length < count) {
      tasks.push(await submitBflTask(ctx.upstreamModel, body, ctx));
      await ctx.checkpoint.write({ ...state, [BFL_CHECKPOINT_KEY]: tasks.map((task) => ({ ...task })) });
    }
  }
  const images = await waitForBflTasks(tasks, `image/${outputFormat}`, ctx);
  return { images };
}

/** OpenAI `/images/generations` on BFL. */
export async function generateBflImages(input: ImageGenerationInput, ctx: MediaContext): Promise<ImageResult> {
  // Built (and so validated) even when resuming: the same input gives the same body, and a bad one fails before any
  // poll.
  const body = buildBflRequest(input, ctx.upstreamModel);
  return runBflTasks(input.n ?? 1, body.output_format, async () => body, ctx);
}

/** The body with its uploads as base64 (no `data:` prefix), an OpenAI mask turned into BFL's form. */
async function attachBflUploads(
  body: BflTaskRequest,
  uploads: readonly BflUpload[],
  ctx: MediaContext,
): Promise<BflTaskRequest> {
  const complete: BflTaskRequest = { ...body };
  for (const upload of uploads) {
    const bytes = await ctx.blobs.get(upload.ref.key);
    ctx.signal.throwIfAborted();
    complete[upload.field] = (upload.role === 'mask' ? convertOpenAIMaskToBfl(bytes) : bytes).toString('base64');
  }
  return complete;
}

/**
 * OpenAI `/images/edits` on BFL: Kontext (reference images, no mask) and
 * Fill (one image and a mask), with the same tasks, checkpoint and polling
 * as generation. The request is checked before anything is read; the uploads
 * are read only when a task is still to be submitted, so a resumed job
 * needs nothing but its checkpoint.
 */
export async function editBflImages(input: ImageEditInput, ctx: MediaContext): Promise<ImageResult> {
  const { body, uploads } = buildBflEditRequest(input, ctx.upstreamModel);
  return runBflTasks(input.n ?? 1, body.output_format, () => attachBflUploads(body, uploads, ctx), ctx);
}

/** Black Forest Labs (FLUX): asynchronous image tasks, submitted then polled. */
export const bflAdapter: VendorAdapter = {
  generateImages: generateBflImages,
  editImages: editBflImages,
};
