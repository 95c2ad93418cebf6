import { GatewayError } from '../../../shared/errors.js';
import { mapGeminiError } from './map-gemini-error.js';

/**
 * Gemini Live ends a session by closing the WebSocket with a code and a reason in Google's words, where its HTTP API
 * answers a status: 1007 for an invalid argument (a refused key — "API key not valid" — or a message it cannot
 * read), 1008 for a policy refusal (a model it does not serve for Live, a permission), 1011 for an internal error or
 * an exhausted quota, 1013 for try-again-later, 1001 when it goes away (after `goAway`). Each is read as the HTTP
 * status it stands for and mapped as every Gemini error is (`mapGeminiError`), so a bad key is the gateway's
 * misconfiguration, a quota a retryable 429, a refused argument the client's 400.
 */

function statusForClose(code: number, reason: string): { status: number; rpc: string } {
  if (/quota|resource[_ ]exhausted|rate limit|too many/i.test(reason))
    return { status: 429, rpc: 'RESOURCE_EXHAUSTED' };
  if (code === 1007) return { status: 400, rpc: 'INVALID_ARGUMENT' };
  if (code === 1008) {
    if (/not found|not supported/i.test(reason)) return { status: 404, rpc: 'NOT_FOUND' };
    if (/permission|denied|unauthori[sz]ed/i.test(reason)) return { status: 403, rpc: 'PERMISSION_DENIED' };
    return { status: 400, rpc: 'FAILED_PRECONDITION' };
  }
  if (code === 1013 || code === 1001) return { status: 503, rpc: 'UNAVAILABLE' };
  return { status: 500, rpc: 'INTERNAL' };
}

/** The error a close by Gemini means (not called for a close the gateway asked). */
export function mapLiveClose(code: number, reason: string, secrets: readonly string[]): GatewayError {
  if (code === 1000 || code === 1005 || code === 1006) {
    const why = code === 1000 ? 'ended the realtime session' : 'dropped the realtime session without a close frame';
    return new GatewayError(502, `The upstream vendor ${why}${reason ? ` (${reason.slice(0, 200)})` : ''}.`, {
      type: 'server_error',
      code: code === 1000 ? 'vendor_session_ended' : 'vendor_error',
      retryable: code !== 1000,
    });
  }
  const { status, rpc } = statusForClose(code, reason);
  return mapGeminiError(
    {
      status,
      headers: {},
      bodyText: JSON.stringify({ error: { code: status, message: reason || `WebSocket close ${code}`, status: rpc } }),
    },
    secrets,
  );
}
