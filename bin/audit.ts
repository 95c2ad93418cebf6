import { loadConfig } from '../shared/config.js';
import { openRecord } from '../storage/record/database.js';
import { locateRecord } from '../storage/record/embedded.js';
import {
  auditActions,
  exportAudit,
  pruneAuditOlderThanDays,
  verifyAudit,
  type AuditFilter,
} from '../storage/record/audit-log.js';
import { parseCommandLine, reachRecord, runCli, UsageError } from './cli.js';

const usage = `usage:
  npm run audit -- verify          walk the audit log's chain; exit 0 and a summary when it is
                                   intact, exit 1 naming the first row changed, deleted or inserted,
                                   or an anchor no audit.pruned row explains
  npm run audit -- export [--since ISO] [--until ISO] [--team ID] [--action A] [--actor ID|EMAIL]
                                   the rows, oldest first, as JSON Lines on stdout
  npm run audit -- prune           delete the rows older than AUDIT_RETENTION_DAYS now
  npm run audit -- --help          this text

The record is the gateway's (DATABASE_URL, else the embedded one under DATA_DIR); Redis is not needed.`;

/** A time given as ISO 8601 (a date, or a date and time), as unix milliseconds. */
function instant(flag: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const ms = /^\d{4}-\d{2}-\d{2}([T ][\d:.]+(Z|[+-]\d{2}:?\d{2})?)?$/.test(text.trim()) ? Date.parse(text.trim()) : NaN;
  if (!Number.isFinite(ms))
    throw new UsageError(
      `--${flag} must be an ISO 8601 date or time (2025-01-31, 2025-01-31T12:00:00Z), not "${text}"`,
    );
  return ms;
}

async function main(): Promise<number> {
  const { positionals, values } = parseCommandLine({
    allowPositionals: true,
    options: {
      help: { type: 'boolean', short: 'h' },
      since: { type: 'string' },
      until: { type: 'string' },
      team: { type: 'string' },
      action: { type: 'string' },
      actor: { type: 'string' },
    },
  });
  if (values.help) {
    console.log(usage);
    return 0;
  }
  const [command] = positionals;
  if (!command) {
    console.error(usage);
    return 2;
  }
  if (!['verify', 'export', 'prune'].includes(command)) throw new UsageError(`unknown command "${command}"`);
  if (values.action !== undefined && !(auditActions as readonly string[]).includes(values.action)) {
    throw new UsageError(`--action must be one of ${auditActions.join(', ')}`);
  }
  const filter: AuditFilter = {
    since: instant('since', values.since),
    until: instant('until', values.until),
    ...(values.team !== undefined ? { teamId: values.team } : {}),
    ...(values.action !== undefined ? { action: values.action } : {}),
    ...(values.actor !== undefined ? { actor: values.actor } : {}),
  };
  const config = loadConfig(process.env);
  if (command === 'prune' && !config.auditRetentionDays) {
    console.error('AUDIT_RETENTION_DAYS is unset: every row is kept, nothing to prune');
    return 0;
  }
  if (config.databaseUrl) await reachRecord(config.databaseUrl);
  const located = await locateRecord(config.databaseUrl, config.dataDir);
  try {
    const record = await openRecord(located.url, { max: 2 });
    try {
      if (command === 'verify') {
        const verdict = await verifyAudit(record);
        const from = verdict.anchor ? `from the anchor after pruned row ${verdict.anchor.id}` : 'from its start';
        if (!verdict.intact) {
          console.error(`audit log BROKEN: ${verdict.broken!.message} (${verdict.rows} rows read ${from})`);
          console.log(JSON.stringify({ intact: false, break: verdict.broken }));
          return 1;
        }
        const anchor = verdict.anchor ? { anchor: { after_id: verdict.anchor.id, proof: verdict.anchorProof } } : {};
        console.log(
          JSON.stringify({
            intact: true,
            rows: verdict.rows,
            first_id: verdict.firstId,
            last_id: verdict.lastId,
            last_hash: verdict.lastHash,
            ...anchor,
          }),
        );
        console.error(
          `audit log intact: ${verdict.rows} rows ${from}${verdict.lastId !== null ? ` to row ${verdict.lastId}` : ''}; head ${verdict.lastHash}`,
        );
        if (verdict.anchorProof === 'id-only') {
          console.error(
            'note: the anchor is explained by an audit.pruned row from before prune rows named its hash: taken ' +
              'on its id only; the next prune writes a full one',
          );
        }
        return 0;
      }
      if (command === 'export') {
        for await (const line of exportAudit(record, filter)) {
          // Honour a reader that stops (| head): wait for stdout to drain rather than buffering the whole log.
          if (!process.stdout.write(line)) await new Promise((resolve) => process.stdout.once('drain', resolve));
        }
        return 0;
      }
      const pruned = await pruneAuditOlderThanDays(record, config.auditRetentionDays!, 'cli');
      console.error(`pruned ${pruned} audit log rows older than ${config.auditRetentionDays} days`);
      return 0;
    } finally {
      await record.destroy().catch(() => undefined);
    }
  } finally {
    await located.close();
  }
}

runCli('audit', main);
