import { readdirSync, type Dirent } from 'node:fs';
import { join } from 'node:path';

/**
 * The names of the files under a folder of a local blob store, walked a folder at a time: a folder the gateway
 * removes meanwhile (the store deletes emptied folders) reads as empty, where `readdirSync`'s own recursive walk
 * would throw. `.meta.json` companions are left out.
 */
export function filesUnder(dir: string): string[] {
  let entries: Dirent[];
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  return entries.flatMap((entry) =>
    entry.isDirectory() ? filesUnder(join(dir, entry.name)) : entry.name.endsWith('.meta.json') ? [] : [entry.name],
  );
}
