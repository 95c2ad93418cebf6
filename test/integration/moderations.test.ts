import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { freshRedis, paidAccountKey, requestRecord, startGateway, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAIModerations, type FakeOpenAIModerations } from '../support/fake-openai-moderations.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';
import { readBill } from '../../shared/money/billing.js';
import { moderationCategories } from '../../shared/schemas/moderations.js';
import { countTextTokens } from '../../shared/tokens.js';

/*
 * `POST /v1/moderations` with the official `openai` SDK (`client.moderations.create`): on the offline mock (scores
 * a function of the text, categories flagged by its markers) and on OpenAI's omni and text models behind a fake
 * that serves the route strictly as the spec writes it; every body against the spec's `CreateModerationResponse`
 * and its exact fields; the refusals made before any vendor call (no input, an empty or too long list, an image to
 * a text model, two images, a chat model, an unknown one); a vendor's refusal and a malformed answer; the request
 * log's row with the counted tokens at no cost; the response cache.
 */

const cached = { headers: { 'cache-control': 'max-age=60' } };
type Refusal = { status: number; error: { message: string; type: string; param: string | null; code: string | null } };

describe('moderations', () => {
  let fake: FakeOpenAIModerations;
  let redis: Redis;
  let gateway: GatewayProcess;
  let key: string;
  let client: OpenAI;

  before(async () => {
    fake = await startFakeOpenAIModerations();
    const fresh = await freshRedis(9);
    redis = fresh.redis;
    ({ key } = await paidAccountKey(redis, 50_000_000));
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: 'sk-openai-test',
        OPENAI_BASE_URL: fake.url,
        // Anthropic's models are served too, so a moderation sent to one is refused by name.
        ANTHROPIC_API_KEY: 'sk-ant-test',
        ANTHROPIC_BASE_URL: 'http://127.0.0.1:9/v1',
        MOCK_VENDOR: 'on',
      },
    });
    client = gateway.client(key, { timeout: 30_000 });
  });
  after(async () => {
    await gateway?.stop();
    await fake?.close();
    redis?.disconnect();
  });

  /**
   * A body as OpenAI writes it: the schema's fields and no other, each result with every category in each of its three
   * maps.
   */
  function assertModeration(body: unknown, where: string, results: number): OpenAI.ModerationCreateResponse {
    assertMatchesSchema('CreateModerationResponse', body, where);
    const moderation = body as OpenAI.ModerationCreateResponse;
    assert.deepEqual(Object.keys(moderation).sort(), ['id', 'model', 'results'], where);
    assert.match(moderation.id, /^modr-[0-9a-f]{32}$/, where);
    assert.equal(moderation.results.length, results, where);
    for (const result of moderation.results) {
      assert.deepEqual(
        Object.keys(result).sort(),
        ['categories', 'category_applied_input_types', 'category_scores', 'flagged'],
        where,
      );
      for (const map of [result.categories, result.category_scores, result.category_applied_input_types]) {
        assert.deepEqual(Object.keys(map).sort(), [...moderationCategories].sort(), where);
      }
      assert.equal(
        result.flagged,
        Object.values(result.categories).some((flag) => flag === true),
        `${where}: flagged is any category`,
      );
    }
    return moderation;
  }

  const raw = (body: unknown, apiKey = key) =>
    fetch(`${gateway.url}/v1/moderations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  /** The error's own message, as the body says it (the SDK's `message` starts with the status). */
  const messageOf = (error: InstanceType<typeof OpenAI.APIError>) => (error.error as { message: string }).message;
  const refusalOf = async (response: Response): Promise<Refusal> => ({
    status: response.status,
    ...((await response.json()) as Omit<Refusal, 'status'>),
  });

  it('moderates on the mock, offline: a text, a list of texts (one result each), multi-modal parts (one result)', async () => {
    const one = assertModeration(
      await client.moderations.create({ model: 'mock-moderation', input: 'A quiet walk by the river.' }),
      'mock text',
      1,
    );
    assert.equal(one.model, 'mock-moderation');
    const calm = one.results[0]!;
    assert.equal(calm.flagged, false);
    assert.ok(
      Object.values(calm.category_scores).every((score) => score >= 0 && score < 0.02),
      JSON.stringify(calm.category_scores),
    );
    assert.ok(Object.values(calm.category_applied_input_types).every((types) => JSON.stringify(types) === '["text"]'));

    const list = assertModeration(
      await client.moderations.create({
        model: 'mock-moderation',
        input: [
          'A quiet walk by the river.',
          'A threat [mock:flag:violence] [mock:flag:harassment/threatening]',
          'Fine.',
        ],
      }),
      'mock list',
      3,
    );
    const [first, flagged, last] = list.results as [OpenAI.Moderation, OpenAI.Moderation, OpenAI.Moderation];
    assert.deepEqual(first, calm, 'the same text scores the same, whatever request it is in');
    assert.equal(flagged.flagged, true);
    assert.deepEqual(
      Object.entries(flagged.categories)
        .filter(([, flag]) => flag)
        .map(([name]) => name)
        .sort(),
      ['harassment/threatening', 'violence'],
    );
    assert.ok(flagged.category_scores.violence >= 0.9 && flagged.category_scores['harassment/threatening'] >= 0.9);
    assert.ok(flagged.category_scores.hate < 0.02);
    assert.equal(last.flagged, false);
    assert.notEqual(list.id, one.id, 'each request has its own id');

    const parts = assertModeration(
      await client.moderations.create({
        model: 'mock-moderation',
        input: [
          { type: 'text', text: 'A picture of a sunset [mock:flag:sexual]' },
          { type: 'image_url', image_url: { url: 'https://images.example/sunset.png' } },
        ],
      }),
      'mock parts',
      1,
    );
    const judged = parts.results[0]!;
    assert.equal(judged.categories.sexual, true);
    assert.deepEqual(judged.category_applied_input_types.sexual, ['text', 'image']);
    assert.deepEqual(judged.category_applied_input_types.hate, ['text'], 'hate is judged on text alone');

    const image = assertModeration(
      await client.moderations.create({
        model: 'mock-moderation',
        input: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } }],
      }),
      'mock image',
      1,
    );
    assert.deepEqual(image.results[0]!.category_applied_input_types.violence, ['image']);
    assert.deepEqual(
      image.results[0]!.category_applied_input_types.harassment,
      [],
      'a text-only category is judged on nothing',
    );
  });

  it(
    "moderates on OpenAI's models through the strict fake: the default model, the vendor's answer passed on, only " +
      "the spec's fields sent",
    async () => {
      fake.reset();
      // No model: OpenAI's default, omni-moderation-latest.
      const { data, response } = await client.moderations.create({ input: 'I will kill them all.' }).withResponse();
      const omni = assertModeration(data, 'openai default', 1);
      assert.equal(omni.model, 'omni-moderation-2024-09-26', "the vendor's own name for the model");
      assert.equal(omni.results[0]!.flagged, true);
      assert.equal(omni.results[0]!.categories.violence, true);
      assert.deepEqual(fake.requests[0]!.body, { model: 'omni-moderation-latest', input: 'I will kill them all.' });
      assert.equal(fake.requests[0]!.headers.authorization, 'Bearer sk-openai-test');

      // Fields the spec does not name stay here (the strict fake refuses any), and each part is sent with its own fields
      // alone.
      const parts = [
        { type: 'text', text: 'hello', note: 'mine' },
        { type: 'image_url', image_url: { url: 'https://images.example/a.png', detail: 'high' } },
      ];
      const sent = await raw({ model: 'omni-moderation-2024-09-26', input: parts, user: 'someone', stream: false });
      assert.equal(sent.status, 200, await sent.clone().text());
      assertModeration(await sent.json(), 'openai parts', 1);
      assert.deepEqual(fake.requests[1]!.body, {
        model: 'omni-moderation-2024-09-26',
        input: [
          { type: 'text', text: 'hello' },
          { type: 'image_url', image_url: { url: 'https://images.example/a.png' } },
        ],
      });

      // A text model: one result per text, `illicit` unjudged (null), as OpenAI answers it.
      const text = assertModeration(
        await client.moderations.create({ model: 'text-moderation-latest', input: ['kind words', 'kill'] }),
        'openai text model',
        2,
      );
      assert.equal(text.model, 'text-moderation-007');
      assert.deepEqual(
        text.results.map((result) => result.flagged),
        [false, true],
      );
      assert.equal(text.results[0]!.categories.illicit, null);
      assert.ok(response.headers.get('x-request-id'));
    },
  );

  it(
    'refuses before any vendor call: no input, an empty or too long list, a mixed list, a text past the context, ' +
      'an image to a text model, two images',
    async () => {
      fake.reset();
      const cases: Array<[unknown, number, string, string | null]> = [
        [{ model: 'omni-moderation-latest' }, 400, 'input', 'missing_required_parameter'],
        [{ input: [] }, 400, 'input', 'invalid_value'],
        [{ input: Array.from({ length: 33 }, (_, i) => `text ${i}`) }, 400, 'input', 'invalid_value'],
        [{ input: ['a', 2] }, 400, 'input[1]', 'invalid_type'],
        [{ input: 42 }, 400, 'input', 'invalid_type'],
        [{ input: [{ type: 'video', url: 'x' }] }, 400, 'input[0].type', 'invalid_value'],
        [
          { input: [{ type: 'image_url', image_url: { url: 'file:///etc/passwd' } }] },
          400,
          'input[0].image_url.url',
          'invalid_value',
        ],
        [{ input: 'x', model: null }, 400, 'model', 'invalid_type'],
        [{ input: 'x', model: 'a\u0000b' }, 400, 'model', 'invalid_value'],
        // Past the model's 32,768 tokens, in one text of a list.
        [{ input: ['short', 'hello '.repeat(40_000)] }, 400, 'input', 'context_length_exceeded'],
      ];
      for (const [body, status, param, code] of cases) {
        const refused = await refusalOf(await raw(body));
        assert.equal(refused.status, status, JSON.stringify([body, refused]));
        assert.deepEqual(
          [refused.error.type, refused.error.param, refused.error.code],
          ['invalid_request_error', param, code],
          JSON.stringify(body).slice(0, 200),
        );
      }
      const tooMany = await refusalOf(await raw({ input: Array.from({ length: 33 }, () => 'x') }));
      assert.match(tooMany.error.message, /maximum length 32/);

      const textOnly = await client.moderations
        .create({
          model: 'text-moderation-stable',
          input: [{ type: 'image_url', image_url: { url: 'https://images.example/a.png' } }],
        })
        .catch((error: unknown) => error);
      assert.ok(textOnly instanceof OpenAI.BadRequestError, String(textOnly));
      assert.deepEqual([textOnly.param, textOnly.code], ['input', 'unsupported_content_type']);
      assert.match(
        textOnly.message,
        /`text-moderation-stable` moderates text only; send images to .*omni-moderation-latest/,
      );

      const twoImages = await client.moderations
        .create({
          input: [
            { type: 'image_url', image_url: { url: 'https://images.example/a.png' } },
            { type: 'image_url', image_url: { url: 'https://images.example/b.png' } },
          ],
        })
        .catch((error: unknown) => error);
      assert.ok(twoImages instanceof OpenAI.BadRequestError, String(twoImages));
      assert.deepEqual(
        [twoImages.param, twoImages.code, messageOf(twoImages)],
        ['input', 'too_many_images', 'Number of images (2) exceeds maximum of 1.'],
      );
      assert.equal(fake.requests.length, 0, 'OpenAI was never called');
    },
  );

  it(
    "refuses another capability's model naming the models /v1/moderations serves, and an unknown model as the " +
      'catalog does',
    async () => {
      fake.reset();
      for (const model of ['gpt-4o-mini', 'claude-sonnet-4-5', 'text-embedding-3-small']) {
        const refused = await client.moderations.create({ model, input: 'hello' }).catch((error: unknown) => error);
        assert.ok(refused instanceof OpenAI.BadRequestError, `${model}: ${String(refused)}`);
        assert.deepEqual([refused.status, refused.param, refused.code], [400, 'model', 'model_not_supported']);
        assert.match(
          messageOf(refused),
          new RegExp(`^The model \`${model}\` is a \\w+ model and is not supported by /v1/moderations`),
        );
        const served = /\/v1\/moderations serves (.+)\.$/.exec(messageOf(refused))?.[1]?.split(', ').sort();
        assert.deepEqual(
          served,
          [
            'mock-moderation',
            'omni-moderation-2024-09-26',
            'omni-moderation-latest',
            'text-moderation-latest',
            'text-moderation-stable',
          ],
          refused.message,
        );
      }
      const unknown = await client.moderations
        .create({ model: 'llama-guard-4', input: 'hello' })
        .catch((error: unknown) => error);
      assert.ok(unknown instanceof OpenAI.NotFoundError, String(unknown));
      assert.equal(unknown.code, 'model_not_found');
      // A moderation model on another endpoint is refused there, pointing here.
      const embedded = await client.embeddings
        .create({ model: 'omni-moderation-latest', input: 'hello' })
        .catch((error: unknown) => error);
      assert.ok(embedded instanceof OpenAI.BadRequestError, String(embedded));
      assert.match(
        embedded.message,
        /is a moderation model and is not supported by \/v1\/embeddings; use \/v1\/moderations\./,
      );
      assert.equal(fake.requests.length, 0, 'OpenAI was never called');
    },
  );

  it("passes on OpenAI's refusal, and retries a malformed answer", async () => {
    fake.reset();
    fake.refuseNext(400, {
      message: 'The input could not be read.',
      type: 'invalid_request_error',
      param: 'input',
      code: 'invalid_input',
    });
    const refused = await client.moderations.create({ input: 'hello' }).catch((error: unknown) => error);
    assert.ok(refused instanceof OpenAI.BadRequestError, String(refused));
    assert.deepEqual([refused.param, refused.code], ['input', 'invalid_input']);
    assert.match(refused.message, /The input could not be read\./);
    assert.equal(fake.requests.length, 1, 'a refusal is not retried');

    fake.reset();
    fake.malformedNext();
    const retried = assertModeration(
      await client.moderations.create({ input: ['one', 'two'] }),
      'after a malformed answer',
      2,
    );
    assert.equal(retried.model, 'omni-moderation-2024-09-26');
    assert.equal(fake.requests.length, 2, 'the answer missing a result was tried again');
  });

  it("is counted (the texts' tokens) and logged as moderations, at no cost, on OpenAI and on the mock", async () => {
    const billed = await paidAccountKey(redis, 1_000_000);
    const own = gateway.client(billed.key, { timeout: 30_000 });
    const texts = ['The first text to judge, a little longer than the others.', 'The second.'];
    const tokens = texts.reduce((sum, text) => sum + countTextTokens(text), 0);

    const openai = await own.moderations.create({ model: 'omni-moderation-latest', input: texts }).withResponse();
    const row = await requestRecord(gateway.url, billed.key, openai.response.headers.get('x-request-id')!);
    assert.deepEqual(
      [row.endpoint, row.model, row.vendor, row.status, row.http_status],
      ['moderations', 'omni-moderation-latest', 'openai', 'completed', 200],
    );
    assert.equal(row.input_tokens, tokens, 'counted by the gateway: OpenAI reports no usage');
    assert.equal(row.output_tokens, 0);
    assert.equal(row.cost_micros, 0);
    assert.equal(row.answer_id, openai.data.id);

    const mock = await own.moderations.create({ model: 'mock-moderation', input: texts[0]! }).withResponse();
    const mockRow = await requestRecord(gateway.url, billed.key, mock.response.headers.get('x-request-id')!);
    assert.deepEqual(
      [mockRow.endpoint, mockRow.model, mockRow.vendor, mockRow.status],
      ['moderations', 'mock-moderation', 'mock', 'completed'],
    );
    assert.equal(mockRow.input_tokens, countTextTokens(texts[0]!));
    assert.equal(mockRow.cost_micros, 0);
    assert.equal(mockRow.answer_id, mock.data.id);

    const bill = await readBill(redis, billed.account);
    assert.deepEqual(
      [bill!.balanceMicros, bill!.reservedMicros],
      [1_000_000, 0],
      'nothing charged, nothing left reserved',
    );
  });

  it('is cached under Cache-Control: the same input to the same model answered from the cache with an id of its own', async () => {
    fake.reset();
    const input = ['cache me', 'and me'];
    const first = await client.moderations.create({ model: 'omni-moderation-latest', input }, cached).withResponse();
    assert.equal(first.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
    const again = await client.moderations.create({ model: 'omni-moderation-latest', input }, cached).withResponse();
    assert.match(again.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
    const hit = assertModeration(again.data, 'cache hit', 2);
    assert.deepEqual(hit.results, first.data.results);
    assert.equal(hit.model, first.data.model);
    assert.notEqual(hit.id, first.data.id, 'a hit has an id of its own');
    assert.equal(hit.id, `modr-${again.response.headers.get('x-request-id')!.slice(4)}`);
    assert.equal(fake.requests.length, 1, 'one vendor call');
    const row = await requestRecord(gateway.url, key, again.response.headers.get('x-request-id')!);
    assert.deepEqual([row.endpoint, row.cache], ['moderations', 'hit']);
    // Another model, or the same texts in another order: other requests.
    const other = await client.moderations.create({ model: 'text-moderation-latest', input }, cached).withResponse();
    assert.equal(other.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
    const reordered = await client.moderations
      .create({ model: 'omni-moderation-latest', input: [...input].reverse() }, cached)
      .withResponse();
    assert.equal(reordered.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
    assert.equal(fake.requests.length, 3);
  });
});
