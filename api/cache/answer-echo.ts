import { createHash } from 'node:crypto';
import type { Config } from '../../shared/config.js';
import type { Endpoint, EndpointRequest } from '../../shared/endpoints.js';
import type { ResponseShell } from '../../shared/responses.js';
import type { ServiceTier } from '../../shared/scheduling/vocabulary.js';
import { sellsTiers, servedTier, tieredEndpoints } from '../../shared/scheduling/index.js';
import { mockAnswers, type VendorConfig } from '../../shared/vendors.js';
import { readSseFrame, sseDoneData } from '../../shared/sse.js';

/**
 * A stored answer (shared/cache/) as a miss would have answered the request it now serves: the answer's content
 * and usage are the stored call's, the fields that echo the request or name the answer are this request's. A hit,
 * and a follower of an identical request's call (served its leader's stored answer, or following its stream), all go
 * through here. Pure: no I/O, nothing thrown; a body or event that does not read as its endpoint writes it is
 * passed on unchanged, and fields already right are not written again.
 *
 * What each endpoint's answer echoes, and where a miss takes it from:
 * - chat completions (body, chunks, the usage chunk): `id` (`chatcmpl-…` of the request id's digits), `created`
 *   (now), `service_tier` (the tier a hit is served in, `hitTier`); `model` is the vendor's word for the catalog
 *   model the request resolved to (the client's name for it never reaches the answer), so
 *   the stored one stands. Legacy completions: `id` (`cmpl-…`) and `created`; no tier.
 * - Messages (body, `message_start`): `id` (`msg_…`) and `model`: the name the client sent, an alias as written.
 * - Responses (body, every event's `response`, `item` and `item_id`): the shell the api built for this request
 *   (`id`: its job id, `created_at`, `model`: the catalog id, `user`, `metadata`, `store`, `background`), the tier,
 *   `completed_at` (now), and its output items' ids (fresh, the same in the body and every event).
 * - Gemini's `generateContent` (body, every chunk): `responseId` (the request id's digits) and `modelVersion`: the
 *   name the client's path gave, an alias as written. A stream's chunks are SSE frames or the elements of Google's
 *   streamed JSON array, as its form is (`array`).
 * - Images: `created` (now). Moderations: `id` (`modr-…`). Embeddings (Gemini's too), transcriptions and translations
 *   echo nothing of the request: their bytes stand.
 */

/**
 * The id part of a new answer made for a request: its request id's (`req_` and 32 hex digits, made by the api, never
 * the client's), so each hit's answer has an id of its own, found in the request log by the same digits.
 */
function answerId(requestId: string): string {
  return requestId.startsWith('req_') ? requestId.slice(4) : requestId;
}

/** What the api knows of the request a stored answer now serves, as its route hands it over. */
export interface EchoSource {
  /**
   * Its job as built (never queued when it is served from the cache): its id, and its band (the tier it was granted).
   */
  job: { id: string; data: { serviceTier?: ServiceTier | undefined } };
  /** Its catalog model: the vendor of its first route says whether the tier is the vendor's word. */
  model: { routes: ReadonlyArray<{ vendor: string }> };
  config: Pick<Config, 'scheduling'> & VendorConfig;
}

/** The request an answer is echoed for. */
export interface EchoTarget {
  endpoint: Endpoint;
  /** Its validated payload (as its job would carry it). */
  payload: EndpointRequest['payload'];
  /**
   * The model the answer names, where a miss names one of the request's (Messages: the client's; Responses: the catalog
   * id); undefined: the stored answer's.
   */
  model: string | undefined;
  /** `ctx.state.requestId`: the ids a miss's answer would have are made of it. */
  requestId: string;
  /** Its job id: a response's `resp_…`. */
  jobId: string;
  /** The tier it is served in (`hitTier`). */
  serviceTier: ServiceTier;
  /** Epoch ms it is answered. */
  now: number;
}

/**
 * The tier a request served a stored answer is served in: by the tier rule (shared/scheduling/served-tier.ts) for a job
 * served at once, uncontended, in the band it was granted (the api has already served a tier the account may not use as
 * `default`): a vendor that sells tiers serves the band; for any other an uncontended request that did not wait
 * earns neither `priority` nor (unless SERVICE_TIER_FLEX_MIN_WAIT_MS is 0) `flex`.
 */
