import { z } from 'zod';
import { boundedArray } from './common.js';

/**
 * Google's Gemini API as clients send it (`models/{model}:generateContent` and its streamed, counting and embedding
 * siblings): Gemini CLI and the GenAI SDKs. The model is named by the path, never the body. The schemas check what
 * the gateway reads (roles, the parts it translates, the numbers it passes on) and keep every other field as
 * written: a model Gemini serves gets the body as the client sent it (thought signatures, `thinkingConfig`,
 * `cachedContent`, `safetySettings`, the tools Gemini runs), and the chat translation leaves out what it has no
 * form for.
 *
 * Google's JSON parser takes every field in camelCase or snake_case (`systemInstruction` and
 * `system_instruction`; its REST examples use both). The body is put in camelCase once, before it is checked, so
 * the gateway reads one spelling, the errors name fields as Google's do, and Gemini gets what it would have read
 * anyway. What is the client's own (a function's arguments, a tool's result, a JSON schema's property names) is
 * left as written.
 */

type Json = Record<string, unknown>;

/** Values the client writes freely: their keys are data, not Gemini's fields. */
const freeForm = new Set([
  'args',
  'response',
  'parametersJsonSchema',
  'responseJsonSchema',
  'example',
  'default',
  'labels',
  'metadata',
]);

const isRecord = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** `system_instruction` → `systemInstruction`. */
function camelKey(key: string): string {
  return key.includes('_') ? key.replace(/_([a-z0-9])/g, (_, letter: string) => letter.toUpperCase()) : key;
}

/**
 * The body's field names in camelCase, renamed in place (the body is the request's own, freshly parsed): one pass,
 * which skips the free-form values and walks a schema's `properties` without renaming the properties.
 */
export function camelCaseFields(value: unknown): unknown {
  if (Array.isArray(value)) {
    for (const item of value) camelCaseFields(item);
    return value;
  }
  if (!isRecord(value)) return value;
  for (const key of Object.keys(value)) {
    const name = camelKey(key);
    if (name !== key) {
      // Both spellings sent: the camelCase one stands, as it is the one every SDK writes.
      if (!(name in value)) value[name] = value[key];
      delete value[key];
    }
    const field = value[name];
    if (freeForm.has(name)) continue;
    if (name === 'properties' && isRecord(field)) {
      for (const property of Object.values(field)) camelCaseFields(property);
      continue;
    }
    camelCaseFields(field);
  }
  return value;
}

/** A body in camelCase before its schema reads it. */
const camelCased = <T extends z.ZodType>(schema: T) => z.preprocess((body) => camelCaseFields(body), schema);

/**
 * Bytes as Google's JSON carries them: base64, in the standard or the URL-safe alphabet, padded or not (what
 * Google's parser takes). Anything else is refused as Google refuses it, before a chat vendor is sent a data URL
 * it cannot read (or, for text, the garbage a lenient decoder makes of it). One linear scan, even of 50 MB.
 */
const base64 = z
  .string()
  .refine((data) => /^[A-Za-z0-9+/_-]*={0,2}$/.test(data) && data.replace(/=+$/, '').length % 4 !== 1, {
    message: 'Base64 decoding failed: expected base64 (A-Z, a-z, 0-9 and + / or - _, = padding).',
  });
const blob = z.looseObject({ mimeType: z.string().min(1), data: base64 });
const fileData = z.looseObject({ mimeType: z.string().optional(), fileUri: z.string().min(1) });
const functionCall = z.looseObject({
  id: z.string().optional(),
  name: z.string().min(1),
  args: z.record(z.string(), z.unknown()).nullish(),
});
const functionResponse = z.looseObject({
  id: z.string().optional(),
  name: z.string().min(1),
  response: z.record(z.string(), z.unknown()).nullish(),
});

/** A part's data fields: Google's `data` oneof, of which a part holds one. */
const partData = [
  'text',
  'inlineData',
  'fileData',
  'functionCall',
  'functionResponse',
  'executableCode',
  'codeExecutionResult',
] as const;

/**
 * One part: text (a thought when `thought` is true), inline data, a file by URI, a function call or its response,
 * Gemini's code execution. A part carries one of them, as Google requires (a translation would read one and
 * silently lose the other); one with none (a bare `thoughtSignature`) is kept for Gemini.
 */
export const geminiPartSchema = z
  .looseObject({
    text: z.string().optional(),
    thought: z.boolean().optional(),
    thoughtSignature: z.string().optional(),
    inlineData: blob.optional(),
    fileData: fileData.optional(),
    functionCall: functionCall.optional(),
    functionResponse: functionResponse.optional(),
  })
  .superRefine((part, ctx) => {
    const held = partData.filter((field) => part[field] != null);
    if (held.length > 1) {
      ctx.addIssue({
        code: 'custom',
        message: `a part holds one of ${partData.join(', ')}; this one has ${held.join(' and ')}: send each in a part of its own.`,
      });
    }
  });

/** A turn: `user` (the default) or `model`; `function` is the older name of a user turn of function responses. */
export const geminiContentSchema = z.looseObject({
  role: z.enum(['user', 'model', 'function']).optional(),
  parts: boundedArray(geminiPartSchema, 0, 100_000).optional(),
});

export const geminiFunctionDeclarationSchema = z.looseObject({
  name: z.string().min(1).max(128),
  description: z.string().optional(),
  /** Gemini's OpenAPI subset (`type: "OBJECT"`…). */
  parameters: z.record(z.string(), z.unknown()).nullish(),
  /** A JSON Schema, as it is. */
  parametersJsonSchema: z.unknown().optional(),
});

