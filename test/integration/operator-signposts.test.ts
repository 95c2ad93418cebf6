import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import { connect } from 'node:net';
import { networkInterfaces } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { parse } from 'yaml';
import { AccountStore } from '../../api/accounts/account-store.js';
import { KeyStore } from '../../api/accounts/key-store.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { freePort, startPrivateRedis } from '../support/redis-server.js';
import { recordUrlFor, testRecord } from '../support/record.js';

/*
 * What an operator meets past the first page of the README: where the
 * gateway listens by default, /metrics of a worker behind METRICS_TOKEN, the
 * CLIs' answers to a mistyped command line or account, and a Redis that is
 * not there or refuses the credentials, in every form it can be named.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));

/** Runs a `bin/` script as `npm start` / `npm run keys` do (through tsx), in an environment holding only `env`. */
async function runScript(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number | null; output: string; ms: number }> {
  // The record that goes with the Redis named (never the embedded one under the checkout's .data).
  const record = env.DATABASE_URL ?? (await recordUrlFor(env.REDIS_URL ?? 'redis://127.0.0.1:6379/0'));
  const started = Date.now();
  const proc = spawn(process.execPath, ['--import', 'tsx', ...args], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root', PORT: '0', DATABASE_URL: record, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  proc.stdout.on('data', (d: Buffer) => (output += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const [code] = (await once(proc, 'exit')) as [number | null];
  return { code, output, ms: Date.now() - started };
}

/** Whether a TCP connection to host:port is accepted. */
function accepts(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: 2000 });
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => (socket.destroy(), resolve(false)));
  });
}

/** An IPv4 address of this machine other than loopback, if it has one: how the network would reach it. */
const networkAddress = Object.values(networkInterfaces())
  .flat()
  .find((address) => address && address.family === 'IPv4' && !address.internal)?.address;

const portIn = (line: string | undefined) => Number(/"port":(\d+)/.exec(line ?? '')?.[1]);

/** The healthcheck docker-compose.yml gives worker-chat, as Docker reads it. */
function composeWorkerHealthcheck(): string[] {
  const compose = parse(readFileSync(`${root}docker-compose.yml`, 'utf8'), { merge: true }) as {
    services: Record<string, { healthcheck?: { test?: string[] } }>;
  };
  const test = compose.services['worker-chat']?.healthcheck?.test;
  assert.ok(test && test.length > 2, 'worker-chat has a healthcheck command');
  return test;
}

function runCommand(program: string, args: string[]): Promise<{ code: number | null }> {
  const proc = spawn(program, args, { stdio: 'ignore' });
  return once(proc, 'exit').then(([code]) => ({ code: code as number | null }));
}

