/**
 * What the strict fake Gemini (`fake-gemini.ts`) checks of a request body before it answers: the fields Google's
 * `generateContent`, `streamGenerateContent`, `countTokens`, `embedContent` and `batchEmbedContents` know, each of the
 * type Google parses it as, refused with Google's own wording (`Invalid JSON payload received. Unknown name …`,
 * `Invalid value at '<field>' (TYPE_FLOAT), "hot"`, `contents is not specified`). A gateway that passes a request
 * through must send what Google takes, so every test against the fake also checks the outgoing body. Field paths
 * in messages are Google's (snake_case, as its parser reports them); the fake takes the camelCase names the SDKs
 * and Gemini CLI send, and only those.
 */

export type Json = Record<string, unknown>;
export const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** A refusal in Google's terms: the HTTP code, the canonical status and the message. */
export class Refusal {
  constructor(
    readonly code: number,
    readonly status: string,
    readonly message: string,
    readonly details?: unknown[],
  ) {}
}

export const invalid = (message: string) => new Refusal(400, 'INVALID_ARGUMENT', message);
const snake = (path: string) => path.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
const unknownName = (name: string, at?: string) =>
  invalid(`Invalid JSON payload received. Unknown name "${name}"${at ? ` at '${snake(at)}'` : ''}: Cannot find field.`);
const wrongValue = (at: string, type: string, value: unknown) =>
  invalid(`Invalid value at '${snake(at)}' (${type}), ${JSON.stringify(value)}`);
const V1BETA = 'type.googleapis.com/google.ai.generativelanguage.v1beta';

function allowOnly(value: Json, allowed: ReadonlySet<string>, at?: string): void {
  for (const key of Object.keys(value)) if (!allowed.has(key)) throw unknownName(key, at);
}

/** A protobuf message field: an object, or refused as Google refuses a scalar where a message goes. */
function message(value: unknown, at: string, type: string): Json {
  if (!isObject(value)) throw wrongValue(at, `${V1BETA}.${type}`, value);
  return value;
}

function list(value: unknown, at: string, type: string): unknown[] {
  if (!Array.isArray(value)) throw wrongValue(at, type, value);
  return value;
}

type Scalar = 'TYPE_STRING' | 'TYPE_BOOL' | 'TYPE_INT32' | 'TYPE_FLOAT' | 'TYPE_BYTES';
function scalar(value: unknown, at: string, type: Scalar): void {
  if (value === undefined) return;
  const fits =
    type === 'TYPE_STRING'
      ? typeof value === 'string'
      : type === 'TYPE_BOOL'
        ? typeof value === 'boolean'
        : type === 'TYPE_INT32'
          ? Number.isInteger(value) || (typeof value === 'string' && /^-?\d+$/.test(value))
          : type === 'TYPE_FLOAT'
            ? typeof value === 'number'
            : typeof value === 'string';
  if (!fits) throw wrongValue(at, type, value);
  if (type === 'TYPE_BYTES' && !/^[A-Za-z0-9+/_-]*={0,2}$/.test(value as string)) {
    throw invalid(`Invalid value at '${snake(at)}' (TYPE_BYTES), Base64 decoding failed for ${JSON.stringify(value)}`);
  }
}

/**
 * An enum field: Google's parser takes its value names in any case (its own examples write `"thinkingLevel": "low"`).
 */
function enumeration(value: unknown, at: string, type: string, values: readonly string[]): void {
  if (value !== undefined && !(typeof value === 'string' && values.includes(value.toUpperCase())))
    throw wrongValue(at, `${V1BETA}.${type}`, value);
}

