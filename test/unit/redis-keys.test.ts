import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  accessChangedChannel,
  accountKey,
  apiKeyHashesKey,
  apiKeyRecordKey,
  billingBuckets,
  billKey,
  deadlineMember,
  recordLoadedKey,
  settledKey,
  usageStreamKeys,
  accountSessionsKey,
  accountsPrefix,
  apiAliveKey,
  asyncJobKey,
  backlogKey,
  blobUrlSecretKey,
  cancelChannel,
  channelCooldownsKey,
  fairKeys,
  janitorLockKey,
  jobEventsChannel,
  keyPrefix,
  payloadKey,
  replayStreamKey,
  replyChannel,
  responseKey,
  resultKey,
  sessionKey,
  signinFailuresKey,
  slotFreedChannel,
  streamAliasKey,
  vendorInflightKey,
  vendorRpmKey,
  videosOfKey,
} from '../../shared/redis-keys.js';

/**
 * One module builds every Redis key and channel the gateway owns:
 * `shared/redis-keys.ts`. Anywhere else, a literal `sy:` or a use of `keyPrefix` /
 * `accountsPrefix` is a key built outside it.
 */
const root = fileURLToPath(new URL('../..', import.meta.url));
const sourceFolders = ['api', 'workers', 'shared', 'storage', 'bin'];
const keysModule = 'shared/redis-keys.ts';

const builds = [/['"`]sy:/, /\b(?:keyPrefix|accountsPrefix)\b/];

function sourcesUnder(folder: string): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : sourcesUnder(path);
    return /\.(?:[cm]?[jt]s|lua)$/.test(entry.name) ? [path] : [];
  });
}

/** Every line outside `shared/redis-keys.ts` that builds a key, as `file:line: text`, by file. */
function keysBuiltElsewhere(): Map<string, string[]> {
  const sites = new Map<string, string[]>();
  for (const folder of sourceFolders) {
    for (const path of sourcesUnder(join(root, folder))) {
      const file = relative(root, path).split(sep).join('/');
      if (file === keysModule) continue;
      readFileSync(path, 'utf8')
        .split('\n')
        .forEach((text, i) => {
          if (builds.some((pattern) => pattern.test(text)))
            sites.set(file, [...(sites.get(file) ?? []), `${file}:${i + 1}: ${text.trim()}`]);
        });
    }
  }
  return sites;
}

describe('Redis keys', () => {
  it('are built in shared/redis-keys.ts only', () => {
    const sites = keysBuiltElsewhere();
    const offences = [...sites.values()].flat();
    if (offences.length > 0)
      assert.fail(`keys built outside ${keysModule} (move the builder there):\n  ${offences.join('\n  ')}`);
  });

  it('keep the names a running Redis holds', () => {
    assert.equal(keyPrefix, 'sy:');
    assert.equal(accountsPrefix, 'sy:{acct}:');
    assert.equal(payloadKey('j1'), 'sy:payload:j1');
    assert.equal(resultKey('j1'), 'sy:result:j1');
    assert.equal(replayStreamKey('j1'), 'sy:replay:j1');
    assert.equal(streamAliasKey('chatcmpl-1'), 'sy:stream-id:chatcmpl-1');
    assert.equal(responseKey('resp_1'), 'sy:response:resp_1');
    assert.equal(asyncJobKey('video_1'), 'sy:async:video_1');
    assert.equal(videosOfKey('key_1'), 'sy:videos:key_1');
    assert.equal(replyChannel('api-1'), 'sy:reply:api-1');
    assert.equal(apiAliveKey('sy:reply:api-1'), 'sy:alive:sy:reply:api-1');
    assert.equal(cancelChannel, 'sy:cancel');
    assert.equal(jobEventsChannel, 'sy:job-events');
    assert.equal(backlogKey('{chat}'), 'sy:fair:{chat}:waiting');
    // The scheduler's keys of a queue, every one on the queue's own hash tag (one Cluster slot with BullMQ's keys).
    const keys = fairKeys('{chat@openai}');
    assert.equal(keys.length, 9);
    assert.equal(new Set(keys).size, 9);
    for (const key of keys) assert.match(key, /^sy:fair:\{chat@openai\}:/);
    assert.equal(vendorInflightKey('openai'), 'sy:limit:{openai}:inflight');
    assert.equal(vendorRpmKey('openai'), 'sy:limit:{openai}:rpm');
    assert.equal(slotFreedChannel, 'sy:limit-freed');
    assert.equal(channelCooldownsKey, 'sy:cooldowns');
    assert.equal(sessionKey('ab12'), 'sy:{acct}:session:ab12');
    assert.equal(accountSessionsKey('acct_1'), 'sy:{acct}:account-sessions:acct_1');
    // The first 32 hex digits of sha256('a@example.com').
    assert.equal(
      signinFailuresKey('email', 'a@example.com'),
      'sy:{acct}:signin-fail:email:08168cd80dfd534ab0f10af10f1303fe',
    );
    assert.equal(janitorLockKey, 'sy:janitor');
    assert.equal(blobUrlSecretKey, 'sy:blob-url-secret');
    assert.equal(accountKey('acct_1'), 'sy:{acct}:account:acct_1');
    assert.equal(apiKeyRecordKey('key_1'), 'sy:{acct}:key:key_1');
    assert.equal(apiKeyHashesKey, 'sy:{acct}:keyhash');
    assert.equal(recordLoadedKey, 'sy:{acct}:record-loaded:buckets');
    assert.equal(accessChangedChannel, 'sy:access-changed');
    // Money's keys carry their bucket's tag: the account's bucket follows from its id alone.
    assert.match(billKey('acct_1'), /^sy:\{b\d+-\d+\}:bill:acct_1$/);
    assert.equal(billKey('acct_1').replace('bill:acct_1', 'settled:r1'), settledKey('acct_1', 'r1'));
    assert.equal(usageStreamKeys.length, billingBuckets + 1);
    assert.equal(deadlineMember('acct_1', 'r1'), 'acct_1 r1');
  });
});
