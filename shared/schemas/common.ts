import { z } from 'zod';

/**
 * Text the record can keep. PostgreSQL's text has no place for NUL (U+0000): a row holding one is refused
 * (`invalid byte sequence for encoding "UTF8": 0x00`) and a query naming one fails; NUL is the only such character
 * (a lone surrogate is not one: the driver writes it as U+FFFD). Every id, model, name, note and filter that may
 * reach the record or a query of it is this, so a NUL is a 400 naming its field, never a 500 or a usage entry the
 * record's writer cannot write.
 */
export const storableText = () =>
  z.string().refine((text) => !text.includes('\u0000'), 'must not contain a NUL character (\\u0000)');
/** A request's `model`: it reaches the request log. */
export const modelSchema = storableText().min(1);

export const temperatureSchema = z.number().min(0).max(2).nullish();
export const topPSchema = z.number().min(0).max(1).nullish();
export const penaltySchema = z.number().min(-2).max(2).nullish();
export const choiceCountSchema = z.number().int().min(1).max(128).nullish();
export const seedSchema = z.number().int().nullish();
export const userSchema = z.string().nullish();
export const logitBiasSchema = z.record(z.string(), z.number().min(-100).max(100)).nullish();
export const stopSchema = z.union([z.string(), z.array(z.string()).min(1).max(4)]).nullish();
export const streamOptionsSchema = z
  .looseObject({ include_usage: z.boolean().nullish(), include_obfuscation: z.boolean().nullish() })
  .nullish();

/** Token arrays as the OpenAI spec allows them in `prompt` and `input`. */
export const tokenArraySchema = z.custom<number[]>(
  (value) => Array.isArray(value) && value.length > 0 && value.every((token) => Number.isInteger(token) && token >= 0),
  // One check in one loop: a long array of bad ids is one error, not one per element.
  { message: 'expected a non-empty array of token ids (integers ≥ 0)' },
);

/**
 * An array of `min` to `max` elements, its length checked before any element
 * is: a list far too long is refused at once instead of validated item by
 * item (with an error record for each bad one) first.
 */
export const boundedArray = <T extends z.ZodType>(element: T, min: number, max: number) =>
  z.array(z.unknown()).min(min).max(max).pipe(z.array(element));

/**
 * A number that arrives as a multipart text field. The whole field must be a
 * finite number: '', 'abc', 'NaN' and '1e999' are refused with what was sent,
 * where a plain coercion would take '' as 0 and call NaN "a number".
 */
export const formNumber = () =>
  z.union([z.number(), z.string()]).transform((value, ctx) => {
    const number = typeof value === 'number' ? value : value.trim() === '' ? Number.NaN : Number(value);
    if (Number.isFinite(number)) return number;
    const shown =
      typeof value === 'string' ? (value === '' ? 'an empty string' : `'${value.slice(0, 40)}'`) : String(value);
    ctx.addIssue({ code: 'custom', message: `expected a finite number, but got ${shown}` });
    return z.NEVER;
  });
