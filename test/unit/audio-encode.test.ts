import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { GatewayError } from '../../shared/errors.js';
import { mostSpeechSeconds, type SpeechJob } from '../../shared/schemas/speech.js';
import { PcmFormatter, wavHeader, writableFormats } from '../../workers/audio/encode.js';
import {
  MOCK_SECONDS_PER_CHARACTER,
  MOCK_SPEECH_SAMPLE_RATE,
  planMockSpeech,
  renderMockSpeech,
  speakMock,
} from '../../workers/vendors/mock/speech.js';
import type { CallContext, SpeechEvent } from '../../workers/vendors/types.js';
import { decodeMp3, durationOf, pitchOf, readPcm, readWav, rmsOf } from '../support/speech-audio.js';

/*
 * The gateway's own audio writers (workers/audio/encode.ts) and the mock's speech: pcm, wav and mp3 read back by a
 * RIFF parser and by mpg123, their lengths, loudness and pitch checked; a format without an encoder refused.
 */

const rate = 24_000;

/** `seconds` of a tone at `hertz`, 16-bit mono PCM at half scale. */
function tone(seconds: number, hertz: number): Buffer {
  const pcm = Buffer.alloc(Math.round(seconds * rate) * 2);
  for (let n = 0; n < pcm.length / 2; n++)
    pcm.writeInt16LE(Math.round(16_000 * Math.sin((2 * Math.PI * hertz * n) / rate)), n * 2);
  return pcm;
}

/** PCM written through a formatter in uneven pieces (odd lengths included), as a vendor's chunks arrive. */
async function format(formatter: PcmFormatter, pcm: Buffer, pieces = [1, 4801, 3, 12_000, 7]): Promise<Buffer> {
  const out: Buffer[] = [];
  let at = 0;
  for (let i = 0; at < pcm.length; i++) {
    const size = pieces[i % pieces.length]!;
    for await (const bytes of formatter.write(pcm.subarray(at, at + size))) out.push(bytes);
    at += size;
  }
  out.push(formatter.end());
  return Buffer.concat(out);
}

describe('audio writers', () => {
  it('writes pcm as the samples themselves, whatever the pieces they came in', async () => {
    const pcm = tone(0.5, 440);
    const written = await format(new PcmFormatter('pcm', rate), pcm);
    assert.deepEqual(written, pcm);
    const audio = readPcm(written);
    assert.equal(durationOf(audio), 0.5);
    assert.ok(Math.abs(pitchOf(audio.samples, rate) - 440) < 5, `pitch ${pitchOf(audio.samples, rate)}`);
  });

  it('writes wav with a header naming its length when known, and the streaming header when not', async () => {
    const pcm = tone(0.75, 330);
    const known = readWav(await format(new PcmFormatter('wav', rate, pcm.length), pcm));
    assert.deepEqual(
      [known.streamed, known.sampleRate, known.channels, known.samples.length],
      [false, rate, 1, pcm.length / 2],
    );
    const streamed = readWav(await format(new PcmFormatter('wav', rate), pcm));
    assert.deepEqual([streamed.streamed, streamed.sampleRate, streamed.samples.length], [true, rate, pcm.length / 2]);
    assert.ok(Math.abs(pitchOf(streamed.samples, rate) - 330) < 5);
    // No samples at all is still a well-formed file.
    assert.equal(readWav(wavHeader(rate, 0)).samples.length, 0);
  });

  it('writes mp3 that mpg123 decodes to the same length, loudness and pitch', async () => {
    const pcm = tone(1, 440);
    const mp3 = await format(new PcmFormatter('mp3', rate), pcm);
    assert.equal(mp3[0], 0xff, 'an MPEG frame sync first');
    const audio = await decodeMp3(mp3);
    assert.equal(audio.sampleRate, rate);
    // mpg123 hands back two channels whatever it decodes: the frame header says what was written (mode 3, mono).
    assert.equal(mp3[3]! >> 6, 3, 'a mono frame');
    // LAME adds its encoder delay and pads the last frame: at most two frames (1,152 samples each) more.
    assert.ok(
      audio.samples.length >= rate && audio.samples.length <= rate + 2 * 1152 + 576,
      `decoded ${audio.samples.length} samples`,
    );
    const middle = audio.samples.subarray(2400, 21_600);
    assert.ok(Math.abs(rmsOf(middle) - 16_000 / 32768 / Math.SQRT2) < 0.05, `rms ${rmsOf(middle)}`);
    assert.ok(Math.abs(pitchOf(middle, rate) - 440) < 10, `pitch ${pitchOf(middle, rate)}`);
  });

  it('refuses a format it has no encoder for with a 400 naming those it writes', () => {
    for (const format of ['opus', 'aac', 'flac'] as const) {
      assert.throws(
        () => new PcmFormatter(format, rate),
        (error: unknown) =>
          error instanceof GatewayError &&
          error.status === 400 &&
          error.param === 'response_format' &&
          error.message.includes(writableFormats.join(', ')),
      );
    }
  });
});

