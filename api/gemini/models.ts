import type { CatalogModel } from '../../shared/catalog.js';
import { invalidRequest } from '../../shared/errors.js';
import type { GeminiMethod } from '../../shared/gemini.js';

/*
 * The catalog as Google's Models API describes it (`GET /v1beta/models`, `/v1beta/models/{model}`, and `/v1/…`
 * asked with `x-goog-api-key`): each model a `Model` (`name: "models/<id>"`, its token limits, the methods it
 * answers), in pages of `pageSize` (50, at most 1,000) after an opaque `pageToken`. Only models a Gemini method
 * serves are listed: chat and reasoning models (`generateContent`, `streamGenerateContent`, `countTokens`) and
 * embedding models (`embedContent`, `batchEmbedContents`).
 */

/** The methods a model of each capability answers. */
const methodsByCapability: Readonly<Record<string, readonly GeminiMethod[]>> = {
  chat: ['generateContent', 'streamGenerateContent', 'countTokens'],
  reasoning: ['generateContent', 'streamGenerateContent', 'countTokens'],
  embedding: ['embedContent', 'batchEmbedContents'],
};

/** Whether a Gemini method serves the model at all. */
export function listedForGoogle(model: CatalogModel): boolean {
  return methodsByCapability[model.capability] !== undefined;
}

/** A version as Google writes one: the id's trailing `-001`, else its first version number (`2.5`), else `1`. */
function versionOf(id: string): string {
  return /-(\d{3})$/.exec(id)?.[1] ?? /\d+(?:\.\d+)*/.exec(id)?.[0] ?? '1';
}

/**
 * A catalog model as Google's `Model`, under the name the client asked for it (an alias as written; the catalog's
 * id is its `baseModelId`).
 */
export function toGoogleModel(model: CatalogModel, name = model.id) {
  const methods = methodsByCapability[model.capability] ?? [];
  return {
    name: `models/${name}`,
    baseModelId: model.id,
    version: versionOf(model.id),
    displayName: name,
    description: `${model.id} (${model.owned_by}), served by Switchyard.`,
    inputTokenLimit: model.context_window,
    // Google's embedding models say 1: they write no tokens.
    outputTokenLimit: Math.max(1, model.max_output_tokens),
    supportedGenerationMethods: [...methods],
    ...(model.capability === 'reasoning' ? { thinking: true } : {}),
  };
}

const firstPageSize = 50;
const maxPageSize = 1000;

/** The opaque page token: where the next page starts, by the id of the last model of this one. */
const pageToken = (lastId: string) => Buffer.from(`after:${lastId}`).toString('base64url');

function readPageToken(token: string, models: readonly CatalogModel[]): number {
  const decoded = Buffer.from(token, 'base64url').toString('utf8');
  const at = decoded.startsWith('after:')
    ? models.findIndex((model) => model.id === decoded.slice('after:'.length))
    : -1;
  if (at < 0)
    throw invalidRequest(
      "Invalid value at 'pageToken': the page token is not one this list gave (or its model is gone).",
      'pageToken',
      'invalid_value',
    );
  return at + 1;
}

/** A query parameter's one value (the last when repeated). */
const single = (value: unknown) => (Array.isArray(value) ? value.at(-1) : value) as string | undefined;

/** One page of Google's model list. */
export function googleModelPage(catalog: readonly CatalogModel[], query: Record<string, unknown>) {
  const models = catalog.filter(listedForGoogle);
  const sizeText = single(query.pageSize);
  let size = firstPageSize;
  if (sizeText !== undefined && sizeText !== '') {
    if (!/^\d+$/.test(sizeText))
      throw invalidRequest("Invalid value at 'pageSize': expected a whole number.", 'pageSize', 'invalid_value');
    // Google takes 0 as "the default" and clamps what is past its most.
    size = Number(sizeText) === 0 ? firstPageSize : Math.min(Number(sizeText), maxPageSize);
  }
  const token = single(query.pageToken);
  const start = token === undefined || token === '' ? 0 : readPageToken(token, models);
  const page = models.slice(start, start + size);
  const more = start + size < models.length;
  return {
    models: page.map((model) => toGoogleModel(model)),
    ...(more && page.length > 0 ? { nextPageToken: pageToken(page.at(-1)!.id) } : {}),
  };
}
