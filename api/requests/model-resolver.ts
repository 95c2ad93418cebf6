import type { Catalog, CatalogModel } from '../../shared/catalog.js';
import { endpointNames, endpoints, servedCapabilities, type Endpoint } from '../../shared/endpoints.js';
import { GatewayError, modelNotFound } from '../../shared/errors.js';

/** Catalog models that at least one configured vendor can serve. */
export class ModelResolver {
  private readonly available: CatalogModel[];
  private readonly byId: Map<string, CatalogModel>;

  /**
   * `aliases` (MODEL_ALIASES): a name a client may send → the catalog id it stands for; one naming no catalog model
   * fails the start.
   */
  constructor(
    catalog: Catalog,
    configuredVendors: ReadonlySet<string>,
    aliases: ReadonlyMap<string, string> = new Map(),
  ) {
    // Listed: what a client can actually call here (a configured vendor, and an endpoint for its capability, or the
    // Realtime API's WebSocket for a realtime model).
    this.available = catalog
      .all()
      .filter(
        (m) =>
          (servedCapabilities.has(m.capability) || m.capability === 'realtime') &&
          m.routes.some((r) => configuredVendors.has(r.vendor)),
      );
    this.byId = new Map(this.available.map((m) => [m.id, m]));
    for (const [alias, id] of aliases) {
      if (!catalog.get(id))
        throw new Error(`Invalid configuration: MODEL_ALIASES maps "${alias}" to "${id}", which is no catalog model`);
      const model = this.byId.get(id);
      // An alias of a model no configured vendor serves resolves to nothing, as the model itself does; one named
      // like a catalog model stands in for it (the operator maps a name its clients send to what it serves).
      if (model) this.byId.set(alias, model);
    }
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
    if (!(endpoints[endpoint].capabilities as readonly string[]).includes(model.capability)) {
      // An endpoint of the same dialect: Google's rows answer a Gemini client, the others everyone else.
      const google = endpoints[endpoint].pipeline === 'gemini';
      const suggestion = endpointNames.find(
        (e) =>
          (endpoints[e].pipeline === 'gemini') === google &&
          (endpoints[e].capabilities as readonly string[]).includes(model.capability),
      );
      const instead =
        model.capability === 'realtime' && !google
          ? 'the Realtime API (a WebSocket to /v1/realtime)'
          : suggestion
            ? endpoints[suggestion].path
            : undefined;
      // Moderation is served by a few models (OpenAI's and the mock): they are named, so a client knows which to send.
      const moderators =
        endpoint === 'moderations' ? this.available.filter((m) => m.capability === 'moderation').map((m) => m.id) : [];
      throw new GatewayError(
        400,
        `The model \`${id}\` is a ${model.capability} model and is not supported by ${endpoints[endpoint].path}` +
          (instead ? `; use ${instead}.` : '.') +
          (moderators.length > 0 ? ` ${endpoints[endpoint].path} serves ${moderators.join(', ')}.` : ''),
        { param: 'model', code: 'model_not_supported' },
      );
    }
    return model;
  }
}

export function toOpenAIModel(model: CatalogModel) {
  return { id: model.id, object: 'model' as const, created: model.created, owned_by: model.owned_by };
}
