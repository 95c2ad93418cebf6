import { joinUrl, type VendorApi } from '../http.js';

/** The global host. The channel's base URL stops before `/v1`, as in BFL's own clients. */
export const BFL_DEFAULT_BASE_URL = 'https://api.bfl.ai';

/** BFL's task API: a task is created on its model's route, then polled. */
export const bflApi = {
  headers: (apiKey: string): Record<string, string> => ({ 'x-key': apiKey }),
  paths: {
    submit: (endpoint: string) => `/v1/${encodeURIComponent(endpoint)}`,
    /** The poll route BFL has always served; used when a task carries no polling URL we may follow. */
    result: (taskId: string) => `/v1/get_result?id=${encodeURIComponent(taskId)}`,
  },
} satisfies VendorApi;

/**
 * Hosts whose polling URLs get the key: BFL's own (global, `api.eu.bfl.ai`, `api.us.bfl.ai`) and the legacy `bfl.ml`.
 */
const BFL_HOST_SUFFIXES = ['bfl.ai', 'bfl.ml'];

const isBflHost = (hostname: string) =>
  BFL_HOST_SUFFIXES.some((suffix) => hostname === suffix || hostname.endsWith(`.${suffix}`));

/**
 * A regional BFL host the channel's key may go to: only when the channel
 * itself is on BFL over https. A channel pointed at a proxy holds the proxy's
 * key, which BFL must not see.
 */
export function isBflRegionalUrl(baseUrl: string, url: URL): boolean {
  try {
    const base = new URL(baseUrl);
    return (
      base.protocol === 'https:' && isBflHost(base.hostname) && url.protocol === 'https:' && isBflHost(url.hostname)
    );
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
  return joinUrl(baseUrl, bflApi.paths.result(task.id));
}
