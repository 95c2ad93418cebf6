/**
 * Image answers for the strict fake Gemini (`fake-gemini.ts`). That fake
 * already checks the key header and the request shape before it consults its
 * default handler, so this module plugs in there (`setDefault`) and adds only
 * what image models check on top: `responseModalities` and `imageConfig`.
 * Requests to non-image models fall through to the fake's text answers.
 * `fake.reset()` drops the handler: install again after a reset.
 */
import type { FakeGemini, FakeGeminiResponse, RecordedRequest } from './fake-gemini.js';
import { geminiError } from './fake-gemini.js';
import { createFakePng } from './fake-bfl.js';

export const FAKE_GEMINI_IMAGE = createFakePng([200, 40, 40]);
/** A different picture, sent as a thought (a draft) before the final one on request. */
export const FAKE_GEMINI_DRAFT = createFakePng([10, 10, 10]);
export const FAKE_GEMINI_IMAGE_USAGE = { promptTokenCount: 7, candidatesTokenCount: 1290, totalTokenCount: 1297 };

const ASPECT_RATIOS = new Set(['1:1', '2:3', '3:2', '3:4', '4:3', '4:5', '5:4', '9:16', '16:9', '21:9']);
const IMAGE_SIZES = new Set(['1K', '2K', '4K']);

/** How the next image call is answered. Default: `{kind: 'image'}`. */
export type GeminiImageOutcome =
  | { kind: 'image'; mimeType?: string; text?: string; withDraft?: boolean }
  /** The prompt itself refused: `promptFeedback.blockReason`, no candidates. */
  | { kind: 'blocked'; blockReason?: string }
  /** A candidate without an image, ending with `finishReason` (e.g. `IMAGE_SAFETY`, `STOP` with only words). */
  | { kind: 'no_image'; finishReason: string; text?: string };

export interface FakeGeminiImages {
  /** Image calls answered (refusals included). */
  readonly calls: number;
  script(...outcomes: GeminiImageOutcome[]): void;
}

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const refuse = (message: string): FakeGeminiResponse => ({
  status: 400,
  json: geminiError(400, 'INVALID_ARGUMENT', message),
});

/** The image-specific checks; undefined when the request is acceptable. */
function checkImageRequest(model: string, body: Json): FakeGeminiResponse | undefined {
  const config = isObject(body.generationConfig) ? body.generationConfig : {};
  const modalities = config.responseModalities;
  if (
    !Array.isArray(modalities) ||
    !modalities.includes('IMAGE') ||
    modalities.some((value) => value !== 'TEXT' && value !== 'IMAGE')
  ) {
    return refuse('Model does not support the requested response modalities: text');
  }
  // The 2.0 preview answers only with text and image together.
  if (model.startsWith('gemini-2.0') && !modalities.includes('TEXT'))
    return refuse('The requested combination of response modalities is not supported by the model.');
  const imageConfig = config.imageConfig;
  if (imageConfig !== undefined) {
    if (model.startsWith('gemini-2.0')) return refuse('Image config is not supported for this model.');
    if (!isObject(imageConfig)) return refuse("Invalid value at 'generation_config.image_config'");
    for (const key of Object.keys(imageConfig)) {
      if (key !== 'aspectRatio' && key !== 'imageSize')
        return refuse(
          `Invalid JSON payload received. Unknown name "${key}" at 'generation_config.image_config': Cannot find ` +
            `field.`,
        );
    }
    if (imageConfig.aspectRatio !== undefined && !ASPECT_RATIOS.has(imageConfig.aspectRatio as string)) {
      return refuse(`Unsupported aspect ratio: ${String(imageConfig.aspectRatio)}`);
    }
    if (imageConfig.imageSize !== undefined) {
      if (!model.startsWith('gemini-3')) return refuse('Image size is not supported for this model.');
      if (!IMAGE_SIZES.has(imageConfig.imageSize as string))
        return refuse(`Unsupported image size: ${String(imageConfig.imageSize)}`);
    }
  }
  const contents = body.contents as Json[];
  const last = contents[contents.length - 1];
  const hasText =
    last?.role === 'user' &&
    Array.isArray(last.parts) &&
    last.parts.some((part) => isObject(part) && typeof part.text === 'string');
  return hasText ? undefined : refuse('An image request needs a text prompt in the last user turn.');
}

function answer(model: string, outcome: GeminiImageOutcome): FakeGeminiResponse {
  const envelope = { modelVersion: model, responseId: `fake-image-${Date.now().toString(36)}` };
  if (outcome.kind === 'blocked') {
    return {
      json: {
        promptFeedback: { blockReason: outcome.blockReason ?? 'PROHIBITED_CONTENT' },
        usageMetadata: { promptTokenCount: 7, totalTokenCount: 7 },
        ...envelope,
      },
    };
  }
  if (outcome.kind === 'no_image') {
    const parts = outcome.text === undefined ? undefined : [{ text: outcome.text }];
    const content = parts === undefined ? {} : { content: { role: 'model', parts } };
    return {
      json: {
        candidates: [{ ...content, finishReason: outcome.finishReason, index: 0 }],
        usageMetadata: { promptTokenCount: 7, totalTokenCount: 7 },
        ...envelope,
      },
    };
  }
  const parts: Json[] = [];
  if (outcome.withDraft)
    parts.push({ inlineData: { mimeType: 'image/png', data: FAKE_GEMINI_DRAFT.toString('base64') }, thought: true });
  parts.push({ text: outcome.text ?? 'Here is the picture you asked for.' });
  parts.push({ inlineData: { mimeType: outcome.mimeType ?? 'image/png', data: FAKE_GEMINI_IMAGE.toString('base64') } });
  return {
    json: {
      candidates: [{ content: { role: 'model', parts }, finishReason: 'STOP', index: 0 }],
      usageMetadata: FAKE_GEMINI_IMAGE_USAGE,
      ...envelope,
    },
  };
}

/** Makes `fake` answer `generateContent` on `*image*` models with images, after checking image settings. */
export function installGeminiImages(fake: FakeGemini): FakeGeminiImages {
  const outcomes: GeminiImageOutcome[] = [];
  let calls = 0;
  fake.setDefault((request: RecordedRequest) => {
    const route = /^\/v1beta\/models\/([^/:?]+):generateContent$/.exec(request.path);
    if (route === null || !route[1]!.includes('image') || !isObject(request.body)) return undefined;
    calls += 1;
    return checkImageRequest(route[1]!, request.body) ?? answer(route[1]!, outcomes.shift() ?? { kind: 'image' });
  });
  return {
    get calls() {
      return calls;
    },
    script(...next) {
      outcomes.push(...next);
    },
  };
}
