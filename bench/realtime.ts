/**
 * The Realtime API (`GET /v1/realtime`, WebSocket) under a voice agent's load: sessions each appending 20 ms pcm16
 * frames (24 kHz: 960 bytes) 50 times a second and asking for a (text) response every second, against a vendor that
 * echoes each frame at once (bench/realtime-fake-process.ts: the strict fake of OpenAI's Realtime API in echo mode,
 * stamping each echo with its clock). Three targets on the same vendor: the vendor directly (the baseline), the
 * gateway (`node dist/bin/start.js` split into one api and one worker process, `gpt-realtime` routed to the fake),
 * and Portkey's gateway (its node build's `/v1/realtime` route, `x-portkey-provider: openai` with the fake as custom
 * host).
 *
 * Each frame carries its session and sequence number in its first bytes; the client keeps when it sent it, the
 * vendor writes when it got it, the client notes when the echo came back: the way up (client → vendor) and the way
 * down (vendor → client) are timed apart (one machine, one clock: epoch ms with a fraction in each process). What a
 * target adds is its percentile minus the direct one's. Also: CPU per thousand relayed frames of each process, and
 * api and worker RSS per open session. Then sessions are added, step by step, until what a target adds at the p99
 * (either way) passes 50 ms: how many sessions one api and one worker hold on this machine.
 */
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import WebSocket from 'ws';
import { KeyStore } from '../api/accounts/key-store.js';
import { testRecord } from '../test/support/record.js';
import { redisProcessId, Samples, summarise, type LatencySummary } from './measure.js';
import { cpuWindow, rssBytes, sleep, spawnChild, waitForQuiet, type Child } from './procs.js';
import {
  discoverProcesses,
  log,
  startGateway,
  startPortkey,
  stopGateway,
  upstreamKey,
  type Gateway,
  type Portkey,
} from './stack.js';
import { table } from './table.js';

export interface RealtimeSettings {
  /** Sessions of the main measurement. */
  sessions: number;
  /** Measured seconds per run, after `warmupS`. */
  durationS: number;
  warmupS: number;
  /** Session counts tried, in order, while looking for the most a target holds under `limitMs`. */
  steps: number[];
  stepDurationS: number;
  /** What a target may add at the p99 (either way) and still count as holding the load. */
  limitMs: number;
  portkey: boolean;
  quietWaitMs: number;
}

