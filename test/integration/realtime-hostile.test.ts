import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import WebSocket from 'ws';
import { loadCatalog } from '../../shared/catalog.js';
import { readBill } from '../../shared/money/billing.js';
import { PriceList } from '../../shared/money/pricing.js';
import { realtimeResponseWorstCaseMicros } from '../../shared/money/realtime.js';
import { freshRedis, paidAccountKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';

/*
 * The Realtime API as an attacker tries it, against one gateway on the mock: the upgrade in odd spellings and with
 * odd queries, keys in two places, handshakes sent slowly or half-closed, bursts of upgrades from one key, frames of
 * every wrong kind and size, ping floods, a mock conversation fed a client's own usage note, and accounts whose
 * balance covers one response. Each upgrade goes out byte for byte on a raw socket where a client library would tidy
 * it; every refusal is an HTTP status in OpenAI's shape, every session that ends gives its key's count back.
 */

const pricing = {
  input_per_1m: 4,
  cached_input_per_1m: 0.4,
  output_per_1m: 16,
  audio_input_per_1m: 32,
  audio_output_per_1m: 64,
};
const catalog = loadCatalog(undefined);
const prices = new PriceList(catalog.all(), { overrides: { 'mock-realtime': pricing } });
const worst = realtimeResponseWorstCaseMicros(prices, catalog.get('mock-realtime')!);
const pricingFile = join(mkdtempSync(join(tmpdir(), 'sy-rt-hostile-')), 'prices.json');
writeFileSync(pricingFile, JSON.stringify({ models: { 'mock-realtime': pricing } }));

const perKey = 3;
const wsKey = 'dGhlIHNhbXBsZSBub25jZQ==';

/** An upgrade request as its bytes: the path as given, the key's Authorization unless `auth` says otherwise. */
function upgradeText(path: string, key: string, extra: Record<string, string> = {}, method = 'GET'): string {
  const headers = {
    Host: 'gateway',
    Connection: 'Upgrade',
    Upgrade: 'websocket',
    'Sec-WebSocket-Version': '13',
    'Sec-WebSocket-Key': wsKey,
    Authorization: `Bearer ${key}`,
    ...extra,
  };
  return `${method} ${path} HTTP/1.1\r\n${Object.entries(headers)
    .filter(([, value]) => value !== '')
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('')}\r\n`;
}

interface RawAnswer {
  status: number;
  body: string;
}

/**
 * Sends `chunks` on a raw socket (each after `gapMs`), and reads the answer's status line and body: a 101 is taken
 * as soon as its head arrives (the socket then closed with a close frame's worth of politeness: none, it is cut).
 * `halfClose` ends the socket's writing side once everything is sent.
 */
function rawUpgrade(
  port: number,
  chunks: Array<string | Buffer>,
  options: { gapMs?: number; halfClose?: boolean } = {},
): Promise<RawAnswer & { raw: string }> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let got = '';
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      socket.destroy();
      const [head = '', body = ''] = got.split('\r\n\r\n');
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0), body, raw: got });
    };
    socket.on('data', (data) => {
      got += data.toString('latin1');
      const head = got.indexOf('\r\n\r\n');
      if (head < 0) return;
      if (got.startsWith('HTTP/1.1 101')) return finish();
      const length = Number(/content-length: (\d+)/i.exec(got.slice(0, head))?.[1] ?? -1);
      if (length >= 0 && Buffer.byteLength(got.slice(head + 4), 'latin1') >= length) finish();
    });
    socket.on('close', finish);
    socket.on('error', () => undefined);
    let at = 0;
    const next = () => {
      if (done) return;
      if (at >= chunks.length) {
        if (options.halfClose) socket.end();
        return;
      }
      socket.write(chunks[at++]!);
      if (options.gapMs) setTimeout(next, options.gapMs);
      else next();
    };
    next();
  });
}