describe('where the gateway listens, and /metrics behind METRICS_TOKEN', () => {
  let redis: Redis;
  let url: string;
  const processes: GatewayProcess[] = [];
  const metricsToken = 'worker-metrics-token-7f3a';

  before(async () => {
    ({ redis, url } = await freshRedis(4));
  });

  after(async () => {
    await Promise.all(processes.map((p) => p.stop()));
    redis?.disconnect();
  });

  it(
    'binds 127.0.0.1 when HOST is unset: this machine reaches it, the network does not; HOST=0.0.0.0 (as ' +
      'containers set) opens it',
    async () => {
      // HOST blank is HOST unset: the default applies (the test harness otherwise sets 127.0.0.1 itself).
      const local = await startGateway({ role: 'api', env: { REDIS_URL: url, HOST: '' } });
      processes.push(local);
      const port = portIn(local.logs.find((l) => l.includes('gateway listening')));
      assert.ok(
        local.logs.some(
          (l) => l.includes('"host":"127.0.0.1"') && l.includes(`gateway listening on http://127.0.0.1:${port}/v1`),
        ),
        local.logs.join('\n'),
      );
      assert.equal((await fetch(`http://127.0.0.1:${port}/healthz`)).status, 200);
      if (networkAddress) assert.equal(await accepts(networkAddress, port), false, `not on ${networkAddress}`);

      const open = await startGateway({ role: 'api', env: { REDIS_URL: url, HOST: '0.0.0.0' } });
      processes.push(open);
      const openPort = portIn(open.logs.find((l) => l.includes('gateway listening')));
      // A wildcard is printed as the address a browser on this machine uses.
      await waitFor(
        () => open.logs.some((l) => l.includes(`console at http://localhost:${openPort}/console`)),
        5000,
        'the console line',
      );
      if (networkAddress) assert.equal(await accepts(networkAddress, openPort), true, `on ${networkAddress}`);
    },
  );

  it("a worker's own /metrics listener asks for METRICS_TOKEN, compared whole, and listens where HOST says", async () => {
    const worker = await startGateway({
      role: 'worker',
      env: { REDIS_URL: url, HOST: '', METRICS_PORT: '0', METRICS_TOKEN: metricsToken },
    });
    processes.push(worker);
    await waitFor(
      () => worker.logs.some((l) => l.includes('worker metrics listening')),
      10_000,
      'the metrics listener',
    );
    const port = portIn(worker.logs.find((l) => l.includes('worker metrics listening')));
    const metrics = `http://127.0.0.1:${port}/metrics`;
    const refusedWith = async (authorization?: string) => {
      const res = await fetch(metrics, authorization === undefined ? {} : { headers: { authorization } });
      assert.equal(res.status, 401, String(authorization));
      assert.equal(res.headers.get('www-authenticate'), 'Bearer');
      assert.ok(!(await res.text()).includes('switchyard_'), 'no metric leaks with the refusal');
    };
    await refusedWith(undefined);
    await refusedWith('Bearer wrong');
    await refusedWith(`Bearer ${metricsToken.slice(0, -1)}`);
    await refusedWith(`Bearer ${metricsToken}x`);
    await refusedWith(`Basic ${Buffer.from(`user:${metricsToken}`).toString('base64')}`);
    const scraped = await fetch(metrics, { headers: { authorization: `Bearer ${metricsToken}` } });
    assert.equal(scraped.status, 200);
    assert.match(await scraped.text(), /switchyard_/);
    if (networkAddress)
      assert.equal(await accepts(networkAddress, port), false, `the metrics listener is not on ${networkAddress}`);

    // docker-compose.yml's worker healthcheck, run as Docker would (its port swapped for this one): a 401 is a live
    // worker.
    const [kind, program, ...args] = composeWorkerHealthcheck().map((arg) =>
      arg.replace('127.0.0.1:9464', `127.0.0.1:${port}`),
    );
    assert.equal(kind, 'CMD');
    assert.equal(
      (await runCommand(program === 'node' ? process.execPath : program!, args)).code,
      0,
      'healthy with METRICS_TOKEN set',
    );
    const closed = await freePort();
    const dead = composeWorkerHealthcheck()
      .map((arg) => arg.replace('127.0.0.1:9464', `127.0.0.1:${closed}`))
      .slice(2);
    assert.equal((await runCommand(process.execPath, dead)).code, 1, 'unhealthy when nothing listens');
  });
});

