import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * `npm test`'s set-up (bin/test-setup.mjs) on a PATH that holds only some of the programs the tests start (and no
 * apt-get, so it cannot install them): it stops before any test with one line naming exactly what is missing and
 * the one command that installs it; with everything there it says so and exits 0.
 */
const root = fileURLToPath(new URL('../..', import.meta.url));
const setup = join(root, 'bin', 'test-setup.mjs');

describe('npm test’s set-up, on a machine that lacks some of what the tests start', () => {
  let dir: string;

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sy-test-setup-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** Runs the set-up with a PATH of its own holding stand-ins for `programs` (and nothing else: no apt-get). */
  const runWith = (name: string, programs: string[]) => {
    const bin = join(dir, name);
    spawnSync('mkdir', ['-p', bin]);
    for (const program of programs) {
      writeFileSync(join(bin, program), '#!/bin/sh\nexit 0\n');
      chmodSync(join(bin, program), 0o755);
    }
    // The database the tests already use answers: only the programs are in question.
    const run = spawnSync(process.execPath, [setup], {
      cwd: root,
      env: { PATH: bin, HOME: process.env.HOME ?? '/root', TEST_DATABASE_URL: process.env.TEST_DATABASE_URL ?? '' },
      encoding: 'utf8',
      timeout: 60_000,
    });
    return { status: run.status, out: `${run.stdout}${run.stderr}`.trim() };
  };

  it('names nginx alone, and the package that brings it, when only nginx is missing', () => {
    const { status, out } = runWith('no-nginx', ['redis-server', 'redis-cli', 'chromium', 'kubectl']);
    assert.equal(status, 1);
    assert.equal(
      out,
      'npm test needs nginx (the compose balancer’s test); install it with: sudo apt-get install -y nginx-light',
    );
  });

  it('names kubectl alone, and the repository its package comes from, when only kubectl is missing', () => {
    const { status, out } = runWith('no-kubectl', ['redis-server', 'redis-cli', 'chromium', 'nginx']);
    assert.equal(status, 1);
    assert.equal(
      out,
      'npm test needs kubectl (the Kubernetes manifests’ test renders them with kubectl kustomize); install it ' +
        'with: sudo apt-get install -y kubectl (kubectl from an apt repository that carries it, the Kubernetes ' +
        'project’s (pkgs.k8s.io) or the Google Cloud SDK’s: Debian’s kubernetes-client is too old to render them)',
    );
  });

  it('names every program, once each, with the packages that bring them, on an empty PATH', () => {
    const { status, out } = runWith('empty', []);
    assert.equal(status, 1);
    assert.equal(out.split('\n').length, 1, `one line: ${out}`);
    assert.equal(
      out,
      'npm test needs redis-server (each test file starts its own Redis), redis-cli (the Cluster and Sentinel ' +
        'tests build their topologies with it), chromium (the console’s browser tests), nginx (the compose ' +
        'balancer’s test), kubectl (the Kubernetes manifests’ test renders them with kubectl kustomize); install ' +
        'them with: sudo apt-get install -y redis-server redis-tools chromium nginx-light kubectl (kubectl from an ' +
        'apt repository that carries it, the Kubernetes project’s (pkgs.k8s.io) or the Google Cloud SDK’s: ' +
        'Debian’s kubernetes-client is too old to render them)',
    );
  });

  it('goes on when everything is there', () => {
    const { status, out } = runWith('all', ['redis-server', 'redis-cli', 'chromium', 'nginx', 'kubectl']);
    assert.equal(status, 0, out);
    assert.match(out, /everything the tests need is here$/);
  });
});
