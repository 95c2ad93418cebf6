import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { buildConnector, request } from 'undici';
import { GatewayError, isGatewayError } from '../../shared/errors.js';
import { discardBody, mapTransportError, type VendorResponse } from './http.js';
import type { CallContext } from './types.js';

/**
 * The one way a worker fetches a URL it did not build from a channel's
 * configured base URL: image links, BFL polling and sample URLs, anything a
 * vendor answers with. Such a URL may name the worker's own network (a
 * metadata service, Redis, an admin port): it is fetched only over http(s),
 * only from public addresses (checked on the address actually connected to,
 * after DNS and on every redirect), within a total deadline, and never with
 * the channel's credentials unless it stays on the channel's own origin.
 */

export type AddressCategory =
  'unspecified' | 'loopback' | 'private' | 'cgnat' | 'link-local' | 'unique-local' | 'multicast' | 'reserved';

type Range = readonly [network: string, prefix: number];

/** IANA's special-purpose registries, reduced to what must never be fetched from a vendor's say-so. */
const IPV4_RANGES: Record<AddressCategory, readonly Range[]> = {
  // 0.0.0.0 reaches the local host on Linux.
  unspecified: [['0.0.0.0', 8]],
  loopback: [['127.0.0.0', 8]],
  private: [
    ['10.0.0.0', 8],
    ['172.16.0.0', 12],
    ['192.168.0.0', 16],
  ],
  cgnat: [['100.64.0.0', 10]],
  // Holds 169.254.169.254, the cloud metadata service.
  'link-local': [['169.254.0.0', 16]],
  'unique-local': [],
  multicast: [['224.0.0.0', 4]],
  reserved: [
    ['192.0.0.0', 24],
    ['192.0.2.0', 24],
    ['192.88.99.0', 24],
    ['198.18.0.0', 15],
    ['198.51.100.0', 24],
    ['203.0.113.0', 24],
    // 240/4 and the broadcast address 255.255.255.255.
    ['240.0.0.0', 4],
  ],
};

const IPV6_RANGES: Record<AddressCategory, readonly Range[]> = {
  unspecified: [['::', 128]],
  loopback: [['::1', 128]],
  private: [],
  cgnat: [],
  'link-local': [['fe80::', 10]],
  'unique-local': [['fc00::', 7]],
  multicast: [['ff00::', 8]],
  // Local-use NAT64, discard-only, IETF protocol assignments (Teredo among them), documentation.
  reserved: [
    ['64:ff9b:1::', 48],
    ['100::', 64],
    ['2001::', 23],
    ['2001:db8::', 32],
    ['3fff::', 20],
  ],
};

const hex16 = (high: number, low: number) => ((high << 8) | low).toString(16);

/**
 * IPv6 forms that carry an IPv4 address and reach it: NAT64's well-known
 * prefix and 6to4. (IPv4-mapped `::ffff:a.b.c.d` needs nothing: BlockList
 * checks those against the IPv4 rules itself.)
 */
function embeddingRanges([network, prefix]: Range): Range[] {
  const [a, b, c, d] = network.split('.').map(Number) as [number, number, number, number];
  return [
    [`64:ff9b::${network}`, 96 + prefix],
    [`2002:${hex16(a, b)}:${hex16(c, d)}::`, 16 + prefix],
  ];
}

const CATEGORIES: ReadonlyArray<readonly [AddressCategory, BlockList]> = (
  Object.keys(IPV4_RANGES) as AddressCategory[]
).map((category) => {
  const list = new BlockList();
  for (const range of IPV4_RANGES[category]) {
    list.addSubnet(range[0], range[1], 'ipv4');
    for (const [network, prefix] of embeddingRanges(range)) list.addSubnet(network, prefix, 'ipv6');
  }
  for (const [network, prefix] of IPV6_RANGES[category]) list.addSubnet(network, prefix, 'ipv6');
  return [category, list] as const;
});

/** Outside these, an IPv6 address is not global unicast (IPv4-compatible `::a.b.c.d`, site-local, unassigned space). */
const GLOBAL_IPV6 = new BlockList();
GLOBAL_IPV6.addSubnet('2000::', 3, 'ipv6');
GLOBAL_IPV6.addSubnet('::ffff:0:0', 96, 'ipv6');
GLOBAL_IPV6.addSubnet('64:ff9b::', 96, 'ipv6');

/** What kind of non-public address `address` is; `null` for a public one. Throws on anything but an IP address. */
export function classifyAddress(address: string): AddressCategory | null {
  const family = isIP(address);
  if (family === 0) throw new TypeError(`not an IP address: ${address}`);
  const type = family === 4 ? 'ipv4' : 'ipv6';
  for (const [category, list] of CATEGORIES) if (list.check(address, type)) return category;
  if (family === 6 && !GLOBAL_IPV6.check(address, 'ipv6')) return 'reserved';
  return null;
}

/** The operator's exceptions (`FETCH_ALLOW_HOSTS`, `FETCH_ALLOW_PRIVATE` in shared/config.ts). */
export interface FetchPolicy {
  /**
   * Host names (`images.internal`), subdomain wildcards (`*.corp.example`), IP addresses and CIDR ranges fetched
   * without the address check.
   */
  allowHosts: readonly string[];
  /** Fetch from any address (development against local fakes); the scheme and credential rules still hold. */
  allowPrivate: boolean;
}

