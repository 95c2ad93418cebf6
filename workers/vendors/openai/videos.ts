import { FormData } from 'undici';
import { GatewayError, isGatewayError } from '../../../shared/errors.js';
import type { BlobRef, MediaContext, VideoResult } from '../types.js';
import type { VideoInput } from '../../../shared/schemas/media-inputs.js';
import { guardedGet, readBoundedBytes } from '../guarded-fetch.js';
import {
  joinUrl,
  malformedResponse,
  parseJsonObject,
  postJson,
  readBodyText,
  requireOk,
  vendorRequest,
  type VendorResponse,
} from '../http.js';
import { scrubSecrets } from '../vendor-errors.js';
import { sleep } from '../sleep.js';
import { openaiApi } from './api.js';
import { mapOpenAIError } from './map-openai-error.js';
import { readUploadPart, uploadFilename } from './transcriptions.js';

/** The fields of a `VideoResource` this adapter reads; the rest may change freely. */
interface OpenAIVideo {
  id: string;
  status: string;
  progress: number | null;
  error: { code: string | null; message: string | null } | null;
}

/** What a worker that restarts mid-job finds in the job's checkpoint. */
interface VideoCheckpoint extends Record<string, unknown> {
  openaiVideoId?: unknown;
}

/** Polls in a row that may fail transiently before the job gives up (and is retried, resuming the same video). */
const MAX_POLL_FAILURES = 5;
const FALLBACK_SIZE = '720x1280';
const FALLBACK_SECONDS = '4';
// Sora reports blocked output under codes like `moderation_blocked`; those are the prompt's fault, not ours.
const POLICY_CODE = /moderation|policy|safety|blocked/i;

/** Sora renders run up to a few dozen MB; this leaves room without letting a vendor fill the worker's memory. */
const MAX_CONTENT_BYTES = 256 * 1024 * 1024;
const POLL_TIMEOUT_MS = 60_000;
const CONTENT_TIMEOUT_MS = 600_000;

/**
 * A GET on the channel. The content route may redirect to a storage host:
 * `guardedGet` follows it, checking the address and leaving the key behind.
 */
function getOpenAI(
  path: string,
  ctx: MediaContext,
  options: { accept?: string; timeoutMs: number },
): Promise<VendorResponse> {
  return guardedGet(joinUrl(ctx.channel.baseUrl, path), ctx, {
    headers: options.accept === undefined ? {} : { accept: options.accept },
    credentials: openaiApi.headers(ctx.channel.apiKey),
    timeoutMs: options.timeoutMs,
  });
}

function readVideo(fields: Record<string, unknown>): OpenAIVideo {
  const { id, status, progress, error } = fields;
  if (typeof id !== 'string' || id === '' || typeof status !== 'string') throw malformedResponse();
  let failure: OpenAIVideo['error'] = null;
  if (typeof error === 'object' && error !== null) {
    const { code, message } = error as Record<string, unknown>;
    failure = { code: typeof code === 'string' ? code : null, message: typeof message === 'string' ? message : null };
  }
  const percent = typeof progress === 'number' && Number.isFinite(progress) ? progress : null;
  return { id, status, progress: percent, error: failure };
}

/** Catalog aliases (`sora-2-landscape`) route to `sora-2` with their own default size, so the alias's default wins. */
function resolveSize(input: VideoInput, ctx: MediaContext): string {
  if (input.size) return input.size;
  return typeof ctx.model.default_size === 'string' ? ctx.model.default_size : FALLBACK_SIZE;
}

async function createVideo(input: VideoInput, ctx: MediaContext): Promise<OpenAIVideo> {
  const fields = {
    model: ctx.upstreamModel,
    prompt: input.prompt,
    seconds: input.seconds || FALLBACK_SECONDS,
    size: resolveSize(input, ctx),
  };
  let body: string | FormData;
  if (input.input_reference === undefined) {
    body = JSON.stringify(fields);
  } else {
    // A reference image travels as a file part; JSON could only carry it as a URL.
    body = new FormData();
    for (const [name, value] of Object.entries(fields)) body.append(name, value);
    const reference: BlobRef = input.input_reference;
    body.append('input_reference', await readUploadPart(reference, ctx), uploadFilename(reference, 'reference'));
  }
  const { json } = await postJson(ctx, vendorRequest(openaiApi, ctx, openaiApi.paths.videos, body), mapOpenAIError);
  return readVideo(json);
}

async function retrieveVideo(id: string, ctx: MediaContext): Promise<OpenAIVideo> {
  const response = await getOpenAI(openaiApi.paths.video(id), ctx, {
    accept: 'application/json',
    timeoutMs: POLL_TIMEOUT_MS,
  });
  if (response.status === 404) {
    // The generic mapping would call this a missing model. The video is gone (expired or deleted
    // upstream); a retry would resume the same id from the checkpoint and find it gone again.
    await readBodyText(response, ctx).catch(() => '');
    throw new GatewayError(502, 'The upstream vendor no longer knows this video job.', {
      type: 'server_error',
      code: 'vendor_job_lost',
      retryable: false,
    });
  }
  await requireOk(response, ctx, mapOpenAIError);
  return readVideo(parseJsonObject(await readBodyText(response, ctx)));
}

