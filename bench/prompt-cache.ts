/**
 * Prompt-cache affinity (`node --import tsx bench/prompt-cache.ts`, or `BENCH_ONLY=prompt-cache npm run bench`): four
 * channels of one vendor (four keys of the fake OpenAI, whose prompt cache is per key:
 * test/support/fake-prompt-cache.ts) and `BENCH_CACHE_AGENTS` (200) agents of five kinds, each kind with its long
 * system prompt (about 1,500 tokens), each agent a conversation of `BENCH_CACHE_TURNS` (4) turns whose every turn
 * brings a tool's output (about 750 tokens), the agents' turns 50 at a time through a default `npm start`. Measured:
 * the share of each call's prefix (its prompt before its last message: what an earlier call could have cached) read
 * from the vendor's cache, with affinity and with it off (PROMPT_CACHE_AFFINITY_OFF=openai); then a burst of 50 calls
 * with one new prefix, with affinity (and its wait) and without: the cache writes, and the slowest call against the
 * first's time.
 */
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { KeyStore } from '../api/accounts/key-store.js';
import { startFakeOpenAI } from '../test/support/fake-openai.js';
import { fakePromptCache } from '../test/support/fake-prompt-cache.js';
import { benchRedisUrl } from '../test/support/redis-server.js';
import { testRecord } from '../test/support/record.js';
import { installCleanup, stopAll } from './procs.js';
import { log, startGateway, stopGateway } from './stack.js';
import { table } from './table.js';

const int = (name: string, fallback: number) => {
  const raw = process.env[name];
  const value = raw === undefined || raw === '' ? fallback : Number(raw);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got "${raw}"`);
  return value;
};

export interface PromptCacheResults {
  agents: number;
  turns: number;
  runs: Array<{
    affinity: boolean;
    requests: number;
    prefixShare: number;
    promptShare: number;
    p50Ms: number;
    seconds: number;
    burstWrites: number;
    burstSlowestMs: number;
    burstFirstMs: number;
  }>;
}

const systems = Array.from(
  { length: 5 },
  (_, i) =>
    `You are agent kind ${i}. ${'Keep to the house rules, cite them, and say when one does not apply. '.repeat(85)}`,
);
/** A tool's output an agent's turn brings (about 750 tokens), its own. */
const toolOutput = (agent: number, turn: number) =>
  `Tool output for agent ${agent}, turn ${turn}: ${`row ${agent}.${turn} ok; `.repeat(200)}`.slice(0, 3000);

export async function runPromptCacheBench(redisUrl: string, redis: Redis): Promise<PromptCacheResults> {
  const agents = int('BENCH_CACHE_AGENTS', 200);
  const turns = int('BENCH_CACHE_TURNS', 4);
  const cache = fakePromptCache({ firstTokenMs: 0 });
  const fake = await startFakeOpenAI({ record: false });
  fake.setDefault((request) => cache.handler(request));
  const keys = ['sk-bench-a', 'sk-bench-b', 'sk-bench-c', 'sk-bench-d'];
  const keyStore = new KeyStore(redis, await testRecord(redis));
  const account = await keyStore.accounts.create({ email: 'bench-cache@example.com', name: 'bench-cache' });
  await keyStore.accounts.credit(account.id, 10 ** 12, 'bench');
  const apiKey = (
    await keyStore.create('bench-cache', { accountId: account.id, limitMicros: 10 ** 12, rpm: 10 ** 8, tpm: 10 ** 9 })
  ).key;
  const runs: PromptCacheResults['runs'] = [];
  const call = async (url: string, messages: Array<{ role: string; content: string }>) => {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages }),
    });
    if (response.status !== 200) throw new Error(`status ${response.status}: ${await response.text()}`);
    const body = (await response.json()) as { choices: Array<{ message: { content: string } }> };
    return body.choices[0]!.message.content;
  };
  try {
    for (const affinity of [false, true]) {
      cache.reset();
      const gateway = await startGateway('start', fake.url, redisUrl, undefined, {
        env: { OPENAI_API_KEY: keys.join(','), ...(affinity ? {} : { PROMPT_CACHE_AFFINITY_OFF: 'openai' }) },
        logTag: `prompt-cache-${affinity ? 'on' : 'off'}`,
      });
      try {
        log(`prompt-cache: ${agents} agents × ${turns} turns over four channels, affinity ${affinity ? 'on' : 'off'}`);
        const histories = Array.from({ length: agents }, (_, agent) => [
          { role: 'system', content: systems[agent % systems.length]! },
        ]);
        const times: number[] = [];
        const started = performance.now();
        for (let turn = 0; turn < turns; turn++) {
          let next = 0;
          await Promise.all(
            Array.from({ length: 50 }, async () => {
              while (next < agents) {
                const agent = next++;
                const history = histories[agent]!;
                history.push({ role: 'user', content: toolOutput(agent, turn) });
                const at = performance.now();
                history.push({ role: 'assistant', content: await call(gateway.url, history) });
                times.push(performance.now() - at);
              }
            }),
          );
        }
        const seconds = (performance.now() - started) / 1000;
        const { prompt, prefix, cached } = cache.totals();
        times.sort((a, b) => a - b);
        // A burst: 50 calls at once with one new prefix, on a vendor that takes 300 ms to its first token.
        const burst = fakePromptCache({ firstTokenMs: 300 });
        fake.setDefault((request) => burst.handler(request));
        const system = `A new kind of agent (${affinity ? 'on' : 'off'}). ${'Answer in one word, and only when asked twice. '.repeat(120)}`;
        const burstTimes = await Promise.all(
          Array.from({ length: 50 }, async (_, i) => {
            const at = performance.now();
            await call(gateway.url, [
              { role: 'system', content: system },
              { role: 'user', content: `Request ${i}.` },
            ]);
            return performance.now() - at;
          }),
        );
        fake.setDefault((request) => cache.handler(request));
        runs.push({
          affinity,
          requests: agents * turns,
          prefixShare: cached / prefix,
          promptShare: cached / prompt,
          p50Ms: times[Math.floor(times.length / 2)]!,
          seconds,
          burstWrites: burst.totals().writes,
          burstSlowestMs: Math.max(...burstTimes),
          burstFirstMs: Math.min(...burstTimes),
        });
      } finally {
        await stopGateway(gateway);
      }
    }
  } finally {
    await fake.close();
  }
  return { agents, turns, runs };
}

export function promptCacheTable(results: PromptCacheResults): string {
  return table(
    [
      'Affinity',
      'Calls',
      'Prefix read from cache',
      'Prompt read from cache',
      'p50 ms',
      'Seconds',
      'Burst of 50: writes',
      'slowest ms',
      'fastest ms',
    ],
    results.runs.map((run) => [
      run.affinity ? 'on' : 'off',
      String(run.requests),
      `${(run.prefixShare * 100).toFixed(1)} %`,
      `${(run.promptShare * 100).toFixed(1)} %`,
      run.p50Ms.toFixed(1),
      run.seconds.toFixed(1),
      String(run.burstWrites),
      run.burstSlowestMs.toFixed(0),
      run.burstFirstMs.toFixed(0),
    ]),
  );
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  installCleanup();
  const redisUrl = await benchRedisUrl('BENCH_REDIS_URL', 12);
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 3 });
  await redis.flushdb();
  try {
    const results = await runPromptCacheBench(redisUrl, redis);
    process.stdout.write(`${promptCacheTable(results)}\n`);
  } finally {
    redis.disconnect();
    await stopAll();
  }
}
