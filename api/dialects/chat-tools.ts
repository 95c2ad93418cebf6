import { invalidRequest } from '../../shared/errors.js';
import { isRecord } from '../../shared/response-object.js';
import type { ChatCompletionRequest, ChatTool } from '../../shared/schemas/chat.js';
import { paramOf, type FieldPath } from './field-path.js';

/*
 * A request's tools on the chat side, in no dialect's words. Every dialect declares functions (Responses' function
 * and namespace tools, Messages' client tools, Gemini's function declarations), says which one the model must,
 * may or must not call (`tool_choice`, `toolConfig.functionCallingConfig`), and may ask for tools a chat vendor
 * cannot run (Anthropic's server tools, the Responses API's built-in ones, Gemini's code execution). The decoder
 * of each dialect says what its request declared, in these terms; the policy of what chat gets is written here,
 * once:
 *
 * - functions become chat functions (no description when it is empty, parameters `{type: object}` when none);
 * - a tool left out (declined) stays out; a choice that names one is refused, and so is a required call when
 *   every tool was left out: answering without the call the client requires would fail the request silently;
 * - a web search the model's vendor runs itself (the catalog's `web_search`) is chat's `web_search_options`, and
 *   a choice that names or requires it is left to the model: chat has no way to force a search;
 * - with no function left, chat gets no tools, no choice and no parallel flag (some vendors refuse a choice
 *   without tools);
 * - a choice that names a function the request does not declare is refused, at the choice's name;
 * - a choice among some functions only (Gemini's `allowedFunctionNames`) sends only those, and names the one when
 *   a call of one alone is required.
 */

/** A function as a dialect declared it. */
export interface DeclaredFunction {
  /**
   * The name the vendor knows it by: chat's function names, the dialect's renaming done (`chatToolName`, flat names).
   */
  name: string;
  description?: string | null | undefined;
  /** The JSON schema of its arguments; none: it takes an empty object. */
  parameters?: Record<string, unknown> | null | undefined;
  strict?: boolean | null | undefined;
}

/** A web search the client asked the model to run: the settings chat has a place for. */
export interface DeclaredSearch {
  /** How much found text the model reads (`low`, `medium`, `high`; anything else is left to the vendor). */
  contextSize?: unknown;
  /** The user's approximate place (`{country, city, region, timezone}`; a `type` in it is ignored). */
  userLocation?: unknown;
}

/** What a request's tool list declares, in no dialect's words. */
export interface DeclaredTools {
  functions: DeclaredFunction[];
  /** The tools left out (a chat vendor cannot run them), by the name a choice names them by, in the request's order. */
  declined: string[];
  /** A web search the model's vendor runs (only when the model has one), and the name a choice names it by. */
  search?: { name: string; settings: DeclaredSearch } | undefined;
}

/**
 * A tool a choice names: by the name the client gave it (for errors, the declined and the search tools), and by chat's.
 */
export interface NamedTool {
  tool: string;
  function: string;
}

/**
 * Which tool the model must, may or must not call: any (`auto`), none, at least one (`required`), the one named, or
 * (`among`: Gemini's `allowedFunctionNames`) any or at least one of those named, the others not sent to the vendor.
 */
export type DeclaredChoice =
  'auto' | 'none' | 'required' | NamedTool | { mode: 'auto' | 'none' | 'required'; among: readonly NamedTool[] };

/** How the dialect says its choice, for a refusal in its own terms. */
export interface ChoiceWording {
  /** Where the choice stands in the request: `tool_choice`, `toolConfig.functionCallingConfig`. */
  path: FieldPath;
  /**
   * Where a named choice's name stands (`tool_choice.name`); for a choice `among` names, where their list stands
   * (`…allowedFunctionNames`).
   */
  namePath: FieldPath;
  /** A required call as the request says it: `tool_choice 'any'`, `tool_choice 'required'`. */
  required: string;
  /** Why a tool left out cannot be called, said after its name: `is run by Anthropic`. */
  declined: string;
}

/** Chat's fields for a request's tools. */
export type ChatToolFields = Pick<
  ChatCompletionRequest,
  'tools' | 'tool_choice' | 'parallel_tool_calls' | 'web_search_options'
>;

type WebSearchOptions = NonNullable<ChatCompletionRequest['web_search_options']>;

/** A declared function as chat's. */
export function chatFunction(declared: DeclaredFunction): ChatTool {
  const { name, description, parameters, strict } = declared;
  return {
    type: 'function',
    function: {
      name,
      ...(description != null && description !== '' && { description }),
      parameters: parameters ?? { type: 'object', properties: {} },
      ...(strict != null && { strict }),
    },
  };
}