describe('npm run keys and npm run accounts: mistakes and accounts', () => {
  let redis: Redis;
  let url: string;

  before(async () => {
    ({ redis, url } = await freshRedis(5));
  });

  after(() => redis?.disconnect());

  it('a mistyped command line gets one line saying what is wrong and where help is, and exit 2', async () => {
    const cases: Array<[script: string, args: string[], says: RegExp]> = [
      ['keys', ['list', '--bogus'], /^switchyard keys: Unknown option '--bogus' \(see --help\)$/],
      ['keys', ['-x'], /^switchyard keys: Unknown option '-x' \(see --help\)$/],
      ['keys', ['creat', '--name', 'n'], /^switchyard keys: unknown command "creat" \(see --help\)$/],
      ['keys', ['create', '--name'], /^switchyard keys: Option '--name <value>' argument missing \(see --help\)$/],
      [
        'keys',
        ['create', '--name', 'n', '--rpm', 'lots'],
        /^switchyard keys: --rpm must be a whole number from 1 to 1000000000, not "lots" \(see --help\)$/,
      ],
      ['accounts', ['list', '--bogus'], /^switchyard accounts: Unknown option '--bogus' \(see --help\)$/],
      ['accounts', ['remove', 'acct_x'], /^switchyard accounts: unknown command "remove" \(see --help\)$/],
      [
        'accounts',
        ['credit', 'acct_x', 'ten'],
        /^switchyard accounts: credit needs a non-zero amount in USD, not "ten" \(see --help\)$/,
      ],
    ];
    for (const [script, args, says] of cases) {
      const { code, output } = await runScript([`bin/${script}.ts`, ...args], { REDIS_URL: url });
      assert.equal(code, 2, `${script} ${args.join(' ')}: ${output}`);
      assert.match(output.trim(), says, `${script} ${args.join(' ')}`);
    }
  });

  it('no command at all prints the usage (exit 2); --help and -h print it and exit 0', async () => {
    for (const script of ['keys', 'accounts']) {
      const bare = await runScript([`bin/${script}.ts`], { REDIS_URL: url });
      assert.equal(bare.code, 2);
      assert.match(bare.output, new RegExp(`usage:\\n  npm run ${script} -- `));
      for (const flag of ['--help', '-h']) {
        const help = await runScript([`bin/${script}.ts`, flag], { REDIS_URL: url });
        assert.equal(help.code, 0, `${script} ${flag}`);
        assert.match(help.output, /--help +this text/);
      }
    }
  });

  it('--account names an existing account by id or email, or is refused and no key is made', async () => {
    const keys = new KeyStore(redis, await testRecord(redis));
    const owner = await new AccountStore(redis, await testRecord(redis)).create({
      email: 'signpost-owner@example.com',
      name: 'Signpost owner',
    });
    const byId = await runScript(['bin/keys.ts', 'create', '--name', 'by id', '--account', owner.id], {
      REDIS_URL: url,
    });
    assert.equal(byId.code, 0, byId.output);
    assert.match(byId.output, new RegExp(`in account ${owner.id} \\("Signpost owner", balance 0 USD\\)`));

    for (const [missing, says] of [
      ['acct_nope', 'no account with the id acct_nope'],
      ['nobody@example.com', 'no account with the email nobody@example.com'],
    ]) {
      const refused = await runScript(['bin/keys.ts', 'create', '--name', 'orphan', '--account', missing!], {
        REDIS_URL: url,
      });
      assert.equal(refused.code, 1, refused.output);
      assert.equal(refused.output.trim(), `switchyard keys: ${says} (npm run accounts -- list shows them)`);
    }
    assert.deepEqual(
      (await keys.list()).filter((key) => key.name === 'orphan'),
      [],
      'no key made for a missing account',
    );

    const listed = await runScript(['bin/keys.ts', 'list', '--account', 'signpost-owner@example.com'], {
      REDIS_URL: url,
    });
    assert.equal(listed.code, 0, listed.output);
    const rows = listed.output.trim().split('\n');
    assert.equal(rows.length, 1, listed.output);
    assert.match(rows[0]!, new RegExp(`\\t${owner.id}\\t.*\\tby id$`));
  });
});

