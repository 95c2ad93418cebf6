import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCatalog, type CatalogModel } from '../../shared/catalog.js';
import { servedCapabilities } from '../../shared/endpoints.js';
import { loadConfig } from '../../shared/config.js';
import { ModelResolver, toOpenAIModel } from '../../api/requests/model-resolver.js';
import { resolveChannels } from '../../shared/vendors.js';
import { vendorDefinitions } from '../../shared/vendor-definitions.js';

const raw = JSON.parse(readFileSync(new URL('../../shared/catalog.json', import.meta.url), 'utf8')) as {
  models: { id: string }[];
};
const catalog = loadCatalog();
const models = catalog.all();

const owners = new Set(['openai', 'anthropic', 'google', 'deepseek', 'xai', 'black-forest-labs', 'mock']);
const vendors = new Set(['openai', 'anthropic', 'google', 'deepseek', 'xai', 'bfl', 'mock']);
const isChat = (m: CatalogModel) => m.capability === 'chat' || m.capability === 'reasoning';
const of = (owner: string) => models.filter((m) => m.owned_by === owner);
const sizeOf = (key: string) => key.split('/')[0]!;

describe('catalog file', () => {
  it('parses with loadCatalog and has at least 200 models', () => {
    assert.ok(models.length >= 200, `${models.length} models`);
    assert.equal(models.length, raw.models.length, 'no entry is lost to a duplicate id');
  });

  it('has unique ids', () => {
    const seen = new Set<string>();
    for (const { id } of raw.models) {
      assert.ok(!seen.has(id), `duplicate id ${id}`);
      seen.add(id);
    }
  });

  it('has the models the gateway is expected to serve', () => {
    const expected = [
      // the starting catalog
      'gpt-4o',
      'gpt-4o-2024-08-06',
      'gpt-4o-2024-11-20',
      'gpt-4o-mini',
      'gpt-4o-mini-2024-07-18',
      'gpt-4.1',
      'gpt-4.1-2025-04-14',
      'gpt-4.1-mini',
      'gpt-4.1-nano',
      'gpt-4-turbo',
      'gpt-3.5-turbo',
      'o1',
      'o3',
      'o3-mini',
      'o4-mini',
      'gpt-3.5-turbo-instruct',
      'davinci-002',
      'babbage-002',
      'text-embedding-3-small',
      'text-embedding-3-large',
      'text-embedding-ada-002',
      'deepseek-chat',
      'deepseek-reasoner',
      'grok-4',
      'grok-3',
      'grok-3-mini',
      'grok-2-vision-1212',
      'mock-chat',
      'mock-instruct',
      'mock-embedding',
      // OpenAI
      'gpt-4o-2024-05-13',
      'chatgpt-4o-latest',
      'gpt-4.1-mini-2025-04-14',
      'gpt-4.1-nano-2025-04-14',
      'gpt-4.5-preview',
      'gpt-4-turbo-2024-04-09',
      'gpt-4',
      'gpt-4-0613',
      'gpt-3.5-turbo-0125',
      'gpt-3.5-turbo-1106',
      'gpt-5',
      'gpt-5-2025-08-07',
      'gpt-5-mini',
      'gpt-5-mini-2025-08-07',
      'gpt-5-nano',
      'gpt-5-nano-2025-08-07',
      'gpt-5-chat-latest',
      'o1-2024-12-17',
      'o1-mini',
      'o3-2025-04-16',
      'o3-mini-2025-01-31',
      'o4-mini-2025-04-16',
      'gpt-4o-audio-preview',
      'gpt-4o-search-preview',
      'gpt-4o-mini-search-preview',
      'dall-e-2',
      'dall-e-3',
      'gpt-image-1',
      'gpt-image-1-mini',
      'whisper-1',
      'gpt-4o-transcribe',
      'gpt-4o-mini-transcribe',
      'sora-2',
      'sora-2-pro',
      'sora-2-portrait',
      'sora-2-landscape',
      'sora-2-pro-portrait',
      'sora-2-pro-landscape',
      // Anthropic
      'claude-opus-4-1',
      'claude-opus-4-1-20250805',
      'claude-opus-4-0',
      'claude-opus-4-20250514',
      'claude-sonnet-4-5',
      'claude-sonnet-4-5-20250929',
      'claude-sonnet-4-0',
      'claude-sonnet-4-20250514',
      'claude-haiku-4-5',
      'claude-haiku-4-5-20251001',
      'claude-3-7-sonnet-latest',
      'claude-3-7-sonnet-20250219',
      'claude-3-5-sonnet-latest',
      'claude-3-5-sonnet-20241022',
      'claude-3-5-sonnet-20240620',
      'claude-3-5-haiku-latest',
      'claude-3-5-haiku-20241022',
      'claude-3-opus-latest',
      'claude-3-opus-20240229',
      'claude-3-haiku-20240307',
      'claude-3-sonnet-20240229',
      // Google
      'gemini-3-pro-preview',
      'gemini-2.5-pro',
      'gemini-2.5-flash',
      'gemini-2.5-flash-lite',
      'gemini-2.5-flash-preview-05-20',
      'gemini-2.5-flash-lite-preview-06-17',
      'gemini-2.0-flash',
      'gemini-2.0-flash-001',
      'gemini-2.0-flash-lite',
      'gemini-2.0-flash-lite-001',
      'gemini-1.5-pro',
      'gemini-1.5-pro-002',
      'gemini-1.5-flash',
      'gemini-1.5-flash-002',
      'gemini-1.5-flash-8b',
      'gemini-embedding-001',
      'text-embedding-004',
      'gemini-2.5-flash-image',
      'gemini-2.5-flash-image-preview',
      'gemini-2.0-flash-preview-image-generation',
      // xAI
      'grok-4-0709',
      'grok-4-fast-reasoning',
      'grok-4-fast-non-reasoning',
      'grok-code-fast-1',
      'grok-3-fast',
      'grok-3-mini-fast',
      'grok-2-1212',
      'grok-2-image-1212',
      // Black Forest Labs
      'flux-pro-1.1',
      'flux-pro-1.1-ultra',
      'flux-pro',
      'flux-dev',
      'flux-kontext-pro',
      'flux-kontext-max',
      'flux-pro-1.0-fill',
      // 2026 releases
      'gpt-5.2',
      'gpt-5.2-2025-12-11',
      'gpt-5.2-chat-latest',
      'gpt-5.3-chat-latest',
      'gpt-5.4',
      'gpt-5.4-2026-03-05',
      'gpt-5.4-mini',
      'gpt-5.4-mini-2026-03-17',
      'gpt-5.4-nano',
      'gpt-5.4-nano-2026-03-17',
      'gpt-5.5',
      'gpt-5.5-2026-04-23',
      'claude-opus-4-6',
      'claude-sonnet-4-6',
      'claude-opus-4-7',
      'claude-opus-4-8',
      'claude-sonnet-5',
      'claude-opus-5',
      'gemini-3.1-pro-preview',
      'gemini-3.5-flash',
      'gemini-3.1-flash-lite',
      'deepseek-v4-flash',
      'deepseek-v4-pro',
      'grok-4.20-0309-reasoning',
      'grok-4.20-0309-non-reasoning',
      'grok-4.20',
      'grok-4.3',
    ];
    for (const id of expected) assert.ok(catalog.get(id), id);
  });

  it('has lower-case owners from the known set and routes to known vendors', () => {
    for (const m of models) {
      assert.ok(owners.has(m.owned_by), `${m.id}: owner ${m.owned_by}`);
      assert.ok(m.routes.length > 0, m.id);
      for (const route of m.routes) {
        assert.ok(vendors.has(route.vendor), `${m.id}: vendor ${route.vendor}`);
        if (route.model !== undefined) assert.ok(route.model.trim().length > 0, m.id);
      }
    }
    for (const m of of('black-forest-labs'))
      assert.deepEqual(
        m.routes.map((r) => r.vendor),
        ['bfl'],
        m.id,
      );
    for (const m of of('google'))
      assert.deepEqual(
        m.routes.map((r) => r.vendor),
        ['google'],
        m.id,
      );
  });

  it('has plausible release dates', () => {
    const from = Date.UTC(2020, 0, 1) / 1000;
    const to = Date.UTC(2027, 0, 1) / 1000;
    for (const m of models) assert.ok(m.created >= from && m.created < to, `${m.id}: created ${m.created}`);
  });
});