export function hitTier(
  endpoint: Endpoint,
  band: ServiceTier | undefined,
  facts: { native: boolean; flexMinWaitMs: number },
): ServiceTier {
  if (!tieredEndpoints.has(endpoint)) return 'default';
  return servedTier({
    band: band ?? 'default',
    native: facts.native,
    contended: false,
    waitedMs: 0,
    flexMinWaitMs: facts.flexMinWaitMs,
  });
}

/** The target of a request served a stored answer. */
export function echoTarget(
  request: EndpointRequest,
  requestId: string,
  source: EchoSource,
  now = Date.now(),
): EchoTarget {
  const vendor = source.model.routes[0]?.vendor;
  const { nativeTierVendors, flexMinWaitMs } = source.config.scheduling;
  const native = sellsTiers(vendor, mockAnswers(source.config, vendor), nativeTierVendors);
  const model =
    request.endpoint === 'messages' || request.endpoint === 'gemini.generate'
      ? request.payload.model
      : request.endpoint === 'responses'
        ? request.payload.shell.model
        : undefined;
  return {
    endpoint: request.endpoint,
    payload: request.payload,
    model,
    requestId,
    jobId: source.job.id,
    serviceTier: hitTier(request.endpoint, source.job.data.serviceTier, { native, flexMinWaitMs }),
    now,
  };
}

/** A stored answer's forms, rewritten for one request. */
export interface CacheEcho {
  /** The tier the request is served in, as its answer says it (and its usage records it). */
  tier: ServiceTier;
  /** The body a plain request gets. */
  body(text: string): string;
  /** One stored stream event's data (`event` its `event:` name, where its dialect has one). */
  event(data: string, event?: string): string;
  /** OpenAI's usage chunk. */
  usage(data: string): string;
  /**
   * SSE text as a stream's log holds it (whole frames: `id:`, maybe `event:`, `data:` lines, a blank line after each).
   */
  sse(text: string): string;
  /** Elements of Google's streamed JSON array as a stream's log holds them (`[` before the first, `,\r\n` between). */
  array(text: string): string;
}

const identity: CacheEcho = {
  tier: 'default',
  body: (text) => text,
  event: (data) => data,
  usage: (data) => data,
  sse: (text) => text,
  array: (text) => text,
};

type Json = Record<string, unknown>;

const isRecord = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Parses a JSON object, or undefined (never throws). */
function parseObject(text: string): Json | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return isRecord(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/** Sets a field only when it differs: says whether it did. */
function set(object: Json, key: string, value: unknown): boolean {
  if (object[key] === value) return false;
  object[key] = value;
  return true;
}

/** A rewriter of one kind of JSON object. */
interface ObjectEcho {
  /** Rewrites the object in place: true when it changed it. */
  rewrite(object: Json): boolean;
  /** The text rewritten without a parse where that can be told from the text alone; undefined: parse it. */
  quick?(text: string, event?: string): string | undefined;
  /** Learns from one text read and rewritten (`object` as rewritten, `out` its text). */
  learn?(text: string, object: Json, out: string): void;
}

/** The echo of one target. */
export function cacheEcho(target: EchoTarget): CacheEcho {
  const objects = objectEcho(target);
  if (!objects) return { ...identity, tier: target.serviceTier };
  const parsed = (text: string): string => {
    const object = parseObject(text);
    if (!object) return text;
    const out = objects.rewrite(object) ? JSON.stringify(object) : text;
    objects.learn?.(text, object, out);
    return out;
  };
  const body = (text: string): string => {
    try {
      return parsed(text);
    } catch {
      return text;
    }
  };
  const event = (text: string, name?: string): string => {
    try {
      return objects.quick?.(text, name) ?? parsed(text);
    } catch {
      return text;
    }
  };
  return {
    tier: target.serviceTier,
    body,
    event,
    usage: (text) => event(text),
    sse: (text) => rewriteFrames(text, event),
    array: (text) => rewriteElements(text, event),
  };
}

/** A chat chunk's choices: the fields before them are its envelope. */
const CHOICES = ',"choices":';

/**
 * The chunks of one stream share their envelope (`id`, `object`, `created`, `model`, `service_tier`), written before
 * their choices: once one chunk was rewritten with all the fields written in that envelope and nothing changed
 * after it, a chunk with the same envelope text gets the same new envelope without a parse (a JSON object has
 * each field once: none of them can follow).
 */
function envelopes(keys: readonly string[]): Pick<ObjectEcho, 'quick' | 'learn'> {
  let from: string | undefined;
  let to = '';
  return {
    quick: (text) =>
      from !== undefined && text.startsWith(from) && text.startsWith(CHOICES, from.length)
        ? to + text.slice(from.length)
        : undefined,
    learn: (text, object, out) => {
      const at = text.indexOf(CHOICES);
      if (at <= 0) return;
      const fields = Object.keys(object);
      const choices = fields.indexOf('choices');
      if (
        choices < 0 ||
        !keys.every((key) => {
          const index = fields.indexOf(key);
          return index >= 0 && index < choices;
        })
      )
        return;
      const rest = text.slice(at);
      if (!out.endsWith(rest)) return;
      from = text.slice(0, at);
      to = out.slice(0, out.length - rest.length);
    },
  };
}

/**
 * A Responses text or arguments delta as the encoder writes it (most of a stream): only its `item_id` echoes anything.
 */
const deltaHead =
  /^\{"type":"response\.(?:output_text|function_call_arguments)\.delta","sequence_number":\d+,"item_id":"([^"\\]*)"/;

