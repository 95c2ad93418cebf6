import { invalidRequest } from '../../shared/errors.js';
import { chatToolName } from '../../shared/messages-tools.js';
import type { CatalogModel } from '../../shared/catalog.js';
import type { ChatCompletionRequest, ChatMessage } from '../../shared/schemas/chat.js';
import type {
  GeminiContent,
  GeminiGenerateRequest,
  GeminiGenerationConfig,
  GeminiPart,
} from '../../shared/schemas/gemini.js';
import type { ReasoningEffort } from '../../shared/thinking-budgets.js';
import { applyChatSettings, effortForBudget, type ChatToolCall, type ChatUserPart } from '../dialects/chat-request.js';
import { declareOutput, geminiToolFields } from './translate-tools.js';

/*
 * Google's Gemini API over the chat adapters: a `generateContent` request as the chat request the adapters of
 * every vendor but Gemini run (a model Gemini serves is sent the request as the client wrote it). The system
 * instruction becomes a system message, `user` turns user messages (their function responses tool messages,
 * first, as chat wants them right after the calls), `model` turns assistant messages (their function calls tool
 * calls). Its tools, tool choice and `generationConfig`'s sampling, output limit, stop sequences, thinking and
 * structured output are said in the dialect layer's terms (`translate-tools.ts`, `api/dialects/`), whose policy
 * says what chat gets of them, as it does for the other dialects. What chat has no form for (thoughts and their
 * signatures, Gemini's code execution, `topK`, safety settings…) is left out and named in `dropped`; what the client
 * clearly needs and chat cannot carry (a video, a file in Google's Files API, a cached content) is a 400 for a model
 * Gemini does not serve.
 *
 * Function calls are paired with their responses by id; a call without one (Gemini 2.5 gives none) gets an id
 * made from its place in the request, and the response is matched to the oldest call of its name not yet
 * answered, as Gemini pairs them. Gemini takes a call the next turn does not answer (a history a client trimmed, a
 * response sent under another id and name); chat does not (every tool call is followed by its tool message, or
 * OpenAI and Anthropic refuse the request): such a call is answered, where its answer was due, by a tool message
 * saying none was sent. One pass over the request: it runs on the api's event loop for requests of up to 100,000
 * turns.
 */

/** The chat request, and what of the Gemini request it leaves out (deduplicated, in the order met). */
export interface GeminiTranslation {
  chat: ChatCompletionRequest;
  dropped: string[];
}

/** What the translation needs of the model. */
export type TranslatedModel = Pick<CatalogModel, 'id' | 'capability' | 'max_output_tokens' | 'input_modalities'> & {
  web_search?: boolean | undefined;
};

export interface TranslateOptions {
  /** The request streams: chat is asked to stream, with its usage. */
  stream: boolean;
  /**
   * Gemini serves the model: it gets the body as written, so what chat cannot carry is left out of the chat form
   * (used only if the call falls back to another vendor), not refused.
   */
  native: boolean;
  /**
   * The model is given a reasoning effort (it reasons, or its vendor turns an effort into thinking): else
   * `thinkingConfig` is left out.
   */
  reasons: boolean;
}

/** Inline images chat vendors take. */
const imageTypes = new Set([
  'image/png',
  'image/jpeg',
  'image/jpg',
  'image/webp',
  'image/gif',
  'image/heic',
  'image/heif',
]);
/** Inline audio in chat's two formats. */
const audioFormats: Readonly<Record<string, 'wav' | 'mp3'>> = {
  'audio/wav': 'wav',
  'audio/x-wav': 'wav',
  'audio/wave': 'wav',
  'audio/mp3': 'mp3',
  'audio/mpeg': 'mp3',
};
const servedInline = 'an image (PNG, JPEG, WebP, GIF, HEIC), application/pdf, audio/wav, audio/mp3, or text';

/** Google takes URL-safe and unpadded base64 too; a data URL and chat's audio are read standard and padded. */
function standardBase64(data: string): string {
  const standard = /[-_]/.test(data) ? data.replaceAll('-', '+').replaceAll('_', '/') : data;
  return standard.length % 4 === 0 ? standard : standard + '='.repeat(4 - (standard.length % 4));
}

