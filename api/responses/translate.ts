import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { loopSlices } from '../../shared/loop-slices.js';
import { invalidRequest } from '../../shared/errors.js';
import type { ConversationItem, ResponseShell } from '../../shared/responses.js';
import type { ChatCompletionRequest, ChatMessage } from '../../shared/schemas/chat.js';
import type { ResponsesRequest } from '../../shared/schemas/responses.js';
import { flatToolName } from '../../shared/responses-tools.js';
import { prefixedToolName } from '../../shared/mcp/calls.js';
import type { McpApproval } from '../../shared/mcp/tool-loop.js';
import { servingTier } from '../../shared/scheduling/index.js';
import { applyChatSettings, type ChatToolCall, type ChatUserPart } from '../dialects/chat-request.js';
import {
  chatToolFields,
  type ChoiceWording,
  type DeclaredChoice,
  type DeclaredFunction,
  type DeclaredTools,
} from '../dialects/chat-tools.js';
import { invalidAt, paramOf, parseAt, type FieldPath } from '../dialects/field-path.js';

/*
 * The Responses API over the chat adapters. A request's input items are
 * checked and normalised here (each given an id, the form they are stored
 * in), then the stored conversation a request chains onto plus its input
 * become the messages of a chat request: instructions as a system message,
 * assistant messages and function calls as assistant turns with tool_calls,
 * function call outputs as tool messages. Only function tools exist on the
 * chat side: a namespace's functions travel under flat names (shared/responses-tools.ts), built-in tools are
 * declined (left out) unless the request requires one, and a type this API does not have is refused. This file
 * reads the Responses API's shapes; what chat gets for its tools, choice and settings is the dialect layer's
 * policy (api/dialects/), the same for every dialect.
 */

// ---- ids ----

const randomId = (prefix: string) => `${prefix}_${randomBytes(24).toString('hex')}`;

/** `resp_` and 48 hex digits. */
export function newResponseId(): string {
  return randomId('resp');
}

// ---- refusals ----

type Path = FieldPath;

const quoteList = (values: readonly string[]) => {
  const quoted = values.map((value) => `'${value}'`);
  return quoted.length <= 1 ? quoted.join('') : `${quoted.slice(0, -1).join(', ')} and ${quoted.at(-1)}`;
};

const unsupportedValue = (value: string, path: Path, where: string, supported: readonly string[]) =>
  invalidRequest(
    `Invalid value for '${paramOf(path)}': '${value}' is not supported in ${where}. Supported values are: ` +
      `${quoteList(supported)}.`,
    paramOf(path),
    'invalid_value',
  );

/**
 * An image a vendor (or the gateway) will fetch: web URLs, inline data, and
 * Cloud Storage references, the rule chat's `image_url` follows.
 */
const fetchableImageUrl = /^(?:(?:https?|gs):\/\/|data:)/i;
/** A scheme prefix: base64 never holds a colon, so inline data that starts like this is a URL in disguise. */
const urlScheme = /^[a-z][a-z0-9+.-]{0,31}:/i;

const functionNamePattern = /^[a-zA-Z0-9_-]{1,64}$/;
const functionName = z
  .string()
  .regex(functionNamePattern, 'must contain only a-z, A-Z, 0-9, underscores and dashes, at most 64 characters');

// ---- input items ----

type Role = 'user' | 'system' | 'developer' | 'assistant';

const itemTypes = [
  'message',
  'function_call',
  'function_call_output',
  'item_reference',
  'reasoning',
  'mcp_list_tools',
  'mcp_call',
  'mcp_approval_request',
  'mcp_approval_response',
] as const;
const userParts = ['input_text', 'input_image', 'input_file'] as const;
const assistantParts = ['output_text', 'refusal'] as const;
/** Chat's system and developer messages hold text only. */
const instructionParts = ['input_text'] as const;
/** A chat tool message holds text only. */
const outputParts = ['input_text'] as const;

