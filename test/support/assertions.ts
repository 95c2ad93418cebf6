import assert from 'node:assert/strict';
import { GatewayError } from '../../shared/errors.js';

/** Awaits a call that must fail with a GatewayError, and returns that error for further checks. */
export async function gatewayError(promise: Promise<unknown>): Promise<GatewayError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof GatewayError, `expected a GatewayError, got ${String(error)}`);
    return error;
  }
  assert.fail('expected a rejection');
}

/** Every item of an async iterable, in order. */
export async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const items: T[] = [];
  for await (const item of iterable) items.push(item);
  return items;
}
