import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer, ResourceTemplate, WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/server';
import { McpServer as LegacyMcpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { z } from 'zod';

/**
 * An upstream MCP server for the tests, built with the official SDK and served over Streamable HTTP, its sessions
 * kept (so a cancel reaches the call it names). `token`: every request must carry `Authorization: Bearer <token>`
 * (else 401); `mode`: `ok` serves, `fail` answers every request 500, `hang` never answers (the socket stays open),
 * `sse` serves the legacy HTTP+SSE transport only (the event stream at `/sse`, its messages posted to `/messages`),
 * with the 1.x SDK that still has it.
 */
export interface FakeMcp {
  url: string;
  /** Calls of `slow` running now, and the most that ran at once. */
  slow: { running: number; most: number; started: number; cancelled: number };
  /** Calls of `count` started. */
  counted: { started: number };
  /** The requests it received, with their headers. */
  seen: Array<{ method: string; authorization: string | undefined }>;
  close(): Promise<void>;
}

export async function startFakeMcp(
  options: { token?: string; mode?: 'ok' | 'fail' | 'hang' | 'sse'; name?: string; json?: boolean } = {},
): Promise<FakeMcp> {
  const mode = options.mode ?? 'ok';
  const seen: FakeMcp['seen'] = [];
  const slow = { running: 0, most: 0, started: 0, cancelled: 0 };
  const counted = { started: 0 };
  const hanging = new Set<ServerResponse>();
  const legacy = new Map<string, SSEServerTransport>();
  const sessions = new Map<string, WebStandardStreamableHTTPServerTransport>();
  const buildServer = () => {
    const server = new McpServer({ name: options.name ?? 'fake-notes', version: '1.2.3' });
    server.registerTool(
      'search',
      {
        description: 'Finds notes that hold a word.',
        inputSchema: z.object({ word: z.string() }),
        annotations: { readOnlyHint: true },
      },
      async ({ word }) => ({
        content: [{ type: 'text', text: `notes with ${word}: 2` }],
      }),
    );
    server.registerTool(
      'add',
      { description: 'Adds a note.', inputSchema: z.object({ text: z.string() }) },
      async () => ({ content: [{ type: 'text', text: 'added' }] }),
    );
    server.registerTool('crash', { description: 'Drops the connection.', inputSchema: z.object({}) }, async () => ({
      content: [],
    }));
    server.registerTool(
      'slow',
      {
        description: 'Answers after `ms` milliseconds.',
        inputSchema: z.object({ ms: z.number().int().min(0).max(60_000) }),
      },
      async ({ ms }, ctx) => {
        slow.running++;
        slow.started++;
        slow.most = Math.max(slow.most, slow.running);
        try {
          await new Promise<void>((resolve, reject) => {
            const timer = setTimeout(resolve, ms);
            const signal = (ctx as { mcpReq?: { signal?: AbortSignal } } | undefined)?.mcpReq?.signal;
            signal?.addEventListener('abort', () => {
              clearTimeout(timer);
              slow.cancelled++;
              reject(new Error('cancelled'));
            });
          });
          return { content: [{ type: 'text', text: `slept ${ms} ms` }] };
        } finally {
          slow.running--;
        }
      },
    );
    // `count`: reports its progress, a step every `ms`, and answers with the count.
    // Safe to repeat (idempotentHint): a call whose worker was lost runs again.
    server.registerTool(
      'count',
      {
        description: 'Counts to `to`, reporting each step.',
        inputSchema: z.object({ to: z.number().int().min(1).max(100), ms: z.number().int().min(0).max(5000) }),
        annotations: { idempotentHint: true },
      },
      async ({ to, ms }, ctx) => {
        counted.started++;
        const req = (
          ctx as unknown as {
            mcpReq: { _meta?: { progressToken?: string | number }; notify(notification: unknown): Promise<void> };
          }
        ).mcpReq;
        const token = req._meta?.progressToken;
        for (let step = 1; step <= to; step++) {
          await new Promise((resolve) => setTimeout(resolve, ms));
          if (token !== undefined)
            await req.notify({
              method: 'notifications/progress',
              params: { progressToken: token, progress: step, total: to, message: `step ${step}` },
            });
        }
        return { content: [{ type: 'text', text: `counted to ${to}` }] };
      },
    );
    // A resource, a template of them and a prompt, for resources/* and prompts/* through the gateway.
    server.registerResource('today', 'notes://today', { title: 'Today', mimeType: 'text/plain' }, async (uri) => ({
      contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'buy milk' }],
    }));
    server.registerResource(
      'day',
      new ResourceTemplate('notes://day/{date}', { list: undefined }),
      { title: 'A day', mimeType: 'text/plain' },
      async (uri, { date }) => ({
        contents: [{ uri: uri.href, mimeType: 'text/plain', text: `notes of ${String(date)}` }],
      }),
    );
    server.registerPrompt(
      'summarize',
      { description: 'Summarizes the notes on a topic.', argsSchema: z.object({ topic: z.string() }) },
      async ({ topic }) => ({
        messages: [{ role: 'user', content: { type: 'text', text: `Summarize my notes on ${topic}.` } }],
      }),
    );
    return server;
  };

  const serveLegacy = async (req: IncomingMessage, res: ServerResponse) => {
    if (req.method === 'GET' && req.url === '/sse') {
      const transport = new SSEServerTransport('/messages', res);
      legacy.set(transport.sessionId, transport);
      res.on('close', () => legacy.delete(transport.sessionId));
      const server = new LegacyMcpServer({ name: options.name ?? 'fake-legacy', version: '0.9.0' });
      server.registerTool(
        'lookup',
        { description: 'Looks a word up.', inputSchema: { word: z.string() } },
        async ({ word }) => ({ content: [{ type: 'text', text: word }] }),
      );
      await server.connect(transport);
      return;
    }
    const transport = legacy.get(new URL(req.url ?? '/', 'http://x').searchParams.get('sessionId') ?? '');
    if (req.method === 'POST' && transport) return transport.handlePostMessage(req, res);
    res.writeHead(404).end();
  };
  const serve = async (req: IncomingMessage, res: ServerResponse) => {
    seen.push({ method: req.method ?? '', authorization: req.headers.authorization });
    if (mode === 'sse') return serveLegacy(req, res);
    if (mode === 'hang') {
      hanging.add(res);
      return;
    }
    if (mode === 'fail') {
      res.writeHead(500, { 'content-type': 'text/plain' }).end('upstream broken');
      return;
    }
    if (options.token !== undefined && req.headers.authorization !== `Bearer ${options.token}`) {
      res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'unauthorized' }));
      return;
    }
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) if (typeof value === 'string') headers.set(name, value);
    const body = req.method === 'POST' ? Buffer.concat(chunks) : undefined;
    // `crash`: the connection is dropped mid-call, as a server that dies does.
    if (body && /"method":"tools\/call"/.test(body.toString()) && /"name":"crash"/.test(body.toString())) {
      res.destroy();
      return;
    }
    const request = new Request(`http://${req.headers.host}${req.url}`, {
      method: req.method!,
      headers,
      ...(body ? { body } : {}),
    });
    // Stateful, as most servers are: a cancel notification reaches the server running the call it names.
    const sessionId = req.headers['mcp-session-id'];
    let transport = typeof sessionId === 'string' ? sessions.get(sessionId) : undefined;
    if (!transport) {
      const server = buildServer();
      const created: WebStandardStreamableHTTPServerTransport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        // Answers as events, as servers that report progress do (JSON alone cannot carry a notification before the
        // answer); `json`: as one JSON body each (no progress), as the bench's upstream answers.
        enableJsonResponse: options.json === true,
        onsessioninitialized: (id) => void sessions.set(id, created),
      });
      await server.connect(created);
      transport = created;
    }
    const response = await transport.handleRequest(request);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    // Written as it comes: a call's progress events go out before its answer.
    if (response.body) for await (const chunk of response.body) res.write(chunk);
    res.end();
  };
  const http: Server = createServer((req, res) => {
    serve(req, res).catch((error: unknown) => {
      if (!res.headersSent) res.writeHead(500);
      res.end(String(error));
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/${mode === 'sse' ? 'sse' : 'mcp'}`,
    seen,
    slow,
    counted,
    close: async () => {
      for (const res of hanging) res.destroy();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
