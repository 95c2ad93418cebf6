import type { Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config } from '../shared/config.js';
import { GatewayError } from '../shared/errors.js';
import { jobEventsChannel } from '../shared/redis-keys.js';
import { jobIdOf, type GatewayJobData, type GatewayJobResult } from '../shared/jobs.js';
import type { Protocol } from '../shared/vendor-definitions.js';
import { signBlobUrl } from '../storage/blob-urls.js';
import type { BlobStore } from '../storage/blob-store.js';
import type { ImageResult, MediaContext } from './vendors/types.js';
import type { EndpointRequest } from '../shared/endpoints.js';
import { adapterMethod } from './vendors/registry.js';
import { discardBody } from './vendors/http.js';
import { guardedGet, readBoundedBytes } from './vendors/guarded-fetch.js';
import type { CallContext } from './vendors/types.js';
import type { Meter } from './settlement.js';

export interface MediaDeps {
  config: Config;
  redis: Redis;
  blobs: BlobStore;
  urlSecret: string;
}

export interface MediaOutput {
  body: string;
}

/** Publishes a lifecycle event of an async job to every api process (for WebSocket watchers). */
export function publishJobEvent(redis: Redis, jobId: string, event: Record<string, unknown>): Promise<unknown> {
  return redis.publish(jobEventsChannel, `${jobId}\n${JSON.stringify({ id: jobId, ...event })}`);
}

/** Runs one media job: the vendor call, then the response body the synchronous call would return. */
export async function runMedia(
  job: Job<GatewayJobData, GatewayJobResult>,
  protocol: Protocol,
  request: EndpointRequest,
  base: CallContext,
  deps: MediaDeps,
  /** Frees the vendor slot once the vendor's part is done: rendering and storing need no slot. */
  vendorDone: () => Promise<void> = async () => undefined,
  /** Takes what was made, for billing. */
  produced?: Meter,
): Promise<MediaOutput> {
  const data = job.data;
  const ctx: MediaContext = {
    ...base,
    blobs: deps.blobs,
    async progress(percent) {
      const value = Math.max(0, Math.min(100, Math.round(percent)));
      await job.updateProgress(value);
      if (data.async)
        await publishJobEvent(deps.redis, jobIdOf(data), { type: 'progress', status: 'in_progress', progress: value });
    },
    checkpoint: {
      read: <T extends Record<string, unknown>>() => data.checkpoint as T | undefined,
      async write(state) {
        data.checkpoint = { ...state };
        await job.updateData(data);
      },
    },
  };
  const baseUrl = data.baseUrl ?? deps.config.publicBaseUrl ?? 'http://localhost:8080';
  switch (request.endpoint) {
    case 'images.generations': {
      const input = request.payload;
      const result = await adapterMethod(protocol, 'generateImages')(input, ctx);
      if (produced) produced.images = result.images.length;
      await vendorDone();
      return {
        body: await renderImages(
          result,
          input.response_format ?? base.model.default_response_format ?? 'b64_json',
          ctx,
          deps,
          baseUrl,
        ),
      };
    }
    case 'images.edits': {
      const input = request.payload;
      const result = await adapterMethod(protocol, 'editImages')(input, ctx);
      if (produced) produced.images = result.images.length;
      await vendorDone();
      return {
        body: await renderImages(
          result,
          input.response_format ?? base.model.default_response_format ?? 'b64_json',
          ctx,
          deps,
          baseUrl,
        ),
      };
    }
    case 'images.variations': {
      const input = request.payload;
      const result = await adapterMethod(protocol, 'varyImages')(input, ctx);
      if (produced) produced.images = result.images.length;
      await vendorDone();
      return {
        body: await renderImages(
          result,
          input.response_format ?? base.model.default_response_format ?? 'b64_json',
          ctx,
          deps,
          baseUrl,
        ),
      };
    }
    case 'audio.transcriptions':
    case 'audio.translations': {
      const result =
        request.endpoint === 'audio.transcriptions'
          ? await adapterMethod(protocol, 'transcribe')(request.payload, ctx)
          : await adapterMethod(protocol, 'translate')(request.payload, ctx);
      // A translation is billed as a transcription is: by the length of the audio heard.
      if (produced) produced.audioSeconds = transcribedSeconds(result.body, request.payload.file.size);
      await vendorDone();
      return { body: result.body };
    }
    case 'videos': {
      const result = await adapterMethod(protocol, 'generateVideo')(request.payload, ctx);
      if (produced) produced.videoSeconds = Number(request.payload.seconds);
      await vendorDone();
      return { body: JSON.stringify({ video: result.video, thumbnail: result.thumbnail ?? null }) };
    }
    default:
      throw new GatewayError(400, `${request.endpoint} is not a media endpoint.`);
  }
}

