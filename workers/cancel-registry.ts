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

  start(requestId: string): AbortController {
    const controller = new AbortController();
    if (this.early.delete(requestId)) controller.abort(new ClientGoneError());
    this.running.set(requestId, controller);
    return controller;
  }

  finish(requestId: string): void {
    this.running.delete(requestId);
  }

  cancel(requestId: string): void {
    const controller = this.running.get(requestId);
    if (controller) {
      controller.abort(new ClientGoneError());
      return;
    }
    const now = Date.now();
    this.early.set(requestId, now + this.rememberMs);
    if (this.early.size > 1000) for (const [id, until] of this.early) if (until < now) this.early.delete(id);
  }

  get size(): number {
    return this.running.size;
  }
}
