import { UnrecoverableError } from 'bullmq';

/**
 * The client left (or cancelled): the reason a running vendor call is
 * aborted with, and what its job then fails with for good. Nobody is left to
 * answer, so the `failed` listener tells no one; BullMQ keeps the message as
 * the job's reason.
 */
export class ClientGoneError extends UnrecoverableError {
  constructor() {
    super('The client closed the connection.');
    this.name = 'ClientGoneError';
  }
}