const TOP_LEVEL = new Set([
  'contents',
  'systemInstruction',
  'tools',
  'toolConfig',
  'generationConfig',
  'safetySettings',
  'cachedContent',
]);
const GENERATION = new Set([
  'stopSequences',
  'responseMimeType',
  'responseSchema',
  'responseJsonSchema',
  'responseModalities',
  'candidateCount',
  'maxOutputTokens',
  'temperature',
  'topP',
  'topK',
  'seed',
  'presencePenalty',
  'frequencyPenalty',
  'responseLogprobs',
  'logprobs',
  'enableEnhancedCivicAnswers',
  'thinkingConfig',
  'mediaResolution',
  'imageConfig',
  'speechConfig',
]);
const GENERATION_TYPES: Record<string, Scalar> = {
  responseMimeType: 'TYPE_STRING',
  candidateCount: 'TYPE_INT32',
  maxOutputTokens: 'TYPE_INT32',
  temperature: 'TYPE_FLOAT',
  topP: 'TYPE_FLOAT',
  topK: 'TYPE_INT32',
  seed: 'TYPE_INT32',
  presencePenalty: 'TYPE_FLOAT',
  frequencyPenalty: 'TYPE_FLOAT',
  responseLogprobs: 'TYPE_BOOL',
  logprobs: 'TYPE_INT32',
  enableEnhancedCivicAnswers: 'TYPE_BOOL',
};
const PART = new Set([
  'text',
  'inlineData',
  'fileData',
  'functionCall',
  'functionResponse',
  'thought',
  'thoughtSignature',
  'executableCode',
  'codeExecutionResult',
  'videoMetadata',
  'partMetadata',
  'mediaResolution',
]);
const PART_DATA = [
  'text',
  'inlineData',
  'fileData',
  'functionCall',
  'functionResponse',
  'executableCode',
  'codeExecutionResult',
];
const SCHEMA = new Set([
  'type',
  'format',
  'title',
  'description',
  'nullable',
  'enum',
  'maxItems',
  'minItems',
  'properties',
  'required',
  'minProperties',
  'maxProperties',
  'minLength',
  'maxLength',
  'pattern',
  'example',
  'anyOf',
  'propertyOrdering',
  'default',
  'items',
  'minimum',
  'maximum',
]);
const TYPES = new Set(['string', 'number', 'integer', 'boolean', 'array', 'object', 'null']);
const DECLARATION = new Set([
  'name',
  'description',
  'parameters',
  'parametersJsonSchema',
  'response',
  'responseJsonSchema',
  'behavior',
]);
const TOOL = new Set([
  'functionDeclarations',
  'googleSearch',
  'googleSearchRetrieval',
  'codeExecution',
  'urlContext',
  'fileSearch',
  'googleMaps',
  'computerUse',
]);
const HARM_CATEGORIES = [
  'HARM_CATEGORY_UNSPECIFIED',
  'HARM_CATEGORY_DEROGATORY',
  'HARM_CATEGORY_TOXICITY',
  'HARM_CATEGORY_VIOLENCE',
  'HARM_CATEGORY_SEXUAL',
  'HARM_CATEGORY_MEDICAL',
  'HARM_CATEGORY_DANGEROUS',
  'HARM_CATEGORY_HARASSMENT',
  'HARM_CATEGORY_HATE_SPEECH',
  'HARM_CATEGORY_SEXUALLY_EXPLICIT',
  'HARM_CATEGORY_DANGEROUS_CONTENT',
  'HARM_CATEGORY_CIVIC_INTEGRITY',
];
const THRESHOLDS = [
  'HARM_BLOCK_THRESHOLD_UNSPECIFIED',
  'BLOCK_LOW_AND_ABOVE',
  'BLOCK_MEDIUM_AND_ABOVE',
  'BLOCK_ONLY_HIGH',
  'BLOCK_NONE',
  'OFF',
];
const TASK_TYPES = [
  'TASK_TYPE_UNSPECIFIED',
  'RETRIEVAL_QUERY',
  'RETRIEVAL_DOCUMENT',
  'SEMANTIC_SIMILARITY',
  'CLASSIFICATION',
  'CLUSTERING',
  'QUESTION_ANSWERING',
  'FACT_VERIFICATION',
  'CODE_RETRIEVAL_QUERY',
];
const EMBED_REQUEST = new Set(['model', 'content', 'taskType', 'title', 'outputDimensionality']);
/** Values Google takes as a thought signature without having issued it ("skip the validator"). */
const BYPASS_SIGNATURES = new Set(['skip_thought_signature_validator', 'context_engineering_is_the_way_to_go']);

function checkSchema(schema: unknown, at: string): void {
  const value = message(schema, at, 'Schema');
  allowOnly(value, SCHEMA, at);
  if (value.type !== undefined && !(typeof value.type === 'string' && TYPES.has(value.type.toLowerCase()))) {
    throw wrongValue(`${at}.type`, `${V1BETA}.Type`, value.type);
  }
  if (
    value.enum !== undefined &&
    !(Array.isArray(value.enum) && value.enum.every((entry) => typeof entry === 'string'))
  ) {
    throw invalid(`Invalid value at '${snake(at)}.enum': only strings are allowed.`);
  }
  if (isObject(value.properties))
    for (const [name, member] of Object.entries(value.properties)) checkSchema(member, `${at}.properties[${name}]`);
  if (value.items !== undefined) checkSchema(value.items, `${at}.items`);
  if (Array.isArray(value.anyOf)) value.anyOf.forEach((member, index) => checkSchema(member, `${at}.anyOf[${index}]`));
}

