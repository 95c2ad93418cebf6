import { GatewayError } from '../../../shared/errors.js';
import { geminiModelPath } from './api.js';
import { convertJsonSchema } from './convert-json-schema.js';

/**
 * A Realtime session's settings as OpenAI's GA protocol writes them (`session.update`), and the Gemini Live `setup`
 * they become. Gemini fixes its setup for the socket's life, so the session keeps the settings here and the adapter
 * opens a new socket when they change before the conversation starts (`live.ts`).
 *
 * What maps: `instructions` → `systemInstruction`; `output_modalities` → `responseModalities` (one of AUDIO, TEXT);
 * `audio.output.voice` → a prebuilt voice, when it names one of Gemini's; `tools` (functions) →
 * `functionDeclarations` with their JSON Schema converted as for chat; `audio.input.turn_detection` null → manual
 * activity (automatic detection off), `server_vad`'s silence and padding → automatic detection's; a non-null
 * `audio.input.transcription` → `inputAudioTranscription`; audio output always asks `outputAudioTranscription` (the
 * transcript events OpenAI's clients read); `max_output_tokens` → `generationConfig.maxOutputTokens`.
 * Refused with a client error: audio formats other than pcm16 at 24 kHz, a transcription-only session, MCP tools, a
 * voice Gemini does not have. Read and answered but not sent (Gemini has no such setting): `tool_choice`, `tracing`,
 * `truncation`, `include`, `noise_reduction`, `prompt`.
 */

type Json = Record<string, unknown>;

/** The prebuilt voices of Gemini's speech models (Live and TTS). */
export const GEMINI_VOICES = [
  'Zephyr',
  'Puck',
  'Charon',
  'Kore',
  'Fenrir',
  'Leda',
  'Orus',
  'Aoede',
  'Callirrhoe',
  'Autonoe',
  'Enceladus',
  'Iapetus',
  'Umbriel',
  'Algieba',
  'Despina',
  'Erinome',
  'Algenib',
  'Rasalgethi',
  'Laomedeia',
  'Achernar',
  'Alnilam',
  'Schedar',
  'Gacrux',
  'Pulcherrima',
  'Achird',
  'Zubenelgenubi',
  'Vindemiatrix',
  'Sadachbia',
  'Sadaltager',
  'Sulafat',
];
/** What a session says it speaks with when the client chose no voice (Gemini's default). */
const DEFAULT_VOICE = 'Puck';

export interface LiveFunctionTool {
  type: 'function';
  name: string;
  description?: string;
  parameters?: Json;
}

export type TurnDetection = null | ({ type: 'server_vad' | 'semantic_vad' } & Json);

export interface LiveSessionSettings {
  outputModalities: ['audio'] | ['text'];
  instructions: string;
  /** A Gemini voice name, canonical case. */
  voice: string | undefined;
  tools: LiveFunctionTool[];
  toolChoice: unknown;
  turnDetection: TurnDetection;
  inputTranscription: Json | null;
  maxOutputTokens: number | 'inf';
}

export function defaultLiveSettings(): LiveSessionSettings {
  return {
    outputModalities: ['audio'],
    instructions: '',
    voice: undefined,
    tools: [],
    toolChoice: 'auto',
    // OpenAI's default: the server detects turns and answers them.
    turnDetection: {
      type: 'server_vad',
      threshold: 0.5,
      prefix_padding_ms: 300,
      silence_duration_ms: 500,
      create_response: true,
      interrupt_response: true,
    },
    inputTranscription: null,
    maxOutputTokens: 'inf',
  };
}

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const refuse = (message: string, param: string, code = 'invalid_value') =>
  new GatewayError(400, message, { param, code });

function checkPcm24(format: unknown, param: string): void {
  if (format === undefined) return;
  if (!isObject(format) || format.type !== 'audio/pcm' || (format.rate !== undefined && format.rate !== 24000)) {
    throw refuse(
      'Gemini Live models take and give pcm16 audio at 24 kHz only (`{"type":"audio/pcm","rate":24000}`).',
      param,
      'unsupported_audio_format',
    );
  }
}

