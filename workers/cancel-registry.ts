import { ClientGoneError } from './client-gone-error.js';

/**
 * Running vendor calls by request id, so a cancel message (client gone) can
 * abort them. A cancel that arrives before its job started is remembered
 * briefly: the api may publish it while the job is between queue and processor.
 */
export class CancelRegistry {
  private readonly running = new Map<string, AbortController>();
  private readonly early = new Map<string, number>();

  constructor(private readonly rememberMs = 30_000) {}

  start(jobId: string): AbortController {
    const controller = new AbortController();
    if (this.early.delete(jobId)) controller.abort(new ClientGoneError());
    this.running.set(jobId, controller);
    return controller;
  }

  finish(jobId: string): void {
    this.running.delete(jobId);
  }

  cancel(jobId: string): void {
    const controller = this.running.get(jobId);
    if (controller) {
      controller.abort(new ClientGoneError());
      return;
    }
    const now = Date.now();
    this.early.set(jobId, now + this.rememberMs);
    if (this.early.size > 1000) for (const [id, until] of this.early) if (until < now) this.early.delete(id);
  }

  get size(): number {
    return this.running.size;
  }
}
