import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { canonicalPath } from '../../api/http/canonical-path.js';

describe('canonicalPath: one rule for what a request path is', () => {
  it('merges slashes, removes dot segments and decodes escaped unreserved characters', () => {
    const cases: Array<[string, string]> = [
      ['/', '/'],
      ['/admin/accounts', '/admin/accounts'],
      ['/admin//accounts', '/admin/accounts'],
      ['//admin///accounts', '/admin/accounts'],
      ['/admin/./accounts', '/admin/accounts'],
      ['/v1/../admin', '/admin'],
      ['/v1/../../../admin', '/admin'],
      ['/%61dmin', '/admin'],
      ['/%61%64%6D%69%6E/x', '/admin/x'],
      ['/v1/%2e%2e/admin', '/admin'],
      ['/v1/%2E/models', '/v1/models'],
      ['/v1/models/', '/v1/models/'],
      ['/v1/models/.', '/v1/models/'],
      ['/v1/..', '/'],
      ['/v1/models/org%2fname', '/v1/models/org%2Fname'],
      ['/v1/models/a%20b', '/v1/models/a%20b'],
      ['/v1/a~b_c-d.e', '/v1/a~b_c-d.e'],
    ];
    for (const [raw, canonical] of cases) assert.equal(canonicalPath(raw), canonical, raw);
  });

  it('keeps letter case: routes match it exactly', () => {
    assert.equal(canonicalPath('/ADMIN/Accounts'), '/ADMIN/Accounts');
    assert.equal(canonicalPath('/v1/responses/resp_AbC'), '/v1/responses/resp_AbC');
  });

  it('refuses malformed escapes and NUL', () => {
    for (const raw of ['/%zz', '/a%', '/a%4', '/%00', '/a/%00/b']) assert.equal(canonicalPath(raw), undefined, raw);
  });

  it('is idempotent', () => {
    for (const raw of ['/a//b/./c/../d/', '/%61/%2f/', '/x/%2E%2E/y']) {
      const once = canonicalPath(raw)!;
      assert.equal(canonicalPath(once), once, raw);
    }
  });

  it('every router of the api is made by createRouter (case-sensitive), none directly', () => {
    const apiDir = fileURLToPath(new URL('../../api', import.meta.url));
    const offenders: string[] = [];
    const walk = (dir: string) => {
      for (const name of readdirSync(dir)) {
        const path = join(dir, name);
        if (statSync(path).isDirectory()) walk(path);
        else if (
          name.endsWith('.ts') &&
          name !== 'canonical-path.ts' &&
          /new Router\b/.test(readFileSync(path, 'utf8'))
        )
          offenders.push(path);
      }
    };
    walk(apiDir);
    assert.deepEqual(offenders, []);
  });
});
