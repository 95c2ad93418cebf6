import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import type { Config } from './config.js';
import {
  vendorDefinitions,
  type OpenAICompatQuirks,
  type Protocol,
  type VendorDefinition,
} from './vendor-definitions.js';

/** Why a channel rests: its credentials or quota were refused, a 429, or repeated 5xx/network failures. */
export type CooldownReason = 'auth' | 'rate' | 'failures';
export interface CooldownEntry {
  until: number;
  reason: CooldownReason;
  /** The vendor status that started it (0: a network failure). */
  status: number;
}

export function formatCooldown(entry: CooldownEntry): string {
  return `${entry.until}:${entry.reason}:${entry.status}`;
}

/** Also reads the older `<until>` and `<until>:rate` forms. */
export function parseCooldown(raw: string): CooldownEntry {
  const [until, reason, status] = raw.split(':');
  return {
    until: Number(until),
    reason: reason === 'rate' || reason === 'auth' ? reason : 'failures',
    status: Number(status) || 0,
  };
}

/** One upstream credential + base URL of a vendor. Never leaves the worker. */
export interface Channel {
  vendor: string;
  /** e.g. `https://api.openai.com/v1` (OpenAI-style base URLs include the version path). */
  baseUrl: string;
  apiKey: string;
  quirks?: OpenAICompatQuirks;
}

/** A channel as the router sees it: credentials plus a stable id (never the key) and a weight. */
export interface ChannelConfig extends Channel {
  id: string;
  weight: number;
  /** Set when the channel speaks another protocol than its vendor's: the mock standing in for a vendor. */
  protocol?: Protocol;
}

/** What of the configuration decides the channels: `<VENDOR>_*` variables, CHANNELS_FILE, MOCK_VENDOR. */
export type VendorConfig = Pick<Config, 'vendors' | 'channelsFile' | 'mock'>;

function keysOf(config: Pick<Config, 'vendors'>, prefix: string): string[] {
  return config.vendors[prefix]?.apiKeys ?? [];
}

/** Identifies a channel in logs and in Redis without revealing its key. */
export function channelId(vendor: string, baseUrl: string, apiKey: string): string {
  return `${vendor}:${createHash('sha256').update(`${baseUrl}\n${apiKey}`).digest('hex').slice(0, 12)}`;
}

/** The mock vendor serves when asked (`MOCK_VENDOR=on`), or by default when no real vendor has a key. */
export function isMockEnabled(config: VendorConfig): boolean {
  if (config.mock.mode !== 'auto') return config.mock.mode === 'on';
  return noVendorConfigured(config);
}

/**
 * Offline mode (`MOCK_VENDOR=auto` with no vendor configured at all): the mock
 * also stands in for every vendor, so `gpt-4o-mini`, `claude-…`, `dall-e-3` or
 * `sora-2` answer offline exactly as a client would call them for real. Once any
 * vendor has a key, only configured vendors serve and the mock keeps to its own models.
 */
export function isMockStandingIn(config: VendorConfig): boolean {
  return config.mock.mode === 'auto' && noVendorConfigured(config);
}

/** Whether the mock answers on this channel: its own models, or the mock standing in for a vendor. */
export function isMockChannel(channel: Pick<ChannelConfig, 'vendor' | 'protocol'>): boolean {
  return channel.protocol === 'mock' || vendorDefinition(channel.vendor)?.protocol === 'mock';
}

/**
 * Whether the mock will answer for a model whose first route is `vendor`: the mock's own, or the mock standing in for
 * every vendor.
 */
export function mockAnswers(config: VendorConfig, vendor: string | undefined): boolean {
  return isMockStandingIn(config) || (vendor !== undefined && vendorDefinition(vendor)?.protocol === 'mock');
}

function noVendorConfigured(config: VendorConfig): boolean {
  return (
    !config.channelsFile &&
    vendorDefinitions.every((v) => v.protocol === 'mock' || keysOf(config, v.envPrefix).length === 0)
  );
}