const mediaType = (mimeType: string) => mimeType.split(';', 1)[0]!.trim().toLowerCase();
const isText = (type: string) => type.startsWith('text/') || type === 'application/json';

class Translator {
  readonly dropped = new Set<string>();
  readonly messages: ChatMessage[] = [];
  /** The last model turn's calls not yet answered, oldest first: their chat ids and the client's names. */
  private readonly unanswered: Array<{ id: string; name: string }> = [];

  constructor(
    private readonly model: TranslatedModel,
    private readonly native: boolean,
  ) {}

  drop(what: string): void {
    this.dropped.add(what);
  }

  /** Something chat cannot carry: left out for a model Gemini serves, else the client hears why. */
  private unserved(param: string, reason: string): void {
    if (!this.native) throw invalidRequest(`Invalid value at '${param}': ${reason}`, param, 'unsupported_content');
    this.drop(param.replace(/\[\d+\]/g, '[]'));
  }

  private needs(modality: 'image' | 'audio', param: string): void {
    if (!this.model.input_modalities.includes(modality)) {
      throw invalidRequest(
        `Invalid value at '${param}': the model \`${this.model.id}\` does not accept ${modality} input.`,
        param,
        'unsupported_content_type',
      );
    }
  }

  /** Inline data as chat parts: images, PDFs, wav and mp3 audio, text. */
  private inline(part: NonNullable<GeminiPart['inlineData']>, path: string, target: ChatUserPart[]): void {
    const type = mediaType(part.mimeType);
    const data = standardBase64(part.data);
    const url = `data:${type};base64,${data}`;
    if (imageTypes.has(type)) {
      this.needs('image', `${path}.inlineData`);
      target.push({ type: 'image_url', image_url: { url } });
    } else if (type === 'application/pdf') {
      target.push({ type: 'file', file: { file_data: url, filename: 'document.pdf' } });
    } else if (audioFormats[type] !== undefined) {
      this.needs('audio', `${path}.inlineData`);
      target.push({ type: 'input_audio', input_audio: { data, format: audioFormats[type] } });
    } else if (isText(type)) {
      target.push({ type: 'text', text: Buffer.from(data, 'base64').toString('utf8') });
    } else {
      this.unserved(
        `${path}.inlineData.mimeType`,
        `inline ${type === '' ? 'data without a media type' : type} is served for Gemini models only; this model takes ${servedInline}.`,
      );
    }
  }

  /** A file by URI: an image on the web is chat's image URL; anything else only Gemini reads. */
  private file(part: NonNullable<GeminiPart['fileData']>, path: string, target: ChatUserPart[]): void {
    const type = part.mimeType === undefined ? undefined : mediaType(part.mimeType);
    const web =
      /^https?:\/\//i.test(part.fileUri) && !/^https?:\/\/generativelanguage\.googleapis\.com\//i.test(part.fileUri);
    if (web && (type === undefined || type.startsWith('image/'))) {
      this.needs('image', `${path}.fileData`);
      target.push({ type: 'image_url', image_url: { url: part.fileUri } });
      return;
    }
    this.unserved(
      `${path}.fileData`,
      web
        ? `a ${type} file by URL is served for Gemini models only; send it inline (inlineData), or send images by URL.`
        : "files in Google's Files API, Cloud Storage or YouTube are served for Gemini models only; send the " +
            'content inline (inlineData).',
    );
  }

