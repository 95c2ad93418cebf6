/**
 * Google's published shapes of the Gemini API's answers (the Generative Language API reference, v1beta), as strict
 * zod schemas: `GenerateContentResponse` (a whole answer, and each chunk of a stream), `CountTokensResponse`,
 * `EmbedContentResponse`, `BatchEmbedContentsResponse`, `Model`, `ListModelsResponse` and the error body
 * (`google.rpc.Status` in its JSON envelope). Strict: a field Google never writes (an OpenAI `id`, a `choices`, a
 * `null` where Google leaves a field out) fails the parse, so a test that checks a gateway's answer against these
 * knows every client library of Google's reads it as Google's own. Enums are Google's lists; integers are integers
 * (proto3 JSON writes int32 as numbers), and a token count is never negative.
 */
import { z } from 'zod';

const count = z.number().int().nonnegative();
const base64 = z.string().regex(/^[A-Za-z0-9+/_-]*={0,2}$/, 'base64');

export const finishReasons = [
  'FINISH_REASON_UNSPECIFIED',
  'STOP',
  'MAX_TOKENS',
  'SAFETY',
  'RECITATION',
  'LANGUAGE',
  'OTHER',
  'BLOCKLIST',
  'PROHIBITED_CONTENT',
  'SPII',
  'MALFORMED_FUNCTION_CALL',
  'IMAGE_SAFETY',
  'IMAGE_PROHIBITED_CONTENT',
  'IMAGE_OTHER',
  'NO_IMAGE',
  'IMAGE_RECITATION',
  'UNEXPECTED_TOOL_CALL',
  'TOO_MANY_TOOL_CALLS',
  'MISSING_THOUGHT_SIGNATURE',
  'MALFORMED_RESPONSE',
] as const;

const harmCategory = z.enum([
  'HARM_CATEGORY_UNSPECIFIED',
  'HARM_CATEGORY_DEROGATORY',
  'HARM_CATEGORY_TOXICITY',
  'HARM_CATEGORY_VIOLENCE',
  'HARM_CATEGORY_SEXUAL',
  'HARM_CATEGORY_MEDICAL',
  'HARM_CATEGORY_DANGEROUS',
  'HARM_CATEGORY_HARASSMENT',
  'HARM_CATEGORY_HATE_SPEECH',
  'HARM_CATEGORY_SEXUALLY_EXPLICIT',
  'HARM_CATEGORY_DANGEROUS_CONTENT',
  'HARM_CATEGORY_CIVIC_INTEGRITY',
]);
const safetyRating = z.strictObject({
  category: harmCategory,
  probability: z.enum(['HARM_PROBABILITY_UNSPECIFIED', 'NEGLIGIBLE', 'LOW', 'MEDIUM', 'HIGH']),
  blocked: z.boolean().optional(),
});

export const partShape = z
  .strictObject({
    text: z.string().optional(),
    inlineData: z.strictObject({ mimeType: z.string(), data: base64 }).optional(),
    fileData: z.strictObject({ mimeType: z.string().optional(), fileUri: z.string() }).optional(),
    functionCall: z
      .strictObject({
        id: z.string().optional(),
        name: z.string().min(1),
        args: z.record(z.string(), z.unknown()).optional(),
      })
      .optional(),
    functionResponse: z
      .strictObject({
        id: z.string().optional(),
        name: z.string().min(1),
        response: z.record(z.string(), z.unknown()),
        willContinue: z.boolean().optional(),
        scheduling: z.string().optional(),
        parts: z.array(z.unknown()).optional(),
      })
      .optional(),
    executableCode: z
      .strictObject({ language: z.enum(['LANGUAGE_UNSPECIFIED', 'PYTHON']), code: z.string() })
      .optional(),
    codeExecutionResult: z
      .strictObject({
        outcome: z.enum(['OUTCOME_UNSPECIFIED', 'OUTCOME_OK', 'OUTCOME_FAILED', 'OUTCOME_DEADLINE_EXCEEDED']),
        output: z.string().optional(),
      })
      .optional(),
    thought: z.boolean().optional(),
    thoughtSignature: base64.optional(),
    videoMetadata: z.record(z.string(), z.unknown()).optional(),
    partMetadata: z.record(z.string(), z.unknown()).optional(),
  })
  .refine(
    (part) =>
      [
        'text',
        'inlineData',
        'fileData',
        'functionCall',
        'functionResponse',
        'executableCode',
        'codeExecutionResult',
      ].filter((key) => key in part).length <= 1,
    'a part holds one kind of data (text, inlineData, fileData, functionCall, functionResponse, executableCode ' +
      'or codeExecutionResult)',
  );

export const contentShape = z.strictObject({
  role: z.enum(['user', 'model']).optional(),
  parts: z.array(partShape).optional(),
});

const modalityCount = z.strictObject({
  modality: z.enum(['MODALITY_UNSPECIFIED', 'TEXT', 'IMAGE', 'VIDEO', 'AUDIO', 'DOCUMENT']),
  tokenCount: count.optional(),
});

export const usageMetadataShape = z.strictObject({
  promptTokenCount: count.optional(),
  cachedContentTokenCount: count.optional(),
  candidatesTokenCount: count.optional(),
  toolUsePromptTokenCount: count.optional(),
  thoughtsTokenCount: count.optional(),
  totalTokenCount: count.optional(),
  promptTokensDetails: z.array(modalityCount).optional(),
  cacheTokensDetails: z.array(modalityCount).optional(),
  candidatesTokensDetails: z.array(modalityCount).optional(),
  toolUsePromptTokensDetails: z.array(modalityCount).optional(),
});