/** Function declarations, or one of the tools Gemini runs itself (`googleSearch`, `codeExecution`, `urlContext`…). */
export const geminiToolSchema = z.looseObject({
  functionDeclarations: z.array(geminiFunctionDeclarationSchema).max(512).nullish(),
});

export const geminiToolConfigSchema = z.looseObject({
  functionCallingConfig: z
    .looseObject({
      mode: z.enum(['MODE_UNSPECIFIED', 'AUTO', 'ANY', 'NONE', 'VALIDATED']).optional(),
      allowedFunctionNames: z.array(z.string()).optional(),
    })
    .nullish(),
});

/** `thinkingLevel` as the SDKs write it (`HIGH`) or in lower case, as Google's REST examples do: kept as written. */
const thinkingLevel = z
  .string()
  .refine((level) => /^(?:minimal|low|medium|high|thinking_level_unspecified)$/i.test(level), {
    message: "expected one of 'MINIMAL', 'LOW', 'MEDIUM', 'HIGH'",
  });

export const geminiGenerationConfigSchema = z.looseObject({
  temperature: z.number().min(0).max(2).nullish(),
  topP: z.number().min(0).max(1).nullish(),
  topK: z.number().min(0).nullish(),
  candidateCount: z.number().int().min(1).max(8).nullish(),
  maxOutputTokens: z.number().int().min(1).nullish(),
  stopSequences: z.array(z.string()).max(5).nullish(),
  presencePenalty: z.number().nullish(),
  frequencyPenalty: z.number().nullish(),
  seed: z.number().int().nullish(),
  responseLogprobs: z.boolean().nullish(),
  logprobs: z.number().int().min(0).max(20).nullish(),
  responseMimeType: z.string().nullish(),
  responseSchema: z.record(z.string(), z.unknown()).nullish(),
  responseJsonSchema: z.unknown().optional(),
  thinkingConfig: z
    .looseObject({
      includeThoughts: z.boolean().nullish(),
      /** Tokens: 0 turns thinking off where the model allows, -1 lets the model decide. */
      thinkingBudget: z.number().int().min(-1).nullish(),
      thinkingLevel: thinkingLevel.nullish(),
    })
    .nullish(),
});

/** `systemInstruction`: a Content (its role ignored), or a string as some clients send it. */
const systemInstruction = z.union([z.string(), geminiContentSchema]);

const generateFields = {
  contents: boundedArray(geminiContentSchema, 1, 100_000),
  systemInstruction: systemInstruction.nullish(),
  tools: z.array(geminiToolSchema).max(128).nullish(),
  toolConfig: geminiToolConfigSchema.nullish(),
  generationConfig: geminiGenerationConfigSchema.nullish(),
  safetySettings: z.array(z.unknown()).nullish(),
  cachedContent: z.string().nullish(),
};

const generateRequest = z.looseObject(generateFields);

/** `:generateContent` and `:streamGenerateContent`. */
export const geminiGenerateRequestSchema = camelCased(generateRequest);

/**
 * `:countTokens`: the contents alone, or a whole `generateContentRequest` (its system instruction and tools
 * counted too), one of the two.
 */
export const geminiCountTokensRequestSchema = camelCased(
  z
    .looseObject({
      contents: boundedArray(geminiContentSchema, 1, 100_000).optional(),
      generateContentRequest: z.looseObject({ ...generateFields, model: z.string().optional() }).optional(),
    })
    .superRefine((body, ctx) => {
      if ((body.contents === undefined) === (body.generateContentRequest === undefined)) {
        ctx.addIssue({
          code: 'custom',
          path: ['contents'],
          message: 'send either contents or generateContentRequest (one of the two)',
        });
      }
    }),
);

/** One text to embed, with what Gemini's embedding models read beside it. */
const embedContentFields = {
  /** `models/{model}`: the path's model (Google requires each of a batch's requests to name it). */
  model: z.string().optional(),
  content: geminiContentSchema,
  taskType: z.string().nullish(),
  title: z.string().nullish(),
  outputDimensionality: z.number().int().min(1).nullish(),
};

/** `:embedContent`. */
export const geminiEmbedContentRequestSchema = camelCased(z.looseObject(embedContentFields));

/** `:batchEmbedContents`: embedContent requests, answered in order. */
export const geminiBatchEmbedContentsRequestSchema = camelCased(
  z.looseObject({
    requests: boundedArray(z.looseObject(embedContentFields), 1, 2048),
  }),
);

export type GeminiGenerateRequest = z.output<typeof geminiGenerateRequestSchema>;
export type GeminiCountTokensRequest = z.output<typeof geminiCountTokensRequestSchema>;
export type GeminiEmbedContentRequest = z.output<typeof geminiEmbedContentRequestSchema>;
export type GeminiBatchEmbedContentsRequest = z.output<typeof geminiBatchEmbedContentsRequestSchema>;
export type GeminiContent = z.output<typeof geminiContentSchema>;
export type GeminiPart = z.output<typeof geminiPartSchema>;
export type GeminiTool = z.output<typeof geminiToolSchema>;
export type GeminiFunctionDeclaration = z.output<typeof geminiFunctionDeclarationSchema>;
export type GeminiToolConfig = z.output<typeof geminiToolConfigSchema>;
export type GeminiGenerationConfig = z.output<typeof geminiGenerationConfigSchema>;
