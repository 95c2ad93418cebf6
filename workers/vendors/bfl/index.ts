import { malformedResponse, parseJsonObject, readBodyText } from '../http.js';
import type { ImageGenerationInput, ImageResult, MediaAdapter, MediaContext } from '../media-types.js';
import { postBflTask } from './api.js';
import { buildBflRequest, type BflTaskRequest } from './build-bfl-request.js';
import { readBflErrorResponse } from './map-bfl-error.js';
import { waitForBflTasks, type BflTask } from './poll-bfl-task.js';

export { BFL_DEFAULT_BASE_URL, bflPollUrl } from './api.js';
export { buildBflRequest, convertSizeToAspectRatio } from './build-bfl-request.js';
export type { BflTaskRequest } from './build-bfl-request.js';
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

/** Creates one task. Older hosts answer without `polling_url`; polling then uses `get_result` on the channel. */
async function submitBflTask(endpoint: string, body: BflTaskRequest, ctx: MediaContext): Promise<BflTask> {
  const response = await postBflTask(endpoint, JSON.stringify(body), ctx);
  if (response.status < 200 || response.status >= 300) throw await readBflErrorResponse(response, ctx);
  const payload = parseJsonObject(await readBodyText(response, ctx));
  if (typeof payload.id !== 'string' || payload.id === '') throw malformedResponse(payload);
  return typeof payload.polling_url === 'string' ? { id: payload.id, polling_url: payload.polling_url } : { id: payload.id };
}

/**
 * OpenAI `/images/generations` on BFL: one task per image, each recorded in
 * the job's checkpoint the moment BFL accepts it and before any poll, so a
 * worker that dies mid-job leaves the next one a task to poll, not one to pay
 * for twice. Tasks a previous attempt recorded are resumed; only the missing
 * ones (an attempt that died between submissions) are submitted. A death
 * between BFL's answer and the checkpoint write cannot be closed from here:
 * that one task would be submitted again.
 */
export async function generateBflImages(input: ImageGenerationInput, ctx: MediaContext): Promise<ImageResult> {
  // Built (and so validated) even when resuming: the same input gives the same body, and a bad one fails before any poll.
  const body = buildBflRequest(input, ctx.upstreamModel);
  const count = input.n ?? 1;
  const state = ctx.checkpoint.read<Record<string, unknown>>();
  const tasks = readRecordedTasks(state).slice(0, count);
  if (tasks.length > 0) ctx.log.info({ reqId: ctx.requestId, tasks: tasks.length }, 'resuming BFL tasks from the checkpoint');
  while (tasks.length < count) {
    tasks.push(await submitBflTask(ctx.upstreamModel, body, ctx));
    await ctx.checkpoint.write({ ...state, [BFL_CHECKPOINT_KEY]: tasks.map((task) => ({ ...task })) });
  }
  const images = await waitForBflTasks(tasks, `image/${body.output_format}`, ctx);
  return { images };
}

/** Black Forest Labs (FLUX): asynchronous image tasks, submitted then polled. */
export const bflImages: MediaAdapter = {
  generateImages: generateBflImages,
};
