// The runtime build behind `npm start`, `npm run keys`, `npm run bench` and the
// Dockerfile: transpiles the sources tsconfig.build.json includes into dist/ with
// esbuild, one .js (and .js.map) per .ts as tsc would, plus the JSON files they
// import. It does not type-check: `npm run typecheck` (part of `npm test`) does.
//
// Every run transpiles everything (a few hundred ms), so a changed source is
// always picked up, whatever its mtime. Only outputs whose content changed are
// written, each to a temporary file renamed into place, so a process starting
// from dist/ at the same moment never reads a half-written file; outputs whose
// source is gone are removed.
//
// Then the web console (console/, a Vite + Preact app) is built into
// dist/console, but only when its inputs changed: a hash of every file under
// console/ plus the versions of the packages it bundles is kept in
// dist/console/.inputs-hash, and a start whose hash matches (and whose
// dist/console/index.html exists) skips Vite altogether.
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const started = performance.now();
const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outDir = join(root, 'dist');
/** @type {string[]} */
const sourceDirs = JSON.parse(readFileSync(join(root, 'tsconfig.build.json'), 'utf8')).include;

/** @param {string} dir */
function filesUnder(dir) {
  const abs = join(root, dir);
  if (!existsSync(abs)) return [];
  return readdirSync(abs, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath ?? entry.path, entry.name));
}

const sources = sourceDirs.flatMap(filesUnder);
const entryPoints = sources.filter((file) => file.endsWith('.ts') && !file.endsWith('.d.ts'));

const result = await build({
  absWorkingDir: root,
  entryPoints,
  outdir: outDir,
  outbase: root,
  bundle: false,
  platform: 'node',
  format: 'esm',
  target: 'node20.18',
  sourcemap: true,
  tsconfig: join(root, 'tsconfig.build.json'),
  write: false,
  logLevel: 'error',
}).catch(() => process.exit(1)); // esbuild has already printed the errors

/** @type {Map<string, Uint8Array>} */
const outputs = new Map(result.outputFiles.map((file) => [file.path, file.contents]));
// JSON modules (`import … with { type: 'json' }`) are loaded from beside the .js, as tsc copies them.
for (const file of sources.filter((f) => f.endsWith('.json')))
  outputs.set(join(outDir, relative(root, file)), readFileSync(file));
// Redis scripts (`.lua`) are read from beside the module that loads them, as JSON modules are.
for (const file of sources.filter((f) => f.endsWith('.lua')))
  outputs.set(join(outDir, relative(root, file)), readFileSync(file));

let written = 0;
for (const [path, contents] of outputs) {
  if (existsSync(path) && Buffer.from(contents).equals(readFileSync(path))) continue;
  mkdirSync(dirname(path), { recursive: true });
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, contents);
  renameSync(temporary, path);
  written++;
}

let removed = 0;
for (const dir of sourceDirs) {
  for (const file of filesUnder(join('dist', dir))) {
    if (outputs.has(file) || file.endsWith('.tmp')) continue;
    rmSync(file, { force: true });
    removed++;
  }
}

if (written || removed) {
  const ms = Math.round(performance.now() - started);
  console.error(`build: ${written} file(s) written${removed ? `, ${removed} removed` : ''} in dist/ (${ms} ms)`);
}

await buildConsole();

/**
 * The console's inputs as one hash: every file under console/ and the shared types it imports (path and bytes), and the
 * versions of what it bundles.
 */
function consoleInputsHash(consoleDir) {
  const hash = createHash('sha256');
  const files = readdirSync(consoleDir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath ?? entry.path, entry.name))
    .filter((file) => !relative(consoleDir, file).split(/[\\/]/).includes('node_modules'))
    .sort();
  // The server's shapes the console imports, rather than spelling them again.
  files.push(join(root, 'shared', 'money', 'usage.ts'));
  for (const file of files) {
    hash.update(relative(consoleDir, file).split('\\').join('/')).update('\0').update(readFileSync(file)).update('\0');
  }
  for (const name of ['vite', 'preact', 'chart.js']) {
    const manifest = join(root, 'node_modules', name, 'package.json');
    hash.update(`${name}@${existsSync(manifest) ? JSON.parse(readFileSync(manifest, 'utf8')).version : 'missing'}\0`);
  }
  return hash.digest('hex');
}

async function buildConsole() {
  const consoleDir = join(root, 'console');
  const target = join(outDir, 'console');
  const hashFile = join(target, '.inputs-hash');
  if (!existsSync(join(consoleDir, 'index.html'))) return; // a checkout without the console's sources (e.g. a slim image)
  const inputs = consoleInputsHash(consoleDir);
  const built = existsSync(join(target, 'index.html'));
  if (built && existsSync(hashFile) && readFileSync(hashFile, 'utf8').trim() === inputs) return;

  const began = performance.now();
  let vite;
  try {
    vite = await import('vite');
  } catch {
    // Only the dev dependencies bring Vite: a production install keeps the console it was built with.
    console.error(
      `build: Vite is not installed, so the console is ${built ? 'left as it was built' : 'not built (/console answers 503)'}; run npm install to build it`,
    );
    return;
  }
  // Built beside the old one and swapped in whole: a server starting meanwhile sees the old console or the new, never
  // half of one.
  const staging = join(outDir, `.console-${process.pid}.tmp`);
  rmSync(staging, { recursive: true, force: true });
  try {
    await vite.build({
      root: consoleDir,
      configFile: join(consoleDir, 'vite.config.ts'),
      logLevel: 'warn',
      build: { outDir: staging, emptyOutDir: true },
    });
  } catch (error) {
    rmSync(staging, { recursive: true, force: true });
    console.error(`build: the console failed to build: ${error?.message ?? error}`);
    process.exit(1);
  }
  writeFileSync(join(staging, '.inputs-hash'), `${inputs}\n`);
  const old = join(outDir, `.console-${process.pid}.old`);
  try {
    if (existsSync(target)) renameSync(target, old);
    renameSync(staging, target);
  } catch (error) {
    // Another build swapped its console in at the same moment: keep that one.
    if (!existsSync(join(target, 'index.html'))) throw error;
  } finally {
    rmSync(old, { recursive: true, force: true });
    rmSync(staging, { recursive: true, force: true });
  }
  console.error(`build: console built into dist/console (${Math.round(performance.now() - began)} ms)`);
}
