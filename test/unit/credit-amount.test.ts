import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { creditSchema, maxUsd, parseStrict } from '../../api/accounts/account-requests.js';
import { GatewayError } from '../../shared/errors.js';

/** A credit body as the admin API and the console read it: JSON text, parsed, then the schema. */
function refusal(amount: string): GatewayError {
  try {
    parseStrict(creditSchema, JSON.parse(`{"amount_usd": ${amount}}`));
  } catch (error) {
    assert.ok(error instanceof GatewayError, `${amount}: ${String(error)}`);
    return error;
  }
  assert.fail(`${amount} was accepted`);
}

describe('a credit amount out of bounds is a 400 naming the bound, not a 500', () => {
  it('±1e308 and the other huge finite spellings JSON allows say the bound', () => {
    for (const amount of ['1e308', '1E308', '1.7976931348623157e308', '123456789012345678901234567890', '1e10']) {
      const error = refusal(amount);
      assert.equal(error.status, 400, amount);
      assert.equal(error.param, 'amount_usd');
      assert.equal(error.message, `Invalid 'amount_usd': expected a value ≤ ${maxUsd}.`, amount);
    }
    for (const amount of ['-1e308', '-1E+308', '-1.7976931348623157e308', '-1e10']) {
      const error = refusal(amount);
      assert.equal(error.status, 400, amount);
      assert.equal(error.message, `Invalid 'amount_usd': expected a value ≥ -${maxUsd}.`, amount);
    }
  });

  it('what JSON parses to ±Infinity (no NaN spelling exists in JSON) is a 400 too', () => {
    for (const amount of ['1e999', '-1e999', '1E+400']) {
      const error = refusal(amount);
      assert.equal(error.status, 400, amount);
      assert.equal(error.param, 'amount_usd');
    }
    for (const amount of ['NaN', 'Infinity', '"NaN"'])
      assert.throws(
        () => parseStrict(creditSchema, JSON.parse(`{"amount_usd": ${amount}}`)),
        (error: Error) => error instanceof SyntaxError || (error instanceof GatewayError && error.status === 400),
        amount,
      );
  });

  it('the amounts within the bound keep their checks', () => {
    assert.equal(refusal('0.0000001').message, "Invalid 'amount_usd': the amount rounds to zero micro-dollars.");
    assert.equal(refusal('-0').status, 400);
    assert.equal(parseStrict(creditSchema, { amount_usd: maxUsd }).amount_usd, maxUsd);
    assert.equal(parseStrict(creditSchema, { amount_usd: -maxUsd }).amount_usd, -maxUsd);
    assert.equal(parseStrict(creditSchema, { amount_usd: 12.5 }).amount_usd, 12.5);
  });
});