const partsFor: Record<Role, readonly string[]> = {
  user: userParts,
  system: instructionParts,
  developer: instructionParts,
  assistant: assistantParts,
};

const typeShape = z.looseObject({ type: z.string() });
const itemTypeShape = z.looseObject({ type: z.string().nullish() });
const textShape = z.looseObject({ text: z.string() });
const refusalShape = z.looseObject({ refusal: z.string() });
const imageShape = z.looseObject({
  image_url: z.string().nullish(),
  file_id: z.string().nullish(),
  detail: z.enum(['auto', 'low', 'high', 'original']).nullish(),
});
const fileShape = z.looseObject({
  file_data: z.string().nullish(),
  filename: z.string().nullish(),
  file_id: z.string().nullish(),
  file_url: z.string().nullish(),
});
const itemId = z.string().min(1).nullish();
const messageShape = z.looseObject({
  id: itemId,
  role: z.enum(['user', 'system', 'developer', 'assistant']),
  content: z.union([z.string(), z.array(z.unknown())]),
});
const functionCallShape = z.looseObject({
  id: itemId,
  call_id: z.string().min(1),
  name: z.string().min(1),
  namespace: z.string().min(1).nullish(),
  arguments: z.string(),
});
const functionCallOutputShape = z.looseObject({
  id: itemId,
  call_id: z.string().min(1).max(64),
  output: z.union([z.string(), z.array(z.unknown())]),
});
const itemReferenceShape = z.looseObject({ id: z.string().min(1) });
// The tool loop's items (a previous response's output, sent back as input), and the client's word on a call.
const mcpListToolsShape = z.looseObject({
  id: itemId,
  server_label: z.string().min(1).max(64),
  tools: z.array(z.unknown()),
  error: z.string().nullish(),
});
const mcpCallShape = z.looseObject({
  id: z.string().min(1),
  server_label: z.string().min(1).max(64),
  name: z.string().min(1).max(512),
  arguments: z.string(),
  output: z.string().nullish(),
  error: z.unknown().nullish(),
  status: z.string().nullish(),
  approval_request_id: z.string().nullish(),
});
const mcpApprovalRequestShape = z.looseObject({
  id: z.string().min(1),
  server_label: z.string().min(1).max(64),
  name: z.string().min(1).max(512),
  arguments: z.string(),
});
const mcpApprovalResponseShape = z.looseObject({
  id: itemId,
  approval_request_id: z.string().min(1),
  approve: z.boolean(),
  reason: z.string().nullish(),
});
const reasoningShape = z.looseObject({ id: itemId });

/**
 * A request's `input` as the items it is stored as: a string is one user
 * message; every item is checked and gets an id. The list keeps the order
 * and indices of the request's items (item references are resolved later).
 */
export function normaliseInput(input: ResponsesRequest['input']): ConversationItem[] {
  if (input === undefined) return [];
  if (typeof input === 'string') {
    return [
      {
        type: 'message',
        id: randomId('msg'),
        role: 'user',
        status: 'completed',
        content: [{ type: 'input_text', text: input }],
      },
    ];
  }
  return input.map((item, index) => normaliseItem(item, ['input', index]));
}

/**
 * `normaliseInput` for the request thread: checking every part of a long
 * input is tens of microseconds an item, so it yields to the event loop
 * every couple of milliseconds (a 10,000-message input would otherwise
 * hold every other request for a quarter of a second).
 */
export async function normaliseInputSliced(input: ResponsesRequest['input']): Promise<ConversationItem[]> {
  if (input === undefined || typeof input === 'string') return normaliseInput(input);
  const pause = loopSlices();
  const items: ConversationItem[] = [];
  for (let index = 0; index < input.length; index++) {
    items.push(normaliseItem(input[index]!, ['input', index]));
    await pause();
  }
  return items;
}

