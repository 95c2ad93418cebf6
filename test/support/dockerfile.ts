import { readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The Dockerfile read instruction by instruction, without a Docker engine (test/unit/dockerfile.test.ts,
 * test/integration/image-start.test.ts).
 */

const root = fileURLToPath(new URL('../../', import.meta.url));

export interface Instruction {
  op: string;
  args: string;
}

/** Instructions in order: comments dropped, `\` continuations joined. */
export function dockerInstructions(text: string): Instruction[] {
  const lines = text.split('\n').filter((line) => !/^\s*#/.test(line));
  const joined: string[] = [];
  let current = '';
  for (const line of lines) {
    current += current ? ` ${line.trim()}` : line.trim();
    if (current.endsWith('\\')) current = current.slice(0, -1).trimEnd();
    else if (current) {
      joined.push(current);
      current = '';
    }
  }
  return joined.map((line) => {
    const [, op, args] = /^(\w+)\s+(.*)$/.exec(line) ?? [];
    return { op: (op ?? line).toUpperCase(), args: args ?? '' };
  });
}

/** `ENV A=1 B=2` (and the old `ENV A 1`) as pairs. */
function envPairs(args: string): Array<[string, string]> {
  if (!args.includes('=')) {
    const [name, ...value] = args.split(/\s+/);
    return [[name!, value.join(' ')]];
  }
  return [...args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("([^"]*)"|\S*)/g)].map(([, name, raw, quoted]) => [
    name!,
    quoted ?? raw!,
  ]);
}

/** A JSON-array argument (exec form) or the words of a shell-form one. */
function words(args: string): string[] {
  return args.trim().startsWith('[') ? (JSON.parse(args) as string[]) : args.trim().split(/\s+/);
}

/** Whether `path` is `dir` or inside it. */
export const under = (path: string, dir: string) => {
  const relative = posix.relative(dir, path);
  return relative === '' || (!relative.startsWith('..') && !posix.isAbsolute(relative));
};

/** The final stage: what the image runs. */
export function finalStage(): {
  instructions: Instruction[];
  env: Record<string, string>;
  volumes: string[];
  workdir: string;
  user: string | undefined;
  cmd: string[];
} {
  const all = dockerInstructions(readFileSync(`${root}Dockerfile`, 'utf8'));
  const start = all.map((instruction) => instruction.op).lastIndexOf('FROM');
  const instructions = all.slice(start + 1);
  const env: Record<string, string> = {};
  const volumes: string[] = [];
  let workdir = '/';
  let user: string | undefined;
  let cmd: string[] = [];
  for (const { op, args } of instructions) {
    if (op === 'ENV') for (const [name, value] of envPairs(args)) env[name] = value;
    if (op === 'VOLUME') volumes.push(...words(args));
    if (op === 'WORKDIR') workdir = posix.resolve(workdir, args.trim());
    if (op === 'USER') user = args.trim();
    if (op === 'CMD') cmd = words(args);
  }
  return { instructions, env, volumes, workdir, user, cmd };
}
