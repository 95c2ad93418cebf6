import { GatewayError } from '../../../shared/errors.js';

/** Test switches written into request text; see the list at the top of index.ts. */
export interface MockMarkers {
  errorStatus?: number;
  slowMs?: number;
}

const errorMarker = /\[mock:error:(\d{3})\]/;
const slowMarker = /\[mock:slow:(\d{1,6})\]/;

export function readMockMarkers(texts: readonly string[]): MockMarkers {
  const markers: MockMarkers = {};
  for (const text of texts) {
    // Cheap exit: nearly every request has no marker at all.
    if (!text.includes('[mock:')) continue;
    const error = errorMarker.exec(text);
    if (error && markers.errorStatus === undefined) {
      const status = Number(error[1]);
      if (status >= 400 && status <= 599) markers.errorStatus = status;
    }
    const slow = slowMarker.exec(text);
    if (slow && markers.slowMs === undefined) markers.slowMs = Number(slow[1]);
  }
  return markers;
}

/** Fails the call the way a vendor would, so the gateway's retry and error paths can be exercised offline. */
export function throwIfErrorMarker(markers: MockMarkers): void {
  const status = markers.errorStatus;
  if (status === undefined) return;
  const retryable = status === 429 || status >= 500;
  throw new GatewayError(status, `Mock vendor failed on purpose with status ${status}.`, {
    code: status === 429 ? 'rate_limit_exceeded' : 'mock_error',
    retryable,
  });
}
