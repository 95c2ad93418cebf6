import { z } from 'zod';

/**
 * Which tools of the upstream MCP servers a key may use: `server/tool` patterns an admin sets on the key and on its
 * team (`mcp_tools` of the admin API's keys and accounts). `*` stands for any characters within its part:
 * `notes/*` is every tool of `notes`, `github/create_*` the tools of `github` named so, `*` alone every tool. A list
 * left unset (null) allows every tool; an empty list allows none. A tool is usable when the key's list and the team's
 * both allow it: the team bounds its keys, a key narrows what its team allows.
 *
 * A tool not allowed is neither listed (`tools/list`) nor callable (`tools/call` answers a JSON-RPC error naming the
 * rule), on `/mcp` and `/mcp/{server}` alike; each call is checked again by the worker as it starts, so a rule
 * changed while the call waited holds for it.
 */

/** A part of a pattern: a server's or a tool's name, with `*` for any characters. */
const part = /^[A-Za-z0-9_.*-]{1,128}$/;

export const toolPattern = z
  .string()
  .trim()
  .min(1)
  .max(300)
  .refine((text) => {
    if (text === '*') return true;
    const slash = text.indexOf('/');
    return slash > 0 && part.test(text.slice(0, slash)) && part.test(text.slice(slash + 1));
  }, 'a tool pattern is `server/tool`, either part may hold `*` (e.g. `notes/*`, `github/create_issue`), or `*` for ' + 'every tool');

/** The `mcp_tools` of a key or account as the admin API takes it: null lifts it (every tool). */
export const toolPatterns = z.array(toolPattern).max(1000);

/**
 * A list from its stored JSON ('' or undefined: none set); one that cannot be read allows nothing rather than
 * everything.
 */
export function parseToolPatterns(text: string | null | undefined): readonly string[] | undefined {
  if (text === undefined || text === null || text === '') return undefined;
  try {
    const patterns: unknown = JSON.parse(text);
    if (Array.isArray(patterns) && patterns.every((p) => typeof p === 'string')) return patterns;
  } catch {
    // fall through
  }
  return [];
}

const globs = new Map<string, RegExp>();

function glob(text: string): RegExp {
  let re = globs.get(text);
  if (!re) {
    re = new RegExp(
      `^${text
        .split('*')
        .map((piece) => piece.replace(/[.+?^${}()|[\]\\-]/g, '\\$&'))
        .join('.*')}$`,
    );
    if (globs.size > 10_000) globs.clear();
    globs.set(text, re);
  }
  return re;
}

/** Whether one pattern names the server's tool. */
export function patternAllows(pattern: string, server: string, tool: string): boolean {
  if (pattern === '*') return true;
  const slash = pattern.indexOf('/');
  if (slash <= 0) return false;
  return glob(pattern.slice(0, slash)).test(server) && glob(pattern.slice(slash + 1)).test(tool);
}

/** Whether a list allows the tool (unset: every tool). */
export function listAllows(patterns: readonly string[] | undefined, server: string, tool: string): boolean {
  return patterns === undefined || patterns.some((pattern) => patternAllows(pattern, server, tool));
}

/** Whether a list may allow any tool of the server (for `/mcp/{server}` and which servers `/mcp` reaches at all). */
export function listReachesServer(patterns: readonly string[] | undefined, server: string): boolean {
  if (patterns === undefined) return true;
  return patterns.some(
    (pattern) =>
      pattern === '*' || (pattern.indexOf('/') > 0 && glob(pattern.slice(0, pattern.indexOf('/'))).test(server)),
  );
}

/** What holds a key's tools: its own list and its team's. */
export interface ToolRules {
  mcpTools?: readonly string[];
  teamMcpTools?: readonly string[];
}

/** Why the key may not use the tool (the words of the JSON-RPC error), or undefined when it may. */
export function toolRefusal(rules: ToolRules, server: string, tool: string): string | undefined {
  const name = `${server}/${tool}`;
  if (!listAllows(rules.teamMcpTools, server, tool)) {
    return (
      `This API key may not use the tool \`${name}\`: its team allows ${allowedText(rules.teamMcpTools!)}. Ask an ` +
      `administrator to change the team's mcp_tools.`
    );
  }
  if (!listAllows(rules.mcpTools, server, tool)) {
    return (
      `This API key may not use the tool \`${name}\`: the key allows ${allowedText(rules.mcpTools!)}. Ask an ` +
      `administrator to change the key's mcp_tools.`
    );
  }
  return undefined;
}

function allowedText(patterns: readonly string[]): string {
  if (patterns.length === 0) return 'no tools';
  return `only ${patterns
    .slice(0, 10)
    .map((p) => `\`${p}\``)
    .join(', ')}${patterns.length > 10 ? ` and ${patterns.length - 10} more patterns` : ''}`;
}

/** Whether the key may use any tool of the server. */
export function mayReachServer(rules: ToolRules, server: string): boolean {
  return listReachesServer(rules.teamMcpTools, server) && listReachesServer(rules.mcpTools, server);
}

/**
 * Why the key may not send this message on to the server (undefined when it may): a tool call by the tool's rule, a
 * read (`resources/read`, `prompts/get`) by whether the key may use any tool of the server. The api asks it at the
 * door, the worker again as it takes the call.
 */
export function callRefusal(
  rules: ToolRules,
  method: 'tools/call' | 'resources/read' | 'prompts/get',
  server: string,
  target: string,
): string | undefined {
  if (method === 'tools/call') return toolRefusal(rules, server, target);
  return mayReachServer(rules, server) ? undefined : `This API key may not use the MCP server ${server}.`;
}
