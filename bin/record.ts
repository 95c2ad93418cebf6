import { resolve } from 'node:path';
import pg from 'pg';
import { loadConfig } from '../shared/config.js';
import { openRecord, redactDatabaseUrl } from '../storage/record/database.js';
import { embeddedRecordIn, locateRecord } from '../storage/record/embedded.js';
import { copyRecordTables, recordRows, recordTables } from '../storage/record/record-copy.js';
import { parseCommandLine, runCli, UsageError } from './cli.js';

const usage = `usage:
  npm run record -- copy --to postgres://USER:PASSWORD@HOST:5432/DB
                      copy the embedded record under DATA_DIR (accounts, keys, credits,
                      ledger, usage) into an empty PostgreSQL database, to move to it
  npm run record -- --help

Stop the gateway first: a record in use would go on changing after the copy.
Then start the gateway with DATABASE_URL set to the same URL, on the same Redis.`;

/**
 * Moves the embedded record to a PostgreSQL server: one consistent snapshot
 * of it copied, whole or not at all, into a database that holds no account,
 * key, ledger entry or usage row yet. An explicit command rather than a copy
 * made by the first start with DATABASE_URL: a start never takes a DATA_DIR
 * it happens to find for the record the operator meant, and a copy into a
 * server is something to do once, knowingly, with the gateway stopped.
 */
async function main(): Promise<number> {
  const { positionals, values } = parseCommandLine({
    allowPositionals: true,
    options: { help: { type: 'boolean', short: 'h' }, to: { type: 'string' } },
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
  if (command !== 'copy') throw new UsageError(`unknown command "${command}"`);
  if (!values.to || !/^postgres(ql)?:\/\//.test(values.to))
    throw new UsageError('copy needs --to postgres://… (the database to move the record to)');
  const config = loadConfig(process.env);
  const target = values.to;
  const shown = redactDatabaseUrl(target);

  if (!embeddedRecordIn(config.dataDir)) {
    throw new Error(`there is no embedded record under ${resolve(config.dataDir)} (DATA_DIR) to copy`);
  }
  const located = await locateRecord(undefined, config.dataDir);
  try {
    if (located.source !== 'embedded') {
      throw new Error(
        `the embedded record under ${config.dataDir} is in use by pid ${located.owner}: stop the gateway first, ` +
          `so nothing changes after the copy`,
      );
    }
    // Both sides at the current schema before a row moves.
    await (await openRecord(located.url, { max: 1 })).destroy();
    await (await openRecord(target, { max: 1 })).destroy();
    const from = new pg.Client({ connectionString: located.url });
    const to = new pg.Client({ connectionString: target });
    await from.connect();
    try {
      await to.connect();
      try {
        const held = await recordRows(to);
        if (held > 0)
          throw new Error(
            `${shown} already holds ${held} rows in ${recordTables.join(', ')}: copy into an empty database`,
          );
        await from.query('begin isolation level repeatable read read only');
        await to.query('begin');
        try {
          const copied = await copyRecordTables(from, to);
          await to.query('commit');
          console.error(
            `copied ${Object.entries(copied)
              .map(([table, n]) => `${n} ${table}`)
              .join(', ')} into ${shown}`,
          );
          console.error(
            `start the gateway with DATABASE_URL set to it (same REDIS_URL); ${config.dataDir} is left as it was`,
          );
        } catch (error) {
          await to.query('rollback').catch(() => undefined);
          throw error;
        } finally {
          await from.query('rollback').catch(() => undefined);
        }
      } finally {
        await to.end().catch(() => undefined);
      }
    } finally {
      await from.end().catch(() => undefined);
    }
    return 0;
  } finally {
    await located.close();
  }
}

runCli('record', main);
