import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';

/**
 * What a suite's tests leave behind (gateways, Redis and PostgreSQL servers,
 * folders), undone after the suite, the last made first. Call it in the
 * `describe` body: the `after` hook it registers is that suite's.
 */
export function cleanupsAfter(): {
  defer(cleanup: () => Promise<unknown> | unknown): void;
  /** A new folder under the system's temporary one (`prefix` then random characters), removed after the suite. */
  tempDir(prefix: string): string;
} {
  const cleanups: Array<() => Promise<unknown> | unknown> = [];
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  });
  return {
    defer: (cleanup) => void cleanups.push(cleanup),
    tempDir(prefix) {
      const dir = mkdtempSync(join(tmpdir(), prefix));
      cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
      return dir;
    },
  };
}
