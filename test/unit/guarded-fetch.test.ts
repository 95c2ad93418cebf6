import assert from 'node:assert/strict';
import type { LookupAddress } from 'node:dns';
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import { after, afterEach, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { loadCatalog } from '../../shared/catalog.js';
import { loadConfig } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import {
  classifyAddress,
  createGuardedLookup,
  guardedGet,
  readBoundedBytes,
  UnsafeAddressError,
  type AddressCategory,
  type FetchPolicy,
} from '../../workers/vendors/guarded-fetch.js';
import type { CallContext, VendorHttp } from '../../workers/vendors/types.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';
import { gatewayError } from '../support/assertions.js';
import { closeServer, FakePauses, listenOnLoopback } from '../support/fake-server.js';

describe('classifyAddress', () => {
  const cases: Record<AddressCategory, string[]> = {
    unspecified: ['0.0.0.0', '0.1.2.3', '::', '::ffff:0.0.0.0'],
    loopback: [
      '127.0.0.1',
      '127.255.255.254',
      '::1',
      '::ffff:127.0.0.1',
      '::ffff:7f00:1',
      '64:ff9b::127.0.0.1',
      '64:ff9b::7f00:1',
      '2002:7f00:1::1',
    ],
    private: [
      '10.0.0.0',
      '10.255.255.255',
      '172.16.0.1',
      '172.31.255.255',
      '192.168.0.1',
      '192.168.255.255',
      '::ffff:10.1.2.3',
      '::ffff:192.168.1.1',
      '64:ff9b::c0a8:101',
      '2002:c0a8:101::',
    ],
    cgnat: ['100.64.0.0', '100.100.100.100', '100.127.255.255', '::ffff:100.64.0.1'],
    'link-local': [
      '169.254.0.1',
      '169.254.169.254',
      'fe80::1',
      'febf:ffff::1',
      '::ffff:169.254.169.254',
      '64:ff9b::a9fe:a9fe',
      '2002:a9fe:a9fe::',
    ],
    'unique-local': ['fc00::1', 'fd12:3456:789a::1', 'fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'],
    multicast: ['224.0.0.1', '239.255.255.250', 'ff02::1', 'ff05::1:3', '::ffff:224.0.0.251'],
    reserved: [
      '240.0.0.1',
      '255.255.255.255',
      '192.0.0.8',
      '192.0.2.1',
      '198.18.0.1',
      '198.51.100.7',
      '203.0.113.9',
      // IPv4-compatible (deprecated), site-local, unassigned, documentation, Teredo, local-use NAT64.
      '::127.0.0.1',
      'fec0::1',
      '4000::1',
      '2001:db8::1',
      '2001:0:4136:e378:8000:63bf:3fff:fdd2',
      '64:ff9b:1::a00:1',
      '3fff::1',
    ],
  };
  for (const [category, addresses] of Object.entries(cases)) {
    it(`refuses ${category} addresses`, () => {
      for (const address of addresses) assert.equal(classifyAddress(address), category, address);
    });
  }

  it('lets public addresses through, right next to the refused ranges', () => {
    const publicAddresses = [
      '8.8.8.8',
      '1.1.1.1',
      '9.255.255.255',
      '11.0.0.0',
      '100.63.255.255',
      '100.128.0.0',
      '126.255.255.255',
      '128.0.0.0',
      '169.253.255.255',
      '169.255.0.0',
      '172.15.255.255',
      '172.32.0.0',
      '192.167.255.255',
      '192.169.0.0',
      '223.255.255.255',
      '2606:4700:4700::1111',
      '2a00:1450:4001:80b::200e',
      '::ffff:8.8.8.8',
      '64:ff9b::8.8.8.8',
      '2002:808:808::1',
    ];
    for (const address of publicAddresses) assert.equal(classifyAddress(address), null, address);
  });

  it('takes only IP addresses', () => {
    assert.throws(() => classifyAddress('localhost'), TypeError);
  });
});

describe('the guarded lookup', () => {
  /** A resolver answering from a table, as DNS would: no network involved. */
  const resolver =
    (table: Record<string, LookupAddress[]>) =>
    (
      hostname: string,
      _options: unknown,
      callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
    ) =>
      queueMicrotask(() => callback(null, table[hostname] ?? []));
  const table = {
    'rebound.example': [{ address: '127.0.0.1', family: 4 }],
    'metadata.example': [{ address: '169.254.169.254', family: 4 }],
    'mixed.example': [
      { address: '93.184.216.34', family: 4 },
      { address: 'fd00::1', family: 6 },
    ],
    'public.example': [
      { address: '93.184.216.34', family: 4 },
      { address: '2606:2800:220:1:248:1893:25c8:1946', family: 6 },
    ],
  };
  const lookup = createGuardedLookup({ allowHosts: [], allowPrivate: false }, resolver(table));
  const resolve = (hostname: string, all: boolean) =>
    new Promise<{ error: Error | null; address: unknown; family: unknown }>((done) =>
      lookup(hostname, { all }, (error, address, family) => done({ error, address, family })),
    );

  it('refuses a name that resolves to a loopback or metadata address', async () => {
    for (const hostname of ['rebound.example', 'metadata.example']) {
      const { error } = await resolve(hostname, true);
      assert.ok(error instanceof UnsafeAddressError, hostname);
      assert.equal(error.host, hostname);
    }
  });

  it('refuses a name when any of its addresses is not public', async () => {
    const { error } = await resolve('mixed.example', true);
    assert.ok(error instanceof UnsafeAddressError);
    assert.equal(error.category, 'unique-local');
  });

  it('hands public addresses to the socket in the form it asked for', async () => {
    assert.deepEqual(await resolve('public.example', true), {
      error: null,
      address: table['public.example'],
      family: undefined,
    });
    assert.deepEqual(await resolve('public.example', false), { error: null, address: '93.184.216.34', family: 4 });
  });
});

interface Hit {
  path: string;
  headers: IncomingHttpHeaders;
}

/** A server that records each request it gets and answers through `handler`. */
async function recordingServer(
  handler: (path: string, res: ServerResponse) => void,
): Promise<{ server: Server; url: string; hits: Hit[] }> {
  const hits: Hit[] = [];
  const server = createServer((req, res) => {
    hits.push({ path: req.url ?? '/', headers: req.headers });
    handler(req.url ?? '/', res);
  });
  const port = await listenOnLoopback(server);
  return { server, url: `http://127.0.0.1:${port}`, hits };
}

describe('guardedGet', () => {
  const catalog = loadCatalog();
  const pauses = new FakePauses();
  let vendor: Awaited<ReturnType<typeof recordingServer>>;
  let secret: Awaited<ReturnType<typeof recordingServer>>;
  let logLines: string[] = [];
  const defaults = loadConfig({});
  let http: VendorHttp = createVendorHttp(defaults);
  /**
   * The worker's connections under another FETCH_ALLOW_HOSTS / FETCH_ALLOW_PRIVATE, for the contexts made from now on.
   */
  const setFetchPolicy = (policy: FetchPolicy) => {
    void http.close();
    http = createVendorHttp({
      ...defaults,
      fetchAllowHosts: [...policy.allowHosts],
      fetchAllowPrivate: policy.allowPrivate,
    });
  };

  const ctx = (signal = new AbortController().signal): CallContext => ({
    requestId: 'req_guarded',
    signal,
    channel: { vendor: 'openai', baseUrl: `${vendor.url}/v1`, apiKey: 'sk-channel-key' },
    upstreamModel: 'dall-e-2',
    model: catalog.get('dall-e-2')!,
    log: pino({ level: 'warn' }, { write: (line: string) => void logLines.push(line) }),
    http,
  });
  const expectUnsafe = async (promise: Promise<unknown>) => {
    const error = await gatewayError(promise);
    assert.equal(error.status, 502);
    assert.equal(error.type, 'server_error');
    assert.equal(error.code, 'unsafe_vendor_url');
    assert.equal(error.retryable, false);
    return error;
  };
  const tooLarge = () => new GatewayError(502, 'too large', { type: 'server_error', code: 'too_large' });

  before(async () => {
    vendor = await recordingServer((path, res) => {
      const secretPort = new URL(secret.url).port;
      if (path === '/image.png') return void res.writeHead(200, { 'content-type': 'image/png' }).end('png-bytes');
      if (path === '/to-secret') return void res.writeHead(302, { location: `${secret.url}/token` }).end();
      if (path === '/to-localhost')
        return void res.writeHead(302, { location: `http://localhost:${secretPort}/token` }).end();
      if (path === '/to-file') return void res.writeHead(302, { location: 'file:///etc/passwd' }).end();
      if (path === '/loop') return void res.writeHead(302, { location: '/loop' }).end();
      if (path === '/big-declared')
        return void res.writeHead(200, { 'content-length': String(8192) }).end(Buffer.alloc(8192));
      if (path === '/big-chunked') {
        res.writeHead(200);
        for (let i = 0; i < 8; i += 1) res.write(Buffer.alloc(1024));
        return void res.end();
      }
      if (path === '/drip') {
        // A byte every 50 ms keeps every idle timeout happy; only a total deadline ends it.
        res.writeHead(200);
        void (async () => {
          while (!pauses.closed && !res.destroyed) {
            res.write('x');
            await pauses.wait(50);
          }
        })();
        return;
      }
      if (path === '/silent') return; // never answers
      res.writeHead(404).end();
    });
    secret = await recordingServer((_path, res) => void res.writeHead(200).end('the secret'));
  });
  afterEach(() => {
    setFetchPolicy({ allowHosts: [], allowPrivate: false });
    vendor.hits.length = 0;
    secret.hits.length = 0;
    logLines = [];
  });
  after(async () => {
    pauses.close();
    await http.close();
    await Promise.all([closeServer(vendor.server), closeServer(secret.server)]);
  });

  it("fetches from the channel's own origin, loopback or not, with the credentials", async () => {
    const response = await guardedGet(`${vendor.url}/image.png`, ctx(), {
      credentials: { authorization: 'Bearer sk-channel-key' },
    });
    assert.equal(response.status, 200);
    assert.equal(await response.body.text(), 'png-bytes');
    assert.equal(vendor.hits[0]!.headers.authorization, 'Bearer sk-channel-key');
  });

  it('refuses an IP literal on another origin of the same loopback host, before connecting', async () => {
    await expectUnsafe(guardedGet(`${secret.url}/token?signature=s3cr3t`, ctx()));
    assert.equal(secret.hits.length, 0);
    const logged = logLines.join('');
    assert.match(logged, /refused to fetch a URL the vendor sent/);
    assert.ok(logged.includes(secret.url), logged);
    assert.ok(!logged.includes('s3cr3t') && !logged.includes('/token'), 'no path or query in the log');
  });

  it('refuses a host name that resolves to loopback', async () => {
    const error = await expectUnsafe(guardedGet(`http://localhost:${new URL(secret.url).port}/token`, ctx()));
    assert.ok(error.cause instanceof UnsafeAddressError);
    assert.equal(error.cause.host, 'localhost', 'refused by the lookup, after resolution');
    assert.equal(error.cause.category, 'loopback');
    assert.equal(secret.hits.length, 0);
  });

  it('refuses loopback, metadata and private IP literals in every spelling', async () => {
    const port = new URL(secret.url).port;
    for (const host of [
      '127.0.0.1',
      '2130706433',
      '0x7f.1',
      '[::1]',
      '[::ffff:127.0.0.1]',
      '0.0.0.0',
      '169.254.169.254',
      '10.0.0.1',
      '[fd00::1]',
    ]) {
      const error = await expectUnsafe(guardedGet(`http://${host}:${port}/token`, ctx()));
      assert.ok(error.cause instanceof UnsafeAddressError, host);
    }
    assert.equal(secret.hits.length, 0);
  });

  it('refuses schemes other than http and https', async () => {
    for (const url of [
      'file:///etc/passwd',
      'ftp://example.com/a.png',
      'gopher://127.0.0.1:6379/_INFO',
      'data:image/png;base64,AAAA',
      'not a url',
    ]) {
      await expectUnsafe(guardedGet(url, ctx()));
    }
  });

  it('checks every redirect: from the channel origin to loopback, to a loopback name, to file:', async () => {
    for (const path of ['/to-secret', '/to-localhost', '/to-file']) {
      const error = await expectUnsafe(guardedGet(`${vendor.url}${path}`, ctx(), { credentials: { 'x-key': 'k' } }));
      if (path !== '/to-file') assert.ok(error.cause instanceof UnsafeAddressError, path);
    }
    assert.equal(vendor.hits.length, 3);
    assert.equal(secret.hits.length, 0);
  });

  it('leaves the credentials behind when a redirect leaves the channel origin', async () => {
    setFetchPolicy({ allowHosts: ['localhost'], allowPrivate: false });
    const response = await guardedGet(`${vendor.url}/to-localhost`, ctx(), {
      headers: { accept: 'image/*' },
      credentials: { 'x-key': 'bfl-key' },
    });
    assert.equal(await response.body.text(), 'the secret');
    assert.equal(vendor.hits[0]!.headers['x-key'], 'bfl-key');
    assert.equal(secret.hits.length, 1);
    assert.equal(secret.hits[0]!.headers['x-key'], undefined);
    assert.equal(secret.hits[0]!.headers.accept, 'image/*');
  });

  it('stops after a few redirects', async () => {
    const error = await gatewayError(guardedGet(`${vendor.url}/loop`, ctx(), { maxRedirects: 3 }));
    assert.equal(error.status, 502);
    assert.equal(error.retryable, false);
    assert.equal(vendor.hits.length, 4);
  });

  it('fetches what the operator allowed: a listed range, or anything with FETCH_ALLOW_PRIVATE', async () => {
    setFetchPolicy({ allowHosts: ['127.0.0.0/8'], allowPrivate: false });
    assert.equal(await (await guardedGet(`${secret.url}/a`, ctx())).body.text(), 'the secret');
    setFetchPolicy({ allowHosts: ['images.internal', '*.corp.example'], allowPrivate: false });
    await expectUnsafe(guardedGet(`${secret.url}/b`, ctx()));
    setFetchPolicy({ allowHosts: [], allowPrivate: true });
    assert.equal(
      await (await guardedGet(`http://localhost:${new URL(secret.url).port}/c`, ctx())).body.text(),
      'the secret',
    );
    await expectUnsafe(guardedGet('file:///etc/passwd', ctx()));
    assert.equal(secret.hits.length, 2);
  });

  it('bounds the size: a declared length over the limit, and a body that grows past it', async () => {
    for (const path of ['/big-declared', '/big-chunked']) {
      const response = await guardedGet(`${vendor.url}${path}`, ctx());
      const error = await gatewayError(readBoundedBytes(response, 4096, ctx(), tooLarge));
      assert.equal(error.code, 'too_large', path);
    }
    const small = await guardedGet(`${vendor.url}/image.png`, ctx());
    assert.deepEqual(await readBoundedBytes(small, 4096, ctx(), tooLarge), Buffer.from('png-bytes'));
  });

  it('bounds the time: a total deadline over headers and body, not only idle gaps', async () => {
    for (const path of ['/silent', '/drip']) {
      const started = Date.now();
      const error = await gatewayError(
        (async () => {
          const response = await guardedGet(`${vendor.url}${path}`, ctx(), { timeoutMs: 300 });
          return readBoundedBytes(response, 1 << 20, ctx(), tooLarge);
        })(),
      );
      assert.equal(error.status, 504, path);
      assert.equal(error.code, 'vendor_timeout', path);
      assert.equal(error.retryable, true, path);
      assert.ok(Date.now() - started < 5000, `${path} took ${Date.now() - started} ms`);
    }
  });

  it("gives the caller's own abort reason, not a timeout", async () => {
    const controller = new AbortController();
    const pending = guardedGet(`${vendor.url}/silent`, ctx(controller.signal), { timeoutMs: 60_000 });
    const reason = new Error('client gone');
    setTimeout(() => controller.abort(reason), 50);
    await assert.rejects(pending, (error) => error === reason);
  });
});
