import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { parse } from 'yaml';

/*
 * The OpenAI OpenAPI spec's component schemas, for checking what the gateway
 * itself writes: every /v1 body and stream event must validate against the
 * schema the spec names for it. The spec (OpenAPI 3.1, a copy kept under
 * test/fixtures/openai/) is loaded once per process; each schema is compiled
 * on first use. OpenAPI's own `nullable: true` (still used in places) is
 * read as JSON Schema's "or null"; annotations (`x-*`, `discriminator`,
 * `example`) are ignored.
 */

const specPath = fileURLToPath(new URL('../fixtures/openai/openai-openapi.yaml', import.meta.url));
const specId = 'https://switchyard.test/openai-openapi.json';

type Json = Record<string, unknown>;

/** `nullable: true` as JSON Schema says it, everywhere in the tree. */
function withNullables(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(withNullables);
  if (node === null || typeof node !== 'object') return node;
  const out: Json = {};
  for (const [key, value] of Object.entries(node as Json))
    out[key] = key === 'example' || key === 'examples' ? value : withNullables(value);
  if (out.nullable !== true) return out;
  delete out.nullable;
  if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
  if (typeof out.type === 'string') return { ...out, type: [out.type, 'null'] };
  if (Array.isArray(out.type)) return out.type.includes('null') ? out : { ...out, type: [...out.type, 'null'] };
  return { anyOf: [out, { type: 'null' }] };
}

let loaded: { ajv: Ajv2020; names: Set<string> } | undefined;
const compiled = new Map<string, ValidateFunction>();

function load(): { ajv: Ajv2020; names: Set<string> } {
  if (loaded) return loaded;
  const spec = parse(readFileSync(specPath, 'utf8'), { maxAliasCount: -1 }) as { components: { schemas: Json } };
  const schemas = withNullables(spec.components.schemas) as Json;
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true, allowUnionTypes: true });
  addFormats.default(ajv);
  // The spec's own format for Unix timestamps in seconds.
  ajv.addFormat('unixtime', { type: 'number', validate: (value: number) => Number.isInteger(value) && value >= 0 });
  ajv.addSchema({ $id: specId, components: { schemas } });
  loaded = { ajv, names: new Set(Object.keys(schemas)) };
  return loaded;
}

/** The spec's schema named `name` (a key of components.schemas). */
export function openApiSchema(name: string): ValidateFunction {
  let validate = compiled.get(name);
  if (validate) return validate;
  const { ajv, names } = load();
  assert.ok(names.has(name), `the OpenAPI spec has no schema '${name}'`);
  validate = ajv.compile({ $ref: `${specId}#/components/schemas/${name}` });
  compiled.set(name, validate);
  return validate;
}

/**
 * A union (`oneOf`/`anyOf`) that fails reports every member's complaint,
 * most of them only that the value is not that member (a `type` it does not
 * have, "must match a schema"). Those go last, so what the value's own
 * member says is read first.
 */
function isUnionNoise(error: ErrorObject): boolean {
  if (error.keyword === 'oneOf' || error.keyword === 'anyOf') return true;
  return (error.keyword === 'enum' || error.keyword === 'const') && error.instancePath.endsWith('/type');
}

/** Fails, with the spec's complaints and the value, unless `value` validates against the schema `name`. */
export function assertMatchesSchema(name: string, value: unknown, where: string): void {
  const validate = openApiSchema(name);
  if (validate(value)) return;
  const all = validate.errors ?? [];
  const lines = [...all.filter((error) => !isUnionNoise(error)), ...all.filter(isUnionNoise)].map(
    (error) =>
      `  ${error.instancePath || '(root)'} ${error.message ?? ''} ${error.params ? JSON.stringify(error.params) : ''}`,
  );
  const unique = [...new Set(lines)];
  const shown = unique.slice(0, 24).join('\n') + (unique.length > 24 ? `\n  … and ${unique.length - 24} more` : '');
  const text = JSON.stringify(value);
  assert.fail(
    `${where}: does not match the OpenAPI schema ${name}:\n${shown}\nvalue: ${text.length > 1500 ? `${text.slice(0, 1500)}…` : text}`,
  );
}

/** The data of each `data:` frame of an SSE body that is JSON (the closing `[DONE]` aside), with its `event:` name. */
export function sseEvents(body: string): Array<{ event: string | undefined; data: unknown }> {
  const events: Array<{ event: string | undefined; data: unknown }> = [];
  for (const frame of body.split('\n\n')) {
    let event: string | undefined;
    const data: string[] = [];
    for (const line of frame.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data.push(line.slice(6));
    }
    if (data.length === 0) continue;
    const text = data.join('\n');
    if (text === '[DONE]') continue;
    events.push({ event, data: JSON.parse(text) });
  }
  return events;
}