  /** A function response: the tool message answering its call, or text when no call of the request asked for it. */
  private functionResponse(
    response: NonNullable<GeminiPart['functionResponse']>,
    path: string,
    tools: ChatMessage[],
    attachments: ChatUserPart[],
    orphans: ChatUserPart[],
  ): void {
    const output = resultText(response.response);
    const at = response.id !== undefined ? this.unanswered.findIndex((call) => call.id === response.id) : -1;
    const index = at >= 0 ? at : this.unanswered.findIndex((call) => call.name === response.name);
    // Gemini 3 lets a function return media beside its result (`functionResponse.parts`).
    const extra: GeminiPart[] = Array.isArray(response.parts) ? (response.parts as GeminiPart[]) : [];
    const attached: ChatUserPart[] = [];
    extra.forEach((inner, k) => this.userPart(inner, `${path}.functionResponse.parts[${k}]`, attached, [], [], []));
    if (index < 0) {
      // Gemini takes a response whose call is not in the history (a client that trimmed it); chat refuses a tool
      // message without its call: the model reads it as text instead.
      orphans.push({ type: 'text', text: `The result of the function ${response.name}: ${output}` }, ...attached);
      return;
    }
    const [call] = this.unanswered.splice(index, 1);
    tools.push({ role: 'tool', tool_call_id: call!.id, content: output });
    if (attached.length > 0)
      attachments.push(
        { type: 'text', text: `Attached to the result of function call ${call!.id} (${response.name}):` },
        ...attached,
      );
  }

  /** One part of a user turn, into the turn's tool messages, attachments, orphan results or content. */
  private userPart(
    part: GeminiPart,
    path: string,
    content: ChatUserPart[],
    tools: ChatMessage[],
    attachments: ChatUserPart[],
    orphans: ChatUserPart[],
  ): void {
    if (part.functionResponse) return this.functionResponse(part.functionResponse, path, tools, attachments, orphans);
    if (part.functionCall)
      throw invalidRequest(
        `Invalid value at '${path}.functionCall': function calls belong in model turns (role 'model').`,
        `${path}.functionCall`,
        'invalid_value',
      );
    if (typeof part.text === 'string') {
      if (part.thought === true) this.drop('thought parts');
      else content.push({ type: 'text', text: part.text });
    } else if (part.inlineData) this.inline(part.inlineData, path, content);
    else if (part.fileData) this.file(part.fileData, path, content);
    else this.dropOther(part);
  }

  /**
   * The last model turn's calls its answer left unanswered, each given a tool message saying so (into `target`),
   * so the chat form stays one chat vendors take; a response that comes later reads as text (`functionResponse`).
   */
  closeCalls(target: ChatMessage[] = this.messages): void {
    for (const call of this.unanswered) {
      target.push({
        role: 'tool',
        tool_call_id: call.id,
        content: `No result was sent for this call of the function ${call.name}.`,
      });
    }
    this.unanswered.length = 0;
  }

  /** A user turn: its function responses as tool messages first, then the rest as one user message. */
  userTurn(parts: readonly GeminiPart[], path: string): void {
    const content: ChatUserPart[] = [];
    const tools: ChatMessage[] = [];
    // What responses carry beyond text, and responses to no call: after the tool messages, before the user's own parts.
    const attachments: ChatUserPart[] = [];
    const orphans: ChatUserPart[] = [];
    parts.forEach((part, j) => this.userPart(part, `${path}.parts[${j}]`, content, tools, attachments, orphans));
    this.closeCalls(tools);
    for (const message of tools) this.messages.push(message);
    const all = [...attachments, ...orphans, ...content];
    if (all.length > 0) this.messages.push({ role: 'user', content: all });
  }

  /** A model turn: its text as the content (thoughts left out), its function calls as tool calls. */
  modelTurn(parts: readonly GeminiPart[], path: string, turn: number): void {
    // Two model turns in a row: the first one's calls got no answer.
    this.closeCalls();
    let content = '';
    const calls: ChatToolCall[] = [];
    parts.forEach((part, j) => {
      if (typeof part.thoughtSignature === 'string') this.drop('thoughtSignature');
      const call = part.functionCall;
      if (call) {
        const id = call.id !== undefined && call.id !== '' ? call.id : `call_${turn}_${j}`;
        calls.push({
          id,
          type: 'function',
          function: { name: chatToolName(call.name), arguments: JSON.stringify(call.args ?? {}) },
        });
        this.unanswered.push({ id, name: call.name });
        return;
      }
      if (part.functionResponse) {
        const param = `${path}.parts[${j}].functionResponse`;
        throw invalidRequest(
          `Invalid value at '${param}': function responses belong in user turns (role 'user').`,
          param,
          'invalid_value',
        );
      }
      if (typeof part.text === 'string') {
        if (part.thought === true) this.drop('thought parts');
        else content += part.text;
      } else if (part.inlineData || part.fileData) this.drop('contents[].parts[] with data in model turns');
      else this.dropOther(part);
    });
    if (calls.length > 0)
      this.messages.push({ role: 'assistant', content: content === '' ? null : content, tool_calls: calls });
    // A turn left with nothing to say (only thoughts) is left out: an empty assistant message tells the model nothing.
    else if (content !== '') this.messages.push({ role: 'assistant', content });
  }

