import { parseArgs } from 'node:util';
import { createRedis } from '../shared/redis.js';
import { KeyStore } from '../api/key-store.js';
import { locateRedis } from './local-redis.js';

const usage = `usage:
  npm run keys -- create --name NAME   create a key and print it (shown once)
  npm run keys -- list                 list keys (no secrets)
  npm run keys -- revoke ID            revoke a key`;

async function main(): Promise<number> {
  const { positionals, values } = parseArgs({ allowPositionals: true, options: { name: { type: 'string' } } });
  const [command, arg] = positionals;
  if (!command || !['create', 'list', 'revoke'].includes(command)) {
    console.error(usage);
    return 2;
  }
  const { url } = await locateRedis(process.env, false);
  const redis = createRedis(url, { maxRetriesPerRequest: 1 });
  const store = new KeyStore(redis);
  try {
    if (command === 'create') {
      if (!values.name?.trim()) {
        console.error('create needs --name NAME');
        return 2;
      }
      const key = await store.create(values.name.trim());
      console.log(key.key);
      console.error(`created ${key.id} "${key.name}"; the key above is shown only once.`);
    } else if (command === 'list') {
      for (const key of await store.list()) console.log(`${key.id}\t${key.hint}\t${new Date(key.created * 1000).toISOString()}\t${key.name}`);
    } else {
      if (!arg) {
        console.error('revoke needs a key id');
        return 2;
      }
      if (!(await store.revoke(arg))) {
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
    process.exit(1);
  },
);