function normaliseItem(raw: Record<string, unknown>, path: Path): ConversationItem {
  const { type } = parseAt(itemTypeShape, raw, path);
  if (type == null) {
    // An item reference may leave out its type; an easy message may too, but it has a role and content.
    if (raw.role === undefined && raw.content === undefined && raw.id !== undefined)
      return normaliseReference(raw, path);
    return normaliseMessage(raw, path);
  }
  switch (type) {
    case 'message':
      return normaliseMessage(raw, path);
    case 'function_call': {
      const call = parseAt(functionCallShape, raw, path);
      return {
        type: 'function_call',
        id: call.id ?? randomId('fc'),
        call_id: call.call_id,
        ...(call.namespace != null && { namespace: call.namespace }),
        name: call.name,
        arguments: call.arguments,
        status: 'completed',
      };
    }
    case 'function_call_output': {
      const result = parseAt(functionCallOutputShape, raw, path);
      const output =
        typeof result.output === 'string'
          ? result.output
          : result.output.map((part, j) =>
              normalisePart(part, outputParts, [...path, 'output', j], 'a function call output'),
            );
      return {
        type: 'function_call_output',
        id: result.id ?? randomId('fco'),
        call_id: result.call_id,
        output,
        status: 'completed',
      };
    }
    case 'item_reference':
      return normaliseReference(raw, path);
    case 'mcp_list_tools': {
      const list = parseAt(mcpListToolsShape, raw, path);
      return {
        type,
        id: list.id ?? randomId('mcpl'),
        server_label: list.server_label,
        tools: list.tools,
        ...(list.error != null ? { error: list.error } : {}),
      };
    }
    case 'mcp_call': {
      const call = parseAt(mcpCallShape, raw, path);
      return {
        type,
        id: call.id,
        server_label: call.server_label,
        name: call.name,
        arguments: call.arguments,
        output: call.output ?? null,
        error: call.error ?? null,
        status: call.status ?? 'completed',
        approval_request_id: call.approval_request_id ?? null,
      };
    }
    case 'mcp_approval_request': {
      const asked = parseAt(mcpApprovalRequestShape, raw, path);
      return { type, id: asked.id, server_label: asked.server_label, name: asked.name, arguments: asked.arguments };
    }
    case 'mcp_approval_response': {
      const answer = parseAt(mcpApprovalResponseShape, raw, path);
      return {
        type,
        id: answer.id ?? randomId('mcpa'),
        approval_request_id: answer.approval_request_id,
        approve: answer.approve,
        reason: answer.reason ?? null,
      };
    }
    case 'reasoning': {
      const { id } = parseAt(reasoningShape, raw, path);
      return { ...raw, type: 'reasoning', id: id ?? randomId('rs') };
    }
    default:
      throw unsupportedValue(type, [...path, 'type'], 'an input item of this gateway', itemTypes);
  }
}

function normaliseReference(raw: Record<string, unknown>, path: Path): ConversationItem {
  const { id } = parseAt(itemReferenceShape, raw, path);
  return { type: 'item_reference', id };
}

function normaliseMessage(raw: Record<string, unknown>, path: Path): ConversationItem {
  const message = parseAt(messageShape, raw, path);
  const role = message.role;
  let content: Record<string, unknown>[];
  if (typeof message.content === 'string') {
    content = [
      role === 'assistant'
        ? { type: 'output_text', text: message.content, annotations: [] }
        : { type: 'input_text', text: message.content },
    ];
  } else {
    if (message.content.length === 0)
      throw invalidAt([...path, 'content'], 'empty array. Expected an array with minimum length 1.');
    content = message.content.map((part, j) =>
      normalisePart(part, partsFor[role], [...path, 'content', j], `a '${role}' message`),
    );
  }
  return { type: 'message', id: message.id ?? randomId('msg'), role, status: 'completed', content };
}

