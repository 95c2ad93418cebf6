import { UnrecoverableError } from 'bullmq';
import type { WireError } from './errors.js';

/**
 * An async job failed for good with this error. BullMQ keeps a failed job's
 * message as its `failedReason` and nothing else of the error, so the wire
 * error travels as that message: the worker throws this, and
 * `GET /v1/jobs/{id}` reads it back with `decodeAsyncJobFailure`.
 */
export class AsyncJobFailure extends UnrecoverableError {
  constructor(readonly wire: WireError) {
    super(encodeAsyncJobFailure(wire));
    this.name = 'AsyncJobFailure';
  }
}

export function encodeAsyncJobFailure(wire: WireError): string {
  return JSON.stringify(wire);
}

/**
 * The wire error of a failed async job's reason; undefined for a reason that is not one (e.g. BullMQ's stalled-job
 * reason).
 */
export function decodeAsyncJobFailure(reason: string | undefined): WireError | undefined {
  if (!reason) return undefined;
  try {
    const wire = JSON.parse(reason) as Partial<WireError> | null;
    return wire?.error?.message ? (wire as WireError) : undefined;
  } catch {
    return undefined;
  }
}