export function realtimeSettings(env: NodeJS.ProcessEnv, quietWaitMs: number): RealtimeSettings {
  const int = (name: string, fallback: number, min = 0) => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer ≥ ${min}, got "${raw}"`);
    return value;
  };
  return {
    sessions: int('BENCH_RT_SESSIONS', 50, 1),
    durationS: int('BENCH_RT_DURATION_S', 10, 1),
    warmupS: int('BENCH_RT_WARMUP_S', 3),
    steps: (env.BENCH_RT_STEPS ?? '50,100,150,200,300,400,600').split(',').map((s) => {
      const n = Number(s.trim());
      if (!Number.isInteger(n) || n < 1 || n > 5000)
        throw new Error(`BENCH_RT_STEPS: "${s}" is not an integer in 1..5000`);
      return n;
    }),
    stepDurationS: int('BENCH_RT_STEP_S', 5, 1),
    limitMs: int('BENCH_RT_LIMIT_MS', 50, 1),
    portkey: env.BENCH_RT_PORTKEY !== '0',
    quietWaitMs,
  };
}

/** A place to open sessions: its URL for a model, and the headers the upgrade carries. */
interface Target {
  name: string;
  url: string;
  headers: Record<string, string>;
  /** Processes whose CPU and RSS are reported. */
  pids: Record<string, number>;
}

export interface RealtimeRun {
  sessions: number;
  opened: number;
  /** Sessions that could not open, or closed before the end. */
  failedSessions: number;
  framesSent: number;
  framesEchoed: number;
  /** Frames sent in the measured window whose echo never came back. */
  framesLost: number;
  responses: number;
  errorEvents: number;
  /** The `error` events by code. */
  errorCodes: Record<string, number>;
  /** ms: client → vendor, vendor → client, and the round trip. */
  up: LatencySummary;
  down: LatencySummary;
  roundTrip: LatencySummary;
  /** CPU ms per 1,000 frames relayed (sent plus echoed), per process. */
  cpuMsPerThousandFrames: Record<string, number | null>;
  /** Bytes of RSS each process grew by per open session. */
  rssPerSession: Record<string, number | null>;
}

export interface RealtimeCapacityStep {
  sessions: number;
  direct: RealtimeRun;
  target: RealtimeRun;
  addedUpP99: number;
  addedDownP99: number;
  held: boolean;
}

export interface RealtimeTargetResult {
  name: string;
  run?: RealtimeRun;
  added?: { upP50: number; upP99: number; downP50: number; downP99: number };
  capacity: RealtimeCapacityStep[];
  /** The most sessions it held with at most `limitMs` added at the p99 (0: not even the first step). */
  holds?: number;
  unavailable?: string;
}

export interface RealtimeResults {
  settings: RealtimeSettings;
  direct: RealtimeRun;
  targets: RealtimeTargetResult[];
  portkeyVersion?: string;
}

const FRAME_BYTES = 960;
const clock = () => performance.timeOrigin + performance.now();

/** One frame's audio: bytes 0–3 the session, 4–7 the sequence, 12–19 left for the vendor's stamp, the rest a tone. */
function frameTemplate(): Buffer {
  const frame = Buffer.alloc(FRAME_BYTES);
  for (let i = 24; i < FRAME_BYTES; i += 2)
    frame.writeInt16LE(Math.round(3000 * Math.sin((2 * Math.PI * 440 * i) / 48_000)), i);
  return frame;
}

interface Session {
  index: number;
  socket: WebSocket;
  seq: number;
  /** When each of the last 256 frames was sent, by sequence number modulo 256. */
  sentAt: Float64Array;
  open: boolean;
}

/** Opens `count` sessions on the target, runs the load for warm-up plus `durationS`, and measures the window. */
async function runLoad(target: Target, count: number, durationS: number, warmupS: number): Promise<RealtimeRun> {
  const template = frameTemplate();
  // Only the first 24 bytes (32 base64 characters) change from frame to frame.
  const tail = template.subarray(24).toString('base64');
  const head = Buffer.alloc(24);
  const up = new Samples();
  const down = new Samples();
  const roundTrip = new Samples();
  let measuring = false;
  let framesSent = 0;
  let framesEchoed = 0;
  let responses = 0;
  let errorEvents = 0;
  const errorCodes: Record<string, number> = {};
  let failedSessions = 0;
  const sessions: Session[] = [];

  const rssBefore = Object.fromEntries(Object.entries(target.pids).map(([name, pid]) => [name, rssBytes(pid)]));
  const openOne = (index: number) =>
    new Promise<Session | undefined>((resolve) => {
      const socket = new WebSocket(target.url, { headers: target.headers, perMessageDeflate: false });
      const session: Session = { index, socket, seq: 0, sentAt: new Float64Array(256), open: false };
      const timer = setTimeout(() => {
        socket.terminate();
        resolve(undefined);
      }, 30_000);
      socket.on('message', (data) => {
        const text = data.toString();
        // The echo: the one hot event, read without parsing the whole JSON first.
        const at = text.indexOf('"delta":"');
        if (at >= 0 && text.includes('"response.output_audio.delta"')) {
          const now = clock();
          const bytes = Buffer.from(text.slice(at + 9, at + 9 + 32), 'base64');
          const seq = bytes.readUInt32LE(4);
          const vendorAt = bytes.readDoubleLE(12);
          const owner = sessions[bytes.readUInt32LE(0)];
          if (!owner) return;
          framesEchoed += 1;
          const sentAt = owner.sentAt[seq & 255]!;
          if (measuring && sentAt > 0) {
            up.push(vendorAt - sentAt);
            down.push(now - vendorAt);
            roundTrip.push(now - sentAt);
          }
          return;
        }
        const event = JSON.parse(text) as { type: string; error?: { code?: string | null } };
        if (event.type === 'session.created') {
          clearTimeout(timer);
          session.open = true;
          resolve(session);
        } else if (event.type === 'response.done') responses += 1;
        else if (event.type === 'error') {
          errorEvents += 1;
          const code = event.error?.code ?? 'none';
          errorCodes[code] = (errorCodes[code] ?? 0) + 1;
        }
      });
      socket.on('close', () => {
        if (session.open && measuring) failedSessions += 1;
        session.open = false;
      });
      socket.on('error', () => {
        clearTimeout(timer);
        resolve(undefined);
      });
      socket.on('unexpected-response', (_request, response) => {
        clearTimeout(timer);
        response.resume();
        socket.terminate();
        resolve(undefined);
      });
    });

  // Opened in waves of 25, as clients arrive, not all in one instant.
  for (let at = 0; at < count; at += 25) {
    const wave = await Promise.all(Array.from({ length: Math.min(25, count - at) }, (_, i) => openOne(at + i)));
    for (const session of wave) if (session) sessions[session.index] = session;
  }
  const opened = sessions.filter(Boolean).length;
  failedSessions += count - opened;

  const responseCreate = JSON.stringify({ type: 'response.create', response: { output_modalities: ['text'] } });
  let tick = 0;
  // Every 5 ms a quarter of the sessions send (each one every 20 ms), so the frames do not all leave at one instant.
  const ticker = setInterval(() => {
    const quarter = tick % 4;
    const second = Math.floor(tick / 4) % 50;
    tick += 1;
    for (let i = quarter; i < count; i += 4) {
      const session = sessions[i];
      if (!session?.open) continue;
      const seq = session.seq++;
      head.writeUInt32LE(i, 0);
      head.writeUInt32LE(seq, 4);
      session.sentAt[seq & 255] = clock();
      session.socket.send(`{"type":"input_audio_buffer.append","audio":"${head.toString('base64')}${tail}"}`);
      framesSent += 1;
      // Once a second each session asks for a response, the sessions spread over the second.
      if (second === i % 50 && quarter === i % 4) session.socket.send(responseCreate);
    }
  }, 5);

  await sleep(warmupS * 1000);
  const sentBefore = framesSent;
  const echoedBefore = framesEchoed;
  const cpu = cpuWindow(target.pids);
  measuring = true;
  await sleep(durationS * 1000);
  measuring = false;
  const cpuMs = cpu();
  const rssAfter = Object.fromEntries(Object.entries(target.pids).map(([name, pid]) => [name, rssBytes(pid)]));
  const sentInWindow = framesSent - sentBefore;
  clearInterval(ticker);
  // The last echoes come back.
  await sleep(300);
  const echoedInWindow = framesEchoed - echoedBefore;
  const relayed = sentInWindow + echoedInWindow;
  for (const session of sessions) session?.socket.close();
  await sleep(500);
  for (const session of sessions) session?.socket.terminate();

  return {
    sessions: count,
    opened,
    failedSessions,
    framesSent,
    framesEchoed,
    framesLost: Math.max(0, sentInWindow - echoedInWindow),
    responses,
    errorEvents,
    errorCodes,
    up: summarise(up),
    down: summarise(down),
    roundTrip: summarise(roundTrip),
    cpuMsPerThousandFrames: Object.fromEntries(
      Object.entries(cpuMs).map(([name, ms]) => [name, ms === null || relayed === 0 ? null : (ms / relayed) * 1000]),
    ),
    rssPerSession: Object.fromEntries(
      Object.entries(target.pids).map(([name]) => {
        const before = rssBefore[name];
        const after = rssAfter[name];
        return [name, before === undefined || after === undefined || opened === 0 ? null : (after - before) / opened];
      }),
    ),
  };
}

/** Adds sessions step by step until what the target adds at the p99 (either way) passes the limit. */
async function findCapacity(
  direct: Target,
  target: Target,
  settings: RealtimeSettings,
): Promise<{ steps: RealtimeCapacityStep[]; holds: number }> {
  const steps: RealtimeCapacityStep[] = [];
  let holds = 0;
  for (const sessions of settings.steps) {
    log(`realtime: ${target.name}, ${sessions} sessions (and the vendor directly at as many)`);
    const directRun = await runLoad(direct, sessions, settings.stepDurationS, 2);
    const run = await runLoad(target, sessions, settings.stepDurationS, 2);
    const addedUpP99 = run.up.p99 - directRun.up.p99;
    const addedDownP99 = run.down.p99 - directRun.down.p99;
    const lostShare = run.framesSent === 0 ? 1 : run.framesLost / Math.max(1, run.framesSent);
    const held = run.failedSessions === 0 && lostShare < 0.01 && Math.max(addedUpP99, addedDownP99) <= settings.limitMs;
    steps.push({ sessions, direct: directRun, target: run, addedUpP99, addedDownP99, held });
    if (!held) break;
    holds = sessions;
  }
  return { steps, holds };
}

export async function runRealtimeBench(options: {
  settings: RealtimeSettings;
  redis: Redis;
  redisUrl: string;
}): Promise<RealtimeResults> {
  const { settings, redis, redisUrl } = options;
  const fakeChild: Child = spawnChild(
    'realtime-fake',
    ['--import', 'tsx', 'bench/realtime-fake-process.ts', `--key=${upstreamKey}`],
    { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root' },
  );
  const started = JSON.parse(
    await Promise.race([
      fakeChild.firstLine,
      sleep(30_000).then(() => {
        throw new Error(`the realtime fake was silent for 30 s:\n${fakeChild.tail.join('\n')}`);
      }),
    ]),
  ) as { url: string; port: number; pid: number };
  let gateway: Gateway | undefined;
  let portkey: Portkey | undefined;
  try {
    await redis.flushdb();
    const { key } = await new KeyStore(redis, await testRecord(redis)).create('bench-realtime');
    gateway = await startGateway('split', started.url, redisUrl, undefined, {
      env: {
        REALTIME_SESSIONS_PER_WORKER: '100000',
        REALTIME_VENDOR_SESSIONS_OPENAI: '100000',
        MAX_REALTIME_SESSIONS_PER_KEY: '100000',
        REALTIME_START_WAIT_MS: '30000',
        // 50 frames and a response a second are well under the default 100, but a stalled moment's catch-up is not.
        REALTIME_MAX_FRAMES_PER_SECOND: '1000',
      },
      logTag: 'realtime',
    });
    const redisPid = await redisProcessId(redis);
    const shared = { fake: started.pid, ...(redisPid !== undefined ? { redis: redisPid } : {}), client: process.pid };
    const direct: Target = {
      name: 'direct',
      url: `ws://127.0.0.1:${started.port}/v1/realtime?model=gpt-realtime`,
      headers: { authorization: `Bearer ${upstreamKey}` },
      pids: shared,
    };
    const gatewayPids = discoverProcesses(gateway);
    const throughGateway: Target = {
      name: 'gateway',
      url: `${gateway.url.replace('http:', 'ws:')}/v1/realtime?model=gpt-realtime`,
      headers: { authorization: `Bearer ${key}` },
      pids: { ...gatewayPids, ...shared },
    };

    const quiet = async () =>
      settings.quietWaitMs > 0 ? waitForQuiet({ maxWaitMs: settings.quietWaitMs }) : undefined;
    log(`realtime: ${settings.sessions} sessions directly to the echoing vendor`);
    await quiet();
    const directRun = await runLoad(direct, settings.sessions, settings.durationS, settings.warmupS);
    const targets: RealtimeTargetResult[] = [];
    const measureTarget = async (target: Target): Promise<RealtimeTargetResult> => {
      log(`realtime: ${settings.sessions} sessions through ${target.name}`);
      await quiet();
      const run = await runLoad(target, settings.sessions, settings.durationS, settings.warmupS);
      const added = {
        upP50: run.up.p50 - directRun.up.p50,
        upP99: run.up.p99 - directRun.up.p99,
        downP50: run.down.p50 - directRun.down.p50,
        downP99: run.down.p99 - directRun.down.p99,
      };
      const capacity = await findCapacity(direct, target, settings);
      return { name: target.name, run, added, capacity: capacity.steps, holds: capacity.holds };
    };
    targets.push(await measureTarget(throughGateway));
    await stopGateway(gateway);
    gateway = undefined;

    let portkeyVersion: string | undefined;
    if (settings.portkey) {
      try {
        portkey = await startPortkey('realtime-portkey');
        portkeyVersion = portkey.version;
        const throughPortkey: Target = {
          name: `portkey ${portkey.version}`,
          url: `${portkey.url.replace('http:', 'ws:')}/v1/realtime?model=gpt-realtime`,
          headers: {
            authorization: `Bearer ${upstreamKey}`,
            'x-portkey-provider': 'openai',
            'x-portkey-custom-host': started.url,
          },
          pids: { portkey: portkey.child.pid, ...shared },
        };
        const probe = await runLoad(throughPortkey, 1, 1, 0);
        if (probe.opened === 0 || probe.framesEchoed === 0) {
          const said = portkey.child.tail.filter((line) => /error/i.test(line)).at(-1);
          targets.push({
            name: throughPortkey.name,
            capacity: [],
            unavailable: `a session through its /v1/realtime did not open or relay (opened ${probe.opened}, echoes ${probe.framesEchoed})${said ? `; its log: ${said.trim()}` : ''}`,
          });
        } else targets.push(await measureTarget(throughPortkey));
      } catch (error) {
        targets.push({ name: 'portkey', capacity: [], unavailable: (error as Error).message.split('\n')[0]! });
      }
    }
    return { settings, direct: directRun, targets, ...(portkeyVersion ? { portkeyVersion } : {}) };
  } finally {
    if (gateway) await stopGateway(gateway);
    await portkey?.child.stop();
    await fakeChild.stop();
  }
}

