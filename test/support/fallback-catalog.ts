import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Writes `value` as JSON to a file of its own in a fresh temporary folder; returns its path. */
export function writeJsonFile(name: string, value: unknown): string {
  const path = join(mkdtempSync(join(tmpdir(), 'sy-config-')), name);
  writeFileSync(path, JSON.stringify(value));
  return path;
}

/**
 * A catalog (`CATALOG_FILE`) with a model of its own, `house-model`, routed to OpenAI's `gpt-4o-mini`, whose
 * catalog fallback `spare-model` is served by another vendor, `spare` (an OpenAI-protocol channel of CHANNELS_FILE).
 */
export function fallbackCatalogFile(): string {
  return writeJsonFile('catalog.json', {
    models: [
      {
        id: 'house-model',
        owned_by: 'openai',
        capability: 'chat',
        created: 0,
        context_window: 128000,
        max_output_tokens: 4096,
        input_modalities: ['text'],
        supports_tools: true,
        routes: [{ vendor: 'openai', model: 'gpt-4o-mini' }],
        fallbacks: ['spare-model'],
      },
      {
        id: 'spare-model',
        owned_by: 'spare',
        capability: 'chat',
        created: 0,
        context_window: 128000,
        max_output_tokens: 4096,
        input_modalities: ['text'],
        supports_tools: true,
        routes: [{ vendor: 'spare', model: 'spare-upstream' }],
      },
    ],
  });
}