describe('catalog limits', () => {
  it('never promises more output than the context holds', () => {
    for (const m of models)
      assert.ok(m.max_output_tokens <= m.context_window, `${m.id}: ${m.max_output_tokens} > ${m.context_window}`);
  });

  it('gives OpenAI chat models their real context windows', () => {
    const original8k = new Set(['gpt-4', 'gpt-4-0613']);
    for (const m of of('openai').filter(isChat)) {
      if (original8k.has(m.id)) assert.equal(m.context_window, 8192, m.id);
      else assert.ok(m.context_window >= 16000, `${m.id}: ${m.context_window}`);
      if (m.id.startsWith('gpt-4.1')) assert.equal(m.context_window, 1047576, m.id);
      // GPT-5.4 and GPT-5.5 took the window to 1.05M; the rest of the GPT-5 family, minis and nanos included, has 400K.
      if (/^gpt-5\.[45](-\d{4}-\d\d-\d\d)?$/.test(m.id)) assert.equal(m.context_window, 1050000, m.id);
      else if (/^gpt-5(\.\d+)?(-mini|-nano)?(-\d{4}-\d\d-\d\d)?$/.test(m.id))
        assert.equal(m.context_window, 400000, m.id);
      if (/^o\d(-pro)?(-\d{4}-\d\d-\d\d)?$/.test(m.id) || /^o[34]-mini/.test(m.id))
        assert.equal(m.context_window, 200000, m.id);
    }
  });

  it(
    'gives Anthropic models 200K context (1M from the 4.6 generation on) and a default max_tokens within their ' +
      'output limit',
    () => {
      const anthropic = of('anthropic');
      assert.ok(anthropic.length >= 20);
      for (const m of anthropic) {
        // Opus/Sonnet 4.6 and later take 1M tokens without a beta header; earlier models 200K.
        const oneMillion = /^claude-(opus|sonnet)-(4-[6-9]|5)/.test(m.id);
        assert.equal(m.context_window, oneMillion ? 1000000 : 200000, m.id);
        assert.ok(m.default_max_tokens, `${m.id} needs default_max_tokens`);
        assert.ok(m.default_max_tokens! <= m.max_output_tokens, m.id);
        assert.deepEqual(m.input_modalities, ['text', 'image'], m.id);
        assert.equal(m.supports_tools, true, m.id);
      }
    },
  );

  it('gives Gemini chat models at least 1M context', () => {
    const gemini = of('google').filter((m) => isChat(m) && m.id.startsWith('gemini-'));
    assert.ok(gemini.length >= 15);
    for (const m of gemini) assert.ok(m.context_window >= 1_000_000, `${m.id}: ${m.context_window}`);
  });

  it('gives xAI chat models at least 128K context (grok-2 vision excepted)', () => {
    for (const m of of('xai').filter(isChat)) {
      if (m.id.startsWith('grok-2-vision')) continue;
      assert.ok(m.context_window >= 128000, `${m.id}: ${m.context_window}`);
    }
  });

  it('gives DeepSeek V3-era models 64K-128K context and V4 models 1M', () => {
    for (const m of of('deepseek')) {
      if (m.id.startsWith('deepseek-v4-')) assert.equal(m.context_window, 1000000, m.id);
      else assert.ok(m.context_window >= 64000 && m.context_window <= 131072, `${m.id}: ${m.context_window}`);
    }
  });
});

