import type { Logger } from '../shared/logger.js';

/** How often, at most, answers that cost more than their reservation are told in the log after the first. */
const summaryEveryMs = 60_000;

export interface Overrun {
  requestId: string;
  keyId: string;
  accountId: string;
  model: string;
  vendor: string;
  reservedMicros: number;
  costMicros: number;
  overMicros: number;
}

/**
 * The log's side of settlement overruns (the metric counts every one): the
 * first of a process is logged in full, naming its request; the ones after it
 * are added up and told in one line a minute at most, by model and vendor. A
 * vendor that beats every reservation would otherwise write a line per
 * request, a cost of its own at load.
 */
export class OverrunReport {
  private lastLogged = Number.NEGATIVE_INFINITY;
  private pending = new Map<
    string,
    { model: string; vendor: string; answers: number; overMicros: number; example: string }
  >();

  constructor(
    private readonly log: Pick<Logger, 'warn'>,
    private readonly now: () => number = Date.now,
  ) {}

  add(overrun: Overrun): void {
    const now = this.now();
    if (this.lastLogged === Number.NEGATIVE_INFINITY) {
      this.lastLogged = now;
      this.log.warn(
        { ...overrun, nextSummaryInMs: summaryEveryMs },
        'answer cost more than its reservation: the key limit and balance were checked against less than was ' +
          'billed (more such answers are summed up, one line a minute at most; ' +
          'switchyard_settlement_overruns_total counts each)',
      );
      return;
    }
    const key = `${overrun.model}\u0000${overrun.vendor}`;
    const entry = this.pending.get(key) ?? {
      model: overrun.model,
      vendor: overrun.vendor,
      answers: 0,
      overMicros: 0,
      example: overrun.requestId,
    };
    entry.answers += 1;
    entry.overMicros += overrun.overMicros;
    this.pending.set(key, entry);
    if (now - this.lastLogged < summaryEveryMs) return;
    const models = [...this.pending.values()];
    this.pending = new Map();
    this.lastLogged = now;
    const answers = models.reduce((sum, entry) => sum + entry.answers, 0);
    const overMicros = models.reduce((sum, entry) => sum + entry.overMicros, 0);
    this.log.warn(
      { answers, overMicros, models },
      `${answers} more answer${answers === 1 ? '' : 's'} cost more than their reservations (by ${overMicros} µ$ in all): the key limits and balances were checked against less than was billed`,
    );
  }
}
