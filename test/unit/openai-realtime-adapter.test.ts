import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { pino } from 'pino';
import { GatewayError } from '../../shared/errors.js';
import { loadCatalog } from '../../shared/catalog.js';
import { loadConfig } from '../../shared/config.js';
import { openaiAdapter } from '../../workers/vendors/openai/index.js';
import {
  openAIRealtimeUrl,
  openOpenAIRealtime,
  type OpenAIRealtimeOptions,
} from '../../workers/vendors/openai/realtime.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';
import type {
  RealtimeOpenContext,
  RealtimeServerEvent,
  RealtimeVendorEvents,
  RealtimeVendorSession,
} from '../../workers/vendors/types.js';
import { gatewayError } from '../support/assertions.js';
import { startFakeOpenAIRealtime, type FakeOpenAIRealtime } from '../support/fake-openai-realtime.js';
import { closeServer, listenOnLoopback } from '../support/fake-server.js';
import { freePort } from '../support/redis-server.js';

/*
 * OpenAI's realtime adapter against the strict fake (and, for a vendor that misbehaves below the protocol, a raw
 * socket that completes the upgrade and then does only what it is told): the URL and key it opens with, events
 * relayed both ways untouched, every refusal at the upgrade mapped as the chat adapter maps an HTTP error, the
 * deadlines (opening, an unanswered ping, a close never answered, a vendor that stops reading) and the vendor's end.
 */

const log = pino({ level: 'silent' });
const http = createVendorHttp(loadConfig({}));
const model = loadCatalog().get('gpt-realtime')!;

function context(baseUrl: string, apiKey: string, extra: Partial<RealtimeOpenContext> = {}): RealtimeOpenContext {
  return {
    sessionId: 'sess_test',
    channel: { vendor: 'openai', baseUrl, apiKey },
    upstreamModel: 'gpt-realtime',
    model,
    clientModel: 'gpt-realtime',
    log,
    http,
    signal: new AbortController().signal,
    connectTimeoutMs: 5_000,
    ...extra,
  };
}

interface Recorder extends RealtimeVendorEvents {
  events: RealtimeServerEvent[];
  ends: Array<{ code: number; reason: string; error?: GatewayError }>;
  /** The next event of `type` not yet taken. */
  next(type: string): Promise<RealtimeServerEvent>;
  ended(): Promise<{ code: number; reason: string; error?: GatewayError }>;
}