describe('a Redis that is not there, or refuses the credentials', () => {
  /** The output is one line matching `says`, the exit 1, and no password shows. */
  function assertOneLine(result: { code: number | null; output: string }, says: RegExp, secret?: string) {
    assert.equal(result.code, 1, result.output);
    const lines = result.output.trim().split('\n');
    assert.equal(lines.length, 1, result.output);
    assert.match(lines[0]!, says);
    assert.ok(!result.output.includes('max retries per request'), result.output);
    if (secret) assert.ok(!result.output.includes(secret), 'no password in the message');
  }

  it('REDIS_URL: --role=api ends in one line naming host and port', async () => {
    const port = await freePort();
    assertOneLine(
      await runScript(['bin/start.ts', '--role=api'], { REDIS_URL: `redis://:pw-hidden-1@127.0.0.1:${port}` }),
      new RegExp(`^switchyard: cannot reach Redis at 127\\.0\\.0\\.1:${port} \\(REDIS_URL\\)`),
      'pw-hidden-1',
    );
  });

  it('a Cluster or Sentinels named and not there end npm start and the CLIs in one line naming them', async () => {
    const port = await freePort();
    const cluster = new RegExp(
      `cannot reach a Redis Cluster at 127\\.0\\.0\\.1:${port} \\(REDIS_CLUSTER_NODES, or a redis\\+cluster:// REDIS_URL\\)`,
    );
    assertOneLine(await runScript(['bin/start.ts'], { REDIS_CLUSTER_NODES: `127.0.0.1:${port}` }), cluster);
    assertOneLine(
      await runScript(['bin/keys.ts', 'list'], { REDIS_URL: `redis+cluster://:pw-hidden-2@127.0.0.1:${port}` }),
      cluster,
      'pw-hidden-2',
    );
    const sentinels = new RegExp(
      `cannot reach Redis through the Sentinels at 127\\.0\\.0\\.1:${port} \\(REDIS_SENTINELS\\) for the primary ` +
        `"mymaster"`,
    );
    assertOneLine(
      await runScript(['bin/start.ts', '--role=worker'], { REDIS_SENTINELS: `127.0.0.1:${port}` }),
      sentinels,
    );
    assertOneLine(await runScript(['bin/accounts.ts', 'list'], { REDIS_SENTINELS: `127.0.0.1:${port}` }), sentinels);
  });

  describe('a Redis that asks for a password', () => {
    let server: Awaited<ReturnType<typeof startPrivateRedis>>;
    const password = 'the-real-password-93';

    before(async () => {
      server = await startPrivateRedis({ aof: false });
      const admin = new Redis(server.url);
      await admin.config('SET', 'requirepass', password);
      admin.disconnect();
    });

    after(() => server?.remove());

    it('a wrong or missing password ends the start and the CLIs at once, in one line, not as an unreachable Redis', async () => {
      const wrong = `redis://:wrong-password-17@127.0.0.1:${server.port}`;
      const refused = new RegExp(
        `^switchyard( keys| accounts)?: Redis at 127\\.0\\.0\\.1:${server.port} refused the credentials ` +
          `\\((WRONGPASS|NOAUTH)[^)]*\\): set the user and password in REDIS_URL`,
      );
      for (const args of [['bin/start.ts'], ['bin/start.ts', '--role=api'], ['bin/keys.ts', 'list']]) {
        const result = await runScript(args, { REDIS_URL: wrong });
        assertOneLine(result, refused, 'wrong-password-17');
        assert.ok(result.ms < 4000, `${args.join(' ')}: no waiting for a Redis that answered (${result.ms} ms)`);
      }
      assertOneLine(
        await runScript(['bin/accounts.ts', 'list'], { REDIS_URL: `redis://127.0.0.1:${server.port}` }),
        /\(NOAUTH: it requires a password and none was given\)/,
      );
      const right = await runScript(['bin/accounts.ts', 'list'], {
        REDIS_URL: `redis://:${password}@127.0.0.1:${server.port}`,
      });
      assert.equal(right.code, 0, right.output);
    });

    it('a single Redis named as a Cluster is told apart from a missing one', async () => {
      assertOneLine(
        await runScript(['bin/start.ts', '--role=api'], {
          REDIS_URL: `redis+cluster://:${password}@127.0.0.1:${server.port}`,
        }),
        new RegExp(`Redis at 127\\.0\\.0\\.1:${server.port} is not a Cluster \\(cluster support disabled\\)`),
        password,
      );
    });
  });
});
