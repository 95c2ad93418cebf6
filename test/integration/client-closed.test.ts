import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

/** The value of one series of `/metrics` (0 when absent). */
function series(metrics: string, name: string, labels: Record<string, string>): number {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of metrics.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const inside = line.slice(name.length + 1, line.indexOf('}'));
    if (wanted.every((pair) => inside.split(',').includes(pair))) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return 0;
}

// A client that hangs up before its answer is neither a 4xx nor a latency: nginx's 499, counted apart.
describe('a client that hangs up before its answer', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let apiKey: string;

  before(async () => {
    const fresh = await freshRedis(6);
    redis = fresh.redis;
    apiKey = (await createKey(redis)).key;
    gateway = await startGateway({ env: { REDIS_URL: fresh.url } });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  const scrape = async () => (await fetch(`${gateway.url}/metrics`)).text();

  it('is logged with status 499 (not 404), counted as status_class="499" and kept out of the latency histograms', async () => {
    const route = '/v1/chat/completions';
    const before = await scrape();
    const firstBytesBefore = series(before, 'switchyard_http_time_to_first_byte_seconds_count', {
      route,
      model: 'mock-chat',
    });
    const durationsBefore = series(before, 'switchyard_http_request_duration_seconds_count', {
      route,
      status_class: '4xx',
    });
    const controller = new AbortController();
    const held = fetch(`${gateway.url}${route}`, {
      method: 'POST',
      signal: controller.signal,
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mock-chat',
        messages: [{ role: 'user', content: '[mock:slow:5000] wait for me' }],
      }),
    });
    setTimeout(() => controller.abort(), 500);
    await assert.rejects(held);
    await waitFor(() => gateway.logs.some((line) => line.includes('"status":499')), 5000, 'the access log line');
    const line = gateway.logs.find((l) => l.includes('"status":499'))!;
    assert.match(line, /the client closed the connection before the answer/);
    assert.ok(!gateway.logs.some((l) => l.includes('"status":404')), 'no 404 logged');
    const after = await scrape();
    assert.equal(
      series(after, 'switchyard_http_requests_total', { route, model: 'mock-chat', status_class: '499' }),
      1,
    );
    assert.equal(
      series(after, 'switchyard_http_requests_total', { route, model: 'mock-chat', status_class: '4xx' }),
      0,
    );
    assert.equal(
      series(after, 'switchyard_http_time_to_first_byte_seconds_count', { route, model: 'mock-chat' }),
      firstBytesBefore,
      'no time to first byte: none was sent',
    );
    assert.equal(
      series(after, 'switchyard_http_request_duration_seconds_count', { route, status_class: '4xx' }),
      durationsBefore,
    );
  });

  it('a request answered in full is still counted and timed as before', async () => {
    const answer = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(answer.status, 200);
    await answer.json();
    const metrics = await scrape();
    assert.ok(
      series(metrics, 'switchyard_http_requests_total', {
        route: '/v1/chat/completions',
        model: 'mock-chat',
        status_class: '2xx',
      }) >= 1,
    );
    assert.ok(
      series(metrics, 'switchyard_http_time_to_first_byte_seconds_count', {
        route: '/v1/chat/completions',
        model: 'mock-chat',
      }) >= 1,
    );
  });
});
