/**
 * Streaming sample-rate conversion of 16-bit PCM (mono, little-endian) between rational rates: OpenAI's Realtime
 * audio is 24 kHz, Gemini Live hears 16 kHz (and may speak at a rate other than 24 kHz), so a session resamples each
 * chunk as it arrives.
 *
 * A polyphase windowed-sinc filter: the input is upsampled by L, low-pass filtered and decimated by M
 * (L/M = out/in in lowest terms), computing only the outputs kept. The prototype filter is a Kaiser-windowed sinc of
 * `tapsPerPhase × L` taps (β 5.65, about 60 dB of stopband) whose transition band ends at the lower rate's Nyquist
 * frequency, so what cannot be represented at the output is removed, not folded back into the speech band.
 *
 * State crosses chunks: the last `tapsPerPhase − 1` input samples, the position of the next output between input
 * samples, and an odd byte when a chunk splits a sample. Chunking therefore changes nothing: the same audio in any
 * pieces gives the same bytes out (no click at chunk edges). The filter delays the audio by about half its taps
 * (16 input samples: well under a millisecond); `flush()` pushes that tail out when an utterance ends.
 *
 * Why not a library: the maintained npm ports of libsamplerate and the Speex resampler are WebAssembly modules
 * loaded asynchronously per instance, with buffers to free by hand; a session needs one small fixed ratio,
 * which this does in about a hundred lines at a few tens of multiply-adds per output sample.
 */

const KAISER_BETA = 5.65;
/** Kaiser's estimate of the stopband attenuation that β gives, for the transition width. */
const STOPBAND_DB = 60;

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/** The zeroth-order modified Bessel function of the first kind, by its series (the Kaiser window's kernel). */
function besselI0(x: number): number {
  let sum = 1;
  let term = 1;
  for (let k = 1; k < 50; k++) {
    term *= (x / (2 * k)) ** 2;
    sum += term;
    if (term < sum * 1e-12) break;
  }
  return sum;
}

export interface ResamplerOptions {
  /** Filter taps per output sample (the prototype has this times L). More: a sharper cut, more work. */
  tapsPerPhase?: number;
}

export class PcmResampler {
  readonly inputRate: number;
  readonly outputRate: number;
  private readonly up: number;
  private readonly down: number;
  private readonly taps: number;
  /** `phases[p][i]` weighs input sample `n − i` for an output at upsampled position `n·L + p`. */
  private readonly phases: Float32Array[];
  /** The last `taps − 1` input samples, oldest first. */
  private history: Float32Array;
  /** The next output's position in upsampled units, counted from the next chunk's first sample. */
  private position = 0;
  /** A chunk's last byte when it split a sample. */
  private oddByte: number | undefined;

  constructor(inputRate: number, outputRate: number, options: ResamplerOptions = {}) {
    if (!Number.isInteger(inputRate) || !Number.isInteger(outputRate) || inputRate <= 0 || outputRate <= 0) {
      throw new RangeError(`sample rates must be positive integers (got ${inputRate} → ${outputRate})`);
    }
    this.inputRate = inputRate;
    this.outputRate = outputRate;
    const divisor = gcd(inputRate, outputRate);
    this.up = outputRate / divisor;
    this.down = inputRate / divisor;
    this.taps = options.tapsPerPhase ?? 32;
    this.history = new Float32Array(this.taps - 1);
    this.phases = this.design();
  }

  private design(): Float32Array[] {
    const { up, taps } = this;
    const length = up * taps;
    const upsampledRate = this.inputRate * up;
    // Kaiser: a window of `length` taps at this β falls from pass to stop over this many Hz.
    const transitionHz = ((STOPBAND_DB - 8) / (2.285 * (length - 1)) / (2 * Math.PI)) * upsampledRate;
    const nyquistHz = Math.min(this.inputRate, this.outputRate) / 2;
    const cutoff = Math.max(nyquistHz - transitionHz / 2, nyquistHz * 0.5) / upsampledRate;
    const center = (length - 1) / 2;
    // Zero-stuffing by L divides the level by L: the filter's gain at DC is L, below.
    const prototype = new Float64Array(length);
    const windowScale = besselI0(KAISER_BETA);
    for (let k = 0; k < length; k++) {
      const t = k - center;
      const sinc = t === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * t) / (Math.PI * t);
      const ratio = t / center;
      const window = besselI0(KAISER_BETA * Math.sqrt(Math.max(0, 1 - ratio * ratio))) / windowScale;
      prototype[k] = sinc * window;
    }
    // Unity gain at DC (L across the phases) once the window has shortened the sinc.
    const sum = prototype.reduce((a, b) => a + b, 0);
    for (let k = 0; k < length; k++) prototype[k] = (prototype[k]! / sum) * up;
    const phases: Float32Array[] = [];
    for (let phase = 0; phase < up; phase++) {
      const coefficients = new Float32Array(taps);
      for (let i = 0; i < taps; i++) coefficients[i] = prototype[phase + i * up]!;
      phases.push(coefficients);
    }
    return phases;
  }

  /** The output for one chunk of pcm16 (any length, odd too); an empty buffer when it completes no output sample. */
  push(pcm: Buffer): Buffer {
    let bytes = pcm;
    if (this.oddByte !== undefined) {
      bytes = Buffer.concat([Buffer.of(this.oddByte), pcm]);
      this.oddByte = undefined;
    }
    if (bytes.length % 2 === 1) {
      this.oddByte = bytes[bytes.length - 1];
      bytes = bytes.subarray(0, bytes.length - 1);
    }
    const count = bytes.length / 2;
    const samples = new Float32Array(count);
    for (let i = 0; i < count; i++) samples[i] = bytes.readInt16LE(i * 2);
    return this.process(samples);
  }

  /** Pushes out what the filter still holds (its delay's worth of samples), then starts afresh. */
  flush(): Buffer {
    const tail = this.process(new Float32Array(Math.ceil(this.taps / 2) + 1));
    this.reset();
    return tail;
  }

  reset(): void {
    this.history.fill(0);
    this.position = 0;
    this.oddByte = undefined;
  }

  private process(samples: Float32Array): Buffer {
    const { up, down, taps, phases } = this;
    const keep = taps - 1;
    // x[n] of this chunk sits at `n + keep` here; x[n − i] for i < taps reaches into the history.
    const signal = new Float32Array(keep + samples.length);
    signal.set(this.history, 0);
    signal.set(samples, keep);
    const end = samples.length * up;
    const outputs = this.position < end ? Math.ceil((end - this.position) / down) : 0;
    const out = Buffer.allocUnsafe(outputs * 2);
    let position = this.position;
    for (let j = 0; j < outputs; j++) {
      const n = Math.floor(position / up);
      const coefficients = phases[position - n * up]!;
      let sum = 0;
      const newest = n + keep;
      for (let i = 0; i < taps; i++) sum += coefficients[i]! * signal[newest - i]!;
      const value = Math.round(sum);
      out.writeInt16LE(value > 32767 ? 32767 : value < -32768 ? -32768 : value, j * 2);
      position += down;
    }
    this.position = position - end;
    this.history = signal.slice(signal.length - keep);
    return out;
  }
}

/** base64 pcm16 at one rate → base64 pcm16 at another, through a session's resampler. */
export function resampleBase64(resampler: PcmResampler, base64: string): string {
  return resampler.push(Buffer.from(base64, 'base64')).toString('base64');
}