describe('catalog pricing and capability fields', () => {
  it('prices tokens for chat, reasoning and completion models', () => {
    for (const m of models.filter((m) => isChat(m) || m.capability === 'completion')) {
      assert.equal(typeof m.pricing?.input_per_1m, 'number', m.id);
      assert.equal(typeof m.pricing?.output_per_1m, 'number', m.id);
      if (m.pricing?.cached_input_per_1m !== undefined)
        assert.ok(m.pricing.cached_input_per_1m <= m.pricing.input_per_1m!, m.id);
    }
  });

  it('gives image models sizes and a price for each size', () => {
    const images = models.filter((m) => m.capability === 'image');
    assert.ok(images.length >= 20);
    for (const m of images) {
      assert.ok(m.image_sizes && m.image_sizes.length > 0, `${m.id} needs image_sizes`);
      for (const size of m.image_sizes!) assert.match(size, /^(\d+x\d+|auto)$/, m.id);
      const perImage = m.pricing?.per_image;
      assert.ok(perImage && Object.keys(perImage).length > 0, `${m.id} needs per_image`);
      for (const key of Object.keys(perImage!))
        assert.ok(m.image_sizes!.includes(sizeOf(key)), `${m.id}: price for unlisted size ${key}`);
      for (const size of m.image_sizes!) {
        if (size === 'auto' && m.image_sizes!.length > 1) continue;
        assert.ok(
          Object.keys(perImage!).some((key) => sizeOf(key) === size),
          `${m.id}: no price for ${size}`,
        );
      }
    }
  });

  it('prices video by the second and transcription by the minute', () => {
    const videos = models.filter((m) => m.capability === 'video');
    assert.ok(videos.length >= 6);
    for (const m of videos) {
      assert.equal(typeof m.pricing?.per_second, 'number', m.id);
      const defaultSize = (m as { default_size?: unknown }).default_size;
      if (defaultSize !== undefined)
        assert.ok(m.image_sizes?.includes(String(defaultSize)), `${m.id}: default_size ${defaultSize}`);
    }
    for (const m of models.filter((m) => m.capability === 'transcription'))
      assert.equal(typeof m.pricing?.per_minute, 'number', m.id);
  });

  it('routes the Sora orientation ids to the upstream Sora models with a default size', () => {
    const expected: Record<string, [string, string]> = {
      'sora-2-portrait': ['sora-2', '720x1280'],
      'sora-2-landscape': ['sora-2', '1280x720'],
      'sora-2-pro-portrait': ['sora-2-pro', '720x1280'],
      'sora-2-pro-landscape': ['sora-2-pro', '1280x720'],
    };
    for (const [id, [upstream, size]] of Object.entries(expected)) {
      const m = catalog.get(id)!;
      assert.deepEqual(m.routes, [{ vendor: 'openai', model: upstream }], id);
      assert.equal((m as { default_size?: unknown }).default_size, size, id);
    }
  });

  it('gives embedding models their dimensions', () => {
    for (const m of models.filter((m) => m.capability === 'embedding')) {
      assert.ok(m.dimensions && m.dimensions > 0, `${m.id} needs dimensions`);
      assert.equal(typeof m.supports_dimensions, 'boolean', m.id);
    }
    assert.equal(catalog.get('text-embedding-3-large')!.dimensions, 3072);
    assert.equal(catalog.get('text-embedding-ada-002')!.supports_dimensions, false);
    assert.equal(catalog.get('gemini-embedding-001')!.dimensions, 3072);
    assert.equal(catalog.get('text-embedding-004')!.dimensions, 768);
  });

  it('falls back only to other catalog models of the same capability (and, for media, the same sizes)', () => {
    for (const m of models) {
      for (const id of m.fallbacks ?? []) {
        const target = catalog.get(id);
        assert.ok(target, `${m.id}: fallback ${id} is not in the catalog`);
        assert.notEqual(id, m.id, `${m.id} falls back to itself`);
        assert.equal(target!.capability, m.capability, `${m.id} -> ${id}`);
        for (const size of m.image_sizes ?? [])
          assert.ok(target!.image_sizes?.includes(size), `${m.id} -> ${id}: ${size}`);
      }
    }
  });
});

