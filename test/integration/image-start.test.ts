import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freshRedis, waitFor } from '../support/gateway.js';
import { finalStage, under } from '../support/dockerfile.js';
import { freePort } from '../support/redis-server.js';
import { onProcessEnd } from '../support/process-end.js';

/**
 * The image's default start, without Docker: the Dockerfile's CMD with its
 * ENV and nothing but REDIS_URL, as a user who cannot write the app's
 * directory (as root here: `nobody`, as PostgreSQL's tests do; else this
 * user, the app directory made read-only), the Dockerfile's VOLUME a
 * directory that user owns. The app directory holds what the image's does
 * (dist/, node_modules/, package.json), linked from this checkout.
 * Left out of the image's environment: HOST and PORT (loopback and a free
 * port, so the test serves nothing to the network); added: ADMIN_TOKEN, to
 * make a key, and MOCK_VENDOR=on, to make an image with it.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const stage = finalStage();

/** `nobody` when this process is root (the image's `node` user need not exist here), else nobody to switch to. */
function unprivileged(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(spawnSync('id', [flag, 'nobody'], { encoding: 'utf8' }).stdout.trim());
  const uid = id('-u');
  const gid = id('-g');
  assert.ok(uid > 0 && gid > 0, 'a `nobody` user to run as');
  return { uid, gid };
}