/** The settings after one `session.update`'s `session`; throws a 400 GatewayError naming the field it cannot take. */
export function applySessionUpdate(current: LiveSessionSettings, session: unknown): LiveSessionSettings {
  if (!isObject(session)) throw refuse('`session` must be an object.', 'session');
  if (session.type !== undefined && session.type !== 'realtime') {
    throw refuse(
      'Gemini Live models serve `realtime` sessions; a transcription session is not available on them.',
      'session.type',
    );
  }
  const next: LiveSessionSettings = { ...current };
  if (session.output_modalities !== undefined) {
    const modalities = session.output_modalities;
    if (
      !Array.isArray(modalities) ||
      modalities.length !== 1 ||
      (modalities[0] !== 'audio' && modalities[0] !== 'text')
    ) {
      throw refuse('`output_modalities` must be ["audio"] or ["text"].', 'session.output_modalities');
    }
    next.outputModalities = [modalities[0]];
  }
  if (session.instructions !== undefined) {
    if (typeof session.instructions !== 'string')
      throw refuse('`instructions` must be a string.', 'session.instructions');
    next.instructions = session.instructions;
  }
  if (session.max_output_tokens !== undefined) {
    const max = session.max_output_tokens;
    if (max !== 'inf' && !(Number.isInteger(max) && (max as number) >= 1 && (max as number) <= 4096)) {
      throw refuse('`max_output_tokens` must be an integer from 1 to 4096, or "inf".', 'session.max_output_tokens');
    }
    next.maxOutputTokens = max as number | 'inf';
  }
  if (session.tool_choice !== undefined) next.toolChoice = session.tool_choice;
  if (session.tools !== undefined) {
    if (!Array.isArray(session.tools)) throw refuse('`tools` must be an array.', 'session.tools');
    next.tools = session.tools.map((tool, index) => {
      if (!isObject(tool) || (tool.type !== undefined && tool.type !== 'function')) {
        throw refuse(
          'Gemini Live models take function tools only.',
          `session.tools[${index}].type`,
          'unsupported_tool',
        );
      }
      if (typeof tool.name !== 'string' || !/^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$/.test(tool.name)) {
        throw refuse(
          'A function name must start with a letter or underscore and hold letters, digits, _ . : - (64 at most).',
          `session.tools[${index}].name`,
        );
      }
      if (tool.parameters !== undefined && !isObject(tool.parameters))
        throw refuse('`parameters` must be a JSON Schema object.', `session.tools[${index}].parameters`);
      return {
        type: 'function',
        name: tool.name,
        ...(typeof tool.description === 'string' ? { description: tool.description } : {}),
        ...(tool.parameters !== undefined ? { parameters: tool.parameters as Json } : {}),
      };
    });
  }
  if (session.audio !== undefined) {
    if (!isObject(session.audio)) throw refuse('`audio` must be an object.', 'session.audio');
    const { input, output } = session.audio;
    if (input !== undefined) {
      if (!isObject(input)) throw refuse('`audio.input` must be an object.', 'session.audio.input');
      checkPcm24(input.format, 'session.audio.input.format');
      if (input.transcription !== undefined) {
        if (input.transcription !== null && !isObject(input.transcription))
          throw refuse('`transcription` must be an object or null.', 'session.audio.input.transcription');
        next.inputTranscription = input.transcription as Json | null;
      }
      if (input.turn_detection !== undefined) {
        const detection = input.turn_detection;
        if (
          detection !== null &&
          !(isObject(detection) && (detection.type === 'server_vad' || detection.type === 'semantic_vad'))
        ) {
          throw refuse(
            '`turn_detection` must be null, server_vad or semantic_vad.',
            'session.audio.input.turn_detection',
          );
        }
        next.turnDetection = detection as TurnDetection;
      }
    }
    if (output !== undefined) {
      if (!isObject(output)) throw refuse('`audio.output` must be an object.', 'session.audio.output');
      checkPcm24(output.format, 'session.audio.output.format');
      if (output.voice !== undefined) {
        const asked =
          typeof output.voice === 'string' ? output.voice : isObject(output.voice) ? output.voice.id : undefined;
        const voice =
          typeof asked === 'string'
            ? GEMINI_VOICES.find((name) => name.toLowerCase() === asked.toLowerCase())
            : undefined;
        if (voice === undefined) {
          throw refuse(
            `Gemini Live models speak with Gemini's voices: ${GEMINI_VOICES.join(', ')}.`,
            'session.audio.output.voice',
            'unsupported_voice',
          );
        }
        next.voice = voice;
      }
    }
  }
  return next;
}

