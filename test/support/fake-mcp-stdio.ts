/**
 * An MCP server that speaks on its standard input and output, built with the official SDK: what a gateway worker runs
 * for a server the file gives by `command`. `FAKE_MCP_MODE=hang` reads its input and never answers; its pid is
 * written to `FAKE_MCP_PID_FILE` when set, so a test can see it end.
 *
 *   node --import tsx test/support/fake-mcp-stdio.ts
 */
import { writeFileSync } from 'node:fs';
import { McpServer } from '@modelcontextprotocol/server';
import { StdioServerTransport } from '@modelcontextprotocol/server/stdio';
import { z } from 'zod';

if (process.env.FAKE_MCP_PID_FILE) writeFileSync(process.env.FAKE_MCP_PID_FILE, String(process.pid));
if (process.env.FAKE_MCP_MODE === 'hang') {
  process.stdin.resume();
} else {
  const server = new McpServer({ name: 'fake-local', version: '2.0.0' });
  server.registerTool(
    'whoami',
    {
      description: `Says which variable it was given: ${process.env.FAKE_MCP_GREETING ?? 'none'}.`,
      inputSchema: z.object({}),
    },
    async () => ({
      content: [{ type: 'text', text: process.env.FAKE_MCP_GREETING ?? 'none' }],
    }),
  );
  await server.connect(new StdioServerTransport());
}
