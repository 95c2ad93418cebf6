// Money, numbers and dates as the user's locale writes them.

const integer = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const decimal = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });
const compact = new Intl.NumberFormat(undefined, { notation: 'compact', maximumFractionDigits: 1 });

/** USD with at least cents and at most `digits` decimals (2–6), one formatter per count. */
const dollars = Array.from(
  { length: 7 },
  (_, digits) =>
    new Intl.NumberFormat(undefined, {
      style: 'currency',
      currency: 'USD',
      minimumFractionDigits: 2,
      maximumFractionDigits: Math.max(2, digits),
    }),
);

/**
 * USD, one rule for every amount the console shows (spend, balance, limit,
 * credit, price): cents from $1 up; below $1, up to 4 significant digits, at
 * least cents and never past the micro-dollar (what billing counts in). So
 * $12.35 and $0.50 read alike, while $0.000009 or a $0.01875 price never read
 * as $0.00. Every price in the catalog is exact under it.
 */
export function money(usd: number | null | undefined): string {
  if (usd == null || !Number.isFinite(usd)) return '—';
  const size = Math.abs(usd);
  if (size >= 1 || size === 0) return dollars[2]!.format(usd);
  // 4 significant digits: 0.01875 has its first at the 2nd decimal, so it needs 5.
  const digits = Math.min(6, 3 - Math.floor(Math.log10(size)));
  return dollars[digits]!.format(usd);
}

/** A unit price: the same rule as every amount. */
export const price = money;

export function balance(usd: number | null | undefined): string {
  return usd === null ? 'Unlimited' : money(usd);
}

export function count(n: number | null | undefined): string {
  return n == null ? '—' : integer.format(n);
}

export function number(n: number | null | undefined): string {
  return n == null ? '—' : decimal.format(n);
}

export function compactCount(n: number): string {
  return compact.format(n);
}

const dateFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium' });
const timeFormat = new Intl.DateTimeFormat(undefined, {
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  timeZoneName: 'short',
});
const dayFormat = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', timeZone: 'UTC' });

/** Unix seconds → a date. */
export function date(seconds: number | null | undefined): string {
  return seconds == null ? '—' : dateFormat.format(new Date(seconds * 1000));
}

const shortDateFormat = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' });
const relative = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto', style: 'short' });

/** Unix seconds → a compact date ("Mar 4"; with the year when it is not this one). */
export function shortDate(seconds: number | null | undefined): string {
  if (seconds == null) return '—';
  const when = new Date(seconds * 1000);
  return when.getFullYear() === new Date().getFullYear() ? shortDateFormat.format(when) : dateFormat.format(when);
}

/** Unix seconds → "5 min. ago", "yesterday", or a date past a week. */
export function ago(seconds: number | null | undefined): string {
  if (seconds == null) return '—';
  const diff = seconds - Date.now() / 1000;
  const abs = Math.abs(diff);
  if (abs < 45) return 'just now';
  if (abs < 3600) return relative.format(Math.round(diff / 60), 'minute');
  if (abs < 86_400) return relative.format(Math.round(diff / 3600), 'hour');
  if (abs < 7 * 86_400) return relative.format(Math.round(diff / 86_400), 'day');
  return shortDate(seconds);
}

/*
 * One date-and-time form on every page, with its zone, in the browser's own zone: "Nov 28, 04:19 PM UTC" (the year
 * when it is not this one), and to the second where a row is an event in a log ("Nov 28, 04:19:05 PM UTC"). Periods
 * and days that are UTC say so where they are shown (Usage's days, Budgets' periods).
 */
const stampFormats = new Map<string, Intl.DateTimeFormat>();

function stampFormat(ms: number, toTheSecond: boolean): Intl.DateTimeFormat {
  const when = new Date(ms);
  const thisYear = when.getFullYear() === new Date().getFullYear();
  const name = `${thisYear ? 'y' : 'Y'}${toTheSecond ? 's' : 'm'}`;
  let format = stampFormats.get(name);
  if (!format) {
    format = new Intl.DateTimeFormat(undefined, {
      ...(thisYear ? {} : { year: 'numeric' }),
      month: 'short',
      day: 'numeric',
      hour: '2-digit',
      minute: '2-digit',
      ...(toTheSecond ? { second: '2-digit' } : {}),
      timeZoneName: 'short',
    });
    stampFormats.set(name, format);
  }
  return format;
}

function stamp(ms: number, toTheSecond: boolean): string {
  return stampFormat(ms, toTheSecond).format(new Date(ms));
}

/** Unix seconds → date and time to the minute, with the zone (a narrow column, a key's dates, a reset). */
export function shortDateTime(seconds: number | null | undefined): string {
  return seconds == null ? '—' : stamp(seconds * 1000, false);
}

