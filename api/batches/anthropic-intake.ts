import { z } from 'zod';
import {
  cancelBatch,
  createBatch,
  fillBatchWindow,
  newBatchId,
  storeBatchEntries,
} from '../../shared/batches/index.js';
import type { EndpointRequest } from '../../shared/endpoints.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import { worstCase } from '../../shared/money/charge.js';
import { laneOf } from '../../shared/scheduling/index.js';
import { messagesRequestSchema } from '../../shared/schemas/messages.js';
import { checkJsonShape, maxJsonDepth, parseBody, yieldToLoop } from '../http/request-body.js';
import { handlers } from '../requests/endpoint-handlers.js';
import type { KeyedContext } from '../requests/request-context.js';
import { checkModelAllowed, type EndpointRouteDeps } from '../requests/endpoint-route.js';
import { batchJobEntry, batchWindow, intakeLeaseMs, type BatchOwner, type Checked } from './job-entry.js';
import { splitBatchBody } from './split-body.js';

/**
 * A Message Batch comes in: its body split into its requests without parsing it whole (split-body.ts), each request
 * checked as `POST /v1/messages` checks one (schema, model, the key's models, the model's context and modalities),
 * and the batch refused whole, naming the request, at the first that fails. Then its record, each request stored as
 * the job it will be (job-entry.ts), and its first window queued (shared/batches/queueing.ts): jobs in the flex band
 * of their model's lane, counted apart from the waiting room (`batch`), fair between accounts like every other job.
 * Nothing of it stays in the api once the answer has gone.
 */

const envelopeSchema = z.strictObject({ requests: z.array(z.unknown()) });
const requestSchema = z.strictObject({
  custom_id: z
    .string()
    .regex(/^[a-zA-Z0-9_-]{1,64}$/, 'custom_id must be 1 to 64 letters, digits, underscores or hyphens'),
  params: z.record(z.string(), z.unknown()),
});

/** Requests checked per turn of the loop (each about 0.3 ms: its parse, schema, translation and token count). */
const checkedPerTurn = 8;
/** Requests stored per round trip. */
const storedPerRound = 200;

/** A request's problem as the batch's: its index and its param in front (`requests.3.params.max_tokens`). */
function inRequest(index: number, error: unknown, where = 'params'): never {
  if (!(error instanceof GatewayError)) throw error;
  const param = `requests.${index}.${where}${error.param ? `.${error.param}` : ''}`;
  throw new GatewayError(error.status, `requests.${index}: ${error.message}`, {
    param,
    code: error.code,
    type: error.type,
  });
}

async function checkRequests(ctx: KeyedContext, deps: EndpointRouteDeps, items: string[]): Promise<Checked[]> {
  const { access, keyId } = ctx.state;
  const checked: Checked[] = [];
  const seen = new Set<string>();
  for (let index = 0; index < items.length; index++) {
    if (index % checkedPerTurn === 0 && index > 0) await yieldToLoop();
    const text = items[index]!;
    items[index] = '';
    let request: z.output<typeof requestSchema>;
    try {
      checkJsonShape(text, maxJsonDepth);
      request = parseBody(requestSchema, JSON.parse(text));
    } catch (error) {
      if (error instanceof SyntaxError)
        throw invalidRequest(
          `requests.${index}: we could not parse it (${error.message}).`,
          `requests.${index}`,
          'invalid_json',
        );
      inRequest(index, error, '');
    }
    if (seen.has(request.custom_id))
      throw invalidRequest(
        `requests.${index}: the custom_id \`${request.custom_id}\` is used twice; each request of a batch needs ` +
          `its own.`,
        `requests.${index}.custom_id`,
      );
    seen.add(request.custom_id);
    try {
      const fields = parseBody(messagesRequestSchema, request.params);
      if (fields.stream === true)
        throw invalidRequest('A batch request cannot stream: its result is read from the batch.', 'stream');
      const model = deps.models.resolve(fields.model, 'messages');
      checkModelAllowed(access, model.id);
      const accepted = await handlers.messages.accept({
        fields,
        model,
        // A batch's requests run in the flex band.
        tier: 'flex',
        files: [],
        scope: { redis: deps.redis, blobs: deps.blobs, keyId, config: deps.config, models: deps.models, access },
        header: (name) => ctx.get(name),
      });
      const request_ = { endpoint: 'messages', payload: accepted.payload } as EndpointRequest;
      const estimate = worstCase(
        deps.config,
        deps.prices,
        request_,
        model.id,
        model.routes[0]?.vendor,
        accepted.promptTokens ?? 0,
      );
      checked.push({
        customId: request.custom_id,
        modelId: model.id,
        lane: laneOf(deps.queues.laneNames, model),
        accepted: { payload: accepted.payload, serviceTier: 'flex' },
        micros: estimate.micros,
        tokens: estimate.tokens,
      });
    } catch (error) {
      inRequest(index, error);
    }
  }
  return checked;
}

