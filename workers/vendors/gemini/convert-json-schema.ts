import { invalidRequest } from '../../../shared/errors.js';

/**
 * OpenAI takes JSON Schema (draft 2020-12, as zod/pydantic emit it) for tool
 * parameters and `response_format`; Gemini's `parameters`/`responseSchema`
 * take an OpenAPI 3.0 subset and answer 400 to any keyword outside it.
 *
 * Kept as is: type, format (the ones Gemini knows), title, description,
 * nullable, enum (strings), items, properties, required, min/maxItems,
 * min/maxProperties, min/maxLength, pattern, minimum, maximum, default, example.
 *
 * Rewritten, nothing lost: local `$ref`s are inlined from `$defs`/`definitions`;
 * `type: [T, "null"]` and `anyOf`/`oneOf` with a `null` member become `nullable`;
 * `oneOf` becomes `anyOf`; `allOf` is merged into one schema; a string `const`
 * becomes a one-value `enum`; `required` keeps only declared properties.
 *
 * Dropped without a report (they constrain nothing Gemini would do otherwise):
 * `$schema`, `$id`, `$comment`, `$defs`/`definitions` (after inlining) and
 * `additionalProperties: false` (Gemini never adds undeclared properties).
 *
 * Dropped and reported in `dropped`: every other keyword (additionalProperties
 * true or a schema, not, if/then/else, patternProperties, prefixItems,
 * uniqueItems, multipleOf, exclusiveMinimum/Maximum, examples, const with a
 * non-string value, …), formats Gemini does not know, and `enum`s with
 * non-string values (their values move into the description instead).
 * A `$ref` that recurses, or points outside the document, becomes a plain
 * `{type: "object"}`.
 */

type Schema = Record<string, unknown>;

export interface ConvertedSchema {
  /** Undefined for an object schema without properties: Gemini refuses `{type: "object", properties: {}}`. */
  schema: Schema | undefined;
  /** Names of the keywords that were dropped and lost meaning, sorted. */
  dropped: string[];
}

const COPIED = [
  'title',
  'description',
  'nullable',
  'minItems',
  'maxItems',
  'minProperties',
  'maxProperties',
  'minLength',
  'maxLength',
  'pattern',
  'minimum',
  'maximum',
  'default',
  'example',
] as const;
const HANDLED = new Set<string>([
  ...COPIED,
  'type',
  'format',
  'enum',
  'const',
  'items',
  'properties',
  'required',
  'anyOf',
  'oneOf',
  'allOf',
  '$ref',
]);
const SILENT = new Set(['$schema', '$id', '$comment', '$defs', 'definitions']);
const FORMATS: Record<string, readonly string[]> = {
  string: ['enum', 'date-time'],
  number: ['float', 'double'],
  integer: ['int32', 'int64'],
};
const MAX_DEPTH = 64;
const MAX_NODES = 20_000;

const isSchema = (value: unknown): value is Schema =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

class SchemaConverter {
  readonly dropped = new Set<string>();
  private nodes = 0;
  private readonly resolving: string[] = [];

  constructor(
    private readonly root: Schema,
    private readonly param: string,
  ) {}

  convert(node: unknown, depth: number): Schema {
    this.nodes += 1;
    if (depth > MAX_DEPTH || this.nodes > MAX_NODES) {
      throw invalidRequest('The JSON schema is too deeply nested or too large for Gemini.', this.param);
    }
    if (!isSchema(node)) {
      // Boolean schemas (`true`: anything) have no OpenAPI form.
      this.dropped.add('boolean schema');
      return {};
    }
    if (typeof node.$ref === 'string') return this.convertRef(node, depth);
    if (Array.isArray(node.allOf)) return this.convert(this.mergeAllOf(node), depth);

    const result: Schema = {};
    for (const key of COPIED) if (node[key] !== undefined) result[key] = node[key];
    this.convertType(node, result, depth);
    this.convertEnum(node, result);
    this.convertFormat(node, result);
    if (isSchema(node.properties)) {
      const properties: Schema = {};
      for (const [name, value] of Object.entries(node.properties)) properties[name] = this.convert(value, depth + 1);
      result.properties = properties;
      if (Array.isArray(node.required))
        result.required = node.required.filter((name) => typeof name === 'string' && name in properties);
    }
    if (node.items !== undefined) {
      result.items = Array.isArray(node.items)
        ? { anyOf: node.items.map((item) => this.convert(item, depth + 1)) }
        : this.convert(node.items, depth + 1);
    }
    for (const key of Object.keys(node)) {
      if (HANDLED.has(key) || SILENT.has(key)) continue;
      if (key === 'additionalProperties' && node[key] === false) continue;
      this.dropped.add(key);
    }
    return result;
  }

