import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import type { CompletionRequest } from '../../../shared/schemas/completions.js';
import type { EmbeddingRequest } from '../../../shared/schemas/embeddings.js';
import type { CallContext } from '../types.js';

type StreamableRequest = ChatCompletionRequest | CompletionRequest;

/**
 * Applies the channel's vendor quirks (declared as data in shared/vendors.ts):
 * renamed fields move, refused fields are dropped with a warning naming them,
 * so nothing changes meaning silently.
 */
function applyQuirks(body: Record<string, unknown>, ctx: CallContext): Record<string, unknown> {
  const quirks = ctx.channel.quirks;
  if (!quirks) return body;
  for (const [from, to] of Object.entries(quirks.renameParams ?? {})) {
    if (body[from] !== undefined && body[from] !== null) {
      if (body[to] === undefined || body[to] === null) body[to] = body[from];
      delete body[from];
    }
  }
  const dropped: string[] = [];
  for (const name of quirks.unsupportedParams ?? []) {
    if (body[name] !== undefined && body[name] !== null) {
      dropped.push(name);
      delete body[name];
    }
  }
  if (dropped.length > 0) {
    ctx.log.warn(
      { reqId: ctx.requestId, vendor: ctx.channel.vendor, dropped },
      'vendor does not take these parameters; dropped them',
    );
  }
  return body;
}

/** Which API a body is for: only chat completions has a `service_tier` (the legacy completions API has none). */
export type TextApi = 'chat' | 'completions';

/**
 * `service_tier` is the gateway's, never the client's as written: a vendor
 * that sells tiers (`ctx.serviceTier` set, `shared/scheduling/served-tier.ts`) is sent
 * the job's band on a chat call (`priority`, `default` or `flex`: never
 * `auto`, `scale` or `fast`); every other vendor, and every legacy completion
 * or embeddings call, is sent none. Dropped before the quirks: it is not the
 * client's parameter refused.
 */
function setServiceTier(
  body: Record<string, unknown>,
  ctx: CallContext,
  api: TextApi | 'embeddings',
): Record<string, unknown> {
  delete body.service_tier;
  if (api === 'chat' && ctx.serviceTier !== undefined) body.service_tier = ctx.serviceTier;
  return body;
}

/**
 * The client's request goes upstream as it came (unknown fields included:
 * compatible vendors have their own extensions); the model is swapped for
 * the route's upstream id, and `service_tier` is the gateway's.
 */
export function buildOpenAIBody(request: StreamableRequest, ctx: CallContext, api: TextApi): string {
  const body: Record<string, unknown> = { ...request, model: ctx.upstreamModel };
  delete body.stream_options;
  // The non-stream call parses one JSON body; an SSE answer would be unreadable here.
  if (body.stream) body.stream = false;
  return JSON.stringify(applyQuirks(setServiceTier(body, ctx, api), ctx));
}

/** Streams always ask for the usage chunk: billing needs it even when the client did not ask. */
export function buildOpenAIStreamBody(request: StreamableRequest, ctx: CallContext, api: TextApi): string {
  const body: Record<string, unknown> = {
    ...request,
    model: ctx.upstreamModel,
    stream: true,
    stream_options: { ...request.stream_options, include_usage: true },
  };
  return JSON.stringify(applyQuirks(setServiceTier(body, ctx, api), ctx));
}

export function buildOpenAIEmbeddingBody(request: EmbeddingRequest, ctx: CallContext): string {
  return JSON.stringify(applyQuirks(setServiceTier({ ...request, model: ctx.upstreamModel }, ctx, 'embeddings'), ctx));
}
