/**
 * An account's balance, in micro-dollars: the credits of its ledger less the
 * cost of its settled usage. The record keeps both sums (`accounts`); Redis
 * keeps the balance itself, moved by each credit and each settlement, and
 * made from the record again when Redis lost it.
 */
export interface AccountSums {
  credits_micros: number;
  settled_micros: number;
}

/** The balance of the record's sums, less usage settled in Redis that the record has not written yet. */
export function balanceMicros(sums: AccountSums, unrecordedMicros = 0): number {
  return sums.credits_micros - sums.settled_micros - unrecordedMicros;
}

/** The settled sum that gives `balance` for these credits: what an account imported with only its balance has spent. */
export function settledMicrosFor(creditsMicros: number, balance: number): number {
  return creditsMicros - balance;
}