/** The Gemini Live `setup` for these settings. Throws a 400 GatewayError for a tool schema Gemini cannot take. */
export function buildLiveSetup(settings: LiveSessionSettings, upstreamModel: string): Json {
  const speaks = settings.outputModalities[0] === 'audio';
  const generationConfig: Json = { responseModalities: [speaks ? 'AUDIO' : 'TEXT'] };
  if (speaks && settings.voice !== undefined)
    generationConfig.speechConfig = { voiceConfig: { prebuiltVoiceConfig: { voiceName: settings.voice } } };
  if (settings.maxOutputTokens !== 'inf') generationConfig.maxOutputTokens = settings.maxOutputTokens;
  const setup: Json = { model: geminiModelPath(upstreamModel), generationConfig };
  if (settings.instructions !== '') setup.systemInstruction = { parts: [{ text: settings.instructions }] };
  if (settings.tools.length > 0) {
    setup.tools = [
      {
        functionDeclarations: settings.tools.map((tool, index) => {
          const { schema } = convertJsonSchema(tool.parameters, `session.tools[${index}].parameters`);
          return {
            name: tool.name,
            ...(tool.description ? { description: tool.description } : {}),
            ...(schema ? { parameters: schema } : {}),
          };
        }),
      },
    ];
  }
  const detection = settings.turnDetection;
  if (detection === null) setup.realtimeInputConfig = { automaticActivityDetection: { disabled: true } };
  else if (detection.type === 'server_vad') {
    const automatic: Json = {};
    if (Number.isInteger(detection.silence_duration_ms)) automatic.silenceDurationMs = detection.silence_duration_ms;
    if (Number.isInteger(detection.prefix_padding_ms)) automatic.prefixPaddingMs = detection.prefix_padding_ms;
    if (Object.keys(automatic).length > 0) setup.realtimeInputConfig = { automaticActivityDetection: automatic };
  }
  if (settings.inputTranscription !== null) setup.inputAudioTranscription = {};
  if (speaks) setup.outputAudioTranscription = {};
  return setup;
}

/** The `session` object of `session.created`/`session.updated`, in OpenAI's GA shape. */
export function describeSession(
  settings: LiveSessionSettings,
  id: string,
  clientModel: string,
  expiresAt: number,
): Json {
  const format = { type: 'audio/pcm', rate: 24000 };
  return {
    type: 'realtime',
    object: 'realtime.session',
    id,
    model: clientModel,
    output_modalities: settings.outputModalities,
    instructions: settings.instructions,
    audio: {
      input: {
        format,
        ...(settings.inputTranscription !== null ? { transcription: settings.inputTranscription } : {}),
        turn_detection: settings.turnDetection,
      },
      output: { format, voice: settings.voice ?? DEFAULT_VOICE, speed: 1 },
    },
    tools: settings.tools,
    tool_choice: settings.toolChoice,
    max_output_tokens: settings.maxOutputTokens,
    expires_at: expiresAt,
  };
}
