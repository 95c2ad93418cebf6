import { GatewayError, invalidRequest } from '../../shared/errors.js';
import { chatToolName } from '../../shared/messages-tools.js';
import { isRecord } from '../../shared/response-object.js';
import type {
  GeminiFunctionDeclaration,
  GeminiGenerateRequest,
  GeminiGenerationConfig,
  GeminiTool,
  GeminiToolConfig,
} from '../../shared/schemas/gemini.js';
import type { DeclaredOutput } from '../dialects/chat-request.js';
import {
  chatToolFields,
  type ChatToolFields,
  type ChoiceWording,
  type DeclaredChoice,
  type DeclaredTools,
} from '../dialects/chat-tools.js';

/*
 * A Gemini request's tools, tool choice and structured output in the dialect layer's terms (api/dialects/): what
 * Gemini alone says, read here; what chat gets of it (and what is refused) is the layer's policy, the same as the
 * Messages and Responses APIs'. Function declarations are the layer's functions under their chat names
 * (`chatToolName` when chat refuses a Gemini name: `.` and `:`), their parameters in Gemini's OpenAPI subset
 * (`type: "OBJECT"`, `nullable`, int64 bounds written as strings) converted to JSON Schema, or taken as they are
 * from `parametersJsonSchema` (Gemini's upper-case type names, which it takes there too, in lower case). Google
 * Search is the vendor's own search where the model has one; the tools only Gemini runs (code execution, URL
 * context, Maps, file search) are declined, left out and named. `toolConfig.functionCallingConfig` is the layer's
 * choice, its `allowedFunctionNames` a choice among some; `responseMimeType` and its schema the layer's structured
 * output.
 */

type Json = Record<string, unknown>;

// ---- Gemini's Schema as JSON Schema ----

/** Schema fields that hold a count: int64 in Google's API, so written as strings in its JSON. */
const countFields = new Set(['minItems', 'maxItems', 'minLength', 'maxLength', 'minProperties', 'maxProperties']);
/** Fields JSON Schema has under the same name, copied as they are. */
const sameFields = new Set(['title', 'description', 'pattern', 'minimum', 'maximum', 'default', 'required']);
/** Gemini's own fields with no JSON Schema counterpart. */
const leftOutFields = new Set([
  'propertyOrdering',
  'nullable',
  'type',
  'format',
  'enum',
  'items',
  'properties',
  'anyOf',
  'example',
]);

/** A Gemini type name (`OBJECT`, or `object` as some clients write it) as JSON Schema's; undefined for none. */
function jsonType(type: unknown): string | undefined {
  if (typeof type !== 'string') return undefined;
  const lower = type.toLowerCase();
  return lower === 'type_unspecified' || lower === '' ? undefined : lower;
}

/**
 * A Schema of Gemini's OpenAPI subset as JSON Schema: types in lower case, `nullable` as a `null` type, counts as
 * numbers, `example` as `examples`, and Gemini's `format: "enum"` (a string that is one of `enum`) as the enum
 * alone. Anything else it holds is kept as written (a vendor that does not know it ignores it).
 */
export function toJsonSchema(schema: unknown): Json {
  if (!isRecord(schema)) return {};
  const out: Json = {};
  const type = jsonType(schema.type);
  const nullable = schema.nullable === true;
  if (type !== undefined) out.type = nullable ? [type, 'null'] : type;
  if (typeof schema.format === 'string' && schema.format !== 'enum' && schema.format !== '') out.format = schema.format;
  if (Array.isArray(schema.enum)) out.enum = nullable ? [...schema.enum, null] : schema.enum;
  if (schema.items !== undefined) out.items = toJsonSchema(schema.items);
  if (isRecord(schema.properties))
    out.properties = Object.fromEntries(
      Object.entries(schema.properties).map(([name, property]) => [name, toJsonSchema(property)]),
    );
  if (Array.isArray(schema.anyOf)) {
    out.anyOf = schema.anyOf.map(toJsonSchema);
    if (nullable && type === undefined) out.anyOf = [...(out.anyOf as Json[]), { type: 'null' }];
  }
  if (schema.example !== undefined) out.examples = [schema.example];
  for (const [key, value] of Object.entries(schema)) {
    if (leftOutFields.has(key)) continue;
    if (countFields.has(key)) {
      const count = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
      if (typeof count === 'number') out[key] = count;
    } else if (sameFields.has(key) || !(key in out)) out[key] = value;
  }
  return out;
}

