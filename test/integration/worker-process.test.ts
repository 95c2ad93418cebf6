import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import type { Redis } from 'ioredis';
import { createKey, freshRedis, spawnGateway, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

/** The pid every JSON log line of a named process carries. */
function pidsOf(logs: string[], name: string): Set<number> {
  const pids = new Set<number>();
  for (const line of logs) {
    if (!line.includes(`"name":"${name}"`)) continue;
    const match = /"pid":(\d+)/.exec(line);
    if (match) pids.add(Number(match[1]));
  }
  return pids;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function chat(gateway: GatewayProcess, apiKey: string): Promise<string | null> {
  const completion = await gateway
    .client(apiKey)
    .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'ping' }] });
  return completion.choices[0]!.message.content;
}

/** Waits for the first line logged by the worker process, and returns its pid. */
async function workerPid(gateway: GatewayProcess, exclude: Set<number> = new Set()): Promise<number> {
  let pid: number | undefined;
  await waitFor(
    () => {
      pid = [...pidsOf(gateway.logs, 'switchyard-worker')].find((p) => !exclude.has(p));
      return (
        pid !== undefined &&
        gateway.logs.some((line) => line.includes(`"pid":${pid}`) && line.includes('workers started'))
      );
    },
    20_000,
    'the worker process to start',
  );
  return pid!;
}

describe('npm start with the workers in their own process (WORKER_PROCESS)', () => {
  let redis: Redis;
  let url: string;
  let apiKey: string;
  const started: GatewayProcess[] = [];

  before(async () => {
    const fresh = await freshRedis(13);
    redis = fresh.redis;
    url = fresh.url;
    apiKey = (await createKey(redis)).key;
  });

  after(async () => {
    await Promise.all(started.map((g) => g.stop('SIGKILL')));
    redis?.disconnect();
  });

  it('on: api and workers are two processes; a worker that crashes is restarted and serves again', async () => {
    const gateway = await startGateway({ env: { REDIS_URL: url, WORKER_PROCESS: 'on' } });
    started.push(gateway);
    const first = await workerPid(gateway);
    assert.notEqual(first, gateway.proc.pid, 'the workers run in a process of their own');
    assert.match((await chat(gateway, apiKey)) ?? '', /ping/);

    process.kill(first, 'SIGKILL');
    await waitFor(
      () => gateway.logs.some((line) => line.includes('the worker process exited; restarting it')),
      5000,
      'the restart to be logged',
    );
    const second = await workerPid(gateway, new Set([first]));
    assert.notEqual(second, first);
    assert.match((await chat(gateway, apiKey)) ?? '', /ping/, 'the restarted workers serve');
    assert.equal(gateway.proc.exitCode, null, 'the api kept running');
  });

  it('SIGTERM stops both, the workers after the api; SIGKILL of the api takes the workers with it', async () => {
    const graceful = await startGateway({ env: { REDIS_URL: url, WORKER_PROCESS: 'on' } });
    started.push(graceful);
    const workers = await workerPid(graceful);
    assert.equal(await graceful.stop('SIGTERM'), 0);
    // The api waits for its worker process to finish before it exits itself.
    assert.equal(alive(workers), false, 'the worker process was gone before the api exited');
    assert.ok(
      graceful.logs.some((line) => line.includes(`"pid":${workers}`) && line.includes('"signal":"SIGTERM"')),
      'the worker process was asked to stop',
    );

    const killed = await startGateway({ env: { REDIS_URL: url, WORKER_PROCESS: 'on' } });
    started.push(killed);
    const orphan = await workerPid(killed);
    await killed.stop('SIGKILL');
    await waitFor(() => !alive(orphan), 5000, 'the worker process to exit with its parent');
  });

  it('off: one process serves both halves', async () => {
    const gateway = await startGateway({ env: { REDIS_URL: url, WORKER_PROCESS: 'off' } });
    started.push(gateway);
    assert.match((await chat(gateway, apiKey)) ?? '', /ping/);
    assert.deepEqual(pidsOf(gateway.logs, 'switchyard-worker'), new Set(), 'no worker process');
    assert.deepEqual(pidsOf(gateway.logs, 'switchyard-all'), new Set([gateway.proc.pid]));
    assert.ok(
      gateway.logs.some((line) => line.includes('workers started') && line.includes(`"pid":${gateway.proc.pid}`)),
    );
  });

  it('a SIGTERM while it is still starting stops it once started, the usual way, and it exits 0', async () => {
    const proc = await spawnGateway('all', { REDIS_URL: url, WORKER_PROCESS: 'on' });
    const exited = once(proc, 'close');
    const lines: string[] = [];
    let signalled = false;
    for await (const line of createInterface({ input: proc.stdout! })) {
      lines.push(line);
      // Logged once signals are heard, before the api listens and the workers start (about 150 ms of start after it).
      if (!signalled && line.includes('the record is in PostgreSQL')) {
        signalled = true;
        proc.kill('SIGTERM');
      }
    }
    const [code] = (await exited) as [number | null];
    const at = (text: string) => lines.findIndex((line) => line.includes(text));
    assert.equal(code, 0, lines.join('\n'));
    assert.ok(at('stopping as soon as the start is done') >= 0, 'the signal was heard while starting');
    assert.ok(at('gateway listening') > at('stopping as soon as the start is done'), 'the start went on to the end');
    assert.ok(at('draining 0 requests') > at('gateway listening'), 'then it stopped the usual way');
    assert.ok(at('"msg":"stopped"') > at('draining 0 requests'));
  });
});
