import type { z } from 'zod';
import { GatewayError } from '../shared/errors.js';

type Issue = z.core.$ZodIssue;
type PathKey = PropertyKey;

/** `['messages', 0, 'content']` → `messages[0].content`, the way OpenAI names params. */
export function formatParam(path: readonly PathKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
  }
  return out;
}

/** For a failed union, the branch that got furthest says most about what the client meant. */
function mostSpecific(issue: Issue, base: readonly PathKey[]): { issue: Issue; path: PathKey[] } {
  const path = [...base, ...issue.path];
  if (issue.code !== 'invalid_union' || issue.errors.length === 0) return { issue, path };
  let best: { issue: Issue; path: PathKey[] } | undefined;
  for (const branch of issue.errors) {
    for (const inner of branch) {
      const candidate = mostSpecific(inner, path);
      if (!best || candidate.path.length > best.path.length) best = candidate;
    }
  }
  // Branches that all fail at the union's own path (wrong type altogether) say nothing more specific.
  return best && best.path.length > path.length ? best : { issue, path };
}

function describe(issue: Issue, param: string): string {
  switch (issue.code) {
    case 'invalid_type':
      return issue.input === undefined
        ? `Missing required parameter: '${param}'.`
        : `Invalid type for '${param}': expected ${article(issue.expected)}, but got ${describeValue(issue.input)} instead.`;
    case 'too_big':
      return issue.origin === 'array'
        ? `Invalid '${param}': array too long. Expected an array with maximum length ${issue.maximum}.`
        : `Invalid '${param}': ${issue.origin === 'string' ? 'string too long' : `expected a value ≤ ${issue.maximum}`}.`;
    case 'too_small':
      return issue.origin === 'array'
        ? `Invalid '${param}': empty array. Expected an array with minimum length ${issue.minimum}.`
        : issue.origin === 'string'
          ? `Invalid '${param}': ${issue.message}.`
          : `Invalid '${param}': expected a value ≥ ${issue.minimum}.`;
    case 'invalid_union':
      if ('discriminator' in issue && issue.discriminator) {
        const options = (issue as { options?: unknown[] }).options ?? [];
        return `Invalid value for '${param}': expected one of ${options.map((o) => `'${String(o)}'`).join(', ')}.`;
      }
      return `Invalid value for '${param}': it matches none of the accepted forms.`;
    case 'invalid_value':
      return `Invalid value for '${param}': expected one of ${issue.values.map((v) => `'${String(v)}'`).join(', ')}.`;
    default:
      return `Invalid '${param}': ${issue.message}.`;
  }
}

function article(type: string): string {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  if (typeof value === 'number' && !Number.isFinite(value)) return `${value}`;
  return article(typeof value);
}

/** The first problem of a failed parse, as the 400 OpenAI would give. */
export function toValidationError(error: z.ZodError): GatewayError {
  const first = error.issues[0];
  if (!first) return new GatewayError(400, 'Invalid request body.');
  const { issue, path } = mostSpecific(first, []);
  const param = formatParam(path);
  const code = issue.code !== 'invalid_type' ? 'invalid_value' : issue.input === undefined ? 'missing_required_parameter' : 'invalid_type';
  return new GatewayError(400, describe(issue, param), { param: param || null, code });
}

export function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.output<T> {
  // reportInput: without it zod leaves `input` out, and a wrong type would read as a missing one.
  const result = schema.safeParse(body, { reportInput: true });
  if (!result.success) throw toValidationError(result.error);
  return result.data;
}
