import { useState } from 'preact/hooks';
import { listOf } from '../api';
import { ErrorMessage, PageHeader, StatusMessage, useApi, useTitle } from '../components/ui';
import type { Key, List } from '../types';
import { AccountKeyGroups, EditKeyDialog, RevokeDialog } from './keys';

/**
 * Every key of every account, grouped by account (its email, else its name: the Default account's is "Default"),
 * each with the Edit and Revoke a member has on their own Keys page: the same dialogs, the admin's endpoints.
 */
export function AllKeysPage() {
  useTitle('All keys');
  const keys = useApi<List<Key> | Key[]>('/admin/keys');
  const list = keys.data ? listOf(keys.data) : undefined;
  const [editing, setEditing] = useState<Key | undefined>(undefined);
  const [revoking, setRevoking] = useState<Key | undefined>(undefined);
  // Keys revoked here: shown as revoked, without buttons, until the page is read again (the list holds live keys only).
  const [revoked, setRevoked] = useState<ReadonlySet<string>>(() => new Set());
  const [status, setStatus] = useState<string | undefined>(undefined);
  const live = list?.filter((key) => !revoked.has(key.id)).length;
  const accounts = list ? new Set(list.map((key) => key.account_id)).size : undefined;
  return (
    <>
      <PageHeader
        title="All keys"
        description="Every API key on this gateway, by account. Edit or revoke any of them here."
      />
      <ErrorMessage message={keys.error} />
      <section class="section" aria-labelledby="all-keys-heading">
        <div class="section-head">
          <h2 id="all-keys-heading" class="visually-hidden">
            Keys of every account
          </h2>
          <span class="muted">
            {live !== undefined
              ? `${live} key${live === 1 ? '' : 's'} in ${accounts} account${accounts === 1 ? '' : 's'}`
              : '\u00a0'}
          </span>
        </div>
        <StatusMessage message={status} />
        <AccountKeyGroups
          keys={list}
          idPrefix="all-keys"
          skeletonRows={4}
          empty="No keys yet."
          options={{ capOf: (key) => key.account_cache_max_ttl_s, revoked, onEdit: setEditing, onRevoke: setRevoking }}
        />
      </section>
      {editing && (
        <EditKeyDialog
          keyRecord={editing}
          base="/admin/keys"
          cacheCap={editing.account_cache_max_ttl_s}
          onClose={() => setEditing(undefined)}
          onSaved={(saved) => {
            keys.setData((previous) => {
              if (!previous) return previous;
              const update = (rows: Key[]) => rows.map((k) => (k.id === saved.id ? { ...k, ...saved } : k));
              return Array.isArray(previous) ? update(previous) : { ...previous, data: update(previous.data) };
            });
            setEditing(undefined);
            setStatus(`Key “${saved.name}” saved.`);
          }}
        />
      )}
      {revoking && (
        <RevokeDialog
          keyRecord={revoking}
          base="/admin/keys"
          onClose={() => setRevoking(undefined)}
          onRevoked={() => {
            setRevoked((previous) => new Set(previous).add(revoking.id));
            setStatus(`Key “${revoking.name}” revoked.`);
            setRevoking(undefined);
          }}
        />
      )}
    </>
  );
}
