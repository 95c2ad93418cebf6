import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import type { Redis } from 'ioredis';
import { freshRedis, paidAccountKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { fakePromptCache } from '../support/fake-prompt-cache.js';
import { usageRows } from '../support/record.js';

const vendorKeys = ['sk-cache-one', 'sk-cache-two', 'sk-cache-three', 'sk-cache-four'];

/** Five long system prompts (about 2,000 tokens each), as five kinds of agent would send. */
const systems = Array.from(
  { length: 5 },
  (_, i) => `You are agent ${i}. ${'Follow the house rules carefully and cite them. '.repeat(170)}`,
);

/**
 * Four channels of one vendor (four keys of the fake OpenAI, whose prompt cache is per key): with affinity, the
 * requests that share a system prompt all go to one key, which writes its prefix once and reads it after; with it off
 * (PROMPT_CACHE_AFFINITY_OFF=openai) they spread by weight and each key writes the prefix again.
 */
describe('prompt-cache affinity: a prefix to the channel where its cache lives', () => {
  const cache = fakePromptCache();
  let openai: FakeOpenAI;
  let withAffinity: GatewayProcess;
  let without: GatewayProcess;
  const redises: Redis[] = [];
  const urls: string[] = [];

  before(async () => {
    openai = await startFakeOpenAI({ record: true });
    openai.setDefault((request) => cache.handler(request));
    const dbs = await Promise.all([freshRedis(4), freshRedis(5)]);
    for (const { redis, url } of dbs) {
      redises.push(redis);
      urls.push(url);
    }
    const env = { OPENAI_API_KEY: vendorKeys.join(','), OPENAI_BASE_URL: openai.url };
    [withAffinity, without] = await Promise.all([
      startGateway({ env: { ...env, REDIS_URL: urls[0]! } }),
      startGateway({ env: { ...env, REDIS_URL: urls[1]!, PROMPT_CACHE_AFFINITY_OFF: 'openai' } }),
    ]);
  });

  after(async () => {
    await Promise.allSettled([withAffinity?.stop(), without?.stop()]);
    await openai?.close();
    for (const redis of redises) redis.disconnect();
  });

  /**
   * Eight rounds of the five agents' turns (each round's five at once, as agents run side by side): the share of prompt
   * tokens read from cache, and the keys each prompt went to.
   */
  async function run(gateway: GatewayProcess, redis: Redis, stream: boolean) {
    cache.reset();
    openai.reset();
    openai.setDefault((request) => cache.handler(request));
    const { key } = await paidAccountKey(redis, 50_000_000);
    const client = new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
    for (let round = 0; round < 8; round++) {
      await Promise.all(
        systems.map(async (system, agent) => {
          const messages = [
            { role: 'system' as const, content: system },
            { role: 'user' as const, content: `Turn ${round} of agent ${agent}: what now?` },
          ];
          if (!stream) await client.chat.completions.create({ model: 'gpt-4o-mini', messages });
          else
            for await (const _ of await client.chat.completions.create({
              model: 'gpt-4o-mini',
              messages,
              stream: true,
            }))
              void _;
        }),
      );
    }
    const keysOf = systems.map(
      (system) =>
        new Set(
          openai.requests
            .filter((request) => JSON.stringify(request.body).includes(system.slice(0, 40)))
            .map((request) => String(request.headers.authorization)),
        ),
    );
    const { prompt, cached } = cache.totals();
    return { share: cached / prompt, keysOf, cached };
  }

  it(
    'with affinity every prompt stays on one key and most of the prompt is read from cache; without, the keys each ' +
      'write it again',
    async (t) => {
      const on = await run(withAffinity, redises[0]!, false);
      assert.ok(
        on.keysOf.every((keys) => keys.size === 1),
        `each prompt on one key: ${on.keysOf.map((keys) => keys.size).join(', ')}`,
      );
      // All but each prompt's first turn read its system prompt from the cache.
      assert.ok(on.share >= 0.8, `share read from cache with affinity: ${on.share.toFixed(3)}`);
      const off = await run(without, redises[1]!, false);
      assert.ok(
        off.keysOf.some((keys) => keys.size > 1),
        'without affinity the prompts spread',
      );
      assert.ok(off.share < on.share - 0.1, `without affinity ${off.share.toFixed(3)}, with ${on.share.toFixed(3)}`);
      t.diagnostic(
        `prompt tokens read from cache: ${(on.share * 100).toFixed(1)} % with affinity, ` +
          `${(off.share * 100).toFixed(1)} % without`,
      );
    },
  );

  it('a burst of 50 sharing a new prefix writes the cache once: the rest wait for the first token, never much longer', async (t) => {
    const slow = fakePromptCache({ firstTokenMs: 400 });
    openai.reset();
    openai.setDefault((request) => slow.handler(request));
    const { key } = await paidAccountKey(redises[0]!, 50_000_000);
    const client = new OpenAI({ apiKey: key, baseURL: `${withAffinity.url}/v1`, maxRetries: 0 });
    const system = `A new kind of agent. ${'Answer in one word, and only when asked twice. '.repeat(160)}`;
    const started = Date.now();
    const times = await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        const at = Date.now();
        await client.chat.completions.create({
          model: 'gpt-4o-mini',
          messages: [
            { role: 'system', content: system },
            { role: 'user', content: `Request ${i}.` },
          ],
        });
        return Date.now() - at;
      }),
    );
    const { writes, cached, prompt } = slow.totals();
    t.diagnostic(
      `burst of 50: ${writes} cache write(s), ${((cached / prompt) * 100).toFixed(1)} % of prompt tokens read; ` +
        `slowest ${Math.max(...times)} ms, all in ${Date.now() - started} ms`,
    );
    assert.equal(writes, 1, 'one request wrote the prefix');
    // The first answered after 400 ms; the rest went at its first token and answered 400 ms after: at most about twice
    // the first's time, with the polling's and the machine's slack.
    assert.ok(Math.max(...times) < 400 * 2 + 600, `the slowest took ${Math.max(...times)} ms`);

    // The gateway with affinity off (and so no wait): a burst with another new prefix writes it again and again.
    slow.reset();
    const other = await paidAccountKey(redises[1]!, 50_000_000);
    const spread = new OpenAI({ apiKey: other.key, baseURL: `${without.url}/v1`, maxRetries: 0 });
    const fresh = `Yet another agent. ${'Keep answers short and kind. '.repeat(260)}`;
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        spread.chat.completions.create({
          model: 'gpt-4o-mini',
          messages: [
            { role: 'system', content: fresh },
            { role: 'user', content: `Request ${i}.` },
          ],
        }),
      ),
    );
    assert.ok(slow.totals().writes > 1, `without affinity and its wait, ${slow.totals().writes} writes`);
  });

  it(
    'a channel the vendor says is saturated passes its prompts to the next of their order, and takes them back ' +
      'when its window resets',
    async () => {
      cache.reset();
      openai.reset();
      const windowMs = 1_500;
      let saturated: { key: string; until: number } | undefined;
      let refusals = 0;
      openai.setDefault((request) => {
        const key = String(request.headers.authorization);
        // A call to the saturated key inside its window is refused, as the vendor would: the gateway must not spend one.
        if (saturated && saturated.key === key && Date.now() < saturated.until) {
          refusals += 1;
          return {
            status: 429,
            json: {
              error: {
                message: 'Rate limit reached for requests',
                type: 'requests',
                param: null,
                code: 'rate_limit_exceeded',
              },
            },
          };
        }
        const answer = cache.handler(request)!;
        if (saturated !== undefined || !('json' in answer)) return answer;
        // The first answer uses the key's last request of the window, and says so.
        saturated = { key, until: Date.now() + windowMs };
        return {
          ...answer,
          headers: {
            'x-ratelimit-limit-requests': '10',
            'x-ratelimit-remaining-requests': '0',
            'x-ratelimit-reset-requests': `${windowMs / 1000}s`,
            'x-ratelimit-remaining-tokens': '150000',
          },
        };
      });
      const { key } = await paidAccountKey(redises[0]!, 50_000_000);
      const client = new OpenAI({ apiKey: key, baseURL: `${withAffinity.url}/v1`, maxRetries: 0 });
      const messages = (turn: number) => [
        { role: 'system' as const, content: systems[0]! },
        { role: 'user' as const, content: `Saturation turn ${turn}.` },
      ];
      const keyOf = (index: number) => String(openai.requests[index]!.headers.authorization);
      await client.chat.completions.create({ model: 'gpt-4o-mini', messages: messages(0) });
      for (let turn = 1; turn <= 4; turn++)
        await client.chat.completions.create({ model: 'gpt-4o-mini', messages: messages(turn) });
      const during = new Set(openai.requests.slice(1).map((_, i) => keyOf(i + 1)));
      assert.equal(refusals, 0, 'no call was made to the saturated key');
      assert.equal(
        during.size,
        1,
        `while saturated the prompt went to one other key, the next of its order: ${[...during].join(', ')}`,
      );
      assert.ok(!during.has(saturated!.key));
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, saturated!.until - Date.now()) + 300));
      const before = openai.requests.length;
      await client.chat.completions.create({ model: 'gpt-4o-mini', messages: messages(5) });
      assert.equal(keyOf(before), saturated!.key, 'once its window reset, the prompt is back where its cache lives');
    },
  );

  it('streams go the same way, and the record bills the cached tokens the vendor said', async () => {
    const on = await run(withAffinity, redises[0]!, true);
    assert.ok(on.keysOf.every((keys) => keys.size === 1));
    let rows: Awaited<ReturnType<typeof usageRows>> = [];
    await waitFor(
      async () => {
        rows = (await usageRows(urls[0]!)).filter(
          (row) => row.endpoint === 'chat.completions' && row.settled && row.stream,
        );
        return rows.length >= 40;
      },
      15_000,
      'the streams settled',
    );
    assert.equal(
      rows.reduce((sum, row) => sum + Number(row.cached_tokens), 0),
      on.cached,
    );
  });
});
