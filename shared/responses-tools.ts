import { createHash } from 'node:crypto';
import { isRecord } from './response-object.js';

/**
 * Namespaced tools of the Responses API (`{"type":"namespace","name":"crm","tools":[…function tools…]}`, as Codex
 * sends them) on vendors whose tools are flat functions: each of a namespace's functions travels to the vendor
 * under one flat name, and a call the vendor makes under that name comes back as a `function_call` item with its
 * `namespace` and its own `name`. The api (translating the request) and the worker (encoding the answer) both
 * derive the names from the request's tools, so nothing else needs to travel with the job.
 */

/** Chat's function names: letters, digits, `_` and `-`, at most 64. */
const maxNameLength = 64;

/**
 * `name` when chat takes it as a function name; else the name with every character chat refuses made `_`, cut
 * short, and ended by a hash of `key` (what identifies the tool), so that two tools that read alike once cleaned
 * still travel under different names. Shared by the Responses API's namespaced tools and the Messages API's
 * tools (shared/messages-tools.ts).
 */
export function chatSafeToolName(name: string, key: string = name): string {
  if (name.length <= maxNameLength && /^[a-zA-Z0-9_-]+$/.test(name)) return name;
  const hash = createHash('sha256').update(key).digest('hex').slice(0, 8);
  const safe = name.replace(/[^a-zA-Z0-9_-]/g, '_');
  return `${safe.slice(0, maxNameLength - hash.length - 1)}_${hash}`;
}

/**
 * `<namespace>__<name>`, or, when that is too long or not a valid function name, a shortened form made unique by a
 * hash.
 */
export function flatToolName(namespace: string, name: string): string {
  return chatSafeToolName(`${namespace}__${name}`, `${namespace}\u0000${name}`);
}

export interface NamespacedName {
  namespace: string;
  name: string;
}

/** Each flat name of a request's namespaced function tools (as the client sent them), with its namespace and name. */
export function namespacedTools(tools: readonly unknown[] | null | undefined): Map<string, NamespacedName> {
  const names = new Map<string, NamespacedName>();
  for (const tool of tools ?? []) {
    if (!isRecord(tool) || tool.type !== 'namespace' || typeof tool.name !== 'string' || !Array.isArray(tool.tools))
      continue;
    for (const inner of tool.tools) {
      if (isRecord(inner) && inner.type === 'function' && typeof inner.name === 'string') {
        names.set(flatToolName(tool.name, inner.name), { namespace: tool.name, name: inner.name });
      }
    }
  }
  return names;
}

/** A vendor's call by its flat name, as the client knows it: its namespace (if any) and name. */
export function clientToolName(
  flat: string,
  names: ReadonlyMap<string, NamespacedName>,
): { name: string; namespace?: string } {
  return names.get(flat) ?? { name: flat };
}
