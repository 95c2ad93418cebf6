import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from '../../bin/local-redis.js';
import { onProcessEnd } from './process-end.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// ---- which topologies this machine can run ------------------------------------------------

export type TopologySupport = { ok: true; version: string } | { ok: false; reason: string };

let serverVersion: { version?: string; error?: string } | undefined;
/** redis-server's version (`7.0.15`), or why it cannot be run here; looked up once per process. */
function redisServerVersion(): { version?: string; error?: string } {
  if (serverVersion) return serverVersion;
  const run = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (run.error || run.status !== 0) {
    serverVersion = { error: 'redis-server is not installed (e.g. `apt-get install redis-server`)' };
  } else {
    const version = /v=(\d+\.\d+\.\d+)/.exec(run.stdout)?.[1];
    serverVersion = version
      ? { version }
      : { error: `cannot tell redis-server's version from ${JSON.stringify(run.stdout.trim())}` };
  }
  return serverVersion;
}

function atLeast(version: string, major: number, minor: number): boolean {
  const [ma = 0, mi = 0] = version.split('.').map(Number);
  return ma > major || (ma === major && mi >= minor);
}

/** Whether redis-server 7 or newer can be run here; `what` names the tests in the reason. */
export function redisServerSupport(what: string): TopologySupport {
  const { version, error } = redisServerVersion();
  if (!version) return { ok: false, reason: `${what} need redis-server >= 7: ${error}` };
  if (!atLeast(version, 7, 0)) return { ok: false, reason: `${what} need redis-server >= 7, this one is ${version}` };
  return { ok: true, version };
}

/**
 * Whether a Redis Cluster can be started here: redis-server 7 or newer (sharded
 * pub/sub, `cluster-port`, `CLUSTER SHARDS`) and redis-cli (`--cluster create`).
 * Tests skip with `reason` when not: `describe(..., { skip: reasonToSkip(clusterSupport()) })`.
 */
export function clusterSupport(): TopologySupport {
  const support = redisServerSupport('Redis Cluster tests');
  if (!support.ok) return support;
  if (spawnSync('redis-cli', ['--version'], { stdio: 'ignore' }).status !== 0) {
    return {
      ok: false,
      reason: 'Redis Cluster tests need redis-cli (for `redis-cli --cluster create`), which is not installed',
    };
  }
  return support;
}

/** For node:test's `skip` option: false when supported, else the reason (printed with the skip). */
export function reasonToSkip(support: TopologySupport): string | false {
  return support.ok ? false : support.reason;
}

// ---- a group of redis-server processes in one temporary directory --------------------------

interface GroupProcess {
  port: number;
  dir: string;
  args: string[];
  proc?: ChildProcess;
}

const liveGroups = new Set<RedisProcessGroup>();

function running(proc: ChildProcess | undefined): proc is ChildProcess {
  return !!proc && proc.exitCode === null && proc.signalCode === null;
}

function killQuietly(proc: ChildProcess | undefined, signal: NodeJS.Signals = 'SIGKILL'): void {
  if (running(proc)) {
    try {
      proc.kill(signal);
    } catch {
      // already gone
    }
  }
}

/** Synchronous, so it can run in an 'exit' listener: SIGKILLs every server of every group and deletes its directory. */
function cleanupAllGroups(): void {
  for (const group of liveGroups) group.removeNow();
  liveGroups.clear();
}

let reaperInstalled = false;
/** When the event loop runs dry, stops what is left and waits for it, so init reaps no server of ours. */
function installReaper(): void {
  if (reaperInstalled) return;
  reaperInstalled = true;
  process.on('beforeExit', () => {
    if (liveGroups.size > 0) void Promise.all([...liveGroups].map((group) => group.remove()));
  });
}

/**
 * The watchdog for a SIGKILLed test process (see redis-server.ts): one per group,
 * holding the read end of a pipe from us. When it closes, it SIGKILLs every pid
 * listed in `<dir>/pids` (kept current as servers are started and killed) and
 * deletes the group's directory.
 */