  private convertType(node: Schema, result: Schema, depth: number): void {
    const union = Array.isArray(node.anyOf) ? node.anyOf : Array.isArray(node.oneOf) ? node.oneOf : undefined;
    if (Array.isArray(node.type)) {
      const types = node.type.filter((type) => type !== 'null');
      if (types.length < node.type.length) result.nullable = true;
      if (types.length === 1) result.type = types[0];
      else if (types.length > 1) result.anyOf = types.map((type) => ({ type }));
    } else if (node.type !== undefined) {
      result.type = node.type;
    }
    if (union === undefined) return;
    const members = union.filter((member) => !(isSchema(member) && member.type === 'null'));
    if (members.length < union.length) result.nullable = true;
    if (members.length === 1) {
      // `anyOf: [X, {type: "null"}]` is how zod and pydantic spell an optional X.
      const single = this.convert(members[0], depth + 1);
      for (const [key, value] of Object.entries(single)) if (result[key] === undefined) result[key] = value;
    } else if (members.length > 1) {
      result.anyOf = members.map((member) => this.convert(member, depth + 1));
    }
  }

  private convertEnum(node: Schema, result: Schema): void {
    const values = Array.isArray(node.enum) ? node.enum : node.const !== undefined ? [node.const] : undefined;
    if (values === undefined) return;
    const strings = values.filter((value) => value !== null);
    if (strings.length < values.length) result.nullable = true;
    if (strings.every((value) => typeof value === 'string')) {
      if (strings.length === 0) return;
      result.enum = strings;
      if (result.type === undefined) result.type = 'string';
      return;
    }
    // Gemini enums are strings only; the model still learns the allowed values from the description.
    this.dropped.add(Array.isArray(node.enum) ? 'enum' : 'const');
    const allowed = `Allowed values: ${values.map((value) => JSON.stringify(value)).join(', ')}.`;
    result.description = typeof result.description === 'string' ? `${result.description} ${allowed}` : allowed;
  }

  private convertFormat(node: Schema, result: Schema): void {
    if (node.format === undefined) return;
    const known = typeof result.type === 'string' ? FORMATS[result.type.toLowerCase()] : undefined;
    if (typeof node.format === 'string' && known?.includes(node.format)) result.format = node.format;
    else this.dropped.add('format');
  }

  private convertRef(node: Schema, depth: number): Schema {
    const ref = node.$ref as string;
    const target = this.resolve(ref);
    if (target === undefined || this.resolving.includes(ref)) {
      this.dropped.add('$ref');
      const description = node.description ?? (isSchema(target) ? target.description : undefined);
      return typeof description === 'string' ? { type: 'object', description } : { type: 'object' };
    }
    this.resolving.push(ref);
    try {
      // Keywords beside a `$ref` (a description, mostly) refine the target; they win.
      const { $ref: _ref, ...siblings } = node;
      return this.convert({ ...target, ...siblings }, depth + 1);
    } finally {
      this.resolving.pop();
    }
  }

  private resolve(ref: string): Schema | undefined {
    if (ref === '#') return this.root;
    const match = /^#\/(\$defs|definitions)\/(.+)$/.exec(ref);
    if (match === null) return undefined;
    const definitions = this.root[match[1]!];
    const name = match[2]!.replace(/~1/g, '/').replace(/~0/g, '~');
    return isSchema(definitions) && isSchema(definitions[name]) ? definitions[name] : undefined;
  }

  private mergeAllOf(node: Schema): Schema {
    const { allOf, ...rest } = node;
    const merged: Schema = { ...rest };
    for (const part of allOf as unknown[]) {
      const member = isSchema(part) && typeof part.$ref === 'string' ? (this.resolve(part.$ref) ?? {}) : part;
      if (!isSchema(member)) continue;
      for (const [key, value] of Object.entries(member)) {
        if (key === 'properties' && isSchema(value))
          merged.properties = { ...(merged.properties as Schema | undefined), ...value };
        else if (key === 'required' && Array.isArray(value))
          merged.required = [...((merged.required as unknown[]) ?? []), ...value];
        else if (merged[key] === undefined) merged[key] = value;
      }
    }
    return merged;
  }
}

function isEmptyObject(schema: Schema): boolean {
  return (
    schema.type === 'object' &&
    (!isSchema(schema.properties) || Object.keys(schema.properties).length === 0) &&
    schema.anyOf === undefined
  );
}

/**
 * Converts one root schema (a tool's `parameters`, a `json_schema.schema`).
 * `param` names the request field in the 400 a pathological schema earns.
 */
export function convertJsonSchema(schema: unknown, param: string): ConvertedSchema {
  if (!isSchema(schema)) return { schema: undefined, dropped: [] };
  const converter = new SchemaConverter(schema, param);
  const converted = converter.convert(schema, 0);
  return { schema: isEmptyObject(converted) ? undefined : converted, dropped: [...converter.dropped].sort() };
}
