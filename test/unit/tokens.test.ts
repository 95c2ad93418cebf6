import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { countTokens, encode } from 'gpt-tokenizer/encoding/o200k_base';
import type { ChatMessage } from '../../shared/schemas/chat.js';
import fc from 'fast-check';
import {
  countChatPromptTokens,
  countChatPromptTokensAsync,
  countTextTokens,
  countTextTokensAsync,
  tokenizerPieces,
  decodeTokens,
  encodeText,
  IMAGE_TOKENS_HIGH_DETAIL,
  IMAGE_TOKENS_LOW_DETAIL,
} from '../../shared/tokens.js';

const samples = [
  'Hello, world!',
  'The quick brown fox jumps over the lazy dog.',
  'héllo 世界 🎉 — naïve café',
  'function add(a: number, b: number) {\n  return a + b;\n}\n',
  '   leading and trailing spaces   ',
  'Ünïcödé ½ ∑ ∞ 🙂🙃 ٱلسَّلَامُ عَلَيْكُمْ',
];

describe('text tokens', () => {
  it('counts and encodes exactly like gpt-tokenizer o200k_base', () => {
    for (const text of samples) {
      assert.equal(countTextTokens(text), countTokens(text), text);
      assert.deepEqual(encodeText(text), encode(text), text);
    }
  });

  it('counts the empty string as zero', () => {
    assert.equal(countTextTokens(''), 0);
    assert.deepEqual(encodeText(''), []);
  });

  it('treats special-token text from clients as ordinary text instead of throwing', () => {
    const text = 'before <|endoftext|> after';
    assert.ok(countTextTokens(text) > 3);
    assert.equal(decodeTokens(encodeText(text)), text);
  });

  it('decodes what it encodes', () => {
    for (const text of samples) assert.equal(decodeTokens(encodeText(text)), text);
  });

  it('decodes a token list cut inside a character without corrupting later decodes', () => {
    const tokens = encodeText('a 🎉 b');
    // Find a prefix that ends inside the emoji's bytes.
    const cut = tokens.findIndex((_, i) => decodeTokens(tokens.slice(0, i + 1)).endsWith('\uFFFD'));
    assert.ok(cut >= 0, 'expected the emoji to span several byte tokens');
    decodeTokens(tokens.slice(0, cut + 1));
    assert.equal(decodeTokens(encodeText('🎉 again')), '🎉 again');
    assert.equal(decodeTokens(tokens), 'a 🎉 b');
  });

  it('throws on token ids outside the vocabulary', () => {
    assert.throws(() => decodeTokens([10_000_000]));
  });
});

