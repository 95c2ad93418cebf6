import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import WebSocket from 'ws';
import { billKey } from '../../shared/redis-keys.js';
import {
  decodeRealtime,
  encodeRealtime,
  realtimeClockMs,
  realtimeDownChannel,
  realtimeUpChannel,
  type RealtimeClose,
  type RealtimeJobData,
} from '../../shared/realtime.js';
import { freshRedis, paidAccountKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';

/*
 * The Realtime API's api side (api/realtime/), against an api process of its own (`--role=api`): every refusal is an
 * HTTP status at the upgrade, seen by a raw ws client's `unexpected-response`, never a socket opened then closed; a
 * start no worker takes is a 503 that leaves no job behind. Then the sessions, with a worker of the test's own in
 * place of the gateway's: a real BullMQ consumer of the `realtime` queue speaking the session protocol of
 * shared/realtime.ts over the same Redis (started, refused, events with stamps, beats, close), scripted by the client
 * events it receives, and recording everything that came up. What the api does with each client frame, each server
 * event, a silent worker, an idle client, a client that does not read and a shutdown is observed on both ends.
 */

const model = 'switchyard-test-realtime';
const refusingModel = 'switchyard-test-realtime-refused';
const limits = {
  REALTIME_START_WAIT_MS: '1500',
  REALTIME_MAX_FRAME_BYTES: '2048',
  REALTIME_MAX_FRAMES_PER_SECOND: '20',
  REALTIME_IDLE_MS: '8000',
  MAX_REALTIME_SESSIONS_PER_KEY: '3',
};

function catalogFile(): string {
  const dir = mkdtempSync(join(tmpdir(), 'realtime-upgrade-'));
  const entry = (id: string) => ({
    id,
    owned_by: 'mock',
    capability: 'realtime',
    created: 1735689600,
    context_window: 32000,
    max_output_tokens: 4096,
    input_modalities: ['text', 'audio'],
    supports_tools: true,
    routes: [{ vendor: 'mock', model: 'mock-realtime' }],
    pricing: {
      input_per_1m: 4,
      cached_input_per_1m: 0.4,
      output_per_1m: 16,
      audio_input_per_1m: 32,
      cached_audio_input_per_1m: 0.4,
      audio_output_per_1m: 64,
    },
  });
  const file = join(dir, 'catalog.json');
  writeFileSync(file, JSON.stringify({ models: [entry(model), entry(refusingModel)] }));
  return file;
}

interface Refusal {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: { error: { message: string; type: string; param: string | null; code: string | null } };
}

/** Opens a raw ws client; resolves with the refusal it got (or rejects when the upgrade succeeded). */
function refusal(
  url: string,
  options: { headers?: Record<string, string>; protocols?: string[] } = {},
): Promise<Refusal> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, options.protocols ?? [], { headers: options.headers ?? {} });
    ws.on('open', () => {
      ws.terminate();
      reject(new Error('the upgrade succeeded where a refusal was expected'));
    });
    ws.on('error', () => {});
    ws.on('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: JSON.parse(text) as Refusal['body'] });
      });
    });
  });
}

