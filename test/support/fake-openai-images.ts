/**
 * OpenAI's image endpoints for the fake upstream, plugged in with
 * `fake.setDefault(createFakeOpenAIImages())`. It checks requests the way
 * OpenAI does (per model family: sizes, `n`, quality, `response_format`)
 * and answers `ImagesResponse` with a tiny valid PNG. Other paths fall
 * through to the fake's built-in answers.
 */
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FakeHandler, FakeResponse, RecordedRequest } from './fake-openai.js';

/** A 1x1 RGBA PNG: valid signature, chunks and CRCs. */
export const FAKE_IMAGE_B64 =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';
export const FAKE_IMAGE_PNG = Buffer.from(FAKE_IMAGE_B64, 'base64');
export const FAKE_IMAGES_CREATED = 1_730_000_000;
export const FAKE_IMAGE_USAGE = {
  input_tokens: 50,
  output_tokens: 50,
  total_tokens: 100,
  input_tokens_details: { text_tokens: 10, image_tokens: 40 },
};
/** Path the fake serves its PNG on, for `url` answers (a gateway that downloads vendor URLs can be tested). */
export const FAKE_IMAGE_URL_PATH = '/fake-images/';

export const fakeRevisedPrompt = (prompt: string) => `A detailed illustration of ${prompt}`;

type Family = 'dall-e-2' | 'dall-e-3' | 'gpt-image' | 'gpt-image-2' | 'other';

function familyOf(model: string): Family {
  if (model.startsWith('gpt-image-2')) return 'gpt-image-2';
  if (model.startsWith('gpt-image')) return 'gpt-image';
  if (model === 'dall-e-2' || model === 'dall-e-3') return model;
  return 'other';
}

const GENERATION_SIZES: Record<Family, readonly string[] | null> = {
  'dall-e-2': ['256x256', '512x512', '1024x1024'],
  'dall-e-3': ['1024x1024', '1792x1024', '1024x1792'],
  'gpt-image': ['1024x1024', '1536x1024', '1024x1536', 'auto'],
  'gpt-image-2': ['1024x1024', '1536x1024', '1024x1536', 'auto'],
  other: null,
};
const EDIT_SIZES: Partial<Record<Family, readonly string[]>> = {
  'dall-e-2': ['256x256', '512x512', '1024x1024'],
  'gpt-image': ['1024x1024', '1536x1024', '1024x1536', 'auto'],
  'gpt-image-2': ['1024x1024', '1536x1024', '1024x1536', 'auto'],
};
const QUALITIES: Record<Family, readonly string[] | null> = {
  'dall-e-2': ['standard'],
  'dall-e-3': ['standard', 'hd'],
  'gpt-image': ['low', 'medium', 'high', 'auto'],
  'gpt-image-2': ['low', 'medium', 'high', 'auto'],
  other: null,
};
const MAX_PROMPT: Record<Family, number> = {
  'dall-e-2': 1000,
  'dall-e-3': 4000,
  'gpt-image': 32000,
  'gpt-image-2': 32000,
  other: 32000,
};

const isGptImage = (family: Family) => family === 'gpt-image' || family === 'gpt-image-2';

function openaiError(status: number, message: string, param: string | null, code: string | null): FakeResponse {
  return { status, json: { error: { message, type: 'invalid_request_error', param, code } } };
}

const missingParameter = (name: string) =>
  openaiError(400, `Missing required parameter: '${name}'.`, name, 'missing_required_parameter');
function invalidValue(name: string, value: unknown, allowed: readonly string[]): FakeResponse {
  const supported = allowed.map((v) => `'${v}'`).join(', ');
  return openaiError(
    400,
    `Invalid value: '${String(value)}'. Supported values are: ${supported}.`,
    name,
    'invalid_value',
  );
}

/** `gpt-image-2` takes any WxH with sides divisible by 16, aspect ratio within 3:1, up to 3840x2160. */
function isFreeGptImage2Size(size: string): boolean {
  const match = /^(\d+)x(\d+)$/.exec(size);
  if (!match) return false;
  const width = Number(match[1]);
  const height = Number(match[2]);
  const ratio = Math.max(width, height) / Math.min(width, height);
  return (
    width % 16 === 0 &&
    height % 16 === 0 &&
    ratio <= 3 &&
    Math.max(width, height) <= 3840 &&
    Math.min(width, height) <= 2160
  );
}

