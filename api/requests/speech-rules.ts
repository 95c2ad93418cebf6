import type { CatalogModel } from '../../shared/catalog.js';
import { invalidRequest } from '../../shared/errors.js';
import { speechContentTypes, speechFacts, type SpeechJob, type SpeechRequest } from '../../shared/schemas/speech.js';
import { countTextTokensAsync } from '../../shared/tokens.js';

/*
 * The checks of `POST /v1/audio/speech` that need the model (what its schema cannot know): the options the model
 * takes (`instructions` and `stream_format: "sse"` are not for tts-1 and tts-1-hd, `speed` not for Gemini's), the
 * formats it can be given, the voices it knows, its input limit in tokens; then the job and how it is answered:
 * the audio's own bytes, OpenAI's `speech.audio.*` events, or (`Prefer: respond-async`) a job whose audio is kept.
 */

/** `Prefer: respond-async` (RFC 7240), read as the route reads it (`endpoint-route.ts`, which imports this file). */
const prefersAsync = (prefer: string) =>
  prefer.split(/[,;]/).some((token) => token.trim().toLowerCase() === 'respond-async');

const unsupported = (message: string, param: string) => invalidRequest(message, param, 'unsupported_value');

/** A voice name as the model knows it (its catalog spelling), or a 400 naming the voices it knows. */
function knownVoice(name: string, model: CatalogModel, voices: readonly string[]): string {
  const lower = name.toLowerCase();
  const found = voices.find((voice) => voice.toLowerCase() === lower);
  if (found !== undefined) return found;
  throw unsupported(
    `Unknown voice '${name.slice(0, 64)}' for \`${model.id}\`. Supported voices: ${voices.join(', ')}.`,
    'voice',
  );
}

/** What the handler accepts (`Accepted<'audio.speech'>` of `endpoint-handlers.ts`, which imports this file). */
export interface AcceptedSpeech {
  payload: SpeechJob;
  stream: boolean;
  contentType?: string;
  dialect?: 'audio';
  promptTokens: number;
}

export async function checkSpeechRequest(
  fields: SpeechRequest,
  model: CatalogModel,
  prefer: string,
): Promise<AcceptedSpeech> {
  const facts = speechFacts(model);
  const instructions =
    fields.instructions === undefined || fields.instructions === '' ? undefined : fields.instructions;
  if (instructions !== undefined && !facts.options.has('instructions')) {
    throw unsupported(
      `\`${model.id}\` does not take instructions (tts-1 and tts-1-hd speak the text as it is).`,
      'instructions',
    );
  }
  if (fields.stream_format === 'sse' && !facts.options.has('sse')) {
    throw unsupported(`stream_format 'sse' is not supported by \`${model.id}\`; use 'audio'.`, 'stream_format');
  }
  // Speed 1 is every model's own pace: said or not, the same request (and the same cached answer).
  const speed = fields.speed === undefined || fields.speed === 1 ? undefined : fields.speed;
  if (speed !== undefined && !facts.options.has('speed'))
    throw unsupported(`\`${model.id}\` speaks at one speed: speed must be 1.`, 'speed');
  if (!facts.formats.includes(fields.response_format)) {
    throw unsupported(
      `response_format '${fields.response_format}' is not supported by \`${model.id}\`. Supported formats: ${facts.formats.join(', ')}.`,
      'response_format',
    );
  }
  let voice: SpeechJob['voice'];
  if (typeof fields.voice === 'string')
    voice = facts.voices ? knownVoice(fields.voice, model, facts.voices) : fields.voice;
  else if (facts.options.has('custom_voice')) voice = { id: fields.voice.id };
  else throw unsupported(`\`${model.id}\` has no custom voices: name one of its voices.`, 'voice');

  const async = prefersAsync(prefer);
  // An async job's audio is kept whole and fetched by its link: there is no stream of events to hand over later.
  if (async && fields.stream_format === 'sse')
    throw invalidRequest(
      "stream_format 'sse' cannot be answered asynchronously (Prefer: respond-async).",
      'stream_format',
    );

  const promptTokens =
    (await countTextTokensAsync(fields.input)) +
    (instructions === undefined ? 0 : await countTextTokensAsync(instructions));
  if (model.context_window > 0 && promptTokens > model.context_window) {
    throw invalidRequest(
      `\`${model.id}\` reads at most ${model.context_window} tokens of input and instructions; this request has ` +
        `${promptTokens}.`,
      'input',
      'context_length_exceeded',
    );
  }
  const payload: SpeechJob = {
    input: fields.input,
    voice,
    response_format: fields.response_format,
    stream_format: fields.stream_format,
    ...(instructions !== undefined ? { instructions } : {}),
    ...(speed !== undefined ? { speed } : {}),
  };
  if (async) return { payload, stream: false, contentType: 'application/json', promptTokens };
  if (fields.stream_format === 'sse') return { payload, stream: true, promptTokens };
  return {
    payload,
    stream: true,
    contentType: speechContentTypes[fields.response_format],
    dialect: 'audio',
    promptTokens,
  };
}
