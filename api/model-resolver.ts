import { endpointCapabilities, type Catalog, type CatalogModel, type Endpoint } from '../shared/catalog.js';
import { GatewayError, modelNotFound } from '../shared/errors.js';

const endpointPaths: Record<Endpoint, string> = {
  'chat.completions': '/v1/chat/completions',
  completions: '/v1/completions',
  embeddings: '/v1/embeddings',
  'images.generations': '/v1/images/generations',
  'images.edits': '/v1/images/edits',
  'audio.transcriptions': '/v1/audio/transcriptions',
  videos: '/v1/videos',
};

/** Catalog models that at least one configured vendor can serve. */
export class ModelResolver {
  private readonly available: CatalogModel[];
  private readonly byId: Map<string, CatalogModel>;

  constructor(catalog: Catalog, configuredVendors: ReadonlySet<string>) {
    // Listed: what a client can actually call here (a configured vendor, and an endpoint for its capability).
    const served = new Set<string>(Object.values(endpointCapabilities).flat());
    this.available = catalog.all().filter((m) => served.has(m.capability) && m.routes.some((r) => configuredVendors.has(r.vendor)));
    this.byId = new Map(this.available.map((m) => [m.id, m]));
  }

  list(): CatalogModel[] {
    return this.available;
  }

  get(id: string): CatalogModel | undefined {
    return this.byId.get(id);
  }

  /** The model for a request to `endpoint`: 404 when unknown, 400 when it serves another endpoint. */
  resolve(id: string, endpoint: Endpoint): CatalogModel {
    const model = this.byId.get(id);
    if (!model) throw modelNotFound(id);
    if (!(endpointCapabilities[endpoint] as readonly string[]).includes(model.capability)) {
      const suggestion = (Object.keys(endpointCapabilities) as Endpoint[]).find((e) =>
        (endpointCapabilities[e] as readonly string[]).includes(model.capability),
      );
      throw new GatewayError(
        400,
        `The model \`${id}\` is a ${model.capability} model and is not supported by ${endpointPaths[endpoint]}` +
          (suggestion ? `; use ${endpointPaths[suggestion]}.` : '.'),
        { param: 'model', code: 'model_not_supported' },
      );
    }
    return model;
  }
}

export function toOpenAIModel(model: CatalogModel) {
  return { id: model.id, object: 'model' as const, created: model.created, owned_by: model.owned_by };
}