/** Gemini's type names, which it takes in a JSON schema too (Gemini CLI writes its router's schema with them). */
const geminiTypes = new Set(['STRING', 'NUMBER', 'INTEGER', 'BOOLEAN', 'ARRAY', 'OBJECT', 'NULL']);
/** JSON Schema values that hold data, not schemas: not walked. */
const schemaData = new Set(['enum', 'const', 'default', 'examples', 'example']);

/**
 * A JSON schema as written (`parametersJsonSchema`, `responseJsonSchema`), but with Gemini's upper-case type names
 * (`OBJECT`), which Gemini takes there and every other vendor refuses, in JSON Schema's lower case. Returned as is
 * when it has none.
 */
export function lowerCaseTypes(schema: unknown): unknown {
  if (Array.isArray(schema)) {
    const items = schema.map(lowerCaseTypes);
    return items.some((item, i) => item !== schema[i]) ? items : schema;
  }
  if (!isRecord(schema)) return schema;
  let out: Json | undefined;
  for (const [key, value] of Object.entries(schema)) {
    let next = value;
    const lower = (type: unknown) => (typeof type === 'string' && geminiTypes.has(type) ? type.toLowerCase() : type);
    // `type` names a type (a string, or a list of them); anywhere else (a property called `type`) it is a schema.
    if (key === 'type' && typeof value === 'string') next = lower(value);
    else if (key === 'type' && Array.isArray(value) && value.every((type) => typeof type === 'string'))
      next = value.some((type) => lower(type) !== type) ? value.map(lower) : value;
    else if (!schemaData.has(key)) next = lowerCaseTypes(value);
    if (next !== value) (out ??= { ...schema })[key] = next;
  }
  return out ?? schema;
}

// ---- function declarations, Gemini's own tools and the tool choice, in the dialect layer's terms ----

/**
 * The tools Gemini runs itself that a chat vendor has none of; any other tool key is Google's too, and declined alike.
 */
const geminiRunTools = new Set([
  'codeExecution',
  'urlContext',
  'googleMaps',
  'fileSearch',
  'computerUse',
  'enterpriseWebSearch',
  'retrieval',
]);

/** How Gemini says a tool choice (`toolConfig.functionCallingConfig`), for a refusal at its place in the request. */
const choiceWording: ChoiceWording = {
  path: ['toolConfig', 'functionCallingConfig'],
  // Gemini names functions only in a list: a refusal of one points at its place in `allowedFunctionNames`.
  namePath: ['toolConfig', 'functionCallingConfig', 'allowedFunctionNames'],
  required: "functionCallingConfig.mode 'ANY'",
  declined: 'is run by Google',
};

/**
 * A declaration's arguments as JSON Schema: `parametersJsonSchema` as written (its type names lowered), or `parameters`
 * converted.
 */
function parametersOf(declaration: GeminiFunctionDeclaration): Json | undefined {
  const schema =
    declaration.parametersJsonSchema !== undefined
      ? lowerCaseTypes(declaration.parametersJsonSchema)
      : declaration.parameters != null
        ? toJsonSchema(declaration.parameters)
        : undefined;
  // An empty schema (or none) is a function that takes no arguments: the layer sends it an empty object's schema,
  // which chat vendors want where a bare `{}` lacks the type they require.
  return isRecord(schema) && Object.keys(schema).length > 0 ? schema : undefined;
}

/**
 * The request's tools in the dialect layer's terms: `tools[].functionDeclarations` as functions under their chat
 * names; Google Search (`googleSearch`, or the older `googleSearchRetrieval`) as the vendor's own search for a model
 * whose vendor searches (`searches`); every other tool (code execution, URL context, Maps, file search…: Gemini
 * runs them itself) declined, by its key. `dropped` names what was left out. A function declared twice is refused,
 * as Gemini refuses it.
 */
