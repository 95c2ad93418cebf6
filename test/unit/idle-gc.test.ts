import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as pause } from 'node:timers/promises';
import { fullCollection, startIdleCollector } from '../../shared/idle-gc.js';

const spin = (ms: number) => {
  const until = Date.now() + ms;
  while (Date.now() < until);
};

async function waitUntil(done: () => boolean, ms: number, what: string, every = 20): Promise<void> {
  const until = Date.now() + ms;
  while (!done()) {
    if (Date.now() > until) assert.fail(`timed out waiting for ${what}`);
    await pause(every);
  }
}

/** Keeps the event loop busy for `ms` in short slices, as load would. */
async function busy(ms: number): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    spin(15);
    await pause(1);
  }
}

describe('idle collector', () => {
  it('collects once when a loaded window is followed by an idle one, then not again until the next load', async () => {
    // The windows' busy shares, scripted: idle, idle, load, a middling window, idle, idle, load, idle.
    const shares = [0, 0.004, 0.5, 0.03, 0.002, 0.001, 0.2, 0.005];
    let window = -1;
    const collectedAt: number[] = [];
    const collector = startIdleCollector({
      windowMs: 5,
      busyShareOfWindow: () => shares[++window] ?? 0,
      collect: () => collectedAt.push(window),
    });
    try {
      await waitUntil(() => window >= shares.length, 5_000, 'every scripted window');
    } finally {
      collector.stop();
    }
    // Windows 0-1 idle from the start: nothing to give back. Window 2 is load; 3 is neither load nor idle (nothing
    // yet); 4 is idle: one collection. 5 stays idle: none. 6 is load, 7 idle: one more.
    assert.deepEqual(collectedAt, [4, 7]);
  });

  it('reads the event loop: real load followed by quiet leads to a collection', async () => {
    let collections = 0;
    const collector = startIdleCollector({ windowMs: 100, collect: () => collections++ });
    try {
      // Waiting looks every 250 ms, so that the 100 ms windows between are quiet: on a loaded machine five looks a
      // window, each woken late and preempted, could keep the loop above the 1 % an idle window is.
      await busy(250);
      await waitUntil(() => collections >= 1, 10_000, 'a collection after the load', 250);
      const after = collections;
      await busy(250);
      await waitUntil(() => collections > after, 10_000, 'another after the next load', 250);
    } finally {
      collector.stop();
    }
  });

  it("runs V8's full collection, which frees what nothing holds", () => {
    const before = process.memoryUsage().heapUsed;
    let garbage: unknown[] | undefined = Array.from({ length: 200_000 }, (_, i) => ({ i, text: `item ${i}` }));
    assert.ok(
      garbage.length > 0 && process.memoryUsage().heapUsed > before + 5 * 1048576,
      'the garbage is on the heap',
    );
    garbage = undefined;
    fullCollection();
    assert.ok(process.memoryUsage().heapUsed < before + 5 * 1048576, 'the garbage is gone after the collection');
  });
});
