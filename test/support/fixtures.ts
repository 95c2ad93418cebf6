import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The recorded vendor streams, in the repository: `test/fixtures/<vendor>/` (see test/fixtures/README.md). */
export const fixturesDir = fileURLToPath(new URL('../fixtures/', import.meta.url));

export type WireVendor = 'openai' | 'anthropic' | 'gemini';
const vendors: readonly WireVendor[] = ['openai', 'anthropic', 'gemini'];

/** The directory of one vendor's recorded streams. */
export const vendorFixturesDir = (vendor: WireVendor) => join(fixturesDir, vendor);

/**
 * The path of a recorded stream, by file name: the name's first word is the
 * vendor (`openai-chat-stream-tool-call.sse` → test/fixtures/openai/…).
 */
export function wireFixture(name: string): string {
  const vendor = vendors.find((v) => name.startsWith(`${v}-`));
  if (!vendor) throw new Error(`wireFixture("${name}"): the name must start with a vendor (${vendors.join(', ')})`);
  const path = join(vendorFixturesDir(vendor), name);
  if (!existsSync(path)) throw new Error(`wireFixture("${name}"): no such recorded stream at ${path}`);
  return path;
}

/**
 * The text of a small Lua script the tests evaluate to check Redis itself (`test/fixtures/lua/<name>.lua`): kept as a
 * file, as the gateway's own scripts are, so no test holds Lua in a string.
 */
export function luaFixture(name: string): string {
  return readFileSync(join(fixturesDir, 'lua', `${name}.lua`), 'utf8');
}
