import { performance } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** How often the event loop's use is looked at. */
const windowMs = 5_000;
/** A window busier than this was load; one quieter than this is idle. */
const busyShare = 0.05;
const idleShare = 0.01;

let v8Collect: (() => void) | undefined;
/** V8's full collection: the `gc` function it offers with --expose-gc, taken without the flag on the command line. */
export function fullCollection(): void {
  if (!v8Collect) {
    setFlagsFromString('--expose-gc');
    v8Collect = runInNewContext('gc') as () => void;
  }
  v8Collect();
}

/**
 * Gives the memory of a burst back once the process goes idle. V8 keeps the
 * heap (and its young generation) at the size the load grew it to until
 * something allocates enough to trigger a collection, which an idle server
 * never does: its RSS stays at the peak. When a window of load is followed by
 * an idle one, one full collection runs (a few tens of milliseconds, while
 * nothing waits) and lets V8 shrink the heap; then nothing more until the
 * next load.
 */
export function startIdleCollector(
  options: {
    windowMs?: number;
    collect?: () => void;
    /** The share of the last window the event loop was busy (its utilization, by default). */
    busyShareOfWindow?: () => number;
  } = {},
): { stop(): void } {
  const collect = options.collect ?? fullCollection;
  const shareOfWindow = options.busyShareOfWindow ?? loopUtilization();
  let loaded = false;
  const timer = setInterval(() => {
    const share = shareOfWindow();
    if (share > busyShare) loaded = true;
    else if (loaded && share < idleShare) {
      loaded = false;
      collect();
    }
  }, options.windowMs ?? windowMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}

/** The event loop's utilization since the last call. */
function loopUtilization(): () => number {
  let last = performance.eventLoopUtilization();
  return () => {
    const now = performance.eventLoopUtilization();
    const share = performance.eventLoopUtilization(now, last).utilization;
    last = now;
    return share;
  };
}
