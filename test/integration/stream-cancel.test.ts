import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { waitForUsage } from '../support/record.js';

/*
 * Closing a stream is how every OpenAI-compatible client stops a generation
 * (the "stop" button): by default the request is cancelled at once and bills
 * only what was produced. A request that wants to resume after a dropped
 * connection asks for a grace with `x-stream-resume-grace-ms`, cut to
 * STREAM_RESUME_GRACE_MAX_MS.
 */

// About 25 pieces at 150 ms each: near 4 s of stream, so a cut after a few pieces leaves most of it unmade, and a 1.5 s
// grace ends first.
const longPrompt = `${Array.from({ length: 40 }, (_, i) => `word${i}`).join(' ')} [mock:slow:150]`;
const graceMaxMs = 1500;

describe('a stream whose client leaves', () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let apiKey: string;

  before(async () => {
    let url: string;
    ({ redis, url } = await freshRedis(4));
    gateway = await startGateway({
      env: { REDIS_URL: url, MOCK_VENDOR: 'on', STREAM_RESUME_GRACE_MAX_MS: String(graceMaxMs) },
    });
    apiKey = (await createKey(redis, 'streams')).key;
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  /**
   * Starts a stream, reads `events` data frames, then closes the connection; returns the request id and when it closed.
   */
  async function startAndLeave(
    headers: Record<string, string> = {},
    events = 3,
  ): Promise<{ requestId: string; closedAt: number; lastId: number }> {
    const controller = new AbortController();
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'mock-chat', stream: true, messages: [{ role: 'user', content: longPrompt }] }),
      signal: controller.signal,
    });
    assert.equal(res.status, 200);
    const requestId = res.headers.get('x-request-id')!;
    const reader = res.body!.getReader();
    let text = '';
    while ((text.match(/^data: \{/gm) ?? []).length < events)
      text += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    const ids = [...text.slice(0, text.lastIndexOf('\n\n')).matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
    return { requestId, closedAt: Date.now(), lastId: ids.at(-1) ?? 0 };
  }

  const cancelledLine = (requestId: string) =>
    gateway.logs.find((line) => line.includes(requestId) && line.includes('request cancelled'));

  async function usageOf(requestId: string): Promise<{ output_tokens: number; status: string }> {
    return waitForUsage(redis, (r) => r.request_id === requestId, 5000);
  }

  it('is cancelled at once by default and billed only for what was produced', async () => {
    const { requestId, closedAt } = await startAndLeave();
    await waitFor(() => cancelledLine(requestId) !== undefined, 3000, 'the cancellation');
    const cancelledAfter = Date.now() - closedAt;
    const usage = await usageOf(requestId);
    assert.equal(usage.status, 'cancelled');
    // The full answer is about 60 tokens; a few words were made before the cut.
    assert.ok(
      usage.output_tokens > 0 && usage.output_tokens < 30,
      `billed ${usage.output_tokens} output tokens (cancelled ${cancelledAfter} ms after the close)`,
    );
    // Nothing to resume once cancelled before the end: a resume gets what was made and the stream's end, or a 404 when
    // nothing is kept.
  });

  it('runs on for the grace a request asks for, and is resumed from where the client left', async () => {
    const { requestId, lastId } = await startAndLeave({ 'x-stream-resume-grace-ms': '10000' });
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(cancelledLine(requestId), undefined, 'still running in its grace');
    const resumed = await fetch(`${gateway.url}/v1/chat/completions/${requestId}/stream`, {
      headers: { authorization: `Bearer ${apiKey}`, 'last-event-id': String(lastId) },
    });
    assert.equal(resumed.status, 200);
    const rest = await resumed.text();
    assert.ok(rest.endsWith('data: [DONE]\n\n'), rest.slice(-200));
    assert.match(rest, /"finish_reason":"stop"/);
    const usage = await usageOf(requestId);
    assert.equal(usage.status, 'completed');
  });

  it('cuts a larger ask to STREAM_RESUME_GRACE_MAX_MS', async () => {
    const { requestId, closedAt } = await startAndLeave({ 'x-stream-resume-grace-ms': '3600000' });
    await waitFor(
      () => cancelledLine(requestId) !== undefined,
      graceMaxMs + 5000,
      'the cancellation after the capped grace',
    );
    const after = Date.now() - closedAt;
    assert.ok(after >= graceMaxMs - 100, `cancelled ${after} ms after the close, before the ${graceMaxMs} ms cap`);
    assert.equal((await usageOf(requestId)).status, 'cancelled');
  });

  it('refuses a grace that is not a whole number of milliseconds', async () => {
    for (const value of ['-1', 'soon', '1.5', '99999999999']) {
      const res = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${apiKey}`,
          'content-type': 'application/json',
          'x-stream-resume-grace-ms': value,
        },
        body: JSON.stringify({ model: 'mock-chat', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      });
      assert.equal(res.status, 400, value);
      const body = (await res.json()) as { error: { param: string; type: string } };
      assert.deepEqual([body.error.type, body.error.param], ['invalid_request_error', 'x-stream-resume-grace-ms']);
    }
  });
});
