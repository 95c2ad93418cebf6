import { createServer, connect, type Socket } from 'node:net';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';

/** Decides from a connection's first bytes (ioredis opens with `CLIENT SETNAME <name>`) whether it is cut off. */
export type ConnectionFilter = (hello: string) => boolean;

/**
 * A TCP relay in front of Redis for one process, so a test can cut that
 * process off (and keep it off) while others still reach Redis: a network
 * partition, or one connection coming back later than another.
 */
export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1') {
  const relayed = new Map<Socket, { upstream: Socket; hello: string }>();
  let blocked: ConnectionFilter | undefined;
  const server = createServer((client) => {
    client.on('error', () => undefined);
    client.once('data', (first: Buffer) => {
      const hello = first.toString('latin1');
      if (blocked?.(hello)) {
        client.destroy();
        return;
      }
      const upstream = connect(targetPort, targetHost);
      upstream.on('error', () => undefined);
      relayed.set(client, { upstream, hello });
      client.on('close', () => {
        relayed.delete(client);
        upstream.destroy();
      });
      upstream.on('close', () => client.destroy());
      upstream.write(first);
      client.pipe(upstream).pipe(client);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    /** Drops the relayed connections `filter` picks (all by default) and refuses such new ones until `unblock`. */
    block(filter: ConnectionFilter = () => true): void {
      blocked = filter;
      for (const [client, { hello }] of relayed) if (filter(hello)) client.destroy();
    },
    unblock(): void {
      blocked = undefined;
    },
    async close(): Promise<void> {
      this.block();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
