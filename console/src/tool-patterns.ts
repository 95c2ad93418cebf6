/**
 * MCP tool patterns as the console's forms take them (a key's on All keys, an account's on Accounts): `server/tool`,
 * either part may hold `*`, or `*` alone, separated by commas or spaces. The gateway checks them again
 * (shared/mcp/tool-rules.ts); this only says early what it would refuse.
 */
export function parseToolPatterns(text: string): string[] | string {
  const patterns = text.split(/[\s,]+/).filter((pattern) => pattern !== '');
  const bad = patterns.find((pattern) => pattern !== '*' && !/^[A-Za-z0-9_.*-]+\/[A-Za-z0-9_.*-]+$/.test(pattern));
  return bad === undefined
    ? patterns
    : `"${bad}" is no tool pattern: write server/tool, e.g. notes/* or github/create_issue.`;
}
