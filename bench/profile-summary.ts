/**
 * Summarises a V8 .cpuprofile (from `node --cpu-prof`): top functions by self
 * time, and where the time goes by package (self time, and inclusive time:
 * samples with that package anywhere on the stack).
 *
 *   node --import tsx bench/profile-summary.ts <file.cpuprofile> [top=25]
 */
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface Row {
  name: string;
  ms: number;
  /** Percent of the profile's busy time (idle excluded). */
  pct: number;
}

export interface ProfileSummary {
  file: string;
  wallMs: number;
  busyMs: number;
  idleMs: number;
  topSelf: Row[];
  selfByCategory: Row[];
  inclusiveByCategory: Row[];
  inclusiveByFunction: Row[];
  /**
   * Self time charged to the nearest package or gateway frame on the stack (Node core and V8 natives charged to their
   * caller).
   */
  selfByOwner: Row[];
  /**
   * Time of the socket-write natives (writeBuffer, writeUtf8String, writev) by the package that asked for the write.
   */
  socketWritesByOwner: Row[];
}

/** Which part of the stack a frame belongs to: a package, a Node core module, the gateway, V8. */
export function category(frame: CallFrame): string {
  const { url, functionName } = frame;
  if (url === '') {
    if (functionName.startsWith('(')) return functionName; // (garbage collector), (program), (idle), (root)
    return 'native (V8 builtins: JSON, RegExp, crypto…)';
  }
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + 'node_modules/'.length).split('/');
    return `pkg ${rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]}`;
  }
  if (url.startsWith('node:')) {
    const name = url.slice('node:'.length).replace(/^internal\//, '');
    const top = name.split('/')[0]!;
    return `node ${top === 'deps' ? name.split('/').slice(0, 2).join('/') : top}`;
  }
  const dist = url.indexOf('/dist/');
  if (dist >= 0) return `gateway ${url.slice(dist + '/dist/'.length).split('/')[0]}/`;
  return url;
}

function frameName(frame: CallFrame): string {
  const name = frame.functionName || '(anonymous)';
  if (!frame.url) return name;
  const nm = frame.url.lastIndexOf('node_modules/');
  const dist = frame.url.indexOf('/dist/');
  const short =
    nm >= 0
      ? frame.url.slice(nm + 'node_modules/'.length)
      : dist >= 0
        ? frame.url.slice(dist + 1)
        : frame.url.replace(/^file:\/\//, '');
  return `${name} ${short}:${frame.lineNumber + 1}`;
}

function toRows(map: Map<string, number>, busyMs: number, limit: number): Row[] {
  return [...map.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, limit)
    .map(([name, ms]) => ({ name, ms: Math.round(ms), pct: Math.round((ms / busyMs) * 1000) / 10 }));
}

export function summariseProfile(file: string, top = 25): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const node of profile.nodes) byId.set(node.id, node);
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);

  const selfMs = new Map<number, number>();
  // timeDeltas[i] is the time since the previous sample: charge it to sample i.
  for (let i = 0; i < profile.samples.length; i += 1) {
    const id = profile.samples[i]!;
    selfMs.set(id, (selfMs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000);
  }

  let idleMs = 0;
  let busyMs = 0;
  const topSelf = new Map<string, number>();
  const selfByCategory = new Map<string, number>();
  const inclusiveByCategory = new Map<string, number>();
  const inclusiveByFunction = new Map<string, number>();
  const selfByOwner = new Map<string, number>();
  const socketWritesByOwner = new Map<string, number>();
  const owned = (cat: string) => cat.startsWith('pkg ') || cat.startsWith('gateway ');
  for (const [id, ms] of selfMs) {
    const node = byId.get(id)!;
    if (node.callFrame.functionName === '(idle)') {
      idleMs += ms;
      continue;
    }
    busyMs += ms;
    const name = frameName(node.callFrame);
    topSelf.set(name, (topSelf.get(name) ?? 0) + ms);
    const cat = category(node.callFrame);
    selfByCategory.set(cat, (selfByCategory.get(cat) ?? 0) + ms);
    const seenCats = new Set<string>();
    const seenFns = new Set<string>();
    let owner: string | undefined;
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)!.callFrame;
      if (frame.functionName === '(root)') break;
      const frameCat = category(frame);
      if (owner === undefined && owned(frameCat)) owner = frameCat;
      seenCats.add(frameCat);
      if (frame.url.includes('/dist/') && !frame.url.includes('node_modules/')) seenFns.add(frameName(frame));
    }
    const ownerName = owner ?? cat;
    selfByOwner.set(ownerName, (selfByOwner.get(ownerName) ?? 0) + ms);
    if (
      ['writeBuffer', 'writeUtf8String', 'writev', 'writeLatin1String', 'writeAsciiString'].includes(
        node.callFrame.functionName,
      ) &&
      node.callFrame.url === ''
    ) {
      socketWritesByOwner.set(ownerName, (socketWritesByOwner.get(ownerName) ?? 0) + ms);
    }
    for (const c of seenCats) inclusiveByCategory.set(c, (inclusiveByCategory.get(c) ?? 0) + ms);
    for (const f of seenFns) inclusiveByFunction.set(f, (inclusiveByFunction.get(f) ?? 0) + ms);
  }
  return {
    file,
    wallMs: Math.round((profile.endTime - profile.startTime) / 1000),
    busyMs: Math.round(busyMs),
    idleMs: Math.round(idleMs),
    topSelf: toRows(topSelf, busyMs, top),
    selfByCategory: toRows(selfByCategory, busyMs, top),
    inclusiveByCategory: toRows(inclusiveByCategory, busyMs, top),
    inclusiveByFunction: toRows(inclusiveByFunction, busyMs, top),
    selfByOwner: toRows(selfByOwner, busyMs, top),
    socketWritesByOwner: toRows(socketWritesByOwner, busyMs, top),
  };
}

export function renderSummary(summary: ProfileSummary): string {
  const rows = (title: string, list: Row[]) =>
    [title, ...list.map((r) => `  ${r.pct.toFixed(1).padStart(5)}%  ${String(r.ms).padStart(6)} ms  ${r.name}`)].join(
      '\n',
    );
  return [
    `${summary.file}: ${summary.wallMs} ms profiled, ${summary.busyMs} ms busy, ${summary.idleMs} ms idle ` +
      `(percentages are of busy time)`,
    rows('Top functions by self time:', summary.topSelf),
    rows('Self time by package:', summary.selfByCategory),
    rows(
      'Self time charged to the nearest package or gateway code on the stack (Node core and natives go to their ' +
        'caller):',
      summary.selfByOwner,
    ),
    rows('Socket writes (writeBuffer/writeUtf8String/writev) by the package that wrote:', summary.socketWritesByOwner),
    rows('Inclusive time by package (on the stack):', summary.inclusiveByCategory),
    rows('Inclusive time of gateway functions (dist/):', summary.inclusiveByFunction),
  ].join('\n\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const file = process.argv[2];
  if (!file) {
    process.stderr.write('usage: node --import tsx bench/profile-summary.ts <file.cpuprofile> [top]\n');
    process.exit(2);
  }
  process.stdout.write(`${renderSummary(summariseProfile(file, Number(process.argv[3] ?? 25)))}\n`);
}
