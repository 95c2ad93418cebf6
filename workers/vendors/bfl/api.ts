import { guardedGet } from '../guarded-fetch.js';
import { joinUrl, postVendor, type VendorResponse } from '../http.js';
import type { CallContext } from '../types.js';

/** The global host. The channel's base URL stops before `/v1`, as in BFL's own clients. */
export const BFL_DEFAULT_BASE_URL = 'https://api.bfl.ai';

/** Hosts whose polling URLs get the key: BFL's own (global, `api.eu.bfl.ai`, `api.us.bfl.ai`) and the legacy `bfl.ml`. */
const BFL_HOST_SUFFIXES = ['bfl.ai', 'bfl.ml'];

const isBflHost = (hostname: string) => BFL_HOST_SUFFIXES.some((suffix) => hostname === suffix || hostname.endsWith(`.${suffix}`));

export function bflSubmitUrl(baseUrl: string, endpoint: string): string {
  return joinUrl(baseUrl, `/v1/${encodeURIComponent(endpoint)}`);
}

/** The poll route BFL has always served; used when a task carries no polling URL we may follow. */
export function bflResultUrl(baseUrl: string, taskId: string): string {
  return joinUrl(baseUrl, `/v1/get_result?id=${encodeURIComponent(taskId)}`);
}

/**
 * A regional BFL host the channel's key may go to: only when the channel
 * itself is on BFL over https. A channel pointed at a proxy holds the proxy's
 * key, which BFL must not see.
 */
function isBflRegionalUrl(baseUrl: string, url: URL): boolean {
  try {
    const base = new URL(baseUrl);
    return base.protocol === 'https:' && isBflHost(base.hostname) && url.protocol === 'https:' && isBflHost(url.hostname);
  } catch {
    return false;
  }
}

/**
 * The URL to poll for a task. The vendor's `polling_url` is followed only when
 * it points at the channel's own origin or, for a channel on BFL, at a BFL
 * host over https: the key travels with every poll, and a polling URL naming
 * some other host must not collect it (nor make the worker fetch arbitrary
 * addresses). Anything else falls back to `get_result` on the channel's base URL.
 */
export function bflPollUrl(baseUrl: string, task: { id: string; polling_url?: string | undefined }): string {
  if (task.polling_url !== undefined) {
    try {
      const polling = new URL(task.polling_url);
      const base = new URL(baseUrl);
      if (polling.origin === base.origin) return polling.href;
      if (isBflRegionalUrl(baseUrl, polling)) return polling.href;
    } catch {
      // A malformed URL is treated like a missing one.
    }
  }
  return bflResultUrl(baseUrl, task.id);
}

const keyHeaders = (apiKey: string) => ({ 'x-key': apiKey, accept: 'application/json' });

/** A poll is a small JSON answer: far less than the image downloads get. */
const POLL_TIMEOUT_MS = 60_000;
const SAMPLE_TIMEOUT_MS = 120_000;

/** Creates one task: `POST /v1/<endpoint>` with the JSON body. */
export function postBflTask(endpoint: string, body: string, ctx: CallContext): Promise<VendorResponse> {
  return postVendor(
    bflSubmitUrl(ctx.channel.baseUrl, endpoint),
    { ...keyHeaders(ctx.channel.apiKey), 'content-type': 'application/json' },
    body,
    ctx,
  );
}

/** One poll of a task's state; `pollUrl` comes from `bflPollUrl`. */
export function getBflResult(pollUrl: string, ctx: CallContext): Promise<VendorResponse> {
  let regional: string[] = [];
  try {
    const url = new URL(pollUrl);
    if (isBflRegionalUrl(ctx.channel.baseUrl, url)) regional = [url.origin];
  } catch {
    // guardedGet refuses it.
  }
  return guardedGet(pollUrl, ctx, {
    headers: { accept: 'application/json' },
    credentials: { 'x-key': ctx.channel.apiKey },
    credentialOrigins: regional,
    timeoutMs: POLL_TIMEOUT_MS,
  });
}

/** Downloads a finished image. The sample URL is pre-signed (and may be a CDN host), so it gets no key. */
export function getBflSample(sampleUrl: string, ctx: CallContext): Promise<VendorResponse> {
  return guardedGet(sampleUrl, ctx, { headers: { accept: 'image/*' }, timeoutMs: SAMPLE_TIMEOUT_MS });
}
