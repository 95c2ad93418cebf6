import { createHash } from 'node:crypto';

/** Short stable digest: the same request id always yields the same ids, so a retried job answers identically. */
export function digest(...parts: Array<string | number>): string {
  return createHash('sha256').update(parts.join('\u0000')).digest('base64url').replace(/[-_]/g, '').slice(0, 24);
}

export const chatCompletionId = (requestId: string) => `chatcmpl-${digest('chat', requestId)}`;
export const completionId = (requestId: string) => `cmpl-${digest('completion', requestId)}`;
export const toolCallId = (requestId: string, choiceIndex: number, callIndex: number) =>
  `call_${digest('call', requestId, choiceIndex, callIndex)}`;

export const MOCK_SYSTEM_FINGERPRINT = 'fp_mock';

export const nowInSeconds = () => Math.floor(Date.now() / 1000);