/**
 * The rewriter of the endpoint's objects, or undefined when its answers echo nothing (embeddings, transcriptions,
 * translations).
 */
function objectEcho(target: EchoTarget): ObjectEcho | undefined {
  const nowS = Math.floor(target.now / 1000);
  switch (target.endpoint) {
    case 'chat.completions': {
      const id = `chatcmpl-${answerId(target.requestId)}`;
      return {
        ...envelopes(['id', 'created', 'service_tier']),
        rewrite: (object) => {
          if (
            (object.object !== 'chat.completion' && object.object !== 'chat.completion.chunk') ||
            typeof object.id !== 'string'
          )
            return false;
          // Each assignment on its own: every field is checked, whatever the ones before did.
          const changed = [
            set(object, 'id', id),
            set(object, 'created', nowS),
            set(object, 'service_tier', target.serviceTier),
          ];
          return changed.includes(true);
        },
      };
    }
    case 'completions': {
      const id = `cmpl-${answerId(target.requestId)}`;
      return {
        ...envelopes(['id', 'created']),
        rewrite: (object) => {
          if (object.object !== 'text_completion' || typeof object.id !== 'string') return false;
          const changed = [set(object, 'id', id), set(object, 'created', nowS)];
          return changed.includes(true);
        },
      };
    }
    case 'messages': {
      const id = `msg_${answerId(target.requestId)}`;
      const message = (object: Json) => {
        if (object.type !== 'message' || typeof object.id !== 'string') return false;
        const changed = [set(object, 'id', id), target.model !== undefined && set(object, 'model', target.model)];
        return changed.includes(true);
      };
      return {
        // Only `message_start` carries the message: every other event passes unread.
        quick: (text, event) =>
          event === undefined
            ? text.includes('"message_start"')
              ? undefined
              : text
            : event === 'message_start'
              ? undefined
              : text,
        rewrite: (object) =>
          object.type === 'message_start' ? isRecord(object.message) && message(object.message) : message(object),
      };
    }
    case 'responses':
      return responsesEcho(target, nowS);
    case 'gemini.generate': {
      const id = answerId(target.requestId);
      return {
        // A GenerateContentResponse (the body, or a chunk): an error element passes as it is.
        rewrite: (object) => {
          if (typeof object.responseId !== 'string' && typeof object.modelVersion !== 'string') return false;
          const changed = [
            typeof object.responseId === 'string' && set(object, 'responseId', id),
            target.model !== undefined && set(object, 'modelVersion', target.model),
          ];
          return changed.includes(true);
        },
      };
    }
    case 'images.generations':
    case 'images.edits':
    case 'images.variations':
      return {
        rewrite: (object) =>
          typeof object.created === 'number' && Array.isArray(object.data) && set(object, 'created', nowS),
      };
    case 'moderations':
      return {
        rewrite: (object) =>
          typeof object.id === 'string' &&
          Array.isArray(object.results) &&
          set(object, 'id', `modr-${answerId(target.requestId)}`),
      };
    default:
      return undefined;
  }
}

/**
 * A response object's fields as a miss writes them, its items' ids fresh: the same old id gets the same new one
 * everywhere.
 */
