import { pino, type DestinationStream, type Logger } from 'pino';

export type { Logger };

export type LogFormat = 'auto' | 'json' | 'pretty';

/**
 * Logs on stdout: JSON lines (pino) for machines, or, for a person at a
 * terminal (`LOG_FORMAT=pretty`, or `auto` with stdout a TTY), one short line
 * each: the time, the level, the message and the fields it does not already
 * say. Request-scoped children carry `reqId`. Vendor keys are redacted
 * wherever they appear as fields.
 */
export function createLogger(level: string, name: string, format: LogFormat = 'json'): Logger {
  const options = {
    name,
    level,
    base: { pid: process.pid },
    redact: {
      paths: ['apiKey', '*.apiKey', 'authorization', '*.authorization', 'headers.authorization'],
      censor: '[redacted]',
    },
  };
  const pretty = format === 'pretty' || (format === 'auto' && process.stdout.isTTY === true);
  // In this process, no worker thread: pino's own stdout destination, written asynchronously and flushed at exit (two
  // processes sharing one stdout, as `npm start`'s do, may see their lines arrive out of the order they were logged
  // in).
  return pretty ? pino(options, prettyLines(name)) : pino(options);
}

const labels: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
/** The fields every line has, or that the line says another way. */
const unsaid = new Set(['level', 'time', 'pid', 'hostname', 'name', 'msg', 'err']);

/** A destination turning each of pino's JSON lines into one a person reads; colour only on a terminal that wants it. */
function prettyLines(name: string): DestinationStream {
  const colour = process.stdout.isTTY === true && !process.env.NO_COLOR;
  const paint = (code: number, text: string) => (colour ? `\u001b[${code}m${text}\u001b[0m` : text);
  // `npm start`'s worker process shares the terminal: its lines say whose they are.
  const who = name === 'switchyard-all' ? '' : `[${name.replace(/^switchyard-/, '')}] `;
  return {
    write(line: string) {
      process.stdout.write(`${prettyLine(line, who, paint)}\n`);
    },
  };
}

/** One JSON log line as `HH:MM:SS LEVEL [who] message key=value …`, an error's stack below it from ERROR up. */
export function prettyLine(
  json: string,
  who = '',
  paint: (code: number, text: string) => string = (_code, text) => text,
): string {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.trimEnd();
  }
  const level = Number(entry.level);
  const time = new Date(Number(entry.time) || Date.now()).toTimeString().slice(0, 8);
  const label = (labels[level] ?? String(entry.level)).padEnd(5);
  const message = String(entry.msg ?? '');
  const fields = Object.entries(entry)
    // A value the message already says (the URL, the port) is not said twice.
    .filter(
      ([key, value]) =>
        !unsaid.has(key) && value !== undefined && !(typeof value !== 'object' && message.includes(String(value))),
    )
    .map(([key, value]) => `${key}=${typeof value === 'string' && !/\s/.test(value) ? value : JSON.stringify(value)}`);
  const err = entry.err as { message?: string; stack?: string } | undefined;
  const text = [message, err?.message && !message.includes(err.message) ? `: ${err.message}` : ''].join('');
  const painted = level >= 50 ? paint(31, label) : level >= 40 ? paint(33, label) : paint(2, label);
  const out = `${paint(2, time)} ${painted} ${who}${text}${fields.length > 0 ? paint(2, `  ${fields.join(' ')}`) : ''}`;
  return level >= 50 && err?.stack ? `${out}\n${paint(2, err.stack.replace(/^/gm, '    '))}` : out;
}

/**
 * A child logger made only when first used: a request or job that goes well
 * logs nothing of its own, and building a pino child for each costs more
 * than the rest of its bookkeeping.
 */
export function lazyChild(parent: Logger, bindings: () => Record<string, unknown>): Logger {
  let child: Logger | undefined;
  return new Proxy(parent, {
    get(_target, name) {
      child ??= parent.child(bindings());
      const value = child[name as keyof Logger];
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(child) : value;
    },
  });
}
