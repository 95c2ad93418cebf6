import { Fragment, type ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import type { PagedList } from '../paged-list';
import { ErrorMessage, Spinner, StatusMessage } from './ui';

/*
 * Every table of the console: its columns declared as data, its rows written
 * here. A page says what each column is called and how a row's cell reads;
 * this writes the header, the rows (keyed), the grey rows while they load,
 * the line that says there are none or that they could not be read, an
 * optional total, and under a paged list its "Load more". How a table fits a
 * narrow screen is decided here too, from the columns, not on each page.
 */

type Classes = string | undefined;

export interface Column<Row> {
  /** Unique within its table: the column's key. */
  id: string;
  /** Its name in plain text: the header's text, and the name a cell is given where the header is out of sight. */
  label: string;
  /** A few words under the name, in the header ("in / out"). */
  note?: string;
  /** Its name heard, not seen (a column of buttons). */
  hideLabel?: boolean;
  /** A row's cell. */
  cell: (row: Row) => ComponentChildren;
  /** Numbers: right-aligned, in the header too. */
  numeric?: boolean;
  /** Stays in sight while the table scrolls sideways: the first column (`start`) or the last (`end`). */
  sticky?: 'start' | 'end';
  /** The row's name (the model, the account): its cell is not labelled with the column's name. */
  lead?: boolean;
  /** Classes of its cells: the same for each row, or by row. */
  class?: Classes | ((row: Row) => Classes);
  /** Classes of its header cell. */
  headerClass?: string;
  /** A cell's tooltip (the whole of a value the cell cuts short). */
  title?: (row: Row) => string | undefined;
  /** Its cell in a total row under the rows; no column with one, no total row. */
  footer?: (rows: readonly Row[]) => ComponentChildren;
  /**
   * How much room the column is worth. `always` (the default): a column at every width, a line of the card on a
   * phone. `wide`: a column where the content box is wide (over 1100 px of window), in the row's details below
   * that. `detail`: never a column, always in the row's details (opened by the row's "Details" button).
   */
  priority?: 'always' | 'wide' | 'detail';
  /** The column of the row's buttons: in a card on a phone, the card's last line, unlabelled. */
  actions?: boolean;
}

export interface DataTableProps<Row> {
  columns: ReadonlyArray<Column<Row> | false | undefined>;
  /** The rows, or undefined until they are read (grey rows stand in for them). */
  rows: readonly Row[] | undefined;
  rowKey: (row: Row) => string;
  /** The table's name: the id of the heading that names it, or a name of its own. */
  labelledBy?: string;
  label?: string;
  /** Classes of the table (beside `table`) and of its card. */
  class?: string;
  cardClass?: string;
  /** What an empty table says. */
  empty: ComponentChildren;
  /** How many grey rows stand in while the rows load. */
  skeletonRows?: number;
  /** Why the rows could not be read, and how to try again: said in the table instead of its rows. */
  failure?: { message: string; onRetry: () => void };
  /** Classes of a row. */
  rowClass?: (row: Row) => Classes;
  /** A click anywhere on a row (the row also needs a button that does the same, for the keyboard). */
  onRowClick?: (row: Row) => void;
  /** The row marked as the one asked for (a link to it). */
  selected?: (row: Row) => boolean;
  /** A line under a row, across every column (a batch's results), when the row has one. */
  rowDetail?: (row: Row) => ComponentChildren;
  rowDetailClass?: string;
  /**
   * How the table reads on a phone (640 px and under): `cards` (the default), a card a row: the lead column its
   * title, each other column a labelled line, the buttons last; `own`, the page's own stylesheet decides (Activity's
   * grid, Pricing's); `scroll`, a table that scrolls sideways in its box.
   */
  phone?: 'cards' | 'own' | 'scroll';
}

/** A row's key as an element id. */
const idFor = (key: string) => key.replace(/[^A-Za-z0-9_-]/g, '_');

const classes = (...names: Array<string | false | undefined | null>) => names.filter(Boolean).join(' ') || undefined;

/** Where a column's cells sit, in its header and every row alike: aligned right, kept in sight. */
function placing<Row>(column: Column<Row>): Array<string | false | undefined> {
  return [column.numeric && 'num', column.sticky === 'start' && 'sticky-col', column.sticky === 'end' && 'sticky-end'];
}

/** Where a column shows: `dt-wide` columns leave the table for the row's details on a narrower screen. */
function showing<Row>(column: Column<Row>): string | false {
  return column.priority === 'wide' ? 'dt-wide' : !!column.actions && 'dt-actions';
}

/** Every cell of a column, its header's too, is classed `dt-col-<id>`: a page's stylesheet sizes a column by it. */
const columnClass = <Row,>(column: Column<Row>) => `dt-col-${column.id}`;

function cellClasses<Row>(column: Column<Row>, row: Row): Classes {
  return classes(
    columnClass(column),
    ...placing(column),
    showing(column),
    column.lead && 'dt-lead',
    typeof column.class === 'function' ? column.class(row) : column.class,
  );
}

/** The label-and-value lines of a row's details: its `detail` columns, and its `wide` ones where they are hidden. */
function DetailList<Row>({ columns, row }: { columns: ReadonlyArray<Column<Row>>; row: Row }) {
  return (
    <dl class="dt-detail-list">
      {columns.map((column) => (
        <div key={column.id} class={classes('dt-detail-item', column.priority === 'wide' && 'dt-wide-detail')}>
          <dt>{column.label}</dt>
          <dd class={typeof column.class === 'function' ? column.class(row) : column.class}>{column.cell(row)}</dd>
        </div>
      ))}
    </dl>
  );
}

/** A table of rows, its columns declared by the page. */
export function DataTable<Row>(props: DataTableProps<Row>) {
  const { rows, rowKey, failure, rowClass, onRowClick, selected, rowDetail } = props;
  const declared = props.columns.filter((column): column is Column<Row> => !!column);
  const shown = declared.filter((column) => column.priority !== 'detail');
  // The columns a row's details hold; with any, each row gets a button that opens them.
  const inDetails = declared.filter((column) => column.priority === 'detail' || column.priority === 'wide');
  const onlyWide = inDetails.every((column) => column.priority === 'wide');
  const [opened, setOpened] = useState<ReadonlySet<string>>(() => new Set());
  const toggle = (key: string) =>
    setOpened((previous) => {
      const next = new Set(previous);
      if (!next.delete(key)) next.add(key);
      return next;
    });
  const detailsColumn: Column<Row> | undefined =
    inDetails.length > 0
      ? {
          id: 'dt-details',
          label: 'Details',
          hideLabel: true,
          actions: true,
          class: classes('dt-toggle-cell', onlyWide && 'dt-wide-toggle'),
          headerClass: classes('dt-toggle-cell', onlyWide && 'dt-wide-toggle'),
          cell: (row) => {
            const key = rowKey(row);
            const open = opened.has(key);
            return (
              <button
                type="button"
                class="button button-secondary button-small dt-toggle"
                aria-expanded={open}
                aria-controls={`dt-${idFor(key)}`}
                onClick={(event) => {
                  event.stopPropagation();
                  toggle(key);
                }}
              >
                {open ? 'Less' : 'Details'}
              </button>
            );
          },
        }
      : undefined;
  const columns = detailsColumn ? [...shown, detailsColumn] : shown;
  const span = columns.length;
  const hasFooter = columns.some((column) => column.footer);
  const phone = props.phone ?? 'cards';
  return (
    <TableCard
      labelledBy={props.labelledBy}
      label={props.label}
      class={classes(props.cardClass, phone === 'cards' && 'dt-cards-card')}
    >
      <table
        class={classes('table', 'data-table', phone === 'cards' && 'dt-cards', props.class)}
        aria-labelledby={props.labelledBy}
        aria-label={props.labelledBy ? undefined : props.label}
      >
        <thead>
          <tr>
            {columns.map((column) => (
              <th
                scope="col"
                key={column.id}
                class={classes(columnClass(column), ...placing(column), showing(column), column.headerClass)}
              >
                {column.hideLabel ? (
                  <span class="visually-hidden">{column.label}</span>
                ) : (
                  <>
                    {column.label}
                    {column.note && (
                      <>
                        {' '}
                        <span class="th-note">{column.note}</span>
                      </>
                    )}
                  </>
                )}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {failure && !rows ? (
            <tr class="error-row">
              <td colSpan={span}>
                <div class="retry-row">
                  <ErrorMessage message={failure.message} />
                  <button type="button" class="button button-secondary" onClick={failure.onRetry}>
                    Try again
                  </button>
                </div>
              </td>
            </tr>
          ) : !rows ? (
            <SkeletonRows columns={span} rows={props.skeletonRows} />
          ) : rows.length === 0 ? (
            <EmptyRow columns={span}>{props.empty}</EmptyRow>
          ) : (
            rows.map((row) => {
              const detail = rowDetail?.(row);
              const key = rowKey(row);
              return (
                <Fragment key={key}>
                  <tr
                    class={classes(onRowClick && 'clickable-row', selected?.(row) && 'row-target', rowClass?.(row))}
                    onClick={onRowClick && (() => onRowClick(row))}
                  >
                    {columns.map((column) => (
                      <td
                        key={column.id}
                        class={cellClasses(column, row)}
                        title={column.title?.(row)}
                        data-label={column.lead || column.hideLabel ? undefined : column.label}
                      >
                        {column.cell(row)}
                      </td>
                    ))}
                  </tr>
                  {detailsColumn && opened.has(key) ? (
                    <tr class={classes('dt-details-row', onlyWide && 'dt-wide-details')} id={`dt-${idFor(key)}`}>
                      <td colSpan={span}>
                        <DetailList columns={inDetails} row={row} />
                      </td>
                    </tr>
                  ) : null}
                  {detail ? (
                    <tr class={props.rowDetailClass}>
                      <td colSpan={span}>{detail}</td>
                    </tr>
                  ) : null}
                </Fragment>
              );
            })
          )}
        </tbody>
        {hasFooter && rows && rows.length > 0 && (
          <tfoot>
            <tr>
              {columns.map((column) => (
                <td
                  key={column.id}
                  class={classes(...placing(column), showing(column))}
                  data-label={column.footer && !column.lead ? column.label : undefined}
                >
                  {column.footer?.(rows)}
                </td>
              ))}
            </tr>
          </tfoot>
        )}
      </table>
    </TableCard>
  );
}

/**
 * A list read a page at a time (usePagedList) in a table: its rows once the first page is in, what went wrong
 * reading it, and under it why a refresh or the next page failed and the button that asks for the next page.
 */
export function PagedTable<Row>({
  list,
  what,
  onRetry,
  ...table
}: Omit<DataTableProps<Row>, 'rows' | 'failure'> & {
  list: PagedList<unknown, Row>;
  what: string;
  onRetry: () => void;
}) {
  const { current, rows, error, more } = list;
  return (
    <>
      <DataTable
        {...table}
        rows={current ? rows : undefined}
        failure={error && !current ? { message: `Could not load the ${what}: ${error}`, onRetry } : undefined}
      />
      {error && current && <ErrorMessage message={`Could not refresh the ${what}: ${error}`} />}
      {more.error && <ErrorMessage message={`Could not load more: ${more.error}`} onDismiss={list.dismissMoreError} />}
      {current?.hasMore && (
        <div class="load-more">
          <button
            type="button"
            class="button button-secondary"
            onClick={() => void list.loadMore()}
            disabled={more.busy}
          >
            {more.busy && <Spinner />}
            Load more
          </button>
        </div>
      )}
    </>
  );
}

/** Rows of grey bars standing in for a table's data, the height of real rows. */
function SkeletonRows({ columns, rows = 4 }: { columns: number; rows?: number | undefined }) {
  return (
    <>
      {Array.from({ length: rows }, (_, r) => (
        <tr key={r} class="skeleton-row" aria-hidden="true">
          {Array.from({ length: columns }, (_, c) => (
            <td key={c}>
              <span class="skeleton" />
            </td>
          ))}
        </tr>
      ))}
    </>
  );
}

function EmptyRow({ columns, children }: { columns: number; children: ComponentChildren }) {
  return (
    <tr class="empty-row">
      <td colSpan={columns}>
        <span class="empty-text">{children}</span>
      </td>
    </tr>
  );
}

/**
 * A table in a card that scrolls sideways when the table is wider than the
 * card. While it can scroll, a shadow on the side with more columns and a
 * line under the table say so (a phone shows no scroll bar until touched).
 * A caption-less table gets its name from a heading: pass the heading's id.
 */
function TableCard({
  children,
  labelledBy,
  label,
  class: className,
}: {
  children: ComponentChildren;
  labelledBy?: string | undefined;
  label?: string | undefined;
  class?: string | undefined;
}) {
  const scroller = useRef<HTMLDivElement>(null);
  const [more, setMore] = useState<{ left: boolean; right: boolean }>({ left: false, right: false });
  useEffect(() => {
    const box = scroller.current;
    if (!box) return;
    const update = () => {
      const hidden = box.scrollWidth - box.clientWidth;
      const left = hidden > 1 && box.scrollLeft > 1;
      const right = hidden > 1 && hidden - box.scrollLeft > 1;
      setMore((previous) => (previous.left === left && previous.right === right ? previous : { left, right }));
    };
    update();
    box.addEventListener('scroll', update, { passive: true });
    // The box as the window resizes; the table as its rows come in.
    const observer = new ResizeObserver(update);
    observer.observe(box);
    for (const child of Array.from(box.children)) observer.observe(child);
    return () => {
      box.removeEventListener('scroll', update);
      observer.disconnect();
    };
  }, []);
  const scrolls = more.left || more.right;
  return (
    <div class={`table-card ${more.left ? 'more-left' : ''} ${more.right ? 'more-right' : ''} ${className ?? ''}`}>
      <div
        class="table-scroll"
        ref={scroller}
        tabIndex={0}
        role="group"
        aria-labelledby={labelledBy}
        aria-label={labelledBy ? undefined : label}
      >
        {children}
      </div>
      {scrolls && (
        <p class="scroll-hint" aria-hidden="true">
          {more.left && more.right
            ? '\u2190 Scroll sideways for more columns \u2192'
            : more.right
              ? 'Scroll sideways for more columns \u2192'
              : '\u2190 More columns to the left'}
        </p>
      )}
    </div>
  );
}

/**
 * A section of a page that is one table (All accounts, a team's members): its heading (`heading` its id, which names
 * the table) and how many rows it holds (a blank until they are read), what the last change did, what went wrong
 * (`onDismiss` puts it away), then the table.
 */
export function TableSection<Row>({
  heading,
  title,
  count,
  status,
  error,
  onDismiss,
  ...table
}: Omit<DataTableProps<Row>, 'labelledBy' | 'label'> & {
  heading: string;
  title: ComponentChildren;
  count: string | undefined;
  status: string | undefined;
  error: string | undefined;
  onDismiss: (() => void) | undefined;
}) {
  return (
    <section class="section" aria-labelledby={heading}>
      <div class="section-head">
        <h2 id={heading}>{title}</h2>
        <span class="muted">{count ?? '\u00a0'}</span>
      </div>
      <StatusMessage message={status} />
      <ErrorMessage message={error} onDismiss={onDismiss} />
      <DataTable labelledBy={heading} {...table} />
    </section>
  );
}