function responsesEcho(target: EchoTarget, nowS: number): ObjectEcho {
  const shell = (target.payload as { shell: ResponseShell }).shell;
  const itemIds = new Map<string, string>();
  const itemId = (old: string): string => {
    let fresh = itemIds.get(old);
    if (fresh === undefined) {
      const prefix = /^[A-Za-z]+_/.exec(old)?.[0];
      // The encoder's ids are a prefix and 24 hex digits; one of another form is not the gateway's to renew.
      fresh =
        prefix === undefined
          ? old
          : `${prefix}${createHash('sha256').update(`${target.jobId}\u0000${old}`).digest('hex').slice(0, 24)}`;
      itemIds.set(old, fresh);
    }
    return fresh;
  };
  const item = (value: unknown) =>
    isRecord(value) && typeof value.id === 'string' && set(value, 'id', itemId(value.id));
  const metadata = JSON.stringify(shell.metadata ?? {});
  const response = (object: Json): boolean => {
    if (object.object !== 'response' || typeof object.id !== 'string' || !Array.isArray(object.output)) return false;
    const changed = [
      set(object, 'id', target.jobId),
      set(object, 'created_at', shell.created_at),
      typeof object.completed_at === 'number' && set(object, 'completed_at', Math.max(nowS, shell.created_at)),
      target.model !== undefined && set(object, 'model', target.model),
      set(object, 'service_tier', target.serviceTier),
      set(object, 'store', shell.store),
      set(object, 'background', shell.background),
      JSON.stringify(object.metadata) !== metadata && set(object, 'metadata', shell.metadata ?? {}),
      userOf(object, shell.user),
      object.output.map(item).includes(true),
    ];
    return changed.includes(true);
  };
  return {
    quick: (text) => {
      const delta = deltaHead.exec(text);
      if (!delta) return undefined;
      const end = delta[0].length - 1;
      const start = end - delta[1]!.length;
      return `${text.slice(0, start)}${itemId(delta[1]!)}${text.slice(end)}`;
    },
    rewrite: (object) => {
      if (object.object === 'response') return response(object);
      if (typeof object.type !== 'string' || !object.type.startsWith('response.')) return false;
      const changed = [
        isRecord(object.response) && response(object.response),
        item(object.item),
        typeof object.item_id === 'string' && set(object, 'item_id', itemId(object.item_id)),
      ];
      return changed.includes(true);
    },
  };
}

/**
 * `user` as the response object says it: the request's, or none (never null), before `metadata` as a miss writes it.
 */
function userOf(object: Json, user: string | null): boolean {
  if (user == null) {
    if (!('user' in object)) return false;
    delete object.user;
    return true;
  }
  if ('user' in object || !('metadata' in object)) return set(object, 'user', user);
  // Added: the keys after it move behind it, as the object is written (`usage`, `user`, `metadata`).
  const metadata = object.metadata;
  delete object.metadata;
  object.user = user;
  object.metadata = metadata;
  return true;
}

/**
 * SSE text rewritten frame by frame: each frame's one `data:` line through `event` (with its `event:` name), its
 * other lines (`id:`, `event:`, comments) as they were. Text after the last blank line (none when the frames are
 * whole) passes unchanged, as does a frame of several `data:` lines.
 */
function rewriteFrames(text: string, event: (data: string, name?: string) => string): string {
  let out = '';
  let at = 0;
  for (let end = text.indexOf('\n\n'); end >= 0; end = text.indexOf('\n\n', at)) {
    out += rewriteFrame(text.slice(at, end), event) + '\n\n';
    at = end + 2;
  }
  return at === 0 ? text : out + text.slice(at);
}

function rewriteFrame(frame: string, event: (data: string, name?: string) => string): string {
  const read = readSseFrame(frame);
  if (read.data === undefined || read.data === sseDoneData) return frame;
  const rewritten = event(read.data, read.event);
  if (rewritten === read.data) return frame;
  const lines = frame.split('\n');
  lines[read.dataLine] = `data: ${rewritten}`;
  return lines.join('\n');
}

/**
 * The elements of a streamed JSON array rewritten one by one: each is one JSON object on one line (the worker writes
 * them so), after the array's `[` or the `,\r\n` before it; whitespace and the closing `]` stand.
 */
function rewriteElements(text: string, event: (data: string) => string): string {
  return text
    .split(',\r\n')
    .map((piece) => {
      const match = /^(\s*\[?\s*)([\s\S]*?)(\s*\]?\s*)$/.exec(piece);
      if (!match || match[2] === '') return piece;
      return `${match[1]}${event(match[2]!)}${match[3]}`;
    })
    .join(',\r\n');
}

/** The echo of a request served a stored answer; with no source, the stored answer as it is. */
export function echoFor(
  request: EndpointRequest,
  requestId: string,
  source: EchoSource | undefined,
  now = Date.now(),
): CacheEcho {
  return source ? cacheEcho(echoTarget(request, requestId, source, now)) : identity;
}