const candidateShape = z.strictObject({
  content: contentShape.optional(),
  finishReason: z.enum(finishReasons).optional(),
  finishMessage: z.string().optional(),
  safetyRatings: z.array(safetyRating).optional(),
  citationMetadata: z
    .strictObject({ citationSources: z.array(z.record(z.string(), z.unknown())).optional() })
    .optional(),
  tokenCount: count.optional(),
  groundingAttributions: z.array(z.record(z.string(), z.unknown())).optional(),
  groundingMetadata: z.record(z.string(), z.unknown()).optional(),
  avgLogprobs: z.number().optional(),
  logprobsResult: z.record(z.string(), z.unknown()).optional(),
  urlContextMetadata: z.record(z.string(), z.unknown()).optional(),
  index: count.optional(),
});

/** A whole `generateContent` answer, or one chunk of `streamGenerateContent` (both forms). */
export const generateContentResponseShape = z.strictObject({
  candidates: z.array(candidateShape).optional(),
  promptFeedback: z
    .strictObject({
      blockReason: z
        .enum(['BLOCK_REASON_UNSPECIFIED', 'SAFETY', 'OTHER', 'BLOCKLIST', 'PROHIBITED_CONTENT', 'IMAGE_SAFETY'])
        .optional(),
      safetyRatings: z.array(safetyRating).optional(),
    })
    .optional(),
  usageMetadata: usageMetadataShape.optional(),
  modelVersion: z.string().optional(),
  responseId: z.string().optional(),
  modelStatus: z.record(z.string(), z.unknown()).optional(),
});

export const countTokensResponseShape = z.strictObject({
  totalTokens: count,
  cachedContentTokenCount: count.optional(),
  promptTokensDetails: z.array(modalityCount).optional(),
  cacheTokensDetails: z.array(modalityCount).optional(),
});

const embeddingShape = z.strictObject({ values: z.array(z.number()).min(1) });
export const embedContentResponseShape = z.strictObject({ embedding: embeddingShape });
export const batchEmbedContentsResponseShape = z.strictObject({ embeddings: z.array(embeddingShape) });

/** A model as `models.get` and each entry of `models.list` say it. */
export const modelShape = z.strictObject({
  name: z.string().regex(/^models\/[^/]+$/),
  baseModelId: z.string().optional(),
  version: z.string(),
  displayName: z.string().optional(),
  description: z.string().optional(),
  inputTokenLimit: count.optional(),
  outputTokenLimit: count.optional(),
  supportedGenerationMethods: z.array(z.string()).optional(),
  thinking: z.boolean().optional(),
  temperature: z.number().optional(),
  maxTemperature: z.number().optional(),
  topP: z.number().optional(),
  topK: count.optional(),
});

export const listModelsResponseShape = z.strictObject({
  models: z.array(modelShape),
  nextPageToken: z.string().min(1).optional(),
});

export const googleStatuses = [
  'OK',
  'CANCELLED',
  'UNKNOWN',
  'INVALID_ARGUMENT',
  'DEADLINE_EXCEEDED',
  'NOT_FOUND',
  'ALREADY_EXISTS',
  'PERMISSION_DENIED',
  'RESOURCE_EXHAUSTED',
  'FAILED_PRECONDITION',
  'ABORTED',
  'OUT_OF_RANGE',
  'UNIMPLEMENTED',
  'INTERNAL',
  'UNAVAILABLE',
  'DATA_LOSS',
  'UNAUTHENTICATED',
] as const;

/** `google.rpc.RetryInfo`: when to try again, a duration in seconds (`"12s"`, `"0.5s"`). */
export const retryInfoShape = z.strictObject({
  '@type': z.literal('type.googleapis.com/google.rpc.RetryInfo'),
  retryDelay: z.string().regex(/^\d+(\.\d{1,9})?s$/),
});

/** `{"error": {"code", "message", "status", "details"?}}`: each detail a typed `google.protobuf.Any`. */
export const errorBodyShape = z.strictObject({
  error: z.strictObject({
    code: z.number().int().min(400).max(599),
    message: z.string().min(1),
    status: z.enum(googleStatuses),
    details: z.array(z.looseObject({ '@type': z.string().startsWith('type.googleapis.com/') })).optional(),
  }),
});

export type GenerateContentResponse = z.infer<typeof generateContentResponseShape>;
export type GoogleErrorBody = z.infer<typeof errorBodyShape>;

/** Parses `value` with `shape`, failing with every issue and the value itself (what a test needs to see). */
export function assertShape<T>(shape: z.ZodType<T>, value: unknown, what = 'body'): T {
  const parsed = shape.safeParse(value);
  if (!parsed.success)
    throw new Error(
      `${what} is not in Google's shape: ${z.prettifyError(parsed.error)}\n${JSON.stringify(value).slice(0, 2000)}`,
    );
  return parsed.data;
}

/**
 * A refusal in Google's shape: the HTTP status, the same code in the body and the canonical status named; its `error`.
 */
export async function assertGoogleError(
  response: Response,
  status: number,
  googleStatus: (typeof googleStatuses)[number],
): Promise<GoogleErrorBody['error']> {
  const text = await response.text();
  if (response.status !== status) throw new Error(`expected HTTP ${status}, got ${response.status}: ${text}`);
  const body = assertShape(errorBodyShape, JSON.parse(text), `the ${status} body`);
  if (body.error.code !== status || body.error.status !== googleStatus)
    throw new Error(`expected ${status} ${googleStatus} in the body, got ${text}`);
  return body.error;
}
