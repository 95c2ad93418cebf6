import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { AccountStore } from '../../api/accounts/account-store.js';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { recordUrlFor, testRecord } from '../support/record.js';

/*
 * What a newcomer and an operator meet in their first hour, following the
 * README: where the start log sends them, what `/` and a bad key say, the
 * CLI's help and which account its keys land in, a Redis that is not there,
 * and /metrics behind its optional token.
 */

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const adminEmail = 'first-hour@example.com';
const metricsToken = 'first-run-metrics-token';

const cli = async (script: 'keys' | 'accounts', args: string[], env: Record<string, string | undefined>) =>
  run(process.execPath, ['--import', 'tsx', `bin/${script}.ts`, ...args], {
    cwd: root,
    env: { ...process.env, DATABASE_URL: await recordUrlFor(env.REDIS_URL ?? 'redis://127.0.0.1:6379/0'), ...env },
  });

describe('the first hour', () => {
  let redis: Redis;
  let url: string;
  let gateway: GatewayProcess;

  before(async () => {
    ({ redis, url } = await freshRedis(2));
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: 'first-hour-password',
        METRICS_TOKEN: metricsToken,
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it('the start log names the console and the admin to sign in as', () => {
    const port = new URL(gateway.url).port;
    const line = gateway.logs.find((l) => l.includes('console at'));
    assert.ok(line, gateway.logs.join('\n'));
    assert.ok(line.includes(`http://127.0.0.1:${port}/console`), line);
    assert.ok(line.includes(adminEmail), line);
  });

  it('/ sends a browser to the console', async () => {
    for (const method of ['GET', 'HEAD']) {
      const res = await fetch(`${gateway.url}/`, { method, redirect: 'manual' });
      assert.equal(res.status, 302, method);
      assert.equal(res.headers.get('location'), '/console/');
    }
  });

  it('a bad key is told where keys are made: the console first', async () => {
    const res = await fetch(`${gateway.url}/v1/models`, { headers: { authorization: 'Bearer sy-not-a-real-key' } });
    assert.equal(res.status, 401);
    const { error } = (await res.json()) as { error: { message: string } };
    assert.match(error.message, /\/console/);
    assert.ok(error.message.indexOf('/console') < error.message.indexOf('npm run keys'), error.message);
  });

  it('/metrics asks for METRICS_TOKEN when it is set', async () => {
    const open = await fetch(`${gateway.url}/metrics`);
    assert.equal(open.status, 401);
    assert.equal(((await open.json()) as { error: { code: string } }).error.code, 'invalid_metrics_token');
    assert.equal((await fetch(`${gateway.url}/metrics`, { headers: { authorization: 'Bearer wrong' } })).status, 401);
    const scraped = await fetch(`${gateway.url}/metrics`, { headers: { authorization: `Bearer ${metricsToken}` } });
    assert.equal(scraped.status, 200);
    assert.match(await scraped.text(), /switchyard_http_requests_total/);
  });

  it('npm run keys and accounts print their help, and refuse an unknown option with exit 2', async () => {
    for (const script of ['keys', 'accounts'] as const) {
      for (const flag of ['--help', '-h']) {
        const { stdout } = await cli(script, [flag], { REDIS_URL: url });
        assert.match(stdout, new RegExp(`npm run ${script} -- `), `${script} ${flag}`);
      }
      const refused = await cli(script, ['list', '--bogus'], { REDIS_URL: url }).then(
        () => assert.fail('expected a refusal'),
        (error: { code: number; stderr: string }) => error,
      );
      assert.equal(refused.code, 2);
      assert.match(refused.stderr, /Unknown option '--bogus'.*see --help/);
    }
  });

  it('npm run keys says which account a key belongs to, and --account takes an id or an email', async () => {
    const accounts = new AccountStore(redis, await testRecord(redis));
    const owner = await accounts.create({ email: 'cli-owner@example.com', name: 'CLI owner' });
    const byEmail = await cli('keys', ['create', '--name', 'by email', '--account', 'cli-owner@example.com'], {
      REDIS_URL: url,
    });
    assert.match(byEmail.stderr, new RegExp(`in account ${owner.id} \\("CLI owner", balance 0 USD\\)`));
    const byDefault = await cli('keys', ['create', '--name', 'default'], { REDIS_URL: url });
    assert.match(byDefault.stderr, /in account acct_default \("Default", balance unlimited\)/);
    const missing = await cli('keys', ['create', '--name', 'x', '--account', 'nobody@example.com'], {
      REDIS_URL: url,
    }).then(
      () => assert.fail('expected a refusal'),
      (error: { code: number; stderr: string }) => error,
    );
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /no account with the email nobody@example.com/);
  });
});

describe('a Redis that is not there', () => {
  it('ends npm start, a worker and the CLI with one line naming host and port, never the password', async () => {
    const env = { REDIS_URL: 'redis://user:hunter2secret@127.0.0.1:1', PORT: '0' };
    for (const args of [
      ['bin/start.ts'],
      ['bin/start.ts', '--role=worker'],
      ['bin/keys.ts', 'list'],
      ['bin/accounts.ts', 'list'],
    ]) {
      const proc = spawn(process.execPath, ['--import', 'tsx', ...args], {
        cwd: root,
        env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root', ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      proc.stdout.on('data', (d: Buffer) => (output += d.toString()));
      proc.stderr.on('data', (d: Buffer) => (output += d.toString()));
      const [code] = (await once(proc, 'exit')) as [number | null];
      assert.equal(code, 1, `${args.join(' ')}: ${output}`);
      assert.match(output, /cannot reach Redis at 127\.0\.0\.1:1 \(REDIS_URL\)/, args.join(' '));
      assert.ok(!output.includes('hunter2secret'), 'no password in the message');
      assert.ok(!output.includes('max retries per request'), output);
    }
  });
});