function startGroupGuard(dir: string): ChildProcess {
  const script = [
    "trap '' INT HUP",
    'cat >/dev/null',
    'pids=$(cat "$1/pids" 2>/dev/null)',
    'for p in $pids; do kill -9 "$p" 2>/dev/null; done',
    'for p in $pids; do i=0; while [ "$i" -lt 40 ] && [ -e "/proc/$p" ] && ! grep -q ") Z" "/proc/$p/stat" ' +
      '2>/dev/null; do sleep 0.05; i=$((i + 1)); done; done',
    'rm -rf "$1"',
  ].join('; ');
  const guard = spawn('sh', ['-c', script, 'switchyard-redis-group-guard', dir], {
    stdio: ['pipe', 'ignore', 'ignore'],
    detached: true,
  });
  guard.on('error', () => undefined);
  guard.stdin!.on('error', () => undefined);
  guard.unref();
  (guard.stdin as Socket).unref();
  return guard;
}

/** `count` distinct ports nobody listens on right now. */
export async function freePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort());
  return [...ports];
}

/**
 * redis-server processes (data nodes or sentinels) of one topology, each in
 * `<dir>/<port>/` with its log in `redis.log`, killed and deleted together when
 * the process ends however it ends. Shared by redis-cluster.ts and redis-sentinel.ts.
 */
export class RedisProcessGroup {
  readonly dir: string;
  private readonly nodes = new Map<number, GroupProcess>();
  private readonly admins = new Map<number, Redis>();
  private readonly paused = new Set<number>();
  private guard: ChildProcess | undefined;
  private removed = false;

  constructor(label: string) {
    this.dir = mkdtempSync(join(tmpdir(), `switchyard-redis-${label}-`));
    liveGroups.add(this);
    onProcessEnd(cleanupAllGroups);
    installReaper();
    this.guard = startGroupGuard(this.dir);
  }

  /** The directory of the server on `port` (created here). */
  nodeDir(port: number): string {
    const dir = join(this.dir, String(port));
    mkdirSync(dir, { recursive: true });
    return dir;
  }

  /**
   * Starts `redis-server ...args` for `port` (the args must make it listen there)
   * and waits until it answers PING. Remembers the args for `restart`.
   */
  async start(port: number, args: string[]): Promise<void> {
    if (this.removed) throw new Error('this Redis topology was stopped');
    const dir = this.nodeDir(port);
    const node: GroupProcess = this.nodes.get(port) ?? { port, dir, args };
    node.args = args;
    this.nodes.set(port, node);
    await this.launch(node);
  }

  /** Starts the server on `port` again, with the args it was first started with. */
  async restart(port: number): Promise<void> {
    const node = this.nodes.get(port);
    if (!node) throw new Error(`no Redis of this topology on port ${port}`);
    if (running(node.proc)) throw new Error(`the Redis on port ${port} is running (or paused): kill it first`);
    await this.launch(node);
  }