function normalisePart(raw: unknown, allowed: readonly string[], path: Path, where: string): Record<string, unknown> {
  const { type } = parseAt(typeShape, raw, path);
  if (!allowed.includes(type)) throw unsupportedValue(type, [...path, 'type'], where, allowed);
  switch (type) {
    case 'input_text':
      return { type, text: parseAt(textShape, raw, path).text };
    case 'output_text':
      return { type, text: parseAt(textShape, raw, path).text, annotations: [] };
    case 'refusal':
      return { type, refusal: parseAt(refusalShape, raw, path).refusal };
    case 'input_image':
      return normaliseImage(raw, path);
    case 'input_file':
      return normaliseFile(raw, path);
    default:
      // Every allowed type is handled above.
      throw unsupportedValue(type, [...path, 'type'], where, allowed);
  }
}

function normaliseImage(raw: unknown, path: Path): Record<string, unknown> {
  const image = parseAt(imageShape, raw, path);
  const param = paramOf([...path, 'image_url']);
  if (image.image_url == null) {
    if (image.file_id != null) {
      throw invalidRequest(
        `Images given by 'file_id' are not supported by this gateway: send the image in 'image_url', as an ` +
          `http(s) URL or a data: URL.`,
        paramOf([...path, 'file_id']),
        'unsupported_parameter',
      );
    }
    throw invalidRequest(`Missing required parameter: '${param}'.`, param, 'missing_required_parameter');
  }
  if (!fetchableImageUrl.test(image.image_url))
    throw invalidAt([...path, 'image_url'], 'expected an http(s) URL, a data: URL or a gs:// URI.');
  return { type: 'input_image', image_url: image.image_url, detail: image.detail ?? 'auto' };
}

function normaliseFile(raw: unknown, path: Path): Record<string, unknown> {
  const file = parseAt(fileShape, raw, path);
  const param = paramOf([...path, 'file_data']);
  if (file.file_data == null) {
    const by = file.file_id != null ? 'file_id' : file.file_url != null ? 'file_url' : undefined;
    if (by) {
      throw invalidRequest(
        `Files given by '${by}' are not supported by this gateway: send the file's content in 'file_data', as ` +
          `base64 data or a data: URL.`,
        paramOf([...path, by]),
        'unsupported_parameter',
      );
    }
    throw invalidRequest(`Missing required parameter: '${param}'.`, param, 'missing_required_parameter');
  }
  if (urlScheme.test(file.file_data) && !/^data:/i.test(file.file_data))
    throw invalidAt([...path, 'file_data'], 'expected base64 data or a data: URL.');
  return { type: 'input_file', file_data: file.file_data, ...(file.filename != null && { filename: file.filename }) };
}

// ---- tools ----

const functionToolShape = z.looseObject({
  type: z.literal('function'),
  name: functionName,
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});

/**
 * The built-in tools of the Responses API (the vendor runs them: search, files, code, images, computers, shells, MCP)
 * and the freeform custom tools: the chat side has no form for them, so they are declined, left out of the request
 * as a model that cannot use a tool would be, unless the request requires one (`tool_choice`).
 */
const declinedToolTypes = new Set([
  'file_search',
  'computer',
  'computer_use_preview',
  'web_search',
  'web_search_2025_08_26',
  'web_search_preview',
  'web_search_preview_2025_03_11',
  'code_interpreter',
  'programmatic_tool_calling',
  'image_generation',
  'local_shell',
  'shell',
  'custom',
  'tool_search',
  'apply_patch',
]);

const namespaceToolShape = z.looseObject({
  type: z.literal('namespace'),
  name: z.string().min(1).max(64),
  description: z.string().nullish(),
  tools: z
    .array(z.looseObject({ type: z.string() }))
    .min(1)
    .max(128),
});

/**
 * A function tool in the dialect layer's terms, under `name` (a namespace's function under its flat name, its
 * description after the namespace's).
 */
