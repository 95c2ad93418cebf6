import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { as, declaredScripts, luaFiles, redisScript } from '../../shared/redis-script.js';
import { freshRedis } from '../support/gateway.js';
// Every module that declares scripts, so that all of them are checked below.
import '../../shared/money/scripts.js';
import '../../shared/scheduling/scripts.js';
import '../../shared/cache/scripts.js';
import '../../shared/batches/scripts.js';
import '../../api/accounts/scripts.js';
import '../../shared/access/index.js';
import '../../api/batches/openai-record.js';
import '../../api/console/sessions.js';
import '../../api/console/oidc.js';
import '../../storage/record/hot-state.js';
import '../../workers/responses-run.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

/** The project's TypeScript files (not its dependencies, its build or the test tools). */
function typescriptFiles(dir = root): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (['node_modules', 'dist', '.git', 'tools'].includes(entry.name)) return [];
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return typescriptFiles(path);
    return /\.tsx?$/.test(entry.name) ? [path] : [];
  });
}

describe('the one way to call a Redis script', () => {
  let redis: Redis;

  before(async () => {
    redis = (await freshRedis(11)).redis;
  });

  after(() => redis.disconnect());

  it('turns named keys and arguments into KEYS and ARGV in their declared order, lists spread in place', async () => {
    const echo = redisScript({
      name: 'test_echo',
      files: [new URL('../fixtures/lua/echo-keys-and-args.lua', import.meta.url)],
      keys: ['first', 'rest'],
      args: ['count', 'names'],
      reply: as<string[][]>(),
    });
    assert.deepEqual(echo.positional({ first: 'k1', rest: ['k2', 'k3'], count: 2, names: ['a', 'b'] }), [
      3,
      'k1',
      'k2',
      'k3',
      2,
      'a',
      'b',
    ]);
    // The caller's order of fields is not the order sent: the declaration's is.
    assert.deepEqual(await echo(redis, { names: ['x'], count: 7, rest: [], first: 'only' }), [['only'], ['7', 'x']]);
    assert.throws(() => echo.positional({ first: 'k1', rest: [], count: 1 } as never), /no value for names/);
  });

  it('refuses a name declared twice', () => {
    const spec = {
      name: 'money_reserve',
      files: luaFiles(import.meta.url, 'none'),
      keys: [],
      args: [],
      reply: as<number>(),
    };
    assert.throws(() => redisScript(spec), /declared twice/);
  });

  it('declares every script of the gateway once, each compiling in Redis', async () => {
    const scripts = declaredScripts().filter((script) => script.command !== 'sy_test_echo');
    assert.ok(scripts.length >= 40, `the gateway's scripts are declared (${scripts.length})`);
    assert.equal(new Set(scripts.map((script) => script.command)).size, scripts.length);
    for (const script of scripts) {
      // SCRIPT LOAD compiles without running: a syntax error in a .lua file fails here, by name.
      await assert.doesNotReject(redis.script('LOAD', script.lua) as Promise<unknown>, script.command);
    }
  });

  it('leaves no Lua in a TypeScript file', () => {
    const holding = typescriptFiles()
      .filter((file) => file !== fileURLToPath(import.meta.url))
      // What only Lua reads: a script's KEYS or ARGV by index.
      .filter((file) => /\b(KEYS|ARGV)\[\d/.test(readFileSync(file, 'utf8')))
      .map((file) => relative(root, file));
    assert.deepEqual(holding, []);
  });
});