function checkPart(part: unknown, at: string): Json {
  const value = message(part, at, 'Part');
  allowOnly(value, PART, at);
  const data = PART_DATA.filter((key) => value[key] !== undefined);
  if (data.length !== 1)
    throw invalid(
      `* GenerateContentRequest.${snake(at)}.data: required oneof field 'data' must have one initialized field`,
    );
  scalar(value.text, `${at}.text`, 'TYPE_STRING');
  scalar(value.thought, `${at}.thought`, 'TYPE_BOOL');
  scalar(value.thoughtSignature, `${at}.thoughtSignature`, 'TYPE_BYTES');
  if (value.text === '')
    throw invalid(
      'Unable to submit request because it has an empty text parameter. Add a value to the parameter and try again.',
    );
  if (value.inlineData !== undefined) {
    const inline = message(value.inlineData, `${at}.inlineData`, 'Blob');
    allowOnly(inline, new Set(['mimeType', 'data']), `${at}.inlineData`);
    if (!inline.mimeType || !inline.data)
      throw invalid(`* GenerateContentRequest.${snake(at)}.inline_data: mime_type and data are required`);
    scalar(inline.data, `${at}.inlineData.data`, 'TYPE_BYTES');
  }
  if (value.fileData !== undefined) {
    const file = message(value.fileData, `${at}.fileData`, 'FileData');
    allowOnly(file, new Set(['mimeType', 'fileUri']), `${at}.fileData`);
    if (!file.fileUri) throw invalid(`* GenerateContentRequest.${snake(at)}.file_data.file_uri: is required`);
  }
  if (value.functionCall !== undefined) {
    const call = message(value.functionCall, `${at}.functionCall`, 'FunctionCall');
    allowOnly(call, new Set(['id', 'name', 'args']), `${at}.functionCall`);
    scalar(call.id, `${at}.functionCall.id`, 'TYPE_STRING');
    if (typeof call.name !== 'string' || call.name === '')
      throw invalid(`* GenerateContentRequest.${snake(at)}.function_call.name: Name cannot be empty.`);
    if (call.args !== undefined) message(call.args, `${at}.functionCall.args`, 'Struct');
  }
  if (value.functionResponse !== undefined) {
    const response = message(value.functionResponse, `${at}.functionResponse`, 'FunctionResponse');
    allowOnly(
      response,
      new Set(['id', 'name', 'response', 'parts', 'willContinue', 'scheduling']),
      `${at}.functionResponse`,
    );
    scalar(response.id, `${at}.functionResponse.id`, 'TYPE_STRING');
    if (typeof response.name !== 'string' || response.name === '')
      throw invalid(`* GenerateContentRequest.${snake(at)}.function_response.name: Name cannot be empty.`);
    if (response.response === undefined)
      throw invalid(`* GenerateContentRequest.${snake(at)}.function_response.response: is required`);
    message(response.response, `${at}.functionResponse.response`, 'Struct');
  }
  return value;
}

function checkContent(content: unknown, at: string): { role: string; parts: Json[] } {
  const value = message(content, at, 'Content');
  allowOnly(value, new Set(['role', 'parts']), at);
  // Google takes an unset role as the user's (a single turn needs none).
  if (value.role !== undefined && value.role !== 'user' && value.role !== 'model')
    throw invalid('Please use a valid role: user, model.');
  if (!Array.isArray(value.parts) || value.parts.length === 0)
    throw invalid(`* GenerateContentRequest.${snake(at)}.parts: contents.parts must not be empty.`);
  return {
    role: (value.role as string | undefined) ?? 'user',
    parts: value.parts.map((part: unknown, index) => checkPart(part, `${at}.parts[${index}]`)),
  };
}