/** The checks both endpoints share; returns the refusal, or null when the fields are acceptable. */
function checkFields(
  fields: Record<string, unknown>,
  family: Family,
  sizes: readonly string[] | null,
): FakeResponse | null {
  const prompt = fields.prompt;
  if (typeof prompt !== 'string' || prompt.length === 0) return missingParameter('prompt');
  if (prompt.length > MAX_PROMPT[family]) {
    const message =
      `Invalid 'prompt': string too long. Expected a string with maximum length ${MAX_PROMPT[family]}, ` +
      `but got a string with length ${prompt.length} instead.`;
    return openaiError(400, message, 'prompt', 'string_above_max_length');
  }
  if (fields.response_format != null) {
    if (isGptImage(family))
      return openaiError(400, "Unknown parameter: 'response_format'.", 'response_format', 'unknown_parameter');
    if (fields.response_format !== 'url' && fields.response_format !== 'b64_json') {
      return invalidValue('response_format', fields.response_format, ['url', 'b64_json']);
    }
  }
  const n = fields.n ?? 1;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > 10) {
    const message = `Invalid 'n': expected an integer between 1 and 10, but got ${JSON.stringify(n)} instead.`;
    return openaiError(400, message, 'n', 'invalid_value');
  }
  if (family === 'dall-e-3' && n !== 1) {
    return openaiError(400, 'Invalid n: dall-e-3 only supports n=1.', 'n', 'invalid_value');
  }
  const size = fields.size;
  if (
    size != null &&
    sizes !== null &&
    !sizes.includes(String(size)) &&
    !(family === 'gpt-image-2' && isFreeGptImage2Size(String(size)))
  ) {
    return invalidValue('size', size, sizes);
  }
  const qualities = QUALITIES[family];
  if (fields.quality != null && qualities !== null && !qualities.includes(String(fields.quality))) {
    return invalidValue('quality', fields.quality, qualities);
  }
  return null;
}

function imagesResponse(
  request: RecordedRequest,
  fields: Record<string, unknown>,
  family: Family,
  edit: boolean,
): FakeResponse {
  const count = (fields.n as number | undefined) ?? 1;
  const asUrl = !isGptImage(family) && fields.response_format !== 'b64_json';
  const host = request.headers.host ?? '127.0.0.1';
  const data = Array.from({ length: count }, (_, index) => ({
    ...(asUrl ? { url: `http://${host}${FAKE_IMAGE_URL_PATH}${index}.png` } : { b64_json: FAKE_IMAGE_B64 }),
    ...(family === 'dall-e-3' && !edit ? { revised_prompt: fakeRevisedPrompt(String(fields.prompt)) } : {}),
  }));
  if (!isGptImage(family)) return { json: { created: FAKE_IMAGES_CREATED, data } };
  const size = fields.size == null || fields.size === 'auto' ? '1024x1024' : String(fields.size);
  const quality = fields.quality == null || fields.quality === 'auto' ? 'high' : String(fields.quality);
  return {
    json: {
      created: FAKE_IMAGES_CREATED,
      data,
      background: fields.background ?? 'opaque',
      output_format: fields.output_format ?? 'png',
      size,
      quality,
      usage: FAKE_IMAGE_USAGE,
    },
  };
}

function checkAuth(request: RecordedRequest, apiKey: string | undefined): FakeResponse | null {
  const header = request.headers.authorization;
  const match = typeof header === 'string' ? /^Bearer\s+(\S+)$/.exec(header) : null;
  if (match === null) return openaiError(401, "You didn't provide an API key.", null, null);
  if (apiKey !== undefined && match[1] !== apiKey)
    return openaiError(401, 'Incorrect API key provided.', null, 'invalid_api_key');
  return null;
}

function answerGeneration(request: RecordedRequest): FakeResponse {
  const body = request.body;
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return openaiError(400, 'We could not parse the JSON body of your request.', null, null);
  }
  const fields = body as Record<string, unknown>;
  const family = familyOf(typeof fields.model === 'string' ? fields.model : 'dall-e-2');
  return checkFields(fields, family, GENERATION_SIZES[family]) ?? imagesResponse(request, fields, family, false);
}

/** Parses a recorded multipart body from its exact bytes (the UTF-8 `rawBody` would mangle binary parts). */
export function readFakeMultipart(request: RecordedRequest): Promise<FormData> {
  const contentType = String(request.headers['content-type'] ?? '');
  const body = request.rawBuffer === undefined ? request.rawBody : new Uint8Array(request.rawBuffer);
  return new Response(body, { headers: { 'content-type': contentType } }).formData();
}

/** The multipart form of an image upload endpoint, or OpenAI's refusal of a body that is not one. */
async function readUploadForm(request: RecordedRequest, endpoint: string): Promise<FormData | FakeResponse> {
  if (!String(request.headers['content-type'] ?? '').startsWith('multipart/form-data')) {
    return openaiError(
      400,
      `Invalid content type: the image ${endpoint} endpoint takes multipart/form-data.`,
      null,
      null,
    );
  }
  try {
    return await readFakeMultipart(request);
  } catch {
    return openaiError(400, 'We could not parse the multipart body of your request.', null, null);
  }
}

