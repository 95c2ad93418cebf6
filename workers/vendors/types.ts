import type { Logger } from 'pino';
import type { GatewayError } from '../../shared/errors.js';
import type { Dispatcher } from 'undici';
import type { Config } from '../../shared/config.js';
import type { BlobRef } from '../../shared/blobs.js';
import type { CatalogModel } from '../../shared/catalog.js';
import type { ChatCompletionRequest } from '../../shared/schemas/chat.js';
import type { CompletionRequest } from '../../shared/schemas/completions.js';
import type { EmbeddingRequest } from '../../shared/schemas/embeddings.js';
import type { ImageGenerationRequest } from '../../shared/schemas/images.js';
import type {
  ImageEditInput,
  ImageVariationInput,
  TranscriptionInput,
  TranslationInput,
  VideoInput,
} from '../../shared/schemas/media-inputs.js';
import type { ServiceTier } from '../../shared/scheduling/vocabulary.js';
import type { Channel } from '../../shared/vendors.js';
import type { BlobStore } from '../../storage/blob-store.js';
import type { Answer, AnswerEvent, EmbeddingsAnswer, Usage } from '../answers/events.js';
import type { MessagesJob } from '../../shared/messages.js';
import type { GeminiEmbedJob, GeminiJob } from '../../shared/gemini.js';
import type { SpeechJob } from '../../shared/schemas/speech.js';
import type { ModerationRequest } from '../../shared/schemas/moderations.js';

export type { BlobRef };

/**
 * How vendor calls connect and pace themselves: built once per worker pool
 * from its configuration (`createVendorHttp`), carried by every call, closed
 * at shutdown.
 */
export interface VendorHttp {
  /**
   * Keep-alive pools with the vendor timeouts. It connects anywhere: only URLs
   * built from a channel's configured base URL may use it directly.
   */
  readonly agent: Dispatcher;
  /** The same timeouts, connecting only where the fetch policy allows: for URLs a vendor hands back (`guardedGet`). */
  readonly guardedAgent: Dispatcher;
  readonly bflPollIntervalMs: number;
  readonly videoPollIntervalMs: number;
  /** The mock vendor's pace. */
  readonly mock: Pick<Config['mock'], 'streamDelayMs' | 'videoMs'>;
  /** Closes the pooled connections, waiting for the calls still running. */
  close(): Promise<void>;
}

export interface CallContext {
  /**
   * The request's id (its `x-request-id`, not the job's): for logs, and the folder of what the call stores (a video's
   * file).
   */
  requestId: string;
  signal: AbortSignal;
  channel: Channel;
  /** Model id to send upstream. */
  upstreamModel: string;
  /** The catalog entry the client asked for (limits, defaults, modalities). */
  model: CatalogModel;
  log: Logger;
  http: VendorHttp;
  /** Told the headers of each answer the vendor accepted: its rate-limit headers say when the channel is saturated. */
  answered?: (headers: Record<string, string | string[] | undefined>) => void;
  /**
   * The `service_tier` a chat call sends (`shared/scheduling/served-tier.ts`): the job's band, only to a vendor that
   * sells tiers itself (SERVICE_TIER_NATIVE_VENDORS). Absent: the vendor never sees `service_tier`, whatever the
   * request says.
   */
  serviceTier?: ServiceTier;
}

/**
 * What a media call gets beyond a text call: the blob store, a way to report
 * progress, and a checkpoint that survives a worker restart, so a vendor task
 * already submitted is resumed (polled) by the next worker, never submitted twice.
 */
export interface MediaContext extends CallContext {
  blobs: BlobStore;
  /** 0–100; stored on the job and published to its watchers. */
  progress(percent: number): Promise<void>;
  checkpoint: {
    read<T extends Record<string, unknown>>(): T | undefined;
    write(state: Record<string, unknown>): Promise<void>;
  };
}

/** One generated image: the bytes, or a vendor URL the gateway downloads (vendor URLs expire). */
export interface GeneratedImage {
  bytes?: Buffer;
  url?: string;
  contentType?: string;
  revised_prompt?: string;
}

export interface ImageResult {
  images: GeneratedImage[];
  /** GPT-image style `usage`, passed to the client as the vendor gave it. */
  usage?: Record<string, unknown>;
  /** Top-level fields GPT image models return (`background`, `output_format`, `size`, `quality`). */
  extra?: Record<string, unknown>;
}