describe('models listed with the seed vendors configured', () => {
  // Exactly the six seed vendors' keys, nothing else from the environment: what `/v1/models` serves then.
  const env = {
    OPENAI_API_KEY: 'sk-test',
    ANTHROPIC_API_KEY: 'sk-ant-test',
    GEMINI_API_KEY: 'gemini-test',
    DEEPSEEK_API_KEY: 'sk-deepseek-test',
    XAI_API_KEY: 'xai-test',
    BFL_API_KEY: 'bfl-test',
  };
  // The same calls as `createApiServer` in api/server.ts and the `/v1/models` route.
  const config = loadConfig(env);
  const configured = new Set(resolveChannels(config).keys());
  const resolver = new ModelResolver(loadCatalog(config.catalogFile), configured);
  const served = resolver.list();
  const listed = served.map(toOpenAIModel);
  const withContext = new Set<string>(['chat', 'reasoning', 'completion', 'embedding']);

  const priced = (m: CatalogModel): boolean => {
    const p = m.pricing;
    switch (m.capability) {
      case 'chat':
      case 'reasoning':
      case 'completion':
        return typeof p?.input_per_1m === 'number' && typeof p.output_per_1m === 'number';
      case 'embedding':
        return typeof p?.input_per_1m === 'number';
      case 'image':
        return Object.keys(p?.per_image ?? {}).length > 0;
      case 'video':
        return typeof p?.per_second === 'number';
      case 'transcription':
        return typeof p?.per_minute === 'number';
      case 'speech':
        return (
          typeof p?.per_1m_characters === 'number' ||
          (typeof p?.input_per_1m === 'number' && typeof p.audio_output_per_1m === 'number')
        );
      case 'realtime':
        return (
          typeof p?.input_per_1m === 'number' &&
          typeof p.output_per_1m === 'number' &&
          typeof p.audio_input_per_1m === 'number' &&
          typeof p.audio_output_per_1m === 'number'
        );
      case 'moderation':
        // Free at OpenAI: priced 0 per 1M input tokens, still counted and logged.
        return p?.input_per_1m === 0;
    }
  };

  it('configures exactly the six seed vendors (the mock stays out)', () => {
    const seeded = vendorDefinitions.filter((v) => v.protocol !== 'mock').map((v) => v.name);
    assert.deepEqual([...configured].sort(), [...seeded].sort());
    assert.equal(configured.size, 6);
    assert.ok(!served.some((m) => m.owned_by === 'mock'), 'mock models are not listed');
  });

  it('lists more than 200 models, each id once', () => {
    assert.ok(listed.length > 200, `${listed.length} models listed`);
    const ids = listed.map((m) => m.id);
    assert.equal(new Set(ids).size, ids.length, 'duplicate ids in /v1/models');
    for (const m of listed) assert.equal(m.object, 'model', m.id);
  });

  it(
    'gives every listed model a price, a context window where its capability has one, and a route to a configured ' +
      'vendor',
    () => {
      for (const m of served) {
        assert.ok(priced(m), `${m.id} (${m.capability}) has no price`);
        if (withContext.has(m.capability)) assert.ok(m.context_window > 0, `${m.id} has no context window`);
        if (withContext.has(m.capability) && m.capability !== 'embedding')
          assert.ok(m.max_output_tokens > 0, `${m.id} has no output limit`);
        assert.ok(
          m.routes.some((r) => configured.has(r.vendor)),
          `${m.id} has no route to a configured vendor`,
        );
        assert.ok(
          servedCapabilities.has(m.capability) || m.capability === 'realtime',
          `${m.id}: no endpoint (nor the Realtime API) serves ${m.capability}`,
        );
        assert.equal(resolver.get(m.id), m, `${m.id} resolves`);
      }
    },
  );

  it('includes the 2026 releases of each seed vendor', () => {
    const ids = new Set(listed.map((m) => m.id));
    for (const id of [
      'gpt-5.5',
      'gpt-5.4-mini',
      'claude-opus-5',
      'claude-sonnet-4-6',
      'gemini-3.5-flash',
      'deepseek-v4-pro',
      'grok-4.3',
    ]) {
      assert.ok(ids.has(id), id);
    }
  });
});

