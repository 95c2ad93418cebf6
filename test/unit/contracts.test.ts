import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import { AsyncJobFailure, decodeAsyncJobFailure, encodeAsyncJobFailure } from '../../shared/async-job-failure.js';
import { decodeReply, encodeReply } from '../../shared/reply.js';
import { loadCatalog } from '../../shared/catalog.js';
import { chatCompletionRequestSchema } from '../../shared/schemas/chat.js';
import { formatParam, toValidationError } from '../../api/http/request-body.js';
import { CancelRegistry } from '../../workers/cancel-registry.js';
import { ClientGoneError } from '../../workers/client-gone-error.js';
import { retryDelay } from '../../workers/failure-policy.js';
import { AnsweredFailure } from '../../workers/answered-failure.js';
import { UnrecoverableError } from 'bullmq';
import { isMockEnabled, resolveChannels } from '../../shared/vendors.js';

describe('reply wire format', () => {
  it('round-trips kind, id, sequence and a payload with newlines and spaces', () => {
    const payload = 'data: {"a": 1}\n\ndata: [DONE]\n\n';
    assert.deepEqual(decodeReply(encodeReply('chunk', 'req_1', 7, payload)), {
      kind: 'chunk',
      jobId: 'req_1',
      seq: 7,
      payload,
    });
    assert.equal(decodeReply('garbage'), undefined);
  });
});

describe('GatewayError', () => {
  it('renders the OpenAI error body and survives the trip over the reply channel', () => {
    const error = new GatewayError(429, 'slow down', { code: 'rate_limit_exceeded', headers: { 'retry-after': '2' } });
    assert.deepEqual(error.toBody(), {
      error: { message: 'slow down', type: 'rate_limit_exceeded', param: null, code: 'rate_limit_exceeded' },
    });
    const back = GatewayError.fromWire(JSON.parse(JSON.stringify(error.toWire())));
    assert.equal(back.status, 429);
    assert.deepEqual(back.headers, { 'retry-after': '2' });
    assert.deepEqual(back.toBody(), error.toBody());
  });
});

describe('failed jobs', () => {
  it("an async job's wire error travels as its failed reason, and only one of ours decodes", () => {
    const wire = new GatewayError(400, 'bad prompt', { code: 'content_policy', param: 'prompt' }).toWire();
    const failure = new AsyncJobFailure(wire);
    assert.ok(failure instanceof UnrecoverableError, 'BullMQ fails it for good');
    assert.equal(failure.message, encodeAsyncJobFailure(wire));
    assert.deepEqual(decodeAsyncJobFailure(failure.message), wire);
    for (const reason of [undefined, '', 'job stalled more than allowable limit', 'null', '{"error":{}}', '[1]']) {
      assert.equal(decodeAsyncJobFailure(reason), undefined, String(reason));
    }
  });

  it('a held failure and a client gone fail for good, with their message as the reason', () => {
    const answered = new AnsweredFailure(new GatewayError(404, 'no such model', { code: 'model_not_found' }).toWire());
    assert.ok(answered instanceof UnrecoverableError);
    assert.equal(answered.message, 'no such model');
    assert.equal(answered.wire.error.code, 'model_not_found');
    const gone = new ClientGoneError();
    assert.ok(gone instanceof UnrecoverableError);
    assert.match(gone.message, /client closed the connection/);
  });
});

describe('validation errors', () => {
  it('formats params the way OpenAI names them', () => {
    assert.equal(formatParam(['messages', 0, 'content', 1, 'image_url']), 'messages[0].content[1].image_url');
  });

  it('points into the union branch that got furthest', () => {
    const result = chatCompletionRequestSchema.safeParse({
      model: 'm',
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }],
    });
    assert.equal(result.success, false);
    const error = toValidationError(result.error!);
    assert.equal(error.status, 400);
    assert.equal(error.param, 'messages[0].content[0].image_url.url');
    assert.equal(error.code, 'missing_required_parameter');
  });
});