function declareFunction(
  fn: z.output<typeof functionToolShape>,
  name: string,
  namespaceDescription?: string | null,
): DeclaredFunction {
  const description = [namespaceDescription, fn.description]
    .filter((text): text is string => text != null && text !== '')
    .join('\n\n');
  return { name, description, parameters: fn.parameters, strict: fn.strict };
}

/**
 * The Responses API's web search tools: served by the vendor's own search where the model has one (the catalog's
 * `web_search`).
 */
const webSearchToolTypes = new Set([
  'web_search',
  'web_search_2025_08_26',
  'web_search_preview',
  'web_search_preview_2025_03_11',
]);

/**
 * The request's tools in the dialect layer's terms: function tools as they are, a namespace's functions each under
 * its flat name; a web search tool as the vendor's own search when the model has one; other built-in tools
 * declined (by their type, or `<namespace>.<type>` inside a namespace); a type this API does not have refused.
 */
function declareTools(tools: ResponsesRequest['tools'], searches: boolean): DeclaredTools {
  const declared: DeclaredTools = { functions: [], declined: [] };
  (tools ?? []).forEach((tool, i) => {
    if (tool.type === 'function') {
      const fn = parseAt(functionToolShape, tool, ['tools', i]);
      declared.functions.push(declareFunction(fn, fn.name));
      return;
    }
    if (tool.type === 'namespace') {
      const space = parseAt(namespaceToolShape, tool, ['tools', i]);
      space.tools.forEach((inner, j) => {
        if (inner.type !== 'function') {
          declared.declined.push(`${space.name}.${inner.type}`);
          return;
        }
        const fn = parseAt(functionToolShape, inner, ['tools', i, 'tools', j]);
        declared.functions.push(declareFunction(fn, flatToolName(space.name, fn.name), space.description));
      });
      return;
    }
    // Run by the gateway's tool loop on the server it names (api/mcp/loop-plan.ts), not declared here.
    if (tool.type === 'mcp') return;
    if (searches && webSearchToolTypes.has(tool.type)) {
      declared.search = {
        name: tool.type,
        settings: { contextSize: tool.search_context_size, userLocation: tool.user_location },
      };
      return;
    }
    if (declinedToolTypes.has(tool.type)) {
      declared.declined.push(tool.type);
      return;
    }
    throw invalidRequest(
      `The tool type '${tool.type}' is not supported by this gateway: function and namespace tools are (built-in ` +
        `tools are left out).`,
      `tools[${i}].type`,
      'unsupported_tool',
    );
  });
  return declared;
}

const toolChoiceFunctionShape = z.looseObject({
  type: z.literal('function'),
  name: z.string().min(1),
  namespace: z.string().min(1).nullish(),
});

/** How the Responses API says a tool choice, for a refusal in its terms. */
const choiceWording: ChoiceWording = {
  path: ['tool_choice'],
  namePath: ['tool_choice', 'name'],
  required: "tool_choice 'required'",
  declined: 'is not supported by this gateway',
};

/**
 * The request's tool choice in the dialect layer's terms. Of the choice objects only a function (by its flat name,
 * when namespaced) has a chat form, and a web search the vendor runs (left to the model); any other is refused.
 */
function declareChoice(choice: ResponsesRequest['tool_choice'], tools: DeclaredTools): DeclaredChoice | undefined {
  if (choice == null || typeof choice === 'string') return choice ?? undefined;
  if (tools.search !== undefined && webSearchToolTypes.has(choice.type))
    return { tool: tools.search.name, function: '' };
  if (choice.type !== 'function') {
    throw invalidRequest(
      `The tool_choice type '${choice.type}' is not supported by this gateway: use 'none', 'auto', 'required' or ` +
        `{"type": "function", "name": …}.`,
      'tool_choice',
      declinedToolTypes.has(choice.type) || choice.type === 'mcp' ? 'unsupported_tool' : 'invalid_value',
    );
  }
  const { name, namespace } = parseAt(toolChoiceFunctionShape, choice, ['tool_choice']);
  return { tool: name, function: namespace != null ? flatToolName(namespace, name) : name };
}