interface CompiledPolicy {
  allowPrivate: boolean;
  names: Set<string>;
  suffixes: string[];
  ranges: BlockList;
}

function compilePolicy(policy: FetchPolicy): CompiledPolicy {
  const compiled: CompiledPolicy = {
    allowPrivate: policy.allowPrivate,
    names: new Set(),
    suffixes: [],
    ranges: new BlockList(),
  };
  for (const raw of policy.allowHosts) {
    const entry = raw
      .trim()
      .toLowerCase()
      .replace(/^\[(.*?)\]/, '$1');
    if (entry === '') continue;
    const slash = entry.indexOf('/');
    const network = slash === -1 ? entry : entry.slice(0, slash);
    const family = isIP(network);
    if (family !== 0) {
      const type = family === 4 ? 'ipv4' : 'ipv6';
      if (slash === -1) compiled.ranges.addAddress(network, type);
      else compiled.ranges.addSubnet(network, Number(entry.slice(slash + 1)), type);
    } else if (entry.startsWith('*.')) compiled.suffixes.push(entry.slice(1));
    else compiled.names.add(entry);
  }
  return compiled;
}

/**
 * A listed name resolves wherever it resolves: the operator vouched for it. (Listed addresses are `addressRefusal`'s.)
 */
function nameAllowed(policy: CompiledPolicy, hostname: string): boolean {
  const host = hostname.toLowerCase();
  return policy.names.has(host) || policy.suffixes.some((suffix) => host.endsWith(suffix));
}

/** Why `address` may not be connected to, or `null` when it may. */
function addressRefusal(policy: CompiledPolicy, address: string): AddressCategory | null {
  if (policy.allowPrivate) return null;
  const category = classifyAddress(address);
  if (category === null) return null;
  return policy.ranges.check(address, isIP(address) === 4 ? 'ipv4' : 'ipv6') ? null : category;
}

/** Raised inside the connection attempt; `guardedGet` turns it into the client's error. */
export class UnsafeAddressError extends Error {
  readonly code = 'ERR_UNSAFE_ADDRESS';
  constructor(
    readonly host: string,
    readonly address: string,
    readonly category: AddressCategory,
  ) {
    super(`${host}${host === address ? '' : ` resolves to ${address}, which`} is not a public address (${category})`);
    this.name = 'UnsafeAddressError';
  }
}

type Resolver = (
  hostname: string,
  options: LookupAllOptions,
  callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
) => void;

/**
 * A `lookup` for sockets that refuses a name if any address it resolves to
 * is not public (or allowed by `fetchPolicy`): the socket then connects only
 * to addresses checked here, so a name cannot pass the check and then resolve
 * elsewhere (DNS rebinding). `resolve` is `dns.lookup` but for tests.
 */
export function createGuardedLookup(fetchPolicy: FetchPolicy, resolve: Resolver = dnsLookup): LookupFunction {
  return guardedLookup(compilePolicy(fetchPolicy), resolve);
}

function guardedLookup(policy: CompiledPolicy, resolve: Resolver): LookupFunction {
  return (hostname, options, callback) => {
    resolve(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return callback(error, '', 0);
      if (!nameAllowed(policy, hostname)) {
        for (const { address } of addresses) {
          const category = addressRefusal(policy, address);
          if (category !== null) return callback(new UnsafeAddressError(hostname, address, category), '', 0);
        }
      }
      // Sockets ask for every address when they race IPv4 against IPv6 (autoSelectFamily), else for one.
      if (options.all) return callback(null, addresses);
      const [first] = addresses;
      if (first === undefined)
        return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), '', 0);
      callback(null, first.address, first.family);
    });
  };
}

/**
 * Connects only where `fetchPolicy` allows (the agent of `guardedGet`, built
 * by `createVendorHttp`). Sockets call `lookup` only for names; an IP literal
 * in the URL is checked here, before connecting.
 */
export function guardedConnector(fetchPolicy: FetchPolicy, connectTimeoutMs: number): buildConnector.connector {
  const policy = compilePolicy(fetchPolicy);
  const connect = buildConnector({ timeout: connectTimeoutMs, lookup: guardedLookup(policy, dnsLookup) });
  return (options, callback) => {
    const { hostname } = options;
    if (isIP(hostname) !== 0) {
      const category = addressRefusal(policy, hostname);
      if (category !== null) return callback(new UnsafeAddressError(hostname, hostname, category), null);
    }
    connect(options, callback);
  };
}

export interface GuardedGetOptions {
  /** Sent on every hop: nothing secret here. */
  headers?: Record<string, string>;
  /**
   * Sent only while the request stays on the channel's origin (or one of `credentialOrigins`): never after a redirect
   * away.
   */
  credentials?: Record<string, string>;
  /** Origins besides the channel's own that may receive `credentials` (BFL's regional hosts for a channel on BFL). */
  credentialOrigins?: readonly string[];
  /** The whole exchange, redirects and body included: a vendor that drips bytes cannot hold a job past this. */
  timeoutMs?: number;
  maxRedirects?: number;
}

