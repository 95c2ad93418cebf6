import { loadConfig, type Config } from '../../shared/config.js';

/**
 * What vendor calls take from the configuration: HTTP timeouts, how often
 * media jobs poll, the mock's pace. `startWorkers` hands them over from its
 * `Config` (as it does the fetch policy); until then, and in tests that call
 * adapters directly, they are the configuration's defaults.
 */
export type VendorCallSettings = Pick<Config, 'vendorTimeouts' | 'bflPollIntervalMs' | 'videoPollIntervalMs' | 'mock'>;

let current: VendorCallSettings = loadConfig({});

/** Takes effect for the next call; HTTP timeouts for agents built after it (`closeVendorAgent` drops the old ones). */
export function setVendorCallSettings(config: VendorCallSettings): void {
  const { vendorTimeouts, bflPollIntervalMs, videoPollIntervalMs, mock } = config;
  current = { vendorTimeouts, bflPollIntervalMs, videoPollIntervalMs, mock };
}

export function vendorCallSettings(): VendorCallSettings {
  return current;
}