// ---- conversation → chat messages ----

type Part = Record<string, unknown>;
const asString = (value: unknown): string => (typeof value === 'string' ? value : '');
const asParts = (value: unknown): Part[] =>
  Array.isArray(value) ? value.filter((part): part is Part => typeof part === 'object' && part !== null) : [];

/** A part of a stored user, system or developer message as a chat content part (none for what chat cannot carry). */
type UserPart = ChatUserPart;

function chatPart(part: Part): UserPart | undefined {
  switch (part.type) {
    case 'input_text':
      return { type: 'text', text: asString(part.text) };
    case 'input_image': {
      const detail =
        part.detail === 'original' ? 'high' : part.detail === 'low' || part.detail === 'high' ? part.detail : 'auto';
      return { type: 'image_url', image_url: { url: asString(part.image_url), detail } };
    }
    case 'input_file':
      return {
        type: 'file',
        file: {
          file_data: asString(part.file_data),
          ...(typeof part.filename === 'string' && { filename: part.filename }),
        },
      };
    default:
      return undefined;
  }
}

/**
 * Builds the chat messages item by item. Assistant messages and function
 * calls gather into a pending assistant turn: with function calls among
 * them they become ONE assistant message with tool_calls (as chat requires
 * before the tool messages answering them), without, one message each.
 */
class MessageBuilder {
  readonly messages: ChatMessage[] = [];
  readonly callIds = new Set<string>();
  /** The approval requests seen, by id, and the calls the client decided on (run by the tool loop before the model). */
  private readonly asked = new Map<string, ConversationItem>();
  readonly decided: McpApproval[] = [];
  private readonly answered = new Set<string>();
  private pendingTexts: Part[][] = [];
  private pendingCalls: ChatToolCall[] = [];

  /** `param` names the item's place in the request's input; null for an item of the stored conversation. */
  add(item: ConversationItem, param: string | null): void {
    switch (item.type) {
      case 'message': {
        const content = asParts(item.content);
        if (item.role === 'assistant') {
          this.pendingTexts.push(content);
          return;
        }
        this.flush();
        const role = item.role === 'system' || item.role === 'developer' ? item.role : 'user';
        if (role === 'user') {
          const parts = content.map(chatPart).filter((part) => part !== undefined);
          if (parts.length > 0) this.messages.push({ role, content: parts });
        } else {
          const text = content
            .filter((part) => part.type === 'input_text')
            .map((part) => ({ type: 'text' as const, text: asString(part.text) }));
          if (text.length > 0) this.messages.push({ role, content: text });
        }
        return;
      }
      case 'function_call': {
        const callId = asString(item.call_id);
        this.callIds.add(callId);
        // A namespaced tool's call goes back to the vendor under the flat name it was called by.
        const name =
          typeof item.namespace === 'string' ? flatToolName(item.namespace, asString(item.name)) : asString(item.name);
        this.pendingCalls.push({
          id: callId,
          type: 'function',
          function: { name, arguments: asString(item.arguments) },
        });
        return;
      }
      case 'function_call_output': {
        const callId = asString(item.call_id);
        if (param !== null && !this.callIds.has(callId)) {
          throw invalidRequest(
            `No tool call found for function call output with call_id ${callId}.`,
            param,
            'invalid_value',
          );
        }
        this.flush();
        const output =
          typeof item.output === 'string'
            ? item.output
            : asParts(item.output)
                .map((part) => asString(part.text))
                .join('');
        this.messages.push({ role: 'tool', tool_call_id: callId, content: output });
        return;
      }
      case 'mcp_call': {
        // A call the tool loop made: the model's call of `<server>__<tool>`, and what it answered.
        const id = asString(item.id);
        this.pendingCalls.push({
          id,
          type: 'function',
          function: {
            name: prefixedToolName(asString(item.server_label), asString(item.name)),
            arguments: asString(item.arguments),
          },
        });
        this.flush();
        const error = item.error as { message?: unknown } | null | undefined;
        const output =
          typeof item.output === 'string'
            ? item.output
            : typeof error?.message === 'string'
              ? error.message
              : item.status === 'incomplete'
                ? 'The call did not finish.'
                : '';
        // As the loop told the model when it made the call: a failure said as one.
        this.messages.push({ role: 'tool', tool_call_id: id, content: error != null ? `Error: ${output}` : output });
        return;
      }
      case 'mcp_approval_request':
        this.asked.set(asString(item.id), item);
        return;
      case 'mcp_approval_response': {
        const requestId = asString(item.approval_request_id);
        const asked = this.asked.get(requestId);
        if (param !== null) {
          if (!asked)
            throw invalidRequest(
              `No MCP approval request found with id ${requestId}.`,
              param.replace(/\.call_id$/, '.approval_request_id'),
              'invalid_value',
            );
          if (this.answered.has(requestId))
            throw invalidRequest(
              `The MCP approval request ${requestId} is answered twice.`,
              param.replace(/\.call_id$/, '.approval_request_id'),
              'invalid_value',
            );
          this.answered.add(requestId);
          this.decided.push({
            requestId,
            server: asString(asked.server_label),
            tool: asString(asked.name),
            arguments: asString(asked.arguments),
            approve: item.approve === true,
          });
        }
        return;
      }
      default:
        // Reasoning items, listed tools (and any item the chat side has no form for) are left out.
        return;
    }
  }