function recorder(): Recorder {
  const taken = new Set<RealtimeServerEvent>();
  let wake: (() => void) | undefined;
  const poke = () => {
    wake?.();
    wake = undefined;
  };
  const waitFor = async <T>(find: () => T | undefined, what: string): Promise<T> => {
    const until = Date.now() + 10_000;
    for (;;) {
      const found = find();
      if (found !== undefined) return found;
      if (Date.now() > until) throw new Error(`no ${what}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 200);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  };
  const self: Recorder = {
    events: [],
    ends: [],
    event(event) {
      assert.equal(self.ends.length, 0, 'no event after closed');
      self.events.push(event);
      poke();
    },
    closed(end) {
      self.ends.push(end);
      poke();
    },
    next(type) {
      return waitFor(() => {
        const found = self.events.find((event) => event.type === type && !taken.has(event));
        if (found) taken.add(found);
        return found;
      }, `${type} event`);
    },
    ended() {
      return waitFor(() => self.ends[0], 'end');
    },
  };
  return self;
}

/** Frames text as a server (unmasked) WebSocket text frame. */
function textFrame(text: string): Buffer {
  const payload = Buffer.from(text);
  const length = payload.length;
  const head = length < 126 ? Buffer.from([0x81, length]) : Buffer.from([0x81, 126, length >> 8, length & 0xff]);
  return Buffer.concat([head, payload]);
}

/**
 * A vendor below the protocol: it completes the upgrade, sends the frames it is told, and never answers a ping or a
 * close frame; `read: false` stops it reading what it is sent.
 */
async function startRawVendor(options: { greet?: string[]; read?: boolean } = {}) {
  const sockets: Socket[] = [];
  const server: Server = createServer();
  server.on('upgrade', (request, socket: Socket) => {
    sockets.push(socket);
    socket.on('error', () => {});
    const accept = createHash('sha1')
      .update(`${String(request.headers['sec-websocket-key'])}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
      .digest('base64');
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ` +
        `${accept}\r\n\r\n`,
    );
    for (const text of options.greet ?? []) socket.write(textFrame(text));
    // What the client sends is read and ignored (a close frame too), unless told not to read at all.
    if (options.read !== false) socket.resume();
    // The http server keeps a socket half open: its end follows the client's.
    socket.once('end', () => socket.end());
  });
  const port = await listenOnLoopback(server);
  return {
    url: `http://127.0.0.1:${port}/v1`,
    sockets,
    send: (text: string) => sockets.at(-1)!.write(textFrame(text)),
    close: () => {
      for (const socket of sockets) socket.destroy();
      return closeServer(server);
    },
  };
}

const sessionCreated = JSON.stringify({
  type: 'session.created',
  event_id: 'event_1',
  session: { type: 'realtime', object: 'realtime.session', id: 'sess_raw', model: 'gpt-realtime' },
});

describe('OpenAI realtime adapter', () => {
  let fake: FakeOpenAIRealtime;
  const open: RealtimeVendorSession[] = [];
  const start = async (
    events: RealtimeVendorEvents,
    extra: Partial<RealtimeOpenContext> = {},
    options?: OpenAIRealtimeOptions,
  ) => {
    const session = await openOpenAIRealtime(context(fake.url, fake.key, extra), events, options);
    open.push(session);
    return session;
  };

  before(async () => {
    fake = await startFakeOpenAIRealtime();
  });
  after(async () => {
    for (const session of open) session.close();
    await fake.close();
    await http.close();
  });

  it('builds the realtime URL from the channel base URL', () => {
    assert.equal(
      openAIRealtimeUrl('https://api.openai.com/v1', 'gpt-realtime'),
      'wss://api.openai.com/v1/realtime?model=gpt-realtime',
    );
    assert.equal(
      openAIRealtimeUrl('http://127.0.0.1:9/v1/', 'gpt-realtime-mini'),
      'ws://127.0.0.1:9/v1/realtime?model=gpt-realtime-mini',
    );
    assert.equal(
      openAIRealtimeUrl('https://proxy.example/openai/v1?tenant=a', 'a b'),
      'wss://proxy.example/openai/v1/realtime?tenant=a&model=a+b',
    );
  });

  it('is the OpenAI adapter openRealtime', async () => {
    const events = recorder();
    const session = await openaiAdapter.openRealtime!(context(fake.url, fake.key), events);
    open.push(session);
    assert.equal(events.events[0]!.type, 'session.created');
  });

  it('opens with the channel key, resolves at session.created, and relays both ways untouched', async () => {
    const events = recorder();
    const session = await start(events, { upstreamModel: 'gpt-realtime-mini' });
    assert.deepEqual(
      events.events.map((event) => event.type),
      ['session.created'],
      'session.created arrives before the open resolves',
    );
    const vendor = fake.sessions.at(-1)!;
    assert.equal(vendor.model, 'gpt-realtime-mini');
    assert.equal(vendor.headers.authorization, `Bearer ${fake.key}`);
    assert.equal(fake.upgrades.at(-1)!.path, '/v1/realtime?model=gpt-realtime-mini');

    const sent = [
      {
        type: 'session.update',
        event_id: 'evt_a',
        session: { type: 'realtime', output_modalities: ['text'], instructions: 'Ünïcödé ✓' },
      },
      {
        type: 'conversation.item.create',
        item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi' }] },
      },
      { type: 'response.create' },
    ];
    for (const event of sent) session.send(event);
    await events.next('response.done');
    assert.deepEqual(vendor.received, sent, 'the client events as given');
    assert.deepEqual(events.events, vendor.sent, 'the vendor events as sent, in order');
    assert.deepEqual(fake.problems, []);
  });

  it('maps refusals at the upgrade as the chat adapter maps HTTP errors', async () => {
    const wrongKey = await gatewayError(openOpenAIRealtime(context(fake.url, 'sk-wrong-key-0123456789'), recorder()));
    assert.deepEqual([wrongKey.status, wrongKey.code, wrongKey.retryable], [502, 'vendor_auth_failed', false]);
    assert.doesNotMatch(
      JSON.stringify({ message: wrongKey.message, cause: wrongKey.cause }),
      /sk-wrong-key-0123456789/,
    );

    const unknown = await gatewayError(
      openOpenAIRealtime(context(fake.url, fake.key, { upstreamModel: 'gpt-nothing' }), recorder()),
    );
    assert.deepEqual([unknown.status, unknown.code], [404, 'model_not_found']);

    fake.refuseUpgrades({ status: 429, retryAfterSeconds: 7 });
    const limited = await gatewayError(openOpenAIRealtime(context(fake.url, fake.key), recorder()));
    assert.deepEqual(
      [limited.status, limited.type, limited.retryable, limited.retryAfterMs],
      [429, 'rate_limit_exceeded', true, 7000],
    );

    fake.refuseUpgrades({ status: 503, message: 'The engine is overloaded.' });
    const down = await gatewayError(openOpenAIRealtime(context(fake.url, fake.key), recorder()));
    assert.deepEqual([down.status, down.code, down.retryable], [502, 'vendor_error', true]);

    fake.refuseUpgrades({ status: 429, code: 'insufficient_quota', message: 'You exceeded your current quota.' });
    const quota = await gatewayError(openOpenAIRealtime(context(fake.url, fake.key), recorder()));
    assert.deepEqual([quota.status, quota.code, quota.retryable], [503, 'vendor_quota_exhausted', false]);
    fake.refuseUpgrades(undefined);

    fake.failAfterUpgrade({
      type: 'invalid_request_error',
      code: 'invalid_api_key',
      message: 'Incorrect API key provided.',
    });
    const afterUpgrade = await gatewayError(openOpenAIRealtime(context(fake.url, fake.key), recorder()));
    assert.deepEqual([afterUpgrade.status, afterUpgrade.code], [502, 'vendor_auth_failed']);
    fake.failAfterUpgrade(undefined);
  });

  it(
    'fails the open within its deadline when the vendor is unreachable, stalls the upgrade, or never says ' +
      'session.created',
    async () => {
      const unreachable = await gatewayError(
        openOpenAIRealtime(context(`http://127.0.0.1:${await freePort()}/v1`, fake.key), recorder()),
      );
      assert.deepEqual(
        [unreachable.status, unreachable.code, unreachable.retryable],
        [502, 'vendor_unreachable', true],
      );

      fake.stallUpgrades(true);
      try {
        const stalled = await gatewayError(
          openOpenAIRealtime(context(fake.url, fake.key, { connectTimeoutMs: 300 }), recorder()),
        );
        assert.deepEqual([stalled.status, stalled.code, stalled.retryable], [504, 'vendor_timeout', true]);
      } finally {
        fake.stallUpgrades(false);
      }

      const silent = await startRawVendor();
      try {
        const mute = await gatewayError(
          openOpenAIRealtime(context(silent.url, 'k', { connectTimeoutMs: 300 }), recorder()),
        );
        assert.deepEqual([mute.status, mute.code], [504, 'vendor_timeout']);
      } finally {
        await silent.close();
      }

      const chatty = await startRawVendor({ greet: [JSON.stringify({ type: 'conversation.created', event_id: 'e' })] });
      try {
        const wrong = await gatewayError(openOpenAIRealtime(context(chatty.url, 'k'), recorder()));
        assert.deepEqual([wrong.status, wrong.code], [502, 'vendor_bad_response']);
      } finally {
        await chatty.close();
      }
    },
  );

  it('gives up the open when its signal is aborted, before or during it', async () => {
    const reason = new Error('client gone');
    const before = new AbortController();
    before.abort(reason);
    await assert.rejects(
      openOpenAIRealtime(context(fake.url, fake.key, { signal: before.signal }), recorder()),
      (error) => error === reason,
    );

    fake.stallUpgrades(true);
    try {
      const during = new AbortController();
      const opening = openOpenAIRealtime(context(fake.url, fake.key, { signal: during.signal }), recorder());
      while (fake.upgrades.at(-1)?.status !== 0) await new Promise((resolve) => setTimeout(resolve, 10));
      during.abort(reason);
      await assert.rejects(opening, (error) => error === reason);
    } finally {
      fake.stallUpgrades(false);
    }
  });

  it("reports the vendor's end once: a normal close plainly, a failure with an error", async () => {
    const normal = recorder();
    await start(normal);
    fake.sessions.at(-1)!.kill(1000, 'done');
    assert.deepEqual(await normal.ended(), { code: 1000, reason: 'done' });

    const failed = recorder();
    await start(failed);
    fake.sessions.at(-1)!.kill(1011, 'internal');
    const end = await failed.ended();
    assert.equal(end.code, 1011);
    assert.ok(end.error instanceof GatewayError);
    assert.deepEqual([end.error.status, end.error.code], [502, 'vendor_error']);

    const dropped = recorder();
    const session = await start(dropped);
    fake.sessions.at(-1)!.kill();
    const lost = await dropped.ended();
    assert.equal(lost.code, 1011, 'a connection lost without a close frame is told as 1011');
    assert.equal(lost.error?.status, 502);
    session.send({ type: 'response.create' });
    session.close();
    assert.equal(dropped.ends.length, 1, 'said once');
  });

  it('closes on request once, without reporting it, and destroys a socket whose close is never answered', async () => {
    const events = recorder();
    const session = await start(events);
    const vendor = fake.sessions.at(-1)!;
    session.close();
    session.close();
    session.send({ type: 'response.create' });
    assert.deepEqual(await vendor.closed, { code: 1000, reason: '', by: 'client' });
    assert.equal(vendor.received.length, 0, 'nothing sent after the close');
    assert.equal(events.ends.length, 0, 'a close asked here is not reported');

    const raw = await startRawVendor({ greet: [sessionCreated] });
    try {
      const stuck = await openOpenAIRealtime(context(raw.url, 'k'), recorder(), { closeGraceMs: 100 });
      const gone = new Promise<void>((resolve) => raw.sockets[0]!.once('close', () => resolve()));
      stuck.close();
      await gone;
    } finally {
      await raw.close();
    }
  });

  it('ends a session whose vendor stops answering pings', async () => {
    const raw = await startRawVendor({ greet: [sessionCreated] });
    try {
      const events = recorder();
      await openOpenAIRealtime(context(raw.url, 'k'), events, { pingIntervalMs: 50 });
      const end = await events.ended();
      assert.equal(end.code, 1011);
      assert.deepEqual([end.error?.status, end.error?.code], [502, 'vendor_timeout']);
    } finally {
      await raw.close();
    }
  });

  it('ends a session whose vendor stops reading what it is sent', async () => {
    const raw = await startRawVendor({ greet: [sessionCreated], read: false });
    try {
      const events = recorder();
      const session = await openOpenAIRealtime(context(raw.url, 'k'), events, { maxBufferedBytes: 1024 * 1024 });
      const audio = Buffer.alloc(192 * 1024).toString('base64');
      for (let i = 0; i < 2_000 && events.ends.length === 0; i++)
        session.send({ type: 'input_audio_buffer.append', audio });
      const end = await events.ended();
      assert.deepEqual([end.code, end.error?.code], [1011, 'vendor_timeout']);
      assert.match(end.error!.message, /stopped reading/);
    } finally {
      await raw.close();
    }
  });

  it('drops a vendor frame that is not an event and relays the next', async () => {
    const raw = await startRawVendor({ greet: [sessionCreated] });
    try {
      const events = recorder();
      const session = await openOpenAIRealtime(context(raw.url, 'k'), events);
      raw.send('not json');
      raw.send('[1,2]');
      raw.send(JSON.stringify({ type: 'rate_limits.updated', event_id: 'e2', rate_limits: [] }));
      await events.next('rate_limits.updated');
      assert.deepEqual(
        events.events.map((event) => event.type),
        ['session.created', 'rate_limits.updated'],
      );
      session.close();
    } finally {
      await raw.close();
    }
  });
});
