import {
  Client,
  SSEClientTransport,
  StreamableHTTPClientTransport,
  type Transport,
} from '@modelcontextprotocol/client';
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import type { McpServer } from '../../shared/mcp/servers.js';

/** How the gateway names itself to an upstream server. */
const clientInfo = { name: 'switchyard', version: '1' };

/** A client of the gateway's own, not yet connected. */
export function upstreamClient(): Client {
  return new Client(clientInfo, { capabilities: {} });
}

/**
 * The transport to one upstream server: its Streamable HTTP endpoint or legacy event stream with the headers the file
 * gives it (redirects refused), or the command the workers run, with a safe few of the worker's variables (`PATH`,
 * `HOME`, …: never its secrets) and the file's `env`. `signal` aborts an HTTP request under way.
 */
export function upstreamTransport(server: McpServer, signal?: AbortSignal): Transport {
  if (server.command) {
    const { program, args, env, cwd } = server.command;
    return new StdioClientTransport({
      command: program,
      args: [...args],
      env: { ...getDefaultEnvironment(), ...env },
      ...(cwd !== undefined ? { cwd } : {}),
      stderr: 'ignore',
    });
  }
  const requestInit: RequestInit = { headers: { ...server.headers }, redirect: 'error', ...(signal ? { signal } : {}) };
  const url = new URL(server.url!);
  return server.transport === 'sse'
    ? new SSEClientTransport(url, { requestInit })
    : new StreamableHTTPClientTransport(url, { requestInit });
}
