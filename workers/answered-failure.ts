import { UnrecoverableError } from 'bullmq';
import type { WireError } from '../shared/errors.js';

/**
 * A held or background request failed for good, and the run has already
 * answered its client with `wire` (published the error, or ended a Responses
 * stream with it): the `failed` listener must not answer again. BullMQ keeps
 * the error's message as the job's reason.
 */
export class AnsweredFailure extends UnrecoverableError {
  constructor(readonly wire: WireError) {
    super(wire.error.message);
    this.name = 'AnsweredFailure';
  }
}
