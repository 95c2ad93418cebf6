import type { CatalogModel } from '../../shared/catalog.js';
import type { MessagesJob } from '../../shared/messages.js';
import type { MessagesRequest } from '../../shared/schemas/messages.js';
import { toChatRequest } from './translate.js';

/**
 * A validated Messages request as its job carries it: `max_tokens` above the model's output limit clamped to it
 * (a client such as Claude Code asks 32,000 of every model; the vendor would refuse more than it writes), the
 * request kept as written for Anthropic, and its chat form for every other vendor. The input tokens are counted
 * by the caller once the request is accepted.
 */
export function toMessagesJob(request: MessagesRequest, model: CatalogModel, betas: string): MessagesJob {
  const limit = model.max_output_tokens;
  const anthropic = limit > 0 && request.max_tokens > limit ? { ...request, max_tokens: limit } : request;
  const { chat } = toChatRequest(anthropic, model);
  return {
    anthropic,
    chat,
    model: request.model,
    inputTokens: 0,
    ...(betas.trim() !== '' ? { betas: betas.trim() } : {}),
  };
}
