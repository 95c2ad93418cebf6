import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { locateRecord, processAlive, type RecordLog } from '../../storage/record/embedded.js';
import { cleanupsAfter } from '../support/cleanups.js';
import { waitFor } from '../support/gateway.js';
import { onDatabase } from '../support/record.js';

/*
 * Who owns the embedded record's server when things go wrong: an owner
 * killed outright (kill -9) leaves its server running, and a peer adopts it
 * (and stops it when it closes); a server that dies under its owner is
 * started again by the owner.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));

function recordingLog(): RecordLog & { lines: string[] } {
  const lines: string[] = [];
  const push = (_: object, message: string) => void lines.push(message);
  return { lines, info: push, warn: push, error: push };
}

const answers = (url: string) =>
  onDatabase(url, async (client) => (await client.query<{ n: number }>('select 1 as n')).rows[0]!.n);

const postmaster = (dataDir: string) =>
  Number(readFileSync(join(dataDir, 'postgres', 'postmaster.pid'), 'utf8').split('\n')[0]);

describe("the embedded record's owner", () => {
  const { defer, tempDir } = cleanupsAfter();

  it('killed with its server left running: a peer adopts the server, and stops it on close', async () => {
    const dataDir = tempDir('sy-own-');
    const owner = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        `const { locateRecord } = await import('./storage/record/embedded.ts'); await locateRecord(undefined, ` +
          `${JSON.stringify(dataDir)}); console.log('owner ready'); setInterval(() => {}, 1000);`,
      ],
      { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    defer(() => owner.kill('SIGKILL'));
    let out = '';
    owner.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
    await waitFor(() => out.includes('owner ready'), 60_000, 'the owner to start the server');

    const log = recordingLog();
    const peer = await locateRecord(undefined, dataDir, { log, watchMs: 200 });
    defer(() => peer.close());
    assert.equal(peer.source, 'embedded-peer');
    assert.equal(peer.owner, owner.pid);
    const server = postmaster(dataDir);

    owner.kill('SIGKILL');
    await once(owner, 'exit');
    await waitFor(() => peer.owner === process.pid, 10_000, 'the peer to adopt the server');
    assert.ok(
      log.lines.some((line) => line.includes(`(pid ${owner.pid}) has stopped`)),
      log.lines.join('\n'),
    );
    assert.ok(
      log.lines.some((line) => line.includes('left running by a process that is gone')),
      log.lines.join('\n'),
    );
    assert.equal(postmaster(dataDir), server, 'the same server, adopted');
    assert.equal(peer.source, 'embedded');
    assert.equal(await answers(peer.url), 1);

    await peer.close();
    await waitFor(() => !processAlive(server), 10_000, 'the adopted server to stop');
  });

  it('a server that dies under its owner is started again', async () => {
    const dataDir = tempDir('sy-own-');
    const log = recordingLog();
    const record = await locateRecord(undefined, dataDir, { log, watchMs: 200 });
    defer(() => record.close());
    assert.equal(record.source, 'embedded');
    const first = postmaster(dataDir);
    process.kill(first, 'SIGKILL');
    await waitFor(() => log.lines.some((line) => line.includes('stopped unexpectedly')), 10_000, 'the owner to notice');
    await waitFor(async () => (await answers(record.url).catch(() => 0)) === 1, 30_000, 'the server to answer again');
    const second = postmaster(dataDir);
    assert.notEqual(second, first);
    await record.close();
    assert.ok(!processAlive(second), 'stopped on close');
  });

  for (const removed of [false, true]) {
    it(`killed with no peer to take over${removed ? ', its DATA_DIR then removed' : ''}: the orphan watch stops the server after its grace`, async () => {
      const dataDir = tempDir('sy-own-');
      // A second's grace here; 10 s in a gateway.
      const owner = spawn(
        process.execPath,
        [
          '--import',
          'tsx',
          '--input-type=module',
          '-e',
          `const { locateRecord } = await import('./storage/record/embedded.ts'); await locateRecord(undefined, ` +
            `${JSON.stringify(dataDir)}, { orphanGraceMs: 1000 }); console.log('owner ready'); setInterval(() => ` +
            `{}, 1000);`,
        ],
        { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] },
      );
      defer(() => owner.kill('SIGKILL'));
      let out = '';
      owner.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
      await waitFor(() => out.includes('owner ready'), 60_000, 'the owner to start the server');
      const server = postmaster(dataDir);
      const watch = Number(readFileSync(join(dataDir, 'postgres.watch'), 'utf8'));
      assert.ok(processAlive(watch), 'the server has its watch');
      owner.kill('SIGKILL');
      await once(owner, 'exit');
      if (removed) rmSync(dataDir, { recursive: true, force: true });
      assert.ok(processAlive(server), 'the server outlived its owner');
      await waitFor(() => !processAlive(server), 15_000, 'the orphaned server to stop');
      await waitFor(() => !processAlive(watch), 5_000, 'its watch to leave');
    });
  }
});
