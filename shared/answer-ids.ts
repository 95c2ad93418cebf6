import { createHash } from 'node:crypto';

/**
 * Ids of answers the gateway makes itself (the mock vendor's, and a cache hit's, which is a new answer): a short
 * stable digest of the request id, so the same request id always yields the same ids and a retried job answers alike.
 */
export function digest(...parts: Array<string | number>): string {
  return createHash('sha256').update(parts.join('\u0000')).digest('base64url').replace(/[-_]/g, '').slice(0, 24);
}

export const chatCompletionId = (requestId: string) => `chatcmpl-${digest('chat', requestId)}`;
export const completionId = (requestId: string) => `cmpl-${digest('completion', requestId)}`;
