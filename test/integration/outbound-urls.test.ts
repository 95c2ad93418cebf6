import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { startFakeAnthropic, type FakeAnthropic } from '../support/fake-anthropic.js';
import { startFakeBfl, type FakeBfl } from '../support/fake-bfl.js';
import { createFakeOpenAIImages } from '../support/fake-openai-images.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { closeServer, listenOnLoopback } from '../support/fake-server.js';
import { createKey, freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';

const SECRET = 'internal-only-token-7f3a';
const pngSignature = '89504e470d0a1a0a';

/**
 * URLs a vendor answers with are fetched by the worker; a vendor (or whoever
 * controls its base URL) must not be able to point them into the worker's
 * own network. Every fake runs on 127.0.0.1: the channel's configured origin
 * is trusted, a different port of the same loopback host is not.
 */
describe('URLs the gateway fetches on a vendor’s word', () => {
  let openai: FakeOpenAI;
  let bfl: FakeBfl;
  let anthropic: FakeAnthropic;
  let redis: Redis;
  let gateway: GatewayProcess;
  let client: OpenAI;
  /** Stands for anything only the worker's network reaches: a metadata service, an admin port. */
  const secret = { server: createServer(), url: '', hits: [] as Array<{ path: string; headers: IncomingHttpHeaders }> };
  const images = createFakeOpenAIImages();
  const imagePosts = () =>
    openai.requests.filter((request) => request.method === 'POST' && request.path.endsWith('/images/generations'));

  before(async () => {
    secret.server.on('request', (req, res) => {
      secret.hits.push({ path: req.url ?? '/', headers: req.headers });
      res.writeHead(200, { 'content-type': 'image/png' }).end(SECRET);
    });
    secret.url = `http://127.0.0.1:${await listenOnLoopback(secret.server)}`;
    [openai, bfl, anthropic] = await Promise.all([
      startFakeOpenAI(),
      startFakeBfl({ pollingOrigin: secret.url }),
      startFakeAnthropic(),
    ]);
    const fresh = await freshRedis(14);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: 'sk-openai-channel',
        OPENAI_BASE_URL: openai.url,
        BFL_API_KEY: 'bfl-channel-key',
        BFL_BASE_URL: bfl.url,
        ANTHROPIC_API_KEY: 'sk-ant-channel',
        ANTHROPIC_BASE_URL: anthropic.url,
        MOCK_VENDOR: 'on',
        BFL_POLL_INTERVAL_MS: '20',
        RETRY_BASE_MS: '20',
        CHANNEL_FAILURE_THRESHOLD: '100',
      },
    });
    client = gateway.client((await createKey(redis)).key, { timeout: 30_000 });
  });

  beforeEach(() => {
    openai.reset();
    openai.setDefault(images);
    bfl.reset();
    anthropic.reset();
    secret.hits.length = 0;
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), bfl?.close(), anthropic?.close(), closeServer(secret.server)]);
    redis?.disconnect();
  });

  it('still downloads an image URL on the vendor’s own origin', async () => {
    const origin = openai.url.replace(/\/v1$/, '');
    openai.enqueue({ json: { created: 1, data: [{ url: `${origin}/fake-images/0.png` }] } });
    const result = await client.images.generate({
      model: 'dall-e-2',
      prompt: 'a fox',
      size: '256x256',
      response_format: 'b64_json',
    });
    assert.equal(Buffer.from(result.data![0]!.b64_json!, 'base64').subarray(0, 8).toString('hex'), pngSignature);
  });

  it(
    'refuses an image URL on another loopback origin: an OpenAI error, not retried, the other server never ' +
      'contacted',
    async () => {
      // Every attempt gets the same URL, so a retry would show up as a second vendor call.
      openai.setDefault((request) =>
        request.method === 'POST'
          ? { json: { created: 1, data: [{ url: `${secret.url}/latest/meta-data/iam?token=abc` }] } }
          : images(request),
      );
      const error = await client.images
        .generate({ model: 'dall-e-2', prompt: 'a fox', size: '256x256', response_format: 'b64_json' })
        .then(
          (result) => assert.fail(`expected a refusal, got ${JSON.stringify(result).slice(0, 200)}`),
          (caught: unknown) => caught,
        );
      assert.ok(error instanceof OpenAI.APIError, String(error));
      assert.equal(error.status, 502);
      assert.deepEqual(error.error, {
        message: 'The upstream vendor answered with a URL the gateway does not fetch.',
        type: 'server_error',
        param: null,
        code: 'unsafe_vendor_url',
      });
      assert.equal(secret.hits.length, 0, 'the internal server was contacted');
      assert.equal(imagePosts().length, 1, 'a refused URL is not retried');
      const logged = gateway.logs.filter((line) => line.includes('refused to fetch a URL the vendor sent'));
      assert.equal(logged.length, 1, gateway.logs.slice(-20).join('\n'));
      assert.ok(
        logged[0]!.includes(secret.url) &&
          !logged[0]!.includes('token=abc') &&
          !logged[0]!.includes('sk-openai-channel'),
        logged[0],
      );
    },
  );

  it('does not follow a BFL polling URL on another origin: the key stays home, the job still completes', async () => {
    const result = await client.images.generate({
      model: 'flux-pro-1.1',
      prompt: 'a lighthouse',
      size: '1024x768',
      response_format: 'b64_json',
    });
    assert.equal(Buffer.from(result.data![0]!.b64_json!, 'base64').subarray(0, 8).toString('hex'), pngSignature);
    assert.ok(bfl.polls > 0, 'polled the channel’s own get_result instead');
    assert.equal(secret.hits.length, 0);
  });

  it('refuses a BFL sample URL on another origin: an OpenAI error, the other server never contacted', async () => {
    bfl.failPolls({
      status: 200,
      json: { id: 'task', status: 'Ready', result: { sample: `${secret.url}/samples/task.png` } },
    });
    const error = await client.images
      .generate({ model: 'flux-pro-1.1', prompt: 'a lighthouse', size: '1024x768', response_format: 'b64_json' })
      .then(
        () => assert.fail('expected a refusal'),
        (caught: unknown) => caught,
      );
    assert.ok(error instanceof OpenAI.APIError, String(error));
    assert.equal(error.status, 502);
    assert.equal(error.code, 'unsafe_vendor_url');
    assert.equal(error.type, 'server_error');
    assert.equal(secret.hits.length, 0);
    assert.equal(bfl.submissions, 1);
    assert.equal(bfl.polls, 1, 'a refused URL is not retried');
  });

  for (const model of ['mock-chat', 'gpt-4o-mini', 'claude-opus-4-5']) {
    it(`refuses a file:// image part at the api for ${model}, naming the param`, async () => {
      for (const url of ['file:///etc/passwd', 'FILE:///etc/passwd', 'ftp://127.0.0.1/passwd']) {
        const error = await client.chat.completions
          .create({
            model,
            messages: [
              {
                role: 'user',
                content: [
                  { type: 'text', text: 'describe this' },
                  { type: 'image_url', image_url: { url } },
                ],
              },
            ],
          })
          .then(
            (result) => assert.fail(`expected a 400 for ${url}, got ${JSON.stringify(result).slice(0, 200)}`),
            (caught: unknown) => caught,
          );
        assert.ok(error instanceof OpenAI.BadRequestError, `${url}: ${String(error)}`);
        assert.equal(error.param, 'messages[0].content[1].image_url.url', url);
        assert.equal(error.type, 'invalid_request_error');
      }
      assert.equal(openai.requests.length, 0, 'no vendor saw the request');
      assert.equal(anthropic.requests.length, 0, 'no vendor saw the request');
    });
  }

  it('still takes http(s), data: and gs:// image parts', async () => {
    const png =
      'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';
    for (const url of ['https://example.com/cat.png', png, 'gs://bucket/cat.png']) {
      const result = await client.chat.completions.create({
        model: 'mock-chat',
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'describe this' },
              { type: 'image_url', image_url: { url } },
            ],
          },
        ],
      });
      assert.equal(result.object, 'chat.completion', url.slice(0, 30));
    }
  });
});
