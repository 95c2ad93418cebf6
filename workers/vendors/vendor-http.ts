import { Agent, type buildConnector } from 'undici';
import type { Config } from '../../shared/config.js';
import { guardedConnector } from './guarded-fetch.js';
import type { VendorHttp } from './types.js';

/** What vendor calls take from the configuration. */
export type VendorHttpSettings = Pick<
  Config,
  'vendorTimeouts' | 'fetchAllowHosts' | 'fetchAllowPrivate' | 'bflPollIntervalMs' | 'videoPollIntervalMs' | 'mock'
>;

/** The connections and pace of a worker pool's vendor calls; the pool closes it at shutdown. */
export function createVendorHttp(config: VendorHttpSettings): VendorHttp {
  const timeouts = config.vendorTimeouts;
  const agentWith = (connect: buildConnector.BuildOptions | buildConnector.connector) =>
    new Agent({
      connect,
      headersTimeout: timeouts.firstByteMs,
      // undici's body timeout measures the gap between two body chunks: exactly an idle timeout.
      bodyTimeout: timeouts.idleMs,
      keepAliveTimeout: 30_000,
    });
  // undici keeps a connection pool per origin inside each agent.
  const agent = agentWith({ timeout: timeouts.connectMs });
  const guardedAgent = agentWith(
    guardedConnector(
      { allowHosts: config.fetchAllowHosts, allowPrivate: config.fetchAllowPrivate },
      timeouts.connectMs,
    ),
  );
  const { streamDelayMs, videoMs } = config.mock;
  return {
    agent,
    guardedAgent,
    bflPollIntervalMs: config.bflPollIntervalMs,
    videoPollIntervalMs: config.videoPollIntervalMs,
    mock: { streamDelayMs, videoMs },
    async close() {
      await Promise.all([agent.close(), guardedAgent.close()]);
    },
  };
}
