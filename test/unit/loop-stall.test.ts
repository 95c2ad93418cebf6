import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as pause } from 'node:timers/promises';
import { LoopStallMonitor } from '../../api/http/loop-stall.js';

const holdLoop = (ms: number) => {
  const until = performance.now() + ms;
  while (performance.now() < until);
};

describe('event-loop stall monitor', () => {
  it('sees a stall that begins right after a read, and starts from zero after each read', async () => {
    const monitor = new LoopStallMonitor(10);
    try {
      await pause(30);
      monitor.takeWorst();
      holdLoop(150);
      await pause(30);
      const seen = monitor.takeWorst();
      assert.ok(seen >= 120, `a 150 ms hold read as ${seen} ms`);
      await pause(30);
      assert.ok(monitor.takeWorst() < 120, 'the stall was reported once');
    } finally {
      monitor.stop();
    }
  });
});
