import { z } from 'zod';
import { AccountStore, microsToUsd, usdToMicros } from '../api/accounts/account-store.js';
import { auditCli, connectStores, parseCommandLine, runCli, UsageError } from './cli.js';
import { accountAuditFields } from '../api/accounts/views.js';

const usage = `usage:
  npm run accounts -- create --email E [--name N] [--password P] [--role admin|member]
                                               create an account and print its id
  npm run accounts -- list                     list accounts
  npm run accounts -- credit ID AMOUNT_USD [--note T]
                                               add credit (negative to correct), print the new balance
  npm run accounts -- ledger ID                the account's balance changes, newest first
  npm run accounts -- delete ID                delete an account and revoke its keys
  npm run accounts -- --help                   this text

Admin accounts spend without a balance unless one is set for them; members
start at 0 USD: credit them before their keys can spend.`;

/** Marks an argument that is a negative number, which parseArgs would take for an option (`credit ID -5`). */
const negativeMark = '\u0000';

async function main(): Promise<number> {
  const args = process.argv
    .slice(2)
    .map((arg, i, all) => (/^-\d/.test(arg) && all[i - 1] !== '--note' ? `${negativeMark}${arg}` : arg));
  const { positionals, values } = parseCommandLine({
    args,
    allowPositionals: true,
    options: {
      help: { type: 'boolean', short: 'h' },
      email: { type: 'string' },
      name: { type: 'string' },
      password: { type: 'string' },
      role: { type: 'string' },
      note: { type: 'string' },
    },
  });
  if (values.help) {
    console.log(usage);
    return 0;
  }
  const [command, id, amountText] = positionals.map((p) => (p.startsWith(negativeMark) ? p.slice(1) : p));
  if (!command) {
    console.error(usage);
    return 2;
  }
  if (!['create', 'list', 'credit', 'ledger', 'delete'].includes(command))
    throw new UsageError(`unknown command "${command}"`);
  if (command === 'create') {
    if (!values.email || !z.email().safeParse(values.email.trim()).success)
      throw new UsageError('create needs --email with a valid address');
    if (values.role !== undefined && values.role !== 'admin' && values.role !== 'member')
      throw new UsageError('--role must be admin or member');
    if (values.password !== undefined && values.password.length < 8)
      throw new UsageError('--password must be at least 8 characters');
  }
  if (command !== 'create' && command !== 'list' && !id) throw new UsageError(`${command} needs an account id`);
  let micros = 0;
  if (command === 'credit') {
    const amount = amountText === undefined || amountText.trim() === '' ? NaN : Number(amountText);
    if (!Number.isFinite(amount) || Math.abs(amount) > 1e9 || usdToMicros(amount) === 0) {
      throw new UsageError(`credit needs a non-zero amount in USD, not "${amountText ?? ''}"`);
    }
    micros = usdToMicros(amount);
  }

  const stores = await connectStores(process.env);
  const store = new AccountStore(stores.redis, stores.record, stores.hot);
  try {
    if (command === 'create') {
      const role = values.role === 'admin' ? 'admin' : 'member';
      const account = await store.create({
        email: values.email!,
        name: values.name?.trim(),
        password: values.password,
        role,
      });
      await auditCli(stores.record, {
        action: 'account.created',
        teamId: account.id,
        target: account.id,
        after: accountAuditFields(account),
      });
      console.log(account.id);
      console.error(`created ${account.id} <${account.email}> (${account.role})`);
    } else if (command === 'list') {
      for (const a of await store.list()) {
        const balance = a.balanceMicros === undefined ? 'unlimited' : `${microsToUsd(a.balanceMicros)} USD`;
        console.log(
          `${a.id}\t${a.email || '-'}\t${a.role}\t${balance}\t${new Date(a.created * 1000).toISOString()}\t${a.name}`,
        );
      }
    } else if (command === 'credit') {
      const balance = await store.credit(id!, micros, values.note ?? '');
      await auditCli(stores.record, {
        action: 'credit.granted',
        teamId: id!,
        target: id!,
        after: { amount_micros: micros, note: values.note ?? '', balance_micros: balance },
      });
      console.log(microsToUsd(balance));
      console.error(
        `${id}: ${micros > 0 ? 'credited' : 'debited'} ${Math.abs(micros) / 1e6} USD; balance ${microsToUsd(balance)} USD`,
      );
    } else if (command === 'ledger') {
      if (!(await store.get(id!))) return notFound(id!);
      for (const e of await store.ledger(id!, 1000)) {
        console.log(
          `${new Date(e.time * 1000).toISOString()}\t${microsToUsd(e.amountMicros)}\t${microsToUsd(e.balanceMicros)}\t${e.note}`,
        );
      }
    } else {
      const revoked = await store.delete(id!);
      if (revoked === undefined) return notFound(id!);
      await auditCli(stores.record, {
        action: 'account.deleted',
        teamId: id!,
        target: id!,
        before: { deleted: false },
        after: { deleted: true, keys_revoked: revoked },
      });
      console.error(`deleted ${id}; ${revoked} key(s) revoked`);
    }
    return 0;
  } finally {
    await stores.close();
  }
}

function notFound(id: string): number {
  console.error(`no account with id ${id}`);
  return 1;
}

runCli('accounts', main);
