import {
  batchField,
  batchRequestJobId,
  cancelBatch,
  createBatch,
  encodeBatchEntry,
  fillBatchWindow,
  openAIBatchErrorBody,
  openAIBatchResult,
  readBatch,
  storeBatchEntries,
  type BatchRecord,
} from '../../shared/batches/index.js';
import type { CatalogModel } from '../../shared/catalog.js';
import type { Endpoint, EndpointRequest } from '../../shared/endpoints.js';
import { endpoints } from '../../shared/endpoints.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import type { AccountFiles } from '../../shared/files.js';
import type { Logger } from '../../shared/logger.js';
import { activeMetrics } from '../../shared/metrics.js';
import { worstCase } from '../../shared/money/charge.js';
import { batchKey } from '../../shared/redis-keys.js';
import { laneOf } from '../../shared/scheduling/index.js';
import { checkJsonShape, maxJsonDepth, parseBody, yieldToLoop } from '../http/request-body.js';
import { handlers, type EndpointHandler } from '../requests/endpoint-handlers.js';
import { checkModelAllowed, type EndpointRouteDeps } from '../requests/endpoint-route.js';
import { batchJobEntry, batchWindow, intakeLeaseMs, type BatchOwner, type Checked } from './job-entry.js';
import { LineTooLong, readJsonlLines } from './jsonl-lines.js';
import {
  batchEndpoints,
  failValidation,
  noteStarted,
  openAIFields,
  renewValidation,
  type BatchEndpoint,
  type BatchLineError,
  type OpenAIBatchFields,
} from './openai-record.js';

/**
 * An OpenAI batch's input file, read and run: the api answers `POST /v1/batches` with the batch `validating`, then
 * reads the account's file (shared/files.ts) as a stream, line by line, twice, never whole in memory and yielding
 * to the event loop as it goes (jsonl-lines.ts).
 *
 * - The first reading decides whether the file can run at all, as OpenAI's validation does: a line that is not a
 *   JSON object, one without a `custom_id`, a `method` other than POST, a `url` other than the batch's endpoint, a
 *   `custom_id` used twice, more lines than FILES_BATCH_MAX_REQUESTS (OpenAI's 50,000), an empty file, a file that
 *   is not the account's `batch` file or past FILES_BATCH_MAX_BYTES (OpenAI's 200 MB): the batch is `failed`,
 *   `errors.data` naming each line (up to ten) and its code, and nothing runs.
 * - The second starts the batch on the engine (shared/batches/) and checks each line's
 *   `body` as its endpoint checks a request (the endpoint row's schema, the model, the key's models, the model's
 *   context and modalities): one that passes is stored as the job it will be, in the flex band of its model's
 *   lane, and the window is filled as they are stored, exactly as a Message Batch's requests are; one that does not
 *   is a failure of that request alone (OpenAI writes it to the error file, the batch goes on): stored as a refused
 *   entry, recorded with its error's status and body when the window reaches it. Lines of one batch may name any
 *   model of any vendor: each runs on its own.
 *
 * Nothing of it is kept in the api: the record says what to read, and the validation's lease (renewed as it reads)
 * lets the sweep of another api read it again when this one dies before the batch is started; once started, the
 * engine's intake lease does the same as for a Message Batch (a batch whose api died while storing is canceled).
 */

export interface OpenAIBatchDeps extends EndpointRouteDeps {
  files: AccountFiles;
  log: Logger;
}

/** The most errors a failed batch names (the reading stops there). */
const maxErrorsNamed = 10;
/**
 * Lines checked per turn of the loop in the second reading (each about 0.3 ms: its parse, schema, translation and token
 * count).
 */
const checkedPerTurn = 8;
const storedPerRound = 200;
/** How often the validation's lease is renewed (and the batch asked whether it was canceled meanwhile). */
const renewEveryMs = 1_000;

/** What the first reading found: how many requests, the models they name that the key may use, and any errors. */
interface FileCheck {
  lines: number;
  errors: BatchLineError[];
  models: Set<string>;
  lanes: Set<string | undefined>;
}

const lineError = (
  line: number | null,
  code: string,
  message: string,
  param: string | null = null,
): BatchLineError => ({ code, message, param, line });

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * Keeps the validation's lease while the file is read, and says whether the batch is still validating (a cancel
 * ends it: the reading stops). Asked each line; goes to Redis once a second.
 */