describe('CATALOG_FILE override', () => {
  const dir = mkdtempSync(join(tmpdir(), 'catalog-test-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('replaces built-in entries by id and adds new ones', () => {
    const file = join(dir, 'catalog.json');
    const changed = {
      ...catalog.get('gpt-4o-mini')!,
      context_window: 64000,
      routes: [{ vendor: 'azure', model: 'my-4o-mini-deployment' }],
    };
    const added = {
      id: 'my-local-llama',
      owned_by: 'meta',
      capability: 'chat',
      created: 1735689600,
      context_window: 32768,
      max_output_tokens: 4096,
      routes: [{ vendor: 'ollama', model: 'llama3.1:8b' }],
    };
    writeFileSync(file, JSON.stringify({ models: [changed, added] }));
    const merged = loadCatalog(file);
    assert.equal(merged.all().length, models.length + 1);
    assert.equal(merged.get('gpt-4o-mini')!.context_window, 64000);
    assert.deepEqual(merged.get('gpt-4o-mini')!.routes, [{ vendor: 'azure', model: 'my-4o-mini-deployment' }]);
    const local = merged.get('my-local-llama')!;
    assert.equal(local.capability, 'chat');
    assert.deepEqual(local.input_modalities, ['text'], 'schema defaults apply to override entries');
    assert.equal(local.supports_tools, false);
    assert.equal(merged.get('gpt-4o')!.context_window, 128000, 'untouched built-ins stay');
    assert.equal(loadCatalog().get('gpt-4o-mini')!.context_window, 128000, 'the built-in catalog is not mutated');
  });

  it('rejects an override file that does not match the schema', () => {
    const file = join(dir, 'bad.json');
    writeFileSync(
      file,
      JSON.stringify({
        models: [
          {
            id: 'x',
            owned_by: 'y',
            capability: 'telepathy',
            created: 0,
            context_window: 1,
            max_output_tokens: 1,
            routes: [],
          },
        ],
      }),
    );
    assert.throws(() => loadCatalog(file));
  });
});
