/* The console's way of writing dollars, as the browser tests check every amount a page shows against it. */

/**
 * The console's one money rule: cents from $1 up; below $1 at least cents,
 * up to 4 significant digits, never past the micro-dollar, no trailing zero
 * past the cents.
 */
export function followsMoneyRule(text: string): boolean {
  const match = /^-?\$(\d{1,3}(?:,\d{3})*)\.(\d+)$/.exec(text);
  if (!match) return false;
  const whole = Number(match[1]!.replace(/,/g, ''));
  const fraction = match[2]!;
  if (whole >= 1) return fraction.length === 2;
  if (fraction.length < 2 || fraction.length > 6) return false;
  if (fraction.length > 2 && fraction.endsWith('0')) return false;
  return fraction.replace(/^0+/, '').length <= 4;
}

/** Every dollar amount written in `text`. */
export function amountsIn(text: string): string[] {
  return text.match(/-?\$[\d,]*\.?\d+/g) ?? [];
}
