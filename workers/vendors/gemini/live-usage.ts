/**
 * Gemini Live's `usageMetadata` in the usage OpenAI's `response.done` carries, which the relay bills from.
 *
 * Gemini reports usage per turn, in its own message, not as a running total for the session: every report is
 * added, once, to what the next `response.done` says (`LiveUsageMeter`). So a report that comes after its response
 * ended (a cancelled one, a function call's) is billed with the next response rather than lost.
 *
 * Counts by modality come from the details (`promptTokensDetails`, `responseTokensDetails`, `cacheTokensDetails`);
 * tokens a total has that its details do not name are counted as text (Gemini's details do not always add up).
 * Images and video in are OpenAI's `image_tokens`. Thinking tokens are text out, as Google bills them; tool-use
 * prompt tokens are input. As in OpenAI's usage, cached tokens are part of the input, not beside it.
 */

type Json = Record<string, unknown>;

interface Modalities {
  text: number;
  audio: number;
  image: number;
}

export interface LiveUsage {
  input: Modalities;
  cached: Modalities;
  output: Modalities;
}

const count = (value: unknown) =>
  typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;

/** A total split by its details; what the details leave out is text. */
function byModality(total: number, details: unknown): Modalities {
  const out: Modalities = { text: 0, audio: 0, image: 0 };
  if (Array.isArray(details)) {
    for (const detail of details) {
      if (typeof detail !== 'object' || detail === null) continue;
      const { modality, tokenCount } = detail as Json;
      const tokens = count(tokenCount);
      if (modality === 'AUDIO') out.audio += tokens;
      else if (modality === 'IMAGE' || modality === 'VIDEO') out.image += tokens;
      else out.text += tokens;
    }
  }
  const named = out.text + out.audio + out.image;
  if (total > named) out.text += total - named;
  return out;
}

const add = (a: Modalities, b: Modalities): Modalities => ({
  text: a.text + b.text,
  audio: a.audio + b.audio,
  image: a.image + b.image,
});
const empty = (): LiveUsage => ({
  input: { text: 0, audio: 0, image: 0 },
  cached: { text: 0, audio: 0, image: 0 },
  output: { text: 0, audio: 0, image: 0 },
});

/** One `usageMetadata` report, read. */
export function readLiveUsage(metadata: unknown): LiveUsage {
  if (typeof metadata !== 'object' || metadata === null) return empty();
  const m = metadata as Json;
  const prompt = byModality(count(m.promptTokenCount), m.promptTokensDetails);
  const toolUse = byModality(count(m.toolUsePromptTokenCount), m.toolUsePromptTokensDetails);
  const cached = byModality(count(m.cachedContentTokenCount), m.cacheTokensDetails);
  const response = byModality(count(m.responseTokenCount), m.responseTokensDetails);
  return {
    input: add(prompt, toolUse),
    cached,
    output: { ...response, text: response.text + count(m.thoughtsTokenCount) },
  };
}

/** OpenAI's `response.usage` for what was metered. */
export function toOpenAIUsage(usage: LiveUsage): Json {
  const input = usage.input.text + usage.input.audio + usage.input.image;
  const output = usage.output.text + usage.output.audio + usage.output.image;
  // Cached tokens are a part of the input: never more of a modality than came in.
  const cachedText = Math.min(usage.cached.text + usage.cached.image, usage.input.text + usage.input.image);
  const cachedAudio = Math.min(usage.cached.audio, usage.input.audio);
  return {
    total_tokens: input + output,
    input_tokens: input,
    output_tokens: output,
    input_token_details: {
      text_tokens: usage.input.text,
      audio_tokens: usage.input.audio,
      image_tokens: usage.input.image,
      cached_tokens: cachedText + cachedAudio,
      cached_tokens_details: { text_tokens: cachedText, audio_tokens: cachedAudio },
    },
    output_token_details: { text_tokens: usage.output.text + usage.output.image, audio_tokens: usage.output.audio },
  };
}

/** What Gemini reported since the last `response.done` took it. */
export class LiveUsageMeter {
  private pending = empty();

  record(metadata: unknown): void {
    const usage = readLiveUsage(metadata);
    this.pending = {
      input: add(this.pending.input, usage.input),
      cached: add(this.pending.cached, usage.cached),
      output: add(this.pending.output, usage.output),
    };
  }

  /** Everything not yet billed, in OpenAI's shape; the meter starts again from zero. */
  take(): Json {
    const usage = toOpenAIUsage(this.pending);
    this.pending = empty();
    return usage;
  }

  get empty(): boolean {
    const { input, output } = this.pending;
    return input.text + input.audio + input.image + output.text + output.audio + output.image === 0;
  }
}
