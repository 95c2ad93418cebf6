import type Router from '@koa/router';
import type { Config } from '../../shared/config.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import type { FileListQuery, FilePurpose } from '../../shared/files.js';
import type { AccountFileStore } from '../../storage/account-files.js';
import { createRouter } from '../http/canonical-path.js';
import type { KeyedContext, KeyedState } from '../requests/request-context.js';
import { receiveUpload } from './upload.js';

/**
 * OpenAI's Files API (`/v1/files`): upload, list, retrieve, download and delete the account's files, as the spec's
 * OpenAIFile, ListFilesResponse and DeleteFileResponse. A file is its account's, not its key's (as OpenAI's is its
 * Project's): any key of the account sees it, another account's id answers as unknown. The signed download links of
 * stored images live apart, under `/v1/blobs/` (api/jobs/routes.ts; old ones under `/v1/files/` with a signature).
 */

export interface FileRoutesDeps {
  config: Pick<Config, 'files'>;
  files: AccountFileStore;
}

const listPurposes: readonly FilePurpose[] = ['batch', 'batch_output', 'user_data'];
const maxListLimit = 10_000;

const noSuchFile = (id: string) => new GatewayError(404, `No such File object: ${id.slice(0, 80)}`, { param: 'id' });

/** The list's query as OpenAI takes it: `purpose`, `after`, `limit` (1–10,000, default 10,000), `order` (default `desc`). */
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
  if (order !== 'asc' && order !== 'desc') throw invalidRequest(`Invalid 'order': 'asc' or 'desc'.`, 'order', 'invalid_value');
  const purpose = one('purpose');
  const after = one('after');
  // A purpose no file here has (OpenAI's others: `assistants`, `fine-tune`…) lists nothing.
  if (purpose !== undefined && !listPurposes.includes(purpose as FilePurpose)) return 'none';
  return { limit, order, ...(purpose !== undefined ? { purpose: purpose as FilePurpose } : {}), ...(after !== undefined ? { after } : {}) };
}

export function fileRoutes(deps: FileRoutesDeps): Router<KeyedState> {
  const router = createRouter<KeyedState>('/v1/files');
  const { files } = deps;
  const account = (ctx: KeyedContext) => ctx.state.access.accountId;

  router.post('/', async (ctx) => {
    const { maxBytes, batchMaxBytes } = deps.config.files;
    const file = await receiveUpload(ctx.req, files, account(ctx), { maxBytes, batchMaxBytes });
    ctx.state.log.info({ file: file.id, bytes: file.bytes, purpose: file.purpose }, 'file uploaded');
    ctx.body = file;
  });

  router.get('/', async (ctx) => {
    const query = listQuery(ctx.query);
    const { data, has_more } = query === 'none' ? { data: [], has_more: false } : await files.list(account(ctx), query);
    ctx.body = { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more };
  });

  router.get('/:id', async (ctx) => {
    const file = await files.get(account(ctx), ctx.params.id!);
    if (!file) throw noSuchFile(ctx.params.id!);
    ctx.body = file;
  });

  router.get('/:id/content', async (ctx) => {
    const id = ctx.params.id!;
    const file = await files.get(account(ctx), id);
    const bytes = file ? await files.read(account(ctx), id) : undefined;
    if (!file || !bytes) throw noSuchFile(id);
    ctx.type = 'application/octet-stream';
    ctx.length = file.bytes;
    ctx.set('content-disposition', `attachment; filename*=UTF-8''${encodeURIComponent(file.filename)}`);
    ctx.body = bytes;
  });

  router.delete('/:id', async (ctx) => {
    const id = ctx.params.id!;
    if (!(await files.delete(account(ctx), id))) throw noSuchFile(id);
    ctx.state.log.info({ file: id }, 'file deleted');
    ctx.body = { id, object: 'file', deleted: true };
  });

  return router;
}
