import { parentPort, workerData } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';

/**
 * The embedded record's server, in a worker thread of the process that owns
 * it (embedded.ts): PGlite runs every query synchronously in WebAssembly, so
 * here a batch of usage rows holds this thread, never the api's event loop.
 * Tells its parent `{ ready: true }` once it answers on the socket, and closes
 * (`{ closed: true }`) when told `'close'`.
 */
const { dataPath, socketPath } = workerData as { dataPath: string; socketPath: string };
const port = parentPort!;

const db = new PGlite(dataPath);
await db.waitReady;
const server = new PGLiteSocketServer({ db, path: socketPath, maxConnections: 64 });
await server.start();
port.on('message', (message: unknown) => {
  if (message !== 'close') return;
  void (async () => {
    await server.stop().catch(() => undefined);
    await db.close().catch(() => undefined);
    port.postMessage({ closed: true });
  })();
});
port.postMessage({ ready: true });
