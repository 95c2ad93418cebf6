/**
 * The mock's video generation: a render that takes MOCK_VIDEO_MS (default
 * 1500, read per job), reporting progress on the way, then stores a real MP4
 * of the requested size and length. Like a vendor job it survives a worker
 * restart: the start time is checkpointed first, and a resumed job finishes
 * the same render instead of starting it over.
 *
 * Markers in the prompt:
 *   [mock:error:<status>]  fail with that status before any work.
 *   [mock:fail]            the render fails halfway, as a vendor's can: 500.
 *   [mock:slow:<ms>]       the render takes <ms> instead of MOCK_VIDEO_MS.
 */
import { GatewayError, invalidRequest } from '../../../shared/errors.js';
import type { MediaContext, VideoResult } from '../types.js';
import type { VideoInput } from '../../../shared/schemas/media-inputs.js';
import { readMockMarkers, throwIfErrorMarker } from './markers.js';
import { buildMp4 } from './mp4.js';
import { sleep } from '../sleep.js';

const PROGRESS_STEPS = 10;
const FALLBACK_SIZE = '720x1280';
const FALLBACK_SECONDS = '4';
/** Bounds what one mock job may allocate. */
const MAX_SIDE = 4096;
const MAX_SECONDS = 60;
const failMarker = '[mock:fail]';

/** What a worker that restarts mid-job finds in the job's checkpoint. */
interface MockVideoCheckpoint extends Record<string, unknown> {
  mockVideoStartedAt?: unknown;
}

export interface VideoShape {
  width: number;
  height: number;
  seconds: number;
}

/** The size and length to render; catalog aliases (`sora-2-landscape`) bring their own default size. */
export function resolveVideoShape(input: VideoInput, ctx: MediaContext): VideoShape {
  const defaultSize = typeof ctx.model.default_size === 'string' ? ctx.model.default_size : FALLBACK_SIZE;
  const size = input.size || defaultSize;
  const match = /^(\d{1,4})x(\d{1,4})$/.exec(size);
  const width = Number(match?.[1]);
  const height = Number(match?.[2]);
  // H.264 in 4:2:0 crops in 2-pixel steps, so odd sides cannot be encoded exactly.
  if (!match || width < 16 || height < 16 || width > MAX_SIDE || height > MAX_SIDE || width % 2 || height % 2) {
    throw invalidRequest(
      `Invalid size '${size}': use WIDTHxHEIGHT with even sides from 16 to ${MAX_SIDE}.`,
      'size',
      'invalid_value',
    );
  }
  const secondsText = input.seconds || FALLBACK_SECONDS;
  const seconds = Number(secondsText);
  if (!Number.isFinite(seconds) || seconds <= 0 || seconds > MAX_SECONDS) {
    throw invalidRequest(
      `Invalid seconds '${secondsText}': use a length from 1 to ${MAX_SECONDS}.`,
      'seconds',
      'invalid_value',
    );
  }
  return { width, height, seconds };
}

function renderFailed(): GatewayError {
  return new GatewayError(
    500,
    'Video generation failed upstream (the mock render failed on purpose: [mock:fail]). You can retry the request.',
    { type: 'server_error', code: 'video_generation_failed', retryable: false },
  );
}

/** Reports progress from the checkpointed start until the render time has passed; a cancel ends it at once. */
async function render(
  startedAt: number,
  renderMs: number,
  fails: boolean,
  ctx: MediaContext,
  reportedAlready = -1,
): Promise<void> {
  const stepMs = Math.max(1, renderMs / PROGRESS_STEPS);
  let reported = reportedAlready;
  for (;;) {
    const elapsed = Date.now() - startedAt;
    const percent = renderMs <= 0 ? 100 : Math.min(100, Math.floor((elapsed * 100) / renderMs));
    if (fails && percent >= 50) throw renderFailed();
    if (percent >= 100) return;
    if (percent > reported) {
      await ctx.progress(percent);
      reported = percent;
    }
    await sleep(Math.min(stepMs, renderMs - elapsed), ctx.signal);
  }
}

export async function generateMockVideo(input: VideoInput, ctx: MediaContext): Promise<VideoResult> {
  ctx.signal.throwIfAborted();
  const markers = readMockMarkers([input.prompt]);
  throwIfErrorMarker(markers);
  const shape = resolveVideoShape(input, ctx);

  const saved = ctx.checkpoint.read<MockVideoCheckpoint>()?.mockVideoStartedAt;
  let startedAt: number;
  let reported = -1;
  if (typeof saved === 'number' && Number.isFinite(saved)) {
    startedAt = saved;
    ctx.log.info({ startedAt }, 'resuming mock video render');
  } else {
    startedAt = Date.now();
    await ctx.checkpoint.write({ mockVideoStartedAt: startedAt });
    // A fresh render starts at 0 %, however long the checkpoint write took.
    await ctx.progress(0);
    reported = 0;
  }

  await render(startedAt, markers.slowMs ?? ctx.http.mock.videoMs, input.prompt.includes(failMarker), ctx, reported);
  await ctx.progress(100);
  const video = await ctx.blobs.put(`videos/${ctx.requestId}/video.mp4`, buildMp4(shape), 'video/mp4');
  return { video };
}
