import { parseArgs, type ParseArgsConfig } from 'node:util';
import { createRedis } from '../shared/redis.js';
import { loadConfig } from '../shared/config.js';
import { KeyStore, type KeyOptions } from '../api/key-store.js';
import { usdToMicros } from '../api/account-store.js';
import { locateRedis } from './local-redis.js';

const usage = `usage:
  npm run keys -- create --name NAME [options]   create a key and print it (shown once)
      --account ID|EMAIL  the account it belongs to (default: the built-in default
                          account, unlimited; keys made in the console belong to
                          the signed-in person's account)
      --limit-usd USD     the most it may ever spend
      --rpm N, --tpm N    requests / tokens per minute
      --models a,b        the only models it may use
      --expires-at UNIX   when it stops working (unix seconds)
  npm run keys -- list [--account ID]            list keys (no secrets)
  npm run keys -- revoke ID                      revoke a key
  npm run keys -- --help                         this text`;

class UsageError extends Error {}

/** parseArgs, with an unknown or malformed option told as a usage error (exit 2) rather than a crash. */
function parseCommandLine<T extends ParseArgsConfig>(config: T) {
  try {
    return parseArgs(config);
  } catch (error) {
    throw new UsageError(`${(error as Error).message} (see --help)`);
  }
}

function number(flag: string, text: string | undefined, check: (n: number) => boolean, what: string): number | undefined {
  if (text === undefined) return undefined;
  const value = text.trim() === '' ? NaN : Number(text);
  if (!Number.isFinite(value) || !check(value)) throw new UsageError(`--${flag} must be ${what}, not "${text}"`);
  return value;
}

const isPositiveInteger = (n: number) => Number.isSafeInteger(n) && n >= 1;

function keyOptions(values: Record<string, string | boolean | undefined>): KeyOptions {
  const text = (flag: string) => (typeof values[flag] === 'string' ? (values[flag] as string) : undefined);
  const limitUsd = number('limit-usd', text('limit-usd'), (n) => n >= 0 && n <= 1e9, 'a number of USD ≥ 0');
  const models = text('models')
    ?.split(',')
    .map((m) => m.trim())
    .filter(Boolean);
  if (models && models.length === 0) throw new UsageError('--models needs at least one model id');
  return {
    accountId: text('account'),
    limitMicros: limitUsd === undefined ? undefined : usdToMicros(limitUsd),
    rpm: number('rpm', text('rpm'), isPositiveInteger, 'a whole number ≥ 1'),
    tpm: number('tpm', text('tpm'), isPositiveInteger, 'a whole number ≥ 1'),
    models: models ? [...new Set(models)] : undefined,
    expiresAt: number('expires-at', text('expires-at'), (n) => Number.isSafeInteger(n) && n >= 0, 'unix seconds'),
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
    },
  });
  const [command, arg] = positionals;
  if (values.help) {
    console.log(usage);
    return 0;
  }
  if (!command || !['create', 'list', 'revoke'].includes(command)) {
    console.error(usage);
    return 2;
  }
  if (command === 'create' && !values.name?.trim()) throw new UsageError('create needs --name NAME');
  if (command === 'revoke' && !arg) throw new UsageError('revoke needs a key id');
  // Checked before connecting, so a typo costs no Redis round trip.
  const options = command === 'create' ? keyOptions(values) : {};
  const configured = loadConfig(process.env).redis;
  // One Redis as `npm start` finds it; a Cluster or Sentinels as named.
  const target = configured.kind === 'single' ? (await locateRedis(process.env, false)).url : configured;
  const redis = createRedis(target, { maxRetriesPerRequest: 1 });
  const store = new KeyStore(redis);
  try {
    if (command === 'create') {
      if (options.accountId !== undefined && options.accountId.includes('@')) {
        const owner = await store.accounts.findByEmail(options.accountId);
        if (!owner) throw new Error(`no account with the email ${options.accountId}`);
        options.accountId = owner.id;
      }
      const key = await store.create(values.name!.trim(), options);
      const account = await store.accounts.get(key.accountId);
      const balance = account?.balanceMicros === undefined ? 'unlimited' : `${account.balanceMicros / 1e6} USD`;
      console.log(key.key);
      console.error(`created ${key.id} "${key.name}" in account ${key.accountId} ("${account?.name || account?.email || key.accountId}", balance ${balance}); the key above is shown only once.`);
    } else if (command === 'list') {
      for (const key of await store.list({ accountId: values.account })) {
        const limits = `limit=${show(key.limitMicros === undefined ? undefined : key.limitMicros / 1e6, ' USD')} spent=${key.spentMicros / 1e6} USD rpm=${show(key.rpm)} tpm=${show(key.tpm)}`;
        const expires = key.expiresAt === undefined ? 'never' : new Date(key.expiresAt * 1000).toISOString();
        console.log(`${key.id}\t${key.hint}\t${new Date(key.created * 1000).toISOString()}\t${key.accountId}\t${limits}\texpires=${expires}\tmodels=${key.models?.join(',') ?? 'all'}\t${key.name}`);
      }
    } else {
      if (!(await store.revoke(arg!))) {
        console.error(`no key with id ${arg}`);
        return 1;
      }
      console.error(`revoked ${arg}`);
    }
    return 0;
  } finally {
    redis.disconnect();
  }
}

main().then(
  (code) => process.exit(code),
  (error: Error) => {
    console.error(`switchyard keys: ${error.message}`);
    if (error instanceof UsageError) console.error(usage);
    process.exit(error instanceof UsageError ? 2 : 1);
  },
);
