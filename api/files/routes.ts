import type Router from '@koa/router';
import type { Redis } from 'ioredis';
import type { Config } from '../../shared/config.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import type { FileListQuery, FilePurpose } from '../../shared/files.js';
import type { AccountFileStore } from '../../storage/account-files.js';
import type { RecordDb } from '../../storage/record/database.js';
import { createRouter } from '../http/canonical-path.js';
import type { KeyedContext, KeyedState } from '../requests/request-context.js';
import { fileFilter, keyScope, seenFile } from './key-scope.js';
import { receiveUpload } from './upload.js';

/**
 * OpenAI's Files API (`/v1/files`): upload, list, retrieve, download and delete the account's files, as the spec's
 * OpenAIFile, ListFilesResponse and DeleteFileResponse. A file is its account's (as OpenAI's is its Project's), seen
 * by the keys of the account key-scope.ts says: a key a team's member made sees what that member's keys made, a key
 * limited to models not the files of batches using other models. Any other file, another account's included, answers
 * as an id that does not exist (and is left out of the list). The signed download links of
 * stored images live apart, under `/v1/blobs/` (api/jobs/routes.ts; old ones under `/v1/files/` with a signature).
 */

export interface FileRoutesDeps {
  config: Pick<Config, 'files'>;
  files: AccountFileStore;
  /** Who made each key, and their role in its team now (key-scope.ts). */
  record: RecordDb;
  /** The batches a file is tied to are read from here. */
  redis: Redis;
}

const listPurposes: readonly FilePurpose[] = ['batch', 'batch_output', 'user_data'];
const maxListLimit = 10_000;

const noSuchFile = (id: string) => new GatewayError(404, `No such File object: ${id.slice(0, 80)}`, { param: 'id' });

/**
 * A download's `Content-Disposition`: an ASCII `filename` for old clients (anything else, and `"` and `\`, as `_`)
 * and the name itself as RFC 5987's `filename*=UTF-8''…` (RFC 6266), which every current client prefers.
 */
export function attachmentDisposition(filename: string): string {
  const ascii = Array.from(filename, (char) =>
    /^[\x20-\x7e]$/.test(char) && char !== '"' && char !== '\\' ? char : '_',
  ).join('');
  // A lone surrogate (no name stored here has one) would make encodeURIComponent throw.
  const whole = filename.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
  // encodeURIComponent leaves `'()*` as they are; RFC 5987's attr-char does not allow them.
  const extended = encodeURIComponent(whole).replace(
    /['()*]/g,
    (char) => `%${char.charCodeAt(0).toString(16).toUpperCase()}`,
  );
  return `attachment; filename="${ascii}"; filename*=UTF-8''${extended}`;
}

/**
 * The list's query as OpenAI takes it: `purpose`, `after`, `limit` (1–10,000, default 10,000), `order` (default
 * `desc`).
 */
function listQuery(query: Record<string, string | string[] | undefined>): FileListQuery | 'none' {
  const one = (name: string) => {
    const value = query[name];
    if (Array.isArray(value)) throw invalidRequest(`'${name}' is given more than once.`, name);
    return value;
  };
  const limitText = one('limit');
  const limit = limitText === undefined ? maxListLimit : Number(limitText);
  if (!/^\d+$/.test(limitText ?? '1') || !Number.isInteger(limit) || limit < 1 || limit > maxListLimit) {
    throw invalidRequest(`Invalid 'limit': a whole number from 1 to ${maxListLimit}.`, 'limit', 'invalid_value');
  }
  const order = one('order') ?? 'desc';
  if (order !== 'asc' && order !== 'desc')
    throw invalidRequest(`Invalid 'order': 'asc' or 'desc'.`, 'order', 'invalid_value');
  const purpose = one('purpose');
  const after = one('after');
  // A purpose no file here has (OpenAI's others: `assistants`, `fine-tune`…) lists nothing.
  if (purpose !== undefined && !listPurposes.includes(purpose as FilePurpose)) return 'none';
  return {
    limit,
    order,
    ...(purpose !== undefined ? { purpose: purpose as FilePurpose } : {}),
    ...(after !== undefined ? { after } : {}),
  };
}

export function fileRoutes(deps: FileRoutesDeps): Router<KeyedState> {
  const router = createRouter<KeyedState>('/v1/files');
  const { files } = deps;
  const account = (ctx: KeyedContext) => ctx.state.access.accountId;
  /** The file `id` names if this key sees it (key-scope.ts); undefined as for one that does not exist. */
  const visible = async (ctx: KeyedContext, id: string) => {
    const entry = await files.entry(account(ctx), id);
    return entry && seenFile(await keyScope(deps.record, ctx.state.access), deps.redis, entry);
  };

  router.post('/', async (ctx) => {
    const { maxBytes, batchMaxBytes } = deps.config.files;
    const file = await receiveUpload(ctx.req, files, account(ctx), { maxBytes, batchMaxBytes }, ctx.state.keyId);
    ctx.state.log.info({ file: file.id, bytes: file.bytes, purpose: file.purpose }, 'file uploaded');
    ctx.body = file;
  });

  router.get('/', async (ctx) => {
    const query = listQuery(ctx.query);
    const sees = query === 'none' ? undefined : fileFilter(await keyScope(deps.record, ctx.state.access), deps.redis);
    const { data, has_more } =
      query === 'none' ? { data: [], has_more: false } : await files.list(account(ctx), query, sees);
    ctx.body = { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more };
  });

  router.get('/:id', async (ctx) => {
    const entry = await visible(ctx, ctx.params.id!);
    if (!entry) throw noSuchFile(ctx.params.id!);
    ctx.body = entry.file;
  });

  router.get('/:id/content', async (ctx) => {
    const id = ctx.params.id!;
    const file = (await visible(ctx, id))?.file;
    const bytes = file ? await files.read(account(ctx), id) : undefined;
    if (!file || !bytes) throw noSuchFile(id);
    ctx.type = 'application/octet-stream';
    ctx.length = file.bytes;
    ctx.set('content-disposition', attachmentDisposition(file.filename));
    ctx.body = bytes;
  });

  router.delete('/:id', async (ctx) => {
    const id = ctx.params.id!;
    if (!(await visible(ctx, id)) || !(await files.delete(account(ctx), id))) throw noSuchFile(id);
    ctx.state.log.info({ file: id }, 'file deleted');
    ctx.body = { id, object: 'file', deleted: true };
  });

  return router;
}