function errorOf(answer: RawAnswer): { message: string; type: string; param: string | null; code: string | null } {
  const parsed = JSON.parse(answer.body) as {
    error: { message: string; type: string; param: string | null; code: string | null };
  };
  assert.deepEqual(Object.keys(parsed.error).sort(), ['code', 'message', 'param', 'type'], answer.body);
  return parsed.error;
}

interface Client {
  ws: WebSocket;
  events: Array<Record<string, unknown> & { type: string }>;
  closed: Promise<{ code: number; reason: string }>;
}

/** A ws client's session, or the refusal's status and error code. */
function open(port: number, key: string, protocols?: string[]): Promise<Client> {
  return new Promise((resolve, reject) => {
    const url = `ws://127.0.0.1:${port}/v1/realtime?model=mock-realtime`;
    const ws = protocols
      ? new WebSocket(url, protocols)
      : new WebSocket(url, { headers: { authorization: `Bearer ${key}` } });
    const events: Client['events'] = [];
    const closed = new Promise<{ code: number; reason: string }>((done) =>
      ws.once('close', (code, reason) => done({ code, reason: reason.toString() })),
    );
    ws.on('message', (data) => events.push(JSON.parse(data.toString()) as Client['events'][number]));
    ws.on('error', () => undefined);
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () =>
        reject(
          Object.assign(new Error(`refused ${res.statusCode}`), {
            status: res.statusCode,
            code: (JSON.parse(body) as { error: { code: string } }).error.code,
          }),
        ),
      );
    });
    ws.once('open', () => resolve({ ws, events, closed }));
  });
}

async function nextEvent(client: Client, type: string, from = 0): Promise<Record<string, unknown>> {
  let found: Record<string, unknown> | undefined;
  await waitFor(
    () => (found = client.events.slice(from).find((event) => event.type === type)) !== undefined,
    15_000,
    `a ${type} event`,
  );
  return found!;
}

/** The key holds no session here any more: as many as its cap open at once again (each then closed). */
async function countGivenBack(port: number, key: string): Promise<void> {
  await waitFor(
    async () => {
      const opened = await Promise.allSettled(Array.from({ length: perKey }, () => open(port, key)));
      const clients = opened.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
      for (const client of clients) client.ws.close();
      await Promise.all(clients.map((client) => client.closed));
      return clients.length === perKey;
    },
    15_000,
    "the key's sessions given back",
  );
}

