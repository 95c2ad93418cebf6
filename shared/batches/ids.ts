import { randomBytes } from 'node:crypto';
import type { BatchDialect } from './types.js';

/**
 * A batch's id says its dialect (`msgbatch_…`: Anthropic's, `batch_…`: OpenAI's), and each of its requests' job ids
 * is made from it, so a cancel finds the waiting jobs again from the batch alone.
 */

/** A batch's id, in Anthropic's form (`msgbatch_` and 24 letters and digits). */
export function newBatchId(): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  const bytes = randomBytes(24);
  let id = 'msgbatch_';
  // Unique, not secret: the slight lean of a byte modulo 62 toward the first letters costs it nothing.
  for (const byte of bytes) id += alphabet[byte % 62];
  return id;
}

/** A batch's id in OpenAI's form (`batch_` and 32 hex digits). */
export function newOpenAIBatchId(): string {
  return `batch_${randomBytes(16).toString('hex')}`;
}

/** Whether a text is a batch's id of either dialect, by its prefix (what the refill channel carries). */
export function isBatchId(text: string): boolean {
  return text.startsWith('msgbatch_') || text.startsWith('batch_');
}

/** A batch's dialect, as its id says it. */
export function dialectOf(batchId: string): BatchDialect {
  return batchId.startsWith('msgbatch_') ? 'anthropic' : 'openai';
}

/** The job id of a batch's request: found again from the batch and its index (a cancel removes the waiting ones). */
export function batchRequestJobId(batchId: string, index: number): string {
  return `${batchId}.${index}`;
}