/** Contents as Google checks them: turns, who calls and who answers, and a Gemini 3 model's thought signatures. */
function checkContents(contents: unknown, model: string, issued: ReadonlySet<string>): Json[] {
  if (contents === undefined || (Array.isArray(contents) && contents.length === 0))
    throw invalid('* GenerateContentRequest.contents: contents is not specified');
  const turns = list(contents, 'contents', `${V1BETA}.Content`).map((content, index) =>
    checkContent(content, `contents[${index}]`),
  );
  turns.forEach((turn, index) => {
    const calls = turn.parts.filter((part) => part.functionCall !== undefined);
    const responses = turn.parts.filter((part) => part.functionResponse !== undefined);
    if (turn.role === 'user' && calls.length > 0)
      throw invalid('Please ensure that function call turns come from the model.');
    if (turn.role === 'model' && responses.length > 0)
      throw invalid('Please ensure that function responses come in a user turn.');
    if (responses.length > 0) {
      const previous = turns[index - 1];
      const called = previous?.role === 'model' ? previous.parts.filter((part) => part.functionCall !== undefined) : [];
      const calledNames = new Set(called.map((part) => (part.functionCall as Json).name));
      if (called.length === 0 || responses.some((part) => !calledNames.has((part.functionResponse as Json).name))) {
        throw invalid('Please ensure that function response turn comes immediately after a function call turn.');
      }
      if (called.length !== responses.length) {
        throw invalid(
          'Please ensure that the number of function response parts is equal to the number of function call ' +
            'parts of the function call turn.',
        );
      }
    }
    // Gemini 3 checks the first call of every replayed step for the signature it issued with it.
    if (model.includes('gemini-3') && calls.length > 0) {
      const signature = calls[0]!.thoughtSignature;
      if (typeof signature !== 'string') {
        const name = (calls[0]!.functionCall as Json).name as string;
        throw invalid(
          `Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call \`default_api:${name}\` , position ${index + 1}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.`,
        );
      }
      if (!issued.has(signature) && !BYPASS_SIGNATURES.has(signature)) throw invalid('Corrupted thought signature.');
    }
  });
  return turns;
}

function checkGenerationConfig(config: unknown): void {
  const value = message(config, 'generationConfig', 'GenerationConfig');
  allowOnly(value, GENERATION, 'generationConfig');
  for (const [field, type] of Object.entries(GENERATION_TYPES)) scalar(value[field], `generationConfig.${field}`, type);
  if (value.stopSequences !== undefined) {
    const stops = list(value.stopSequences, 'generationConfig.stopSequences', 'TYPE_STRING');
    stops.forEach((stop, index) => scalar(stop, `generationConfig.stopSequences[${index}]`, 'TYPE_STRING'));
    if (stops.length > 5)
      throw invalid(
        '* GenerateContentRequest.generation_config.stop_sequences: the number of stop sequences must be at most 5',
      );
  }
  if (typeof value.temperature === 'number' && (value.temperature < 0 || value.temperature > 2)) {
    throw invalid('* GenerateContentRequest.generation_config.temperature: must be between 0 and 2');
  }
  if (value.responseModalities !== undefined) {
    list(value.responseModalities, 'generationConfig.responseModalities', `${V1BETA}.Modality`).forEach(
      (modality, index) =>
        enumeration(modality, `generationConfig.responseModalities[${index}]`, 'Modality', ['TEXT', 'IMAGE', 'AUDIO']),
    );
  }
  if (value.thinkingConfig !== undefined) {
    const thinking = message(value.thinkingConfig, 'generationConfig.thinkingConfig', 'ThinkingConfig');
    allowOnly(
      thinking,
      new Set(['includeThoughts', 'thinkingBudget', 'thinkingLevel']),
      'generationConfig.thinkingConfig',
    );
    scalar(thinking.includeThoughts, 'generationConfig.thinkingConfig.includeThoughts', 'TYPE_BOOL');
    scalar(thinking.thinkingBudget, 'generationConfig.thinkingConfig.thinkingBudget', 'TYPE_INT32');
    enumeration(thinking.thinkingLevel, 'generationConfig.thinkingConfig.thinkingLevel', 'ThinkingLevel', [
      'THINKING_LEVEL_UNSPECIFIED',
      'MINIMAL',
      'LOW',
      'MEDIUM',
      'HIGH',
    ]);
  }
  if (value.responseSchema !== undefined) checkSchema(value.responseSchema, 'generationConfig.responseSchema');
  if (value.responseSchema !== undefined && value.responseJsonSchema !== undefined) {
    throw invalid(
      '* GenerateContentRequest.generation_config.response_schema: response_schema and response_json_schema ' +
        'cannot be both set.',
    );
  }
}

