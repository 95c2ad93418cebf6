/**
 * The worst event-loop stall since the last read. A timer due every `tickMs`
 * measures how late it fires: a tick that comes 300 ms after the previous one
 * means the loop was held for about 290 ms. (`monitorEventLoopDelay` was not
 * used: after `reset()` its first delay is never recorded, so a stall that
 * begins right after a read went unseen.)
 */
export class LoopStallMonitor {
  private worst = 0;
  private last = performance.now();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly tickMs = 10) {
    this.timer = setInterval(() => {
      const now = performance.now();
      this.worst = Math.max(this.worst, now - this.last - this.tickMs);
      this.last = now;
    }, tickMs);
    this.timer.unref();
  }

  /** Milliseconds, one decimal; the next read starts from zero. A stall still under way counts so far. */
  takeWorst(): number {
    const ongoing = performance.now() - this.last - this.tickMs;
    const worst = Math.max(this.worst, ongoing, 0);
    this.worst = 0;
    return Math.round(worst * 10) / 10;
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