function leaseKeeper(deps: OpenAIBatchDeps, batchId: string): () => Promise<boolean> {
  let last = Date.now();
  return async () => {
    if (Date.now() - last < renewEveryMs) return true;
    last = Date.now();
    await renewValidation(deps.redis, batchId);
    return (await deps.redis.hget(batchKey(batchId), batchField.status)) === 'validating';
  };
}

/** The model a line's body names that this batch's key may use: its catalog id and lane, or undefined. */
function usableModel(
  deps: OpenAIBatchDeps,
  endpoint: BatchEndpoint,
  fields: OpenAIBatchFields,
  model: unknown,
): CatalogModel | undefined {
  if (typeof model !== 'string') return undefined;
  try {
    const resolved = deps.models.resolve(model, endpoint);
    checkModelAllowed(fields.access, resolved.id);
    return resolved;
  } catch {
    return undefined;
  }
}

/** The first reading (see above). Undefined when the batch stopped validating meanwhile (canceled). */
async function checkFile(
  deps: OpenAIBatchDeps,
  batch: BatchRecord,
  fields: OpenAIBatchFields,
  stillValidating: () => Promise<boolean>,
): Promise<FileCheck | undefined> {
  const endpoint = batchEndpoints[fields.endpoint];
  const check: FileCheck = { lines: 0, errors: [], models: new Set(), lanes: new Set() };
  const stream = await deps.files.read(batch.accountId, fields.inputFileId);
  if (!stream)
    return {
      ...check,
      errors: [
        lineError(
          null,
          'file_not_found',
          `No file with id '${fields.inputFileId}' was found for this account.`,
          'input_file_id',
        ),
      ],
    };
  const seen = new Set<string>();
  const fail = (error: BatchLineError) => check.errors.push(error) >= maxErrorsNamed;
  try {
    for await (const { number, text } of readJsonlLines(stream, deps.config.maxBodyBytes)) {
      if (!(await stillValidating())) return undefined;
      if (++check.lines > deps.config.files.batchMaxRequests) {
        check.errors.push(
          lineError(
            number,
            'too_many_tasks',
            `The file has more than ${deps.config.files.batchMaxRequests} requests, the most a batch may hold ` +
              `(FILES_BATCH_MAX_REQUESTS).`,
          ),
        );
        break;
      }
      let line: unknown;
      try {
        line = JSON.parse(text);
      } catch {
        if (fail(lineError(number, 'invalid_json_line', 'This line is not parseable as valid JSON.'))) break;
        continue;
      }
      if (!isObject(line)) {
        if (
          fail(
            lineError(
              number,
              'invalid_json_line',
              'This line is not a JSON object ({"custom_id", "method", "url", "body"}).',
            ),
          )
        )
          break;
        continue;
      }
      const problem =
        typeof line.custom_id !== 'string' || line.custom_id === ''
          ? lineError(
              number,
              'missing_required_parameter',
              'Each line needs a `custom_id`: a non-empty string naming the request in the output.',
              'custom_id',
            )
          : line.method !== 'POST'
            ? lineError(
                number,
                'invalid_method',
                `The \`method\` must be POST${typeof line.method === 'string' ? `, not ${line.method.slice(0, 16)}` : ''}.`,
                'method',
              )
            : line.url !== fields.endpoint
              ? lineError(
                  number,
                  'url_mismatch',
                  `The \`url\` of each line must be the batch's endpoint, ${fields.endpoint}${typeof line.url === 'string' ? `; this one is ${line.url.slice(0, 64)}` : ''}.`,
                  'url',
                )
              : !isObject(line.body)
                ? lineError(
                    number,
                    'missing_required_parameter',
                    'Each line needs a `body`: the request, as a JSON object.',
                    'body',
                  )
                : seen.has(line.custom_id)
                  ? lineError(
                      number,
                      'duplicate_custom_id',
                      `The custom_id \`${line.custom_id.slice(0, 64)}\` is used by an earlier line; each request ` +
                        `of a batch needs its own.`,
                      'custom_id',
                    )
                  : undefined;
      if (problem) {
        if (fail(problem)) break;
        continue;
      }
      seen.add(line.custom_id as string);
      // The models it will use, for the keys that may see it and for its window (an unusable one fails its line alone).
      const model = usableModel(deps, endpoint, fields, (line.body as Record<string, unknown>).model);
      if (model) {
        check.models.add(model.id);
        check.lanes.add(laneOf(deps.queues.laneNames, model));
      }
    }
  } catch (error) {
    if (!(error instanceof LineTooLong)) throw error;
    check.errors.push(
      lineError(
        error.line,
        'line_too_long',
        `This line is longer than ${error.maxBytes} bytes (MAX_BODY_BYTES), the largest request the gateway takes.`,
      ),
    );
  } finally {
    stream.destroy();
  }
  if (check.lines === 0 && check.errors.length === 0)
    check.errors.push(lineError(null, 'empty_file', 'The input file has no requests.', 'input_file_id'));
  return check;
}