describe("the image's default command, as an unprivileged user with nothing but REDIS_URL", () => {
  const user = unprivileged();
  const dir = mkdtempSync(join(tmpdir(), 'switchyard-image-'));
  const app = join(dir, 'app');
  const volumes = new Map<string, string>();
  let gateway: ChildProcess | undefined;
  const logs: string[] = [];
  let base = '';
  let volumeDir = '';

  /** A path of the image, where it is here: under a volume's stand-in, or the app directory. */
  const here = (path: string) => {
    for (const [volume, local] of volumes) if (under(path, volume)) return join(local, posix.relative(volume, path));
    return under(path, stage.workdir) ? join(app, posix.relative(stage.workdir, path)) : path;
  };
  const kill = () => {
    if (gateway && gateway.exitCode === null && gateway.signalCode === null) gateway.kill('SIGKILL');
  };
  onProcessEnd(kill);

  before(async () => {
    assert.ok(existsSync(join(root, 'dist/bin/start.js')), 'dist/ is built (npm run build, as the image does)');
    // What the image's /app holds, read-only to the gateway's user.
    mkdirSync(app);
    // Links to this checkout's, unless it sits where that user may not go (a clone under root's 0700 home): then
    // hard links of its files (a copy across file systems), which the image's COPY makes too.
    const reachable =
      !user || spawnSync('test', ['-r', join(root, 'node_modules', 'pg', 'package.json')], { ...user }).status === 0;
    for (const name of ['dist', 'node_modules']) {
      if (reachable) symlinkSync(join(root, name), join(app, name));
      else if (spawnSync('cp', ['-al', join(root, name), join(app, name)]).status !== 0) {
        rmSync(join(app, name), { recursive: true, force: true });
        assert.equal(
          spawnSync('cp', ['-a', join(root, name), join(app, name)]).status,
          0,
          `${name} copied for the image's user`,
        );
      }
    }
    copyFileSync(join(root, 'package.json'), join(app, 'package.json'));
    chmodSync(app, 0o555);
    // Each VOLUME: a directory the user owns, made as the Dockerfile makes it (mkdir -p under it, then chown -R).
    for (const [index, volume] of stage.volumes.entries()) {
      const local = join(dir, `volume-${index}`);
      volumes.set(volume, local);
      mkdirSync(local, { mode: 0o700 });
    }
    volumeDir = here(stage.volumes[0] ?? '/nonexistent');
    const env: Record<string, string> = {};
    for (const [name, value] of Object.entries(stage.env)) env[name] = value.startsWith('/') ? here(value) : value;
    for (const name of ['DATA_DIR', 'BLOB_DIR']) if (env[name]) mkdirSync(env[name]!, { recursive: true });
    chmodSync(dir, 0o755);
    if (user) for (const local of volumes.values()) chownTree(local, user);
    // The node binary, where that user can run it (this one may sit under root's 0700 home).
    let node = process.execPath;
    if (user && spawnSync(node, ['-e', '0'], { ...user }).status !== 0) {
      node = join(dir, 'node');
      copyFileSync(process.execPath, node);
      chmodSync(node, 0o755);
    }
    const [command, ...args] = stage.cmd;
    assert.equal(command, 'node');
    const { url, redis } = await freshRedis(13);
    await redis.quit();
    const port = await freePort();
    gateway = spawn(node, args, {
      cwd: app,
      ...user,
      env: {
        PATH: '/usr/local/bin:/usr/bin:/bin',
        HOME: join(dir, 'no-home'),
        ...env,
        REDIS_URL: url,
        HOST: '127.0.0.1',
        PORT: String(port),
        ADMIN_TOKEN: 'image-start-admin',
        MOCK_VENDOR: 'on',
        SHUTDOWN_GRACE_MS: '3000',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    for (const stream of [gateway.stdout!, gateway.stderr!])
      stream.on('data', (data: Buffer) => logs.push(...data.toString().split('\n').filter(Boolean)));
    base = `http://127.0.0.1:${port}`;
    await waitFor(
      async () => {
        if (gateway!.exitCode !== null)
          throw new Error(`the gateway exited with ${gateway!.exitCode}:\n${logs.join('\n')}`);
        return (await fetch(`${base}/healthz`).catch(() => undefined))?.status === 200;
      },
      90_000,
      `the image's command to serve:\n${logs.join('\n')}`,
    );
  });

  after(async () => {
    if (gateway && gateway.exitCode === null && gateway.signalCode === null) {
      const closed = new Promise((resolve) => gateway!.once('close', resolve));
      gateway.kill('SIGTERM');
      await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 15_000))]);
      kill();
    }
    rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  });

  it('starts on the embedded record it makes in the volume, and serves a key and an image stored there', async () => {
    const admin = { authorization: 'Bearer image-start-admin', 'content-type': 'application/json' };
    const made = await fetch(`${base}/admin/keys`, {
      method: 'POST',
      headers: admin,
      body: JSON.stringify({ name: 'image' }),
    });
    assert.equal(made.status, 201, await made.clone().text());
    const { key } = (await made.json()) as { key: string };
    const res = await fetch(`${base}/v1/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-image', prompt: 'a volume', size: '256x256', response_format: 'url' }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    const { data } = (await res.json()) as { data: Array<{ url: string }> };
    const image = await fetch(data[0]!.url.replace(/^https?:\/\/[^/]+/, base));
    assert.equal(image.status, 200);
    assert.equal(image.headers.get('content-type'), 'image/png');

    const dataDir = here(stage.env.DATA_DIR!);
    const blobDir = here(stage.env.BLOB_DIR!);
    assert.ok(
      existsSync(join(dataDir, 'postgres', 'PG_VERSION')),
      `the embedded record's cluster in ${stage.env.DATA_DIR}`,
    );
    assert.ok(filesUnder(blobDir).length > 0, `the image's blob in ${stage.env.BLOB_DIR}`);
    // Everything written is the user's, inside the volume; the app directory is as it was.
    if (user) for (const file of filesUnder(volumeDir)) assert.equal(statSync(file).uid, user.uid, file);
    assert.deepEqual(readdirSync(app).sort(), ['dist', 'node_modules', 'package.json']);
    assert.doesNotMatch(logs.join('\n'), /EACCES|EPERM|permission denied/i);
  });

  it('drains and stops on SIGTERM', async () => {
    const closed = new Promise<number | null>((resolve) => gateway!.once('close', (code) => resolve(code)));
    gateway!.kill('SIGTERM');
    assert.equal(await closed, 0, logs.slice(-5).join('\n'));
    assert.match(logs.join('\n'), /"signal":"SIGTERM"[^\n]*draining/);
  });
});

function filesUnder(path: string): string[] {
  if (!existsSync(path)) return [];
  return readdirSync(path, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name));
}

function chownTree(path: string, user: { uid: number; gid: number }): void {
  chownSync(path, user.uid, user.gid);
  if (!statSync(path).isDirectory()) return;
  for (const name of readdirSync(path)) chownTree(join(path, name), user);
}
