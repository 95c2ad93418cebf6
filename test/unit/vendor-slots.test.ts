import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { loadConfig } from '../../shared/config.js';
import { VendorSlots } from '../../shared/scheduling/vendor-slots.js';
import { freshRedis } from '../support/gateway.js';

// Against a real Redis: the limiter is a Lua script, and its point is to hold across processes.
describe('VendorSlots', () => {
  let redis: Redis;

  before(async () => {
    redis = (await freshRedis(14)).redis;
  });

  after(() => redis.disconnect());

  const never = new AbortController().signal;

  it('costs nothing for a vendor without limits', async () => {
    const limiter = new VendorSlots(redis, loadConfig({}));
    const lease = await limiter.acquire('openai', Date.now() + 1000, never);
    await lease.release();
    assert.equal(await redis.exists('sy:limit:{openai}:inflight'), 0);
  });

  it('holds the concurrency cap across limiter instances (processes) and lets a waiter in on release', async () => {
    const env = { OPENAI_MAX_CONCURRENCY: '2' };
    const a = new VendorSlots(redis, loadConfig(env));
    const b = new VendorSlots(redis, loadConfig(env));
    const first = await a.acquire('openai', Date.now() + 5000, never);
    const second = await b.acquire('openai', Date.now() + 5000, never);
    let thirdIn = false;
    const third = a.acquire('openai', Date.now() + 5000, never).then((lease) => {
      thirdIn = true;
      return lease;
    });
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(thirdIn, false, 'a third call waits while two are in flight');
    await first.release();
    const lease = await third;
    assert.equal(thirdIn, true);
    await Promise.all([second.release(), lease.release()]);
    assert.equal(await redis.zcard('sy:limit:{openai}:inflight'), 0);
  });

  it('frees the slot of a dead holder once its lease runs out', async () => {
    // A worker killed mid-call leaves its lease behind and never renews it.
    await redis.zadd('sy:limit:{xai}:inflight', Date.now() + 300, 'lease-of-a-dead-worker');
    const limiter = new VendorSlots(redis, loadConfig({ XAI_MAX_CONCURRENCY: '1' }), 300);
    const started = Date.now();
    const lease = await limiter.acquire('xai', Date.now() + 5000, never);
    assert.ok(Date.now() - started >= 200, 'waited for the stale lease to expire');
    await lease.release();
  });

  it('renews a long call so its slot is not taken while it runs', async () => {
    const limiter = new VendorSlots(redis, loadConfig({ DEEPSEEK_MAX_CONCURRENCY: '1' }), 300);
    const long = await limiter.acquire('deepseek', Date.now() + 5000, never);
    await new Promise((r) => setTimeout(r, 700));
    await assert.rejects(
      limiter.acquire('deepseek', Date.now() + 200, never),
      (error: Error & { status?: number }) => error.status === 504,
      'still held after twice the lease time',
    );
    await long.release();
  });

  it('counts calls per rolling minute and waits (bounded by the deadline) past the RPM', async () => {
    const limiter = new VendorSlots(redis, loadConfig({ GEMINI_RPM: '3' }));
    for (let i = 0; i < 3; i++) await (await limiter.acquire('google', Date.now() + 1000, never)).release();
    const started = Date.now();
    await assert.rejects(
      limiter.acquire('google', Date.now() + 3000, never),
      (error: Error & { status?: number }) => error.status === 504 && /google/.test(error.message),
    );
    // The minute frees up in about 60 s, past the 3 s deadline: no point waiting for it.
    assert.ok(Date.now() - started < 2000, 'gives up at once when the wait would pass the deadline');
  });

  it('wakes a waiter when a release is announced, and still gets in when the announcement was missed', async () => {
    const limiter = new VendorSlots(redis, loadConfig({ MOCK_MAX_CONCURRENCY: '1' }));
    limiter.listening(); // as in a worker, whose subscriber forwards freed-slot messages
    const held = await limiter.acquire('mock', Date.now() + 5000, never);
    const woken = limiter.acquire('mock', Date.now() + 5000, never);
    await new Promise((r) => setTimeout(r, 50));
    await held.release();
    limiter.slotFreed('mock');
    const second = await woken;
    // The release message never reaches this waiter: its fallback look finds the free slot.
    const missed = limiter.acquire('mock', Date.now() + 5000, never);
    await new Promise((r) => setTimeout(r, 50));
    await second.release();
    await (await missed).release();
    await second.release(); // releasing twice is harmless
    assert.equal(await redis.zcard('sy:limit:{mock}:inflight'), 0);
  });

  it('stops waiting when the client leaves', async () => {
    const limiter = new VendorSlots(redis, loadConfig({ ANTHROPIC_MAX_CONCURRENCY: '1' }));
    const held = await limiter.acquire('anthropic', Date.now() + 5000, never);
    const controller = new AbortController();
    const waiting = limiter.acquire('anthropic', Date.now() + 5000, controller.signal);
    setTimeout(() => controller.abort(new Error('client gone')), 50);
    await assert.rejects(waiting, /client gone/);
    await held.release();
  });

  it('keeps a moving average of call times and, only while every slot is taken, spreads starts over it', async () => {
    const config = { ...loadConfig({ BFL_MAX_CONCURRENCY: '2' }), vendorPace: 0.85 };
    const limiter = new VendorSlots(redis, config);
    // Two calls of about 200 ms: the average is kept beside the leases.
    const [a, b] = await Promise.all([
      limiter.acquire('bfl', Date.now() + 5000, never),
      limiter.acquire('bfl', Date.now() + 5000, never),
    ]);
    await new Promise((r) => setTimeout(r, 200));
    await Promise.all([a.release(), b.release()]);
    const avg = Number(await redis.hget('sy:limit:{bfl}:pace', 'avg'));
    assert.ok(avg >= 190 && avg < 400, `average call ${avg} ms`);
    // Not saturated: two starts back to back are not paced.
    let started = Date.now();
    const c = await limiter.acquire('bfl', Date.now() + 5000, never);
    const d = await limiter.acquire('bfl', Date.now() + 5000, never);
    assert.ok(Date.now() - started < 60, 'no pace while a slot was free all along');
    // A third is refused (every slot taken), which marks the vendor busy; the two slots then free together.
    const third = limiter.acquire('bfl', Date.now() + 5000, never);
    await new Promise((r) => setTimeout(r, 50));
    assert.ok(Number(await redis.hget('sy:limit:{bfl}:pace', 'busy')) > Date.now(), 'marked busy by the refusal');
    await d.release();
    const e = await third;
    started = Date.now();
    await c.release();
    const fourth = await limiter.acquire('bfl', Date.now() + 5000, never);
    const gap = Date.now() - started;
    // The fourth start waits 0.85 × avg ÷ 2 after the third (about 85 ms), though a slot was free.
    assert.ok(gap >= Math.floor((0.85 * avg) / 2) - 25, `paced by ${gap} ms (average ${avg} ms)`);
    await Promise.all([e.release(), fourth.release()]);
  });

  it('paces nothing with VENDOR_PACE_PERCENT=0', async () => {
    const limiter = new VendorSlots(redis, { ...loadConfig({ BFL_MAX_CONCURRENCY: '1' }), vendorPace: 0 });
    await redis.hset('sy:limit:{bfl}:pace', 'avg', 10_000, 'busy', Date.now() + 60_000, 'last', Date.now());
    const held = await limiter.acquire('bfl', Date.now() + 5000, never);
    await held.release();
    const started = Date.now();
    await (await limiter.acquire('bfl', Date.now() + 5000, never)).release();
    assert.ok(Date.now() - started < 100);
    await redis.del('sy:limit:{bfl}:pace');
  });

  it('gives a freed slot to the best-ranked waiter of the process, not the first to wait', async () => {
    const limiter = new VendorSlots(redis, { ...loadConfig({ BFL_MAX_CONCURRENCY: '1' }), vendorPace: 0 });
    limiter.listening();
    const held = await limiter.acquire('bfl', Date.now() + 5000, never);
    const order: string[] = [];
    const late = limiter
      .acquire('bfl', Date.now() + 5000, never, 5_000_000)
      .then((lease) => (order.push('late'), lease));
    await new Promise((r) => setTimeout(r, 20));
    const early = limiter.acquire('bfl', Date.now() + 5000, never, 1_000).then((lease) => (order.push('early'), lease));
    await new Promise((r) => setTimeout(r, 50));
    await held.release();
    limiter.slotFreed('bfl');
    const first = await Promise.race([late, early]);
    await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(order, ['early'], 'the lower rank (the queue would serve it first) gets the slot');
    await first.release();
    limiter.slotFreed('bfl');
    await (await late).release();
    assert.deepEqual(order, ['early', 'late']);
  });
});
