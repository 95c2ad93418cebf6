import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { EndpointRequest } from '../../shared/endpoints.js';
import { affinityKey, autoPrefixChars, rendezvousOrder, rendezvousPick } from '../../shared/prompt-affinity.js';

const channels = ['a', 'b', 'c', 'd'].map((id) => ({ id: `openai:${id}`, weight: 1 }));
const long = 'Keep to the house rules. '.repeat(400);

const chat = (messages: Array<{ role: string; content: unknown }>, extra: Record<string, unknown> = {}) =>
  ({ endpoint: 'chat.completions', payload: { model: 'm', messages, ...extra } }) as unknown as EndpointRequest;

describe('prompt-cache affinity', () => {
  it("keys a prompt by its cached prefix: the client's key first, then the leading part, none for a short prompt", () => {
    const one = affinityKey(
      chat([
        { role: 'system', content: long },
        { role: 'user', content: 'first' },
      ]),
    );
    const two = affinityKey(
      chat([
        { role: 'system', content: long },
        { role: 'user', content: 'second, much later' },
      ]),
    );
    assert.ok(one !== undefined && one === two, 'the same long system prompt, the same key');
    assert.notEqual(affinityKey(chat([{ role: 'system', content: `${long}!` }])), undefined);
    assert.notEqual(affinityKey(chat([{ role: 'system', content: long.replace('Keep', 'Hold') }])), one);
    assert.equal(affinityKey(chat([{ role: 'user', content: 'short' }])), undefined);
    assert.equal(affinityKey(chat([{ role: 'user', content: 'x'.repeat(autoPrefixChars - 40) }])), undefined);
    assert.equal(
      affinityKey(chat([{ role: 'user', content: 'short' }], { prompt_cache_key: 'team-a' })),
      affinityKey(chat([{ role: 'user', content: 'other' }], { prompt_cache_key: 'team-a' })),
    );
    assert.equal(
      affinityKey({ endpoint: 'embeddings', payload: { model: 'm', input: long } } as unknown as EndpointRequest),
      undefined,
    );
    // A huge first message is keyed by its start.
    const huge = 'x'.repeat(20 * 1024 * 1024);
    assert.equal(
      affinityKey(chat([{ role: 'user', content: huge }])),
      affinityKey(chat([{ role: 'user', content: `${huge}and more` }])),
    );
  });

  it('keys an Anthropic request by its prefix up to the first breakpoint, the same for every turn', () => {
    const messages = (turn: string) =>
      ({
        endpoint: 'messages',
        payload: {
          anthropic: {
            system: [{ type: 'text', text: 'Short but marked.', cache_control: { type: 'ephemeral' } }],
            messages: [{ role: 'user', content: [{ type: 'text', text: turn, cache_control: { type: 'ephemeral' } }] }],
          },
          chat: { model: 'm', messages: [] },
        },
      }) as unknown as EndpointRequest;
    const first = affinityKey(messages('one'));
    assert.ok(first !== undefined);
    assert.equal(affinityKey(messages('two')), first);
  });

  it(
    'orders the channels by the key, the same everywhere; a channel resting moves only its own keys; weights are ' +
      'kept',
    () => {
      const keys = Array.from({ length: 4000 }, (_, i) => `p:${i}`);
      const picked = new Map<string, number>();
      for (const key of keys) {
        const order = rendezvousOrder(key, channels);
        assert.equal(rendezvousPick(key, channels).id, order[0]!.id);
        picked.set(order[0]!.id, (picked.get(order[0]!.id) ?? 0) + 1);
        // Without its first channel, the key goes to its second, not anywhere.
        assert.equal(
          rendezvousPick(
            key,
            channels.filter((channel) => channel.id !== order[0]!.id),
          ).id,
          order[1]!.id,
        );
      }
      for (const count of picked.values())
        assert.ok(count > 850 && count < 1150, `an even share: ${[...picked.values()].join(', ')}`);
      const weighted = [
        { id: 'x', weight: 3 },
        { id: 'y', weight: 1 },
      ];
      const heavy = keys.filter((key) => rendezvousPick(key, weighted).id === 'x').length / keys.length;
      assert.ok(heavy > 0.71 && heavy < 0.79, `weight 3 of 4 wins about three quarters: ${heavy}`);
    },
  );
});
