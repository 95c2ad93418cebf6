import { listOf } from '../api';
import { EmptyRow, ErrorMessage, PageHeader, SkeletonRows, TableCard, useApi, useTitle } from '../components/ui';
import type { Key, List } from '../types';
import { KeyCells, KeyHeaderCells } from './keys';

export function AllKeysPage() {
  useTitle('All keys');
  const keys = useApi<List<Key> | Key[]>('/admin/keys');
  const list = keys.data ? listOf(keys.data) : undefined;
  const columns = 10;
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
        <TableCard labelledBy="all-keys-heading">
          <table class="table table-compact" aria-labelledby="all-keys-heading">
            <thead>
              <tr>
                <th scope="col">Account</th>
                <KeyHeaderCells />
              </tr>
            </thead>
            <tbody>
              {!list && <SkeletonRows columns={columns} rows={4} />}
              {list && list.length === 0 && <EmptyRow columns={columns}>No keys yet.</EmptyRow>}
              {list?.map((key) => (
                <tr key={key.id}>
                  <td>{key.account_email || key.account_name || <span class="muted">{key.account_id || '—'}</span>}</td>
                  <KeyCells keyRecord={key} />
                </tr>
              ))}
            </tbody>
          </table>
        </TableCard>
      </section>
    </>
  );
}
