import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { lstatSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import pg from 'pg';
import { processAlive, recordUserName } from '../../storage/record/embedded-engine.js';
import { locateRecord } from '../../storage/record/embedded.js';
import { LocalBlobStore } from '../../storage/local-blob-store.js';
import { cleanupsAfter } from '../support/cleanups.js';
import { waitFor } from '../support/gateway.js';
import { onDatabase } from '../support/record.js';

/*
 * The embedded record's server runs, as root, as a user of its own (issue 45,
 * item 4). Whoever acts as that user — a flaw in the server, another program
 * made to run as it — owns the cluster's files and nothing else: it can
 * neither open the record without its password, nor make the gateway signal
 * a process of its choosing, nor send the gateway's writes elsewhere. Here a
 * shell runs as that user with the cluster as its working directory, the
 * most it can be given.
 */

const asRoot = process.getuid?.() === 0;
const postmasterPid = (cluster: string) => Number(readFileSync(join(cluster, 'postmaster.pid'), 'utf8').split('\n')[0]);
const uidOf = (pid: number) => Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);

describe("the embedded record's server user", () => {
  const { defer, tempDir } = cleanupsAfter();

  if (!asRoot) {
    it("is this process's own user when the gateway is not root", async () => {
      const dataDir = tempDir('sy-ruser-');
      const record = await locateRecord(undefined, dataDir);
      defer(() => record.close());
      assert.equal(uidOf(postmasterPid(join(dataDir, 'postgres'))), process.getuid!());
    });
    return;
  }

  const id = (flag: string) => Number(spawnSync('id', [flag, recordUserName], { encoding: 'utf8' }).stdout.trim());

  /** Runs `script` in a shell as the record's user, in the cluster folder. */
  const asRecordUser = (cluster: string, script: string) => {
    const run = spawnSync('/bin/sh', ['-c', script], {
      uid: id('-u'),
      gid: id('-g'),
      cwd: cluster,
      encoding: 'utf8',
      timeout: 10_000,
    });
    return { code: run.status, output: `${run.stdout}${run.stderr}` };
  };

  it("is a user of the record's alone, owning the cluster folder and nothing else under DATA_DIR", async () => {
    const dataDir = tempDir('sy-ruser-');
    const record = await locateRecord(undefined, dataDir);
    defer(() => record.close());
    const cluster = join(dataDir, 'postgres');
    assert.equal(uidOf(postmasterPid(cluster)), id('-u'), `the server runs as ${recordUserName}`);
    assert.notEqual(
      id('-u'),
      Number(spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).stdout.trim() || -1),
      "not the distribution's postgres user",
    );
    assert.equal(lstatSync(dataDir).uid, 0);
    assert.equal(lstatSync(dataDir).mode & 0o777, 0o700);
    for (const name of readdirSync(dataDir)) {
      const owner = lstatSync(join(dataDir, name)).uid;
      assert.equal(
        owner,
        name === 'postgres' ? id('-u') : 0,
        `${name} belongs to ${name === 'postgres' ? recordUserName : 'root'}`,
      );
    }
  });

  it('takes back a DATA_DIR an older gateway gave to the postgres user, and hands its cluster to its own user', async () => {
    const dataDir = tempDir('sy-ruser-');
    const first = await locateRecord(undefined, dataDir);
    await onDatabase(first.url, (client) => client.query('create table kept (n int); insert into kept values (45)'));
    await first.close();
    // As an older gateway left it: everything the postgres user's.
    assert.equal(spawnSync('chown', ['-R', 'postgres:postgres', dataDir]).status, 0);
    const record = await locateRecord(undefined, dataDir);
    defer(() => record.close());
    assert.equal(lstatSync(dataDir).uid, 0, "DATA_DIR root's again");
    for (const name of readdirSync(dataDir).filter((entry) => entry !== 'postgres'))
      assert.equal(lstatSync(join(dataDir, name)).uid, 0, `${name} root's again`);
    assert.equal(lstatSync(join(dataDir, 'postgres')).uid, id('-u'));
    assert.equal(lstatSync(join(dataDir, 'postgres', 'PG_VERSION')).uid, id('-u'));
    assert.equal(
      await onDatabase(
        record.url,
        async (client) => (await client.query<{ n: number }>('select n from kept')).rows[0]!.n,
      ),
      45,
    );
  });

  it('cannot open the record without its password, even with pg_hba.conf rewritten to trust and the server reloaded', async () => {
    const dataDir = tempDir('sy-ruser-');
    const record = await locateRecord(undefined, dataDir);
    defer(() => record.close());
    const cluster = join(dataDir, 'postgres');
    const tampered = asRecordUser(
      cluster,
      'printf "local all all trust\\nhost all all 127.0.0.1/32 trust\\n" > pg_hba.conf && kill -HUP "$(head -1 ' +
        'postmaster.pid)"',
    );
    assert.equal(tampered.code, 0, `the user may write its own files and signal its own server: ${tampered.output}`);
    await new Promise((r) => setTimeout(r, 1000));
    const withoutPassword = new pg.Client({
      host: cluster,
      user: 'switchyard',
      database: 'postgres',
      password: 'not-the-password',
      connectionTimeoutMillis: 5000,
    });
    withoutPassword.on('error', () => undefined);
    await assert.rejects(withoutPassword.connect(), /password authentication failed/);
    await withoutPassword.end().catch(() => undefined);
    // The record itself answers as before, with the password.
    assert.equal(
      await onDatabase(record.url, async (client) => (await client.query<{ n: number }>('select 1 as n')).rows[0]!.n),
      1,
    );
  });

  it("cannot reach DATA_DIR: no link in place of the blobs folder, and the gateway's blob writes stay in it", async () => {
    const dataDir = tempDir('sy-ruser-');
    const record = await locateRecord(undefined, dataDir);
    defer(() => record.close());
    const cluster = join(dataDir, 'postgres');
    const elsewhere = tempDir('sy-ruser-elsewhere-');
    const planted = asRecordUser(
      cluster,
      `ln -s ${elsewhere} ../blobs || ln -s ${elsewhere} ${join(dataDir, 'blobs')}`,
    );
    assert.notEqual(planted.code, 0, 'the link could not be made');
    assert.match(planted.output, /Permission denied/);
    const store = new LocalBlobStore(join(dataDir, 'blobs'));
    await store.put('images/a.png', Buffer.from('png'), 'image/png');
    assert.ok(lstatSync(join(dataDir, 'blobs')).isDirectory());
    assert.deepEqual(readdirSync(elsewhere), []);
    assert.equal(lstatSync(join(dataDir, 'blobs', 'images', 'a.png')).mode & 0o777, 0o600);
  });

  it('cannot make the gateway signal another process by writing its pid into postmaster.pid', async () => {
    const dataDir = tempDir('sy-ruser-');
    const record = await locateRecord(undefined, dataDir, { stopMs: 10_000 });
    defer(() => record.close());
    const cluster = join(dataDir, 'postgres');
    const server = postmasterPid(cluster);
    const bystander = spawn('sleep', ['60'], { stdio: 'ignore' });
    defer(() => bystander.kill('SIGKILL'));
    const tampered = asRecordUser(cluster, `sed -i "1s/.*/${bystander.pid}/" postmaster.pid && head -1 postmaster.pid`);
    assert.equal(tampered.output.trim(), String(bystander.pid), tampered.output);
    await record.close();
    assert.ok(processAlive(bystander.pid!), 'the process named in postmaster.pid was not signalled');
    assert.equal(bystander.exitCode, null);
    await waitFor(() => !processAlive(server), 5000, 'the real server to be stopped');
  });
});
