import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readRealtimeUsage } from '../../shared/money/realtime.js';
import { LiveUsageMeter, readLiveUsage, toOpenAIUsage } from '../../workers/vendors/gemini/live-usage.js';
import { GeminiLiveTranslator } from '../../workers/vendors/gemini/live-translate.js';
import type { RealtimeServerEvent } from '../../workers/vendors/types.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';

/**
 * Gemini Live's usage reports as OpenAI's `response.usage` (what the relay bills from), and that every report is
 * billed once: summed into the next `response.done`, including one that arrives after its response ended (a cancel
 * whose turn outlived the grace, a function call's turn).
 */

describe('Gemini Live usage → OpenAI usage', () => {
  it('splits by modality, counts thoughts and tool-use prompts, keeps cached tokens inside the input', () => {
    const usage = toOpenAIUsage(
      readLiveUsage({
        promptTokenCount: 522,
        responseTokenCount: 42,
        thoughtsTokenCount: 136,
        toolUsePromptTokenCount: 10,
        cachedContentTokenCount: 300,
        promptTokensDetails: [
          { modality: 'TEXT', tokenCount: 332 },
          { modality: 'AUDIO', tokenCount: 165 },
        ],
        cacheTokensDetails: [
          { modality: 'TEXT', tokenCount: 250 },
          { modality: 'AUDIO', tokenCount: 50 },
        ],
        responseTokensDetails: [{ modality: 'AUDIO', tokenCount: 42 }],
      }),
    );
    assert.deepEqual(usage, {
      // 25 prompt tokens the details leave out count as text; tool-use prompts are input text too.
      total_tokens: 522 + 10 + 42 + 136,
      input_tokens: 532,
      output_tokens: 178,
      input_token_details: {
        text_tokens: 332 + 25 + 10,
        audio_tokens: 165,
        image_tokens: 0,
        cached_tokens: 300,
        cached_tokens_details: { text_tokens: 250, audio_tokens: 50 },
      },
      output_token_details: { text_tokens: 136, audio_tokens: 42 },
    });
    assertMatchesSchema(
      'RealtimeResponse',
      { id: 'resp_1', object: 'realtime.response', status: 'completed', usage },
      'usage',
    );
    // As the relay reads it: cached audio priced apart from fresh audio.
    assert.deepEqual(readRealtimeUsage(usage), {
      cachedTextInput: 250,
      textInput: 117,
      cachedAudioInput: 50,
      audioInput: 115,
      textOutput: 136,
      audioOutput: 42,
    });
  });

  it('reads junk as nothing rather than failing or going negative', () => {
    const usage = toOpenAIUsage(
      readLiveUsage({
        promptTokenCount: -5,
        responseTokenCount: 'many',
        promptTokensDetails: 'x',
        cachedContentTokenCount: 1e3,
      }),
    );
    assert.equal(usage.input_tokens, 0);
    assert.equal(usage.output_tokens, 0);
    assert.equal(
      (usage.input_token_details as { cached_tokens: number }).cached_tokens,
      0,
      'never more cached than came in',
    );
    assert.equal(toOpenAIUsage(readLiveUsage(null)).total_tokens, 0);
  });

  it('sums reports until a response takes them, then starts from zero', () => {
    const meter = new LiveUsageMeter();
    assert.equal(meter.empty, true);
    meter.record({ promptTokenCount: 100, responseTokenCount: 10 });
    meter.record({ promptTokenCount: 50, responseTokenCount: 5 });
    assert.equal(meter.take().total_tokens, 165);
    assert.equal(meter.empty, true);
    assert.equal(meter.take().total_tokens, 0);
  });

  it("bills a cancelled turn's late report with the next response, and drops the rest of that turn", async () => {
    const events: RealtimeServerEvent[] = [];
    const sent: unknown[] = [];
    const translator = new GeminiLiveTranslator(
      {
        sessionId: 'sess_x',
        clientModel: 'gemini-live-2.5-flash-preview',
        upstreamModel: 'gemini-live-2.5-flash-preview',
      },
      {
        vendor: (message) => sent.push(message),
        emit: (event) => events.push(event),
        reconfigure: () => Promise.resolve(),
      },
      { cancelGraceMs: 1 },
    );
    translator.start();
    translator.fromClient({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'] } });
    await new Promise((resolve) => setImmediate(resolve));
    translator.fromClient({
      type: 'conversation.item.create',
      item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hi' }] },
    });
    translator.fromClient({ type: 'response.create' });
    translator.fromVendor({ serverContent: { modelTurn: { parts: [{ text: 'Hel' }] } } });
    translator.fromClient({ type: 'response.cancel' });
    // Gemini's turn outlives the grace: the response is done without its usage.
    const cancelled = await new Promise<RealtimeServerEvent>((resolve) => {
      const check = setInterval(() => {
        const done = events.find((e) => e.type === 'response.done');
        if (done) {
          clearInterval(check);
          resolve(done);
        }
      }, 1);
    });
    assert.equal((cancelled.response as { status: string }).status, 'cancelled');
    assert.equal((cancelled.response as { usage: { total_tokens: number } }).usage.total_tokens, 0);
    const mark = events.length;
    translator.fromVendor({ serverContent: { modelTurn: { parts: [{ text: 'lo' }] } } });
    translator.fromVendor({
      serverContent: { turnComplete: true },
      usageMetadata: { promptTokenCount: 120, responseTokenCount: 20 },
    });
    assert.equal(events.length, mark, 'the rest of the cancelled turn is dropped');

    translator.fromClient({
      type: 'conversation.item.create',
      item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'again' }] },
    });
    translator.fromClient({ type: 'response.create' });
    translator.fromVendor({ serverContent: { modelTurn: { parts: [{ text: 'Yes.' }] } } });
    translator.fromVendor({
      serverContent: { turnComplete: true },
      usageMetadata: { promptTokenCount: 130, responseTokenCount: 5 },
    });
    const next = events.slice(mark).find((e) => e.type === 'response.done')!;
    assert.equal((next.response as { status: string }).status, 'completed');
    assert.equal(
      (next.response as { usage: { total_tokens: number } }).usage.total_tokens,
      140 + 135,
      'the late report is billed here, once',
    );
    for (const event of events) assertMatchesSchema(`RealtimeServerEvent`, event, event.type);
    translator.dispose();
  });
});
