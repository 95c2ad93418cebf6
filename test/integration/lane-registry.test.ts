import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { freshRedis, paidAccountKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

/*
 * Lanes through real processes (shared/scheduling/lanes.ts): a lane nobody
 * serves with a configured cap (here: the api caps OpenAI, the workers do
 * not) is found from the registry, drained by the workers with no cap, and
 * reported in /readyz and /metrics while it has jobs; a vendor's lane is one,
 * shared by every capability, so its cap is one; and a vendor capped by RPM
 * alone is paced in its lane, so its backlog is served in the fair order.
 */

const model = 'gpt-4o-mini';

describe('lanes registered in Redis', () => {
  const closing: Array<() => Promise<unknown>> = [];
  const redises: Redis[] = [];
  after(async () => {
    for (const close of closing.reverse()) await close().catch(() => undefined);
    for (const redis of redises) redis.disconnect();
  });

  async function fake(latencyMs: number): Promise<FakeOpenAI> {
    const made = await startFakeOpenAI({ latencyMs });
    closing.push(() => made.close());
    return made;
  }

  async function gateway(role: 'all' | 'api' | 'worker', env: Record<string, string>): Promise<GatewayProcess> {
    const started = await startGateway({ role, env });
    closing.push(() => started.stop());
    return started;
  }

  it('drains a lane no worker serves (a cap set on the api only), and reports it until it is empty', async () => {
    const openai = await fake(50);
    const fresh = await freshRedis(14);
    redises.push(fresh.redis);
    const vendor = { REDIS_URL: fresh.url, OPENAI_API_KEY: 'sk-lanes', OPENAI_BASE_URL: openai.url };
    // The api routes OpenAI's requests to its lane; no worker has the cap, so nobody serves that lane as configured.
    // The api starts first: it looks at the lanes every 5 s and a worker every 10 s from its start, so with the worker
    // started last (its requests sent right after) the api's next look always comes before the worker's. Started the
    // other way round, a start of the api slower than 5 s let the worker drain the lane before the api saw it.
    const api = await gateway('api', { ...vendor, OPENAI_MAX_CONCURRENCY: '1' });
    const worker = await gateway('worker', vendor);
    const { key } = await paidAccountKey(fresh.redis, 'unlimited');
    const client = api.client(key, { timeout: 60_000 });
    const answers = Array.from({ length: 3 }, () =>
      client.chat.completions.create({ model, messages: [{ role: 'user', content: 'stranded?' }], max_tokens: 8 }),
    );

    // Reported while its jobs wait: /readyz (still ready: every other lane is served) and /metrics.
    await waitFor(
      async () => {
        const ready = (await (await fetch(`${api.url}/readyz`)).json()) as {
          stranded_lanes?: Array<{ lane: string; waiting: number }>;
        };
        return ready.stranded_lanes?.some((lane) => lane.lane === '{lane@openai}' && lane.waiting > 0) === true;
      },
      15_000,
      'the stranded lane in /readyz',
    );
    const metrics = await (await fetch(`${api.url}/metrics`)).text();
    assert.match(metrics, /switchyard_lane_stranded\{lane="\{lane@openai\}"\} [1-9]/);

    // The workers find it and drain it: every request is answered.
    const done = await Promise.all(answers);
    assert.equal(done.length, 3);
    for (const answer of done) assert.ok(answer.choices[0]?.message.content);
    assert.ok(
      worker.logs.some((line) => line.includes('draining it with no cap')),
      'the worker says it drains a stranded lane',
    );
    // Once empty, nothing is reported.
    await waitFor(
      async () => !('stranded_lanes' in ((await (await fetch(`${api.url}/readyz`)).json()) as object)),
      15_000,
      'the lane no longer reported',
    );
  });

  it('holds one cap per vendor across capabilities: chat and embeddings to a capped vendor wait in one lane', async () => {
    const openai = await fake(300);
    const fresh = await freshRedis(13);
    redises.push(fresh.redis);
    const gw = await gateway('all', {
      REDIS_URL: fresh.url,
      OPENAI_API_KEY: 'sk-one-cap',
      OPENAI_BASE_URL: openai.url,
      OPENAI_MAX_CONCURRENCY: '2',
    });
    const { key } = await paidAccountKey(fresh.redis, 'unlimited');
    const client = gw.client(key, { timeout: 60_000 });
    // Jobs out of the vendor's queues at once, whatever layout they are in: one shared lane now, one per capability
    // before.
    const actives = ['{lane@openai}', '{chat@openai}', '{embeddings@openai}'];
    let most = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const counts = await Promise.all(actives.map((name) => fresh.redis.llen(`bull:${name}:active`)));
        most = Math.max(
          most,
          counts.reduce((a, b) => a + b, 0),
        );
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    await Promise.all([
      ...Array.from({ length: 8 }, () =>
        client.chat.completions.create({ model, messages: [{ role: 'user', content: 'one cap' }], max_tokens: 8 }),
      ),
      ...Array.from({ length: 8 }, () =>
        client.embeddings.create({ model: 'text-embedding-3-small', input: 'one cap' }),
      ),
    ]);
    sampling = false;
    await sampler;
    assert.ok(openai.maxInFlight <= 2, `the vendor saw ${openai.maxInFlight} calls at once`);
    // The cap and a tenth (at least one more) out of the queue: 3, not 3 per capability.
    assert.ok(most <= 3, `${most} jobs were out of the vendor's queues at once`);
    assert.ok(most >= 2, 'the lane was used');
  });

  it("paces a vendor capped by RPM alone in its lane: a quiet account is served before another's backlog", async () => {
    const openai = await fake(20);
    const fresh = await freshRedis(15);
    redises.push(fresh.redis);
    // 600 a minute: BullMQ lets 10 jobs a second out of the lane; the rest wait there in their fair order.
    const gw = await gateway('all', {
      REDIS_URL: fresh.url,
      OPENAI_API_KEY: 'sk-rpm',
      OPENAI_BASE_URL: openai.url,
      OPENAI_RPM: '600',
    });
    const flooder = await paidAccountKey(fresh.redis, 'unlimited');
    const quiet = await paidAccountKey(fresh.redis, 'unlimited');
    const done: string[] = [];
    const ask = (key: string, label: string) =>
      gw
        .client(key, { timeout: 60_000 })
        .chat.completions.create({ model, messages: [{ role: 'user', content: label }], max_tokens: 8 })
        .then(() => void done.push(label));
    const flood = Array.from({ length: 30 }, () => ask(flooder.key, 'flood'));
    await waitFor(
      async () => (await fresh.redis.zcard('bull:{lane@openai}:prioritized')) >= 10,
      10_000,
      'the flood waiting in the lane',
    );
    const before = done.length;
    await Promise.all([...flood, ask(quiet.key, 'quiet')]);
    const at = done.indexOf('quiet') - before;
    assert.ok(at <= 12, `the quiet request waited behind ${at} of the flood's: ${done.join(' ')}`);
  });
});
