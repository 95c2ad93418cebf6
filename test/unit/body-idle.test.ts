import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { setBodyIdleTimeout, watchBodyIdle } from '../../api/http/request-body.js';

/**
 * The body idle deadline over real sockets: a client that falls silent is refused once BODY_IDLE_TIMEOUT_MS has
 * passed, but time the body spends paused because our own sink is slow (a disk or S3 holding a piped upload) is
 * not counted against the client.
 */

const idleMs = 400;

/** Pipes the body into a sink that takes `sinkMs` per chunk; answers 200 with the bytes taken, or 408 on a stall. */
function handle(sinkMs: number) {
  return (req: IncomingMessage, res: import('node:http').ServerResponse) => {
    let taken = 0;
    const sink = new Writable({
      highWaterMark: 1,
      write(chunk: Buffer, _encoding, done) {
        taken += chunk.length;
        setTimeout(done, sinkMs);
      },
    });
    const idle = watchBodyIdle(req, () => {
      req.unpipe(sink);
      res.writeHead(408, { connection: 'close' }).end('stalled');
      req.resume();
    });
    req.on('data', idle.bytes);
    sink.on('finish', () => {
      idle.stop();
      res.writeHead(200).end(String(taken));
    });
    req.pipe(sink);
  };
}

/** Sends `chunks` chunks of 64 KiB at once, then ends the body or (`silent`) stops sending without ending it. */
function send(port: number, chunks: number, silent: boolean): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ port, host: '127.0.0.1', method: 'POST', headers: { 'transfer-encoding': 'chunked' } });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += String(chunk)));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    for (let i = 0; i < chunks; i++) req.write(Buffer.alloc(64 * 1024, i));
    if (!silent) req.end();
  });
}

describe('the body idle deadline', () => {
  const servers: Server[] = [];
  const listen = async (sinkMs: number) => {
    const server = createServer(handle(sinkMs));
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return (server.address() as AddressInfo).port;
  };

  before(() => setBodyIdleTimeout(idleMs));
  after(() => {
    for (const server of servers) (server.closeAllConnections(), server.close());
    setBodyIdleTimeout(30_000);
  });

  it('refuses a client that falls silent mid-body', async () => {
    const port = await listen(0);
    const began = Date.now();
    const answer = await send(port, 4, true);
    assert.equal(answer.status, 408);
    assert.ok(Date.now() - began >= idleMs - 50, `answered after ${Date.now() - began} ms`);
  });

  it('does not count the time its own slow sink holds the body paused', async () => {
    // Each chunk held 1 s by the sink: the body waits on us for seconds at a time, past the idle deadline each time.
    const port = await listen(1000);
    const answer = await send(port, 3, false);
    assert.equal(answer.status, 200, answer.body);
    assert.equal(Number(answer.body), 3 * 64 * 1024);
  });
});
