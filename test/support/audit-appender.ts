import { appendAudit } from '../../storage/record/audit-log.js';
import { openRecord } from '../../storage/record/database.js';

/**
 * A process of its own appending to the audit log, for the test of appends
 * from several processes at once: `audit-appender.ts <database url> <rows> <name>`.
 * Once its record is open it prints `ready` and waits for a line on stdin, so the
 * test starts every appender at the same moment however long each took to start;
 * then it appends as fast as it can and exits 0.
 */
const [url, rows, name] = process.argv.slice(2);
const record = await openRecord(url!, { max: 4 });
try {
  await record.selectFrom('audit_log').select('id').limit(1).execute();
  process.stdout.write('ready\n');
  await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
  process.stdin.destroy();
  // Four appends in flight in this process too: the chain's lock serializes them and the other process's.
  const lanes = Array.from({ length: 4 }, async (_, lane) => {
    for (let i = lane; i < Number(rows); i += 4)
      await appendAudit(record, {
        actor: 'system',
        action: 'channel.updated',
        target: `${name}-${i}`,
        after: { n: i },
      });
  });
  await Promise.all(lanes);
} finally {
  await record.destroy();
}
