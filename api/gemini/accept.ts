import type { CatalogModel } from '../../shared/catalog.js';
import type { Config } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import type { GeminiJob, GeminiRequest, GeminiStreamForm } from '../../shared/gemini.js';
import type { GeminiCountTokensRequest, GeminiGenerateRequest } from '../../shared/schemas/gemini.js';
import { mockAnswers, vendorDefinition } from '../../shared/vendors.js';
import { toChatRequest, type GenerateFields } from './translate-request.js';

/*
 * A validated Gemini request as its job carries it: the body as written for Gemini (the model is the path's,
 * never the body's), its chat form for every other vendor, the model name the answer echoes (the client's, an
 * alias as written) and the stream's form. The prompt's tokens are counted by the caller once the request is
 * accepted.
 */

/** What a Gemini request's path says: the model as asked, and whether and how the answer streams. */
export interface GeminiPathFields {
  model: string;
  stream: boolean;
  form?: GeminiStreamForm;
}

/** Each vendor's protocol is looked up once: the channels file is read for vendors not built in. */
const protocols = new Map<string, string | undefined>();

/**
 * The wire protocol of the vendor that answers the model first (its first route's), `mock` when the mock answers for
 * it.
 */
function protocolOf(model: CatalogModel, config: Config): string | undefined {
  const vendor = model.routes[0]?.vendor;
  if (vendor === undefined) return undefined;
  if (mockAnswers(config, vendor)) return 'mock';
  if (!protocols.has(vendor)) protocols.set(vendor, vendorDefinition(vendor, config)?.protocol);
  return protocols.get(vendor);
}

/**
 * Whether Gemini itself serves the model (its first route's vendor speaks Gemini's protocol, and the mock is not
 * standing in for it): then the body goes to it as written, and what chat cannot carry is no refusal.
 */
export function servedByGemini(model: CatalogModel, config: Config): boolean {
  return protocolOf(model, config) === 'gemini';
}

/**
 * Whether the model is given a `reasoning_effort`: a reasoning model, or one whose vendor's adapter turns an effort
 * into its own thinking setting (Anthropic's and Gemini's, where the catalog names many thinking models `chat`).
 * Another vendor's chat model would refuse the field (Gemini CLI asks every `gemini-2.5-*` name for a thinking
 * budget, whatever model an alias puts behind it).
 */
function takesEffort(model: CatalogModel, config: Config): boolean {
  const protocol = protocolOf(model, config);
  return model.capability === 'reasoning' || protocol === 'anthropic' || protocol === 'gemini' || protocol === 'mock';
}

/** The path's fields, which every Gemini endpoint needs: a request that reached one without them names no model. */
export function requirePath(path: GeminiPathFields | undefined): GeminiPathFields {
  if (!path)
    throw new GatewayError(404, 'A Gemini method is called as models/{model}:{method}.', { code: 'unknown_url' });
  return path;
}

/** The job of a `generateContent` or `streamGenerateContent` request. */
export function toGeminiJob(
  request: GeminiGenerateRequest,
  model: CatalogModel,
  path: GeminiPathFields,
  config: Config,
): GeminiJob {
  const { chat } = toChatRequest(request as GenerateFields, model, {
    stream: path.stream,
    native: servedByGemini(model, config),
    reasons: takesEffort(model, config),
  });
  return {
    gemini: request as GeminiRequest,
    chat,
    model: path.model,
    ...(path.stream ? { form: path.form ?? 'array' } : {}),
    inputTokens: 0,
  };
}

/**
 * The job of a `countTokens` request: its contents, or its whole `generateContentRequest`, in chat form for the
 * tokenizer.
 */
export function toCountTokensJob(
  request: GeminiCountTokensRequest,
  model: CatalogModel,
  path: GeminiPathFields,
  config: Config,
): GeminiJob {
  const fields = (request.generateContentRequest ?? { contents: request.contents! }) as GenerateFields;
  const { chat } = toChatRequest(fields, model, {
    stream: false,
    native: servedByGemini(model, config),
    reasons: takesEffort(model, config),
  });
  return { gemini: request as unknown as GeminiRequest, chat, model: path.model, inputTokens: 0 };
}