function assertOpenAIError(answer: Refusal, status: number, code: string): void {
  assert.equal(answer.status, status, JSON.stringify(answer.body));
  assert.deepEqual(Object.keys(answer.body.error).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(answer.body.error.code, code);
  assert.match(String(answer.headers['x-request-id']), /^sess_[0-9a-f]{24}$/);
}

/** A client socket that collects what it receives. */
interface Client {
  ws: WebSocket;
  events: Array<Record<string, unknown>>;
  closed: Promise<{ code: number; reason: string }>;
  next(type: string, from?: number): Promise<Record<string, unknown>>;
}

function openClient(url: string, key: string, protocols?: string[]): Promise<Client> {
  return new Promise((resolve, reject) => {
    const ws = protocols
      ? new WebSocket(url, protocols)
      : new WebSocket(url, { headers: { authorization: `Bearer ${key}` } });
    const events: Array<Record<string, unknown>> = [];
    const closed = new Promise<{ code: number; reason: string }>((done) =>
      ws.once('close', (code, reason) => done({ code, reason: reason.toString() })),
    );
    ws.on('message', (data) => events.push(JSON.parse(data.toString()) as Record<string, unknown>));
    ws.on('error', () => {});
    ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
    ws.once('open', () =>
      resolve({
        ws,
        events,
        closed,
        next: async (type, from = 0) => {
          let found: Record<string, unknown> | undefined;
          await waitFor(
            () => (found = events.slice(from).find((event) => event.type === type)) !== undefined,
            15_000,
            `a ${type} event`,
          );
          return found!;
        },
      }),
    );
  });
}

/** What the test's worker saw of one session. */
interface SeenSession {
  data: RealtimeJobData;
  up: Array<{ kind: string; stampMs?: number; payload: string }>;
  closedUp?: RealtimeClose;
}

/**
 * The test's worker: takes sessions off the `realtime` queue, starts them (or refuses those of `refusingModel`), and
 * answers each client event by its type: `test.echo` → a `test.echoed` event carrying the raw text it got;
 * `test.close` → a `close` with the event's code and error; `test.silence` → no beat nor event any more;
 * `test.flood` → `count` events of `bytes` each; `test.raw` → the event's `raw` text sent down as is.
 */
class TestWorker {
  readonly seen = new Map<string, SeenSession>();
  private readonly worker: Worker;
  private readonly sub: Redis;
  private readonly pub: Redis;
  private readonly connection: Redis;

  constructor(url: string) {
    this.sub = new Redis(url);
    this.pub = new Redis(url);
    this.connection = new Redis(url, { maxRetriesPerRequest: null });
    this.worker = new Worker('{realtime}', (job) => this.run(job), { connection: this.connection, concurrency: 50 });
  }

  private async run(job: Job): Promise<void> {
    const data = job.data as RealtimeJobData;
    const id = data.jobId;
    const seen: SeenSession = { data, up: [] };
    this.seen.set(id, seen);
    const down = (kind: 'started' | 'refused' | 'event' | 'close' | 'beat', payload = '', stamp?: number) =>
      void this.pub.publish(realtimeDownChannel(id), encodeRealtime(kind, payload, stamp));
    if (data.model === refusingModel) {
      down(
        'refused',
        JSON.stringify({
          status: 503,
          headers: { 'retry-after': '2' },
          error: {
            message: 'The vendor has no session free.',
            type: 'server_error',
            param: null,
            code: 'vendor_unavailable',
          },
        }),
      );
      return;
    }
    let silent = false;
    await new Promise<void>((done) => {
      const channel = realtimeUpChannel(id);
      const beat = setInterval(() => !silent && down('beat'), 1000);
      const end = () => {
        clearInterval(beat);
        this.sub.off('message', onMessage);
        void this.sub.unsubscribe(channel);
        done();
      };
      const onMessage = (from: string, raw: string) => {
        if (from !== channel) return;
        const message = decodeRealtime(raw)!;
        seen.up.push(message);
        if (message.kind === 'close') {
          seen.closedUp = JSON.parse(message.payload) as RealtimeClose;
          return end();
        }
        if (message.kind !== 'event' || silent) return;
        const event = JSON.parse(message.payload) as Record<string, unknown>;
        const send = (value: Record<string, unknown>) =>
          down('event', JSON.stringify({ event_id: `event_t${seen.up.length}`, ...value }), realtimeClockMs());
        if (event.type === 'test.echo') send({ type: 'test.echoed', raw: message.payload });
        else if (event.type === 'test.close') {
          down(
            'close',
            JSON.stringify({
              code: event.code,
              reason: 'the test worker ended it',
              ...(event.error ? { error: event.error } : {}),
            }),
          );
          end();
        } else if (event.type === 'test.silence') silent = true;
        else if (event.type === 'test.flood')
          for (let i = 0; i < (event.count as number); i++)
            send({ type: 'test.flood', i, fill: 'x'.repeat(event.bytes as number) });
        else if (event.type === 'test.raw') down('event', event.raw as string, realtimeClockMs());
      };
      this.sub.on('message', onMessage);
      void this.sub.subscribe(channel).then(() => {
        down('started', JSON.stringify({ worker: 'test-worker', vendor: 'mock' }));
        down(
          'event',
          JSON.stringify({
            type: 'session.created',
            event_id: 'event_t0',
            session: { type: 'realtime', object: 'realtime.session', id, model: data.clientModel },
          }),
          realtimeClockMs(),
        );
      });
    });
  }

  async close(): Promise<void> {
    await this.worker.close(true);
    this.sub.disconnect();
    this.pub.disconnect();
    this.connection.disconnect();
  }
}

describe('GET /v1/realtime: the api side', () => {
  let redis: Redis;
  let redisUrl: string;
  let gateway: GatewayProcess;
  let url: string;
  let queue: Queue;
  let key: string;

  before(async () => {
    const fresh = await freshRedis(7);
    redis = fresh.redis;
    redisUrl = fresh.url;
    gateway = await startGateway({
      role: 'api',
      env: { REDIS_URL: fresh.url, MOCK_VENDOR: 'on', CATALOG_FILE: catalogFile(), ...limits },
    });
    url = `${gateway.url.replace('http:', 'ws:')}/v1/realtime`;
    queue = new Queue('{realtime}', { connection: redis });
    key = (await paidAccountKey(redis, 'unlimited')).key;
  });

  after(async () => {
    await queue?.close();
    if (gateway && gateway.proc.exitCode === null) await gateway.stop();
    redis?.disconnect();
  });

  describe('refusals at the upgrade (no worker)', () => {
    it('401 without a key, with a wrong key, and with a wrong key in the browser subprotocol', async () => {
      assertOpenAIError(await refusal(`${url}?model=${model}`), 401, 'invalid_api_key');
      assertOpenAIError(
        await refusal(`${url}?model=${model}`, { headers: { authorization: 'Bearer sk-not-a-key' } }),
        401,
        'invalid_api_key',
      );
      assertOpenAIError(
        await refusal(`${url}?model=${model}`, { headers: { authorization: 'Basic abc' } }),
        401,
        'invalid_api_key',
      );
      const browser = await refusal(`${url}?model=${model}`, {
        protocols: ['realtime', 'openai-insecure-api-key.sk-not-a-key'],
      });
      assertOpenAIError(browser, 401, 'invalid_api_key');
      assert.equal(browser.body.error.type, 'invalid_request_error');
    });

    it('400 without a model, 404 for an unknown one, 400 for a model of another capability', async () => {
      const headers = { authorization: `Bearer ${key}` };
      const missing = await refusal(url, { headers });
      assertOpenAIError(missing, 400, 'missing_required_parameter');
      assert.equal(missing.body.error.param, 'model');
      assertOpenAIError(await refusal(`${url}?model=no-such-model`, { headers }), 404, 'model_not_found');
      const chat = await refusal(`${url}?model=mock-chat`, { headers });
      assertOpenAIError(chat, 400, 'model_not_supported');
      assert.match(chat.body.error.message, /chat model/);
    });

    it('403 for a key that may not use the model', async () => {
      const limited = await paidAccountKey(redis, 'unlimited', { models: ['mock-chat'] });
      const answer = await refusal(`${url}?model=${model}`, { headers: { authorization: `Bearer ${limited.key}` } });
      assertOpenAIError(answer, 403, 'model_not_allowed');
    });

    it('429 insufficient_quota for an account whose balance cannot cover a response', async () => {
      const broke = await paidAccountKey(redis, 0);
      const answer = await refusal(`${url}?model=${model}`, { headers: { authorization: `Bearer ${broke.key}` } });
      assertOpenAIError(answer, 429, 'insufficient_quota');
      assert.equal(answer.body.error.type, 'insufficient_quota');
      assert.equal(await queue.getJobCountByTypes('waiting', 'prioritized', 'active'), 0);
    });

    it('503 with retry-after when no worker starts the session in time, and neither job nor reservation is left', async () => {
      const paid = await paidAccountKey(redis, 50_000_000);
      const answer = await refusal(`${url}?model=${model}`, { headers: { authorization: `Bearer ${paid.key}` } });
      assertOpenAIError(answer, 503, 'overloaded');
      assert.equal(answer.headers['retry-after'], '1');
      const sessionId = String(answer.headers['x-request-id']);
      assert.equal(await queue.getJob(sessionId), undefined);
      assert.equal(await queue.getJobCountByTypes('waiting', 'prioritized', 'active', 'delayed'), 0);
      // What was reserved for the first response is given back.
      await waitFor(
        async () => Number((await redis.hget(billKey(paid.account), 'reserved')) ?? 0) === 0,
        5000,
        'the reservation released',
      );
    });

    it('429 rate_limit_exceeded with retry-after once the key has spent its requests per minute', async () => {
      const limited = await paidAccountKey(redis, 'unlimited', { rpm: 1 });
      const headers = { authorization: `Bearer ${limited.key}` };
      // The first start counts (no worker takes it: a 503); the second is over the rate.
      assertOpenAIError(await refusal(`${url}?model=${model}`, { headers }), 503, 'overloaded');
      const answer = await refusal(`${url}?model=${model}`, { headers });
      assertOpenAIError(answer, 429, 'rate_limit_exceeded');
      assert.ok(Number(answer.headers['retry-after']) >= 1);
      assert.equal(answer.headers['x-ratelimit-limit-requests'], '1');
      assert.equal(answer.headers['x-ratelimit-remaining-requests'], '0');
    });

    it('a client that leaves during the start has its session taken out of the queue', async () => {
      const ws = new WebSocket(`${url}?model=${model}`, { headers: { authorization: `Bearer ${key}` } });
      ws.on('error', () => {});
      await waitFor(
        async () => (await queue.getJobCountByTypes('prioritized', 'waiting')) === 1,
        5000,
        'the session queued',
      );
      ws.terminate();
      await waitFor(
        async () => (await queue.getJobCountByTypes('prioritized', 'waiting', 'active')) === 0,
        5000,
        'the session taken out',
      );
    });

    it('a malformed handshake is a 400 before anything starts', async () => {
      const { hostname, port } = new URL(gateway.url);
      const text = await new Promise<string>((resolve, reject) => {
        const socket = connect({ host: hostname, port: Number(port) });
        const chunks: Buffer[] = [];
        socket.on('data', (chunk: Buffer) => chunks.push(chunk));
        socket.on('error', reject);
        socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
        socket.write(
          `GET /v1/realtime?model=${model} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: ` +
            `websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: nonsense\r\nAuthorization: Bearer ` +
            `${key}\r\n\r\n`,
        );
      });
      assert.match(text, /^HTTP\/1\.1 400 /);
      assert.match(text, /"code":"invalid_upgrade"/);
    });
  });

  describe('sessions, with the test worker', () => {
    let worker: TestWorker;

    before(() => {
      worker = new TestWorker(redisUrl);
    });

    after(async () => {
      await worker?.close();
    });

    it(
      'the official SDK opens a session: session.created names the model as asked, events relay both ways, a close ' +
        'reaches the worker',
      async () => {
        const client = new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1` });
        const { port } = new URL(gateway.url);
        const rt = new OpenAIRealtimeWS(
          { model, options: { createConnection: () => connect(Number(port), '127.0.0.1') } },
          client,
        );
        const events: Array<Record<string, unknown>> = [];
        rt.on('event', (event) => events.push(event as unknown as Record<string, unknown>));
        rt.on('error', (error) => events.push({ type: 'sdk.error', message: error.message }));
        await new Promise<void>((resolve, reject) => {
          rt.socket.once('open', () => resolve());
          rt.socket.once('unexpected-response', (_req, res) => reject(new Error(`refused ${res.statusCode}`)));
        });
        await waitFor(() => events.some((event) => event.type === 'session.created'), 10_000, 'session.created');
        const created = events.find((event) => event.type === 'session.created') as {
          session: { model: string; id: string };
        };
        assert.equal(created.session.model, model);
        const seen = worker.seen.get(created.session.id)!;
        assert.equal(seen.data.clientModel, model);
        assert.equal(seen.data.endpoint, 'realtime');
        rt.send({ type: 'test.echo', event_id: 'evt_1' } as never);
        await waitFor(() => events.some((event) => event.type === 'test.echoed'), 10_000, 'the echo');
        // The client's frame went up untouched, stamped with when it arrived.
        const up = seen.up.find((message) => message.kind === 'event')!;
        assert.equal(up.payload, JSON.stringify({ type: 'test.echo', event_id: 'evt_1' }));
        assert.ok(typeof up.stampMs === 'number' && up.stampMs > 0);
        rt.close({ code: 1000, reason: 'done' });
        await waitFor(() => seen.closedUp !== undefined, 10_000, 'the close up');
        assert.equal(seen.closedUp!.code, 1000);
      },
    );

    it('the browser subprotocol authenticates, and `realtime` is answered back', async () => {
      const client = await openClient(`${url}?model=${model}`, key, ['realtime', `openai-insecure-api-key.${key}`]);
      assert.equal(client.ws.protocol, 'realtime');
      await client.next('session.created');
      client.ws.close();
      await client.closed;
    });

    it('a server event reaches the client byte for byte, and the 101 carries the session id', async () => {
      const headers = await new Promise<Record<string, string | string[] | undefined>>((resolve, reject) => {
        const ws = new WebSocket(`${url}?model=${model}`, { headers: { authorization: `Bearer ${key}` } });
        ws.once('upgrade', (res) => resolve(res.headers));
        ws.once('open', () => ws.close());
        ws.once('error', reject);
      });
      assert.match(String(headers['x-request-id']), /^sess_[0-9a-f]{24}$/);
      const client = await openClient(`${url}?model=${model}`, key);
      await client.next('session.created');
      const raw = '{ "type" : "test.raw.event",  "event_id":"event_x", "n": 1.50 }';
      const received = new Promise<string>((resolve) =>
        client.ws.on('message', (data) => data.toString().includes('test.raw.event') && resolve(data.toString())),
      );
      client.ws.send(JSON.stringify({ type: 'test.raw', raw }));
      assert.equal(await received, raw);
      client.ws.close();
      await client.closed;
    });

    it('bad frames get error events as OpenAI writes them, and the session lives on', async () => {
      const client = await openClient(`${url}?model=${model}`, key);
      await client.next('session.created');
      client.ws.send('not json');
      client.ws.send('[1,2]');
      client.ws.send(JSON.stringify({ event_id: 'evt_no_type' }));
      client.ws.send(Buffer.from([1, 2, 3]), { binary: true });
      await waitFor(
        () => client.events.filter((event) => event.type === 'error').length === 4,
        10_000,
        'four error events',
      );
      const errors = client.events.filter((event) => event.type === 'error') as Array<{
        error: { type: string; code: string; param: string | null; event_id: string | null };
      }>;
      for (const error of errors) {
        assertMatchesSchema('RealtimeServerEventError', error, 'a refused frame');
        assert.equal(error.error.type, 'invalid_request_error');
      }
      assert.deepEqual(
        errors.map((error) => error.error.code),
        ['invalid_json', 'invalid_json', 'missing_required_parameter', 'invalid_json'],
      );
      assert.equal(errors[2]!.error.param, 'type');
      assert.equal(errors[2]!.error.event_id, 'evt_no_type');
      client.ws.send(JSON.stringify({ type: 'test.echo' }));
      await client.next('test.echoed');
      client.ws.close();
      await client.closed;
    });

    it('a frame over REALTIME_MAX_FRAME_BYTES is refused and dropped; one past twice it closes the socket with 1009', async () => {
      const client = await openClient(`${url}?model=${model}`, key);
      const created = (await client.next('session.created')) as { session: { id: string } };
      client.ws.send(JSON.stringify({ type: 'test.echo', event_id: 'evt_big', pad: 'y'.repeat(3000) }));
      const error = (await client.next('error')) as { error: { code: string } };
      assert.equal(error.error.code, 'event_too_large');
      assertMatchesSchema('RealtimeServerEventError', error, 'a frame too large');
      client.ws.send(JSON.stringify({ type: 'test.echo', event_id: 'evt_small' }));
      const echoed = (await client.next('test.echoed')) as { raw: string };
      assert.match(echoed.raw, /evt_small/);
      // The large one never reached the worker.
      const seen = worker.seen.get(created.session.id)!;
      assert.ok(seen.up.every((message) => !message.payload.includes('evt_big')));
      client.ws.send('z'.repeat(5000));
      const closed = await client.closed;
      assert.equal(closed.code, 1009);
      await waitFor(() => seen.closedUp !== undefined, 10_000, 'the close up');
    });

    it('a burst past REALTIME_MAX_FRAMES_PER_SECOND: the rest of the second is dropped with an error event', async () => {
      const client = await openClient(`${url}?model=${model}`, key);
      const created = (await client.next('session.created')) as { session: { id: string } };
      for (let i = 0; i < 50; i++) client.ws.send(JSON.stringify({ type: 'test.note', event_id: `evt_${i}` }));
      const error = (await client.next('error')) as { error: { code: string } };
      assert.equal(error.error.code, 'rate_limit_exceeded');
      client.ws.send(JSON.stringify({ type: 'test.echo' }));
      // Past the second the frames go up again (a fresh window), the session alive.
      await waitFor(
        async () => {
          client.ws.send(JSON.stringify({ type: 'test.echo', event_id: 'evt_after' }));
          await new Promise((r) => setTimeout(r, 200));
          return client.events.some((event) => event.type === 'test.echoed');
        },
        10_000,
        'an echo after the burst',
      );
      const seen = worker.seen.get(created.session.id)!;
      const notes = seen.up.filter((message) => message.payload.includes('test.note')).length;
      // At most two windows' worth of the burst went up; the rest were dropped.
      assert.ok(notes >= 20 && notes <= 40, `notes relayed: ${notes}`);
      const errors = client.events.filter((event) => event.type === 'error').length;
      assert.ok(errors >= 1 && errors <= 2, `errors: ${errors}`);
      client.ws.close();
      await client.closed;
    });

    it("the worker's close: its error event first, then its code", async () => {
      const client = await openClient(`${url}?model=${model}`, key);
      await client.next('session.created');
      client.ws.send(
        JSON.stringify({
          type: 'test.close',
          code: 1000,
          error: {
            type: 'insufficient_quota',
            code: 'insufficient_quota',
            message: 'The balance cannot cover another response.',
          },
        }),
      );
      const closed = await client.closed;
      assert.equal(closed.code, 1000);
      const error = client.events.at(-1) as { type: string; error: { type: string; code: string } };
      assert.equal(error.type, 'error');
      assert.equal(error.error.code, 'insufficient_quota');
      assertMatchesSchema('RealtimeServerEventError', error, "the worker's close");
    });

    it('a worker gone silent ends the session with an error event and 1011, and is told', async () => {
      const client = await openClient(`${url}?model=${model}`, key);
      const created = (await client.next('session.created')) as { session: { id: string } };
      client.ws.send(JSON.stringify({ type: 'test.silence' }));
      const closed = await client.closed;
      assert.equal(closed.code, 1011);
      const error = client.events.at(-1) as { type: string; error: { type: string; code: string } };
      assert.equal(error.type, 'error');
      assert.equal(error.error.type, 'server_error');
      assert.equal(error.error.code, 'session_worker_lost');
      const seen = worker.seen.get(created.session.id)!;
      await waitFor(() => seen.closedUp !== undefined, 10_000, 'the close up');
      assert.equal(seen.closedUp!.code, 1011);
    });

    it('a start the worker refuses is that HTTP status at the upgrade', async () => {
      const answer = await refusal(`${url}?model=${refusingModel}`, { headers: { authorization: `Bearer ${key}` } });
      assertOpenAIError(answer, 503, 'vendor_unavailable');
      assert.equal(answer.headers['retry-after'], '2');
      assert.equal(answer.body.error.message, 'The vendor has no session free.');
    });

    it('MAX_REALTIME_SESSIONS_PER_KEY: one session more is a 429 too_many_sessions', async () => {
      const own = await paidAccountKey(redis, 'unlimited');
      const clients = await Promise.all([0, 1, 2].map(() => openClient(`${url}?model=${model}`, own.key)));
      const answer = await refusal(`${url}?model=${model}`, { headers: { authorization: `Bearer ${own.key}` } });
      assertOpenAIError(answer, 429, 'too_many_sessions');
      for (const client of clients) client.ws.close();
      await Promise.all(clients.map((client) => client.closed));
      // Closed, they are uncounted: a new one opens.
      const again = await openClient(`${url}?model=${model}`, own.key);
      again.ws.close();
      await again.closed;
    });

    it('a client that stops reading its events is closed (1008), its worker told, memory bounded', async () => {
      const client = await openClient(`${url}?model=${model}`, key);
      const created = (await client.next('session.created')) as { session: { id: string } };
      const socket = (client.ws as unknown as { _socket: import('node:net').Socket })._socket;
      socket.pause();
      client.ws.send(JSON.stringify({ type: 'test.flood', count: 120, bytes: 200_000 }));
      const seen = worker.seen.get(created.session.id)!;
      await waitFor(() => seen.closedUp !== undefined, 20_000, 'the close up');
      assert.equal(seen.closedUp!.code, 1008);
      socket.resume();
      client.ws.terminate();
    });

    it('an idle session is closed after REALTIME_IDLE_MS, and its worker told', async () => {
      const client = await openClient(`${url}?model=${model}`, key);
      const created = (await client.next('session.created')) as { session: { id: string } };
      const closed = await client.closed;
      assert.equal(closed.code, 1000);
      assert.match(closed.reason, /idle/);
      const seen = worker.seen.get(created.session.id)!;
      await waitFor(() => seen.closedUp !== undefined, 10_000, 'the close up');
      assert.equal(seen.closedUp!.code, 1000);
    });

    it('/metrics counts the sessions by vendor, the frames each way and the latency added down', async () => {
      const text = await (await fetch(`${gateway.url}/metrics`)).text();
      assert.match(text, /switchyard_realtime_client_sessions\{vendor="mock"\} \d+/);
      assert.match(text, /switchyard_realtime_client_frames_total\{direction="up"\} [1-9]/);
      assert.match(text, /switchyard_realtime_client_frames_total\{direction="down"\} [1-9]/);
      assert.match(text, /switchyard_realtime_relay_down_latency_seconds_count [1-9]/);
      assert.match(text, /switchyard_realtime_upgrades_refused_total\{status="401"\} [1-9]/);
    });

    it('an api shutting down closes its sessions with 1001 and tells their workers', async () => {
      const client = await openClient(`${url}?model=${model}`, key);
      const created = (await client.next('session.created')) as { session: { id: string } };
      const stopped = gateway.stop('SIGTERM');
      const closed = await client.closed;
      assert.equal(closed.code, 1001);
      const seen = worker.seen.get(created.session.id)!;
      await waitFor(() => seen.closedUp !== undefined, 10_000, 'the close up');
      assert.equal(seen.closedUp!.code, 1001);
      await stopped;
    });
  });
});

describe('GET /v1/realtime end to end: the gateway and its own worker on mock-realtime', () => {
  let redis: Redis;
  let gateway: GatewayProcess;

  before(async () => {
    const fresh = await freshRedis(8);
    redis = fresh.redis;
    gateway = await startGateway({ env: { REDIS_URL: fresh.url, MOCK_VENDOR: 'on' } });
  });

  after(async () => {
    if (gateway && gateway.proc.exitCode === null) await gateway.stop();
    redis?.disconnect();
  });

  it('the official SDK: session.created with the model as asked, a text response, a close', async () => {
    const { key } = await paidAccountKey(redis, 'unlimited');
    const client = new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1` });
    const { port } = new URL(gateway.url);
    const rt = new OpenAIRealtimeWS(
      { model: 'mock-realtime', options: { createConnection: () => connect(Number(port), '127.0.0.1') } },
      client,
    );
    const events: Array<Record<string, unknown>> = [];
    rt.on('event', (event) => events.push(event as unknown as Record<string, unknown>));
    rt.on('error', (error) => events.push({ type: 'sdk.error', message: error.message }));
    const closed = new Promise<number>((resolve) => rt.socket.once('close', (code) => resolve(code)));
    await new Promise<void>((resolve, reject) => {
      rt.socket.once('open', () => resolve());
      rt.socket.once('unexpected-response', (_req, res) => reject(new Error(`refused ${res.statusCode}`)));
    });
    await waitFor(() => events.some((event) => event.type === 'session.created'), 15_000, 'session.created');
    const created = events.find((event) => event.type === 'session.created') as { session: { model: string } };
    assert.equal(created.session.model, 'mock-realtime');
    rt.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'] } });
    rt.send({
      type: 'conversation.item.create',
      item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello there' }] },
    });
    rt.send({ type: 'response.create' });
    await waitFor(() => events.some((event) => event.type === 'response.done'), 15_000, 'response.done');
    const text = events
      .filter((event) => event.type === 'response.output_text.delta')
      .map((event) => event.delta as string)
      .join('');
    assert.match(text, /Hello there/);
    assert.ok(
      !events.some((event) => event.type === 'sdk.error' || event.type === 'error'),
      JSON.stringify(events.filter((event) => String(event.type).includes('error'))),
    );
    rt.close({ code: 1000, reason: 'done' });
    assert.equal(await closed, 1000);
  });
});
