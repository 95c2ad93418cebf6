import { invalidRequest } from '../../../shared/errors.js';
import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import type { AnthropicTool, AnthropicToolChoice } from './anthropic-types.js';

export interface AnthropicToolSettings {
  tools?: AnthropicTool[];
  tool_choice?: AnthropicToolChoice;
}

type FunctionDefinition = NonNullable<ChatCompletionRequest['functions']>[number];

const EMPTY_SCHEMA = { type: 'object', properties: {} };

function convertFunction(definition: FunctionDefinition): AnthropicTool {
  const tool: AnthropicTool = {
    name: definition.name,
    input_schema: definition.parameters ?? EMPTY_SCHEMA,
  };
  if (definition.description !== undefined) tool.description = definition.description;
  if (definition.strict === true) tool.strict = true;
  return tool;
}

function convertToolChoice(choice: NonNullable<ChatCompletionRequest['tool_choice']>): AnthropicToolChoice {
  if (choice === 'auto') return { type: 'auto' };
  if (choice === 'required') return { type: 'any' };
  if (choice === 'none') return { type: 'none' };
  if (choice.type === 'function') return { type: 'tool', name: choice.function.name };
  throw invalidRequest(`tool_choice of type \`${choice.type}\` is not supported by this model.`, 'tool_choice');
}

function convertFunctionCall(choice: NonNullable<ChatCompletionRequest['function_call']>): AnthropicToolChoice {
  if (choice === 'auto') return { type: 'auto' };
  if (choice === 'none') return { type: 'none' };
  return { type: 'tool', name: choice.name };
}

/**
 * Maps `tools`/`tool_choice`/`parallel_tool_calls`, and the legacy
 * `functions`/`function_call` the same way. Legacy calls are answered one at
 * a time in OpenAI, so parallel tool use is turned off for them (the answer's
 * legacy shape is the encoder's, from `usesLegacyFunctions`). Without tools,
 * a tool choice means nothing and is not sent.
 */
export function convertToAnthropicTools(request: ChatCompletionRequest): AnthropicToolSettings {
  const hasTools = request.tools != null && request.tools.length > 0;
  const hasFunctions = request.functions != null && request.functions.length > 0;
  if (hasTools && hasFunctions) {
    throw invalidRequest('Send either `tools` or the deprecated `functions`, not both.', 'functions');
  }

  if (hasFunctions) {
    const tools = request.functions!.map(convertFunction);
    const choice =
      request.function_call == null ? { type: 'auto' as const } : convertFunctionCall(request.function_call);
    const tool_choice = choice.type === 'none' ? choice : { ...choice, disable_parallel_tool_use: true };
    return { tools, tool_choice };
  }
  if (!hasTools) return {};

  const tools = request.tools!.map((tool, index) => {
    if (tool.type !== 'function') {
      throw invalidRequest(
        `Tools of type \`${tool.type}\` are not supported by this model; use function tools.`,
        `tools[${index}]`,
      );
    }
    return convertFunction(tool.function);
  });
  let tool_choice = request.tool_choice == null ? undefined : convertToolChoice(request.tool_choice);
  if (request.parallel_tool_calls === false && tool_choice?.type !== 'none') {
    tool_choice = { ...(tool_choice ?? { type: 'auto' }), disable_parallel_tool_use: true };
  }
  return tool_choice === undefined ? { tools } : { tools, tool_choice };
}
