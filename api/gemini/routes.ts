import type { Middleware } from 'koa';
import { endpoints } from '../../shared/endpoints.js';
import { GatewayError } from '../../shared/errors.js';
import { geminiMethods } from '../../shared/gemini.js';
import { serve, type EndpointRouteDeps } from '../requests/endpoint-route.js';
import type { ModelResolver } from '../requests/model-resolver.js';
import type { KeyedState } from '../requests/request-context.js';
import { googleModelPage, listedForGoogle, toGoogleModel } from './models.js';
import { modelNameOf, readGeminiPath, streamFormOf, type GeminiCall } from './paths.js';

/*
 * Google's Gemini API past the API key: a model's methods (`POST …/models/{model}:{method}`, under `/v1beta` and
 * the GenAI SDKs' `/v1`) go to the route every endpoint row gets (`serve`: the same admission, reservation, fair
 * share, cache, request log and metrics as every request), given what the path says (the model, whether and how it
 * streams) and the stream's dialect; `/v1beta/models` lists the catalog in Google's shape; anything else under
 * `/v1beta` is Google's 404. Errors are rendered in Google's shape by the envelope; here they are worded as
 * Google's where a client may read them (an unknown model, a field the schema refused).
 */

const served = geminiMethods.join(', ');

/** Google's 404 for a model the gateway does not serve for the method (unknown, or of another kind). */
function modelNotFound(call: GeminiCall, cause: GatewayError): GatewayError {
  return new GatewayError(
    404,
    `models/${call.model} is not found for API version ${call.version}, or is not supported for ${call.method}. ` +
      `Call ListModels to see the list of available models and their supported methods.`,
    { code: 'model_not_found', param: 'model', cause },
  );
}

/**
 * A refusal of the request's body as Google words one, naming the field by its path in the body
 * (`Invalid value at 'contents[0].parts[0]': …`); the translation's own refusals are worded so already.
 */
function googleWording(error: GatewayError): GatewayError {
  if (error.status !== 400 || error.message.startsWith('Invalid value at ')) return error;
  const described = /^(?:Invalid type for|Invalid value for|Invalid) '([^']*)':\s*([\s\S]*)$/.exec(error.message);
  const missing = /^Missing required parameter: '([^']*)'\.$/.exec(error.message);
  const message = described
    ? `Invalid value at '${described[1]}': ${described[2]}`
    : missing
      ? `Invalid value at '${missing[1]}': a required field is missing.`
      : undefined;
  if (message === undefined) return error;
  return new GatewayError(400, message, {
    type: error.type,
    code: error.code,
    param: error.param,
    headers: error.headers,
    cause: error,
  });
}

/**
 * The methods of Google's models: `POST {version}/models/{model}:{method}` to `serve`, any other method of such a path
 * refused.
 */
export function geminiMethodRoutes(deps: EndpointRouteDeps): Middleware<KeyedState> {
  return async (ctx, next) => {
    const call = readGeminiPath(ctx.path);
    if (!call) return next();
    if (ctx.method !== 'POST') {
      // Under /v1 a GET of `models/{id}` with a colon and no method of Google's is OpenAI's model retrieval
      // (fine-tuned ids hold colons: `ft:gpt-4o-mini:org::id`).
      if (call.version === 'v1' && !call.endpoint) return next();
      throw new GatewayError(
        405,
        `Method ${ctx.method} is not allowed on ${ctx.path}: a model's methods are called with POST.`,
        { code: 'method_not_allowed', headers: { allow: 'POST' } },
      );
    }
    if (call.model === '') {
      throw new GatewayError(
        404,
        `The path names no model: a model's methods are called as models/{model}:{method} (API version ` +
          `${call.version}).`,
        { code: 'model_not_found', param: 'model' },
      );
    }
    if (!call.endpoint) {
      throw new GatewayError(
        404,
        `Method '${call.method.slice(0, 80)}' is not found for models/${call.model.slice(0, 200)} in API version ` +
          `${call.version}: the methods served are ${served}.`,
        {
          code: 'unknown_url',
        },
      );
    }
    // The row's template, never the raw path: what names a metric's label or a span stays bounded.
    ctx.state.route = endpoints[call.endpoint].path;
    const stream = call.method === 'streamGenerateContent';
    const form = stream ? streamFormOf(ctx.query.alt) : undefined;
    try {
      await serve(call.endpoint, ctx, deps, {
        model: call.model,
        stream,
        ...(form ? { form } : {}),
        dialect: form === 'array' ? 'google-array' : 'google-sse',
      });
    } catch (error) {
      if (!(error instanceof GatewayError) || ctx.headerSent) throw error;
      if (error.code === 'model_not_found' || error.code === 'model_not_supported') throw modelNotFound(call, error);
      throw googleWording(error);
    }
  };
}

/** `GET /v1beta/models` and `/v1beta/models/{model}` in Google's shape; Google's 404 for every other `/v1beta` URL. */
export function googleModelRoutes(deps: { models: ModelResolver }): Middleware<KeyedState> {
  return (ctx) => {
    const path = ctx.path.length > 1 && ctx.path.endsWith('/') ? ctx.path.slice(0, -1) : ctx.path;
    const listing = path === '/v1beta/models';
    const one = !listing && path.startsWith('/v1beta/models/') ? path.slice('/v1beta/models/'.length) : undefined;
    if ((listing || one !== undefined) && ctx.method !== 'GET' && ctx.method !== 'HEAD') {
      throw new GatewayError(405, `Method ${ctx.method} is not allowed on ${ctx.path}.`, {
        code: 'method_not_allowed',
        headers: { allow: 'GET, HEAD' },
      });
    }
    if (listing) {
      ctx.state.route = '/v1beta/models';
      ctx.body = googleModelPage(deps.models.list(), ctx.query);
      return;
    }
    if (one !== undefined) {
      ctx.state.route = '/v1beta/models/{model}';
      ctx.body = googleModel(deps.models, one, 'v1beta');
      return;
    }
    throw new GatewayError(
      404,
      `Unknown request URL: ${ctx.method} ${ctx.path}. Google's paths served here are models/{model}:{method} ` +
        `and the models list.`,
      { code: 'unknown_url' },
    );
  };
}

/** One model in Google's shape, by the name the client gave (an alias as written); Google's 404 when none. */
export function googleModel(models: ModelResolver, raw: string, version: string) {
  const name = modelNameOf(raw);
  const model = models.get(name);
  if (!model || !listedForGoogle(model)) {
    throw new GatewayError(
      404,
      `models/${name.slice(0, 200)} is not found for API version ${version}. Call ListModels to see the list of ` +
        `available models.`,
      { code: 'model_not_found', param: 'model' },
    );
  }
  return toGoogleModel(model, name);
}

export { googleModelPage };