  /** Ends the pending assistant turn. */
  flush(): void {
    const texts = this.pendingTexts;
    const calls = this.pendingCalls;
    this.pendingTexts = [];
    this.pendingCalls = [];
    if (calls.length === 0) {
      for (const content of texts) {
        const message = assistantMessage([content]);
        if (message) this.messages.push(message);
      }
      return;
    }
    this.messages.push(assistantMessage(texts, calls)!);
  }
}

/** An assistant turn from the content of its message items (and its tool calls); undefined if it says nothing. */
function assistantMessage(contents: Part[][], calls: ChatToolCall[] = []): ChatMessage | undefined {
  const texts: string[] = [];
  const refusals: string[] = [];
  for (const content of contents) {
    const text = content.filter((part) => part.type === 'output_text').map((part) => asString(part.text));
    const refusal = content.filter((part) => part.type === 'refusal').map((part) => asString(part.refusal));
    if (text.length > 0) texts.push(text.join(''));
    if (refusal.length > 0) refusals.push(refusal.join(''));
  }
  const text = texts.filter((t) => t !== '').join('\n\n');
  const refusal = refusals.filter((r) => r !== '').join('\n\n');
  const toolCalls = calls.length > 0 ? { tool_calls: calls } : {};
  if (refusal !== '') {
    // The refusal goes in chat's `refusal` field and, as a part, in the content: vendors that
    // read only the content still see what the assistant said.
    const parts = [...(text !== '' ? [{ type: 'text' as const, text }] : []), { type: 'refusal' as const, refusal }];
    return { role: 'assistant', content: parts, refusal, ...toolCalls };
  }
  if (text !== '') return { role: 'assistant', content: text, ...toolCalls };
  return calls.length > 0 ? { role: 'assistant', content: null, ...toolCalls } : undefined;
}

/**
 * The chat request the vendor adapters run for a Responses request: the
 * stored conversation it chains onto (`history`) and its normalised input
 * as messages, its function tools in chat's nested form, and the sampling
 * fields chat has. Always streamed, with usage, whatever the client asked.
 */