function declareTools(
  tools: readonly GeminiTool[] | null | undefined,
  searches: boolean,
  dropped: Set<string>,
): DeclaredTools {
  const declared: DeclaredTools = { functions: [], declined: [] };
  const names = new Set<string>();
  (tools ?? []).forEach((tool, i) => {
    for (const [key, value] of Object.entries(tool)) {
      if (value == null || key === 'functionDeclarations') continue;
      if (searches && (key === 'googleSearch' || key === 'googleSearchRetrieval')) {
        // Google's search settings (a time range, dynamic retrieval) have no chat counterpart.
        declared.search = { name: key, settings: {} };
        continue;
      }
      if (!declared.declined.includes(key)) declared.declined.push(key);
      if (key === 'googleSearch' || key === 'googleSearchRetrieval')
        dropped.add(`tools[].${key} (this model's vendor does not search the web)`);
      else dropped.add(geminiRunTools.has(key) ? `tools[].${key} (run by Gemini only)` : `tools[].${key}`);
    }
    (tool.functionDeclarations ?? []).forEach((declaration, j) => {
      if (names.has(declaration.name)) {
        const param = `tools[${i}].functionDeclarations[${j}].name`;
        throw invalidRequest(
          `Invalid value at '${param}': the function '${declaration.name}' is declared twice.`,
          param,
          'invalid_value',
        );
      }
      names.add(declaration.name);
      declared.functions.push({
        name: chatToolName(declaration.name),
        description: declaration.description,
        parameters: parametersOf(declaration),
      });
    });
  });
  return declared;
}

/**
 * `toolConfig.functionCallingConfig` in the layer's terms: ANY requires a call, NONE forbids one, AUTO (and
 * VALIDATED, Gemini's checked AUTO, or no mode) lets the model decide; `allowedFunctionNames` narrows the choice to
 * those named (under their chat names). No config: no choice, chat's default (the model decides) as Gemini's.
 */
function declareChoice(config: GeminiToolConfig | null | undefined): DeclaredChoice | undefined {
  const calling = config?.functionCallingConfig;
  if (calling == null) return undefined;
  const mode = calling.mode === 'ANY' ? 'required' : calling.mode === 'NONE' ? 'none' : 'auto';
  const allowed = calling.allowedFunctionNames;
  if (allowed === undefined) return mode;
  return { mode, among: allowed.map((name) => ({ tool: name, function: chatToolName(name) })) };
}

/**
 * Chat's fields for the request's tools and tool choice, by the layer's policy. For a model Gemini serves (`native`)
 * the chat form is only a fallback's: a choice chat cannot honour because it needs a tool only Google runs is left
 * out of it (Gemini gets the request as written), where any other model's request is refused.
 */
export function geminiToolFields(
  request: Pick<GeminiGenerateRequest, 'tools' | 'toolConfig'>,
  searches: boolean,
  native: boolean,
  dropped: Set<string>,
): ChatToolFields {
  const declared = declareTools(request.tools, searches, dropped);
  const choice = declareChoice(request.toolConfig);
  for (const [key, value] of Object.entries(request.toolConfig ?? {}))
    if (key !== 'functionCallingConfig' && value != null) dropped.add(`toolConfig.${key}`);
  try {
    return chatToolFields(declared, choice, undefined, choiceWording);
  } catch (error) {
    if (!native || !(error instanceof GatewayError) || error.code !== 'unsupported_tool') throw error;
    dropped.add('toolConfig.functionCallingConfig (it needs a tool run by Google)');
    return chatToolFields(declared, undefined, undefined, choiceWording);
  }
}

// ---- structured output ----

/**
 * `responseMimeType: application/json` as the layer's structured output: a schema (`responseJsonSchema` as it is,
 * its type names lowered, or `responseSchema`, Gemini's subset, converted) named `response`, else any JSON. A schema
 * without the JSON MIME type is what Gemini refuses; `text/x.enum` (one enum value as plain text) has no chat form
 * and is left out.
 */
export function declareOutput(config: GeminiGenerationConfig, dropped: Set<string>): DeclaredOutput | undefined {
  const mime = config.responseMimeType?.toLowerCase();
  const schema =
    config.responseJsonSchema !== undefined && config.responseJsonSchema !== null
      ? lowerCaseTypes(config.responseJsonSchema)
      : config.responseSchema != null
        ? toJsonSchema(config.responseSchema)
        : undefined;
  if (mime === undefined || mime === 'text/plain') {
    if (schema !== undefined) {
      throw invalidRequest(
        "Invalid value at 'generationConfig.responseMimeType': a response schema requires responseMimeType " +
          "'application/json'.",
        'generationConfig.responseMimeType',
        'invalid_value',
      );
    }
    return undefined;
  }
  if (mime !== 'application/json') {
    dropped.add(`generationConfig.responseMimeType ${mime}`);
    return undefined;
  }
  if (schema === undefined) return { type: 'json' };
  if (!isRecord(schema)) {
    const param =
      config.responseJsonSchema !== undefined
        ? 'generationConfig.responseJsonSchema'
        : 'generationConfig.responseSchema';
    throw invalidRequest(`Invalid value at '${param}': expected a JSON schema object.`, param, 'invalid_value');
  }
  return { type: 'schema', name: 'response', schema };
}