  private dropOther(part: GeminiPart): void {
    for (const key of ['executableCode', 'codeExecutionResult', 'videoMetadata'])
      if (part[key] != null) this.drop(`contents[].parts[].${key}`);
  }
}

/**
 * A function's result as a tool message's text: its `output` (or `content`) when that is all it is and is text, else
 * its JSON.
 */
function resultText(response: Record<string, unknown> | null | undefined): string {
  if (response == null) return '';
  const keys = Object.keys(response);
  if (keys.length === 1 && (keys[0] === 'output' || keys[0] === 'content') && typeof response[keys[0]] === 'string')
    return response[keys[0]] as string;
  return JSON.stringify(response);
}

/** The system instruction's text parts as a system message. */
function systemMessage(
  instruction: GeminiGenerateRequest['systemInstruction'],
  dropped: Set<string>,
): ChatMessage | undefined {
  if (instruction == null) return undefined;
  if (typeof instruction === 'string') return instruction === '' ? undefined : { role: 'system', content: instruction };
  const texts: string[] = [];
  for (const part of instruction.parts ?? []) {
    if (typeof part.text === 'string' && part.thought !== true) texts.push(part.text);
    else dropped.add('systemInstruction.parts[] that are not text');
  }
  if (texts.length === 0) return undefined;
  // The parts stay separate: joining them would guess at a separator the client did not write.
  return {
    role: 'system',
    content: texts.length === 1 ? texts[0]! : texts.map((text) => ({ type: 'text' as const, text })),
  };
}

/**
 * `thinkingConfig` as chat's `reasoning_effort`, for a model that takes one (`reasons`): a level as the effort of
 * that name, a budget as the largest effort preset within it (`effortForBudget`), 0 as `none` (no thinking), -1
 * (the model decides) as no effort at all, so the vendor's default. Any other model gets none.
 */
function reasoningEffort(
  config: GeminiGenerationConfig['thinkingConfig'],
  reasons: boolean,
  dropped: Set<string>,
): ReasoningEffort | undefined {
  if (config == null) return undefined;
  const level = typeof config.thinkingLevel === 'string' ? config.thinkingLevel.toLowerCase() : undefined;
  const budget = config.thinkingBudget ?? undefined;
  const asked =
    (level !== undefined && level !== 'thinking_level_unspecified') || (budget !== undefined && budget !== -1);
  if (!asked) return undefined;
  if (!reasons) {
    dropped.add('generationConfig.thinkingConfig (this model takes no reasoning effort)');
    return undefined;
  }
  if (level !== undefined && level !== 'thinking_level_unspecified') return level as ReasoningEffort;
  if (budget === 0) return 'none';
  return budget === undefined || budget < 0 ? undefined : effortForBudget(budget);
}

/** The generation settings read here; any other is dropped. */
const readConfig = new Set([
  'temperature',
  'topP',
  'topK',
  'candidateCount',
  'maxOutputTokens',
  'stopSequences',
  'presencePenalty',
  'frequencyPenalty',
  'seed',
  'responseLogprobs',
  'logprobs',
  'responseMimeType',
  'responseSchema',
  'responseJsonSchema',
  'thinkingConfig',
  'responseModalities',
]);

/**
 * `generationConfig` onto the chat request: the settings every dialect has through the layer (`maxOutputTokens`
 * clamped to what the model writes: a client may ask any model for Gemini's 65,536), and Gemini's others chat
 * takes as they are (candidates, penalties, seed, log probabilities).
 */
