import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { GatewayMetrics, metricsPrefix } from '../../shared/metrics.js';

// docs/operating.md's metrics table against what the processes register: every metric /metrics can serve has
// its row, with each of its labels named; no row names a metric that does not exist.
const operating = readFileSync(fileURLToPath(new URL('../../docs/operating.md', import.meta.url)), 'utf8');

/** The table's rows: the metric's name (a `*` row stands for a family) and its labels column. */
function documentedRows(): Map<string, string> {
  const rows = new Map<string, string>();
  for (const line of operating.split('\n')) {
    const cells = line.split('|').map((cell) => cell.trim());
    const names = [...(cells[1] ?? '').matchAll(/`(switchyard_[a-z_*]+)`/g)].map(([, name]) => name!);
    for (const name of names) rows.set(name, cells[3] ?? '');
  }
  return rows;
}

/** Everything a process registers, with its label names (per-key and per-account labels on). */
function registered(): Array<{ name: string; labels: string[] }> {
  const metrics = new GatewayMetrics({ perKey: true, perAccount: true });
  return metrics.registry.getMetricsAsArray().map((metric) => {
    const { name, labelNames } = metric as unknown as { name: string; labelNames?: string[] };
    return { name, labels: labelNames ?? [] };
  });
}

const families = (rows: Map<string, string>) =>
  [...rows.keys()].filter((name) => name.endsWith('*')).map((name) => name.slice(0, -1));

describe('the metrics table (docs/operating.md) against the registry', () => {
  it('documents every metric the gateway registers, each of its labels named', () => {
    const rows = documentedRows();
    const prefixes = families(rows);
    const missing: string[] = [];
    for (const { name, labels } of registered()) {
      assert.ok(name.startsWith(metricsPrefix), name);
      const row = rows.get(name);
      if (row === undefined) {
        if (!prefixes.some((prefix) => name.startsWith(prefix))) missing.push(name);
        continue;
      }
      for (const label of labels) assert.ok(row.includes(`\`${label}\``), `${name}: label ${label} is not in its row`);
    }
    assert.deepEqual(missing, [], 'metrics with no row in docs/operating.md');
  });

  it('names no metric that does not exist', () => {
    const names = new Set(registered().map((metric) => metric.name));
    // Registered outside GatewayMetrics: the api of `npm start` reports its worker process (shared/metrics-process.ts).
    names.add(`${metricsPrefix}worker_process_up`);
    const stale = [...documentedRows().keys()].filter((name) => !name.endsWith('*') && !names.has(name));
    assert.deepEqual(stale, []);
  });
});
