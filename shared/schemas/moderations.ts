import { z } from 'zod';
import { countTextTokensAsync } from '../tokens.js';
import { modelSchema } from './common.js';

/*
 * `POST /v1/moderations` as the OpenAI spec writes it (`CreateModerationRequest`): `input` one text, a list of
 * texts (one result each), or a list of multi-modal parts (text and `image_url`: one result for them all);
 * `model` optional (`omni-moderation-latest`). The job carries the request with only the spec's fields, so a
 * vendor is sent nothing the client added. The categories a result names, and the input kinds each may be judged
 * on, are here too: the mock writes them, and the tests read them.
 */

/** The model a request that names none is served by, as OpenAI's own default. */
export const defaultModerationModel = 'omni-moderation-latest';

/**
 * The most inputs one request may carry (texts of a list, or parts): the gateway's bound, so one request stays
 * one short call; a backlog to classify goes through `/v1/batches`.
 */
export const maxModerationInputs = 32;

/** The most images one request may carry: what omni-moderation accepts (`too_many_images` past it). */
export const maxModerationImages = 1;

/** Every category of a result, in the order OpenAI's schema lists them. */
export const moderationCategories = [
  'hate',
  'hate/threatening',
  'harassment',
  'harassment/threatening',
  'illicit',
  'illicit/violent',
  'self-harm',
  'self-harm/intent',
  'self-harm/instructions',
  'sexual',
  'sexual/minors',
  'violence',
  'violence/graphic',
] as const;
export type ModerationCategory = (typeof moderationCategories)[number];

/** The categories judged on images as well as text (the spec's `category_applied_input_types` enums). */
export const imageJudgedCategories: ReadonlySet<ModerationCategory> = new Set([
  'self-harm',
  'self-harm/intent',
  'self-harm/instructions',
  'sexual',
  'violence',
  'violence/graphic',
]);

/** An image by URL, or a base64 `data:` URL: the vendor reads it, the gateway only checks its form. */
const imageUrl = z
  .string()
  .min(1)
  .refine(
    (url) => /^https?:\/\/[^\s]+$/i.test(url.slice(0, 2048)) || /^data:image\/[a-z0-9.+-]+;base64,/i.test(url),
    'must be an http(s) URL or a data:image/…;base64, URL',
  );

const textPart = z.object({ type: z.literal('text'), text: z.string() });
const imagePart = z.object({ type: z.literal('image_url'), image_url: z.object({ url: imageUrl }) });
const part = z.discriminatedUnion('type', [textPart, imagePart]);

export type ModerationPart = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };
export type ModerationInput = string | string[] | ModerationPart[];

const parts = z.array(part);

/**
 * `input` read by hand rather than as a union, so each refusal says what is wrong (missing, an empty or too long
 * list, a list of neither strings nor parts) where a union would say only that no form matched. A list's length is
 * checked first: a list far too long is refused at once, not read item by item.
 */
function readInput(value: unknown, ctx: z.RefinementCtx): ModerationInput {
  if (typeof value === 'string') return value;
  if (!Array.isArray(value)) {
    ctx.addIssue({ code: 'invalid_type', expected: 'string or array', input: value });
    return z.NEVER;
  }
  if (value.length === 0) {
    ctx.addIssue({ code: 'too_small', origin: 'array', minimum: 1, inclusive: true, input: value });
    return z.NEVER;
  }
  if (value.length > maxModerationInputs) {
    ctx.addIssue({ code: 'too_big', origin: 'array', maximum: maxModerationInputs, inclusive: true, input: value });
    return z.NEVER;
  }
  if (typeof value[0] === 'string') {
    const other = value.findIndex((item) => typeof item !== 'string');
    if (other < 0) return value as string[];
    ctx.addIssue({
      code: 'invalid_type',
      expected: 'string',
      input: value[other],
      path: [other],
      message: 'a list of texts holds only strings',
    });
    return z.NEVER;
  }
  const read = parts.safeParse(value, { reportInput: true });
  if (read.success) {
    // Each part rebuilt with the spec's fields alone.
    return read.data.map((item): ModerationPart =>
      item.type === 'text'
        ? { type: 'text', text: item.text }
        : { type: 'image_url', image_url: { url: item.image_url.url } },
    );
  }
  for (const issue of read.error.issues)
    ctx.addIssue({ ...issue, path: issue.path } as Parameters<typeof ctx.addIssue>[0]);
  return z.NEVER;
}

/** `CreateModerationRequest`: fields the spec does not name are left out of the job (and of the vendor's request). */
export const moderationRequestSchema = z
  .looseObject({
    model: modelSchema.default(defaultModerationModel),
    input: z.unknown().transform(readInput),
  })
  .transform(({ model, input }): ModerationRequest => ({ model, input }));

/** What a moderation job carries: the model as the client named it (or the default) and the input. */
export interface ModerationRequest {
  model: string;
  input: ModerationInput;
}

/** Whether the input is a list of multi-modal parts (one result for them all) rather than texts (one result each). */
export function isPartList(input: ModerationInput): input is ModerationPart[] {
  return Array.isArray(input) && input.length > 0 && typeof input[0] !== 'string';
}

/** The texts of an input, in order: what is counted, and what a text-only model reads. */
export function moderationTexts(input: ModerationInput): string[] {
  if (typeof input === 'string') return [input];
  if (!isPartList(input)) return input as string[];
  return input.flatMap((item) => (item.type === 'text' ? [item.text] : []));
}

/** The image URLs of an input. */
export function moderationImages(input: ModerationInput): string[] {
  return isPartList(input) ? input.flatMap((item) => (item.type === 'image_url' ? [item.image_url.url] : [])) : [];
}

/** How many results the answer has: one per text of a list, one for a single text or for all the parts together. */
export function moderationResultCount(input: ModerationInput): number {
  return Array.isArray(input) && !isPartList(input) ? input.length : 1;
}

/**
 * The input's tokens as the gateway counts them (its texts; images are not counted): what a moderation is logged
 * with when its vendor reports no usage, as OpenAI's moderations do not.
 */
export async function countModerationTokens(input: ModerationInput): Promise<number> {
  let total = 0;
  for (const text of moderationTexts(input)) total += await countTextTokensAsync(text);
  return total;
}
