import { invalidRequest } from '../../../shared/errors.js';
import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import type { CallContext } from '../types.js';
import { convertJsonSchema } from './convert-json-schema.js';
import { convertToGeminiContents, type GeminiPrompt } from './convert-to-gemini-contents.js';
import { geminiThinkingConfig, readReasoningEffort } from './gemini-thinking.js';

interface FunctionDeclaration {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
}

interface FunctionCallingConfig {
  mode: 'AUTO' | 'ANY' | 'NONE';
  allowedFunctionNames?: string[];
}

export interface GeminiRequest extends GeminiPrompt {
  tools?: Array<{ functionDeclarations: FunctionDeclaration[] } | { googleSearch: Record<string, never> }>;
  toolConfig?: { functionCallingConfig: FunctionCallingConfig };
  generationConfig?: Record<string, unknown>;
}

/** Request fields this module maps; any other field the client set has no Gemini counterpart. */
const MAPPED = new Set([
  'model',
  'messages',
  'stream',
  'stream_options',
  'temperature',
  'top_p',
  'max_tokens',
  'max_completion_tokens',
  'stop',
  'n',
  'seed',
  'presence_penalty',
  'frequency_penalty',
  'response_format',
  'tools',
  'tool_choice',
  'reasoning_effort',
  'web_search_options',
]);

/** Sampling and limits: OpenAI name → Gemini `generationConfig` name. */
const GENERATION_FIELDS = [
  ['temperature', 'temperature'],
  ['top_p', 'topP'],
  ['n', 'candidateCount'],
  ['seed', 'seed'],
  ['presence_penalty', 'presencePenalty'],
  ['frequency_penalty', 'frequencyPenalty'],
] as const;

function buildGenerationConfig(
  request: ChatCompletionRequest,
  upstreamModel: string,
  schemaDrops: Set<string>,
): Record<string, unknown> {
  const config: Record<string, unknown> = {};
  // Thinking shares `maxOutputTokens` with the answer on Gemini, as reasoning shares
  // `max_completion_tokens` on OpenAI, so the token limit is passed unchanged.
  const effort = readReasoningEffort(request.reasoning_effort);
  if (effort !== undefined) config.thinkingConfig = geminiThinkingConfig(effort, upstreamModel);
  for (const [from, to] of GENERATION_FIELDS) if (request[from] != null) config[to] = request[from];
  const maxTokens = request.max_completion_tokens ?? request.max_tokens;
  if (maxTokens != null) config.maxOutputTokens = maxTokens;
  if (request.stop != null) config.stopSequences = typeof request.stop === 'string' ? [request.stop] : request.stop;

  const format = request.response_format;
  if (format?.type === 'json_object' || format?.type === 'json_schema') config.responseMimeType = 'application/json';
  if (format?.type === 'json_schema') {
    const { schema, dropped } = convertJsonSchema(format.json_schema.schema, 'response_format.json_schema.schema');
    if (schema !== undefined) config.responseSchema = schema;
    for (const keyword of dropped) schemaDrops.add(keyword);
  }
  return config;
}

function buildDeclarations(request: ChatCompletionRequest, schemaDrops: Set<string>): FunctionDeclaration[] {
  const declarations: FunctionDeclaration[] = [];
  request.tools?.forEach((tool, index) => {
    // Custom (free-form grammar) tools have no Gemini form; dropping one would silently change what the model can do.
    if (tool.type !== 'function') throw invalidRequest('Gemini models support only function tools.', `tools[${index}]`);
    const { name, description, parameters } = tool.function;
    const declaration: FunctionDeclaration = { name };
    if (description) declaration.description = description;
    const converted = convertJsonSchema(parameters, `tools[${index}].function.parameters`);
    if (converted.schema !== undefined) declaration.parameters = converted.schema;
    for (const keyword of converted.dropped) schemaDrops.add(keyword);
    declarations.push(declaration);
  });
  return declarations;
}

