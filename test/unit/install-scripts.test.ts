import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

/**
 * npm 11 runs a dependency's install scripts only where package.json's `allowScripts` allows them, and ends every
 * install that meets one it does not name with a warning. Every package of the lockfile that has install scripts is
 * named there, allowed or refused on purpose (docs/setup.md says why each), so `npm install` and `npm ci` print none;
 * no entry names a package the lockfile no longer holds with scripts.
 */

const root = new URL('../../', import.meta.url);
const manifest = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as {
  allowScripts?: Record<string, boolean>;
};
const lock = JSON.parse(readFileSync(new URL('package-lock.json', root), 'utf8')) as {
  packages: Record<string, { hasInstallScript?: boolean }>;
};

/** The packages of the lockfile with install scripts, by name (`node_modules/a/node_modules/@s/b` is `@s/b`). */
const withScripts = [
  ...new Set(
    Object.entries(lock.packages)
      .filter(([path, entry]) => path !== '' && entry.hasInstallScript)
      .map(([path]) => path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length)),
  ),
].sort();

describe('install scripts', () => {
  it('are each allowed or refused by name in package.json, so an install warns of none', () => {
    assert.ok(withScripts.length > 0, 'the lockfile holds packages with install scripts');
    const named = manifest.allowScripts ?? {};
    const unnamed = withScripts.filter((name) => !(name in named));
    assert.deepEqual(unnamed, [], `add to allowScripts (true to run, false to refuse): ${unnamed.join(', ')}`);
    for (const [name, allowed] of Object.entries(named))
      assert.equal(typeof allowed, 'boolean', `${name}: true or false, by name (no version pin to fall behind)`);
  });

  it('names no package the lockfile does not hold with install scripts', () => {
    const stale = Object.keys(manifest.allowScripts ?? {}).filter((name) => !withScripts.includes(name));
    assert.deepEqual(stale, []);
  });

  it(
    'runs only the build tool’s, whose binary check the build needs; the embedded PostgreSQL’s links are made by ' +
      'the gateway itself',
    () => {
      assert.deepEqual(
        Object.entries(manifest.allowScripts ?? {})
          .filter(([, allowed]) => allowed)
          .map(([name]) => name),
        ['esbuild'],
      );
      // storage/record/embedded-engine.ts makes the links the package's postinstall would (pg-symlinks.json) at start.
      assert.match(readFileSync(new URL('storage/record/embedded-engine.ts', root), 'utf8'), /pg-symlinks\.json/);
    },
  );
});
