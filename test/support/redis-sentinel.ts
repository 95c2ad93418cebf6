import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  RedisProcessGroup,
  freePorts,
  parseInfo,
  pollUntil,
  redisServerSupport,
  type TopologySupport,
} from './redis-cluster.js';

export interface SentinelNodeAddress {
  host: string;
  port: number;
  /** `127.0.0.1:port` */
  address: string;
}

export interface SentinelFailoverResult {
  /** The promoted replica, answering ROLE as master, reported by every running sentinel. */
  primary: SentinelNodeAddress;
  killed: SentinelNodeAddress;
  /** From the SIGKILL to every running sentinel reporting the new primary. */
  elapsedMs: number;
}

export interface RedisSentinelOptions {
  /** How many sentinels (3 by default); the quorum is a majority of them. */
  sentinels?: number;
  /** The master name sentinels monitor (REDIS_SENTINEL_NAME). */
  name?: string;
  /** `down-after-milliseconds`: how long the primary may not answer before a sentinel counts it down. */
  downAfterMs?: number;
  /** `failover-timeout` (also: a failed-over primary is not failed over again for twice this). */
  failoverTimeoutMs?: number;
  /** How long the whole start may take. */
  timeoutMs?: number;
}

export type RedisSentinelHarness = Awaited<ReturnType<typeof startRedisSentinel>>;

/**
 * Whether Redis Sentinel can be started here: redis-server 7 or newer (run in
 * `--sentinel` mode, so no redis-sentinel binary is needed). Tests skip with
 * `reason` when not (see `reasonToSkip` in redis-cluster.ts).
 */
export function sentinelSupport(): TopologySupport {
  return redisServerSupport('Redis Sentinel tests');
}

const address = (port: number): SentinelNodeAddress => ({ host: '127.0.0.1', port, address: `127.0.0.1:${port}` });

/**
 * A private Sentinel setup on 127.0.0.1: one primary, one replica (`replicaof`)
 * and `sentinels` sentinels, all on free ports with their files in one temporary
 * directory. The sentinels are told of each other and of the replica in their
 * config (`known-sentinel`, `known-replica`), so they need not wait for the
 * 2 s hello round to know each other. Resolves when every sentinel reports the
 * primary healthy, sees the replica in sync and reaches every other sentinel.
 *
 * `stop()` kills everything and deletes the files; so does the end of the test process.
 */
