import { GatewayError } from '../shared/errors.js';
import { jobIdOf, keepsAnswer, type GatewayJobData } from '../shared/jobs.js';
import type { Protocol } from '../shared/vendor-definitions.js';
import { speechCharacters, speechContentTypes, speechFacts, type SpeechJob } from '../shared/schemas/speech.js';
import { sseJson } from '../shared/sse.js';
import { countTextTokensAsync } from '../shared/tokens.js';
import { signBlobUrl } from '../storage/blob-urls.js';
import { noFrames, runStream, type EncodedFrames, type StreamEncoder } from './answers/stream-run.js';
import { malformedResponse } from './vendors/http.js';
import { adapterMethod } from './vendors/registry.js';
import type { CallContext, SpeechEvent } from './vendors/types.js';
import type { Usage } from './answers/events.js';
import type { MediaDeps } from './media-processor.js';
import type { ReplyPublisher } from './reply-publisher.js';
import type { Meter } from './settlement.js';

/*
 * A speech job (`POST /v1/audio/speech`) through the one stream runner (`answers/stream-run.ts`): the vendor's
 * audio is relayed as it comes, in one of two forms. The audio form publishes the bytes base64, in whole 3-byte
 * groups (the reply channel is text, and batches joined by the publisher must still decode as one), and the api
 * writes them decoded (`api/relay/audio-reply.ts`); the events form writes OpenAI's `speech.audio.delta` events and
 * ends with `speech.audio.done` and its usage. Billing starts when the vendor is done, before the client hears the
 * end; the answer is kept in the response cache (the audio, or the events) when the request opted in. An async job
 * keeps its audio in the blob store and answers with a signed link to it, as images do.
 *
 * What it is billed: tts-1 and tts-1-hd by the input's characters, once the vendor began to speak them; a model
 * billed by the token by the vendor's own counts when it reports them (OpenAI's `speech.audio.done`, Gemini's
 * `usageMetadata`, the mock's). When it reports none, the input's tokens are counted here and the audio tokens
 * derived from the audio's length at the model's `speech_audio_tokens_per_second`: the length the vendor or the
 * writer said, else read from pcm and wav bytes, else judged from the bytes of a compressed format at 160 kbit/s
 * (a high bitrate for speech: a doubt is not billed to the client).
 */

/** The most audio one job relays: about 12 minutes of wav, far past what 4,096 characters are spoken in. */
const maxSpeechBytes = 64 * 1024 * 1024;
/** PCM and wav from OpenAI and Gemini, and the mock's: 24 kHz 16-bit mono. */
const pcmBytesPerSecond = 48_000;
/** A compressed format's length judged from its bytes: 160 kbit/s. */
const compressedBytesPerSecond = 20_000;

/** What a speech job's audio came to: shared by its writer (the usage it ends with) and its meter (the bill). */
class SpeechTally {
  bytes = 0;
  seconds: number | undefined;
  reported: { inputTokens: number; outputTokens: number } | undefined;
  /** The whole audio, kept when something needs it after the stream (the cache, an async job's blob). */
  readonly kept: Buffer[] | undefined;

  constructor(
    readonly job: SpeechJob,
    keep: boolean,
  ) {
    this.kept = keep ? [] : undefined;
  }

  take(event: SpeechEvent): Buffer | undefined {
    switch (event.type) {
      case 'audio':
        this.bytes += event.bytes.length;
        this.kept?.push(event.bytes);
        return event.bytes;
      case 'duration':
        this.seconds = event.seconds;
        return undefined;
      case 'usage':
        this.reported = { inputTokens: event.inputTokens, outputTokens: event.outputTokens };
        return undefined;
    }
  }

  /** The audio's length: said by the vendor or the writer, else judged from its bytes. */
  get audioSeconds(): number {
    if (this.seconds !== undefined) return this.seconds;
    const format = this.job.response_format;
    if (format === 'pcm') return this.bytes / pcmBytesPerSecond;
    if (format === 'wav') return Math.max(0, this.bytes - 44) / pcmBytesPerSecond;
    return this.bytes / compressedBytesPerSecond;
  }
}

