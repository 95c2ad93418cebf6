import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/**
 * The house layout: `api/` and `workers/` are siblings that meet only in
 * `shared/` (contracts, the vendor table) and `storage/` (blob contract, upload
 * keys). Only `bin/` (the entry points) may import both halves.
 */
const root = fileURLToPath(new URL('../..', import.meta.url));
const forbidden: Record<string, readonly string[]> = {
  api: ['workers'],
  workers: ['api'],
  storage: ['api', 'workers'],
  shared: ['api', 'workers', 'storage'],
  bin: [],
};

interface ImportSite {
  line: number;
  specifier: string;
}

/**
 * Every module a file names, as TypeScript parses it: import and export-from
 * declarations (type-only included), `import x = require()`, `import()` and
 * `require()` calls, `import('…')` types and `/// <reference path>`.
 */
function importsOf(fileName: string, text: string): ImportSite[] {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const sites: ImportSite[] = [];
  const add = (node: ts.Node, specifier: string) =>
    sites.push({ line: source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1, specifier });
  const visit = (node: ts.Node): void => {
    if (
      (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
      node.moduleSpecifier &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      add(node.moduleSpecifier, node.moduleSpecifier.text);
    } else if (
      ts.isImportEqualsDeclaration(node) &&
      ts.isExternalModuleReference(node.moduleReference) &&
      ts.isStringLiteral(node.moduleReference.expression)
    ) {
      add(node.moduleReference.expression, node.moduleReference.expression.text);
    } else if (
      ts.isCallExpression(node) &&
      (node.expression.kind === ts.SyntaxKind.ImportKeyword ||
        (ts.isIdentifier(node.expression) && node.expression.text === 'require')) &&
      node.arguments[0] &&
      ts.isStringLiteralLike(node.arguments[0])
    ) {
      add(node.arguments[0], node.arguments[0].text);
    } else if (
      ts.isImportTypeNode(node) &&
      ts.isLiteralTypeNode(node.argument) &&
      ts.isStringLiteral(node.argument.literal)
    ) {
      add(node.argument.literal, node.argument.literal.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  for (const reference of source.referencedFiles) {
    sites.push({ line: source.getLineAndCharacterOfPosition(reference.pos).line + 1, specifier: reference.fileName });
  }
  return sites;
}

function* sourcesUnder(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* sourcesUnder(path);
    else if (/\.[cm]?tsx?$/.test(entry.name)) yield path;
  }
}

const toPosix = (path: string) => path.split(sep).join('/');

/** `file:line → target` for each import that crosses the layout's lines, with the number of files read per folder. */
function layoutOffences(): { offences: string[]; filesPerFolder: Map<string, number> } {
  const offences: string[] = [];
  const filesPerFolder = new Map<string, number>();
  for (const [folder, banned] of Object.entries(forbidden)) {
    let files = 0;
    for (const file of sourcesUnder(join(root, folder))) {
      files += 1;
      for (const { line, specifier } of importsOf(file, readFileSync(file, 'utf8'))) {
        // Packages (`zod`, `node:fs`) cross no line; only paths into the tree can.
        if (!specifier.startsWith('.') && !specifier.startsWith('/')) continue;
        const target = toPosix(relative(root, resolve(dirname(file), specifier)));
        if (banned.includes(target.split('/')[0]!))
          offences.push(`${toPosix(relative(root, file))}:${line} → ${target}`);
      }
    }
    filesPerFolder.set(folder, files);
  }
  return { offences, filesPerFolder };
}

/**
 * Folders of api/ that are leaves: plumbing (the envelope, bodies, metrics,
 * tracing, server-sent events) that imports nothing else from api/, only
 * shared/ and storage/. What it needs of the folders above it (the request
 * log, the route a request took) is handed in, never reached for.
 */
const apiLeaves = ['api/http'];

/**
 * The api/ file a leaf's file names outside the leaf; undefined for a package, shared/, storage/ or the leaf itself.
 */
function leafCrossing(leaf: string, file: string, specifier: string): string | undefined {
  if (!specifier.startsWith('.') && !specifier.startsWith('/')) return undefined;
  const target = toPosix(relative(root, resolve(root, dirname(file), specifier)));
  return target.startsWith('api/') && !target.startsWith(`${leaf}/`) ? target : undefined;
}

/**
 * `file:line → target` for each import out of a leaf of api/ into the rest of api/, with the number of files read per
 * leaf.
 */
function leafOffences(): { offences: string[]; filesPerLeaf: Map<string, number> } {
  const offences: string[] = [];
  const filesPerLeaf = new Map<string, number>();
  for (const leaf of apiLeaves) {
    let files = 0;
    for (const path of sourcesUnder(join(root, leaf))) {
      files += 1;
      const file = toPosix(relative(root, path));
      for (const { line, specifier } of importsOf(path, readFileSync(path, 'utf8'))) {
        const target = leafCrossing(leaf, file, specifier);
        if (target) offences.push(`${file}:${line} → ${target}`);
      }
    }
    filesPerLeaf.set(leaf, files);
  }
  return { offences, filesPerLeaf };
}

/** Every folder of source code: the gateway's halves, its entry points, the benches and the console's pages. */
const sourceFolders = ['api', 'workers', 'shared', 'storage', 'bin', 'bench', 'console/src'];

/**
 * The file an in-tree specifier names: `./a.js` is `./a.ts` (or `.tsx`) on disk, as NodeNext and the bundler resolve
 * it.
 */
function resolveInTree(from: string, specifier: string): string | undefined {
  const target = resolve(dirname(from), specifier);
  const stem = target.replace(/\.[cm]?jsx?$/, '');
  const candidates = [
    target,
    `${stem}.ts`,
    `${stem}.tsx`,
    `${stem}.mts`,
    join(target, 'index.ts'),
    join(target, 'index.tsx'),
  ];
  return candidates.find((candidate) => /\.[cm]?[jt]sx?$/.test(candidate) && existsSync(candidate));
}

/**
 * The circles of imports among the tree's files (Tarjan's strongly connected
 * components of the import graph): each a list of the files that import one
 * another round a loop, relative to the root.
 */
function importCircles(): string[][] {
  const graph = new Map<string, string[]>();
  for (const folder of sourceFolders) {
    for (const file of sourcesUnder(join(root, folder))) {
      const targets = importsOf(file, readFileSync(file, 'utf8'))
        .filter(({ specifier }) => specifier.startsWith('.'))
        .map(({ specifier }) => resolveInTree(file, specifier))
        .filter((target): target is string => target !== undefined);
      graph.set(file, targets);
    }
  }
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const circles: string[][] = [];
  const connect = (file: string): void => {
    index.set(file, index.size);
    low.set(file, index.get(file)!);
    stack.push(file);
    onStack.add(file);
    for (const target of graph.get(file) ?? []) {
      if (!index.has(target)) {
        connect(target);
        low.set(file, Math.min(low.get(file)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(file, Math.min(low.get(file)!, index.get(target)!));
      }
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(toPosix(relative(root, member)));
    } while (member !== file);
    const selfImport = graph.get(file)?.includes(file) ?? false;
    if (component.length > 1 || selfImport) circles.push(component.sort());
  };
  for (const file of graph.keys()) if (!index.has(file)) connect(file);
  return circles;
}

describe('source layout', () => {
  it('keeps api/ and workers/ apart, meeting only in shared/ and storage/', () => {
    const { offences, filesPerFolder } = layoutOffences();
    for (const [folder, files] of filesPerFolder) assert.ok(files > 0, `no TypeScript file read under ${folder}/`);
    assert.deepEqual(
      offences,
      [],
      `imports that cross the layout (api/ ↛ workers/, workers/ ↛ api/, storage/ ↛ api/ workers/, shared/ ↛ api/ workers/ storage/):\n  ${offences.join('\n  ')}`,
    );
  });

  it('keeps api/http/ a leaf: it imports nothing else from api/', () => {
    const { offences, filesPerLeaf } = leafOffences();
    for (const [leaf, files] of filesPerLeaf) assert.ok(files > 0, `no TypeScript file read under ${leaf}/`);
    assert.deepEqual(
      offences,
      [],
      `imports out of a leaf of api/ (${apiLeaves.join(', ')}) into the rest of api/:\n  ${offences.join('\n  ')}`,
    );
  });

  it("tells a leaf's own imports from those that leave it", () => {
    const from = 'api/http/envelope.ts';
    assert.equal(leafCrossing('api/http', from, './metrics.js'), undefined);
    assert.equal(leafCrossing('api/http', from, '../../shared/errors.js'), undefined);
    assert.equal(leafCrossing('api/http', from, '../../storage/blob-store.js'), undefined);
    assert.equal(leafCrossing('api/http', from, 'koa'), undefined);
    assert.equal(leafCrossing('api/http', from, '../requests/request-log.js'), 'api/requests/request-log.js');
    assert.equal(leafCrossing('api/http', from, '../server.js'), 'api/server.js');
    assert.equal(leafCrossing('api/http', from, '../http-extra/a.js'), 'api/http-extra/a.js');
    assert.equal(leafCrossing('api/http', 'api/http/deeper/a.ts', '../../relay/hold.js'), 'api/relay/hold.js');
  });

  it('has no circle of imports anywhere in the source', () => {
    assert.deepEqual(importCircles(), [], 'files that import one another round a loop');
  });

  it('sees every form an import can take', () => {
    const sample = [
      "/// <reference path='../workers/a.ts' />",
      "import type { A } from '../workers/a.js';",
      'import {',
      '  B,',
      "} from '../workers/b.js';",
      "import '../workers/c.js';",
      "export { D } from '../workers/d.js';",
      "export * from '../workers/e.js';",
      "import F = require('../workers/f.js');",
      "const g = await import('../workers/g.js');",
      "const h = require('../workers/h.js');",
      "type I = import('../workers/i.js').I;",
      "// import { J } from '../workers/j.js';",
      'const k = "import { K } from \'../workers/k.js\'";',
    ].join('\n');
    assert.deepEqual(
      importsOf('api/sample.ts', sample).sort((a, b) => a.line - b.line),
      [
        { line: 1, specifier: '../workers/a.ts' },
        { line: 2, specifier: '../workers/a.js' },
        { line: 5, specifier: '../workers/b.js' },
        { line: 6, specifier: '../workers/c.js' },
        { line: 7, specifier: '../workers/d.js' },
        { line: 8, specifier: '../workers/e.js' },
        { line: 9, specifier: '../workers/f.js' },
        { line: 10, specifier: '../workers/g.js' },
        { line: 11, specifier: '../workers/h.js' },
        { line: 12, specifier: '../workers/i.js' },
      ],
    );
  });
});