const channelsFileSchema = z.object({
  channels: z.array(
    z.object({
      vendor: z.string().min(1),
      /** Needed only for a vendor not built in (any OpenAI-compatible host, say). */
      protocol: z.enum(['openai', 'anthropic', 'gemini', 'bfl']).optional(),
      baseUrl: z.string().url().optional(),
      apiKey: z.string().default(''),
      weight: z.number().positive().default(1),
    }),
  ),
});

/** Vendors declared only in the channels file (protocol given there). */
export function extraVendors(config: Pick<Config, 'channelsFile'>): VendorDefinition[] {
  if (!config.channelsFile) return [];
  const extra = new Map<string, VendorDefinition>();
  for (const channel of readChannelsFile(config.channelsFile)) {
    if (vendorDefinitions.some((v) => v.name === channel.vendor) || extra.has(channel.vendor)) continue;
    if (!channel.protocol || !channel.baseUrl) {
      throw new Error(
        `CHANNELS_FILE: vendor "${channel.vendor}" is not built in, so it needs "protocol" and "baseUrl"`,
      );
    }
    extra.set(channel.vendor, {
      name: channel.vendor,
      protocol: channel.protocol,
      envPrefix: channel.vendor.toUpperCase().replace(/[^A-Z0-9]/g, '_'),
      defaultBaseUrl: channel.baseUrl,
    });
  }
  return [...extra.values()];
}

function readChannelsFile(path: string) {
  return channelsFileSchema.parse(JSON.parse(readFileSync(path, 'utf8'))).channels;
}

/**
 * Every usable channel per vendor name: from `<VENDOR>_API_KEY` (comma-separated
 * keys, weight 1 each) and from `CHANNELS_FILE` (`{"channels":[{vendor, baseUrl?, apiKey, weight?, protocol?}]}`).
 */
export function resolveChannels(config: VendorConfig): Map<string, ChannelConfig[]> {
  const channels = new Map<string, ChannelConfig[]>();
  const add = (definition: VendorDefinition, baseUrl: string, apiKey: string, weight: number) => {
    const list = channels.get(definition.name) ?? [];
    const channel: ChannelConfig = {
      vendor: definition.name,
      baseUrl,
      apiKey,
      id: channelId(definition.name, baseUrl, apiKey),
      weight,
    };
    if (definition.quirks) channel.quirks = definition.quirks;
    list.push(channel);
    channels.set(definition.name, list);
  };
  const definitions = [...vendorDefinitions, ...extraVendors(config)];
  for (const vendor of definitions) {
    if (vendor.protocol === 'mock') {
      if (isMockEnabled(config)) add(vendor, '', '', 1);
      continue;
    }
    if (isMockStandingIn(config)) {
      channels.set(vendor.name, [
        { vendor: vendor.name, baseUrl: '', apiKey: '', id: `${vendor.name}:mock`, weight: 1, protocol: 'mock' },
      ]);
      continue;
    }
    const baseUrl = (config.vendors[vendor.envPrefix]?.baseUrl || vendor.defaultBaseUrl).replace(/\/+$/, '');
    for (const apiKey of keysOf(config, vendor.envPrefix)) add(vendor, baseUrl, apiKey, 1);
  }
  if (config.channelsFile) {
    for (const entry of readChannelsFile(config.channelsFile)) {
      const definition = definitions.find((v) => v.name === entry.vendor)!;
      add(definition, (entry.baseUrl ?? definition.defaultBaseUrl).replace(/\/+$/, ''), entry.apiKey, entry.weight);
    }
  }
  return channels;
}

export function vendorDefinition(
  name: string,
  config: Pick<Config, 'channelsFile'> = { channelsFile: undefined },
): VendorDefinition | undefined {
  return vendorDefinitions.find((v) => v.name === name) ?? extraVendors(config).find((v) => v.name === name);
}
