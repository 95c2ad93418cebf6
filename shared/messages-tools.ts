import { chatSafeToolName } from './responses-tools.js';

/**
 * Tool names of the Messages API (`/v1/messages`) on vendors that speak chat. Anthropic takes tool names of up to
 * 128 characters, of characters chat's function names (`^[a-zA-Z0-9_-]{1,64}$`) do not allow; such a tool
 * travels to the vendor under a cleaned, shortened name made unique by a hash, and a call the vendor makes under
 * that name is answered to the client under the tool's own. The api (translating the request) and the worker
 * (writing the answer's `tool_use` blocks) both derive the names from the request's tools, so nothing else needs
 * to travel with the job.
 */

/** The name a tool has on the chat side: its own when chat takes it, else a cleaned one made unique by a hash of it. */
export function chatToolName(name: string): string {
  return chatSafeToolName(name);
}

/** Each chat name that differs from the client's (a tool renamed for chat), mapped back to the client's name. */
export function toolNamesBack(
  tools: readonly ({ name: string } | { type: 'mcp_toolset' })[] | null | undefined,
): Map<string, string> {
  const names = new Map<string, string>();
  for (const tool of tools ?? []) {
    if (!('name' in tool)) continue;
    const chat = chatToolName(tool.name);
    if (chat !== tool.name) names.set(chat, tool.name);
  }
  return names;
}
