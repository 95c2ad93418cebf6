import { chatCompletionId, completionId, digest } from '../../../shared/answer-ids.js';

export { chatCompletionId, completionId, digest };
export const toolCallId = (requestId: string, choiceIndex: number, callIndex: number) =>
  `call_${digest('call', requestId, choiceIndex, callIndex)}`;

export const MOCK_SYSTEM_FINGERPRINT = 'fp_mock';

export const nowInSeconds = () => Math.floor(Date.now() / 1000);
