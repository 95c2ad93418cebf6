import { useMemo, useState } from 'preact/hooks';
import { type Column, DataTable } from '../components/data-table';
import { ErrorMessage, PageHeader, useApi, useTitle } from '../components/ui';
import { contextWindow, price } from '../format';
import { capabilityName, otherPrices, sortPrice, type PriceLine } from '../pricing-model';
import type { List, PricedModel, TierMultiples } from '../types';

type Sort = 'name' | 'price-asc' | 'price-desc';

function Price({ value }: { value: number | undefined }) {
  return value === undefined ? <span class="muted">—</span> : <>{price(value)}</>;
}

/** A few price lines shown as they are; a long list folds behind "N sizes". */
function PriceLines({ lines, unit }: { lines: PriceLine[]; unit: string | undefined }) {
  const list = (
    <ul class="price-lines">
      {lines.map((line) => (
        <li key={line.label}>
          <span class="price-label">{line.label}</span>{' '}
          {typeof line.value === 'string'
            ? line.value
            : line.value.map((part) => part.replace(/ /g, '\u00a0')).join(', ')}
        </li>
      ))}
    </ul>
  );
  if (lines.length <= 3) return list;
  return (
    <details class="price-details">
      <summary>
        {lines.length} {unit === 'image' ? 'sizes' : 'prices'}
      </summary>
      {list}
    </details>
  );
}

/**
 * A model's name, what it does, and its prices: per 1M tokens in their own columns, the rest (per image, per second…)
 * in one.
 */
const priceColumns: Column<PricedModel>[] = [
  { id: 'model', label: 'Model', lead: true, sticky: 'start', class: 'cell-strong model-cell', cell: (m) => m.id },
  { id: 'vendor', label: 'Vendor', class: 'pricing-vendor', cell: (m) => m.vendor },
  {
    id: 'capability',
    label: 'Capability',
    cell: (m) => <span class={`badge badge-cap badge-${m.capability}`}>{capabilityName(m.capability)}</span>,
  },
  {
    id: 'context',
    label: 'Context window',
    numeric: true,
    headerClass: 'wrap-head',
    title: (m) => (m.context_window > 0 ? `${m.context_window.toLocaleString()} tokens` : undefined),
    cell: (m) => contextWindow(m.context_window),
  },
  { id: 'input', label: 'Input / 1M', numeric: true, cell: (m) => <Price value={m.prices?.input_per_1m} /> },
  {
    id: 'cached-input',
    label: 'Cached input / 1M',
    numeric: true,
    headerClass: 'wrap-head',
    cell: (m) => <Price value={m.prices?.cached_input_per_1m} />,
  },
  { id: 'output', label: 'Output / 1M', numeric: true, cell: (m) => <Price value={m.prices?.output_per_1m} /> },
  {
    id: 'other',
    label: 'Other prices',
    class: (m) => `other-prices ${otherPrices(m.prices).length === 0 ? 'other-empty' : ''}`,
    cell: (m) => {
      const other = otherPrices(m.prices);
      return other.length === 0 ? (
        <span class="muted">{m.prices ? '—' : 'Not priced'}</span>
      ) : (
        <PriceLines lines={other} unit={m.capability === 'image' ? 'image' : undefined} />
      );
    },
  },
];

export function PricingPage() {
  useTitle('Pricing');
  const models = useApi<List<PricedModel> & { service_tiers?: TierMultiples }>('/pricing');
  const tiers = models.data?.service_tiers;
  const [search, setSearch] = useState('');
  const [vendor, setVendor] = useState('');
  const [capability, setCapability] = useState('');
  const [sort, setSort] = useState<Sort>('name');

  const all = models.data?.data;
  const vendors = useMemo(() => [...new Set((all ?? []).map((m) => m.vendor))].sort(), [all]);
  const capabilities = useMemo(() => [...new Set((all ?? []).map((m) => m.capability))].sort(), [all]);

  const shown = useMemo(() => {
    const words = search.toLowerCase().split(/\s+/).filter(Boolean);
    const list = (all ?? []).filter(
      (m) =>
        (!vendor || m.vendor === vendor) &&
        (!capability || m.capability === capability) &&
        words.every((w) => m.id.toLowerCase().includes(w) || m.vendor.toLowerCase().includes(w)),
    );
    const byName = (a: PricedModel, b: PricedModel) => a.id.localeCompare(b.id);
    if (sort === 'name') return list.sort(byName);
    const direction = sort === 'price-asc' ? 1 : -1;
    return list.sort((a, b) => {
      const pa = sortPrice(a);
      const pb = sortPrice(b);
      // Unpriced models last either way.
      if (pa === undefined || pb === undefined) return pa === pb ? byName(a, b) : pa === undefined ? 1 : -1;
      return (pa - pb) * direction || byName(a, b);
    });
  }, [all, search, vendor, capability, sort]);

  return (
    <>
      <PageHeader
        title="Pricing"
        description="What this gateway bills per model, markup included, in US dollars. Token prices are per million tokens."
      />
      {tiers && (
        <p class="muted small pricing-tiers">
          Service tiers (<code>service_tier</code> on chat and Responses requests): token prices are ×{tiers.flex} for
          flex, ×{tiers.default} for default and ×{tiers.priority} for priority.
        </p>
      )}
      <div class="filters" role="search" aria-label="Filter models">
        <div class="field field-inline field-grow">
          <label for="pricing-search">Search models</label>
          <input
            id="pricing-search"
            type="search"
            value={search}
            onInput={(e) => setSearch(e.currentTarget.value)}
            placeholder="e.g. gpt-4o, claude, flux"
            autoComplete="off"
            spellcheck={false}
          />
        </div>
        <div class="field field-inline">
          <label for="pricing-vendor">Vendor</label>
          <select id="pricing-vendor" value={vendor} onChange={(e) => setVendor(e.currentTarget.value)}>
            <option value="">All vendors</option>
            {vendors.map((v) => (
              <option value={v} key={v}>
                {v}
              </option>
            ))}
          </select>
        </div>
        <div class="field field-inline">
          <label for="pricing-capability">Capability</label>
          <select id="pricing-capability" value={capability} onChange={(e) => setCapability(e.currentTarget.value)}>
            <option value="">All capabilities</option>
            {capabilities.map((c) => (
              <option value={c} key={c}>
                {capabilityName(c)}
              </option>
            ))}
          </select>
        </div>
        <div class="field field-inline">
          <label for="pricing-sort">Sort</label>
          <select id="pricing-sort" value={sort} onChange={(e) => setSort(e.currentTarget.value as Sort)}>
            <option value="name">Name</option>
            <option value="price-asc">Price: low to high</option>
            <option value="price-desc">Price: high to low</option>
          </select>
        </div>
      </div>
      <p class="result-count" role="status" aria-live="polite">
        {all ? `Showing ${shown.length} of ${all.length} models` : '\u00a0'}
      </p>
      <ErrorMessage message={models.error} />
      <DataTable
        label="Model prices"
        class="pricing-table"
        cardClass="pricing-card"
        columns={priceColumns}
        rows={all && shown}
        rowKey={(m) => m.id}
        skeletonRows={8}
        empty="No model matches these filters."
      />
    </>
  );
}
