import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { startFakeAnthropic, type FakeAnthropic } from '../support/fake-anthropic.js';
import { freshRedis, paidAccountKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { readBacklog } from '../../shared/scheduling/index.js';

/*
 * Admission a tenant cannot game, through real gateway processes: a lane's
 * waiting room is shared out among the accounts waiting in it, so a flood is
 * refused (429, with retry-after) to the flooder and never to a quiet account,
 * on the flooded vendor or another; priority is served only where an admin
 * granted it; and every path that takes a queued job away uncounts it.
 */

const openaiModel = 'gpt-4o-mini';
const anthropicModel = 'claude-sonnet-4-6';

describe('fair admission through the gateway', () => {
  let openai: FakeOpenAI;
  let anthropic: FakeAnthropic;
  let redis: Redis;
  let gateway: GatewayProcess;

  before(async () => {
    [openai, anthropic] = await Promise.all([startFakeOpenAI({ latencyMs: 400 }), startFakeAnthropic()]);
    const fresh = await freshRedis(13);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: 'sk-capped',
        OPENAI_BASE_URL: openai.url,
        OPENAI_MAX_CONCURRENCY: '1',
        ANTHROPIC_API_KEY: 'sk-ant',
        ANTHROPIC_BASE_URL: anthropic.url,
        // A small room, so a flood fills it at once; a floor of 2 for every account.
        QUEUE_MAX_WAITING_CHAT: '20',
        QUEUE_WAITING_FLOOR: '2',
        // A flex request may wait this long, and no more.
        FLEX_DEADLINE_MS: '300',
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), anthropic?.close()]);
    redis?.disconnect();
  });

  const chat = (key: string, model: string, extra: Record<string, unknown> = {}) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 8, ...extra }),
    });

  const backgroundResponse = async (key: string) => {
    const res = await fetch(`${gateway.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: openaiModel, input: 'hello', max_output_tokens: 16, background: true }),
    });
    return { status: res.status, body: (await res.json()) as { id: string; status: string; error?: { code: string } } };
  };

  const waitingOf = async (account: string) =>
    (await readBacklog(redis, '{lane@openai}'))
      .filter(([, who]) => who === account)
      .reduce((sum, [, , n]) => sum + n, 0);

  it('refuses a flood to the flooder (429 with retry-after), never to a quiet account on the same vendor or another', async () => {
    const flooder = await paidAccountKey(redis, 'unlimited');
    const quiet = await paidAccountKey(redis, 'unlimited');
    // 40 background responses on the capped vendor: the room (20) fills with the flooder's, then it is refused.
    const flood = await Promise.all(Array.from({ length: 40 }, () => backgroundResponse(flooder.key)));
    const refused = flood.filter((r) => r.status === 429);
    assert.ok(refused.length >= 15, `the flooder was refused ${refused.length} of 40`);
    assert.ok(
      flood.every((r) => r.status === 200 || r.status === 429),
      `statuses: ${flood.map((r) => r.status).join(' ')}`,
    );
    assert.equal(refused[0]!.body.error?.code, 'rate_limit_exceeded');
    await waitFor(async () => (await waitingOf(flooder.account)) >= 15, 5_000, 'the flood counted in the lane');

    // The quiet account, while the room is full of the flood: every request admitted, on both vendors.
    const started = Date.now();
    const [openaiAnswers, anthropicAnswers] = await Promise.all([
      Promise.all(Array.from({ length: 4 }, () => chat(quiet.key, openaiModel))),
      Promise.all(Array.from({ length: 4 }, () => chat(quiet.key, anthropicModel))),
    ]);
    assert.deepEqual(
      openaiAnswers.map((r) => r.status),
      [200, 200, 200, 200],
      'the quiet account on the flooded vendor',
    );
    assert.deepEqual(
      anthropicAnswers.map((r) => r.status),
      [200, 200, 200, 200],
      'the quiet account on another vendor',
    );
    // Its requests went ahead of the flood's backlog: 4 calls of 400 ms at a cap of 1, and the one in flight.
    assert.ok(
      Date.now() - started < 4_000,
      `the quiet account's requests took ${Date.now() - started} ms behind a backlog of ${refused.length ? 20 : 0}`,
    );

    // The 429 says when to retry and which limit.
    const more = await backgroundResponse(flooder.key);
    if (more.status === 429) assert.match(JSON.stringify(more.body), /waiting/);
    const raw = await fetch(`${gateway.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${flooder.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: openaiModel, input: 'hello', max_output_tokens: 16, background: true }),
    });
    if (raw.status === 429) assert.ok(Number(raw.headers.get('retry-after')) >= 1);
    else await raw.body?.cancel();

    // Cancel every background response still queued: each leaves the lane's count at once.
    for (const { body } of flood.filter((r) => r.status === 200)) {
      await fetch(`${gateway.url}/v1/responses/${body.id}/cancel`, {
        method: 'POST',
        headers: { authorization: `Bearer ${flooder.key}` },
      });
    }
    if (more.status === 200)
      await fetch(`${gateway.url}/v1/responses/${more.body.id}/cancel`, {
        method: 'POST',
        headers: { authorization: `Bearer ${flooder.key}` },
      });
    await waitFor(async () => (await waitingOf(flooder.account)) === 0, 10_000, 'the cancelled responses uncounted');
  });

  it('uncounts a queued response that is deleted', async () => {
    const account = await paidAccountKey(redis, 'unlimited');
    // One in flight on the capped vendor, so the next ones wait.
    const blocker = chat(account.key, openaiModel);
    const queued = await Promise.all(Array.from({ length: 2 }, () => backgroundResponse(account.key)));
    assert.deepEqual(
      queued.map((r) => r.status),
      [200, 200],
    );
    await waitFor(async () => (await waitingOf(account.account)) >= 1, 5_000, 'the responses counted');
    for (const { body } of queued)
      await fetch(`${gateway.url}/v1/responses/${body.id}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${account.key}` },
      });
    await waitFor(async () => (await waitingOf(account.account)) === 0, 10_000, 'the deleted responses uncounted');
    assert.equal((await blocker).status, 200);
  });

  it("moves an account's tag only for requests admitted: retrying against its own rate limit costs it nothing", async () => {
    const other = await paidAccountKey(redis, 'unlimited');
    const limited = await paidAccountKey(redis, 'unlimited', { rpm: 2 });
    // The other account keeps the lane busy (its cap and a tenth taken, the rest waiting), so the band's tags are not
    // reset meanwhile.
    const busy = Array.from({ length: 5 }, () => chat(other.key, openaiModel));
    await waitFor(async () => (await waitingOf(other.account)) >= 2, 5_000, 'the lane busy');
    const clockBefore = Number((await redis.get('sy:fair:{lane@openai}:clock:default')) ?? 0);
    const answers = await Promise.all(Array.from({ length: 10 }, () => chat(limited.key, openaiModel)));
    const statuses = answers.map((r) => r.status);
    assert.equal(statuses.filter((s) => s === 200).length, 2, `statuses: ${statuses.join(' ')}`);
    assert.equal(statuses.filter((s) => s === 429).length, 8);
    // Each request here costs one unit (under 256 tokens reserved): two admitted, two units, whatever the refusals.
    const tag = Number(await redis.hget('sy:fair:{lane@openai}:tags:default', limited.account));
    assert.ok(
      tag - clockBefore <= 3,
      `the limited account's tag moved ${tag - clockBefore} units for 2 admitted requests`,
    );
    await Promise.all(busy);
  });

  it('answers a flex request still waiting at its deadline at once (504), takes it out of the queue and uncounts it', async () => {
    const other = await paidAccountKey(redis, 'unlimited');
    const flexer = await paidAccountKey(redis, 'unlimited');
    const busy = Array.from({ length: 4 }, () => chat(other.key, openaiModel));
    await waitFor(async () => (await waitingOf(other.account)) >= 1, 5_000, 'the lane busy');
    const started = Date.now();
    const res = await chat(flexer.key, openaiModel, { service_tier: 'flex' });
    const took = Date.now() - started;
    assert.equal(res.status, 504);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'timeout');
    // Not after the second a running job gets to answer itself: it never ran.
    assert.ok(took < 1100, `answered after ${took} ms for a deadline of 300 ms`);
    await waitFor(async () => (await waitingOf(flexer.account)) === 0, 5_000, 'the flex job uncounted');
    for (const answer of await Promise.all(busy)) assert.equal(answer.status, 200);
  });

  it('serves priority as default where no admin granted it, and says so', async () => {
    const account = await paidAccountKey(redis, 'unlimited');
    const res = await chat(account.key, anthropicModel, { service_tier: 'priority' });
    assert.equal(res.status, 200);
    const id = res.headers.get('x-request-id')!;
    const data = JSON.parse((await redis.hget(`bull:{chat}:${id}`, 'data'))!) as { serviceTier?: string };
    assert.equal(data.serviceTier, 'default', 'queued in the default tier');
    assert.equal(((await res.json()) as { service_tier: string }).service_tier, 'default');
  });
});
