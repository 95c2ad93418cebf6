import { listOf } from '../api';
import { type Column, DataTable } from '../components/data-table';
import { ErrorMessage, PageHeader, useApi, useTitle } from '../components/ui';
import type { Key, List } from '../types';
import { keyColumns } from './keys';

/** Each key's account: its email, else its name (the default account's is "Default"), else its id. */
const accountColumn: Column<Key> = { id: 'account', label: 'Account', cell: (key) => key.account_email || key.account_name || <span class="muted">{key.account_id || '—'}</span> };

export function AllKeysPage() {
  useTitle('All keys');
  const keys = useApi<List<Key> | Key[]>('/admin/keys');
  const list = keys.data ? listOf(keys.data) : undefined;
  return (
    <>
      <PageHeader title="All keys" description="Every API key on this gateway, of every account." />
      <ErrorMessage message={keys.error} />
      <section class="section" aria-labelledby="all-keys-heading">
        <div class="section-head">
          <h2 id="all-keys-heading" class="visually-hidden">
            Keys of every account
          </h2>
          <span class="muted">{list ? `${list.length} key${list.length === 1 ? '' : 's'}` : '\u00a0'}</span>
        </div>
        <DataTable labelledBy="all-keys-heading" class="table-compact" columns={[accountColumn, ...keyColumns]} rows={list} rowKey={(key) => key.id} skeletonRows={4} empty="No keys yet." />
      </section>
    </>
  );
}
