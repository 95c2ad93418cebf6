import type { FormData } from 'undici';
import { postJson, vendorRequest } from '../http.js';
import type { ImageGenerationInput, ImageResult, MediaContext } from '../types.js';
import type { ImageEditInput, ImageVariationInput } from '../../../shared/schemas/media-inputs.js';
import { openaiApi } from './api.js';
import {
  buildOpenAIImageEditForm,
  buildOpenAIImageGenerationBody,
  buildOpenAIImageVariationForm,
} from './build-openai-image-request.js';
import { mapOpenAIImageError } from './map-openai-image-error.js';
import { readOpenAIImages } from './read-openai-images.js';

/** Calls either image endpoint: both return `ImagesResponse`, and refuse with the image errors. */
async function callImages(path: string, body: string | FormData, ctx: MediaContext): Promise<ImageResult> {
  const { json } = await postJson(ctx, vendorRequest(openaiApi, ctx, path, body), mapOpenAIImageError);
  return readOpenAIImages(json, [ctx.channel.apiKey]);
}

export async function generateOpenAIImages(input: ImageGenerationInput, ctx: MediaContext): Promise<ImageResult> {
  return callImages(openaiApi.paths.imageGenerations, buildOpenAIImageGenerationBody(input, ctx), ctx);
}

export async function editOpenAIImages(input: ImageEditInput, ctx: MediaContext): Promise<ImageResult> {
  return callImages(openaiApi.paths.imageEdits, await buildOpenAIImageEditForm(input, ctx), ctx);
}

export async function varyOpenAIImages(input: ImageVariationInput, ctx: MediaContext): Promise<ImageResult> {
  return callImages(openaiApi.paths.imageVariations, await buildOpenAIImageVariationForm(input, ctx), ctx);
}
