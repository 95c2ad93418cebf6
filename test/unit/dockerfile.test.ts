import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { posix } from 'node:path';
import { loadConfig } from '../../shared/config.js';
import { finalStage, under } from '../support/dockerfile.js';

/**
 * The Dockerfile, read instruction by instruction (no Docker engine needed):
 * the image's default command starts with nothing but REDIS_URL, as `node`,
 * writing only under a declared volume; `/app` stays root's.
 * test/integration/image-start.test.ts runs that command the same way.
 */

describe('the Dockerfile', () => {
  const stage = finalStage();

  it('runs as `node`, not root', () => {
    assert.equal(stage.user, 'node');
    const lastUser = stage.instructions.map((i) => i.op).lastIndexOf('USER');
    assert.ok(
      stage.instructions.slice(lastUser + 1).every((i) => i.op !== 'RUN'),
      'nothing runs as root after USER node',
    );
  });

  it('starts node itself, so the SIGTERM `docker stop` sends reaches the gateway', () => {
    assert.deepEqual(stage.cmd.slice(0, 2), ['node', 'dist/bin/start.js']);
    assert.ok(!stage.cmd.includes('npm') && !stage.cmd.includes('sh'), `CMD ${JSON.stringify(stage.cmd)}`);
    assert.ok(
      stage.instructions
        .find((i) => i.op === 'CMD')!
        .args.trim()
        .startsWith('['),
      'exec form: no shell in between',
    );
    assert.equal(
      stage.instructions.find((i) => i.op === 'ENTRYPOINT'),
      undefined,
    );
    assert.ok(!stage.instructions.some((i) => i.op === 'STOPSIGNAL' && !/SIGTERM/.test(i.args)));
  });

  it('keeps what the gateway writes (the embedded record, the blobs) in a declared volume that `node` owns', () => {
    // What the gateway would use with this environment and nothing but REDIS_URL.
    const config = loadConfig({ ...stage.env, REDIS_URL: 'redis://redis:6379' });
    assert.equal(config.databaseUrl, undefined, 'no DATABASE_URL: the embedded record');
    assert.ok(
      posix.isAbsolute(config.dataDir) && posix.isAbsolute(config.blobDir),
      `absolute paths, not under the working directory: ${config.dataDir}, ${config.blobDir}`,
    );
    const volume = stage.volumes.find((dir) => under(config.dataDir, dir));
    assert.ok(volume, `DATA_DIR ${config.dataDir} is in a VOLUME (${stage.volumes.join(', ') || 'none'})`);
    assert.ok(under(config.blobDir, volume), `BLOB_DIR ${config.blobDir} is in the volume ${volume}`);
    assert.equal(stage.env.DATA_DIR, config.dataDir);
    // Made and handed to node before the VOLUME line: a volume's content is fixed there, later changes are dropped.
    const volumeAt = stage.instructions.findIndex((i) => i.op === 'VOLUME');
    const prepared = stage.instructions
      .slice(0, volumeAt)
      .filter((i) => i.op === 'RUN')
      .map((i) => i.args)
      .join(' && ');
    assert.match(
      prepared,
      new RegExp(`mkdir -p [^&]*${config.blobDir.replace(/\//g, '\\/')}\\b`),
      'the blob directory is made',
    );
    assert.match(prepared, new RegExp(`chown -R node:node ${volume.replace(/\//g, '\\/')}\\b`), "the volume is node's");
  });

  it("writes nothing under /app, which stays root's", () => {
    assert.equal(stage.workdir, '/app');
    const config = loadConfig({ ...stage.env, REDIS_URL: 'redis://redis:6379' });
    for (const [name, path] of [
      ['DATA_DIR', config.dataDir],
      ['BLOB_DIR', config.blobDir],
    ] as const) {
      assert.ok(
        !under(posix.resolve(stage.workdir, path), stage.workdir),
        `${name} ${path} is outside ${stage.workdir}`,
      );
    }
    for (const volume of stage.volumes)
      assert.ok(!under(volume, stage.workdir), `VOLUME ${volume} is outside ${stage.workdir}`);
    const runs = stage.instructions.filter((i) => i.op === 'RUN').map((i) => i.args);
    assert.ok(!runs.some((run) => /chown[^&]*\s(\/app|\.)(\/|\s|$)/.test(run)), '/app is not handed to node');
    assert.ok(!stage.instructions.some((i) => i.op === 'COPY' && /--chown/.test(i.args)), "copied files stay root's");
  });

  it('listens on the container network in production mode', () => {
    assert.equal(stage.env.HOST, '0.0.0.0');
    assert.equal(stage.env.NODE_ENV, 'production');
  });
});
