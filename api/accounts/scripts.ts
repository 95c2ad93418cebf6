import { defaultAccountLua } from '../../shared/access/index.js';
import { as, luaFiles, redisScript } from '../../shared/redis-script.js';

/**
 * The Redis scripts of accounts and keys, kept as `.lua` files beside this module and declared here once each: their
 * keys and arguments by name, in the order the Lua reads them. Every change to the directory that must hold together
 * (claiming an email, deleting an account with its keys, revoking a key) is one of them. The two that may find the
 * default account missing are sent with `default-account.lua` (shared/access/lua, which the key-access script shares)
 * before them, where it is written once.
 */
const files = (...names: string[]) => luaFiles(import.meta.url, ...names);

/** Makes the default account's directory entry where it is missing: `AccountStore.ensureDefault()`. */
export const ensureDefaultScript = redisScript({
  name: 'account_ensure_default',
  files: [defaultAccountLua, ...files('ensure-default')],
  keys: ['account', 'index'],
  args: ['accountId', 'now'],
  reply: as<number>(),
});

/** Claims a new account's email and writes its directory entry: 0 when the email is taken. */
export const createAccountScript = redisScript({
  name: 'account_create',
  files: files('create-account'),
  keys: ['emails', 'account', 'index'],
  args: ['emailIndex', 'accountId', 'created', 'fields'],
  reply: as<number>(),
});

/** Changes an account's fields and email: 1 done, 0 no such account, -1 email taken, -2 changed meanwhile. */
export const updateAccountScript = redisScript({
  name: 'account_update',
  files: files('update-account'),
  keys: ['account', 'emails'],
  args: ['accountId', 'email', 'emailIndex', 'newEmailIndex', 'channel', 'fields'],
  reply: as<number>(),
});

/** Marks an account deleted and revokes its keys: their number, -1 no such account, -2 changed meanwhile. */
export const deleteAccountScript = redisScript({
  name: 'account_delete',
  files: files('delete-account'),
  keys: ['account', 'emails', 'index', 'accountKeys', 'keyHashes', 'keyIds'],
  args: ['accountId', 'email', 'emailIndex', 'keyRecordPrefix', 'channel'],
  reply: as<number>(),
});

/** Replaces a password hash by one of today's parameters, only if unchanged since it was read. */
export const rehashPasswordScript = redisScript({
  name: 'account_rehash_password',
  files: files('rehash-password'),
  keys: ['account'],
  args: ['stored', 'fresh'],
  reply: as<number>(),
});

/** Writes a new key's directory entry while its account exists: 0 when it does not. */
export const createKeyScript = redisScript({
  name: 'api_key_create',
  files: files('create-key'),
  keys: ['account', 'record', 'hashes', 'ids', 'accountKeys'],
  args: ['hash', 'keyId', 'fields'],
  reply: as<number>(),
});

/** Changes a key's fields and announces it: 0 when no such key exists. */
export const updateKeyScript = redisScript({
  name: 'api_key_update',
  files: files('update-key'),
  keys: ['record'],
  args: ['channel', 'keyId', 'fields'],
  reply: as<number>(),
});

/** Removes a key from the directory and announces it: 0 when no such key exists. */
export const revokeKeyScript = redisScript({
  name: 'api_key_revoke',
  files: files('revoke-key'),
  keys: ['record', 'hashes', 'ids'],
  args: ['keyId', 'accountKeysPrefix', 'channel', 'defaultAccountId'],
  reply: as<number>(),
});

/** Names an account's Playground key if the one named is still the one read: 1 claimed, 0 another won. */
export const claimPlaygroundKeyScript = redisScript({
  name: 'api_key_claim_playground',
  files: files('claim-playground-key'),
  keys: ['account'],
  args: ['current', 'made', 'field'],
  reply: as<number>(),
});
