import type { CatalogModel } from '../../shared/catalog.js';
import { invalidRequest } from '../../shared/errors.js';
import type { GeminiEmbedJob } from '../../shared/gemini.js';
import type { EmbeddingRequest } from '../../shared/schemas/embeddings.js';
import type {
  GeminiBatchEmbedContentsRequest,
  GeminiContent,
  GeminiEmbedContentRequest,
} from '../../shared/schemas/gemini.js';

/*
 * Google's embedding methods over the embeddings queue: `:embedContent` (one content) and `:batchEmbedContents`
 * (several, each naming the path's model, as Google requires) as one OpenAI embeddings request whose inputs are
 * the contents' texts, in order. A content's text parts are one text (joined by a line break); anything else in
 * it is refused, as no embedding model of the catalog reads images. `outputDimensionality` is the request's
 * `dimensions` (one for the whole batch: chat's form has one); `taskType` and `title` tune Gemini's own models and
 * reach them with the body as written, and are nothing to the other vendors.
 */

type EmbedRequest = GeminiEmbedContentRequest | GeminiBatchEmbedContentsRequest['requests'][number];

/** A content's text, or a 400 naming the part that is not text. */
function contentText(content: GeminiContent, path: string): string {
  const texts: string[] = [];
  (content.parts ?? []).forEach((part, j) => {
    if (typeof part.text === 'string') texts.push(part.text);
    else {
      const param = `${path}.parts[${j}]`;
      throw invalidRequest(
        `Invalid value at '${param}': only text parts can be embedded.`,
        param,
        'unsupported_content',
      );
    }
  });
  const text = texts.join('\n');
  if (text === '')
    throw invalidRequest(
      `Invalid value at '${path}.parts': the content has no text to embed.`,
      `${path}.parts`,
      'invalid_value',
    );
  return text;
}

/** `models/x` or `x`, as a request names its model. */
const bareModel = (name: string) => (name.startsWith('models/') ? name.slice('models/'.length) : name);

/**
 * The job of an embedding request to `model` (as the path named it: `asked`, and as the catalog has it), or a 400:
 * a batch request naming another model, dimensions that differ across a batch or that the model does not take.
 */
export function toEmbedJob(
  body: GeminiEmbedContentRequest | GeminiBatchEmbedContentsRequest,
  model: CatalogModel,
  asked: string,
  batch: boolean,
): GeminiEmbedJob {
  const requests: Array<{ request: EmbedRequest; path: string }> = batch
    ? (body as GeminiBatchEmbedContentsRequest).requests.map((request, i) => ({ request, path: `requests[${i}]` }))
    : [{ request: body as GeminiEmbedContentRequest, path: '' }];
  const at = (path: string, field: string) => (path === '' ? field : `${path}.${field}`);
  const texts: string[] = [];
  const dimensions = requests[0]!.request.outputDimensionality ?? undefined;
  for (const { request, path } of requests) {
    if (
      batch &&
      request.model !== undefined &&
      bareModel(request.model) !== asked &&
      bareModel(request.model) !== model.id
    ) {
      const param = at(path, 'model');
      throw invalidRequest(
        `Invalid value at '${param}': model '${request.model}' differs from the model of the request's path, ` +
          `models/${asked}.`,
        param,
        'invalid_value',
      );
    }
    texts.push(contentText(request.content, at(path, 'content')));
    // One embeddings request has one `dimensions`: a batch asks one for all its requests, or none.
    if ((request.outputDimensionality ?? undefined) !== dimensions) {
      const param = at(path, 'outputDimensionality');
      throw invalidRequest(
        `Invalid value at '${param}': every request of a batch must ask the same outputDimensionality (or none).`,
        param,
        'invalid_value',
      );
    }
  }
  if (
    dimensions !== undefined &&
    (!model.supports_dimensions || (model.dimensions !== undefined && dimensions > model.dimensions))
  ) {
    const param = at(requests[0]!.path, 'outputDimensionality');
    const reason = model.supports_dimensions
      ? `at most ${model.dimensions} for \`${model.id}\``
      : `not settable for \`${model.id}\``;
    throw invalidRequest(`Invalid value at '${param}': outputDimensionality is ${reason}.`, param, 'invalid_value');
  }
  const embedding: EmbeddingRequest = {
    model: model.id,
    input: texts,
    encoding_format: 'float',
    ...(dimensions !== undefined ? { dimensions } : {}),
  };
  return { gemini: body as Record<string, unknown>, embedding, batch };
}
