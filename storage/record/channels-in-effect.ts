import { isMockChannel, type ChannelConfig } from '../../shared/vendors.js';
import { appendAudit, canonicalJson, changedFields, lockAuditChain, type AuditRow } from './audit-log.js';
import type { RecordDb } from './database.js';

/*
 * The channels are configuration (`<VENDOR>_API_KEY`, `<VENDOR>_BASE_URL`, CHANNELS_FILE, MOCK_VENDOR), changed by
 * starting the gateway with other settings, so the audit log learns of a change when an api starts: the channels it
 * serves with are compared with those the record last saw (`record_meta`), and a difference is one
 * `channel.updated` row by `system`, naming each channel added, removed or changed, as it was and as it is. A
 * channel is known by its id (`<vendor>:<12 hex of a hash of its base URL and key>`, as the console's Channels page
 * and the logs show it): a key rotated is one channel removed and another added, and no key ever enters the log.
 * The comparison and the append hold the chain's lock, so apis starting together with one configuration write one
 * row; a fresh record's first start writes every channel as added.
 */

const snapshotName = 'channels_in_effect';

/** What the log keeps of a channel. */
export interface ChannelFacts {
  vendor: string;
  base_url: string;
  weight: number;
  /** The offline mock answering for the vendor. */
  mock: boolean;
}

export function channelFacts(channels: ReadonlyMap<string, readonly ChannelConfig[]>): Record<string, ChannelFacts> {
  const facts: Record<string, ChannelFacts> = {};
  for (const list of channels.values()) {
    for (const channel of list) {
      facts[channel.id] = {
        vendor: channel.vendor,
        base_url: channel.baseUrl,
        weight: channel.weight,
        mock: isMockChannel(channel),
      };
    }
  }
  return facts;
}

/**
 * Appends a `channel.updated` row when `facts` differ from the channels the record last saw; returns it, or undefined
 * when nothing changed.
 */
export async function recordChannelsInEffect(
  record: RecordDb,
  facts: Record<string, ChannelFacts>,
  now = Date.now(),
): Promise<AuditRow | undefined> {
  return record.transaction().execute(async (tx) => {
    await lockAuditChain(tx);
    const seen = await tx.selectFrom('record_meta').select('value').where('name', '=', snapshotName).executeTakeFirst();
    const before = seen ? (JSON.parse(seen.value) as Record<string, ChannelFacts>) : {};
    if (canonicalJson(before) === canonicalJson(facts)) return undefined;
    const changed = changedFields(before, facts);
    const row = await appendAudit(tx, {
      actor: 'system',
      action: 'channel.updated',
      target: 'channels',
      time: now,
      ...changed,
    });
    await tx
      .insertInto('record_meta')
      .values({ name: snapshotName, value: JSON.stringify(facts) })
      .onConflict((conflict) => conflict.column('name').doUpdateSet({ value: JSON.stringify(facts) }))
      .execute();
    return row;
  });
}
