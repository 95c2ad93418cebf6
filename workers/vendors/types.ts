import type { Logger } from 'pino';
import type { CatalogModel } from '../../shared/catalog.js';
import type { ChatCompletionRequest } from '../../shared/schemas/chat.js';
import type { CompletionRequest } from '../../shared/schemas/completions.js';
import type { EmbeddingRequest } from '../../shared/schemas/embeddings.js';
import type { Channel } from '../../shared/vendors.js';

export interface CallContext {
  requestId: string;
  signal: AbortSignal;
  channel: Channel;
  /** Model id to send upstream. */
  upstreamModel: string;
  /** The catalog entry the client asked for (limits, defaults, modalities). */
  model: CatalogModel;
  log: Logger;
}

/** OpenAI-shaped usage, as vendors report it (or as counted for the mock). */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  [extra: string]: unknown;
}

/** A finished non-stream answer: the exact JSON body the client gets, and usage for billing. */
export interface VendorResult {
  body: string;
  usage?: Usage;
}

/**
 * One streamed chunk, already serialized the way the client gets it (the JSON
 * after `data: `). `usageOnly` marks the trailing usage chunk (`choices: []`),
 * forwarded only when the client asked for `stream_options.include_usage`.
 */
export interface StreamEvent {
  data: string;
  usage?: Usage;
  usageOnly?: boolean;
}

/**
 * A vendor protocol. Methods throw GatewayError for vendor failures; a
 * retryable one thrown before the first StreamEvent lets the job be retried.
 * Stream methods send the upstream request (and check its status) before
 * yielding, so an HTTP error surfaces as a throw from the first `next()`.
 */
export interface VendorAdapter {
  createChatCompletion(request: ChatCompletionRequest, ctx: CallContext): Promise<VendorResult>;
  streamChatCompletion(request: ChatCompletionRequest, ctx: CallContext): AsyncIterable<StreamEvent>;
  createCompletion(request: CompletionRequest, ctx: CallContext): Promise<VendorResult>;
  streamCompletion(request: CompletionRequest, ctx: CallContext): AsyncIterable<StreamEvent>;
  createEmbeddings(request: EmbeddingRequest, ctx: CallContext): Promise<VendorResult>;
}
