import { z } from 'zod';
import { invalidRequest, type GatewayError } from '../../shared/errors.js';
import { formatParam, toValidationError } from '../http/request-body.js';

/*
 * A field's place in the client's request, and the 400 about it. A dialect's decoder reads pieces the request
 * schema left open (a loose content block, a tool of a type it does not list) with small schemas of its own; a
 * piece that fails is reported as the request body parser reports a whole body: the same words, and a `param`
 * rooted at the piece's place (`messages[2].content[0].source`, `tools[1].name`), in the client's own field names.
 */

/** A field's place in the request: names and indexes from its root. */
export type FieldPath = readonly (string | number)[];

/** A place as an error's `param` says it: `tools[1].function.name`. */
export const paramOf = (path: FieldPath): string => formatParam(path);

/**
 * The 400 for a piece of the request read at `path` that failed its schema: the body parser's, its issues rooted
 * at `path`. An enum or a union reports a missing field as a bad value: it is reported as the missing one it is.
 */
export function rootedError(error: z.ZodError, path: FieldPath): GatewayError {
  const issues = error.issues.map((issue) => ({ ...issue, path: [...path, ...issue.path] }));
  const first = issues[0];
  if (first && 'input' in first && first.input === undefined) {
    const param = formatParam(first.path);
    return invalidRequest(`Missing required parameter: '${param}'.`, param, 'missing_required_parameter');
  }
  return toValidationError(new z.ZodError(issues));
}

/** `value` read with `schema`, or the 400 rooted at `path`. */
export function parseAt<T extends z.ZodType>(schema: T, value: unknown, path: FieldPath): z.output<T> {
  const result = schema.safeParse(value, { reportInput: true });
  if (result.success) return result.data;
  throw rootedError(result.error, path);
}

/** `Invalid '<param>': <why>`, about the field at `path`. */
export function invalidAt(path: FieldPath, why: string, code = 'invalid_value'): GatewayError {
  const param = formatParam(path);
  return invalidRequest(`Invalid '${param}': ${why}`, param, code);
}