type LineOutcome = { checked: Checked<Endpoint> } | { refused: GatewayError };

/**
 * One line's request checked as its endpoint checks it (see above): the request as its job will carry it, or why it is
 * refused.
 */
async function checkLine(
  deps: OpenAIBatchDeps,
  batch: BatchRecord,
  fields: OpenAIBatchFields,
  text: string,
): Promise<LineOutcome & { customId: string }> {
  const line = JSON.parse(text) as { custom_id: string; body: Record<string, unknown> };
  const customId = line.custom_id;
  const endpoint = batchEndpoints[fields.endpoint];
  try {
    // The body inside its line: one level deeper than a request's own.
    checkJsonShape(text, maxJsonDepth + 1);
    const body = line.body;
    if (endpoint === 'responses') {
      if (body.background === true)
        throw invalidRequest('A batch request cannot run in the background: it is run by the batch.', 'background');
      // Kept in the batch's output file, not as a stored response (which would outlive neither the output nor add to
      // it).
      body.store = false;
    }
    const row = endpoints[endpoint];
    const parsed = parseBody(row.schema, body) as { model: string; stream?: boolean | null };
    if (parsed.stream === true)
      throw invalidRequest(
        "A batch request cannot stream: its answer is written to the batch's output file.",
        'stream',
      );
    const model = deps.models.resolve(parsed.model, endpoint);
    checkModelAllowed(fields.access, model.id);
    const handler = handlers[endpoint] as unknown as EndpointHandler<Endpoint>;
    const accepted = await handler.accept({
      fields: parsed as never,
      model,
      // A batch's requests run in the flex band.
      tier: 'flex',
      files: [],
      scope: { redis: deps.redis, blobs: deps.blobs, keyId: batch.keyId, config: deps.config, models: deps.models },
      header: () => '',
    });
    const request = { endpoint, payload: accepted.payload } as EndpointRequest;
    const estimate = worstCase(
      deps.config,
      deps.prices,
      request,
      model.id,
      model.routes[0]?.vendor,
      accepted.promptTokens ?? 0,
    );
    // Its job's id is the batch's request id (a response's own id stays in its object), and it runs in the flex band.
    const checked: Checked<Endpoint> = {
      customId,
      modelId: model.id,
      lane: laneOf(deps.queues.laneNames, model),
      accepted: { payload: accepted.payload, serviceTier: 'flex' },
      micros: estimate.micros,
      tokens: estimate.tokens,
    };
    return { customId, checked };
  } catch (error) {
    if (error instanceof GatewayError) return { customId, refused: error };
    throw error;
  }
}

/**
 * The second reading: the batch started on the engine, its lines stored as they are checked, its window filled as they
 * are.
 */