/** Assumed when a transcript does not say how long its audio was: 128 kbit/s, a common bitrate for speech uploads. */
const assumedAudioBytesPerSecond = 16_000;

/**
 * How long the transcribed (or translated) audio was, for billing: the vendor's own figure
 * (`usage.seconds`, or `duration` of verbose_json) when the answer has one,
 * else estimated from the upload's size.
 */
export function transcribedSeconds(body: string, uploadBytes: number | undefined): number {
  try {
    const fields = JSON.parse(body) as { duration?: unknown; usage?: { seconds?: unknown } };
    if (typeof fields.usage?.seconds === 'number') return fields.usage.seconds;
    if (typeof fields.duration === 'number') return fields.duration;
  } catch {
    // text, srt and vtt answers carry no figure
  }
  return Math.ceil((uploadBytes ?? 0) / assumedAudioBytesPerSecond);
}

/**
 * The ImagesResponse the client asked for: base64 in the body, or the
 * gateway's own signed URL to a stored copy (vendor URLs expire, and vendor
 * bytes have nowhere else to live).
 */
async function renderImages(
  result: ImageResult,
  format: 'url' | 'b64_json',
  ctx: MediaContext,
  deps: MediaDeps,
  baseUrl: string,
): Promise<string> {
  if (result.images.length === 0) {
    throw new GatewayError(
      500,
      'The image generation failed at the vendor. Retry the request, possibly with a changed prompt.',
      {
        code: 'server_error',
      },
    );
  }
  const data = await Promise.all(
    result.images.map(async (image, index) => {
      const bytes = image.bytes ?? (await download(image.url!, ctx));
      const item: Record<string, unknown> = {};
      if (format === 'b64_json') item.b64_json = bytes.toString('base64');
      else {
        const extension = (image.contentType ?? 'image/png').split('/')[1]?.replace('jpeg', 'jpg') ?? 'png';
        const ref = await deps.blobs.put(
          `images/${ctx.requestId}/${index}.${extension}`,
          bytes,
          image.contentType ?? 'image/png',
        );
        item.url = signBlobUrl(baseUrl, deps.urlSecret, ref.key, deps.config.blobUrlTtlSeconds);
      }
      if (image.revised_prompt) item.revised_prompt = image.revised_prompt;
      return item;
    }),
  );
  return JSON.stringify({
    created: Math.floor(Date.now() / 1000),
    data,
    ...(result.extra ?? {}),
    ...(result.usage ? { usage: result.usage } : {}),
  });
}

const maxDownloadBytes = 64 * 1024 * 1024;
/** One image, redirects included; the job's own deadline may be far longer. */
const downloadTimeoutMs = 120_000;

/**
 * The URL came from the vendor's answer: it is fetched only where `guardedGet` allows, and without the channel's key.
 */
async function download(url: string, ctx: MediaContext): Promise<Buffer> {
  const response = await guardedGet(url, ctx, { timeoutMs: downloadTimeoutMs });
  if (response.status !== 200) {
    discardBody(response);
    throw new GatewayError(502, `Could not fetch the generated image from the vendor (HTTP ${response.status}).`, {
      type: 'server_error',
      code: 'vendor_error',
      retryable: true,
    });
  }
  return readBoundedBytes(
    response,
    maxDownloadBytes,
    ctx,
    () =>
      new GatewayError(502, 'The generated image is larger than the gateway accepts.', {
        type: 'server_error',
        code: 'vendor_bad_response',
      }),
  );
}
