import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { onProcessEnd } from '../support/process-end.js';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { rawGet } from '../support/raw-get.js';

/*
 * The compose balancer (deploy/nginx.conf) on Debian's real nginx, in front of a real api: `/metrics` in every
 * spelling a client tries is nginx's own 404, never the metrics, while the API passes through (issue 45). nginx
 * matches locations against the URI it has normalised (escapes decoded, dot segments resolved, slashes merged), so
 * a rule on the exact path `/metrics` alone let `/metrics/` and the others through to the api.
 *
 * The config file runs as it is, but for three substitutions, each checked to hit once: its `listen 8080` becomes a
 * free port on the loopback, Docker's DNS (`resolver 127.0.0.11`) this machine's (never asked: the upstream is an
 * address), and its upstream `http://api:8080` the test's api. Around it, the `http {}` and `events {}` blocks the
 * nginx image's own nginx.conf gives the file, and a prefix, pid file, logs and temp folders in a temp folder.
 */

const root = fileURLToPath(new URL('../../', import.meta.url));

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** `text` with `from` replaced by `to`, which must occur exactly once. */
function substitute(text: string, from: string, to: string): string {
  assert.equal(text.split(from).length, 2, `deploy/nginx.conf has \`${from}\` once`);
  return text.replace(from, to);
}

/** A request sent byte for byte (node:http, not fetch, which would tidy the URL first). */
const raw = (port: number, path: string, headers: Record<string, string> = {}) =>
  rawGet('127.0.0.1', port, path, headers);

describe('the compose balancer (deploy/nginx.conf) keeps /metrics in, in every spelling', () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let apiKey: string;
  let nginx: ChildProcess | undefined;
  let dir = '';
  let port = 0;
  const logs: string[] = [];

  before(async () => {
    assert.equal(
      spawnSync('nginx', ['-v']).error,
      undefined,
      "Debian's nginx is needed (apt-get install nginx-light; .ci/run installs it)",
    );
    let url: string;
    ({ redis, url } = await freshRedis(12));
    gateway = await startGateway({ role: 'api', env: { REDIS_URL: url, MOCK_VENDOR: 'on', TRUST_PROXY: 'on' } });
    apiKey = (await createKey(redis, 'balancer')).key;

    dir = mkdtempSync(join(tmpdir(), 'switchyard-nginx-'));
    for (const sub of ['logs', 'temp']) mkdirSync(join(dir, sub));
    port = await freePort();
    let site = readFileSync(join(root, 'deploy/nginx.conf'), 'utf8');
    site = substitute(site, 'listen 8080;', `listen 127.0.0.1:${port};`);
    site = substitute(site, 'resolver 127.0.0.11 ', 'resolver 127.0.0.1 ');
    site = substitute(site, 'http://api:8080', gateway.url);
    const temp = (name: string) => `${name}_temp_path ${join(dir, 'temp', name)};`;
    writeFileSync(
      join(dir, 'nginx.conf'),
      [
        `pid ${join(dir, 'nginx.pid')};`,
        `error_log ${join(dir, 'logs', 'error.log')} info;`,
        'events {}',
        'http {',
        `  access_log ${join(dir, 'logs', 'access.log')};`,
        ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((name) => `  ${temp(name)}`),
        site,
        '}',
        '',
      ].join('\n'),
    );
    // One process (no master and workers), so that killing it is all it takes.
    nginx = spawn(
      'nginx',
      [
        '-p',
        dir,
        '-e',
        join(dir, 'logs', 'error.log'),
        '-c',
        join(dir, 'nginx.conf'),
        '-g',
        'daemon off; master_process off;',
      ],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    const child = nginx;
    onProcessEnd(() => child.kill('SIGKILL'));
    for (const stream of [nginx.stdout!, nginx.stderr!])
      stream.on('data', (data: Buffer) => logs.push(data.toString()));
    await waitFor(
      async () => {
        if (child.exitCode !== null)
          assert.fail(
            `nginx exited with ${child.exitCode}: ${logs.join('')}${readFileSync(join(dir, 'logs', 'error.log'), 'utf8')}`,
          );
        return raw(port, '/healthz').then(
          (answer) => answer.status === 200,
          () => false,
        );
      },
      10_000,
      'nginx to pass /healthz through',
    );
  });

  after(async () => {
    if (nginx && nginx.exitCode === null) {
      const exited = new Promise((resolve) => nginx!.once('exit', resolve));
      nginx.kill('SIGKILL');
      await exited;
    }
    await gateway?.stop();
    redis?.disconnect();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('answers every spelling of /metrics with its own JSON 404, never the metrics', async () => {
    // The api, asked directly from this machine, does serve them: what keeps them in is the balancer.
    const direct = await fetch(`${gateway.url}/metrics`);
    assert.equal(direct.status, 200);
    assert.match(await direct.text(), /^# HELP switchyard_/m);
    const spellings = [
      '/metrics',
      '/metrics?x=1',
      '/metrics/',
      '/metrics/.',
      '/metrics/./',
      '/x/../metrics',
      '/x/../metrics/',
      '/./metrics',
      '/METRICS',
      '/Metrics/',
      '//metrics',
      '///metrics//',
      '/%6Detrics',
      '/%6detrics',
      '/%2e/metrics',
      '/metrics%2f',
      '/metrics%2F',
      '/%6D%65%74%72%69%63%73',
    ];
    for (const path of spellings) {
      const answer = await raw(port, path);
      assert.equal(answer.status, 404, `${path}: ${answer.status} ${answer.body.slice(0, 200)}`);
      assert.doesNotMatch(answer.body, /switchyard_|# HELP|# TYPE/, path);
      // nginx's own answer, the same OpenAI-shaped JSON for every spelling (the api's 404 would say unknown_url):
      // the balancer holds whatever the api does behind it.
      const error = (JSON.parse(answer.body) as { error: { code: string; type: string; message: string } }).error;
      assert.equal(error.code, 'not_found', `${path}: ${answer.body}`);
      assert.equal(error.type, 'invalid_request_error', path);
    }
  });

  it('passes the API through', async () => {
    const models = await raw(port, '/v1/models', { authorization: `Bearer ${apiKey}` });
    assert.equal(models.status, 200, models.body.slice(0, 200));
    assert.equal((JSON.parse(models.body) as { object: string }).object, 'list');
    const unkeyed = await raw(port, '/v1/models');
    assert.equal(unkeyed.status, 401, 'the api answers, with its own guard');
    // A path that only starts like the metrics' is the api's to answer.
    const other = await raw(port, '/metricsx');
    assert.equal(other.status, 404);
    assert.equal((JSON.parse(other.body) as { error: { code: string } }).error.code, 'unknown_url');
  });
});