  private async launch(node: GroupProcess): Promise<void> {
    const proc = spawn('redis-server', node.args, { cwd: node.dir, stdio: 'ignore' });
    proc.on('error', () => undefined);
    proc.unref();
    node.proc = proc;
    proc.once('exit', () => this.writePids());
    this.writePids();
    const probe = new Redis({
      host: '127.0.0.1',
      port: node.port,
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    probe.on('error', () => undefined);
    try {
      for (let i = 0; i < 200; i++) {
        if (!running(proc) || proc.pid === undefined) break;
        try {
          await probe.connect();
          await probe.ping();
          return;
        } catch {
          await sleep(25);
        }
      }
    } finally {
      probe.disconnect();
    }
    killQuietly(proc);
    throw new Error(
      `redis-server on port ${node.port} did not start (exit ${proc.exitCode ?? proc.signalCode ?? 'none'}); its log ends:\n${this.logTail(node.port)}`,
    );
  }

  private writePids(): void {
    if (this.removed) return;
    const pids = [...this.nodes.values()].flatMap((n) =>
      running(n.proc) && n.proc.pid !== undefined ? [n.proc.pid] : [],
    );
    try {
      writeFileSync(join(this.dir, 'pids'), pids.join('\n') + '\n');
    } catch {
      // the directory is being removed
    }
  }

  /** Drops a server that is not running (one that failed to start), and its directory. */
  async forget(port: number): Promise<void> {
    await this.kill(port);
    this.nodes.delete(port);
    this.writePids();
    rmSync(join(this.dir, String(port)), { recursive: true, force: true });
  }

  ports(): number[] {
    return [...this.nodes.keys()];
  }

  /** Whether the server on `port` runs and is not paused (SIGSTOP): whether it should answer. */
  isRunning(port: number): boolean {
    return running(this.nodes.get(port)?.proc) && !this.paused.has(port);
  }

  /**
   * Sends `signal` (SIGKILL by default: a crash or an OOM kill) and, unless it is SIGSTOP/SIGCONT, waits for the exit.
   */
  async kill(port: number, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const node = this.nodes.get(port);
    if (!node) throw new Error(`no Redis of this topology on port ${port}`);
    this.dropAdmin(port);
    const proc = node.proc;
    if (!running(proc)) return;
    if (signal === 'SIGSTOP' || signal === 'SIGCONT') {
      proc.kill(signal);
      if (signal === 'SIGSTOP') this.paused.add(port);
      else this.paused.delete(port);
      return;
    }
    this.paused.delete(port);
    const exited = once(proc, 'exit');
    proc.ref();
    proc.kill(signal);
    await exited;
    proc.unref();
  }

  /**
   * One command to the server on `port`, on a connection kept per port (made
   * again after a failure); rejects within `timeoutMs` when it does not answer.
   */
  async call(port: number, args: Array<string | number>, timeoutMs = 2000): Promise<unknown> {
    let admin = this.admins.get(port);
    if (!admin || admin.status === 'end' || admin.status === 'close') {
      admin?.disconnect();
      admin = new Redis({
        host: '127.0.0.1',
        port,
        lazyConnect: true,
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
        connectTimeout: timeoutMs,
        commandTimeout: timeoutMs,
        enableReadyCheck: false,
        connectionName: 'switchyard-topology-harness',
      });
      admin.on('error', () => undefined);
      this.admins.set(port, admin);
    }
    try {
      if (admin.status === 'wait') await admin.connect();
      const [command, ...rest] = args;
      return await admin.call(String(command), ...rest);
    } catch (error) {
      this.dropAdmin(port);
      throw error;
    }
  }

  /** `INFO <section>` of the server on `port` as fields. */
  async info(port: number, section: string): Promise<Record<string, string>> {
    return parseInfo(String(await this.call(port, ['INFO', section])));
  }

  private dropAdmin(port: number): void {
    this.admins.get(port)?.disconnect();
    this.admins.delete(port);
  }

  /** The last lines of the log of the server on `port`, for error messages. */
  logTail(port: number, lines = 15): string {
    const file = join(this.dir, String(port), 'redis.log');
    if (!existsSync(file)) return '(no log)';
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  }

  /** Kills every server (waiting for each), deletes the directory. Idempotent. */
  async remove(): Promise<void> {
    if (this.removed) return;
    for (const port of [...this.admins.keys()]) this.dropAdmin(port);
    await Promise.all(this.ports().map((port) => this.kill(port)));
    this.removeNow();
  }

  /** Synchronous: SIGKILLs every server without waiting and deletes the directory. */
  removeNow(): void {
    this.removed = true;
    for (const admin of this.admins.values()) admin.disconnect();
    this.admins.clear();
    for (const node of this.nodes.values()) killQuietly(node.proc);
    killQuietly(this.guard);
    this.guard = undefined;
    try {
      rmSync(this.dir, { recursive: true, force: true, maxRetries: 3 });
    } catch {
      // the guard removes it too
    }
    liveGroups.delete(this);
  }
}

export function parseInfo(text: string): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const line of text.split(/\r?\n/)) {
    const at = line.indexOf(':');
    if (at > 0 && !line.startsWith('#')) fields[line.slice(0, at)] = line.slice(at + 1);
  }
  return fields;
}

/**
 * Polls `check` until it returns a value other than undefined/false; throws
 * with `what` and the last reason `check` gave (through `why`) after `timeoutMs`.
 */