/** The usage a speech answer reports and is billed by: the vendor's, else counted and derived (see above). */
async function speechUsage(tally: SpeechTally, audioTokensPerSecond: number): Promise<Usage | undefined> {
  let counts = tally.reported;
  if (!counts && audioTokensPerSecond > 0 && tally.bytes > 0) {
    const { input, instructions } = tally.job;
    const inputTokens =
      (await countTextTokensAsync(input)) + (instructions === undefined ? 0 : await countTextTokensAsync(instructions));
    counts = { inputTokens, outputTokens: Math.ceil(tally.audioSeconds * audioTokensPerSecond) };
  }
  if (!counts) return undefined;
  return {
    prompt_tokens: counts.inputTokens,
    completion_tokens: counts.outputTokens,
    total_tokens: counts.inputTokens + counts.outputTokens,
    completion_tokens_details: { audio_tokens: counts.outputTokens },
  };
}

/** The audio form: the bytes base64 in whole 3-byte groups (the last group, padded, at the end). */
class AudioChunkWriter implements StreamEncoder<readonly SpeechEvent[]> {
  usage: Usage | undefined;
  private carry = Buffer.alloc(0);

  constructor(
    private readonly tally: SpeechTally,
    /** Whether the client sees the chunks (an async job's are not written). */
    private readonly visible: boolean,
  ) {}

  encode(batch: readonly SpeechEvent[]): EncodedFrames {
    const pieces: Buffer[] = [];
    for (const event of batch) {
      const bytes = this.tally.take(event);
      if (bytes) pieces.push(bytes);
    }
    if (!this.visible || pieces.length === 0) return noFrames;
    const all = this.carry.length === 0 && pieces.length === 1 ? pieces[0]! : Buffer.concat([this.carry, ...pieces]);
    const whole = all.length - (all.length % 3);
    this.carry = Buffer.from(all.subarray(whole));
    return whole === 0 ? noFrames : { frames: all.subarray(0, whole).toString('base64'), count: 0 };
  }

  end(): EncodedFrames {
    return this.carry.length === 0 ? noFrames : { frames: this.carry.toString('base64'), count: 0 };
  }
}

/** The events form: a `speech.audio.delta` per piece of audio, then `speech.audio.done` with the usage. */
class SpeechEventWriter implements StreamEncoder<readonly SpeechEvent[]> {
  usage: Usage | undefined;
  /** Each event's data as written, for the cache (when it keeps them). */
  readonly written: string[] = [];

  constructor(
    private readonly tally: SpeechTally,
    private readonly keep: boolean,
  ) {}

  encode(batch: readonly SpeechEvent[]): EncodedFrames {
    let frames = '';
    let count = 0;
    for (const event of batch) {
      const bytes = this.tally.take(event);
      if (!bytes || bytes.length === 0) continue;
      frames += this.frame({ type: 'speech.audio.delta', audio: bytes.toString('base64') });
      count++;
    }
    return count === 0 ? noFrames : { frames, count };
  }

  end(): EncodedFrames {
    const usage = this.usage;
    const done = {
      type: 'speech.audio.done',
      usage: {
        input_tokens: usage?.prompt_tokens ?? 0,
        output_tokens: usage?.completion_tokens ?? 0,
        total_tokens: usage?.total_tokens ?? 0,
      },
    };
    return { frames: this.frame(done), count: 1 };
  }

  private frame(event: object): string {
    if (this.keep) this.written.push(JSON.stringify(event));
    return sseJson(event);
  }
}

/** The vendor's audio with the job's bounds: no more than `maxSpeechBytes`, and some audio before the end. */
async function* bounded(source: AsyncIterable<SpeechEvent[]>): AsyncGenerator<SpeechEvent[]> {
  let bytes = 0;
  for await (const batch of source) {
    for (const event of batch) if (event.type === 'audio') bytes += event.bytes.length;
    if (bytes > maxSpeechBytes) {
      throw new GatewayError(502, 'The vendor sent more audio than this text can be spoken in.', {
        type: 'server_error',
        code: 'vendor_bad_response',
      });
    }
    yield batch;
  }
  // An answer without audio is no answer: retried like any malformed one (nothing reached the client).
  if (bytes === 0) throw malformedResponse();
}

