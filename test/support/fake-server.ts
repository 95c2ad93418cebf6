import type { Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Starts a fake vendor's server on a free loopback port; returns the port. */
export async function listenOnLoopback(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** Closes a fake vendor's server at once, keep-alive connections included. */
export async function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

/**
 * Writes a piece and waits until the response has handed it to the socket. A fake that then ends the socket, as a
 * vendor breaking mid-answer does, needs this: a socket ended while the response still holds a write sends nothing
 * of it (Node 24 passes writes on at the next tick), not even the headers.
 */
export function writeFlushed(res: ServerResponse, piece: string | Buffer): Promise<void> {
  return new Promise((resolve) => res.write(piece, () => resolve()));
}

/**
 * The pauses a fake's handlers take (latency, slow chunks). Closing ends every
 * pending one at once, and later ones do not wait: handlers then find the
 * response gone.
 */
export class FakePauses {
  closed = false;
  private readonly timers = new Map<NodeJS.Timeout, () => void>();

  wait(ms: number): Promise<void> {
    if (ms <= 0 || this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        resolve();
      }, ms);
      this.timers.set(timer, resolve);
    });
  }

  close(): void {
    this.closed = true;
    for (const [timer, resolve] of this.timers) {
      clearTimeout(timer);
      resolve();
    }
    this.timers.clear();
  }
}
