import { readFileSync } from 'node:fs';
import { z } from 'zod';
import builtIn from './catalog.json' with { type: 'json' };

export const capabilitySchema = z.enum([
  'chat',
  'reasoning',
  'completion',
  'embedding',
  'image',
  'video',
  'transcription',
  'speech',
  'realtime',
  'moderation',
]);
export type Capability = z.infer<typeof capabilitySchema>;

export const routeSchema = z.object({
  /** Vendor name as configured by `<VENDOR>_API_KEY`/`<VENDOR>_BASE_URL` (lower case). */
  vendor: z.string().min(1),
  /** Model id the vendor knows; defaults to the catalog id. */
  model: z.string().min(1).optional(),
});
export type Route = z.infer<typeof routeSchema>;

export const pricingSchema = z.looseObject({
  /** USD per 1M tokens. */
  input_per_1m: z.number().min(0).optional(),
  output_per_1m: z.number().min(0).optional(),
  cached_input_per_1m: z.number().min(0).optional(),
  /** USD per image, keyed `<size>` or `<size>/<quality>` (e.g. `1024x1024/hd`). */
  per_image: z.record(z.string(), z.number().min(0)).optional(),
  /** USD per second of generated video. */
  per_second: z.number().min(0).optional(),
  /** USD per minute of transcribed audio. */
  per_minute: z.number().min(0).optional(),
  /** USD per 1M characters of speech input (`tts-1`, `tts-1-hd`). */
  per_1m_characters: z.number().min(0).optional(),
  /** USD per 1M audio tokens in and out (speech and realtime models), and cached audio input (realtime). */
  audio_input_per_1m: z.number().min(0).optional(),
  audio_output_per_1m: z.number().min(0).optional(),
  cached_audio_input_per_1m: z.number().min(0).optional(),
});

export const catalogModelSchema = z.looseObject({
  id: z.string().min(1),
  owned_by: z.string().min(1),
  capability: capabilitySchema,
  created: z.number().int(),
  context_window: z.number().int().min(0),
  max_output_tokens: z.number().int().min(0),
  input_modalities: z.array(z.enum(['text', 'image', 'audio'])).default(['text']),
  supports_tools: z.boolean().default(false),
  /**
   * The vendor searches the web for this model when asked through chat (`web_search_options`): OpenAI's search
   * models, Anthropic's web search tool, Gemini's grounding with Google Search. A Responses `web_search` tool or a
   * Messages `web_search_…` server tool reaches it; for other models it is declined.
   */
  web_search: z.boolean().optional(),
  dimensions: z.number().int().positive().optional(),
  supports_dimensions: z.boolean().optional(),
  /** Sizes a generation model accepts (`WIDTHxHEIGHT`, or `auto`). */
  image_sizes: z.array(z.string()).optional(),
  /** `quality` values an image model accepts. */
  image_qualities: z.array(z.string()).optional(),
  /** Largest `n` per image request (1 for dall-e-3). */
  max_images: z.number().int().positive().optional(),
  /** Whether `/v1/images/edits` serves this model. */
  supports_edits: z.boolean().optional(),
  /** Whether `/v1/images/variations` serves this model (dall-e-2, and the mock). */
  supports_variations: z.boolean().optional(),
  /** Whether `/v1/audio/translations` serves this transcription model (whisper-1 at OpenAI, and the mock). */
  supports_translation: z.boolean().optional(),
  /** What an edit upload must be: formats (by content, not name), size cap, squareness, how many images. */
  edit_input: z
    .object({
      formats: z.array(z.enum(['png', 'jpeg', 'webp'])).min(1),
      max_bytes: z.number().int().positive().optional(),
      square: z.boolean().optional(),
      max_images: z.number().int().positive().optional(),
    })
    .optional(),
  /** Whether the model takes `style`, `background`/`output_format` (GPT image), or `response_format`. */
  image_options: z.array(z.string()).optional(),
  /** `url` or `b64_json` when the client names none (OpenAI's default differs per family). */
  default_response_format: z.enum(['url', 'b64_json']).optional(),
  /** Video models: the size used when the request names none. */
  default_size: z.string().optional(),
  pricing: pricingSchema.optional(),
  /** `max_tokens` sent to vendors that require one when the client gave none (Anthropic). */
  default_max_tokens: z.number().int().positive().optional(),
  routes: z.array(routeSchema).min(1),
  /** Models tried, in order, when every channel of this one is cooling down. */
  fallbacks: z.array(z.string()).optional(),
});
export type CatalogModel = z.infer<typeof catalogModelSchema>;

const catalogFileSchema = z.object({ models: z.array(catalogModelSchema) });

export class Catalog {
  private readonly byId = new Map<string, CatalogModel>();

  constructor(models: Iterable<CatalogModel>) {
    for (const model of models) this.byId.set(model.id, model);
  }

  get(id: string): CatalogModel | undefined {
    return this.byId.get(id);
  }

  all(): CatalogModel[] {
    return [...this.byId.values()];
  }
}

/** The built-in catalog, with entries of `CATALOG_FILE` (if given) added or replacing built-in ones by id. */
export function loadCatalog(overrideFile?: string): Catalog {
  const models = catalogFileSchema.parse(builtIn).models;
  if (!overrideFile) return new Catalog(models);
  const extra = catalogFileSchema.parse(JSON.parse(readFileSync(overrideFile, 'utf8'))).models;
  const merged = new Map(models.map((m) => [m.id, m]));
  for (const model of extra) merged.set(model.id, model);
  return new Catalog(merged.values());
}
