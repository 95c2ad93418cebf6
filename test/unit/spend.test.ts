import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { formatReset, reserveSpend } from '../../api/accounts/spend.js';
import { limitsInForce } from '../../shared/money/billing.js';
import type { KeyAccess } from '../../shared/accounts.js';
import { GatewayError } from '../../shared/errors.js';
import { billKey } from '../../shared/redis-keys.js';
import { readBill, readKeySpend } from '../../shared/money/billing.js';
import { freshRedis } from '../support/gateway.js';

/** The api's admission (`api/accounts/spend.ts`): the reserve script's verdict as the answer a client gets. */

let redis: Redis;
const defaults = { defaultKeyRpm: undefined, defaultKeyTpm: undefined };
const deadline = () => Date.now() + 60_000;

before(async () => {
  ({ redis } = await freshRedis(1));
});
after(() => redis.disconnect());
beforeEach(async () => {
  await redis.flushdb();
  await redis.hset(billKey('a1'), { id: 'a1', reserved: 0, balance: 1_000, 'k1.spent': 0, 'k1.reserved': 0 });
});

const access = (extra: Partial<KeyAccess> = {}): KeyAccess => ({ keyId: 'k1', accountId: 'a1', ...extra });

async function refusal(promise: Promise<unknown>): Promise<GatewayError> {
  const error = await promise.then(
    () => assert.fail('admitted'),
    (e: unknown) => e,
  );
  assert.ok(error instanceof GatewayError, String(error));
  return error;
}

describe('spend: admission', () => {
  it('reserves the estimate and answers the key rate-limit headers', async () => {
    const headers = await reserveSpend(
      redis,
      defaults,
      access({ rpm: 10, tpm: 1_000 }),
      'r1',
      { micros: 400, tokens: 100 },
      deadline(),
    );
    assert.equal(headers['x-ratelimit-limit-requests'], '10');
    assert.equal(headers['x-ratelimit-remaining-requests'], '9');
    assert.equal(headers['x-ratelimit-limit-tokens'], '1000');
    assert.equal(headers['x-ratelimit-remaining-tokens'], '900');
    assert.equal((await readBill(redis, 'a1'))?.reservedMicros, 400);
    assert.equal((await readKeySpend(redis, 'a1', 'k1'))?.reservedMicros, 400);
  });

  it('refuses past the rate limit with rate_limit_exceeded and when to retry', async () => {
    await reserveSpend(redis, defaults, access({ rpm: 1 }), 'r1', { micros: 0, tokens: 1 }, deadline());
    const error = await refusal(
      reserveSpend(redis, defaults, access({ rpm: 1 }), 'r2', { micros: 0, tokens: 1 }, deadline()),
    );
    assert.equal(error.status, 429);
    assert.equal(error.code, 'rate_limit_exceeded');
    assert.equal(error.type, 'requests');
    assert.ok(Number(error.headers['retry-after']) >= 1);
    assert.ok(Number(error.headers['retry-after-ms']) > 0);
    assert.equal(error.headers['x-ratelimit-remaining-requests'], '0');
  });

  it('refuses past the balance and past the key limit with insufficient_quota, not to be retried', async () => {
    const broke = await refusal(
      reserveSpend(redis, defaults, access(), 'r1', { micros: 1_001, tokens: 1 }, deadline()),
    );
    assert.equal(broke.status, 429);
    assert.equal(broke.code, 'insufficient_quota');
    assert.equal(broke.headers['x-should-retry'], 'false');
    assert.match(broke.message, /balance/);
    const capped = await refusal(
      reserveSpend(redis, defaults, access({ limitMicros: 100 }), 'r2', { micros: 101, tokens: 1 }, deadline()),
    );
    assert.equal(capped.code, 'insufficient_quota');
    assert.match(capped.message, /limit_usd/);
    assert.equal((await readBill(redis, 'a1'))?.reservedMicros, 0, 'a refusal holds nothing');
  });

  it('refuses a key whose bill is gone (revoked, or its account deleted) as an invalid key', async () => {
    await redis.hdel(billKey('a1'), 'k1.spent', 'k1.reserved');
    const error = await refusal(reserveSpend(redis, defaults, access(), 'r1', { micros: 1, tokens: 1 }, deadline()));
    assert.equal(error.status, 401);
    assert.equal(error.code, 'invalid_api_key');
  });

  it("holds a key to the gateway's default rate limits where it sets none", () => {
    assert.deepEqual(limitsInForce(access(), { defaultKeyRpm: 60, defaultKeyTpm: undefined }), { rpm: 60 });
    assert.deepEqual(limitsInForce(access({ rpm: 5, limitMicros: 7 }), { defaultKeyRpm: 60, defaultKeyTpm: 1_000 }), {
      limitMicros: 7,
      rpm: 5,
      tpm: 1_000,
    });
    assert.equal(formatReset(17), '17ms');
    assert.equal(formatReset(1_500), '1.5s');
    assert.equal(formatReset(360_000), '6m0s');
  });
});