const DEFAULT_TIMEOUT_MS = 120_000;
const DEFAULT_MAX_REDIRECTS = 3;
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

function originOf(url: string): string | undefined {
  try {
    const parsed = new URL(url);
    return parsed.protocol === 'http:' || parsed.protocol === 'https:' ? parsed.origin : undefined;
  } catch {
    return undefined;
  }
}

/** Refusals are logged by scheme and host only: paths and queries of vendor URLs carry signatures. */
function unsafeUrl(
  ctx: CallContext,
  target: URL | undefined,
  reason: string,
  cause?: UnsafeAddressError,
): GatewayError {
  ctx.log.warn(
    { target: target === undefined ? undefined : `${target.protocol}//${target.host}`, reason },
    'refused to fetch a URL the vendor sent',
  );
  return new GatewayError(502, 'The upstream vendor answered with a URL the gateway does not fetch.', {
    type: 'server_error',
    code: 'unsafe_vendor_url',
    retryable: false,
    cause,
  });
}

function findUnsafeAddress(error: unknown): UnsafeAddressError | undefined {
  for (let current = error, depth = 0; current instanceof Error && depth < 5; current = current.cause, depth += 1) {
    if (current instanceof UnsafeAddressError) return current;
  }
  return undefined;
}

/**
 * GETs a URL a vendor supplied (or that holds a vendor-supplied part) and
 * resolves once the status and headers are in; the caller reads or discards
 * the body, still within `timeoutMs`. The channel's own origin is trusted as
 * configured (it may be a local model server); everything else must be
 * public. Redirects are followed here, up to `maxRedirects`, each hop checked.
 */
export async function guardedGet(
  url: string,
  ctx: CallContext,
  options: GuardedGetOptions = {},
): Promise<VendorResponse> {
  ctx.signal.throwIfAborted();
  const deadline = AbortSignal.timeout(options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  const signal = AbortSignal.any([ctx.signal, deadline]);
  const channelOrigin = originOf(ctx.channel.baseUrl);
  const keyOrigins = new Set(
    [channelOrigin, ...(options.credentialOrigins ?? [])].filter((origin) => origin !== undefined),
  );
  let target: URL;
  try {
    target = new URL(url);
  } catch {
    // No cause: Node's URL error carries the whole input, signature and all, into any log of it.
    throw unsafeUrl(ctx, undefined, 'not a valid URL');
  }
  const keyOrigin = keyOrigins.has(target.origin) ? target.origin : undefined;
  let onKeyOrigin = keyOrigin !== undefined;
  for (let hop = 0; ; hop += 1) {
    if (target.protocol !== 'http:' && target.protocol !== 'https:')
      throw unsafeUrl(ctx, target, `the ${target.protocol} scheme`);
    // Once a redirect leaves the key's origin the key stays behind, even if a later hop comes back.
    onKeyOrigin &&= target.origin === keyOrigin;
    const headers = onKeyOrigin ? { ...options.headers, ...options.credentials } : { ...options.headers };
    const dispatcher = target.origin === channelOrigin ? ctx.http.agent : ctx.http.guardedAgent;
    let response: Awaited<ReturnType<typeof request>>;
    try {
      response = await request(target, { method: 'GET', dispatcher, signal, headers });
    } catch (error) {
      const unsafe = findUnsafeAddress(error);
      if (unsafe !== undefined) throw unsafeUrl(ctx, target, unsafe.message, unsafe);
      throw mapTransportError(error, ctx);
    }
    const location = response.headers.location;
    if (!REDIRECTS.has(response.statusCode) || typeof location !== 'string') {
      return { status: response.statusCode, headers: response.headers, body: response.body };
    }
    discardBody({ status: response.statusCode, headers: response.headers, body: response.body });
    if (hop >= (options.maxRedirects ?? DEFAULT_MAX_REDIRECTS)) {
      throw new GatewayError(502, 'The upstream vendor redirected too many times.', {
        type: 'server_error',
        code: 'vendor_bad_response',
        retryable: false,
      });
    }
    try {
      target = new URL(location, target);
    } catch {
      throw unsafeUrl(ctx, target, 'a redirect to an invalid URL');
    }
  }
}

/**
 * Reads a whole body of at most `maxBytes` (a declared larger length is
 * refused before reading), else throws `tooLarge()`: a misbehaving vendor
 * cannot make the worker buffer without end.
 */
export async function readBoundedBytes(
  response: VendorResponse,
  maxBytes: number,
  ctx: CallContext,
  tooLarge: () => GatewayError,
): Promise<Buffer> {
  const declared = Number(response.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) {
    discardBody(response);
    throw tooLarge();
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of response.body) {
      const buffer = chunk as Buffer;
      size += buffer.length;
      if (size > maxBytes) throw tooLarge();
      chunks.push(buffer);
    }
  } catch (error) {
    discardBody(response);
    throw isGatewayError(error) ? error : mapTransportError(error, ctx);
  }
  return Buffer.concat(chunks);
}
