import { readFileSync } from 'node:fs';
/**
 * RESP2 against RESP3 for the kinds of traffic the gateway sends, on one
 * Redis, in one process: what each costs the client (CPU µs per operation,
 * where the protocol's parsing shows) and Redis (`INFO cpu` delta), rounds
 * alternating the protocols so drift hits both alike.
 *
 *   node --import tsx bench/resp-protocol.ts
 *
 * Environment: BENCH_REDIS_URL (default: a private redis-server), BENCH_RESP_OPS
 * (operations per kind and round, default 40000), BENCH_RESP_ROUNDS (default 6).
 */
import { Redis } from 'ioredis';
import { processPrivateRedis } from '../test/support/redis-server.js';

const ops = Number(process.env.BENCH_RESP_OPS ?? 40_000);
const rounds = Number(process.env.BENCH_RESP_ROUNDS ?? 6);
const batch = 200;

type Protocol = 2 | 3;
interface Kind {
  name: string;
  run(client: Redis, extra: { subscriber: Redis; publisher: Redis }): Promise<void>;
}

// A reply shaped like admission's: an array of numbers from a script.
const scriptReply = readFileSync(new URL('./lua/admission-reply.lua', import.meta.url), 'utf8');
const value = 'x'.repeat(200);
const chunk = JSON.stringify({
  id: 'chatcmpl-1',
  object: 'chat.completion.chunk',
  choices: [{ index: 0, delta: { content: 'hello there' } }],
});

const kinds: Kind[] = [
  {
    name: 'GET 200 B',
    async run(client) {
      for (let i = 0; i < ops; i += batch)
        await Promise.all(Array.from({ length: batch }, () => client.get('resp:value')));
    },
  },
  {
    name: 'HGETALL 10 fields',
    async run(client) {
      for (let i = 0; i < ops; i += batch)
        await Promise.all(Array.from({ length: batch }, () => client.hgetall('resp:hash')));
    },
  },
  {
    name: 'script, 8-number reply',
    async run(client) {
      const scripted = client as Redis & { admission(): Promise<number[]> };
      for (let i = 0; i < ops; i += batch) await Promise.all(Array.from({ length: batch }, () => scripted.admission()));
    },
  },
  {
    name: 'pub/sub message received',
    async run(_client, { subscriber, publisher }) {
      let received = 0;
      const done = new Promise<void>((resolve) => {
        const onMessage = () => {
          if (++received === ops) {
            subscriber.off('message', onMessage);
            resolve();
          }
        };
        subscriber.on('message', onMessage);
      });
      for (let i = 0; i < ops; i += batch)
        await Promise.all(Array.from({ length: batch }, () => publisher.publish('resp:channel', chunk)));
      await done;
    },
  },
];

async function redisCpuUs(admin: Redis): Promise<number> {
  const info = await admin.info('cpu');
  const read = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? 0);
  return (read('used_cpu_sys') + read('used_cpu_user')) * 1e6;
}

async function main(): Promise<void> {
  const url = process.env.BENCH_REDIS_URL ?? `${(await processPrivateRedis()).url}/0`;
  const admin = new Redis(url, { protocol: 2 });
  await admin.set('resp:value', value);
  await admin.hset(
    'resp:hash',
    Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`field${i}`, `value-${i}-${value.slice(0, 20)}`])),
  );

  const results = new Map<string, { client: number[]; redis: number[]; wall: number[] }>();
  const connect = async (protocol: Protocol) => {
    const client = new Redis(url, { protocol, maxRetriesPerRequest: null });
    client.defineCommand('admission', { numberOfKeys: 0, lua: scriptReply });
    const subscriber = new Redis(url, { protocol, maxRetriesPerRequest: null });
    const publisher = new Redis(url, { protocol: 2, maxRetriesPerRequest: null });
    await subscriber.subscribe('resp:channel');
    await Promise.all([client.ping(), publisher.ping()]);
    const spoken = /\bresp=(\d)/.exec(String(await client.client('INFO')))?.[1];
    if (spoken !== String(protocol)) throw new Error(`asked for RESP${protocol}, the connection speaks RESP${spoken}`);
    return { client, subscriber, publisher };
  };

  for (let round = 0; round < rounds; round++) {
    const order: Protocol[] = round % 2 === 0 ? [2, 3] : [3, 2];
    for (const protocol of order) {
      const { client, subscriber, publisher } = await connect(protocol);
      for (const kind of kinds) {
        // One unmeasured run first.
        await kind.run(client, { subscriber, publisher }).catch((error: unknown) => {
          throw new Error(`${kind.name} on RESP${protocol}: ${(error as Error).message}`);
        });
        const redisBefore = await redisCpuUs(admin);
        const cpuBefore = process.cpuUsage();
        const started = process.hrtime.bigint();
        await kind.run(client, { subscriber, publisher });
        const wall = Number(process.hrtime.bigint() - started) / 1e3;
        const cpu = process.cpuUsage(cpuBefore);
        const redis = (await redisCpuUs(admin)) - redisBefore;
        const key = `${kind.name}|${protocol}`;
        const entry = results.get(key) ?? { client: [], redis: [], wall: [] };
        // The client's CPU includes the publisher's (RESP2 in both): the same work on both sides of the comparison.
        entry.client.push((cpu.user + cpu.system) / ops);
        entry.redis.push(redis / ops);
        entry.wall.push(wall / ops);
        results.set(key, entry);
      }
      client.disconnect();
      subscriber.disconnect();
      publisher.disconnect();
    }
    console.error(`[resp] round ${round + 1}/${rounds} done`);
  }
  admin.disconnect();

  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  console.log(
    `RESP2 against RESP3, Node ${process.version}, ${ops} operations per kind and round, ${rounds} rounds (medians)`,
  );
  console.log(
    '| traffic | client µs/op RESP2 | RESP3 | RESP3 ÷ RESP2 | Redis µs/op RESP2 | RESP3 | wall µs/op RESP2 | RESP3 |',
  );
  console.log('|---|---|---|---|---|---|---|---|');
  for (const kind of kinds) {
    const two = results.get(`${kind.name}|2`)!;
    const three = results.get(`${kind.name}|3`)!;
    const f = (n: number) => n.toFixed(2);
    console.log(
      `| ${kind.name} | ${f(median(two.client))} | ${f(median(three.client))} | ` +
        `${(median(three.client) / median(two.client)).toFixed(2)}× | ${f(median(two.redis))} | ` +
        `${f(median(three.redis))} | ${f(median(two.wall))} | ${f(median(three.wall))} |`,
    );
  }
  process.exit(0);
}

void main();
