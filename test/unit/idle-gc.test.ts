import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as pause } from 'node:timers/promises';
import { fullCollection, startIdleCollector } from '../../shared/idle-gc.js';

const spin = (ms: number) => {
  const until = Date.now() + ms;
  while (Date.now() < until);
};

/** Keeps the event loop busy for `ms` in short slices, as load would. */
async function busy(ms: number): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    spin(15);
    await pause(1);
  }
}

describe('idle collector', () => {
  it('collects once when load is followed by an idle window, and again only after the next load', async () => {
    let collections = 0;
    const collector = startIdleCollector({ windowMs: 100, collect: () => collections++ });
    try {
      await pause(600);
      assert.equal(collections, 0, 'idle from the start: nothing to give back');
      await busy(250);
      await pause(600);
      assert.equal(collections, 1, 'one collection after the load');
      await pause(500);
      assert.equal(collections, 1, 'none while it stays idle');
      await busy(250);
      await pause(600);
      assert.equal(collections, 2, 'one more after the next load');
    } finally {
      collector.stop();
    }
  });

  it('runs V8\'s full collection, which frees what nothing holds', () => {
    const before = process.memoryUsage().heapUsed;
    let garbage: unknown[] | undefined = Array.from({ length: 200_000 }, (_, i) => ({ i, text: `item ${i}` }));
    assert.ok(garbage.length > 0 && process.memoryUsage().heapUsed > before + 5 * 1048576, 'the garbage is on the heap');
    garbage = undefined;
    fullCollection();
    assert.ok(process.memoryUsage().heapUsed < before + 5 * 1048576, 'the garbage is gone after the collection');
  });
});
