import type { BlobRef } from '../../shared/blobs.js';
import type { ImageGenerationRequest } from '../../shared/schemas/images.js';
import type { ImageEditInput, TranscriptionInput, VideoInput } from '../../shared/schemas/media-inputs.js';
import type { BlobStore } from '../../storage/blob-store.js';
import type { CallContext } from './types.js';

export type { BlobRef };

/**
 * What a media call gets beyond a chat call: the blob store, a way to report
 * progress, and a checkpoint that survives a worker restart, so a vendor task
 * already submitted is resumed (polled) by the next worker, never submitted twice.
 */
export interface MediaContext extends CallContext {
  blobs: BlobStore;
  /** 0–100; stored on the job and published to its watchers. */
  progress(percent: number): Promise<void>;
  checkpoint: {
    read<T extends Record<string, unknown>>(): T | undefined;
    write(state: Record<string, unknown>): Promise<void>;
  };
}

/** One generated image: the bytes, or a vendor URL the gateway downloads (vendor URLs expire). */
export interface GeneratedImage {
  bytes?: Buffer;
  url?: string;
  contentType?: string;
  revised_prompt?: string;
}

export interface ImageResult {
  images: GeneratedImage[];
  /** GPT-image style `usage`, passed to the client as the vendor gave it. */
  usage?: Record<string, unknown>;
  /** Top-level fields GPT image models return (`background`, `output_format`, `size`, `quality`). */
  extra?: Record<string, unknown>;
}

export type ImageGenerationInput = ImageGenerationRequest;

/** The exact body the client gets, in the format it asked for. */
export interface TranscriptionResult {
  body: string;
  contentType: string;
}

export interface VideoResult {
  video: BlobRef;
  thumbnail?: BlobRef;
}

/** Media capabilities of a vendor protocol; a protocol implements those its vendor has. */
export interface MediaAdapter {
  generateImages?(input: ImageGenerationInput, ctx: MediaContext): Promise<ImageResult>;
  editImages?(input: ImageEditInput, ctx: MediaContext): Promise<ImageResult>;
  transcribe?(input: TranscriptionInput, ctx: MediaContext): Promise<TranscriptionResult>;
  generateVideo?(input: VideoInput, ctx: MediaContext): Promise<VideoResult>;
}