export async function startRedisSentinel(options: RedisSentinelOptions = {}) {
  const support = sentinelSupport();
  if (!support.ok) throw new Error(support.reason);
  const sentinelCount = options.sentinels ?? 3;
  const name = options.name ?? 'switchyard';
  const downAfterMs = options.downAfterMs ?? 1000;
  const failoverTimeoutMs = options.failoverTimeoutMs ?? 5000;
  const timeoutMs = options.timeoutMs ?? 20_000;
  const quorum = Math.floor(sentinelCount / 2) + 1;
  if (sentinelCount < 1) throw new Error('at least one sentinel is needed');

  // A port taken between choosing it and binding it fails the start: try again with new ones.
  for (let attempt = 1; ; attempt++) {
    const group = new RedisProcessGroup('sentinel');
    try {
      return await startOnce(group);
    } catch (error) {
      await group.remove();
      if (attempt === 3 || !/did not start/.test((error as Error).message)) throw error;
    }
  }

  async function startOnce(group: RedisProcessGroup) {
    const startedAt = Date.now();
    const [primaryPort, replicaPort, ...sentinelPorts] = (await freePorts(2 + sentinelCount)) as [
      number,
      number,
      ...number[],
    ];
    const sentinelIds = sentinelPorts.map(() => randomBytes(20).toString('hex'));
    let lastKilled: { node: SentinelNodeAddress; killedAt: number } | undefined;

    function dataConfig(port: number, replicaOf?: number): string {
      const dir = group.nodeDir(port);
      const file = join(dir, 'redis.conf');
      const lines = [
        `port ${port}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        'logfile redis.log',
        'appendonly no',
        'save ""',
        'repl-diskless-sync-delay 0',
        ...(replicaOf ? [`replicaof 127.0.0.1 ${replicaOf}`] : []),
      ];
      // A file, not arguments: sentinel sends CONFIG REWRITE when it promotes or re-points a server.
      writeFileSync(file, lines.join('\n') + '\n');
      return file;
    }

    function sentinelConfig(index: number): string {
      const port = sentinelPorts[index]!;
      const dir = group.nodeDir(port);
      const file = join(dir, 'sentinel.conf');
      const lines = [
        `port ${port}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        'logfile redis.log',
        `sentinel myid ${sentinelIds[index]}`,
        `sentinel monitor ${name} 127.0.0.1 ${primaryPort} ${quorum}`,
        `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
        `sentinel failover-timeout ${name} ${failoverTimeoutMs}`,
        `sentinel parallel-syncs ${name} 1`,
        `sentinel known-replica ${name} 127.0.0.1 ${replicaPort}`,
        ...sentinelPorts.flatMap((other, j) =>
          j === index ? [] : [`sentinel known-sentinel ${name} 127.0.0.1 ${other} ${sentinelIds[j]}`],
        ),
      ];
      // sentinel rewrites this file as it learns: it must be writable
      writeFileSync(file, lines.join('\n') + '\n');
      return file;
    }

    const runningSentinels = () => sentinelPorts.filter((p) => group.isRunning(p));

    /** Sentinel's reply to `SENTINEL MASTER` / `REPLICAS` entries: a flat [field, value, ...] list. */
    const fields = (flat: unknown): Record<string, string> => {
      const out: Record<string, string> = {};
      const list = flat as string[];
      for (let i = 0; i + 1 < list.length; i += 2) out[list[i]!] = String(list[i + 1]);
      return out;
    };

    /** The primary every running sentinel reports (throws when they disagree or none runs). */
    async function reportedPrimary(): Promise<SentinelNodeAddress> {
      const seen = new Set<string>();
      for (const port of runningSentinels()) {
        const [host, p] = (await group.call(port, ['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name])) as [string, string];
        seen.add(`${host}:${p}`);
      }
      if (seen.size !== 1)
        throw new Error(`sentinels disagree on the primary: ${[...seen].join(', ') || 'no sentinel runs'}`);
      const [only] = [...seen];
      return address(Number(only!.split(':')[1]));
    }

    /**
     * Whether every running sentinel sees `primaryPortNow` healthy, with an in-sync replica (unless none is expected)
     * and the other sentinels.
     */
    async function agreed(
      why: (reason: string) => undefined,
      primaryPortNow: number,
      expectReplica: boolean,
    ): Promise<true | undefined> {
      for (const port of runningSentinels()) {
        const master = fields(await group.call(port, ['SENTINEL', 'MASTER', name]));
        if (master.port !== String(primaryPortNow))
          return why(`sentinel ${port} monitors port ${master.port}, not ${primaryPortNow}`);
        if (master.flags !== 'master') return why(`sentinel ${port} sees the primary as ${master.flags}`);
        if (Number(master['num-other-sentinels']) < runningSentinels().length - 1) {
          return why(`sentinel ${port} knows ${master['num-other-sentinels']} other sentinels`);
        }
        const others = ((await group.call(port, ['SENTINEL', 'SENTINELS', name])) as unknown[]).map(fields);
        const unreachable = others.find((s) => group.isRunning(Number(s.port)) && s.flags !== 'sentinel');
        if (unreachable) return why(`sentinel ${port} sees sentinel ${unreachable.port} as ${unreachable.flags}`);
        if (expectReplica) {
          const replicas = ((await group.call(port, ['SENTINEL', 'REPLICAS', name])) as unknown[]).map(fields);
          const good = replicas.find(
            (r) => group.isRunning(Number(r.port)) && r.flags === 'slave' && r['master-link-status'] === 'ok',
          );
          if (!good)
            return why(
              `sentinel ${port} sees no replica in sync (${replicas.map((r) => `${r.port}:${r.flags}:${r['master-link-status']}`).join(' ')})`,
            );
        }
      }
      const role = (await group.call(primaryPortNow, ['ROLE'])) as unknown[];
      if (role[0] !== 'master') return why(`port ${primaryPortNow} answers ROLE with ${String(role[0])}`);
      return true;
    }

    async function primary(): Promise<SentinelNodeAddress> {
      return reportedPrimary();
    }

    /**
     * SIGKILLs the primary the sentinels report now; with `pause`, SIGSTOPs it
     * instead (it hangs with its connections open until `resume(port)`).
     */
    async function killPrimary(opts: { pause?: boolean } = {}): Promise<SentinelNodeAddress> {
      const current = await reportedPrimary();
      await group.kill(current.port, opts.pause ? 'SIGSTOP' : 'SIGKILL');
      lastKilled = { node: current, killedAt: Date.now() };
      return current;
    }

    /**
     * Waits until every running sentinel reports a new primary and it answers
     * ROLE as master; returns it.
     */
    async function waitForFailover(opts: { timeoutMs?: number } = {}): Promise<SentinelFailoverResult> {
      const record = lastKilled;
      if (!record) throw new Error('waitForFailover: no primary was killed');
      const promoted = await pollUntil('the sentinels to fail over', opts.timeoutMs ?? 20_000, async (why) => {
        let now: SentinelNodeAddress;
        try {
          now = await reportedPrimary();
        } catch (error) {
          return why((error as Error).message);
        }
        if (now.port === record.node.port) return why(`the sentinels still report ${now.address}`);
        const role = (await group.call(now.port, ['ROLE'])) as unknown[];
        if (role[0] !== 'master') return why(`${now.address} answers ROLE with ${String(role[0])}`);
        return now;
      });
      return { primary: promoted, killed: record.node, elapsedMs: Date.now() - record.killedAt };
    }

    /**
     * Starts a killed data node again; the sentinels turn a failed-over primary
     * into a replica of the new one. Resolves when the node replicates the
     * current primary and the link is up.
     */
    async function restart(port: number, opts: { timeoutMs?: number } = {}): Promise<SentinelNodeAddress> {
      if (sentinelPorts.includes(port)) {
        await group.restart(port);
        return address(port);
      }
      // Sentinel would turn a returning old primary into a replica only some 10 s after it
      // answers (it waits for the role it reports to settle): start it as a replica at once.
      const current = await reportedPrimary();
      if (current.port !== port) dataConfig(port, current.port);
      await group.restart(port);
      await pollUntil(`${port} to replicate the primary`, opts.timeoutMs ?? 20_000, async (why) => {
        const current = await reportedPrimary();
        if (current.port === port) return true;
        const replication = parseInfo(String(await group.call(port, ['INFO', 'replication'])));
        if (replication.role !== 'slave' || replication.master_port !== String(current.port)) {
          return why(
            `${port} is ${replication.role} of ${replication.master_port ?? 'nobody'}, not of ${current.port}`,
          );
        }
        if (replication.master_link_status !== 'up')
          return why(`${port} has master_link_status:${replication.master_link_status}`);
        return true;
      });
      return address(port);
    }

    /** Waits until every running replica of the current primary has all its writes (see the cluster harness). */
    async function waitReplicasInSync(waitMs = 10_000): Promise<void> {
      await pollUntil('the replica to catch up', waitMs, async (why) => {
        const current = await reportedPrimary();
        const offset = parseInfo(String(await group.call(current.port, ['INFO', 'replication']))).master_repl_offset;
        for (const port of [primaryPort, replicaPort]) {
          if (port === current.port || !group.isRunning(port)) continue;
          const replication = parseInfo(String(await group.call(port, ['INFO', 'replication'])));
          if (replication.master_port !== String(current.port)) continue;
          if (replication.slave_repl_offset !== offset)
            return why(`replica ${port} is at offset ${replication.slave_repl_offset}, the primary at ${offset}`);
        }
        return true;
      });
    }

    async function stop(): Promise<void> {
      await group.remove();
    }

    await group.start(primaryPort, [dataConfig(primaryPort)]);
    await group.start(replicaPort, [dataConfig(replicaPort, primaryPort)]);
    await Promise.all(sentinelPorts.map((port, i) => group.start(port, [sentinelConfig(i), '--sentinel'])));
    try {
      await pollUntil(
        'the sentinels to agree on the primary and see its replica',
        Math.max(1000, timeoutMs - (Date.now() - startedAt)),
        (why) => agreed(why, primaryPort, true),
      );
    } catch (error) {
      const logs = [primaryPort, replicaPort, ...sentinelPorts]
        .map((p) => `--- ${p}:\n${group.logTail(p, 5)}`)
        .join('\n');
      throw new Error(`${(error as Error).message}\n${logs}`);
    }
    const sentinels = sentinelPorts.map((p) => `127.0.0.1:${p}`).join(',');
    return {
      /** `127.0.0.1:p1,...`: every sentinel, as REDIS_SENTINELS takes them. */
      sentinels,
      /** The same as ioredis `sentinels` option. */
      sentinelNodes: sentinelPorts.map((port) => ({ host: '127.0.0.1', port })),
      sentinelPorts,
      /** The master name (REDIS_SENTINEL_NAME). */
      name,
      env: { REDIS_SENTINELS: sentinels, REDIS_SENTINEL_NAME: name } as Record<string, string>,
      /** The data nodes as started: the first primary and its replica. */
      dataPorts: [primaryPort, replicaPort],
      dir: group.dir,
      startMs: Date.now() - startedAt,
      primary,
      killPrimary,
      waitForFailover,
      /**
       * Resolves when the sentinels agree on a healthy primary and see a replica
       * in sync: ready for the next failover. Sentinels refresh what they know of
       * a replica every 10 s, so after a failover, `restart` or `resume` this can
       * take that long; a resumed old primary is turned into a replica only some
       * 10 s after it answers again (until then it is a second primary: see `resume`).
       */
      waitHealthy: async (waitMs = 30_000) => {
        const current = await reportedPrimary();
        await pollUntil('the sentinels to agree on a healthy primary', waitMs, (why) =>
          agreed(why, current.port, true),
        );
        return current;
      },
      waitReplicasInSync,
      restart,
      /** SIGKILLs any process of the setup (a replica, a sentinel) without a failover record. */
      kill: (port: number) => group.kill(port),
      /** SIGSTOP: the process hangs with its connections open, as a stalled machine does. */
      pause: (port: number) => group.kill(port, 'SIGSTOP'),
      /**
       * SIGCONT after `pause` / `killPrimary({ pause: true })`. A primary failed over
       * meanwhile comes back still a primary, and clients connected to it (ioredis
       * without `failoverDetector`) keep writing to it until the sentinels demote it,
       * some 10 s later, and those writes are lost: a split brain to test against.
       */
      resume: (port: number) => group.kill(port, 'SIGCONT'),
      isRunning: (port: number) => group.isRunning(port),
      call: (port: number, ...args: Array<string | number>) => group.call(port, args),
      logTail: (port: number, lines?: number) => group.logTail(port, lines),
      stop,
    };
  }
}
