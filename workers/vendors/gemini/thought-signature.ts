import { randomBytes } from 'node:crypto';

/**
 * Gemini 3 returns an opaque `thoughtSignature` on function-call parts and
 * answers 400 when a replayed call comes back without it. OpenAI clients keep
 * only the tool call `id`, and the gateway keeps no per-conversation state, so
 * the signature rides inside the id:
 *
 *   call_<24 hex>__ts_<signature bytes as base64url>    (canonical base64 signature)
 *   call_<24 hex>__tsu_<signature text as base64url>    (anything else, kept verbatim)
 *
 * base64url keeps the id within `[A-Za-z0-9_-]`, which every tool-calling
 * client and vendor accepts, and re-encoding the bytes instead of the text
 * costs no length (a 400-character signature gives a ~430-character id).
 */

/** Google's documented stand-in for a call the model did not sign (history from another model or hand-built). */
export const SKIP_THOUGHT_SIGNATURE = 'skip_thought_signature_validator';

/**
 * Signatures grow with the model's reasoning. Past this the id stops being a
 * sensible thing for clients to store and echo, so the signature is not
 * carried and a replay falls back to `SKIP_THOUGHT_SIGNATURE`.
 */
export const MAX_CARRIED_SIGNATURE_LENGTH = 16_384;

const CARRIER = /^call_[0-9a-f]+__ts(u?)_([A-Za-z0-9_-]+)$/;

const isCanonicalBase64 = (value: string) => Buffer.from(value, 'base64').toString('base64') === value;

function encodeSignature(signature: string): string {
  return isCanonicalBase64(signature)
    ? `__ts_${Buffer.from(signature, 'base64').toString('base64url')}`
    : `__tsu_${Buffer.from(signature, 'utf8').toString('base64url')}`;
}

/** A fresh tool call id, carrying the signature when there is one and it is not oversized. */
export function createToolCallId(signature?: string): string {
  const id = `call_${randomBytes(12).toString('hex')}`;
  if (!signature || signature.length > MAX_CARRIED_SIGNATURE_LENGTH) return id;
  return id + encodeSignature(signature);
}

/** The signature a tool call id carries, or undefined for ids minted elsewhere. */
export function readThoughtSignature(toolCallId: string): string | undefined {
  const match = CARRIER.exec(toolCallId);
  if (match === null) return undefined;
  const bytes = Buffer.from(match[2]!, 'base64url');
  return match[1] === 'u' ? bytes.toString('utf8') : bytes.toString('base64');
}