/** One poll, riding out a few transient failures: a long render should not burn job attempts on network blips. */
async function pollVideo(id: string, ctx: MediaContext): Promise<OpenAIVideo> {
  for (let failures = 1; ; failures += 1) {
    try {
      return await retrieveVideo(id, ctx);
    } catch (error) {
      const transient = isGatewayError(error) && error.retryable && !ctx.signal.aborted;
      if (!transient || failures >= MAX_POLL_FAILURES) throw error;
      ctx.log.warn({ err: error, videoId: id, failures }, 'video poll failed; polling again');
      await sleep(Math.max(ctx.http.videoPollIntervalMs, error.retryAfterMs ?? 0), ctx.signal);
    }
  }
}

interface Download {
  bytes: Buffer;
  contentType: string | undefined;
}

async function downloadContent(id: string, variant: 'video' | 'thumbnail', ctx: MediaContext): Promise<Download> {
  const response = await getOpenAI(openaiApi.paths.videoContent(id, variant), ctx, { timeoutMs: CONTENT_TIMEOUT_MS });
  await requireOk(response, ctx, mapOpenAIError);
  const bytes = await readBoundedBytes(
    response,
    MAX_CONTENT_BYTES,
    ctx,
    () =>
      new GatewayError(502, `The generated ${variant} is larger than the gateway accepts.`, {
        type: 'server_error',
        code: 'vendor_bad_response',
      }),
  );
  const contentType = response.headers['content-type'];
  return { bytes, contentType: Array.isArray(contentType) ? contentType[0] : contentType };
}

function videoFailed(video: OpenAIVideo, ctx: MediaContext): GatewayError {
  const code = video.error?.code ?? null;
  const detail = video.error?.message ? scrubSecrets(video.error.message, [ctx.channel.apiKey]) : 'no reason given';
  if (code !== null && POLICY_CODE.test(code)) {
    return new GatewayError(400, detail, {
      type: 'invalid_request_error',
      code: 'content_policy_violation',
      param: 'prompt',
    });
  }
  // Not retried by the gateway: the vendor already spent a render on it and a failed render
  // usually fails again; the client decides whether another try is worth it.
  return new GatewayError(500, `Video generation failed upstream (${detail}). You can retry the request.`, {
    type: 'server_error',
    code: 'video_generation_failed',
    retryable: false,
    cause: { videoId: video.id, code },
  });
}

/**
 * Sora: create once, then poll until the render ends. The vendor's video id
 * is checkpointed before the first poll, so a worker that dies mid-render is
 * followed by one that polls the same video instead of paying for a second.
 */
export async function generateVideoWithOpenAI(input: VideoInput, ctx: MediaContext): Promise<VideoResult> {
  const saved = ctx.checkpoint.read<VideoCheckpoint>()?.openaiVideoId;
  let video: OpenAIVideo;
  if (typeof saved === 'string' && saved !== '') {
    ctx.log.info({ videoId: saved }, 'resuming upstream video job');
    video = await pollVideo(saved, ctx);
  } else {
    video = await createVideo(input, ctx);
    await ctx.checkpoint.write({ openaiVideoId: video.id });
  }

  let reported: number | undefined;
  while (video.status !== 'completed') {
    if (video.status === 'failed') throw videoFailed(video, ctx);
    const percent = video.progress === null ? undefined : Math.max(0, Math.min(100, Math.round(video.progress)));
    if (percent !== undefined && percent !== reported) {
      await ctx.progress(percent);
      reported = percent;
    }
    await sleep(ctx.http.videoPollIntervalMs, ctx.signal);
    video = await pollVideo(video.id, ctx);
  }
  if (reported !== 100) await ctx.progress(100);

  const content = await downloadContent(video.id, 'video', ctx);
  const folder = `videos/${ctx.requestId}`;
  const result: VideoResult = { video: await ctx.blobs.put(`${folder}/video.mp4`, content.bytes, 'video/mp4') };
  try {
    // The preview is a nicety: without it the client still has its video.
    const thumbnail = await downloadContent(video.id, 'thumbnail', ctx);
    const contentType = thumbnail.contentType ?? 'image/webp';
    const extension = contentType.includes('png') ? 'png' : contentType.includes('jpeg') ? 'jpg' : 'webp';
    result.thumbnail = await ctx.blobs.put(`${folder}/thumbnail.${extension}`, thumbnail.bytes, contentType);
  } catch (error) {
    if (ctx.signal.aborted) throw error;
    ctx.log.warn({ err: error, videoId: video.id }, 'video thumbnail unavailable');
  }
  return result;
}