describe("the mock's speech", () => {
  const job = (fields: Partial<SpeechJob> = {}): SpeechJob => ({
    input: 'The quick brown fox jumps over the lazy dog.',
    voice: 'alloy',
    response_format: 'wav',
    stream_format: 'audio',
    ...fields,
  });
  const ctx = { signal: new AbortController().signal, http: { mock: { streamDelayMs: 0 } } } as unknown as CallContext;
  const collect = async (input: SpeechJob) => {
    const batches: SpeechEvent[][] = [];
    for await (const batch of speakMock(input, ctx)) batches.push(batch);
    const audio = Buffer.concat(batches.flat().flatMap((event) => (event.type === 'audio' ? [event.bytes] : [])));
    return { batches, audio, events: batches.flat() };
  };

  it('speaks for a time proportional to the text and inverse to the speed, within the bound the reservation prices', () => {
    const text = job().input;
    const normal = planMockSpeech(job());
    const fast = planMockSpeech(job({ speed: 2 }));
    assert.equal(normal.samples, Math.round(text.length * MOCK_SECONDS_PER_CHARACTER * MOCK_SPEECH_SAMPLE_RATE));
    assert.equal(fast.samples, Math.round(normal.samples / 2));
    for (const speed of [0.25, 1, 4])
      assert.ok(
        planMockSpeech(job({ speed })).samples / MOCK_SPEECH_SAMPLE_RATE <= mostSpeechSeconds(text.length, speed),
      );
    // Each word a tone, the tones end to end.
    assert.equal(normal.tones.length, 9);
    assert.equal(normal.tones.at(-1)!.start + normal.tones.at(-1)!.length, normal.samples);
    // Sound, then a gap of silence after each word.
    const first = normal.tones[0]!;
    assert.ok(
      rmsOf(readPcm(renderMockSpeech(normal, first.start, first.start + Math.floor(first.length * 0.7))).samples) > 0.1,
    );
    assert.equal(
      rmsOf(
        readPcm(renderMockSpeech(normal, first.start + Math.ceil(first.length * 0.8), first.start + first.length))
          .samples,
      ),
      0,
    );
  });

  it('streams real audio in several chunks, the same bytes for the same request, others for another voice', async () => {
    const wav = await collect(job());
    assert.ok(wav.batches.length >= 4, `${wav.batches.length} chunks`);
    const audio = readWav(wav.audio);
    assert.equal(audio.streamed, false);
    assert.equal(audio.samples.length, planMockSpeech(job()).samples);
    const usage = wav.events.find((event) => event.type === 'usage');
    const duration = wav.events.find((event) => event.type === 'duration');
    assert.deepEqual(duration, { type: 'duration', seconds: audio.samples.length / MOCK_SPEECH_SAMPLE_RATE });
    assert.deepEqual(usage, {
      type: 'usage',
      inputTokens: 10,
      outputTokens: Math.ceil((audio.samples.length / MOCK_SPEECH_SAMPLE_RATE) * 20),
    });
    assert.deepEqual((await collect(job())).audio, wav.audio);
    assert.notDeepEqual((await collect(job({ voice: 'nova' }))).audio, wav.audio);

    const mp3 = await decodeMp3((await collect(job({ response_format: 'mp3' }))).audio);
    assert.equal(mp3.sampleRate, MOCK_SPEECH_SAMPLE_RATE);
    assert.ok(
      Math.abs(durationOf(mp3) - durationOf(audio)) < 0.15,
      `${durationOf(mp3)} s against ${durationOf(audio)} s`,
    );
    assert.ok(rmsOf(mp3.samples) > 0.05, 'audible');
    const pcm = readPcm((await collect(job({ response_format: 'pcm' }))).audio);
    assert.deepEqual(pcm.samples, audio.samples);
  });

  it('refuses a format it cannot write, and fails on its error marker, before any audio', async () => {
    await assert.rejects(
      collect(job({ response_format: 'flac' })),
      (error: unknown) => error instanceof GatewayError && error.status === 400 && error.param === 'response_format',
    );
    await assert.rejects(
      collect(job({ input: 'fail [mock:error:503]' })),
      (error: unknown) => error instanceof GatewayError && error.status === 503 && error.retryable,
    );
  });
});