describe('countChatPromptTokens', () => {
  const user = (content: string): ChatMessage => ({ role: 'user', content });

  it('follows OpenAI accounting: 3 per message + role + content, 3 for reply priming', () => {
    const expected = 3 + countTextTokens('user') + countTextTokens('Hello there') + 3;
    assert.equal(countChatPromptTokens([user('Hello there')]), expected);
  });

  it('adds 1 + the name for a named message', () => {
    const plain = countChatPromptTokens([user('Hi')]);
    const named = countChatPromptTokens([{ role: 'user', content: 'Hi', name: 'alice' }]);
    assert.equal(named - plain, 1 + countTextTokens('alice'));
  });

  it('counts every message', () => {
    const one = countChatPromptTokens([user('Hi')]);
    const two = countChatPromptTokens([{ role: 'system', content: 'Be brief.' }, user('Hi')]);
    assert.equal(two - one, 3 + countTextTokens('system') + countTextTokens('Be brief.'));
  });

  it('counts text parts like text and images at a fixed conservative cost', () => {
    const text = countChatPromptTokens([user('Describe')]);
    const withParts = (detail?: 'low' | 'high' | 'auto') =>
      countChatPromptTokens([
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Describe' },
            { type: 'image_url', image_url: { url: 'https://example.com/a.png', ...(detail ? { detail } : {}) } },
          ],
        },
      ]);
    assert.equal(withParts('low') - text, IMAGE_TOKENS_LOW_DETAIL);
    assert.equal(withParts('high') - text, IMAGE_TOKENS_HIGH_DETAIL);
    assert.equal(withParts('auto') - text, IMAGE_TOKENS_HIGH_DETAIL);
    assert.equal(withParts() - text, IMAGE_TOKENS_HIGH_DETAIL);
    assert.equal(IMAGE_TOKENS_LOW_DETAIL, 85);
    assert.equal(IMAGE_TOKENS_HIGH_DETAIL, 765);
  });

  it('counts tool definitions by at least their JSON text', () => {
    const tools = [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Weather by city',
          parameters: { type: 'object', properties: { city: { type: 'string' } } },
        },
      },
    ];
    const without = countChatPromptTokens([user('Hi')]);
    const withTools = countChatPromptTokens([user('Hi')], tools);
    assert.ok(withTools - without >= countTextTokens(JSON.stringify(tools)));
    assert.equal(countChatPromptTokens([user('Hi')], []), without);
  });

  it('counts assistant tool calls and tool results', () => {
    const messages: ChatMessage[] = [
      user('Weather?'),
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'Sunny, 21 degrees' },
    ];
    const base = countChatPromptTokens([user('Weather?')]);
    const full = countChatPromptTokens(messages);
    assert.ok(
      full - base >=
        countTextTokens('get_weather') + countTextTokens('{"city":"Oslo"}') + countTextTokens('Sunny, 21 degrees'),
    );
  });

  it('is fast enough for the request path', () => {
    const messages = [
      { role: 'system', content: 'You are helpful.' },
      user('Tell me about the sea. '.repeat(20)),
    ] as ChatMessage[];
    countChatPromptTokens(messages);
    const started = performance.now();
    for (let i = 0; i < 1000; i++) countChatPromptTokens(messages);
    const perCallMs = (performance.now() - started) / 1000;
    assert.ok(perCallMs < 1, `took ${perCallMs.toFixed(3)} ms per call`);
  });
});

describe('long texts', () => {
  const long = (sample: string, chars: number) => sample.repeat(Math.ceil(chars / sample.length)).slice(0, chars);

  it('counts and encodes long ordinary text exactly as in one piece', () => {
    for (const sample of samples) {
      const text = long(sample + ' ', 5000);
      assert.equal(countTextTokens(text), countTokens(text, { disallowedSpecial: new Set() }), sample);
      assert.deepEqual(encodeText(text), encode(text, { disallowedSpecial: new Set() }), sample);
    }
  });

  it('feeds the encoder pieces that rejoin to the text, with no run longer than 256 characters', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: 'binary', maxLength: 4000 }),
        fc.integer({ min: 0, max: 3000 }),
        (text, runLength) => {
          const input = text + 'x'.repeat(runLength) + text;
          const pieces = [...tokenizerPieces(input)];
          assert.equal(pieces.join(''), input);
          for (const piece of pieces) {
            assert.ok(piece.length <= 1024, `piece of ${piece.length}`);
            // The longest stretch without a cut point bounds the byte-pair work: it must stay short.
            const longestRun = Math.max(...piece.split(/(?<=\S)(?= )/).map((part) => part.length));
            assert.ok(longestRun <= 256, `run of ${longestRun}`);
          }
        },
      ),
      { numRuns: 200, seed: 8 },
    );
  });

  it('counts texts that are one giant pre-token, one character or CJK without spaces', async () => {
    const runs = ['a'.repeat(300_000), '漢字'.repeat(60_000), ' '.repeat(100_000)];
    for (const text of runs) {
      const sync = countTextTokens(text);
      assert.ok(sync > 0 && sync <= text.length, `${sync} tokens for ${text.length} characters`);
      assert.equal(await countTextTokensAsync(text), sync);
      assert.equal(decodeTokens(encodeText(text)), text);
    }
  });

  it('stops counting once past the limit it was given', async () => {
    const text = 'word '.repeat(200_000);
    const full = countTextTokens(text);
    const partial = await countTextTokensAsync(text, 1000);
    assert.ok(partial > 1000 && partial < full, `${partial} of ${full}`);
    const messages: ChatMessage[] = [{ role: 'user', content: text }];
    const chatPartial = await countChatPromptTokensAsync(messages, null, 500);
    assert.ok(chatPartial > 500 && chatPartial < countChatPromptTokens(messages), `${chatPartial}`);
    assert.equal(await countChatPromptTokensAsync(messages), countChatPromptTokens(messages));
  });
});
