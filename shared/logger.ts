import { pino, type Logger } from 'pino';

export type { Logger };

/** JSON logs on stdout; request-scoped children carry `reqId`. Vendor keys are redacted wherever they appear as fields. */
export function createLogger(level: string, name: string): Logger {
  return pino({
    name,
    level,
    base: { pid: process.pid },
    redact: { paths: ['apiKey', '*.apiKey', 'authorization', '*.authorization', 'headers.authorization'], censor: '[redacted]' },
  });
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
