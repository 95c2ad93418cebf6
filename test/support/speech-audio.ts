import assert from 'node:assert/strict';
import { MPEGDecoder } from 'mpg123-decoder';

/*
 * Reading speech the way a player does: mp3 through a real decoder (mpg123, built to WebAssembly: `mpg123-decoder`),
 * wav by its RIFF chunks (a header that names its length, or the streaming one whose sizes read "to the end"), pcm as
 * 16-bit little-endian samples. And what the samples say: how long, how loud, at which pitch.
 */

export interface DecodedAudio {
  sampleRate: number;
  channels: number;
  /** The first channel's samples, scaled to [-1, 1]. */
  samples: Float32Array;
}

/** 16-bit little-endian mono PCM as samples in [-1, 1]. */
export function readPcm(bytes: Buffer, sampleRate = 24_000): DecodedAudio {
  assert.equal(bytes.length % 2, 0, 'pcm holds whole 16-bit samples');
  const samples = new Float32Array(bytes.length / 2);
  for (let i = 0; i < samples.length; i++) samples[i] = bytes.readInt16LE(i * 2) / 32768;
  return { sampleRate, channels: 1, samples };
}

/** A RIFF/WAVE file of 16-bit PCM, its chunks read in order; `streamed`: its sizes say "to the end" (0xFFFFFFFF). */
export function readWav(bytes: Buffer): DecodedAudio & { streamed: boolean } {
  assert.equal(bytes.toString('ascii', 0, 4), 'RIFF');
  assert.equal(bytes.toString('ascii', 8, 12), 'WAVE');
  const riffSize = bytes.readUInt32LE(4);
  const streamed = riffSize === 0xffffffff;
  if (!streamed) assert.equal(riffSize, bytes.length - 8, 'the RIFF size is the file less 8 bytes');
  let at = 12;
  let format: { channels: number; sampleRate: number; bits: number } | undefined;
  while (at + 8 <= bytes.length) {
    const id = bytes.toString('ascii', at, at + 4);
    const size = bytes.readUInt32LE(at + 4);
    if (id === 'fmt ') {
      assert.equal(bytes.readUInt16LE(at + 8), 1, 'PCM');
      format = {
        channels: bytes.readUInt16LE(at + 10),
        sampleRate: bytes.readUInt32LE(at + 12),
        bits: bytes.readUInt16LE(at + 22),
      };
      assert.equal(bytes.readUInt32LE(at + 16), format.sampleRate * format.channels * (format.bits / 8), 'byte rate');
    } else if (id === 'data') {
      assert.ok(format, 'fmt before data');
      assert.equal(format.bits, 16);
      const end = size === 0xffffffff ? bytes.length : at + 8 + size;
      assert.equal(end, bytes.length, 'the data runs to the end of the file');
      return { ...readPcm(bytes.subarray(at + 8, end), format.sampleRate), channels: format.channels, streamed };
    }
    at += 8 + size + (size % 2);
  }
  throw new assert.AssertionError({ message: 'no data chunk' });
}

/** An mp3 decoded by mpg123; every frame must decode. */
export async function decodeMp3(bytes: Buffer): Promise<DecodedAudio> {
  const decoder = new MPEGDecoder();
  await decoder.ready;
  try {
    const decoded = decoder.decode(new Uint8Array(bytes));
    assert.deepEqual(decoded.errors, [], 'mpg123 decodes every frame');
    assert.ok(decoded.samplesDecoded > 0, 'samples decoded');
    return {
      sampleRate: decoded.sampleRate,
      channels: decoded.channelData.length,
      samples: decoded.channelData[0]!.subarray(0, decoded.samplesDecoded),
    };
  } finally {
    decoder.free();
  }
}

/** How long the audio plays, in seconds. */
export const durationOf = (audio: DecodedAudio) => audio.samples.length / audio.sampleRate;

/** Root mean square of the samples (0 for silence). */
export function rmsOf(samples: Float32Array): number {
  let sum = 0;
  for (const value of samples) sum += value * value;
  return samples.length === 0 ? 0 : Math.sqrt(sum / samples.length);
}

/** The pitch of a steady tone, from its zero crossings. */
export function pitchOf(samples: Float32Array, sampleRate: number): number {
  let crossings = 0;
  for (let i = 1; i < samples.length; i++) if (samples[i - 1]! < 0 !== samples[i]! < 0) crossings++;
  return (crossings / 2) * (sampleRate / samples.length);
}