function applyGenerationConfig(
  chat: ChatCompletionRequest,
  config: GeminiGenerationConfig,
  model: TranslatedModel,
  reasons: boolean,
  dropped: Set<string>,
): void {
  const stops = config.stopSequences;
  applyChatSettings(
    chat,
    {
      temperature: config.temperature,
      topP: config.topP,
      maxTokens: config.maxOutputTokens,
      modelMaxTokens: model.max_output_tokens,
      stop: stops != null ? { sequences: stops, field: 'generationConfig.stopSequences' } : undefined,
      effort: reasoningEffort(config.thinkingConfig, reasons, dropped),
      output: declareOutput(config, dropped),
    },
    dropped,
  );
  if (config.topK != null) dropped.add('generationConfig.topK');
  if (config.candidateCount != null && config.candidateCount > 1) chat.n = config.candidateCount;
  if (config.presencePenalty != null) chat.presence_penalty = config.presencePenalty;
  if (config.frequencyPenalty != null) chat.frequency_penalty = config.frequencyPenalty;
  if (config.seed != null) chat.seed = config.seed;
  if (config.responseLogprobs === true) {
    chat.logprobs = true;
    if (config.logprobs != null) chat.top_logprobs = config.logprobs;
  }
  const modalities = config.responseModalities;
  if (Array.isArray(modalities) && modalities.some((modality) => String(modality).toUpperCase() !== 'TEXT'))
    dropped.add('generationConfig.responseModalities other than TEXT');
  for (const [key, value] of Object.entries(config))
    if (!readConfig.has(key) && value != null) dropped.add(`generationConfig.${key}`);
}

/** The top-level fields read here; any other is dropped (`model`: a countTokens request's own copy of the path's). */
const readFields = new Set([
  'contents',
  'systemInstruction',
  'tools',
  'toolConfig',
  'generationConfig',
  'cachedContent',
  'model',
]);

/** The request's contents as the generate and count requests carry them (the schema checked them). */
export type GenerateFields = Pick<
  GeminiGenerateRequest,
  'contents' | 'systemInstruction' | 'tools' | 'toolConfig' | 'generationConfig' | 'cachedContent'
> &
  Record<string, unknown>;

/** The chat request for a (validated) Gemini request to `model`, with the list of what it leaves out. */
export function toChatRequest(
  request: GenerateFields,
  model: TranslatedModel,
  options: TranslateOptions,
): GeminiTranslation {
  const translator = new Translator(model, options.native);
  const { dropped } = translator;
  if (request.cachedContent != null) {
    if (!options.native) {
      throw invalidRequest(
        `Invalid value at 'cachedContent': a cached content lives in Google's API and is served for Gemini ` +
          `models only; send its contents in the request.`,
        'cachedContent',
        'unsupported_parameter',
      );
    }
    dropped.add('cachedContent');
  }

  const messages: ChatMessage[] = [];
  const system = systemMessage(request.systemInstruction, dropped);
  if (system) messages.push(system);
  request.contents.forEach((content: GeminiContent, i) => {
    const parts = content.parts ?? [];
    if (content.role === 'model') translator.modelTurn(parts, `contents[${i}]`, i);
    else translator.userTurn(parts, `contents[${i}]`);
  });
  // A request that ends on a model turn's calls (the model asked to go on without their results).
  translator.closeCalls();
  if (translator.messages.length === 0) {
    throw invalidRequest(
      "Invalid value at 'contents': nothing is left to send to this model once the parts only Gemini reads " +
        '(thoughts, code execution) are left out.',
      'contents',
      'invalid_value',
    );
  }
  // One push per message: spreading a 100,000-message array into push() would pass that many arguments.
  for (const message of translator.messages) messages.push(message);

  const chat: ChatCompletionRequest = { model: model.id, messages };
  Object.assign(chat, geminiToolFields(request, model.web_search === true, options.native, dropped));
  if (request.generationConfig != null)
    applyGenerationConfig(chat, request.generationConfig, model, options.reasons, dropped);
  if (request.safetySettings != null) dropped.add('safetySettings');
  for (const [key, value] of Object.entries(request))
    if (!readFields.has(key) && key !== 'safetySettings' && value != null) dropped.add(key);
  if (options.stream) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }
  return { chat, dropped: [...dropped] };
}
