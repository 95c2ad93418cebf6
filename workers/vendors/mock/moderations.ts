import { createHash } from 'node:crypto';
import {
  imageJudgedCategories,
  isPartList,
  moderationCategories,
  moderationTexts,
  type ModerationCategory,
  type ModerationRequest,
} from '../../../shared/schemas/moderations.js';
import { countTextTokensAsync } from '../../../shared/tokens.js';
import type { CallContext, ModerationAnswer } from '../types.js';
import { readMockMarkers, throwIfErrorMarker } from './markers.js';
import { sleep } from '../sleep.js';

/*
 * The mock's moderation (`mock-moderation`, and any moderation model when the mock stands in): OpenAI's answer
 * shape with scores that are a function of the input alone, so the same text always scores the same. Every score
 * is low (under 0.02) unless the text carries a flag marker:
 *
 *   [mock:flag:<category>]  that category (one of OpenAI's thirteen, e.g. `violence` or `self-harm/intent`) is
 *                           flagged with a score of 0.9 or more; several markers flag several categories.
 *
 * `[mock:error:<status>]` and `[mock:slow:<ms>]` work as on every mock call (index.ts). An image is judged by its
 * URL (low scores, for the categories OpenAI judges on images); the usage is the texts' tokens.
 */

const flagMarker = /\[mock:flag:([a-z/-]{1,40})\]/g;
const known: ReadonlySet<string> = new Set(moderationCategories);

/** The categories a text's markers flag. */
function flaggedBy(text: string): Set<ModerationCategory> {
  const flagged = new Set<ModerationCategory>();
  if (!text.includes('[mock:flag:')) return flagged;
  for (const match of text.matchAll(flagMarker)) if (known.has(match[1]!)) flagged.add(match[1] as ModerationCategory);
  return flagged;
}

/** A score in [0, 1) for one category, from a digest of what is judged: the same input always scores the same. */
function spread(seed: Buffer, category: ModerationCategory): number {
  const bytes = createHash('sha256').update(seed).update(category).digest();
  return bytes.readUInt32BE(0) / 2 ** 32;
}

/** One input judged: its texts (one for a text of a list, all the parts' texts together) and its images. */
function judge(texts: readonly string[], images: readonly string[], textInput: boolean) {
  const text = texts.join('\n');
  const flagged = flaggedBy(text);
  const textSeed = createHash('sha256').update('text\u0000').update(text).digest();
  const imageSeeds = images.map((url) => createHash('sha256').update('image\u0000').update(url).digest());
  const categories: Record<string, boolean> = {};
  const scores: Record<string, number> = {};
  const applied: Record<string, string[]> = {};
  for (const category of moderationCategories) {
    const onImages = imageSeeds.length > 0 && imageJudgedCategories.has(category);
    let score = textInput ? spread(textSeed, category) * 0.02 : 0;
    if (onImages) for (const seed of imageSeeds) score = Math.max(score, spread(seed, category) * 0.02);
    if (flagged.has(category)) score = 0.9 + spread(textSeed, category) * 0.0999;
    categories[category] = flagged.has(category);
    // Rounded as a float of OpenAI's answers reads: many digits, but the same ones every time.
    scores[category] = Number(score.toPrecision(12));
    applied[category] = [...(textInput ? ['text'] : []), ...(onImages ? ['image'] : [])];
  }
  return { flagged: flagged.size > 0, categories, category_scores: scores, category_applied_input_types: applied };
}

export async function moderateMock(request: ModerationRequest, ctx: CallContext): Promise<ModerationAnswer> {
  ctx.signal.throwIfAborted();
  const texts = moderationTexts(request.input);
  const markers = readMockMarkers(texts);
  throwIfErrorMarker(markers);
  if (markers.slowMs !== undefined) await sleep(markers.slowMs, ctx.signal);
  const { input } = request;
  const results = isPartList(input)
    ? [
        judge(
          texts,
          input.flatMap((part) => (part.type === 'image_url' ? [part.image_url.url] : [])),
          input.some((part) => part.type === 'text'),
        ),
      ]
    : (typeof input === 'string' ? [input] : input).map((text) => judge([text], [], true));
  let tokens = 0;
  for (const text of texts) tokens += await countTextTokensAsync(text);
  ctx.signal.throwIfAborted();
  // The id is the request's: a retried job answers with the same one.
  const id = `modr-${createHash('sha256').update(`moderation\u0000${ctx.requestId}`).digest('hex').slice(0, 32)}`;
  return {
    body: JSON.stringify({ id, model: ctx.upstreamModel, results }),
    id,
    usage: { prompt_tokens: tokens, completion_tokens: 0, total_tokens: tokens },
  };
}
