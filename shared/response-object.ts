import type { ResponseError, ResponseShell, ResponseStatus } from './responses.js';
import { sseJson } from './sse.js';

/**
 * The Responses API's response object and its event frames, as both halves
 * write them: the worker's encoder (`workers/answers/responses-encoder.ts`)
 * as a response runs, the api for a queued response and for a replay rebuilt
 * from a stored object.
 */

/** Chat-style usage as vendors report it (the fields read here). */
export interface ChatStyleUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  [extra: string]: unknown;
}

/** The Responses API's usage (input/output naming, details always present). */
export interface ResponsesUsage {
  input_tokens: number;
  /** cache_write_tokens: what a vendor reports as written to its prompt cache (0 when it reports none). */
  input_tokens_details: { cached_tokens: number; cache_write_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

/** A response object: a plain JS object whose keys are in OpenAI's order. */
export type ResponseObject = Record<string, unknown> & { id: string; status: ResponseStatus; output: unknown[] };

export type IncompleteReason = 'max_output_tokens' | 'content_filter';

export interface ResponseState {
  status: ResponseStatus;
  output: unknown[];
  usage: ResponsesUsage | null;
  error: ResponseError | null;
  incompleteReason?: IncompleteReason;
  completedAt?: number | null;
}

export interface OutputTextPart {
  type: 'output_text';
  annotations: unknown[];
  logprobs: unknown[];
  text: string;
}

export const CANCELLED: ResponseError = { code: 'response_cancelled', message: 'The response was cancelled.' };

export const nowSeconds = () => Math.floor(Date.now() / 1000);

export function textPart(text: string): OutputTextPart {
  return { type: 'output_text', annotations: [], logprobs: [], text };
}

export function messageItem(
  id: string,
  status: 'in_progress' | 'completed',
  content: unknown[],
): Record<string, unknown> {
  return { id, type: 'message', status, content, role: 'assistant' };
}

/**
 * A function call item; a call to a namespaced tool says its namespace and its own name (shared/responses-tools.ts).
 */
export function functionCallItem(
  id: string,
  status: 'in_progress' | 'completed',
  args: string,
  callId: string,
  tool: { name: string; namespace?: string },
): Record<string, unknown> {
  return {
    id,
    type: 'function_call',
    status,
    arguments: args,
    call_id: callId,
    ...(tool.namespace !== undefined && { namespace: tool.namespace }),
    name: tool.name,
  };
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function tokens(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : 0;
}

/** Concatenation of every `output_text` part of every message item ('' when none). */
export function outputText(output: readonly unknown[]): string {
  let text = '';
  for (const item of output) {
    if (!isRecord(item) || item.type !== 'message' || !Array.isArray(item.content)) continue;
    for (const part of item.content) {
      if (isRecord(part) && part.type === 'output_text' && typeof part.text === 'string') text += part.text;
    }
  }
  return text;
}

/** The reason a finished answer is `incomplete`, or undefined when it completed. */
export function incompleteReasonOf(reason: string | undefined): IncompleteReason | undefined {
  if (reason === 'length') return 'max_output_tokens';
  if (reason === 'content_filter') return 'content_filter';
  return undefined;
}

/**
 * The codes a response object's `error.code` may take (the spec's
 * `ResponseErrorCode`): clients switch on them, so a code outside the list is
 * a broken contract.
 */
const responseErrorCodes = new Set([
  'server_error',
  'rate_limit_exceeded',
  'invalid_prompt',
  'data_residency_mismatch',
  'bio_policy',
  'vector_store_timeout',
  'invalid_image',
  'invalid_image_format',
  'invalid_base64_image',
  'invalid_image_url',
  'image_too_large',
  'image_too_small',
  'image_parse_error',
  'image_content_policy_violation',
  'invalid_image_mode',
  'image_file_too_large',
  'unsupported_image_media_type',
  'empty_image_file',
  'failed_to_download_image',
  'image_file_not_found',
]);

/**
 * A failure's code as the response object may carry it. The gateway's and
 * vendors' own codes (`vendor_error`, `context_length_exceeded`, the
 * `invalid_request` a worker gives a 4xx without one…) fall into the nearest
 * of the spec's: limits and quotas are `rate_limit_exceeded`, the request's
 * own fault is `invalid_prompt`, anything else `server_error`. The stream's
 * `error` event, whose code is any string, keeps the original.
 */
export function responseErrorCode(code: string): string {
  if (responseErrorCodes.has(code)) return code;
  if (/rate_limit|quota/.test(code)) return 'rate_limit_exceeded';
  if (/^(invalid_|unsupported_)|context_length|content_policy|content_filter|too_large|too_long/.test(code))
    return 'invalid_prompt';
  return 'server_error';
}

/** Builds the full response object, keys in OpenAI's order. */
export function responseObject(shell: ResponseShell, state: ResponseState): ResponseObject {
  return {
    id: shell.id,
    object: 'response',
    created_at: shell.created_at,
    status: state.status,
    background: shell.background,
    completed_at: state.completedAt ?? null,
    error: state.error === null ? null : { code: responseErrorCode(state.error.code), message: state.error.message },
    incomplete_details:
      state.status === 'incomplete' && state.incompleteReason !== undefined ? { reason: state.incompleteReason } : null,
    instructions: shell.instructions,
    max_output_tokens: shell.max_output_tokens,
    model: shell.model,
    output: state.output,
    output_text: outputText(state.output),
    parallel_tool_calls: shell.parallel_tool_calls,
    previous_response_id: shell.previous_response_id,
    reasoning: shell.reasoning,
    service_tier: shell.service_tier ?? 'default',
    store: shell.store,
    temperature: shell.temperature,
    text: shell.text,
    tool_choice: shell.tool_choice,
    tools: shell.tools,
    top_p: shell.top_p,
    truncation: 'disabled',
    // The spec's `usage` is an object or absent (not null): a response still running has none yet.
    ...(state.usage !== null ? { usage: state.usage } : {}),
    // The spec has `user` as a string: a request that named none gets none, rather than a null.
    ...(shell.user != null ? { user: shell.user } : {}),
    metadata: shell.metadata,
  };
}

/** Chat-style usage (as vendors report it) in the Responses form; missing details are 0. */
export function responsesUsage(usage: ChatStyleUsage): ResponsesUsage {
  const input = tokens(usage.prompt_tokens);
  const output = tokens(usage.completion_tokens);
  const promptDetails = isRecord(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
  const completionDetails = isRecord(usage.completion_tokens_details) ? usage.completion_tokens_details : {};
  return {
    input_tokens: input,
    input_tokens_details: {
      cached_tokens: tokens(promptDetails.cached_tokens),
      cache_write_tokens: tokens(promptDetails.cache_write_tokens),
    },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: tokens(completionDetails.reasoning_tokens) },
    total_tokens:
      typeof usage.total_tokens === 'number' && Number.isFinite(usage.total_tokens)
        ? usage.total_tokens
        : input + output,
  };
}

/** One SSE frame: `type` first, then `sequence_number`, then the event's fields. */
export function frame(type: string, sequence: number, fields: Record<string, unknown>): string {
  return sseJson({ type, sequence_number: sequence, ...fields }, type);
}

/**
 * The frames of a whole response replayed from its stored object: created,
 * in_progress, each output item (added, its parts each with one delta, done),
 * then the terminal event its status calls for (none while it is still
 * queued or in progress). Numbered from 0.
 */
export function replayFrames(response: ResponseObject): string[] {
  const frames: string[] = [];
  const push = (type: string, fields: Record<string, unknown>) => frames.push(frame(type, frames.length, fields));
  // The opening events show the response before it had any usage: left out, as a live stream's are (the spec has no
  // null usage).
  const { usage: _usage, ...withoutUsage } = response;
  const opening: ResponseObject = {
    ...withoutUsage,
    status: 'in_progress',
    completed_at: null,
    error: null,
    incomplete_details: null,
    output: [],
    output_text: '',
  };
  push('response.created', { response: opening });
  push('response.in_progress', { response: opening });

  response.output.forEach((item, outputIndex) => {
    if (!isRecord(item)) return;
    const id = typeof item.id === 'string' ? item.id : '';
    if (item.type === 'message') {
      push('response.output_item.added', {
        output_index: outputIndex,
        item: { ...item, status: 'in_progress', content: [] },
      });
      const content = Array.isArray(item.content) ? item.content : [];
      content.forEach((part, contentIndex) => {
        const base = { item_id: id, output_index: outputIndex, content_index: contentIndex };
        if (isRecord(part) && part.type === 'output_text') {
          const text = typeof part.text === 'string' ? part.text : '';
          push('response.content_part.added', { ...base, part: { ...part, text: '' } });
          if (text !== '') push('response.output_text.delta', { ...base, delta: text, logprobs: [] });
          push('response.output_text.done', { ...base, text, logprobs: [] });
        } else {
          push('response.content_part.added', { ...base, part });
        }
        push('response.content_part.done', { ...base, part });
      });
    } else if (item.type === 'function_call') {
      const args = typeof item.arguments === 'string' ? item.arguments : '';
      push('response.output_item.added', {
        output_index: outputIndex,
        item: { ...item, status: 'in_progress', arguments: '' },
      });
      if (args !== '')
        push('response.function_call_arguments.delta', { item_id: id, output_index: outputIndex, delta: args });
      push('response.function_call_arguments.done', {
        item_id: id,
        output_index: outputIndex,
        name: item.name,
        arguments: args,
      });
    } else {
      push('response.output_item.added', { output_index: outputIndex, item });
    }
    push('response.output_item.done', { output_index: outputIndex, item });
  });

  switch (response.status) {
    case 'completed':
      push('response.completed', { response });
      break;
    case 'incomplete':
      push('response.incomplete', { response });
      break;
    case 'failed': {
      const error = isRecord(response.error) ? response.error : {};
      push('error', {
        code: typeof error.code === 'string' ? error.code : 'server_error',
        message: typeof error.message === 'string' ? error.message : 'The response failed.',
        param: null,
      });
      push('response.failed', { response });
      break;
    }
    case 'cancelled':
      push('error', { code: CANCELLED.code, message: CANCELLED.message, param: null });
      break;
    case 'queued':
    case 'in_progress':
      break;
  }
  return frames;
}
