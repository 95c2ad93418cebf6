/**
 * OpenAI's moderations endpoint for tests, strict as the spec writes it: `POST /v1/moderations` with the fields of
 * `CreateModerationRequest` and no other (an unknown field is OpenAI's 400), its four models, `input` a string, a
 * non-empty list of strings or a list of `text` and `image_url` parts (at most one image, and only for the omni
 * models), a bearer key. It answers `CreateModerationResponse` as OpenAI writes it: `modr-` and 32 hex digits, the
 * model's dated name, one result per text of a list (one for a single text or for all the parts), and no usage.
 * A text containing "kill" is flagged as violence and harassment/threatening. A test can make the next answer a
 * refusal of its own (`refuseNext`) or one with a result missing (`malformedNext`).
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { imageJudgedCategories, moderationCategories } from '../../shared/schemas/moderations.js';
import { closeServer, listenOnLoopback } from './fake-server.js';

/** Each model OpenAI serves here, and the name its answers give it. */
export const FAKE_MODERATION_MODELS: Readonly<Record<string, string>> = {
  'omni-moderation-latest': 'omni-moderation-2024-09-26',
  'omni-moderation-2024-09-26': 'omni-moderation-2024-09-26',
  'text-moderation-latest': 'text-moderation-007',
  'text-moderation-stable': 'text-moderation-007',
};
const requestFields = new Set(['model', 'input']);

export interface FakeModerationRequest {
  body: Record<string, unknown>;
  headers: IncomingMessage['headers'];
}

export interface FakeOpenAIModerations {
  /** Base URL including `/v1`. */
  url: string;
  /** Every request that reached the route with a JSON object body, refused or not. */
  requests: FakeModerationRequest[];
  /** The next answer is this refusal (status and OpenAI's error object). */
  refuseNext(
    status: number,
    error: { message: string; type: string; param?: string | null; code?: string | null },
  ): void;
  /** The next answer leaves out its last result (a vendor answer that does not read as one). */
  malformedNext(): void;
  reset(): void;
  close(): Promise<void>;
}

type Part = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };

function refuse(
  res: ServerResponse,
  status: number,
  message: string,
  param: string | null = null,
  code: string | null = null,
  type = 'invalid_request_error',
): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: { message, type, param, code } }));
}

const isPart = (value: unknown): value is Part => {
  if (typeof value !== 'object' || value === null) return false;
  const part = value as Record<string, unknown>;
  if (part.type === 'text') return Object.keys(part).sort().join() === 'text,type' && typeof part.text === 'string';
  if (part.type !== 'image_url' || Object.keys(part).sort().join() !== 'image_url,type') return false;
  const image = part.image_url as Record<string, unknown> | null;
  return (
    typeof image === 'object' &&
    image !== null &&
    Object.keys(image).join() === 'url' &&
    typeof image.url === 'string' &&
    /^(https?:|data:image\/)/.test(image.url)
  );
};

/** Why OpenAI would refuse this body, or undefined; the inputs it judges otherwise (each: its texts and images). */
function read(
  body: Record<string, unknown>,
):
  | { refused: { message: string; param: string; code?: string } }
  | { inputs: Array<{ texts: string[]; images: number }> } {
  for (const key of Object.keys(body))
    if (!requestFields.has(key))
      return { refused: { message: `Unrecognized request argument supplied: ${key}`, param: key } };
  const model = body.model ?? 'omni-moderation-latest';
  if (typeof model !== 'string' || !(model in FAKE_MODERATION_MODELS))
    return { refused: { message: `Invalid model: ${String(model)}`, param: 'model' } };
  const { input } = body;
  if (typeof input === 'string') return { inputs: [{ texts: [input], images: 0 }] };
  if (!Array.isArray(input) || input.length === 0)
    return { refused: { message: 'input must be a string or a non-empty array', param: 'input' } };
  if (input.every((item) => typeof item === 'string'))
    return { inputs: input.map((text: string) => ({ texts: [text], images: 0 })) };
  if (!input.every(isPart))
    return { refused: { message: 'input must be an array of strings or of text and image_url parts', param: 'input' } };
  const images = input.filter((part) => part.type === 'image_url').length;
  if (images > 0 && !model.startsWith('omni-'))
    return { refused: { message: `${model} does not support image inputs`, param: 'input' } };
  if (images > 1)
    return {
      refused: {
        message: `Number of images (${images}) exceeds maximum of 1`,
        param: 'input',
        code: 'too_many_images',
      },
    };
  return { inputs: [{ texts: input.flatMap((part) => (part.type === 'text' ? [part.text] : [])), images }] };
}

/** One result as OpenAI writes it: every category, its score, and the input kinds it was judged on. */
function result(texts: readonly string[], images: number, omni: boolean) {
  const violent = texts.some((text) => /kill/i.test(text));
  const categories: Record<string, boolean | null> = {};
  const scores: Record<string, number> = {};
  const applied: Record<string, string[]> = {};
  for (const category of moderationCategories) {
    const flagged = violent && (category === 'violence' || category === 'harassment/threatening');
    // The text models do not judge `illicit`: OpenAI answers null for them there.
    categories[category] = !omni && category.startsWith('illicit') ? null : flagged;
    scores[category] = flagged ? 0.9876543210123 : 0.000123456789;
    applied[category] = [
      ...(texts.length > 0 ? ['text'] : []),
      ...(images > 0 && imageJudgedCategories.has(category) ? ['image'] : []),
    ];
  }
  return { flagged: violent, categories, category_scores: scores, category_applied_input_types: applied };
}

export async function startFakeOpenAIModerations(options: { apiKey?: string } = {}): Promise<FakeOpenAIModerations> {
  const apiKey = options.apiKey ?? 'sk-openai-test';
  const requests: FakeModerationRequest[] = [];
  let refusal:
    | { status: number; error: { message: string; type: string; param?: string | null; code?: string | null } }
    | undefined;
  let malformed = false;

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/moderations') return refuse(res, 404, `Unknown path ${req.url}`);
      if (req.headers.authorization !== `Bearer ${apiKey}`)
        return refuse(res, 401, 'Incorrect API key provided.', null, 'invalid_api_key');
      if (!/^application\/json/.test(req.headers['content-type'] ?? ''))
        return refuse(res, 400, 'Expected a JSON body.');
      let body: Record<string, unknown>;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
      } catch {
        return refuse(res, 400, 'We could not parse the JSON body of your request.');
      }
      if (typeof body !== 'object' || body === null || Array.isArray(body))
        return refuse(res, 400, 'The body must be a JSON object.');
      requests.push({ body, headers: req.headers });
      if (refusal) {
        const { status, error } = refusal;
        refusal = undefined;
        return refuse(res, status, error.message, error.param ?? null, error.code ?? null, error.type);
      }
      const judged = read(body);
      if ('refused' in judged)
        return refuse(res, 400, judged.refused.message, judged.refused.param, judged.refused.code ?? null);
      const model = (body.model as string | undefined) ?? 'omni-moderation-latest';
      const results = judged.inputs.map(({ texts, images }) => result(texts, images, model.startsWith('omni-')));
      if (malformed) {
        malformed = false;
        results.pop();
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: `modr-${randomBytes(16).toString('hex')}`,
          model: FAKE_MODERATION_MODELS[model],
          results,
        }),
      );
    });
  });
  const port = await listenOnLoopback(server);
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    refuseNext(status, error) {
      refusal = { status, error };
    },
    malformedNext() {
      malformed = true;
    },
    reset() {
      requests.length = 0;
      refusal = undefined;
      malformed = false;
    },
    close: () => closeServer(server),
  };
}
