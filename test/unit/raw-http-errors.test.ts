import assert from 'node:assert/strict';
import type { Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, it } from 'node:test';
import { setTimeout as pause } from 'node:timers/promises';
import type { Duplex } from 'node:stream';
import { lingerMs } from '../../api/http/linger.js';
import { writeRawError } from '../../api/http/raw-http-errors.js';
import { GatewayError } from '../../shared/errors.js';
import { createNodeServer } from '../../api/http/node-server.js';

/*
 * The answers Node's parser leaves to the api (431, 408, 400, and CONNECT's 405), on the api's own Node server, in
 * process: a client that reads gets all of the answer, then the close; a client that neither reads nor closes does
 * not keep the socket past the linger (issue 45). Each case has a server of its own, whose deadlines are too long to
 * be what ends the socket, but for the header deadline of the 408 case, which is its answer.
 */

/** Node's timers, and a loaded machine. */
const slack = 1500;

async function connections(server: Server): Promise<number> {
  return new Promise((resolve, reject) =>
    server.getConnections((error, count) => (error ? reject(error) : resolve(count))),
  );
}

async function waitForConnections(server: Server, count: number, withinMs: number, what: string): Promise<void> {
  const until = Date.now() + withinMs;
  while ((await connections(server)) !== count) {
    if (Date.now() > until)
      assert.fail(`${what}: the server still has ${await connections(server)} connection(s) ${withinMs} ms on`);
    await pause(50);
  }
}

describe('answers on a bare socket, and the socket after them', () => {
  let server: Server;
  let port: number;
  const clients: Socket[] = [];

  /**
   * The api's Node server, with a header deadline of `headers` ms and every other one too long to end a socket here.
   */
  async function listen(headers: number): Promise<void> {
    server = createNodeServer(
      { headersMs: headers, requestMs: 120_000, bodyIdleMs: 120_000, keepAliveMs: 120_000 },
      (_req, res) => res.end('{}'),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as { port: number }).port;
  }

  afterEach(async () => {
    for (const client of clients.splice(0)) client.destroy();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  /** A client that sends `head` and then neither reads nor closes. */
  async function silentClient(head: string): Promise<Socket> {
    const socket = connect({ host: '127.0.0.1', port });
    clients.push(socket);
    socket.on('error', () => {});
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.pause();
    socket.write(head);
    await waitForConnections(server, 1, 2000, 'the connection taken');
    return socket;
  }

  const cases: Array<[name: string, head: string, status: number, headers: number]> = [
    // Just past Node's 16 KB of headers, in one write: the api reads it whole and answers once.
    [
      '431, headers too large',
      `GET /v1/models HTTP/1.1\r\nHost: gateway\r\nx-big: ${'a'.repeat(17 * 1024)}`,
      431,
      60_000,
    ],
    ['400, a malformed request line', 'GET /v1/models HTTP/9.9 nonsense\r\nHost: gateway\r\n', 400, 60_000],
    ['405, CONNECT', 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n', 405, 60_000],
    // The header deadline is the answer here: 1 s, then the linger.
    ['408, headers that never end', 'GET /v1/models HTTP/1.1\r\nHost: gateway\r\nx-slow: ', 408, 1000],
  ];

  it(
    'a refused WebSocket upgrade (api/jobs/events.ts answers it the same way): its headers, then the socket goes ' +
      'after the linger',
    async () => {
      await listen(60_000);
      server.on('upgrade', (_req, socket: Duplex) =>
        writeRawError(
          socket,
          new GatewayError(429, 'Too many sockets.', { code: 'too_many_sockets', headers: { 'retry-after': '1' } }),
        ),
      );
      const socket = await silentClient(
        'GET /v1/jobs/job_1/events HTTP/1.1\r\nHost: gateway\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n',
      );
      await waitForConnections(server, 0, lingerMs + slack, 'the refused upgrade');
      const text = await readAll(socket);
      assert.match(text, /^HTTP\/1\.1 429 /);
      assert.match(text, /\r\nretry-after: 1\r\n/);
    },
  );

  for (const [name, head, status, headers] of cases) {
    it(`${name}: a client that never reads nor closes loses the socket after the linger`, async () => {
      await listen(headers);
      const socket = await silentClient(head);
      await waitForConnections(server, 0, (headers < 60_000 ? headers : 0) + lingerMs + slack, name);
      // What it had not read is still there for it, then the end.
      const text = await readAll(socket);
      assert.match(text, new RegExp(`^HTTP/1\\.1 ${status} `), text.slice(0, 200));
    });
  }

  it('408: a client that reads gets the whole answer, then the close', async () => {
    await listen(1000);
    const socket = connect({ host: '127.0.0.1', port });
    clients.push(socket);
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write('GET /v1/models HTTP/1.1\r\nHost: gateway\r\nx-slow: ');
    const text = await readAll(socket);
    const match = /^HTTP\/1\.1 408 Request Timeout\r\n([\s\S]*?)\r\n\r\n([\s\S]*)$/.exec(text);
    assert.ok(match, text);
    const length = Number(/^content-length: (\d+)$/im.exec(match[1]!)?.[1]);
    assert.equal(Buffer.byteLength(match[2]!), length, 'the whole body');
    assert.match(match[1]!, /^connection: close$/im);
    const body = JSON.parse(match[2]!) as { error: { code: string; type: string; message: string; param: null } };
    assert.equal(body.error.code, 'request_timeout');
    assert.equal(body.error.param, null);
    // It read to the end and closed its side (allowHalfOpen is off here): the api lets go at once, not after the
    // linger.
    await waitForConnections(server, 0, lingerMs / 2, 'after the client read the 408');
  });
});

/** Everything the socket receives until the server closes it. */
function readAll(socket: Socket): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    socket.once('error', (error: NodeJS.ErrnoException) =>
      chunks.length > 0 ? resolve(Buffer.concat(chunks).toString('utf8')) : reject(error),
    );
    socket.resume();
  });
}