/** A web search's settings in chat's form: the context size and the user's approximate place. */
export function chatWebSearch(search: DeclaredSearch): WebSearchOptions {
  const options: WebSearchOptions = {};
  const size = search.contextSize;
  if (size === 'low' || size === 'medium' || size === 'high') options.search_context_size = size;
  const location = search.userLocation;
  if (isRecord(location)) {
    const { type: _type, ...approximate } = location;
    options.user_location = { type: 'approximate', approximate };
  }
  return options;
}

/** What chat is sent for a choice: the choice (none where chat gets none), and the functions the model may call. */
interface Decided {
  choice: ChatCompletionRequest['tool_choice'];
  functions: readonly DeclaredFunction[];
}

/**
 * Refuses a named tool the model cannot call; false for the vendor's own search (left to the model), true for a
 * function.
 */
function callable(named: NamedTool, tools: DeclaredTools, wording: ChoiceWording, namePath: FieldPath): boolean {
  if (tools.search !== undefined && named.tool === tools.search.name) return false;
  if (tools.functions.some((fn) => fn.name === named.function)) return true;
  if (tools.declined.includes(named.tool)) {
    throw invalidRequest(
      `The tool '${named.tool}' ${wording.declined} and is not available for this model.`,
      paramOf(wording.path),
      'unsupported_tool',
    );
  }
  const param = paramOf(namePath);
  throw invalidRequest(
    `Invalid '${param}': the tool '${named.tool}' is not among the request's tools.`,
    param,
    'invalid_value',
  );
}

/**
 * `auto`, `none` or `required` over `functions`: a required call with nothing to call is left to the search or refused.
 */
function decideMode(
  mode: 'auto' | 'none' | 'required',
  functions: readonly DeclaredFunction[],
  tools: DeclaredTools,
  wording: ChoiceWording,
): Decided {
  if (mode === 'required' && functions.length === 0) {
    // The vendor's own search is a tool the model may use; chat cannot require it.
    if (tools.search) return { choice: undefined, functions };
    if (tools.declined.length > 0) {
      throw invalidRequest(
        `The tool '${tools.declined[0]}' ${wording.declined}, and ${wording.required} needs a tool this model ` +
          `can call: send function tools, or leave the choice to the model.`,
        paramOf(wording.path),
        'unsupported_tool',
      );
    }
  }
  return { choice: mode, functions };
}

function decide(choice: DeclaredChoice | undefined, tools: DeclaredTools, wording: ChoiceWording): Decided {
  const { functions } = tools;
  if (choice === undefined) return { choice: undefined, functions };
  if (typeof choice === 'string') return decideMode(choice, functions, tools, wording);
  if ('function' in choice) {
    return callable(choice, tools, wording, wording.namePath)
      ? { choice: { type: 'function', function: { name: choice.function } }, functions }
      : { choice: undefined, functions };
  }
  // Every name must be one the model can call, whatever the mode (the vendor's search among them is its own to start).
  const allowed = new Set(
    choice.among
      .filter((named, k) => callable(named, tools, wording, [...wording.namePath, k]))
      .map((named) => named.function),
  );
  if (choice.mode === 'none' || choice.among.length === 0) return decideMode(choice.mode, functions, tools, wording);
  const narrowed = functions.filter((fn) => allowed.has(fn.name));
  // One function allowed and a call required: that function, named.
  if (choice.mode === 'required' && narrowed.length === 1)
    return { choice: { type: 'function', function: { name: narrowed[0]!.name } }, functions: narrowed };
  return decideMode(choice.mode, narrowed, tools, wording);
}

/**
 * Chat's `tool_choice` for a declared choice, or undefined where chat gets none (no choice, a choice left to the
 * model). Refuses what cannot be honoured, in the dialect's wording.
 */
export function chatToolChoice(
  choice: DeclaredChoice | undefined,
  tools: DeclaredTools,
  wording: ChoiceWording,
): ChatCompletionRequest['tool_choice'] {
  return decide(choice, tools, wording).choice;
}

/**
 * Chat's fields for a request's tools: its functions (those a choice `among` some allows), the choice among them
 * and whether calls may run in parallel (only with functions to call), and the vendor's own web search. The choice
 * is checked even when no function is left, so a choice the request cannot have is refused either way.
 */
export function chatToolFields(
  tools: DeclaredTools,
  choice: DeclaredChoice | undefined,
  parallel: boolean | null | undefined,
  wording: ChoiceWording,
): ChatToolFields {
  const decided = decide(choice, tools, wording);
  const fields: ChatToolFields = {};
  if (decided.functions.length > 0) {
    fields.tools = decided.functions.map(chatFunction);
    if (decided.choice !== undefined) fields.tool_choice = decided.choice;
    if (parallel != null) fields.parallel_tool_calls = parallel;
  }
  if (tools.search) fields.web_search_options = chatWebSearch(tools.search.settings);
  return fields;
}
