import { useEffect, useState } from 'preact/hooks';
import { api, isAbort, messageOf } from './api';

/*
 * A list read a page at a time: the first page on each change of its path
 * (or of `refreshes`), the next ones appended on "Load more". How a page's
 * rows and its next page are read is the caller's.
 */

export interface PagedListReading<Page, Row> {
  /** The rows of a page. */
  rows: (page: Page) => Row[];
  /** Whether there are rows after this page. */
  hasMore: (page: Page) => boolean;
  /**
   * The query-string parameter that asks for the page after `page` (`rows`: every row loaded so far), or undefined when
   * there is none to ask for.
   */
  next: (page: Page, rows: Row[]) => string | undefined;
}

interface Loaded<Page, Row> {
  /** The list's path the rows are of: rows of another path are never shown as these. */
  path: string;
  rows: Row[];
  hasMore: boolean;
  /** The last page read. */
  page: Page;
}

export interface PagedList<Page, Row> {
  /** The rows loaded for the current path, or undefined until its first page is read. */
  current: Loaded<Page, Row> | undefined;
  rows: Row[];
  error: string | undefined;
  loading: boolean;
  more: { busy: boolean; error?: string };
  loadMore: () => Promise<void>;
  dismissMoreError: () => void;
}

export function usePagedList<Page, Row>(
  listPath: string,
  refreshes: number,
  reading: PagedListReading<Page, Row>,
): PagedList<Page, Row> {
  const [loaded, setLoaded] = useState<Loaded<Page, Row> | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [more, setMore] = useState<{ busy: boolean; error?: string }>({ busy: false });

  useEffect(() => {
    const controller = new AbortController();
    setError(undefined);
    setMore({ busy: false });
    api<Page>('GET', listPath, undefined, { signal: controller.signal })
      .then((page) => {
        if (!controller.signal.aborted)
          setLoaded({ path: listPath, rows: reading.rows(page), hasMore: reading.hasMore(page), page });
      })
      .catch((caught: unknown) => {
        if (!isAbort(caught) && !controller.signal.aborted) setError(messageOf(caught));
      });
    return () => controller.abort();
  }, [listPath, refreshes]);

  const current = loaded?.path === listPath ? loaded : undefined;
  const rows = current?.rows ?? [];
  const loading = !current && !error;

  const loadMore = async () => {
    const next = current?.hasMore ? reading.next(current.page, current.rows) : undefined;
    if (next === undefined || more.busy) return;
    setMore({ busy: true });
    try {
      const page = await api<Page>('GET', `${listPath}&${next}`);
      setLoaded((previous) =>
        previous?.path === listPath
          ? { path: listPath, rows: [...previous.rows, ...reading.rows(page)], hasMore: reading.hasMore(page), page }
          : previous,
      );
      setMore({ busy: false });
    } catch (caught) {
      setMore({ busy: false, error: messageOf(caught) });
    }
  };

  return { current, rows, error, loading, more, loadMore, dismissMoreError: () => setMore({ busy: false }) };
}
