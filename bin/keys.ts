import type { Account } from '../shared/accounts.js';
import { KeyStore, type KeyOptions } from '../api/accounts/key-store.js';
import { usdToMicros, type AccountStore } from '../api/accounts/account-store.js';
import { maxCacheTtlS } from '../api/accounts/account-requests.js';
import { auditCli, connectStores, parseCommandLine, runCli, UsageError } from './cli.js';
import { keyAuditFields } from '../api/accounts/views.js';
import { loadConfig } from '../shared/config.js';

const usage = `usage:
  npm run keys -- create --name NAME [options]   create a key and print it (shown once)
      --account ID|EMAIL  the account it belongs to (default: the built-in default
                          account, unlimited; keys made in the console belong to
                          the signed-in person's account)
      --limit-usd USD     the most it may ever spend
      --rpm N, --tpm N    requests / tokens per minute
      --models a,b        the only models it may use
      --expires-at UNIX   when it stops working (unix seconds)
      --cache-ttl-s N     its default response-cache TTL: requests without
                          Cache-Control are cached as with max-age=N
  npm run keys -- list [--account ID|EMAIL]      list keys (no secrets)
  npm run keys -- revoke ID                      revoke a key
  npm run keys -- --help                         this text`;

function number(
  flag: string,
  text: string | undefined,
  check: (n: number) => boolean,
  what: string,
): number | undefined {
  if (text === undefined) return undefined;
  const value = text.trim() === '' ? NaN : Number(text);
  if (!Number.isFinite(value) || !check(value)) throw new UsageError(`--${flag} must be ${what}, not "${text}"`);
  return value;
}

/** A rate limit: whole, ≥ 1, and at most the admin API's bound (1e9 per minute). */
const isRateLimit = (n: number) => Number.isSafeInteger(n) && n >= 1 && n <= 1e9;

function keyOptions(values: Record<string, string | boolean | undefined>): KeyOptions {
  const text = (flag: string) => (typeof values[flag] === 'string' ? (values[flag] as string) : undefined);
  const limitUsd = number('limit-usd', text('limit-usd'), (n) => n >= 0 && n <= 1e9, 'a number of USD ≥ 0');
  const models = text('models')
    ?.split(',')
    .map((m) => m.trim())
    .filter(Boolean);
  if (models && models.length === 0) throw new UsageError('--models needs at least one model id');
  return {
    limitMicros: limitUsd === undefined ? undefined : usdToMicros(limitUsd),
    rpm: number('rpm', text('rpm'), isRateLimit, 'a whole number from 1 to 1000000000'),
    tpm: number('tpm', text('tpm'), isRateLimit, 'a whole number from 1 to 1000000000'),
    models: models ? [...new Set(models)] : undefined,
    expiresAt: number('expires-at', text('expires-at'), (n) => Number.isSafeInteger(n) && n >= 0, 'unix seconds'),
    cacheTtlS: number(
      'cache-ttl-s',
      text('cache-ttl-s'),
      (n) => Number.isSafeInteger(n) && n >= 0 && n <= maxCacheTtlS,
      `a whole number of seconds from 0 to ${maxCacheTtlS}`,
    ),
  };
}

const show = (value: number | string | undefined, unit = '') => (value === undefined ? '-' : `${value}${unit}`);

async function main(): Promise<number> {
  const { positionals, values } = parseCommandLine({
    allowPositionals: true,
    options: {
      help: { type: 'boolean', short: 'h' },
      name: { type: 'string' },
      account: { type: 'string' },
      'limit-usd': { type: 'string' },
      rpm: { type: 'string' },
      tpm: { type: 'string' },
      models: { type: 'string' },
      'expires-at': { type: 'string' },
      'cache-ttl-s': { type: 'string' },
    },
  });
  const [command, arg] = positionals;
  if (values.help) {
    console.log(usage);
    return 0;
  }
  if (!command) {
    console.error(usage);
    return 2;
  }
  if (!['create', 'list', 'revoke'].includes(command)) throw new UsageError(`unknown command "${command}"`);
  if (command === 'create' && !values.name?.trim()) throw new UsageError('create needs --name NAME');
  if (command === 'revoke' && !arg) throw new UsageError('revoke needs a key id');
  // Checked before connecting, so a typo costs no Redis round trip.
  const options = command === 'create' ? keyOptions(values) : {};
  const stores = await connectStores(process.env);
  // The operator's command: its limits are an admin's (ceilings for the account's members), its keys count against
  // MAX_KEYS_PER_ACCOUNT.
  const store = new KeyStore(stores.redis, stores.record, stores.hot, loadConfig(process.env));
  try {
    // Named by id or email, the account must exist: a key in no account would bill nobody.
    const owner = values.account === undefined ? undefined : await findAccount(store.accounts, values.account);
    if (command === 'create') {
      const key = await store.create(values.name!.trim(), { ...options, accountId: owner?.id }, 'admin');
      await auditCli(stores.record, {
        action: 'key.created',
        teamId: key.accountId,
        target: key.id,
        after: keyAuditFields(key),
      });
      const account = owner ?? (await store.accounts.get(key.accountId));
      const balance = account?.balanceMicros === undefined ? 'unlimited' : `${account.balanceMicros / 1e6} USD`;
      console.log(key.key);
      // Console keys land in the signed-in person's account, these in the default one unless --account says otherwise:
      // say which, and its balance.
      console.error(
        `created ${key.id} "${key.name}" in account ${key.accountId} ` +
          `("${account?.name || account?.email || key.accountId}", balance ${balance}); the key above is shown ` +
          `only once.`,
      );
    } else if (command === 'list') {
      for (const key of await store.list({ accountId: owner?.id })) {
        const limits = `limit=${show(key.limitMicros === undefined ? undefined : key.limitMicros / 1e6, ' USD')} spent=${key.spentMicros / 1e6} USD rpm=${show(key.rpm)} tpm=${show(key.tpm)}`;
        const expires = key.expiresAt === undefined ? 'never' : new Date(key.expiresAt * 1000).toISOString();
        console.log(
          `${key.id}\t${key.hint}\t${new Date(key.created * 1000).toISOString()}\t${key.accountId}\t${limits}\texpires=${expires}\tmodels=${key.models?.join(',') ?? 'all'}\t${key.name}`,
        );
      }
    } else {
      const before = await store.get(arg!);
      if (!(await store.revoke(arg!))) {
        console.error(`no key with id ${arg}`);
        return 1;
      }
      await auditCli(stores.record, {
        action: 'key.revoked',
        teamId: before?.accountId ?? null,
        target: arg!,
        before: { revoked: false },
        after: { revoked: true },
      });
      console.error(`revoked ${arg}`);
    }
    return 0;
  } finally {
    await stores.close();
  }
}

async function findAccount(accounts: AccountStore, idOrEmail: string): Promise<Account> {
  const byEmail = idOrEmail.includes('@');
  // The default account is made on first use: named before any use, it must still be found.
  if (!byEmail) await accounts.ensureDefault();
  const account = byEmail ? await accounts.findByEmail(idOrEmail) : await accounts.get(idOrEmail);
  if (!account)
    throw new Error(
      `no account with the ${byEmail ? 'email' : 'id'} ${idOrEmail} (npm run accounts -- list shows them)`,
    );
  return account;
}

runCli('keys', main);