/** `POST /v1/messages/batches`: the batch checked whole, recorded, and its requests queued; answers its record. */
export async function intakeBatch(
  ctx: KeyedContext,
  deps: EndpointRouteDeps,
  text: string,
  openBatches: () => Promise<number>,
): Promise<{ id: string; created: number; expires: number; total: number }> {
  const { access, keyId, log } = ctx.state;
  const limits = deps.config.batches;
  const { envelope, items } = await splitBatchBody(text, limits.maxRequests);
  let parsedEnvelope: unknown;
  try {
    // Small once the requests are out; a body without a `requests` array is refused before it is parsed whole.
    if (envelope.length > 64 * 1024)
      throw invalidRequest('The body must be {"requests": [...]}.', 'requests', 'missing_required_parameter');
    parsedEnvelope = JSON.parse(envelope);
  } catch (error) {
    if (error instanceof SyntaxError)
      throw invalidRequest(
        `We could not parse the JSON body of your request (${error.message}). Send valid JSON.`,
        null,
        'invalid_json',
      );
    throw error;
  }
  parseBody(envelopeSchema, parsedEnvelope);
  if (items.length === 0) throw invalidRequest('A batch needs at least one request.', 'requests');
  // Before the requests are checked (the costly part): a batch the account may not open now is refused at once.
  if ((await openBatches()) >= limits.maxOpen) {
    throw new GatewayError(
      429,
      `This account has ${limits.maxOpen} batches in progress, the most it may have (BATCH_MAX_OPEN). Retry when ` +
        `one has ended.`,
      { code: 'rate_limit_exceeded', type: 'requests' },
    );
  }
  const checked = await checkRequests(ctx, deps, items);
  const total = checked.length;
  // Which keys of the account see the batch (a key limited to models sees it only if it may use them all).
  const models = [...new Set(checked.map((request) => request.modelId))];

  const id = newBatchId();
  const created = Date.now();
  const expires = created + limits.deadlineMs;
  const owner: BatchOwner = {
    accountId: access.accountId,
    keyId,
    weight: access.weight ?? 1,
    ...(access.limitMicros !== undefined ? { limitMicros: access.limitMicros } : {}),
    ...(access.budgets ? { budgets: access.budgets } : {}),
  };
  const keptMs = expires - created + 60_000;
  const window = batchWindow(
    deps.config,
    checked.map((request) => request.lane),
  );
  await createBatch(
    deps.redis,
    { id, accountId: access.accountId, keyId, created, expires, total, models },
    limits.resultsKeepMs,
    { window, intakeMs: intakeLeaseMs },
  );
  const missed: number[] = [];
  try {
    // Taken out round by round, so what the api holds of the batch shrinks as it is stored.
    for (let from = 0; checked.length > 0; from += storedPerRound) {
      await yieldToLoop();
      const entries: string[] = [];
      const payloads: Array<[string, string]> = [];
      checked.splice(0, storedPerRound).forEach((request, offset) => {
        const { entry, payload } = batchJobEntry(deps, { id, expires }, owner, 'messages', from + offset, request);
        entries.push(entry);
        if (payload) payloads.push(payload);
      });
      // A payload kept apart is written before its job can be taken.
      await Promise.all(payloads.map(([key, value]) => deps.redis.set(key, value, 'PX', keptMs)));
      await storeBatchEntries(deps.redis, id, from, entries, keptMs, intakeLeaseMs);
      // The window filled as soon as its requests are stored (the vendor starts on the batch while the rest is stored):
      // at once after the first round, then whatever room the answers meanwhile could not fill with requests not yet
      // stored.
      missed.push(...(await fillBatchWindow(deps.redis, deps.queues, id, limits.resultsKeepMs)));
    }
    if (missed.length > 0) throw new Error(`requests ${missed.join(', ')} of the batch could not be queued`);
  } catch (error) {
    // Part of it queued: it is canceled, and the sweep records what never runs; the client is told it failed.
    log.error({ err: error, batch: id }, 'a batch could not be queued whole; it is canceled');
    await cancelBatch(deps.redis, id).catch(() => undefined);
    throw new GatewayError(503, 'The batch could not be queued; it was canceled. Try again.', {
      code: 'queue_unavailable',
    });
  }
  return { id, created, expires, total };
}
