import { GatewayError } from '../errors.js';

/**
 * Admission to a lane's waiting room, shared out among the accounts waiting in it.
 *
 * Each lane (a capability's shared lane, each capped vendor's lane) has a room of QUEUE_MAX_WAITING_<QUEUE> waiting
 * jobs. An account's share of it is its weight's part of the weights of the accounts waiting there, itself included,
 * and never less than QUEUE_WAITING_FLOOR (or the room, if smaller): alone, an account may fill the room; once another
 * account waits, each holds at most its share. A request whose account already holds its share is refused 429
 * (`rate_limit_exceeded`, `retry-after`), naming the lane and the share: a flood is refused to the flooder, never to a
 * quiet account nor to another lane. The room is not a hard total: accounts under their floors still enter, so a lane
 * holds at most its room plus a floor per waiting account.
 */

export interface WaitingRoom {
  /** The lane's room: QUEUE_MAX_WAITING of its queue. */
  room: number;
  /** The least share any account has: QUEUE_WAITING_FLOOR. */
  floor: number;
}

/**
 * How many waiting jobs an account of this weight may hold in a lane where the others waiting weigh `othersWeight` (the
 * floor never past the room).
 */
export function accountShare(limits: WaitingRoom, weight: number, othersWeight: number): number {
  const own = Math.max(1, weight);
  return Math.max(
    Math.min(limits.floor, limits.room),
    Math.floor((limits.room * own) / (own + Math.max(0, othersWeight))),
  );
}

/** The refusal of a request whose account holds its share of the lane's waiting room. */
export function shareExceeded(
  lane: string,
  held: number,
  share: number,
  others: number,
  retryAfterSeconds = 1,
): GatewayError {
  const waiting =
    others === 0
      ? 'the whole room'
      : `its share while ${others} other account${others === 1 ? '' : 's'} wait${others === 1 ? 's' : ''}`;
  return new GatewayError(
    429,
    `Too many waiting requests: this account has ${held} requests waiting for ${lane}, ${waiting} (${share}). ` +
      `Retry when some have been answered.`,
    { type: 'requests', code: 'rate_limit_exceeded', headers: { 'retry-after': String(retryAfterSeconds) } },
  );
}
