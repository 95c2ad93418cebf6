import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { durationMs, maxSaturatedRestMs, saturatedForMs } from '../../workers/vendors/rate-headers.js';

describe("a vendor answer's rate-limit headers", () => {
  it("reads OpenAI's durations", () => {
    assert.equal(durationMs('1s'), 1000);
    assert.equal(durationMs('6m0s'), 360_000);
    assert.equal(durationMs('250ms'), 250);
    assert.equal(durationMs('1h2m3.5s'), 3_723_500);
    assert.equal(durationMs('0.4s'), 400);
    for (const bad of ['', 's', '1', '1d', '-1s', '1x', 'ms1', '1.2.3s', '9'.repeat(60) + 's'])
      assert.equal(durationMs(bad), undefined, bad);
  });

  it('says a key is saturated only when a limit has nothing left, for as long as its window', () => {
    assert.equal(saturatedForMs({}), undefined);
    assert.equal(
      saturatedForMs({ 'x-ratelimit-remaining-requests': '3', 'x-ratelimit-reset-requests': '1s' }),
      undefined,
    );
    assert.equal(saturatedForMs({ 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '2s' }), 2000);
    // The longer of two exhausted limits.
    assert.equal(
      saturatedForMs({
        'x-ratelimit-remaining-requests': '0',
        'x-ratelimit-reset-requests': '2s',
        'x-ratelimit-remaining-tokens': '0',
        'x-ratelimit-reset-tokens': '6m0s',
      }),
      maxSaturatedRestMs,
    );
    const now = Date.parse('2026-11-30T10:00:00Z');
    assert.equal(
      saturatedForMs(
        {
          'anthropic-ratelimit-input-tokens-remaining': '0',
          'anthropic-ratelimit-input-tokens-reset': '2026-11-30T10:00:05Z',
        },
        now,
      ),
      5000,
    );
    assert.equal(
      saturatedForMs(
        {
          'anthropic-ratelimit-requests-remaining': '12',
          'anthropic-ratelimit-requests-reset': '2026-11-30T10:00:05Z',
        },
        now,
      ),
      undefined,
    );
    // At 0 with a reset that cannot be read, or already past: a short rest, not none and not forever.
    assert.equal(saturatedForMs({ 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': 'soon' }), 1000);
    assert.equal(
      saturatedForMs(
        { 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': '2026-11-30T09:59:00Z' },
        now,
      ),
      1000,
    );
    // Odd values are not zero.
    for (const odd of ['', ' ', 'none', '-0x', 'NaN'])
      assert.equal(saturatedForMs({ 'x-ratelimit-remaining-requests': odd }), undefined, JSON.stringify(odd));
    assert.equal(
      saturatedForMs({ 'x-ratelimit-remaining-requests': ['0', '5'], 'x-ratelimit-reset-requests': '1s' }),
      1000,
    );
  });
});
