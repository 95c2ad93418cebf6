/**
 * Google's `GenerateContentResponse` (the Gemini API's answer), and the fold of
 * a stream of them into the one body a plain `generateContent` answers.
 *
 * Every chunk of Gemini's stream is a whole `GenerateContentResponse` that
 * holds only the new parts, so a plain answer is the chunks laid end to end:
 * each candidate's parts in order (neighbouring text pieces of the same kind
 * joined, as Gemini's own plain answer has them), its last finish reason, and
 * the last word on everything else (usage, model version, response id). The
 * same fold serves a model Gemini serves (its own chunks, relayed) and every
 * other vendor (the chunks `gemini-encoder.ts` wrote), so a plain client gets
 * what a streaming one would have put together.
 */

type Json = Record<string, unknown>;

/** One chunk (or the whole plain answer): the fields the gateway writes; fields it does not know are kept as sent. */
export interface GenerateContentResponse {
  candidates?: GeminiCandidate[];
  promptFeedback?: Json;
  usageMetadata?: GeminiUsageMetadata;
  modelVersion?: string;
  responseId?: string;
  [field: string]: unknown;
}

export interface GeminiCandidate {
  content?: { role?: string; parts?: Json[] };
  finishReason?: string;
  index?: number;
  [field: string]: unknown;
}

/**
 * Gemini's counts: `candidatesTokenCount` leaves the thoughts out (`thoughtsTokenCount`); `promptTokenCount` includes
 * the cached.
 */
export interface GeminiUsageMetadata {
  promptTokenCount?: number;
  candidatesTokenCount?: number;
  totalTokenCount?: number;
  cachedContentTokenCount?: number;
  thoughtsTokenCount?: number;
  [field: string]: unknown;
}

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Fields a text part may have and still be joined with its neighbour: the text, its kind, and one signature. */
const joinableFields = new Set(['text', 'thought', 'thoughtSignature']);

function joinable(part: Json): boolean {
  if (typeof part.text !== 'string') return false;
  for (const key of Object.keys(part)) if (!joinableFields.has(key)) return false;
  return true;
}

/**
 * A candidate being put together: its parts, with text pieces kept apart until the body is built (no quadratic joins).
 */
interface FoldedCandidate {
  fields: Json;
  role: string | undefined;
  /** Parts in order; a joinable text part keeps its pieces in `pieces` until built. */
  parts: Array<{ part: Json; pieces?: string[] }>;
  /** Citations arrive chunk by chunk: each chunk's sources are the ones of its own text. */
  citations: unknown[] | undefined;
}

/**
 * Folds `GenerateContentResponse` chunks into one. Chunks are read as Google
 * documents them and anything else (a field newer than this fold, a part of a
 * kind it does not know) is carried over as sent, never thrown on: the chunks
 * reach a streaming client anyway, and a fold that gave up would lose the
 * whole answer over one field.
 */
export class GeminiChunkFold {
  private readonly top: Json = {};
  private readonly candidates = new Map<number, FoldedCandidate>();

  /** One chunk, parsed. It is not kept or changed: the caller may relay it. */
  add(chunk: unknown): void {
    if (!isObject(chunk)) return;
    for (const [key, value] of Object.entries(chunk)) {
      if (key === 'candidates') {
        if (Array.isArray(value)) value.forEach((candidate, position) => this.addCandidate(candidate, position));
      } else if (value !== undefined && value !== null) {
        // Running totals (usageMetadata), the same id on every chunk, promptFeedback once: the last word wins.
        this.top[key] = value;
      }
    }
  }

  /** The plain answer the chunks so far describe, in Gemini's field order. */
  response(): GenerateContentResponse {
    const built: GenerateContentResponse = {};
    if (this.candidates.size > 0 || !isObject(this.top.promptFeedback)) {
      built.candidates = [...this.candidates.entries()]
        .sort((a, b) => a[0] - b[0])
        .map(([index, candidate]) => buildCandidate(index, candidate));
    }
    const { usageMetadata, modelVersion, responseId, ...rest } = this.top;
    Object.assign(built, rest);
    if (usageMetadata !== undefined) built.usageMetadata = usageMetadata as GeminiUsageMetadata;
    if (modelVersion !== undefined) built.modelVersion = modelVersion as string;
    if (responseId !== undefined) built.responseId = responseId as string;
    return built;
  }

  private addCandidate(value: unknown, position: number): void {
    if (!isObject(value)) return;
    const index =
      typeof value.index === 'number' && Number.isInteger(value.index) && value.index >= 0 ? value.index : position;
    let candidate = this.candidates.get(index);
    if (candidate === undefined) {
      candidate = { fields: {}, role: undefined, parts: [], citations: undefined };
      this.candidates.set(index, candidate);
    }
    for (const [key, field] of Object.entries(value)) {
      if (key === 'index' || field === undefined || field === null) continue;
      if (key === 'content') {
        if (isObject(field)) addContent(candidate, field);
      } else if (key === 'citationMetadata' && isObject(field) && Array.isArray(field.citationSources)) {
        (candidate.citations ??= []).push(...field.citationSources);
        candidate.fields.citationMetadata = { ...field };
      } else {
        candidate.fields[key] = field;
      }
    }
  }
}

function addContent(candidate: FoldedCandidate, content: Json): void {
  if (typeof content.role === 'string') candidate.role = content.role;
  if (!Array.isArray(content.parts)) return;
  for (const part of content.parts) {
    if (!isObject(part)) continue;
    const last = candidate.parts.at(-1);
    if (joinable(part) && last?.pieces !== undefined && sameKind(last.part, part)) {
      if (part.text !== '') last.pieces.push(part.text as string);
      // Gemini signs the end of a run of text (an empty text part carrying the signature): it stays on the joined part.
      if (part.thoughtSignature !== undefined) last.part.thoughtSignature = part.thoughtSignature;
      continue;
    }
    // Copied: the caller relays the chunk it parsed.
    if (joinable(part))
      candidate.parts.push({ part: { ...part }, pieces: part.text === '' ? [] : [part.text as string] });
    else candidate.parts.push({ part });
  }
}

/** Two text parts that are one run: the same kind (thought or answer), the earlier one not signed yet. */
function sameKind(earlier: Json, later: Json): boolean {
  return (earlier.thought === true) === (later.thought === true) && earlier.thoughtSignature === undefined;
}

function buildCandidate(index: number, candidate: FoldedCandidate): GeminiCandidate {
  const parts: Json[] = [];
  for (const entry of candidate.parts) {
    if (entry.pieces === undefined) {
      parts.push(entry.part);
      continue;
    }
    const text = entry.pieces.join('');
    // Joined once: later chunks add to the joined text.
    entry.pieces = text === '' ? [] : [text];
    // An empty text part says nothing unless it carries a signature (or is all the answer has).
    if (text === '' && entry.part.thoughtSignature === undefined) continue;
    parts.push({ ...entry.part, text });
  }
  const built: GeminiCandidate = {
    content: { role: candidate.role ?? 'model', ...(parts.length > 0 ? { parts } : {}) },
  };
  const { finishReason, ...rest } = candidate.fields;
  if (finishReason !== undefined) built.finishReason = finishReason as string;
  Object.assign(built, rest);
  if (candidate.citations !== undefined)
    built.citationMetadata = {
      ...(candidate.fields.citationMetadata as Json),
      citationSources: candidate.citations.slice(),
    };
  built.index = index;
  return built;
}