export function toChatRequest(
  request: ResponsesRequest,
  history: readonly ConversationItem[],
  input: readonly ConversationItem[],
  /** The model's vendor searches the web (the catalog's `web_search`): a web search tool goes to it. */
  searches = false,
  /** Takes the MCP calls the input approved or declined (`mcp_approval_response`), for the tool loop. */
  approvals: McpApproval[] = [],
): ChatCompletionRequest {
  if (request.input === undefined && request.previous_response_id == null) {
    throw invalidRequest("Missing required parameter: 'input'.", 'input', 'missing_required_parameter');
  }
  // The tools are checked first: a request whose tools or choice cannot be had is refused before its input is read.
  const tools = declareTools(request.tools, searches);
  const toolFields = chatToolFields(
    tools,
    declareChoice(request.tool_choice, tools),
    request.parallel_tool_calls,
    choiceWording,
  );

  const byId = new Map<string, ConversationItem>();
  const remember = (item: ConversationItem) => {
    if (item.type !== 'item_reference' && !byId.has(item.id)) byId.set(item.id, item);
  };
  history.forEach(remember);

  const builder = new MessageBuilder();
  for (const item of history) {
    const resolved = item.type === 'item_reference' ? byId.get(item.id) : item;
    if (resolved) builder.add(resolved, null);
  }
  input.forEach((item, index) => {
    if (item.type === 'item_reference') {
      const resolved = byId.get(item.id);
      if (!resolved)
        throw invalidRequest(`Item with id '${item.id}' not found.`, `input[${index}].id`, 'invalid_value');
      builder.add(resolved, `input[${index}].id`);
      return;
    }
    builder.add(item, `input[${index}].call_id`);
    remember(item);
  });
  builder.flush();
  approvals.push(...builder.decided);

  if (builder.messages.length === 0 && builder.decided.length === 0)
    throw invalidAt(
      ['input'],
      'there is nothing to send to the model (no messages, function calls or function call outputs).',
    );
  const messages: ChatMessage[] = request.instructions ? [{ role: 'system', content: request.instructions }] : [];
  messages.push(...builder.messages);

  const chat: ChatCompletionRequest = {
    model: request.model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    ...toolFields,
  };
  // As the client named it; never sent as written: a vendor with tiers of its own (OpenAI) is sent the job's band in
  // its place, every other vendor none (shared/scheduling/served-tier.ts). The response object says the tier that
  // served it.
  if (request.service_tier != null) chat.service_tier = request.service_tier;
  const format = request.text?.format;
  applyChatSettings(chat, {
    temperature: request.temperature,
    topP: request.top_p,
    user: request.user,
    maxTokens: request.max_output_tokens,
    effort: request.reasoning?.effort,
    output:
      format?.type === 'json_object'
        ? { type: 'json' }
        : format?.type === 'json_schema'
          ? {
              type: 'schema',
              name: format.name,
              schema: format.schema,
              strict: format.strict,
              description: format.description,
            }
          : undefined,
  });
  return chat;
}

// ---- the response object's echo of the request ----

/** The fields of the response object that echo the request, with the API's defaults for what it left out. */
export function buildShell(request: ResponsesRequest, id: string, modelId: string, createdAt: number): ResponseShell {
  return {
    id,
    created_at: createdAt,
    model: modelId,
    instructions: request.instructions ?? null,
    previous_response_id: request.previous_response_id ?? null,
    tools: request.tools ?? [],
    tool_choice: request.tool_choice ?? 'auto',
    parallel_tool_calls: request.parallel_tool_calls ?? true,
    temperature: request.temperature ?? null,
    top_p: request.top_p ?? null,
    max_output_tokens: request.max_output_tokens ?? null,
    text: { format: request.text?.format ?? { type: 'text' } },
    reasoning: { effort: request.reasoning?.effort ?? null, summary: null },
    metadata: request.metadata ?? {},
    store: request.store ?? true,
    background: request.background ?? false,
    user: request.user ?? null,
    // The band it asks for; the worker's response object says the tier that served it
    // (shared/scheduling/served-tier.ts).
    service_tier: servingTier(request.service_tier),
  };
}