/** The function declarations the request offers, each checked. */
export function declarationsOf(body: Json): Json[] {
  if (body.tools === undefined) return [];
  return list(body.tools, 'tools', `${V1BETA}.Tool`).flatMap((tool, index) => {
    const value = message(tool, `tools[${index}]`, 'Tool');
    allowOnly(value, TOOL, `tools[${index}]`);
    if (value.functionDeclarations === undefined) return [];
    return list(
      value.functionDeclarations,
      `tools[${index}].functionDeclarations`,
      `${V1BETA}.FunctionDeclaration`,
    ).map((declaration, at) => {
      const where = `tools[${index}].functionDeclarations[${at}]`;
      const checked = message(declaration, where, 'FunctionDeclaration');
      allowOnly(checked, DECLARATION, where);
      if (typeof checked.name !== 'string' || !/^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$/.test(checked.name)) {
        throw invalid(
          `* GenerateContentRequest.${snake(where)}.name: Invalid function name. Must start with a letter or an ` +
            `underscore. Must be a-z, A-Z, 0-9, or contain underscores, dots, colons and dashes, with a maximum ` +
            `length of 64.`,
        );
      }
      if (checked.parameters !== undefined) checkSchema(checked.parameters, `${where}.parameters`);
      if (checked.parameters !== undefined && checked.parametersJsonSchema !== undefined) {
        throw invalid(
          `* GenerateContentRequest.${snake(where)}: parameters and parameters_json_schema cannot be both set.`,
        );
      }
      return checked;
    });
  });
}

function checkToolConfig(toolConfig: unknown, names: readonly string[]): void {
  const value = message(toolConfig, 'toolConfig', 'ToolConfig');
  allowOnly(value, new Set(['functionCallingConfig', 'retrievalConfig']), 'toolConfig');
  if (value.functionCallingConfig === undefined) return;
  const config = message(value.functionCallingConfig, 'toolConfig.functionCallingConfig', 'FunctionCallingConfig');
  allowOnly(config, new Set(['mode', 'allowedFunctionNames']), 'toolConfig.functionCallingConfig');
  enumeration(config.mode, 'toolConfig.functionCallingConfig.mode', 'FunctionCallingConfig.Mode', [
    'MODE_UNSPECIFIED',
    'AUTO',
    'ANY',
    'NONE',
    'VALIDATED',
  ]);
  const allowed = config.allowedFunctionNames;
  if (allowed === undefined) return;
  if (config.mode !== 'ANY' && config.mode !== 'VALIDATED') {
    throw invalid(
      '* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: only allowed when ' +
        'mode is ANY.',
    );
  }
  if (
    list(allowed, 'toolConfig.functionCallingConfig.allowedFunctionNames', 'TYPE_STRING').some(
      (name) => !names.includes(name as string),
    )
  ) {
    throw invalid(
      '* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: unknown function name.',
    );
  }
}

function checkSafetySettings(settings: unknown): void {
  const seen = new Set<unknown>();
  list(settings, 'safetySettings', `${V1BETA}.SafetySetting`).forEach((setting, index) => {
    const at = `safetySettings[${index}]`;
    const value = message(setting, at, 'SafetySetting');
    allowOnly(value, new Set(['category', 'threshold', 'method']), at);
    enumeration(value.category, `${at}.category`, 'HarmCategory', HARM_CATEGORIES);
    enumeration(value.threshold, `${at}.threshold`, 'SafetySetting.HarmBlockThreshold', THRESHOLDS);
    if (seen.has(value.category))
      throw invalid(
        `* GenerateContentRequest.safety_settings[${index}]: Duplicate category in safety settings: ` +
          `${String(value.category)}`,
      );
    seen.add(value.category);
  });
}

/**
 * A `generateContent` / `streamGenerateContent` body (or `countTokens`' `generateContentRequest`, which names its
 * model).
 */
