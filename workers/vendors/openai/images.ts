import { parseJsonObject, readBodyText, readCappedText, type VendorResponse } from '../http.js';
import type { ImageGenerationInput, ImageResult, MediaContext } from '../types.js';
import type { ImageEditInput, ImageVariationInput } from '../../../shared/schemas/media-inputs.js';
import { postOpenAI } from './api.js';
import { buildOpenAIImageEditForm, buildOpenAIImageGenerationBody, buildOpenAIImageVariationForm } from './build-openai-image-request.js';
import { mapOpenAIImageError } from './map-openai-image-error.js';
import { postOpenAIForm } from './post-openai-form.js';
import { readOpenAIImages } from './read-openai-images.js';

/** Reads the answer of either image endpoint: both return `ImagesResponse`. */
async function readImagesResponse(response: VendorResponse, ctx: MediaContext): Promise<ImageResult> {
  const secrets = [ctx.channel.apiKey];
  if (response.status < 200 || response.status >= 300) {
    const bodyText = await readCappedText(response, ctx);
    const error = mapOpenAIImageError({ status: response.status, headers: response.headers, bodyText }, secrets);
    ctx.log.debug({ upstreamStatus: response.status, err: error }, 'upstream vendor refused the image request');
    throw error;
  }
  return readOpenAIImages(parseJsonObject(await readBodyText(response, ctx)), secrets);
}

export async function generateOpenAIImages(input: ImageGenerationInput, ctx: MediaContext): Promise<ImageResult> {
  const response = await postOpenAI('/images/generations', buildOpenAIImageGenerationBody(input, ctx), ctx, 'application/json');
  return readImagesResponse(response, ctx);
}

export async function editOpenAIImages(input: ImageEditInput, ctx: MediaContext): Promise<ImageResult> {
  const form = await buildOpenAIImageEditForm(input, ctx);
  return readImagesResponse(await postOpenAIForm('/images/edits', form, ctx), ctx);
}


export async function varyOpenAIImages(input: ImageVariationInput, ctx: MediaContext): Promise<ImageResult> {
  const form = await buildOpenAIImageVariationForm(input, ctx);
  return readImagesResponse(await postOpenAIForm('/images/variations', form, ctx), ctx);
}
