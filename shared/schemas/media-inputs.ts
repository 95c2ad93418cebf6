import type { BlobRef } from '../blobs.js';
import type { ImageEditFields } from './images.js';

/**
 * What the api puts in a media job after it stored the uploads: the
 * validated text fields, and references to the files in the blob store.
 */
export interface ImageEditInput extends ImageEditFields {
  /** The uploaded images, in order (`image` or `image[]` parts). */
  images: BlobRef[];
  mask?: BlobRef;
}

export interface TranscriptionInput {
  file: BlobRef;
  language?: string;
  prompt?: string;
  response_format: 'json' | 'text' | 'srt' | 'verbose_json' | 'vtt';
  temperature?: number;
  timestamp_granularities?: Array<'word' | 'segment'>;
}

export interface VideoInput {
  prompt: string;
  seconds: string;
  size: string;
  input_reference?: BlobRef;
}