export type ImageGenerationInput = ImageGenerationRequest;

/** The exact body the client gets, in the format it asked for (a transcript, or a translation into English). */
export interface TranscriptionResult {
  body: string;
  contentType: string;
}

export interface VideoResult {
  video: BlobRef;
  thumbnail?: BlobRef;
}

/**
 * What a speech call yields, one array per upstream read: audio bytes in the asked format as they come (written
 * by the gateway where the vendor speaks another, `workers/audio/`), and, once, what the speech used: the vendor's
 * own token counts when it reports them, and the audio's length when it is known.
 */
export type SpeechEvent =
  | { type: 'audio'; bytes: Buffer }
  | { type: 'usage'; inputTokens: number; outputTokens: number }
  | { type: 'duration'; seconds: number };

/**
 * A finished moderation: the body as the client gets it (`{id, model, results}`, OpenAI's shape), its id for the
 * request log, and the usage when the vendor reports one (OpenAI's does not: the gateway counts the texts).
 */
export interface ModerationAnswer {
  body: string;
  id: string;
  usage?: Usage;
}

/**
 * One event of a vendor's own Messages stream: as written (`data`, its JSON text), and what it means as answer events.
 */
export interface NativeEvent {
  name: string;
  data: string;
  answers: AnswerEvent[];
}

/**
 * One chunk of a vendor's own Gemini stream (a `GenerateContentResponse`): as written (`data`, its JSON text), as
 * parsed (`payload`, read by the plain answer's fold, never changed), and what it means as answer events.
 */
export interface NativeGeminiChunk {
  data: string;
  payload: Record<string, unknown>;
  answers: AnswerEvent[];
}

/**
 * A vendor protocol: what one `workers/vendors/<vendor>/` folder exports. It
 * implements the capabilities its vendor has; the registry answers a clear
 * 400 for the others.
 *
 * Text calls speak the answer model of `workers/answers/events.ts`: a plain
 * call resolves to an `Answer`, a stream yields the events of each upstream
 * read as one array. Methods throw GatewayError for vendor failures; a
 * retryable one thrown before the first events lets the job be retried.
 * Streams send the upstream request (and check its status) on the first
 * `next()`, so a refused request throws before anything is yielded.
 */
export interface VendorAdapter {
  chat?(request: ChatCompletionRequest, ctx: CallContext): Promise<Answer>;
  streamChat?(request: ChatCompletionRequest, ctx: CallContext): AsyncIterable<AnswerEvent[]>;
  /**
   * Anthropic's Messages API as the vendor's own (`/v1/messages`): the client's request sent as written, the
   * vendor's events relayed as they come (`workers/messages-run.ts`). A vendor without it is served the chat form.
   */
  nativeMessages?(job: MessagesJob, ctx: CallContext): AsyncIterable<NativeEvent[]>;
  /** `/v1/messages/count_tokens` counted by the vendor itself (its JSON answer); without it the gateway counts. */
  countMessageTokens?(job: MessagesJob, ctx: CallContext): Promise<string>;
  /**
   * Google's Gemini API as the vendor's own (`:streamGenerateContent`): the client's request sent as written, only
   * the model renamed, the vendor's chunks relayed as they come (`workers/gemini-run.ts`). A vendor without it is
   * served the chat form.
   */
  nativeGemini?(job: GeminiJob, ctx: CallContext): AsyncIterable<NativeGeminiChunk[]>;
  /** Gemini's `:countTokens` counted by the vendor itself (its JSON answer); without it the gateway counts. */
  countGeminiTokens?(job: GeminiJob, ctx: CallContext): Promise<string>;
  /**
   * Gemini's `:embedContent` and `:batchEmbedContents` as the vendor's own: the client's body as written, its
   * answer as sent. A vendor without it is served the request's embeddings form (`embed`).
   */
  embedGemini?(job: GeminiEmbedJob, ctx: CallContext): Promise<EmbeddingsAnswer>;
  complete?(request: CompletionRequest, ctx: CallContext): Promise<Answer>;
  streamCompletion?(request: CompletionRequest, ctx: CallContext): AsyncIterable<AnswerEvent[]>;
  embed?(request: EmbeddingRequest, ctx: CallContext): Promise<EmbeddingsAnswer>;
  generateImages?(input: ImageGenerationInput, ctx: MediaContext): Promise<ImageResult>;
  editImages?(input: ImageEditInput, ctx: MediaContext): Promise<ImageResult>;
  varyImages?(input: ImageVariationInput, ctx: MediaContext): Promise<ImageResult>;
  transcribe?(input: TranscriptionInput, ctx: MediaContext): Promise<TranscriptionResult>;
  /** Speech in any language written in English, in a transcript's forms. */
  translate?(input: TranslationInput, ctx: MediaContext): Promise<TranscriptionResult>;
  generateVideo?(input: VideoInput, ctx: MediaContext): Promise<VideoResult>;
  /**
   * Text spoken (`/v1/audio/speech`): the audio as the vendor sends it. The request goes out, and a refusal
   * throws, on the first `next()`, before any audio is yielded.
   */
  speak?(input: SpeechJob, ctx: CallContext): AsyncIterable<SpeechEvent[]>;
  /**
   * Text and images judged against the harm categories (`/v1/moderations`): one result per text of a list, one for a
   * single text or for all the parts.
   */
  moderate?(request: ModerationRequest, ctx: CallContext): Promise<ModerationAnswer>;
  /**
   * A Realtime session (below): resolves once the vendor's socket is open and its
   * handshake done; throws GatewayError when it cannot be (refused credentials, unreachable, the deadline).
   */
  openRealtime?(ctx: RealtimeOpenContext, events: RealtimeVendorEvents): Promise<RealtimeVendorSession>;
}