/**
 * `tool_choice` → calling mode; `allowed_tools` in auto mode narrows the declarations instead (Gemini's names list
 * needs ANY).
 */
function applyToolChoice(
  choice: ChatCompletionRequest['tool_choice'],
  declarations: FunctionDeclaration[],
): { config?: FunctionCallingConfig; declarations: FunctionDeclaration[] } {
  if (choice == null) return { declarations };
  if (choice === 'auto') return { config: { mode: 'AUTO' }, declarations };
  if (choice === 'required') return { config: { mode: 'ANY' }, declarations };
  if (choice === 'none') return { config: { mode: 'NONE' }, declarations };
  if (choice.type === 'function') {
    const { name } = (choice as { function: { name: string } }).function;
    return { config: { mode: 'ANY', allowedFunctionNames: [name] }, declarations };
  }
  if (choice.type === 'allowed_tools') {
    const allowed = choice.allowed_tools as { mode?: unknown; tools?: Array<{ function?: { name?: unknown } }> };
    const names = (allowed.tools ?? [])
      .map((tool) => tool.function?.name)
      .filter((name): name is string => typeof name === 'string');
    if (allowed.mode === 'required') return { config: { mode: 'ANY', allowedFunctionNames: names }, declarations };
    return {
      config: { mode: 'AUTO' },
      declarations: declarations.filter((declaration) => names.includes(declaration.name)),
    };
  }
  throw invalidRequest('Gemini models support only function tools.', 'tool_choice');
}

/**
 * OpenAI chat request → Gemini `GenerateContentRequest`. Fields with no
 * Gemini counterpart (logit_bias, logprobs, parallel_tool_calls, user, and
 * any other the client set) are dropped, and so are schema keywords outside
 * Gemini's subset; either is reported in one warning per request.
 * `reasoning_effort` becomes `generationConfig.thinkingConfig` (see `gemini-thinking.ts`).
 */
export function buildGeminiRequest(request: ChatCompletionRequest, ctx: CallContext): GeminiRequest {
  if (request.functions != null || request.function_call != null) {
    throw invalidRequest(
      'The deprecated `functions` parameter is not supported for Gemini models; use `tools`.',
      request.functions != null ? 'functions' : 'function_call',
    );
  }
  const body: GeminiRequest = convertToGeminiContents(request.messages);
  const schemaDrops = new Set<string>();
  const dropped: string[] = [];

  const { config, declarations } = applyToolChoice(request.tool_choice, buildDeclarations(request, schemaDrops));
  if (declarations.length > 0) {
    body.tools = [{ functionDeclarations: declarations }];
    if (config !== undefined) body.toolConfig = { functionCallingConfig: config };
  } else if (request.tool_choice != null) {
    dropped.push('tool_choice');
  }
  // The vendor's own web search: grounding with Google Search, a tool entry of its own. Gemini 2 models take it
  // alone, not beside function declarations (combining them came with Gemini 3): there the functions win.
  if (request.web_search_options != null) {
    if (declarations.length === 0 || !/^gemini-2\b/.test(ctx.upstreamModel))
      body.tools = [...(body.tools ?? []), { googleSearch: {} }];
    else dropped.push('web_search_options');
  }

  const generationConfig = buildGenerationConfig(request, ctx.upstreamModel, schemaDrops);
  if (Object.keys(generationConfig).length > 0) body.generationConfig = generationConfig;

  for (const [key, value] of Object.entries(request)) if (value != null && !MAPPED.has(key)) dropped.push(key);
  if (dropped.length > 0 || schemaDrops.size > 0) {
    ctx.log.warn(
      { reqId: ctx.requestId, vendor: ctx.channel.vendor, dropped, droppedSchemaKeywords: [...schemaDrops].sort() },
      'Gemini has no counterpart for these request parameters or schema keywords; dropped them',
    );
  }
  return body;
}
