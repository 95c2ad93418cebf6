import { setImmediate as nextTurn } from 'node:timers/promises';
import { Mp3Encoder } from '@breezystack/lamejs';
import { invalidRequest } from '../../shared/errors.js';
import type { SpeechFormat } from '../../shared/schemas/speech.js';

/*
 * Speech the gateway writes itself: 16-bit mono little-endian PCM (what Gemini's speech models send, and what the
 * mock makes) written as the format a client asked. `pcm` is the samples as they are; `wav` is them behind a RIFF
 * header (a header that names its length when the length is known before the first byte, else the streaming form
 * whose sizes read "to the end", as players and ffmpeg take it); `mp3` goes through LAME (`@breezystack/lamejs`, the
 * maintained fork of lamejs: pure JavaScript, no native build). opus, aac and flac have no maintained in-process
 * encoder without a native build: they are not written here, and a model that would need one is not given them.
 */

/** The formats written here. */
export const writableFormats: readonly SpeechFormat[] = ['mp3', 'wav', 'pcm'];

/** mp3's bitrate: plenty for 24 kHz mono speech, as OpenAI's own mp3 speech is about. */
const mp3Kbps = 64;

/** A writer of PCM samples as one format. `write` takes whole blocks of at most a quarter second (`blockBytes`). */
export interface AudioWriter {
  /** The bytes of these samples in the format (empty while an encoder holds them for its next frame). */
  write(pcm: Buffer): Buffer;
  /** What the format writes after the last samples (an encoder's last frames). */
  end(): Buffer;
}

/**
 * The PCM bytes of a quarter second at `sampleRate`: the most one `write` takes, so one turn of the loop stays short.
 */
export function blockBytes(sampleRate: number): number {
  return Math.floor(sampleRate / 4) * 2;
}

/** A RIFF/WAVE header for 16-bit mono PCM; without `dataBytes`, the streaming form (sizes 0xFFFFFFFF: to the end). */
export function wavHeader(sampleRate: number, dataBytes?: number): Buffer {
  const header = Buffer.alloc(44);
  const unknown = 0xffffffff;
  header.write('RIFF', 0, 'ascii');
  header.writeUInt32LE(dataBytes === undefined ? unknown : 36 + dataBytes, 4);
  header.write('WAVE', 8, 'ascii');
  header.write('fmt ', 12, 'ascii');
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20); // PCM
  header.writeUInt16LE(1, 22); // mono
  header.writeUInt32LE(sampleRate, 24);
  header.writeUInt32LE(sampleRate * 2, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36, 'ascii');
  header.writeUInt32LE(dataBytes ?? unknown, 40);
  return header;
}

/** The samples of whole 16-bit PCM bytes as an Int16Array (a view when aligned, else a copy). */
function samplesOf(pcm: Buffer): Int16Array {
  const count = pcm.length >> 1;
  if (pcm.byteOffset % 2 === 0) return new Int16Array(pcm.buffer, pcm.byteOffset, count);
  const copy = new Uint8Array(count * 2);
  copy.set(pcm.subarray(0, count * 2));
  return new Int16Array(copy.buffer, 0, count);
}

/**
 * A writer of `format`: a 400 naming the formats written here for any other. `totalBytes`, when known before the
 * first sample, is written in a wav header; a wav of unknown length gets the streaming header.
 */
export function createAudioWriter(format: SpeechFormat, sampleRate: number, totalBytes?: number): AudioWriter {
  switch (format) {
    case 'pcm':
      return { write: (pcm) => pcm, end: () => Buffer.alloc(0) };
    case 'wav': {
      let headed = false;
      return {
        write(pcm) {
          if (headed) return pcm;
          headed = true;
          return Buffer.concat([wavHeader(sampleRate, totalBytes), pcm]);
        },
        end: () => (headed ? Buffer.alloc(0) : wavHeader(sampleRate, 0)),
      };
    }
    case 'mp3': {
      const encoder = new Mp3Encoder(1, sampleRate, mp3Kbps);
      return {
        write: (pcm) => Buffer.from(encoder.encodeBuffer(samplesOf(pcm))),
        end: () => Buffer.from(encoder.flush()),
      };
    }
    default:
      throw invalidRequest(
        `response_format '${format}' cannot be written for this model's speech. Supported formats: ${writableFormats.join(', ')}.`,
        'response_format',
        'unsupported_value',
      );
  }
}

/**
 * PCM that arrives in pieces of any length, written as a format in whole samples and blocks of at most a quarter
 * second, a turn of the loop given back between the blocks an encoder works on (mp3 takes about 2 ms a block).
 */
export class PcmFormatter {
  private carry: Buffer = Buffer.alloc(0);
  private readonly writer: AudioWriter;
  private readonly block: number;
  /** Samples written so far. */
  samples = 0;

  constructor(
    private readonly format: SpeechFormat,
    readonly sampleRate: number,
    totalBytes?: number,
  ) {
    this.writer = createAudioWriter(format, sampleRate, totalBytes);
    this.block = blockBytes(sampleRate);
  }

  /** The seconds of audio written so far. */
  get seconds(): number {
    return this.samples / this.sampleRate;
  }

  /** The formatted bytes of these PCM bytes, block by block (an odd byte waits for the next piece). */
  async *write(pcm: Buffer): AsyncGenerator<Buffer> {
    const bytes = this.carry.length > 0 ? Buffer.concat([this.carry, pcm]) : pcm;
    const whole = bytes.length - (bytes.length % 2);
    this.carry = bytes.subarray(whole);
    for (let at = 0; at < whole; at += this.block) {
      const piece = bytes.subarray(at, Math.min(whole, at + this.block));
      this.samples += piece.length >> 1;
      const out = this.writer.write(piece);
      if (out.length > 0) yield out;
      if (this.format === 'mp3' && at + this.block < whole) await nextTurn();
    }
  }

  /** What ends the audio (an encoder's last frames). */
  end(): Buffer {
    return this.writer.end();
  }
}