describe('the Realtime API under attack', () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let port: number;
  let key: string;

  before(async () => {
    const fresh = await freshRedis(11);
    redis = fresh.redis;
    // The workers in their own process, as npm start runs them on two cores: an attacker's megabytes cross Redis from
    // the api holding the socket to the worker holding the session, each on its own event loop.
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        WORKER_PROCESS: 'on',
        MOCK_VENDOR: 'on',
        PRICING_FILE: pricingFile,
        HEADERS_TIMEOUT_MS: '1500',
        MAX_REALTIME_SESSIONS_PER_KEY: String(perKey),
        REALTIME_START_WAIT_MS: '15000',
      },
    });
    port = Number(new URL(gateway.url).port);
    key = (await paidAccountKey(redis, 'unlimited')).key;
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it(
    'path spellings: slashes, dot segments, escapes and a trailing slash reach the session; another case and an ' +
      'escaped slash are 404',
    async () => {
      // `//%5B/../` was taken by a URL parser for a host it could not parse: a 500 before the mend.
      for (const path of [
        '/v1/realtime',
        '//v1/realtime',
        '/v1//realtime',
        '/v1/./realtime',
        '/x/../v1/realtime',
        '/v1/%72ealtime',
        '/v1/realtime/',
        '//%5B/../v1/realtime',
      ]) {
        const answer = await rawUpgrade(port, [upgradeText(`${path}?model=mock-realtime`, key)]);
        assert.equal(answer.status, 101, `${path}: ${answer.raw.slice(0, 300)}`);
      }
      for (const path of [
        '/V1/Realtime',
        '/v1/REALTIME',
        '/v1%2Frealtime',
        '/v1/realtime/x',
        'http://gateway/v1/realtime',
      ]) {
        const answer = await rawUpgrade(port, [upgradeText(`${path}?model=mock-realtime`, key)]);
        assert.equal(answer.status, 404, `${path}: ${answer.raw.slice(0, 300)}`);
        assert.equal(errorOf(answer).code, 'unknown_url');
      }
      await countGivenBack(port, key);
    },
  );

  it(
    "the query's model: twice, empty, with a NUL or past 256 characters is a 400 naming `model`; a malformed " +
      'escape is an unknown model; a huge query a 431',
    async () => {
      const cases: Array<[string, number, string]> = [
        ['model=mock-realtime&model=gpt-realtime', 400, 'invalid_value'],
        ['model=nope&model=mock-realtime', 400, 'invalid_value'],
        ['model=', 400, 'missing_required_parameter'],
        ['modelx=mock-realtime', 400, 'missing_required_parameter'],
        ['model=mock%00realtime', 400, 'invalid_value'],
        [`model=${'m'.repeat(300)}`, 400, 'invalid_value'],
        ['model=%E0%A4%A', 404, 'model_not_found'],
        ['model=mock-chat', 400, 'model_not_supported'],
      ];
      for (const [query, status, code] of cases) {
        const answer = await rawUpgrade(port, [upgradeText(`/v1/realtime?${query}`, key)]);
        assert.equal(answer.status, status, `${query.slice(0, 60)}: ${answer.raw.slice(0, 300)}`);
        const error = errorOf(answer);
        assert.equal(error.code, code, query.slice(0, 60));
        assert.ok(error.message.length < 400, 'the error does not echo a huge name');
        if (status === 400) assert.equal(error.param, 'model');
      }
      const huge = await rawUpgrade(port, [
        upgradeText(`/v1/realtime?model=mock-realtime&pad=${'a'.repeat(20_000)}`, key),
      ]);
      assert.equal(huge.status, 431);
      assert.equal(errorOf(huge).code, 'request_header_too_large');
    },
  );

  it('handshakes: no Upgrade, no key, version 12, a POST, junk subprotocols; a key in both places is the header’s', async () => {
    const path = '/v1/realtime?model=mock-realtime';
    const refused: Array<[string, string, number, string]> = [
      ['no Sec-WebSocket-Key', upgradeText(path, key, { 'Sec-WebSocket-Key': '' }), 400, 'invalid_upgrade'],
      ['version 12', upgradeText(path, key, { 'Sec-WebSocket-Version': '12' }), 400, 'invalid_upgrade'],
      ['Upgrade: h2c', upgradeText(path, key, { Upgrade: 'h2c' }), 400, 'invalid_upgrade'],
      ['POST', upgradeText(path, key, { 'Content-Length': '5' }, 'POST') + 'hello', 405, 'method_not_allowed'],
      [
        'junk subprotocol',
        upgradeText(path, key, { 'Sec-WebSocket-Protocol': 'realtime, , x y' }),
        400,
        'invalid_upgrade',
      ],
      [
        'wrong header, right subprotocol',
        upgradeText(path, 'sk-wrong', { 'Sec-WebSocket-Protocol': `realtime, openai-insecure-api-key.${key}` }),
        401,
        'invalid_api_key',
      ],
      [
        'a malformed header, right subprotocol',
        upgradeText(path, key, {
          Authorization: 'Basic abc',
          'Sec-WebSocket-Protocol': `realtime, openai-insecure-api-key.${key}`,
        }),
        401,
        'invalid_api_key',
      ],
    ];
    for (const [what, text, status, code] of refused) {
      const answer = await rawUpgrade(port, [text]);
      assert.equal(answer.status, status, `${what}: ${answer.raw.slice(0, 300)}`);
      assert.equal(errorOf(answer).code, code, what);
    }
    // No Upgrade header at all is a plain GET: 426, saying the Realtime API is a WebSocket.
    const plain = await rawUpgrade(port, [
      `GET ${path} HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\nAuthorization: Bearer ${key}\r\n\r\n`,
    ]);
    assert.equal(plain.status, 426, plain.raw.slice(0, 300));
    assert.equal(errorOf(plain).code, 'upgrade_required');
    assert.match(plain.raw, /\r\nupgrade: websocket\r\n/i);
    // The Authorization header decides; a wrong key in the subprotocol beside a right header is ignored.
    const both = await rawUpgrade(port, [
      upgradeText(path, key, { 'Sec-WebSocket-Protocol': 'realtime, openai-insecure-api-key.sk-wrong' }),
    ]);
    assert.equal(both.status, 101, both.raw.slice(0, 300));
    assert.match(both.raw, /sec-websocket-protocol: realtime/i);
    await countGivenBack(port, key);
  });

  it('a handshake sent byte by byte is cut at HEADERS_TIMEOUT_MS with a 408, nothing started', async () => {
    const bytes = [...Buffer.from(upgradeText('/v1/realtime?model=mock-realtime', key))].map((byte) =>
      Buffer.from([byte]),
    );
    const answer = await rawUpgrade(port, bytes, { gapMs: 100 });
    assert.equal(answer.status, 408, answer.raw.slice(0, 300));
    assert.equal(errorOf(answer).code, 'request_timeout');
    await countGivenBack(port, key);
  });

  it('a client that half-closes during the start is let go without an answer, and its key’s count is given back', async () => {
    // Before the mend the wait never ended: ws refused the half-closed socket without calling back, and the key
    // held one session for ever.
    for (let i = 0; i < perKey + 1; i++) {
      const answer = await rawUpgrade(port, [upgradeText('/v1/realtime?model=mock-realtime', key)], {
        halfClose: true,
      });
      assert.ok(answer.status === 0 || answer.status === 101, `answered ${answer.raw.slice(0, 200)}`);
    }
    await countGivenBack(port, key);
  });

  it(
    'a burst of 100 upgrades from one key: MAX_REALTIME_SESSIONS_PER_KEY open, the rest 429 too_many_sessions, ' +
      'then the count comes back',
    async () => {
      const { key: burstKey } = await paidAccountKey(redis, 'unlimited');
      const results = await Promise.allSettled(Array.from({ length: 100 }, () => open(port, burstKey)));
      const clients = results.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
      const refusals = results.flatMap((result) =>
        result.status === 'rejected' ? [result.reason as { status: number; code: string }] : [],
      );
      assert.equal(clients.length, perKey);
      assert.equal(refusals.length, 100 - perKey);
      for (const refusal of refusals) assert.deepEqual([refusal.status, refusal.code], [429, 'too_many_sessions']);
      for (const client of clients) client.ws.close();
      await Promise.all(clients.map((client) => client.closed));
      await countGivenBack(port, burstKey);
    },
  );

  it(
    'frames of every wrong kind get error events in the spec’s shape, unknown types too (from the mock), and the ' +
      'session lives on',
    async () => {
      const client = await open(port, key);
      await nextEvent(client, 'session.created');
      client.ws.send(Buffer.from([1, 2, 3]), { binary: true });
      client.ws.send('not json');
      client.ws.send('[{"type":"session.update"}]');
      client.ws.send('"session.update"');
      client.ws.send(JSON.stringify({ type: 5, event_id: 'evt_num_type' }));
      client.ws.send(JSON.stringify({ type: '' }));
      client.ws.send(JSON.stringify({ type: 'bogus.event', event_id: 'evt_bogus' }));
      client.ws.send(JSON.stringify({ type: 'response.cancel', event_id: { not: 'an id' } }));
      client.ws.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: 'A'.repeat(1024 * 1024) }));
      await waitFor(
        () => client.events.filter((event) => event.type === 'error').length === 9,
        15_000,
        'nine error events',
      );
      const errors = client.events.filter((event) => event.type === 'error') as unknown as Array<{
        error: { type: string; code: string; param: string | null; event_id: string | null };
      }>;
      for (const error of errors) assertMatchesSchema('RealtimeServerEventError', error, 'a refused frame');
      const byCode = errors.map((error) => [error.error.code, error.error.event_id]);
      assert.deepEqual(byCode.filter(([code]) => code === 'invalid_json').length, 4, JSON.stringify(byCode));
      assert.deepEqual(
        byCode.filter(([code]) => code === 'missing_required_parameter'),
        [
          ['missing_required_parameter', 'evt_num_type'],
          ['missing_required_parameter', null],
        ],
      );
      assert.deepEqual(
        byCode.find(([code]) => code === 'event_too_large'),
        ['event_too_large', null],
      );
      // The mock answers what OpenAI answers: an unknown type and a cancel without a response are errors; an id that
      // is not a string is not echoed.
      assert.deepEqual(
        byCode.find(([, id]) => id === 'evt_bogus'),
        ['invalid_value', 'evt_bogus'],
      );
      assert.deepEqual(
        byCode.find(([code]) => code === 'response_cancel_not_active'),
        ['response_cancel_not_active', null],
      );
      const mark = client.events.length;
      client.ws.send(
        JSON.stringify({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'] } }),
      );
      await nextEvent(client, 'session.updated', mark);
      client.ws.close();
      await client.closed;
    },
  );

  it(
    'a 3 MiB frame, and a fragmented message past twice the cap, close the socket with 1009; the key’s count comes ' +
      'back',
    async () => {
      const big = await open(port, key);
      await nextEvent(big, 'session.created');
      big.ws.send('y'.repeat(3 * 1024 * 1024));
      assert.equal((await big.closed).code, 1009);
      const fragmented = await open(port, key);
      await nextEvent(fragmented, 'session.created');
      const piece = 'a'.repeat(512 * 1024);
      fragmented.ws.send('{"type":"x","pad":"', { fin: false });
      for (let i = 0; i < 5; i++) fragmented.ws.send(piece, { fin: false });
      fragmented.ws.send('"}', { fin: true });
      assert.equal((await fragmented.closed).code, 1009);
      await countGivenBack(port, key);
    },
  );

  it('1,000 frames in a burst: a rate_limit_exceeded error a second, the rest dropped, the session answers after', async () => {
    const client = await open(port, key);
    await nextEvent(client, 'session.created');
    for (let i = 0; i < 1000; i++) client.ws.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: 'AAAA' }));
    const error = (await nextEvent(client, 'error')) as { error: { code: string } };
    assert.equal(error.error.code, 'rate_limit_exceeded');
    await waitFor(
      async () => {
        const mark = client.events.length;
        client.ws.send(JSON.stringify({ type: 'input_audio_buffer.clear' }));
        await new Promise((resolve) => setTimeout(resolve, 300));
        return client.events.slice(mark).some((event) => event.type === 'input_audio_buffer.cleared');
      },
      15_000,
      'the session answering after the burst',
    );
    // One error a second of the burst (it may straddle a second's turn), never one per dropped frame.
    const limited = client.events.filter(
      (event) => event.type === 'error' && (event.error as { code: string }).code === 'rate_limit_exceeded',
    ).length;
    assert.ok(limited >= 1 && limited <= 3, `${limited} rate_limit_exceeded errors`);
    client.ws.close();
    await client.closed;
  });

  it('a ping flood from a client that does not read ends its socket, and the key’s count comes back', async () => {
    const client = await open(port, key);
    await nextEvent(client, 'session.created');
    const socket = (client.ws as unknown as { _socket: import('node:net').Socket })._socket;
    socket.pause();
    for (let i = 0; i < 20_000; i++) client.ws.ping('p'.repeat(100));
    const closed = await client.closed;
    assert.equal(closed.code, 1006);
    await countGivenBack(port, key);
  });

  it('the mock takes no usage from a client: an item carrying `audio_ms` bills no audio it never heard', async () => {
    const client = await open(port, key);
    await nextEvent(client, 'session.created');
    client.ws.send(
      JSON.stringify({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'] } }),
    );
    client.ws.send(
      JSON.stringify({
        type: 'conversation.item.create',
        item: { type: 'message', role: 'user', audio_ms: 1e12, content: [{ type: 'input_text', text: 'hello' }] },
      }),
    );
    client.ws.send(JSON.stringify({ type: 'response.create' }));
    const done = (await nextEvent(client, 'response.done')) as {
      response: { usage: { input_token_details: { audio_tokens: number }; input_tokens: number } };
    };
    assert.equal(done.response.usage.input_token_details.audio_tokens, 0);
    assert.ok(done.response.usage.input_tokens < 100, `input tokens ${done.response.usage.input_tokens}`);
    const added = client.events.find((event) => event.type === 'conversation.item.added') as unknown as {
      item: Record<string, unknown>;
    };
    assert.equal(added.item.audio_ms, undefined);
    client.ws.close();
    await client.closed;
  });

  it(
    'the mock keeps its conversation to the context window: twenty items of half a megabyte, then a response reads ' +
      'at most the window',
    async () => {
      const client = await open(port, key);
      await nextEvent(client, 'session.created');
      client.ws.send(
        JSON.stringify({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'] } }),
      );
      const text = 'lorem ipsum dolor sit amet '.repeat(20_000);
      for (let i = 0; i < 20; i++)
        client.ws.send(
          JSON.stringify({
            type: 'conversation.item.create',
            item: { type: 'message', role: 'user', content: [{ type: 'input_text', text }] },
          }),
        );
      client.ws.send(
        JSON.stringify({
          type: 'conversation.item.create',
          item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'and a short one' }] },
        }),
      );
      client.ws.send(JSON.stringify({ type: 'response.create' }));
      const done = (await nextEvent(client, 'response.done')) as { response: { usage: { input_tokens: number } } };
      assert.ok(
        done.response.usage.input_tokens <= catalog.get('mock-realtime')!.context_window,
        `input tokens ${done.response.usage.input_tokens}`,
      );
      client.ws.close();
      await client.closed;
    },
  );

  it(
    'a balance that covers exactly one response: of six upgrades at once one opens, the rest are 429s, nothing ' +
      'overspent',
    async () => {
      const { key: poorKey, account } = await paidAccountKey(redis, worst);
      const results = await Promise.allSettled(Array.from({ length: 6 }, () => open(port, poorKey)));
      const clients = results.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
      const refusals = results.flatMap((result) =>
        result.status === 'rejected' ? [result.reason as { status: number; code: string }] : [],
      );
      // The key's cap counts three of them in at a time; of those the balance reserves for one. An upgrade the balance
      // refused gives its count back at once, so one arriving after that is counted in (and refused by the balance)
      // rather than refused by the cap: at least two balance refusals, the rest either.
      assert.equal(clients.length, 1);
      const codes = refusals.map((refusal) => `${refusal.status} ${refusal.code}`);
      assert.equal(codes.length, 5, codes.join(', '));
      assert.ok(
        codes.every((code) => code === '429 insufficient_quota' || code === '429 too_many_sessions'),
        codes.join(', '),
      );
      assert.ok(codes.filter((code) => code === '429 insufficient_quota').length >= 2, codes.join(', '));
      const held = await readBill(redis, account);
      assert.deepEqual([held!.balanceMicros, held!.reservedMicros], [worst, worst]);
      clients[0]!.ws.close();
      await clients[0]!.closed;
      await waitFor(
        async () => (await readBill(redis, account))!.reservedMicros === 0,
        15_000,
        'the reservation given back',
      );
      assert.equal((await readBill(redis, account))!.balanceMicros, worst, 'nothing billed: no response ran');
    },
  );
});