export function checkGenerateRequest(
  body: Json,
  model: string,
  issued: ReadonlySet<string>,
  options: { named?: boolean } = {},
): Json[] {
  allowOnly(body, options.named ? new Set([...TOP_LEVEL, 'model']) : TOP_LEVEL);
  const turns = checkContents(body.contents, model, issued);
  if (body.systemInstruction !== undefined) {
    const instruction = message(body.systemInstruction, 'systemInstruction', 'Content');
    allowOnly(instruction, new Set(['role', 'parts']), 'systemInstruction');
    if (!Array.isArray(instruction.parts) || instruction.parts.length === 0) {
      throw invalid('* GenerateContentRequest.system_instruction.parts: contents.parts must not be empty.');
    }
    if (instruction.role !== undefined && instruction.role !== 'user' && instruction.role !== 'system')
      throw invalid('Please use a valid role: user, model.');
    instruction.parts.forEach((part: unknown, index) => checkPart(part, `systemInstruction.parts[${index}]`));
  }
  if (body.generationConfig !== undefined) checkGenerationConfig(body.generationConfig);
  const names = declarationsOf(body).map((declaration) => declaration.name as string);
  if (body.toolConfig !== undefined) checkToolConfig(body.toolConfig, names);
  if (body.safetySettings !== undefined) checkSafetySettings(body.safetySettings);
  if (body.cachedContent !== undefined) {
    scalar(body.cachedContent, 'cachedContent', 'TYPE_STRING');
    if (!/^cachedContents\/[A-Za-z0-9_-]+$/.test(body.cachedContent as string)) {
      throw invalid(
        `* GenerateContentRequest.cached_content: Invalid resource name: ${JSON.stringify(body.cachedContent)}`,
      );
    }
  }
  return turns;
}

/** A `countTokens` body: `contents`, or a whole `generateContentRequest` naming its model, not both. */
export function checkCountRequest(body: Json, model: string, issued: ReadonlySet<string>): Json[] {
  allowOnly(body, new Set(['contents', 'generateContentRequest']));
  if (body.contents !== undefined && body.generateContentRequest !== undefined) {
    throw invalid('* CountTokensRequest: contents and generate_content_request cannot both be set.');
  }
  if (body.generateContentRequest === undefined) {
    if (body.contents === undefined) throw invalid('* CountTokensRequest.contents: contents is not specified');
    return checkContents(body.contents, model, issued);
  }
  const inner = message(body.generateContentRequest, 'generateContentRequest', 'GenerateContentRequest');
  if (typeof inner.model !== 'string' || !/^models\/[^/]+$/.test(inner.model)) {
    throw invalid('* CountTokensRequest.generate_content_request.model: unexpected model name format');
  }
  return checkGenerateRequest(inner, model, issued, { named: true });
}

/** One `EmbedContentRequest` (the body of `:embedContent`, or an element of `:batchEmbedContents`' `requests`). */
export function checkEmbedContent(request: unknown, at: string | undefined, modelPath: string): Json {
  const value = at === undefined ? (request as Json) : message(request, at, 'EmbedContentRequest');
  allowOnly(value, EMBED_REQUEST, at);
  const prefix = at === undefined ? 'EmbedContentRequest' : `BatchEmbedContentsRequest.${at}`;
  const where = (field: string) => (at === undefined ? field : `${at}.${field}`);
  if (at !== undefined && value.model !== modelPath) throw invalid(`* ${prefix}.model: model must be ${modelPath}.`);
  if (at === undefined && value.model !== undefined && value.model !== modelPath)
    throw invalid(`* ${prefix}.model: model must be ${modelPath}.`);
  if (value.content === undefined) throw invalid(`* ${prefix}.content: is required`);
  const content = message(value.content, where('content'), 'Content');
  allowOnly(content, new Set(['role', 'parts']), where('content'));
  if (!Array.isArray(content.parts) || content.parts.length === 0)
    throw invalid(`* ${prefix}.content.parts: must not be empty`);
  content.parts.forEach((part: unknown, index) => checkPart(part, `${where('content')}.parts[${index}]`));
  enumeration(value.taskType, where('taskType'), 'TaskType', TASK_TYPES);
  scalar(value.title, where('title'), 'TYPE_STRING');
  scalar(value.outputDimensionality, where('outputDimensionality'), 'TYPE_INT32');
  return value;
}

/** A `batchEmbedContents` body: up to 100 requests, each naming the model of the URL. */
export function checkBatchEmbedRequest(body: Json, modelPath: string): Json[] {
  allowOnly(body, new Set(['requests']));
  if (body.requests === undefined || (Array.isArray(body.requests) && body.requests.length === 0)) {
    throw invalid('* BatchEmbedContentsRequest.requests: is required');
  }
  const requests = list(body.requests, 'requests', `${V1BETA}.EmbedContentRequest`);
  if (requests.length > 100)
    throw invalid('* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch\n');
  return requests.map((request, index) => checkEmbedContent(request, `requests[${index}]`, modelPath));
}
