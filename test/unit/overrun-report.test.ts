import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { OverrunReport, type Overrun } from '../../workers/overrun-report.js';

/** The warnings a report writes, as the logger gets them. */
function capture() {
  const lines: Array<{ fields: Record<string, unknown>; message: string }> = [];
  return {
    lines,
    log: {
      warn: (fields: object, message: string) => lines.push({ fields: fields as Record<string, unknown>, message }),
    },
  };
}

const overrun = (i: number, model = 'gpt-4o-mini', vendor = 'openai'): Overrun => ({
  requestId: `req_${i}`,
  keyId: 'key_1',
  accountId: 'acct_1',
  model,
  vendor,
  reservedMicros: 13,
  costMicros: 14,
  overMicros: 1,
});

describe('answers that cost more than their reservation: one warning, then a summary a minute at most', () => {
  it(
    'under load the log gets the first answer in full and one line a minute for the rest, summed by model and ' +
      'vendor',
    () => {
      let now = 1_000_000;
      const { lines, log } = capture();
      const report = new OverrunReport(log as never, () => now);
      for (let i = 0; i < 1000; i++) {
        report.add(overrun(i, i % 2 === 0 ? 'gpt-4o-mini' : 'gpt-4o'));
        now += 50; // 20 a second, for 50 s
      }
      assert.equal(lines.length, 1, 'one line, not one per request');
      assert.equal(lines[0]!.fields.requestId, 'req_0');
      assert.match(lines[0]!.message, /more than its reservation/);

      now += 10_000; // a minute after the first
      report.add(overrun(1000));
      assert.equal(lines.length, 2);
      const summary = lines[1]!.fields as {
        answers: number;
        overMicros: number;
        models: Array<{ model: string; answers: number }>;
      };
      assert.equal(summary.answers, 1000);
      assert.equal(summary.overMicros, 1000);
      assert.deepEqual(summary.models.map((m) => [m.model, m.answers]).sort(), [
        ['gpt-4o', 500],
        ['gpt-4o-mini', 500],
      ]);
      assert.match(lines[1]!.message, /^1000 more answers cost more than their reservations \(by 1000 µ\$ in all\)/);

      report.add(overrun(1001));
      assert.equal(lines.length, 2, 'the next minute starts again');
    },
  );
});