/**
 * A live session with a vendor, spoken in OpenAI's GA Realtime protocol whatever the vendor speaks.
 *
 * The worker holding a session (`workers/realtime/`) opens it through its channel's adapter (`openRealtime` below),
 * hands it the client's events as they arrive over Redis, and relays what it reports. OpenAI's adapter passes events
 * through; another vendor's (Gemini Live) translates both ways, so the relay, the billing and the record read one
 * protocol.
 */

/** A client event of OpenAI's GA Realtime protocol, parsed (the relay checked it is an object with a string `type`). */
export interface RealtimeClientEvent {
  type: string;
  event_id?: string;
  [field: string]: unknown;
}

/** A server event of OpenAI's GA Realtime protocol. */
export interface RealtimeServerEvent {
  type: string;
  event_id: string;
  [field: string]: unknown;
}

/** What a session reports. Called in the order the vendor's frames arrive; never after `closed`. */
export interface RealtimeVendorEvents {
  /**
   * One server event for the client, in OpenAI's GA shape. A `response.done` carries `response.usage` as OpenAI
   * writes it (`input_tokens`, `output_tokens`, `input_token_details.{text_tokens, audio_tokens, cached_tokens,
   * cached_tokens_details.{text_tokens, audio_tokens}}`, `output_token_details.{text_tokens, audio_tokens}`): the
   * relay settles each response from it.
   */
  event(event: RealtimeServerEvent): void;
  /** The vendor ended the session: its socket closed or failed (`error` when it failed, in the gateway's terms). */
  closed(end: { code: number; reason: string; error?: GatewayError }): void;
}

/** An open vendor session. */
export interface RealtimeVendorSession {
  /** One client event, in OpenAI's GA shape (translated for a vendor that speaks another protocol). */
  send(event: RealtimeClientEvent): void;
  /** Closes the vendor's socket (idempotent); `events.closed` is not called for a close asked here. */
  close(): void;
}

export interface RealtimeOpenContext {
  /** The session's id (the job's): for logs and the ids of events a translated vendor writes. */
  sessionId: string;
  channel: Channel;
  /** Model id to send upstream. */
  upstreamModel: string;
  /** The catalog entry the client asked for. */
  model: CatalogModel;
  /** The model as the client named it: the events' `session.model` say it. */
  clientModel: string;
  log: Logger;
  http: VendorHttp;
  /** Aborted when the session must not open any more (the client left, the wait ran out, shutdown). */
  signal: AbortSignal;
  /** How long connecting to the vendor and its handshake (`session.created`, Gemini's `setupComplete`) may take. */
  connectTimeoutMs: number;
}
