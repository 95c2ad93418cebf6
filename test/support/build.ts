import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { processAlive } from '../../storage/record/embedded.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const lock = join(root, 'dist', '.test-build.lock');

/**
 * The build `npm start` runs (bin/build.mjs: dist/ and the console's bundle),
 * one test process at a time. Test files run side by side would otherwise
 * each build the console at once, and swap dist/console under a gateway or a
 * check another file is running; the first builds, the others wait for it and
 * then find nothing to do. A lock whose process is gone is taken over.
 */
export async function buildOnce(): Promise<void> {
  mkdirSync(join(root, 'dist'), { recursive: true });
  for (;;) {
    try {
      writeFileSync(lock, String(process.pid), { flag: 'wx' });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    let owner = 0;
    try {
      owner = Number(readFileSync(lock, 'utf8'));
    } catch {
      continue; // released meanwhile
    }
    // An empty lock is one being written: its owner is alive.
    if (owner > 0 && !processAlive(owner)) rmSync(lock, { force: true });
    else await sleep(200);
  }
  try {
    const build = spawn(process.execPath, ['bin/build.mjs'], { cwd: root, stdio: 'inherit' });
    const [code] = (await once(build, 'exit')) as [number | null];
    if (code !== 0) throw new Error(`bin/build.mjs exited with ${code}`);
  } finally {
    rmSync(lock, { force: true });
  }
}