export async function pollUntil<T>(
  what: string,
  timeoutMs: number,
  check: (why: (reason: string) => undefined) => Promise<T | undefined | false>,
  intervalMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last = 'not checked yet';
  const started = Date.now();
  const trace = process.env.SWITCHYARD_TOPOLOGY_TRACE
    ? (line: string) => process.stderr.write(`[topology +${Date.now() - started} ms] ${what}: ${line}\n`)
    : undefined;
  const why = (reason: string) => {
    if (trace && reason !== last) trace(reason);
    last = reason;
    return undefined;
  };
  for (;;) {
    try {
      const result = await check(why);
      if (result !== undefined && result !== false) return result;
    } catch (error) {
      why(error instanceof Error ? error.message : String(error));
    }
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}: ${last}`);
    await sleep(intervalMs);
  }
}

// ---- Redis Cluster --------------------------------------------------------------------------

export interface ClusterNode {
  id: string;
  host: string;
  port: number;
  /** `127.0.0.1:port` */
  address: string;
  role: 'primary' | 'replica';
  /** For a replica, the id of its primary. */
  primaryId?: string;
  /** Slot ranges [first, last] (inclusive) served by this node when a primary. */
  slots: Array<[number, number]>;
  /** The flags of CLUSTER NODES (`master`, `slave`, `fail`, `fail?`, `myself`, ...). */
  flags: string[];
  /** Seen as failing (`fail` or `fail?`) by the node that was asked. */
  failed: boolean;
}

export interface ClusterPrimary extends ClusterNode {
  replicas: ClusterNode[];
}

export interface KilledPrimary {
  node: ClusterPrimary;
  /** Date.now() when SIGKILL was sent. */
  killedAt: number;
}

export interface FailoverResult {
  /** The promoted primary, serving every slot of the killed one. */
  primary: ClusterPrimary;
  killed: ClusterPrimary;
  /** From the SIGKILL to the cluster being ok again on every surviving node. */
  elapsedMs: number;
}

export interface RedisClusterOptions {
  /** At least 3 (redis-cli --cluster create refuses fewer). */
  primaries?: number;
  replicasPerPrimary?: number;
  /**
   * `cluster-node-timeout`: how long a node may not answer before it counts as failing (failover takes about this plus
   * 1-2 s).
   */
  nodeTimeoutMs?: number;
  /** More `--option value` arguments for every node. */
  extraArgs?: string[];
  /** How long the whole start may take. */
  timeoutMs?: number;
}

export type RedisClusterHarness = Awaited<ReturnType<typeof startRedisCluster>>;

/** Parses CLUSTER NODES output. */
export function parseClusterNodes(text: string): ClusterNode[] {
  const nodes: ClusterNode[] = [];
  for (const line of text.split('\n')) {
    const fields = line.trim().split(' ');
    if (fields.length < 8) continue;
    const [id = '', addr = '', flagText = '', primaryId = '-'] = fields;
    const hostPort = addr.split('@')[0]!.split(',')[0]!;
    const colon = hostPort.lastIndexOf(':');
    const host = hostPort.slice(0, colon);
    const port = Number(hostPort.slice(colon + 1));
    const flags = flagText.split(',');
    const slots: Array<[number, number]> = [];
    for (const slot of fields.slice(8)) {
      if (slot.startsWith('[')) continue; // a slot being migrated or imported
      const [first, last = first] = slot.split('-');
      slots.push([Number(first), Number(last)]);
    }
    const role = flags.includes('master') ? 'primary' : 'replica';
    nodes.push({
      id,
      host,
      port,
      address: `${host}:${port}`,
      role,
      ...(role === 'replica' && primaryId !== '-' ? { primaryId } : {}),
      slots,
      flags,
      failed: flags.includes('fail') || flags.includes('fail?'),
    });
  }
  return nodes;
}

function slotCount(slots: Array<[number, number]>): number {
  return slots.reduce((sum, [first, last]) => sum + last - first + 1, 0);
}

function sameSlots(a: Array<[number, number]>, b: Array<[number, number]>): boolean {
  const norm = (s: Array<[number, number]>) => JSON.stringify([...s].sort((x, y) => x[0] - y[0]));
  return norm(a) === norm(b);
}

function withReplicas(nodes: ClusterNode[]): ClusterPrimary[] {
  return nodes
    .filter((n) => n.role === 'primary' && n.slots.length > 0)
    .sort((a, b) => a.slots[0]![0] - b.slots[0]![0])
    .map((p) => ({ ...p, replicas: nodes.filter((n) => n.primaryId === p.id) }));
}

function runRedisCli(args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('redis-cli', args, { timeout: timeoutMs, encoding: 'utf8' }, (error, stdout, stderr) => {
      // redis-cli colours its output even when it is not a terminal
      const output = `${stdout}${stderr}`.replace(/\x1b\[[0-9;]*m/g, '');
      if (error) reject(new Error(`redis-cli ${args.join(' ')} failed: ${error.message}\n${output}`));
      else resolve(output);
    });
  });
}

/**
 * A private Redis Cluster on 127.0.0.1: `primaries` x (1 + `replicasPerPrimary`)
 * redis-server processes on free ports (the cluster bus on another free port,
 * `cluster-port`), no persistence, created with `redis-cli --cluster create`.
 * Resolves when every node reports `cluster_state:ok`, sees every other node,
 * all 16384 slots are served and every replica is in sync with its primary.
 *
 * Nothing is left behind: `stop()` kills every node and deletes the data; so
 * does the end of the test process, however it ends.
 */
export async function startRedisCluster(options: RedisClusterOptions = {}) {
  const support = clusterSupport();
  if (!support.ok) throw new Error(support.reason);
  const primaryCount = options.primaries ?? 3;
  const replicasPerPrimary = options.replicasPerPrimary ?? 1;
  const nodeTimeoutMs = options.nodeTimeoutMs ?? 2000;
  const timeoutMs = options.timeoutMs ?? 30_000;
  if (primaryCount < 3) throw new Error('redis-cli --cluster create needs at least 3 primaries');
  const total = primaryCount * (1 + replicasPerPrimary);
  const startedAt = Date.now();

  const group = new RedisProcessGroup('cluster');
  let lastKilled: KilledPrimary | undefined;

  function nodeArgs(port: number, busPort: number): string[] {
    return [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      group.nodeDir(port),
      '--logfile',
      join(group.nodeDir(port), 'redis.log'),
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      `nodes-${port}.conf`,
      '--cluster-port',
      String(busPort),
      '--cluster-node-timeout',
      String(nodeTimeoutMs),
      // a replica may always take over, however long it was cut off
      '--cluster-replica-validity-factor',
      '0',
      '--appendonly',
      'no',
      '--save',
      '',
      // no 5 s wait before a full sync to a new replica
      '--repl-diskless-sync-delay',
      '0',
      ...(options.extraArgs ?? []),
    ];
  }

  const usedPorts = new Set<number>();
  /** Ports not handed to any node of this cluster before. */
  async function newPorts(count: number): Promise<number[]> {
    const ports: number[] = [];
    while (ports.length < count) {
      const port = await freePort();
      if (!usedPorts.has(port)) {
        usedPorts.add(port);
        ports.push(port);
      }
    }
    return ports;
  }

  /** Starts one node on `port`; when a port was taken meanwhile, tries others. */
  async function startNode(port: number, busPort: number): Promise<number> {
    for (let attempt = 1; ; attempt++) {
      try {
        await group.start(port, nodeArgs(port, busPort));
        return port;
      } catch (error) {
        if (attempt === 3) throw error;
        await group.forget(port);
        [port, busPort] = (await newPorts(2)) as [number, number];
      }
    }
  }

  const livePorts = () => group.ports().filter((p) => group.isRunning(p));

  /** CLUSTER NODES as seen by `port`, or by the first running node that answers. */
  async function clusterNodes(port?: number): Promise<ClusterNode[]> {
    const ports = port === undefined ? livePorts() : [port];
    let lastError: unknown = new Error('no cluster node is running');
    for (const p of ports) {
      try {
        return parseClusterNodes(String(await group.call(p, ['CLUSTER', 'NODES'])));
      } catch (error) {
        lastError = error;
      }
    }
    throw lastError;
  }

  async function primaries(): Promise<ClusterPrimary[]> {
    return withReplicas(await clusterNodes());
  }

  async function primaryForSlot(slot: number): Promise<ClusterPrimary> {
    const found = (await primaries()).find((p) => p.slots.some(([first, last]) => slot >= first && slot <= last));
    if (!found) throw new Error(`no primary serves slot ${slot}`);
    return found;
  }

  async function slotOf(key: string): Promise<number> {
    for (const p of livePorts()) {
      try {
        return Number(await group.call(p, ['CLUSTER', 'KEYSLOT', key]));
      } catch {
        // try the next node
      }
    }
    throw new Error('no cluster node is running');
  }

  async function primaryForKey(key: string): Promise<ClusterPrimary> {
    return primaryForSlot(await slotOf(key));
  }

  /**
   * Whether every running node sees the cluster healthy: `cluster_state:ok`,
   * all slots served by non-failing primaries known to every node, the same
   * slot map everywhere, and (unless `replicasMayLag`) every running replica in sync.
   */
  async function healthy(
    why: (reason: string) => undefined,
    expect?: { nodes?: number; primaries?: number; replicasPerPrimary?: number },
  ): Promise<ClusterPrimary[] | undefined> {
    const ports = livePorts();
    let reference: string | undefined;
    let result: ClusterPrimary[] | undefined;
    for (const port of ports) {
      const info = parseInfo(String(await group.call(port, ['CLUSTER', 'INFO'])));
      if (info.cluster_state !== 'ok') return why(`node ${port} reports cluster_state:${info.cluster_state}`);
      if (info.cluster_slots_ok !== '16384')
        return why(`node ${port} reports cluster_slots_ok:${info.cluster_slots_ok}`);
      const nodes = await clusterNodes(port);
      if (expect?.nodes !== undefined && nodes.length !== expect.nodes)
        return why(`node ${port} knows ${nodes.length} of ${expect.nodes} nodes`);
      const unsettled = nodes.find((n) => n.flags.includes('handshake') || n.flags.includes('noaddr'));
      if (unsettled) return why(`node ${port} is still meeting ${unsettled.address} (${unsettled.flags.join(',')})`);
      for (const n of nodes) {
        if (group.isRunning(n.port) && n.failed)
          return why(`node ${port} sees running node ${n.address} as ${n.flags.join(',')}`);
      }
      const owners = withReplicas(nodes);
      const failing = owners.find((p) => p.failed);
      if (failing) return why(`node ${port} sees primary ${failing.address} serving slots as failing`);
      const covered = owners.reduce((sum, p) => sum + slotCount(p.slots), 0);
      if (covered !== 16384) return why(`node ${port} sees ${covered} of 16384 slots served`);
      const map = JSON.stringify(owners.map((p) => [p.id, p.slots]));
      if (reference === undefined) {
        reference = map;
        result = owners;
      } else if (map !== reference) {
        return why(`nodes disagree on the slot map (node ${port} differs)`);
      }
    }
    if (!result) return why('no cluster node is running');
    if (expect?.primaries !== undefined && result.length !== expect.primaries)
      return why(`${result.length} of ${expect.primaries} primaries serve slots`);
    if (expect?.replicasPerPrimary !== undefined) {
      const short = result.find((p) => p.replicas.length !== expect.replicasPerPrimary);
      if (short)
        return why(`primary ${short.address} has ${short.replicas.length} of ${expect.replicasPerPrimary} replicas`);
    }
    // every running replica is attached and in sync
    for (const primary of result) {
      for (const replica of primary.replicas) {
        if (!group.isRunning(replica.port)) continue;
        const replication = await group.info(replica.port, 'replication');
        if (replication.role !== 'slave') return why(`replica ${replica.address} reports role:${replication.role}`);
        if (replication.master_link_status !== 'up')
          return why(`replica ${replica.address} has master_link_status:${replication.master_link_status}`);
        if (replication.master_sync_in_progress !== '0') return why(`replica ${replica.address} is still syncing`);
        if (replication.master_port !== String(primary.port))
          return why(`replica ${replica.address} still follows port ${replication.master_port}`);
      }
    }
    return result;
  }

  function waitHealthy(
    what: string,
    waitMs: number,
    expect?: { nodes?: number; primaries?: number; replicasPerPrimary?: number },
  ): Promise<ClusterPrimary[]> {
    return pollUntil(what, waitMs, (why) => healthy(why, expect));
  }

  /**
   * SIGKILLs a primary: `target` is its port, a key (`{ key }`) or a slot
   * (`{ slot }`) it serves. With `pause`, SIGSTOPs it instead: it hangs with its
   * connections open, as a stalled machine does, until `resume(port)`; a
   * resumed primary that was failed over meanwhile turns into a replica.
   * `waitForFailover()` then waits for one of its replicas to take over.
   */
  async function killPrimary(
    target: number | { key: string } | { slot: number },
    opts: { pause?: boolean } = {},
  ): Promise<KilledPrimary> {
    let primary: ClusterPrimary | undefined;
    if (typeof target === 'number') {
      primary = (await primaries()).find((p) => p.port === target);
      if (!primary) throw new Error(`the node on port ${target} is not a primary serving slots`);
    } else if ('key' in target) {
      primary = await primaryForKey(target.key);
    } else {
      primary = await primaryForSlot(target.slot);
    }
    await group.kill(primary.port, opts.pause ? 'SIGSTOP' : 'SIGKILL');
    const record = { node: primary, killedAt: Date.now() };
    lastKilled = record;
    return record;
  }

  /**
   * Waits until one of the replicas of the primary killed last (or of `killed`)
   * was promoted, serves all its slots, and every surviving node reports
   * `cluster_state:ok` with the same slot map; returns the new primary.
   */
  async function waitForFailover(opts: { killed?: KilledPrimary; timeoutMs?: number } = {}): Promise<FailoverResult> {
    const record = opts.killed ?? lastKilled;
    if (!record) throw new Error('waitForFailover: no primary was killed');
    const old = record.node;
    const replicaIds = new Set(old.replicas.map((r) => r.id));
    if (replicaIds.size === 0) throw new Error(`the killed primary ${old.address} had no replica to promote`);
    const primary = await pollUntil(
      `a replica of ${old.address} to take over`,
      opts.timeoutMs ?? 20_000,
      async (why) => {
        const owners = await healthy(why);
        if (!owners) return undefined;
        const successor = owners.find((p) => replicaIds.has(p.id));
        if (!successor) return why(`no replica of ${old.address} is a primary yet`);
        if (!sameSlots(successor.slots, old.slots))
          return why(
            `${successor.address} serves ${JSON.stringify(successor.slots)}, not all of ${JSON.stringify(old.slots)}`,
          );
        const role = (await group.call(successor.port, ['ROLE'])) as unknown[];
        if (role[0] !== 'master') return why(`${successor.address} answers ROLE with ${String(role[0])}`);
        return successor;
      },
    );
    return { primary, killed: old, elapsedMs: Date.now() - record.killedAt };
  }

  /**
   * Starts a killed node again with its old cluster config; a primary that was
   * failed over rejoins as a replica of the node that took over. Resolves when
   * the cluster is healthy again and the node (if a replica) is in sync.
   */
  async function restart(port: number, opts: { timeoutMs?: number } = {}): Promise<ClusterNode> {
    await group.restart(port);
    // A failed-over primary comes back still calling itself a primary (of no slots) until the cluster tells it
    // whom it now replicates: wait for that too, not just for a healthy cluster.
    return pollUntil(`node ${port} to rejoin the cluster`, opts.timeoutMs ?? 20_000, async (why) => {
      const owners = await healthy(why, { nodes: total });
      if (!owners) return undefined;
      const node = owners.flatMap((p) => [p, ...p.replicas]).find((n) => n.port === port);
      return node ?? why(`node ${port} serves no slot and replicates no primary yet`);
    });
  }

  /**
   * Waits until every running replica has every write its running primary
   * took so far (replication offsets equal), so a primary killed next loses
   * nothing: replication is asynchronous, and a write acknowledged just before
   * a SIGKILL is otherwise lost with it.
   */
  async function waitReplicasInSync(waitMs = 10_000): Promise<void> {
    await pollUntil('the replicas to catch up', waitMs, async (why) => {
      for (const primary of await primaries()) {
        if (!group.isRunning(primary.port)) continue;
        const offset = (await group.info(primary.port, 'replication')).master_repl_offset;
        for (const replica of primary.replicas) {
          if (!group.isRunning(replica.port)) continue;
          const replication = await group.info(replica.port, 'replication');
          if (replication.slave_repl_offset !== offset) {
            return why(
              `replica ${replica.address} is at offset ${replication.slave_repl_offset}, its primary at ${offset}`,
            );
          }
        }
      }
      return true;
    });
  }

  /** Kills (SIGKILL) any node, primary or replica, without a failover record. */
  async function kill(port: number): Promise<void> {
    await group.kill(port);
  }

  /**
   * SIGSTOP: the node hangs without closing its connections, as a stalled machine does (health checks leave it out).
   */
  async function pause(port: number): Promise<void> {
    await group.kill(port, 'SIGSTOP');
  }
  /**
   * SIGCONT after `pause` (or `killPrimary(..., { pause: true })`); resolves when the cluster is healthy with it again.
   */
  async function resume(port: number, opts: { timeoutMs?: number } = {}): Promise<void> {
    await group.kill(port, 'SIGCONT');
    await waitHealthy(`node ${port} to be back after the pause`, opts.timeoutMs ?? 20_000);
  }

  /** CPU seconds (used_cpu_sys + used_cpu_user) the node on `port` used so far. */
  async function infoCpu(port: number): Promise<number> {
    const cpu = await group.info(port, 'cpu');
    return Number(cpu.used_cpu_sys ?? 0) + Number(cpu.used_cpu_user ?? 0);
  }

  /** Kills every node and deletes their directories. Idempotent. */
  async function stop(): Promise<void> {
    await group.remove();
  }

  try {
    const initial = await newPorts(total * 2);
    // in parallel; each node retries on other ports if its own were taken meanwhile
    const ports = await Promise.all(
      Array.from({ length: total }, (_, i) => startNode(initial[2 * i]!, initial[2 * i + 1]!)),
    );
    const createOutput = await runRedisCli(
      [
        '--cluster',
        'create',
        ...ports.map((p) => `127.0.0.1:${p}`),
        '--cluster-replicas',
        String(replicasPerPrimary),
        '--cluster-yes',
      ],
      Math.max(5000, timeoutMs - (Date.now() - startedAt)),
    );
    try {
      await waitHealthy('the new cluster to settle', Math.max(1000, timeoutMs - (Date.now() - startedAt)), {
        nodes: total,
        primaries: primaryCount,
        replicasPerPrimary,
      });
    } catch (error) {
      const logs = ports.map((p) => `--- node ${p}:\n${group.logTail(p, 5)}`).join('\n');
      throw new Error(
        `${(error as Error).message}\nredis-cli --cluster create said:\n${createOutput.slice(-1500)}\n${logs}`,
      );
    }
    const startMs = Date.now() - startedAt;
    const addresses = ports.map((port) => ({ host: '127.0.0.1', port }));
    const nodes = addresses.map((a) => `${a.host}:${a.port}`).join(',');
    return {
      /** `127.0.0.1:p1,127.0.0.1:p2,...`: every node, as REDIS_CLUSTER_NODES takes them. */
      nodes,
      /** The same as ioredis `Cluster` startup nodes. */
      startupNodes: addresses,
      ports,
      env: { REDIS_CLUSTER_NODES: nodes } as Record<string, string>,
      dir: group.dir,
      /** How long the start took. */
      startMs,
      nodeTimeoutMs,
      clusterNodes,
      primaries,
      primaryForSlot,
      primaryForKey,
      slotOf,
      killPrimary,
      waitForFailover,
      /** Resolves when every running node reports a healthy cluster (see `startRedisCluster`). */
      waitHealthy: (waitMs = 20_000) => waitHealthy('the cluster to be healthy', waitMs),
      waitReplicasInSync,
      restart,
      kill,
      pause,
      resume,
      isRunning: (port: number) => group.isRunning(port),
      /** One command to one node, outside the cluster protocol (no redirection). */
      call: (port: number, ...args: Array<string | number>) => group.call(port, args),
      infoCpu,
      logTail: (port: number, lines?: number) => group.logTail(port, lines),
      stop,
    };
  } catch (error) {
    await group.remove();
    throw error;
  }
}