/** Unix seconds → date and time to the minute, with the zone. */
export function dateTime(seconds: number | null | undefined): string {
  return seconds == null ? '—' : stamp(seconds * 1000, false);
}

/** Unix ms → the time of day to the second, with the zone ("Updated 04:19:05 PM UTC"). */
export function timeOfDay(ms: number): string {
  return timeFormat.format(new Date(ms));
}

/**
 * Unix ms → the time to the second with the zone when it is today (a badge's "until 04:19:05 PM UTC"), else the date
 * too.
 */
export function moment(ms: number | null | undefined): string {
  if (ms == null) return '—';
  return new Date(ms).toDateString() === new Date().toDateString() ? timeFormat.format(new Date(ms)) : stamp(ms, true);
}

/** Unix seconds → date and time to the second, with the zone: a request's or a change's time in a list. */
export function requestTime(seconds: number | null | undefined): string {
  return seconds == null ? '—' : stamp(seconds * 1000, true);
}

/**
 * Unix seconds → requestTime's text in its two halves, the day ("Nov 28,") and the time with its zone ("04:19:05 PM
 * UTC"), for a narrow cell that puts them on two lines rather than break inside either. Joined by a space they read
 * as requestTime's text.
 */
export function requestTimeHalves(seconds: number): [string, string] {
  const parts = stampFormat(seconds * 1000, true).formatToParts(new Date(seconds * 1000));
  const at = parts.findIndex((part) => part.type === 'hour' || part.type === 'dayPeriod');
  if (at <= 0) return ['', parts.map((part) => part.value).join('')];
  return [
    parts
      .slice(0, at)
      .map((part) => part.value)
      .join('')
      .trimEnd(),
    parts
      .slice(at)
      .map((part) => part.value)
      .join(''),
  ];
}

/** Unix seconds → date and time to the second, with the zone (a request's details). */
export function fullTime(seconds: number | null | undefined): string {
  return seconds == null ? '—' : stamp(seconds * 1000, true);
}

const barClockFormat = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
const barDayClockFormat = new Intl.DateTimeFormat(undefined, {
  month: 'short',
  day: 'numeric',
  hour: '2-digit',
  minute: '2-digit',
});

/**
 * A chart bar's start (unix seconds): a day for day bars, else the time, with the day when the range spans more than
 * one.
 */
export function barLabel(seconds: number, bucketSeconds: number, manyDays: boolean): string {
  const when = new Date(seconds * 1000);
  if (bucketSeconds >= 86_400) return dayFormat.format(when);
  return manyDays ? barDayClockFormat.format(when) : barClockFormat.format(when);
}

/** Milliseconds as a person reads them: "850 ms", "1.25 s", "2 min 5 s". */
export function duration(ms: number | null | undefined): string {
  if (ms == null) return '—';
  if (ms < 1000) return `${integer.format(ms)} ms`;
  if (ms < 60_000)
    return `${new Intl.NumberFormat(undefined, { maximumFractionDigits: ms < 10_000 ? 2 : 1 }).format(ms / 1000)} s`;
  const minutes = Math.floor(ms / 60_000);
  return `${integer.format(minutes)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

const percentFormat = new Intl.NumberFormat(undefined, { style: 'percent', maximumFractionDigits: 1 });

/** A share (0–1) as a percentage. */
export function percent(share: number | null | undefined): string {
  return share == null ? '—' : percentFormat.format(share);
}

/** A UTC day (YYYY-MM-DD) as a short label ("Mar 4"). */
export function dayLabel(day: string): string {
  return dayFormat.format(new Date(`${day}T00:00:00Z`));
}

/** Every UTC day from `from` to `to`, inclusive. */
export function daysBetween(from: string, to: string): string[] {
  const days: string[] = [];
  const end = Date.parse(`${to}T00:00:00Z`);
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= end && days.length < 400; t += 86_400_000) {
    days.push(new Date(t).toISOString().slice(0, 10));
  }
  return days;
}

/** "1024x1024" → "1024×1024". */
export function size(text: string): string {
  return text.replace(/^(\d+)x(\d+)$/, '$1×$2');
}

export function contextWindow(tokens: number): string {
  return tokens > 0 ? compact.format(tokens) : '—';
}

/** A date input's value (YYYY-MM-DD, local) → unix seconds at the end of that local day. */
export function endOfLocalDay(value: string): number | undefined {
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(value);
  if (!match) return undefined;
  const end = new Date(Number(match[1]), Number(match[2]) - 1, Number(match[3]), 23, 59, 59);
  return Math.floor(end.getTime() / 1000);
}

/** Unix seconds → a date input's value (YYYY-MM-DD, local). */
export function dateInputValue(seconds: number | null | undefined): string {
  if (seconds == null) return '';
  const d = new Date(seconds * 1000);
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
}

export function todayInputValue(): string {
  return dateInputValue(Date.now() / 1000);
}