/** What the meter counts of a batch: characters spoken (billed once the vendor began), and the audio's length. */
function meterSpeech(tally: SpeechTally) {
  return (batch: readonly SpeechEvent[], produced: Meter) => {
    if (produced.characters === 0 && batch.some((event) => event.type === 'audio'))
      produced.characters = speechCharacters(tally.job.input);
  };
}

/** What a speech job runs with: the parts of the media pipeline's run it uses (`workers/pipelines.ts`). */
export interface SpeechRun {
  data: GatewayJobData;
  protocol: Protocol;
  ctx: CallContext;
  publisher: ReplyPublisher;
  produced: Meter;
  media: MediaDeps;
  vendorDone(): Promise<void>;
  vendorDoneBilling(): Promise<void>;
  keepAnswer(): Promise<void>;
}

/** How it ended, as the pipeline's outcome says: the stream went out, or an async job's result to keep. */
export type SpeechOutcome =
  { answer: 'sent'; result: Record<string, never> } | { answer: 'keep'; result: { body: string } };

/** Runs a speech job to its end: streamed to a held client, or kept in the blob store for an async one. */
export async function runSpeech(run: SpeechRun, job: SpeechJob): Promise<SpeechOutcome> {
  const { data } = run;
  const streamed = data.stream;
  const keep = keepsAnswer(data);
  const tally = new SpeechTally(job, (keep && job.stream_format === 'audio') || !streamed);
  const facts = speechFacts(run.ctx.model);
  const events = job.stream_format === 'sse' ? new SpeechEventWriter(tally, keep) : undefined;
  const encoder = events ?? new AudioChunkWriter(tally, streamed);
  // The usage is settled once the vendor's audio ended (well or not): reported, or counted and derived.
  const source = (async function* () {
    try {
      yield* bounded(adapterMethod(run.protocol, 'speak')(job, run.ctx));
    } finally {
      encoder.usage = await speechUsage(tally, facts.audioTokensPerSecond);
    }
  })();
  const sent = await runStream({
    source,
    encoder,
    meter: meterSpeech(tally),
    settle: (produced) => {
      produced.audioSeconds = tally.bytes > 0 ? Math.ceil(tally.audioSeconds) : 0;
    },
    trailer: '',
    publisher: run.publisher,
    produced: run.produced,
    visible: streamed,
    vendorDone: streamed ? run.vendorDoneBilling : run.vendorDone,
    cache: keep
      ? {
          forms: () =>
            events
              ? { body: '', events: events.written.map((d) => ({ d })) }
              : { body: Buffer.concat(tally.kept ?? []).toString('base64') },
          store: run.keepAnswer,
        }
      : undefined,
  });
  if (sent) return { answer: 'sent', result: {} };
  return {
    answer: 'keep',
    result: { body: await keepAudio(run, job, Buffer.concat(tally.kept ?? []), tally.audioSeconds) },
  };
}

/** An async job's audio, kept in the blob store as long as its result: the result names it by a signed link. */
async function keepAudio(run: SpeechRun, job: SpeechJob, audio: Buffer, seconds: number): Promise<string> {
  const { media, data } = run;
  const { config } = media;
  const contentType = speechContentTypes[job.response_format];
  const stored = await media.blobs.put(`results/speech/${jobIdOf(data)}.${job.response_format}`, audio, contentType);
  const ttl = config.asyncResultTtlSeconds;
  const baseUrl = data.baseUrl ?? config.publicBaseUrl ?? 'http://localhost:8080';
  return JSON.stringify({
    object: 'audio.speech',
    url: signBlobUrl(baseUrl, media.urlSecret, stored.key, ttl),
    content_type: contentType,
    response_format: job.response_format,
    bytes: audio.length,
    seconds: Math.round(seconds * 1000) / 1000,
    expires_at: Math.floor(Date.now() / 1000) + ttl,
  });
}
