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
import { build } from 'esbuild';
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
for (const file of sources.filter((f) => f.endsWith('.json'))) outputs.set(join(outDir, relative(root, file)), readFileSync(file));

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
