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
