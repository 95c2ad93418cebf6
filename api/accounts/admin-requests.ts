import { z } from 'zod';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import { cacheMarks, requestStatuses } from '../../shared/money/usage.js';
import { storableText } from '../../shared/schemas/common.js';
import { serviceTiers } from '../../shared/scheduling/vocabulary.js';
import { decodeCursor, type RequestFilter } from '../../storage/record/request-log.js';

/**
 * The request log's query strings, as `GET /admin/requests` and the console's
 * Activity page read them: filters, a page size and a cursor, checked by one
 * strict schema (a misspelt filter is refused, not ignored).
 */

const id = storableText().min(1).max(256);

/** Unix seconds, or an ISO 8601 date or date-time (UTC unless it says). */
const instant = z
  .string()
  .max(40)
  .transform((text, ctx) => {
    if (/^\d{1,12}$/.test(text)) return Number(text);
    const ms = /^\d{4}-\d{2}-\d{2}([T ][\d:.]+(Z|[+-]\d{2}:?\d{2})?)?$/.test(text)
      ? Date.parse(text.length === 10 ? `${text}T00:00:00Z` : text)
      : Number.NaN;
    if (Number.isNaN(ms)) {
      ctx.issues.push({ code: 'custom', message: 'expected unix seconds or an ISO 8601 date-time', input: text });
      return z.NEVER;
    }
    return Math.floor(ms / 1000);
  });

export const maxPageSize = 100;

/** The filters, as the query string names them. */
const filterFields = {
  account_id: id.optional(),
  key_id: id.optional(),
  model: id.optional(),
  status: z.enum(requestStatuses).optional(),
  service_tier: z.enum(serviceTiers).optional(),
  since: instant.optional(),
  until: instant.optional(),
  /** How the response cache took part: `hit`, `miss` (stored for later), `coalesced`, or `none` (not cached). */
  cache: z.enum([...cacheMarks, 'none']).optional(),
  /** A batch's id: its requests alone. */
  batch: id.optional(),
};

function toFilter(query: z.output<z.ZodObject<typeof filterFields>>): RequestFilter {
  return {
    ...(query.account_id !== undefined ? { accountId: query.account_id } : {}),
    ...(query.key_id !== undefined ? { keyId: query.key_id } : {}),
    ...(query.model !== undefined ? { model: query.model } : {}),
    ...(query.status !== undefined ? { status: query.status } : {}),
    ...(query.service_tier !== undefined ? { serviceTier: query.service_tier } : {}),
    ...(query.since !== undefined ? { since: query.since } : {}),
    ...(query.until !== undefined ? { until: query.until } : {}),
    ...(query.cache !== undefined ? { cache: query.cache } : {}),
    ...(query.batch !== undefined ? { batch: query.batch } : {}),
  };
}

/** A page of the log: the filters, a page size and a cursor. */
export const requestListQuerySchema = z
  .strictObject({
    ...filterFields,
    limit: z
      .string()
      .regex(/^\d{1,4}$/, 'expected a whole number')
      .transform(Number)
      .pipe(z.number().int().min(1).max(maxPageSize))
      .optional(),
    cursor: z.string().max(400).optional(),
  })
  .transform((query) => {
    const cursor = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
    if (query.cursor !== undefined && !cursor)
      throw invalidRequest('The cursor is not one this API gave out.', 'cursor');
    return { filter: toFilter(query), limit: query.limit ?? 50, cursor };
  });

/** The filters alone, without the paging (the histogram counts the whole range). */
export const requestFilterQuerySchema = z
  .strictObject(filterFields)
  .transform((query) => ({ filter: toFilter(query) }));

export type RequestListQuery = z.output<typeof requestListQuerySchema>;

export const generationQuerySchema = z.strictObject({ id });

/** The same answer for an id nobody made and one another key made. */
export const generationNotFound = (id: string) =>
  new GatewayError(
    404,
    `No request with id '${id.slice(0, 256)}' was found for this API key (a record appears a moment after its answer).`,
    {
      type: 'invalid_request_error',
      code: 'not_found',
      param: 'id',
    },
  );
