import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { freshRedis, startGateway } from '../support/gateway.js';
import { testRecord } from '../support/record.js';
import { channelId } from '../../shared/vendors.js';
import type { RecordDb } from '../../storage/record/database.js';

/*
 * The channels are configuration, so the audit log learns of a change when an api starts with other ones: one
 * `channel.updated` row by `system` naming each channel added, removed or changed, never a key. Real api processes
 * (bin/start.ts) on one Redis and one record, started again and again with other settings.
 */

interface ChannelRow {
  actor: string;
  target: string | null;
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
}

describe('channels changed between starts, in the audit log', () => {
  let redis: Redis;
  let url: string;
  let record: RecordDb;
  const folder = mkdtempSync(join(tmpdir(), 'switchyard-audit-channels-'));
  const openai = 'https://api.openai.com/v1';
  const idOf = (key: string, base = openai) => channelId('openai', base, key);

  before(async () => {
    ({ redis, url } = await freshRedis(9));
    record = await testRecord(url);
  });

  after(async () => {
    redis?.disconnect();
    rmSync(folder, { recursive: true, force: true });
  });

  const channelRows = async (): Promise<ChannelRow[]> =>
    (await record
      .selectFrom('audit_log')
      .select(['actor', 'target', 'before', 'after'])
      .where('action', '=', 'channel.updated')
      .orderBy('id')
      .execute()) as ChannelRow[];

  /** An api started with `env` until it serves, then stopped. */
  async function startOnce(env: Record<string, string>): Promise<void> {
    const api = await startGateway({ role: 'api', env: { REDIS_URL: url, MOCK_VENDOR: 'off', ...env } });
    await api.stop();
  }

  it('records every channel at the first start, and nothing at a start with the same channels', async () => {
    await startOnce({ OPENAI_API_KEY: 'sk-first-secret,sk-second-secret' });
    const rows = await channelRows();
    assert.equal(rows.length, 1);
    const [row] = rows;
    assert.equal(row!.actor, 'system');
    assert.equal(row!.target, 'channels');
    assert.deepEqual(row!.before, { [idOf('sk-first-secret')]: null, [idOf('sk-second-secret')]: null });
    assert.deepEqual(row!.after, {
      [idOf('sk-first-secret')]: { vendor: 'openai', base_url: openai, weight: 1, mock: false },
      [idOf('sk-second-secret')]: { vendor: 'openai', base_url: openai, weight: 1, mock: false },
    });
    await startOnce({ OPENAI_API_KEY: 'sk-second-secret,sk-first-secret' });
    assert.equal((await channelRows()).length, 1, 'the same channels in another order are no change');
  });

  it('records a key rotated as one channel gone and one added, a weight changed before and after, and never a key', async () => {
    const file = join(folder, 'channels.json');
    writeFileSync(file, JSON.stringify({ channels: [{ vendor: 'openai', apiKey: 'sk-second-secret', weight: 3 }] }));
    await startOnce({ OPENAI_API_KEY: 'sk-third-secret', CHANNELS_FILE: file });
    const rows = await channelRows();
    assert.equal(rows.length, 2);
    const row = rows[1]!;
    // sk-second-secret is now the file's (weight 3) and sk-third-secret's channel is new; sk-first-secret's is gone.
    assert.deepEqual(row.before, {
      [idOf('sk-first-secret')]: { vendor: 'openai', base_url: openai, weight: 1, mock: false },
      [idOf('sk-second-secret')]: { vendor: 'openai', base_url: openai, weight: 1, mock: false },
      [idOf('sk-third-secret')]: null,
    });
    assert.deepEqual(row.after, {
      [idOf('sk-first-secret')]: null,
      [idOf('sk-second-secret')]: { vendor: 'openai', base_url: openai, weight: 3, mock: false },
      [idOf('sk-third-secret')]: { vendor: 'openai', base_url: openai, weight: 1, mock: false },
    });
    assert.doesNotMatch(JSON.stringify(rows), /sk-[a-z]+-secret/);
  });

  it('writes one row when two apis start at once with new channels', async () => {
    const env = { OPENAI_API_KEY: 'sk-third-secret', OPENAI_BASE_URL: 'https://openai.internal.example/v1' };
    await Promise.all([startOnce(env), startOnce(env)]);
    const rows = await channelRows();
    assert.equal(rows.length, 3, JSON.stringify(rows.slice(2)));
    assert.deepEqual(rows[2]!.after, {
      [idOf('sk-second-secret')]: null,
      [idOf('sk-third-secret')]: null,
      [idOf('sk-third-secret', 'https://openai.internal.example/v1')]: {
        vendor: 'openai',
        base_url: 'https://openai.internal.example/v1',
        weight: 1,
        mock: false,
      },
    });
  });

  it('records the offline mock standing in for the vendors when no vendor has a key', async () => {
    await startOnce({ MOCK_VENDOR: 'auto' });
    const rows = await channelRows();
    assert.equal(rows.length, 4);
    const after = rows[3]!.after!;
    assert.deepEqual(after['openai:mock'], { vendor: 'openai', base_url: '', weight: 1, mock: true });
    assert.equal(after[idOf('sk-third-secret', 'https://openai.internal.example/v1')], null);
  });
});