async function runFile(
  deps: OpenAIBatchDeps,
  batch: BatchRecord,
  fields: OpenAIBatchFields,
  check: FileCheck,
  inputName: string,
): Promise<void> {
  const { id } = batch;
  const limits = deps.config.batches;
  const endpoint = batchEndpoints[fields.endpoint];
  const started = await createBatch(
    deps.redis,
    {
      id,
      accountId: batch.accountId,
      keyId: batch.keyId,
      created: batch.created,
      expires: batch.expires,
      total: check.lines,
      models: [...check.models],
    },
    limits.resultsKeepMs,
    { window: batchWindow(deps.config, check.lanes), intakeMs: intakeLeaseMs, fromValidating: true },
  );
  // Canceled while its file was read: it ended then, and nothing of it runs.
  if (!started) return;
  await noteStarted(deps.redis, id, inputName);
  const owner: BatchOwner = {
    accountId: batch.accountId,
    keyId: batch.keyId,
    weight: fields.access.weight ?? 1,
    ...(fields.access.limitMicros !== undefined ? { limitMicros: fields.access.limitMicros } : {}),
    ...(fields.access.budgets ? { budgets: fields.access.budgets } : {}),
  };
  const keptMs = batch.expires - Date.now() + 60_000;
  const stream = await deps.files.read(batch.accountId, fields.inputFileId);
  const missed: number[] = [];
  try {
    if (!stream) throw new Error('the input file is gone');
    let index = 0;
    let from = 0;
    let entries: string[] = [];
    let payloads: Array<[string, string]> = [];
    const store = async () => {
      // A payload kept apart is written before its job can be taken.
      await Promise.all(payloads.map(([key, value]) => deps.redis.set(key, value, 'PX', keptMs)));
      await storeBatchEntries(deps.redis, id, from, entries, keptMs, intakeLeaseMs);
      from += entries.length;
      entries = [];
      payloads = [];
      missed.push(...(await fillBatchWindow(deps.redis, deps.queues, id, limits.resultsKeepMs)));
    };
    for await (const { text } of readJsonlLines(stream, deps.config.maxBodyBytes)) {
      if (index >= check.lines) throw new Error('the input file changed while it was read');
      if (index % checkedPerTurn === 0 && index > 0) await yieldToLoop();
      const outcome = await checkLine(deps, batch, fields, text);
      if ('checked' in outcome) {
        const made = batchJobEntry(
          deps,
          { id, expires: batch.expires, dialect: 'openai' },
          owner,
          endpoint as Endpoint,
          index,
          outcome.checked,
        );
        entries.push(made.entry);
        if (made.payload) payloads.push(made.payload);
      } else {
        const error = outcome.refused;
        // Refused before any vendor call, it still has the request id its job would have had, as every OpenAI line has
        // one.
        const result = openAIBatchResult(
          'errored',
          error.status,
          batchRequestJobId(id, index),
          openAIBatchErrorBody(error, endpoint),
        );
        entries.push(encodeBatchEntry({ refused: { customId: outcome.customId, result } }));
      }
      index++;
      if (entries.length >= storedPerRound) await store();
    }
    if (entries.length > 0) await store();
    if (index !== check.lines) throw new Error('the input file changed while it was read');
    if (missed.length > 0) throw new Error(`requests ${missed.join(', ')} of the batch could not be queued`);
  } catch (error) {
    // Part of it queued: it is canceled (the sweep records what never runs, and its files are written).
    deps.log.error({ err: error, batch: id }, 'an OpenAI batch could not be queued whole; it is canceled');
    await cancelBatch(deps.redis, id).catch(() => undefined);
  } finally {
    stream?.destroy();
  }
}

/**
 * Validates a batch and, when its file can run, starts it (see above). Does nothing for a batch no longer
 * validating; the caller holds the validation's lease.
 */
export async function validateOpenAIBatch(deps: OpenAIBatchDeps, batchId: string): Promise<void> {
  const batch = await readBatch(deps.redis, batchId);
  if (!batch || batch.status !== 'validating') return;
  const fields = openAIFields(batch);
  const keepMs = deps.config.batches.resultsKeepMs;
  const failed = async (errors: BatchLineError[]) => {
    if (await failValidation(deps.redis, batchId, errors, keepMs)) {
      activeMetrics()?.batches.get('failed', 'openai').inc();
      deps.log.info(
        { batch: batchId, errors: errors.map(({ code, line }) => ({ code, line })) },
        'an OpenAI batch failed its validation',
      );
    }
  };
  const file = await deps.files.get(batch.accountId, fields.inputFileId);
  if (!file)
    return failed([
      lineError(
        null,
        'file_not_found',
        `No file with id '${fields.inputFileId}' was found for this account.`,
        'input_file_id',
      ),
    ]);
  if (file.purpose !== 'batch')
    return failed([
      lineError(
        null,
        'invalid_file_purpose',
        `The file ${file.id} was uploaded with purpose '${file.purpose}'; a batch's input needs purpose 'batch'.`,
        'input_file_id',
      ),
    ]);
  const maxBytes = deps.config.files.batchMaxBytes;
  if (file.bytes > maxBytes)
    return failed([
      lineError(
        null,
        'file_too_large',
        `The file is ${file.bytes} bytes; a batch's input may be at most ${maxBytes} (FILES_BATCH_MAX_BYTES).`,
        'input_file_id',
      ),
    ]);
  const stillValidating = leaseKeeper(deps, batchId);
  const check = await checkFile(deps, batch, fields, stillValidating);
  if (!check) return;
  if (check.errors.length > 0) return failed(check.errors);
  await runFile(deps, batch, fields, check, file.filename);
}

/**
 * Validates a batch after the answer has gone (or for the sweep); a failure is logged, and the sweep tries again once
 * the lease is out.
 */
export function startValidation(deps: OpenAIBatchDeps, batchId: string): void {
  void validateOpenAIBatch(deps, batchId).catch((error: unknown) =>
    deps.log.warn({ err: error, batch: batchId }, "could not validate an OpenAI batch's file (the sweep will again)"),
  );
}
