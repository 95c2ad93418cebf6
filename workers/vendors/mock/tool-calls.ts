import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import { findLastUserText } from './reply-text.js';

export interface PlannedCall {
  name: string;
  /** JSON text, as vendors send it. */
  arguments: string;
}

/** What the mock model decides to do with the turn. */
export type ToolPlan =
  { kind: 'text' } | { kind: 'tool_calls'; calls: PlannedCall[] } | { kind: 'function_call'; call: PlannedCall };

interface FunctionSpec {
  name: string;
  parameters?: Record<string, unknown> | undefined;
}

type JsonObject = Record<string, unknown>;
const isRecord = (value: unknown): value is JsonObject =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Deep schemas are cut off here; the point is a plausible object, not a schema validator. */
const MAX_SCHEMA_DEPTH = 6;

function sampleValue(schema: unknown, depth: number): unknown {
  if (!isRecord(schema)) return 'mock';
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  const branches = schema.anyOf ?? schema.oneOf;
  if (schema.type === undefined && Array.isArray(branches) && branches.length > 0)
    return sampleValue(branches[0], depth);
  const type = Array.isArray(schema.type) ? (schema.type.find((t) => t !== 'null') ?? 'null') : schema.type;
  switch (type) {
    case 'string':
      return 'mock';
    case 'integer':
    case 'number':
      return typeof schema.minimum === 'number' && schema.minimum > 1 ? Math.ceil(schema.minimum) : 1;
    case 'boolean':
      return true;
    case 'null':
      return null;
    case 'array':
      return depth >= MAX_SCHEMA_DEPTH ? [] : [sampleValue(schema.items, depth + 1)];
    case 'object':
      return sampleObject(schema, depth + 1);
    default:
      return isRecord(schema.properties) ? sampleObject(schema, depth + 1) : 'mock';
  }
}

function sampleObject(schema: JsonObject, depth: number): JsonObject {
  const result: JsonObject = {};
  if (depth > MAX_SCHEMA_DEPTH) return result;
  const properties = isRecord(schema.properties) ? schema.properties : {};
  for (const [key, propertySchema] of Object.entries(properties)) result[key] = sampleValue(propertySchema, depth);
  // A required name without a schema still has to be present for the call to be usable.
  if (Array.isArray(schema.required)) {
    for (const key of schema.required) if (typeof key === 'string' && !(key in result)) result[key] = 'mock';
  }
  return result;
}

/** Deterministic arguments that satisfy the common shape of a function's JSON Schema. */
export function buildArguments(parameters: Record<string, unknown> | undefined): string {
  return JSON.stringify(parameters ? sampleObject(parameters, 0) : {});
}

const mentionsCall = /\bcall\b/i;

/** A whole-name mention, so a tool called `a` is not picked by every sentence containing the letter. */
function mentions(text: string, name: string): boolean {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(^|[^\\w-])${escaped}($|[^\\w-])`, 'i').test(text);
}

function pickMentioned(functions: readonly FunctionSpec[], userText: string): FunctionSpec | undefined {
  return functions.find((fn) => mentions(userText, fn.name));
}

function toCall(fn: FunctionSpec): PlannedCall {
  return { name: fn.name, arguments: buildArguments(fn.parameters) };
}

function planToolCalls(request: ChatCompletionRequest, userText: string): ToolPlan {
  let functions: FunctionSpec[] = [];
  for (const tool of request.tools ?? []) if (tool.type === 'function') functions.push(tool.function);
  if (functions.length === 0) return { kind: 'text' };

  const choice = request.tool_choice ?? 'auto';
  if (choice === 'none') return { kind: 'text' };
  let required = choice === 'required';
  let named: string | undefined;
  if (typeof choice === 'object') {
    if (choice.type === 'function') named = choice.function.name;
    else if (choice.type === 'allowed_tools') {
      const allowed = choice.allowed_tools as { mode?: string; tools?: Array<{ function?: { name?: string } }> };
      const names = new Set((allowed.tools ?? []).map((t) => t.function?.name));
      functions = functions.filter((fn) => names.has(fn.name));
      required = allowed.mode === 'required';
      if (functions.length === 0) return { kind: 'text' };
    } else return { kind: 'text' }; // custom tools: the mock only speaks function tools
  }

  if (named !== undefined) {
    const fn = functions.find((f) => f.name === named) ?? { name: named };
    return { kind: 'tool_calls', calls: [toCall(fn)] };
  }
  const mentioned = pickMentioned(functions, userText);
  if (!required && !mentioned && !mentionsCall.test(userText)) return { kind: 'text' };
  const [first, second] = functions;
  if (!first) return { kind: 'text' };
  if (required && request.parallel_tool_calls !== false && second) {
    return { kind: 'tool_calls', calls: [toCall(first), toCall(second)] };
  }
  return { kind: 'tool_calls', calls: [toCall(mentioned ?? first)] };
}

function planFunctionCall(request: ChatCompletionRequest, userText: string): ToolPlan {
  const functions: FunctionSpec[] = request.functions ?? [];
  const choice = request.function_call ?? 'auto';
  if (functions.length === 0 || choice === 'none') return { kind: 'text' };
  if (typeof choice === 'object') {
    const fn = functions.find((f) => f.name === choice.name) ?? { name: choice.name };
    return { kind: 'function_call', call: toCall(fn) };
  }
  const target = pickMentioned(functions, userText) ?? (mentionsCall.test(userText) ? functions[0] : undefined);
  return target ? { kind: 'function_call', call: toCall(target) } : { kind: 'text' };
}

/**
 * Calls a tool only on a fresh user turn: after a tool result the mock always
 * answers in text, so a client's tool loop ends after one round.
 */
export function planToolUse(request: ChatCompletionRequest): ToolPlan {
  const last = request.messages[request.messages.length - 1];
  if (last?.role !== 'user') return { kind: 'text' };
  const userText = findLastUserText(request.messages);
  if (request.tools && request.tools.length > 0) return planToolCalls(request, userText);
  if (request.functions && request.functions.length > 0) return planFunctionCall(request, userText);
  return { kind: 'text' };
}