describe('config', () => {
  it('reads per-queue settings with a shared fallback', () => {
    const config = loadConfig({
      WORKER_CONCURRENCY: '8',
      WORKER_CONCURRENCY_EMBEDDINGS: '3',
      QUEUE_MAX_WAITING_CHAT: '5',
    });
    // The realtime queue's concurrency is REALTIME_SESSIONS_PER_WORKER's (sessions, not calls), not
    // WORKER_CONCURRENCY's.
    assert.deepEqual(config.concurrency, { chat: 8, embeddings: 3, image: 8, audio: 8, video: 8, realtime: 100 });
    assert.equal(config.maxWaiting.chat, 5);
    assert.equal(config.port, 8080);
  });

  it('refuses nonsense with a message naming the variable', () => {
    assert.throws(() => loadConfig({ PORT: 'eighty' }), /PORT must be an integer/);
    assert.throws(
      () => loadConfig({ WORKER_QUEUES: 'chat,video-ish' }),
      /WORKER_QUEUES names an unknown queue "video-ish"/,
    );
    assert.throws(() => loadConfig({ WORKER_CONCURRENCY_CHAT: '0' }), /WORKER_CONCURRENCY_CHAT/);
  });
});

describe('vendor configuration', () => {
  it('turns the mock on only when no real vendor has a key, unless told', () => {
    assert.equal(isMockEnabled(loadConfig({})), true);
    assert.equal(isMockEnabled(loadConfig({ OPENAI_API_KEY: 'sk-1' })), false);
    assert.equal(isMockEnabled(loadConfig({ OPENAI_API_KEY: 'sk-1', MOCK_VENDOR: 'on' })), true);
    assert.equal(isMockEnabled(loadConfig({ MOCK_VENDOR: 'off' })), false);
  });

  it('splits comma-separated keys into channels and trims base URLs', () => {
    const channels = resolveChannels(loadConfig({ DEEPSEEK_API_KEY: 'a, b', DEEPSEEK_BASE_URL: 'http://h/v1/' }));
    const list = channels.get('deepseek')!;
    assert.deepEqual(
      list.map(({ vendor, baseUrl, apiKey, weight }) => ({ vendor, baseUrl, apiKey, weight })),
      [
        { vendor: 'deepseek', baseUrl: 'http://h/v1', apiKey: 'a', weight: 1 },
        { vendor: 'deepseek', baseUrl: 'http://h/v1', apiKey: 'b', weight: 1 },
      ],
    );
    assert.notEqual(list[0]!.id, list[1]!.id);
    assert.match(list[0]!.id, /^deepseek:[0-9a-f]{12}$/, 'the id is a hash, not the key');
    assert.ok(list[0]!.quirks?.renameParams, 'vendor quirks travel with the channel');
    assert.equal(channels.has('mock'), false);
  });
});

describe('catalog', () => {
  it('has the starting models with lower-case owners and at least one route each', () => {
    const catalog = loadCatalog();
    for (const id of [
      'gpt-4o-mini',
      'gpt-3.5-turbo-instruct',
      'text-embedding-3-small',
      'deepseek-chat',
      'grok-3',
      'mock-chat',
    ]) {
      assert.ok(catalog.get(id), id);
    }
    for (const model of catalog.all()) assert.equal(model.owned_by, model.owned_by.toLowerCase());
  });
});

describe('retry delay', () => {
  const config = loadConfig({ RETRY_BASE_MS: '100' });
  it("honours the vendor's retry-after", () => {
    assert.equal(retryDelay(config, 0, new GatewayError(429, 'x', { retryAfterMs: 1234 })), 1234);
  });
  it('grows exponentially with jitter in [ceiling/2, ceiling]', () => {
    for (let attempt = 0; attempt < 4; attempt++) {
      const ceiling = 100 * 2 ** attempt;
      for (let i = 0; i < 50; i++) {
        const delay = retryDelay(config, attempt, new GatewayError(503, 'x'));
        assert.ok(delay >= ceiling / 2 && delay <= ceiling, `${delay} for attempt ${attempt}`);
      }
    }
  });
});

describe('cancel registry', () => {
  it('aborts a running call, and remembers a cancel that came before its job started', () => {
    const registry = new CancelRegistry();
    const running = registry.start('a');
    registry.cancel('a');
    assert.ok(running.signal.aborted);
    assert.ok(running.signal.reason instanceof ClientGoneError);
    registry.cancel('b');
    assert.ok(registry.start('b').signal.aborted);
    assert.equal(registry.start('c').signal.aborted, false);
  });
});
