import type { Redis } from 'ioredis';
import type { KeyAccess } from '../../shared/accounts.js';
import { readBatch, seesBatch, type BatchRecord } from '../../shared/batches/index.js';
import type { FileEntry, FileFilter } from '../../shared/files.js';
import type { RecordDb } from '../../storage/record/database.js';

/**
 * Which of its account's files and batches an API key sees through `/v1/files`, `/v1/batches` and
 * `/v1/messages/batches`, as the console shows them to the person who made the key (api/console/batch-routes.ts):
 *
 * - a key a plain member of the team made (`api_keys.created_by`, that person's role in `team_members` read afresh
 *   on every request, so a promotion or demotion counts at the next request) sees what the keys that person made in
 *   the team made: the files they uploaded, the batches they made, those batches' output and error files;
 * - a key an owner of the team made (or an admin, or the person whose own account it is), and a key nobody made
 *   (the admin API, the CLI), sees everything of its account;
 * - a key limited to models sees, of those, only the batches whose every model it may use, and not the files that
 *   are the input, output or error file of a batch using a model it may not use (a batch whose models are not known
 *   yet, or never were, counts as such);
 * - whatever those say, a key always sees the batches it made itself, in every status, and their files.
 *
 * Anything else is answered as an id that does not exist (404) and left out of lists.
 */

export interface KeyScope {
  accountId: string;
  keyId: string;
  models?: readonly string[];
  /** The keys whose files and batches it sees (those its maker made in the account); undefined: every key's. */
  keys?: ReadonlySet<string>;
}

/** The key's scope, from the record as it is now (one or two small reads). */
export async function keyScope(
  record: RecordDb,
  access: Pick<KeyAccess, 'keyId' | 'accountId' | 'models'>,
): Promise<KeyScope> {
  const base: KeyScope = {
    accountId: access.accountId,
    keyId: access.keyId,
    ...(access.models ? { models: access.models } : {}),
  };
  const row = await record
    .selectFrom('api_keys as k')
    .leftJoin('accounts as maker', 'maker.id', 'k.created_by')
    .leftJoin('team_members as tm', (join) =>
      join.onRef('tm.team_id', '=', 'k.account_id').onRef('tm.member_id', '=', 'k.created_by'),
    )
    .select(['k.created_by', 'k.account_id', 'maker.role as maker_role', 'tm.role as team_role'])
    .where('k.id', '=', access.keyId)
    .executeTakeFirst();
  const maker = row?.created_by;
  if (!row || !maker || maker === row.account_id || row.maker_role === 'admin' || row.team_role === 'owner')
    return base;
  // A member (or one no longer an owner, or no longer in the team): their own keys' things alone.
  const made = await record
    .selectFrom('api_keys')
    .select('id')
    .where('account_id', '=', access.accountId)
    .where('created_by', '=', maker)
    .execute();
  return { ...base, keys: new Set([access.keyId, ...made.map((key) => key.id)]) };
}

/**
 * Whether the key made it, or its maker did through another key (every key's, for a key that sees the whole account).
 */
const madeByScope = (scope: KeyScope, keyId: string | null) =>
  keyId === scope.keyId || !scope.keys || (keyId !== null && scope.keys.has(keyId));

/** Whether a key limited to `models` may use every model of these (unknown models: no). */
const usesOnly = (models: readonly string[] | undefined, used: readonly string[] | null | undefined) =>
  models === undefined || (used !== null && used !== undefined && used.every((model) => models.includes(model)));

/** Whether the key sees a batch (see above). */
export function seesBatchAs(scope: KeyScope, batch: BatchRecord): boolean {
  if (batch.accountId !== scope.accountId) return false;
  if (batch.keyId === scope.keyId) return true;
  return madeByScope(scope, batch.keyId) && seesBatch(scope.models, batch);
}

/** Whether a batch tied to a file (it was made from it, or wrote it) keeps a model-limited key from the file. */
const hidesFile = (scope: KeyScope, batch: Pick<BatchRecord, 'keyId' | 'models'>) =>
  batch.keyId !== scope.keyId && !usesOnly(scope.models, batch.models);

/** The files the key sees, of a page read (`AccountFiles.list`'s filter). */
export function fileFilter(scope: KeyScope, redis: Redis): FileFilter {
  return async (entries: readonly FileEntry[]) => {
    const made = entries.map((entry) => madeByScope(scope, entry.owner.keyId));
    if (scope.models === undefined) return made;
    // The batches made from these files, read once each: one gone since is no longer there to hide anything.
    const ids = [...new Set(entries.flatMap((entry, i) => (made[i] ? entry.owner.inputOf : [])))];
    const batches = new Map(
      (await Promise.all(ids.map((id) => readBatch(redis, id)))).flatMap((batch) =>
        batch ? [[batch.id, batch] as const] : [],
      ),
    );
    return entries.map((entry, i) => {
      if (!made[i]) return false;
      const { batch, inputOf, keyId } = entry.owner;
      // A batch's output or error file: its batch's models as written on the file (which may outlive the batch).
      if (batch && hidesFile(scope, { keyId: keyId ?? '', models: batch.models ?? undefined })) return false;
      return inputOf.every((id) => {
        const tied = batches.get(id);
        return !tied || !hidesFile(scope, tied);
      });
    });
  };
}

/** The file if the key sees it. */
export async function seenFile(
  scope: KeyScope,
  redis: Redis,
  entry: FileEntry | undefined,
): Promise<FileEntry | undefined> {
  if (!entry) return undefined;
  return (await fileFilter(scope, redis)([entry]))[0] ? entry : undefined;
}