async function answerEdit(request: RecordedRequest): Promise<FakeResponse> {
  const form = await readUploadForm(request, 'edit');
  if (!(form instanceof FormData)) return form;
  const images = [...form.getAll('image'), ...form.getAll('image[]')];
  if (images.length === 0) return missingParameter('image');
  if (images.some((image) => typeof image === 'string' || image.size === 0)) {
    return openaiError(400, 'Invalid input image: expected a non-empty file upload.', 'image', 'invalid_image');
  }
  const fields: Record<string, unknown> = {};
  for (const [name, value] of form.entries()) if (typeof value === 'string') fields[name] = value;
  if (typeof fields.n === 'string') fields.n = Number(fields.n);
  const model = typeof fields.model === 'string' ? fields.model : 'dall-e-2';
  const family = familyOf(model);
  if (family === 'dall-e-3') {
    return openaiError(
      400,
      'Invalid model dall-e-3. The model must be one of: dall-e-2 or a GPT image model.',
      'model',
      'invalid_value',
    );
  }
  if (family === 'dall-e-2' && images.length > 1) {
    return openaiError(400, 'dall-e-2 edits take exactly one image.', 'image', 'invalid_value');
  }
  if (images.length > 16) return openaiError(400, 'At most 16 images may be edited at once.', 'image', 'invalid_value');
  return checkFields(fields, family, EDIT_SIZES[family] ?? null) ?? imagesResponse(request, fields, family, true);
}

/**
 * `/v1/images/variations` as OpenAI serves it: dall-e-2 only, one `image`
 * part that is a square PNG under 4 MB, no prompt, sizes 256/512/1024.
 */
async function answerVariation(request: RecordedRequest): Promise<FakeResponse> {
  const form = await readUploadForm(request, 'variation');
  if (!(form instanceof FormData)) return form;
  const images = form.getAll('image');
  if (images.length === 0) return missingParameter('image');
  if (images.length > 1 || form.getAll('image[]').length > 0)
    return openaiError(400, 'A variation takes exactly one image.', 'image', 'invalid_value');
  const image = images[0]!;
  if (typeof image === 'string' || image.size === 0)
    return openaiError(400, 'Invalid input image: expected a non-empty file upload.', 'image', 'invalid_image');
  const bytes = Buffer.from(await image.arrayBuffer());
  const isPng =
    bytes.length >= 24 && bytes.readUInt32BE(0) === 0x89504e47 && bytes.toString('latin1', 12, 16) === 'IHDR';
  if (!isPng)
    return openaiError(400, 'Invalid input image - format must be in [png].', 'image', 'invalid_image_format');
  if (bytes.readUInt32BE(16) !== bytes.readUInt32BE(20))
    return openaiError(400, 'Invalid input image - image must be square.', 'image', 'invalid_image');
  if (bytes.length >= 4 * 1024 * 1024)
    return openaiError(400, 'Invalid input image - image must be less than 4 MB.', 'image', 'image_too_large');
  const fields: Record<string, unknown> = {};
  for (const [name, value] of form.entries()) if (typeof value === 'string') fields[name] = value;
  if ('prompt' in fields)
    return openaiError(400, 'Unrecognized request argument supplied: prompt', 'prompt', 'unknown_parameter');
  if (typeof fields.n === 'string') fields.n = Number(fields.n);
  const model = typeof fields.model === 'string' ? fields.model : 'dall-e-2';
  if (model !== 'dall-e-2')
    return openaiError(400, `Invalid model ${model}. The model must be dall-e-2.`, 'model', 'invalid_value');
  // checkFields wants a prompt; a variation has none.
  return (
    checkFields({ ...fields, prompt: 'variation' }, 'dall-e-2', GENERATION_SIZES['dall-e-2']) ??
    imagesResponse(request, fields, 'dall-e-2', true)
  );
}

let servedImagePath: string | undefined;

/** The fake answers raw bytes only from files (`sseFile`), so the PNG is written once to a temporary file. */
async function serveImage(): Promise<FakeResponse> {
  if (servedImagePath === undefined) {
    const path = join(tmpdir(), `switchyard-fake-image-${process.pid}.png`);
    await writeFile(path, FAKE_IMAGE_PNG);
    servedImagePath = path;
  }
  return { sseFile: servedImagePath, headers: { 'content-type': 'image/png' } };
}

/** The image endpoints; `apiKey`, when given, is the only key accepted (as the fake's own option). */
export function createFakeOpenAIImages(options: { apiKey?: string } = {}): FakeHandler {
  return async (request) => {
    const path = request.path.split('?')[0] ?? '';
    if (request.method === 'GET' && path.startsWith(FAKE_IMAGE_URL_PATH)) return serveImage();
    if (
      request.method !== 'POST' ||
      (path !== '/v1/images/generations' && path !== '/v1/images/edits' && path !== '/v1/images/variations')
    )
      return undefined;
    const refused = checkAuth(request, options.apiKey);
    if (refused !== null) return refused;
    if (path === '/v1/images/variations') return answerVariation(request);
    return path === '/v1/images/generations' ? answerGeneration(request) : answerEdit(request);
  };
}