const ms = (value: number) => (Number.isFinite(value) ? value.toFixed(2) : '—');
const cpu = (value: number | null | undefined) => (value === null || value === undefined ? '—' : value.toFixed(1));
const kb = (value: number | null | undefined) =>
  value === null || value === undefined ? '—' : (value / 1024).toFixed(0);

export function renderRealtime(results: RealtimeResults): string {
  const { settings } = results;
  const out: string[] = [
    `## Realtime: ${settings.sessions} sessions, a 20 ms pcm16 frame (960 bytes) each 50 times a second and a ` +
      `response a second, against a vendor that echoes each frame (${settings.durationS} s measured after ` +
      `${settings.warmupS} s)`,
    '',
  ];
  const runRow = (name: string, run: RealtimeRun) => [
    name,
    `${run.opened}/${run.sessions}`,
    ms(run.up.p50),
    ms(run.up.p99),
    ms(run.down.p50),
    ms(run.down.p99),
    ms(run.roundTrip.p50),
    ms(run.roundTrip.p99),
    String(run.framesLost),
    String(run.errorEvents),
    String(run.responses),
  ];
  const rows = [
    runRow('direct', results.direct),
    ...results.targets.filter((t) => t.run).map((t) => runRow(t.name, t.run!)),
  ];
  out.push(
    table(
      [
        'target',
        'open',
        'up p50',
        'up p99',
        'down p50',
        'down p99',
        'trip p50',
        'trip p99',
        'lost',
        'errors',
        'responses',
      ],
      rows,
    ),
    '',
  );
  out.push(
    table(
      ['added over direct (ms)', 'up p50', 'up p99', 'down p50', 'down p99'],
      results.targets
        .filter((t) => t.added)
        .map((t) => [t.name, ms(t.added!.upP50), ms(t.added!.upP99), ms(t.added!.downP50), ms(t.added!.downP99)]),
    ),
    '',
  );
  const processes = [
    ...new Set(results.targets.flatMap((t) => (t.run ? Object.keys(t.run.cpuMsPerThousandFrames) : []))),
  ];
  out.push(
    table(
      ['CPU ms per 1,000 frames', ...processes],
      [results.direct, ...results.targets.map((t) => t.run)].flatMap((run, i) =>
        run
          ? [
              [
                i === 0 ? 'direct' : results.targets[i - 1]!.name,
                ...processes.map((p) => cpu(run.cpuMsPerThousandFrames[p])),
              ],
            ]
          : [],
      ),
    ),
    '',
  );
  out.push(
    table(
      ['RSS KiB per open session', 'api', 'worker', 'portkey'],
      results.targets
        .filter((t) => t.run)
        .map((t) => [
          t.name,
          kb(t.run!.rssPerSession.api),
          kb(t.run!.rssPerSession.worker),
          kb(t.run!.rssPerSession.portkey),
        ]),
    ),
    '',
  );
  for (const [name, run] of [
    ['direct', results.direct] as const,
    ...results.targets.filter((t) => t.run).map((t) => [t.name, t.run!] as const),
  ]) {
    const codes = Object.entries(run.errorCodes);
    if (codes.length) out.push(`${name}: error events ${codes.map(([code, n]) => `${code} ×${n}`).join(', ')}`, '');
  }
  for (const target of results.targets) {
    if (target.unavailable) {
      out.push(`${target.name}: not measured: ${target.unavailable}`, '');
      continue;
    }
    out.push(
      `${target.name}: holds ${target.holds} sessions with at most ${settings.limitMs} ms added at the p99 ` +
        `either way (${settings.stepDurationS} s a step)`,
      table(
        [
          'sessions',
          'added up p99',
          'added down p99',
          'direct up p99',
          'direct down p99',
          'lost',
          'failed sessions',
          'held',
        ],
        target.capacity.map((s) => [
          String(s.sessions),
          ms(s.addedUpP99),
          ms(s.addedDownP99),
          ms(s.direct.up.p99),
          ms(s.direct.down.p99),
          String(s.target.framesLost),
          String(s.target.failedSessions),
          s.held ? 'yes' : 'no',
        ]),
      ),
      '',
    );
  }
  return out.join('\n');
}
