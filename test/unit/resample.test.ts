import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { PcmResampler } from '../../workers/audio/resample.js';

/**
 * The realtime resampler (24 kHz ↔ 16 kHz pcm16): its length, its frequency response (a tone in the pass band keeps
 * its level and pitch, one above the output's Nyquist frequency is removed rather than folded back), and that
 * chunking changes nothing, down to a chunk that splits a sample in two.
 */

function sine(rate: number, hz: number, seconds: number, amplitude = 10_000): Buffer {
  const count = Math.round(rate * seconds);
  const out = Buffer.alloc(count * 2);
  for (let i = 0; i < count; i++)
    out.writeInt16LE(Math.round(amplitude * Math.sin((2 * Math.PI * hz * i) / rate)), i * 2);
  return out;
}

function samplesOf(pcm: Buffer): number[] {
  const out: number[] = [];
  for (let i = 0; i + 1 < pcm.length; i += 2) out.push(pcm.readInt16LE(i));
  return out;
}

/** The level of one frequency in a signal (Goertzel), as an amplitude comparable to the sine's. */
function amplitudeAt(samples: number[], rate: number, hz: number): number {
  const w = (2 * Math.PI * hz) / rate;
  let re = 0;
  let im = 0;
  for (let n = 0; n < samples.length; n++) {
    re += samples[n]! * Math.cos(w * n);
    im -= samples[n]! * Math.sin(w * n);
  }
  return (2 * Math.hypot(re, im)) / samples.length;
}

const rms = (samples: number[]) => Math.sqrt(samples.reduce((sum, v) => sum + v * v, 0) / Math.max(1, samples.length));
const db = (ratio: number) => 20 * Math.log10(ratio);

/** The steady part: past the filter's start-up, before its end. */
const steady = (samples: number[]) => samples.slice(64, samples.length - 64);

describe('PcmResampler', () => {
  it('turns N samples at 24 kHz into N·2/3 at 16 kHz, and N at 16 kHz into N·3/2 at 24 kHz', () => {
    assert.equal(new PcmResampler(24_000, 16_000).push(Buffer.alloc(2 * 2400)).length, 2 * 1600);
    assert.equal(new PcmResampler(16_000, 24_000).push(Buffer.alloc(2 * 1600)).length, 2 * 2400);
    // Not a multiple of 3: the remainder is carried, so a second half second lands the total exactly.
    const down = new PcmResampler(24_000, 16_000);
    const total = down.push(Buffer.alloc(2 * 1001)).length + down.push(Buffer.alloc(2 * 1999)).length;
    assert.equal(total, 2 * 2000);
    // flush() gives the filter's delay back, about half its taps.
    const flushed = down.flush().length / 2;
    assert.ok(flushed > 0 && flushed <= 16, `flushed ${flushed} samples`);
  });

  it('keeps a tone in the pass band at its level and pitch, both ways', () => {
    for (const [from, to] of [
      [24_000, 16_000],
      [16_000, 24_000],
    ] as const) {
      for (const hz of [200, 1000, 3000, 5000]) {
        const out = steady(samplesOf(new PcmResampler(from, to).push(sine(from, hz, 0.5))));
        const level = amplitudeAt(out, to, hz);
        assert.ok(
          Math.abs(db(level / 10_000)) < 0.5,
          `${from}→${to} ${hz} Hz came out at ${db(level / 10_000).toFixed(2)} dB`,
        );
        // Nothing else: what is not the tone is at least 40 dB under it.
        const phase = phaseOf(out, to, hz);
        const residue = rms(out.map((v, n) => v - level * Math.sin((2 * Math.PI * hz * n) / to + phase)));
        assert.ok(
          db(residue / (10_000 / Math.SQRT2)) < -40,
          `${from}→${to} ${hz} Hz: residue ${db(residue / (10_000 / Math.SQRT2)).toFixed(1)} dB`,
        );
      }
    }
  });

  it('removes what lies above the output Nyquist frequency instead of folding it back (24 → 16 kHz)', () => {
    for (const hz of [8_500, 10_000, 11_000]) {
      const out = steady(samplesOf(new PcmResampler(24_000, 16_000).push(sine(24_000, hz, 0.5))));
      const level = db(rms(out) / (10_000 / Math.SQRT2));
      assert.ok(level < -45, `${hz} Hz left ${level.toFixed(1)} dB (aliased to ${16_000 - hz} Hz)`);
    }
  });

  it('gives the same bytes whatever the chunks, odd-length chunks splitting samples included', () => {
    const input = Buffer.concat([sine(24_000, 440, 0.3), sine(24_000, 2500, 0.2, 20_000)]);
    const whole = new PcmResampler(24_000, 16_000);
    const expected = Buffer.concat([whole.push(input), whole.flush()]);
    const pieces = new PcmResampler(24_000, 16_000);
    const parts: Buffer[] = [];
    let offset = 0;
    let size = 1;
    while (offset < input.length) {
      parts.push(pieces.push(input.subarray(offset, offset + size)));
      offset += size;
      size = (size * 7 + 3) % 977 || 1; // 1, 10, 73, 514, … : odd and even sizes
    }
    parts.push(pieces.flush());
    assert.deepEqual(Buffer.concat(parts), expected);
  });

  it('clips instead of wrapping around at full scale, and refuses a rate that is not a positive integer', () => {
    const loud = Buffer.alloc(2 * 2400);
    for (let i = 0; i < 2400; i++) loud.writeInt16LE(i % 2 === 0 ? 32767 : -32768, i * 2);
    const out = samplesOf(new PcmResampler(16_000, 24_000).push(loud));
    assert.ok(out.every((v) => v >= -32768 && v <= 32767));
    assert.throws(() => new PcmResampler(0, 16_000), RangeError);
    assert.throws(() => new PcmResampler(24_000, 16_000.5), RangeError);
  });
});

function phaseOf(samples: number[], rate: number, hz: number): number {
  const w = (2 * Math.PI * hz) / rate;
  let re = 0;
  let im = 0;
  for (let n = 0; n < samples.length; n++) {
    re += samples[n]! * Math.cos(w * n);
    im += samples[n]! * Math.sin(w * n);
  }
  // samples ≈ A·sin(wn + φ) = A(sin wn cos φ + cos wn sin φ): im ∝ cos φ, re ∝ sin φ.
  return Math.atan2(re, im);
}
