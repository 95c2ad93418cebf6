import { useEffect, useRef } from 'preact/hooks';
import type { BarConfig, Chart } from '../chart';

export interface Series {
  label: string;
  color: string;
  values: number[];
}

interface Props {
  labels: string[];
  series: Series[];
  stacked?: boolean;
  /** The chart's accessible name (the numbers are in the tables beside it). */
  label: string;
  format: (value: number) => string;
  axisFormat?: (value: number) => string;
  /** A cumulative line over the bars, read on the bars' own axis (the spend chart's running total). */
  runningTotal?: { label: string; color: string };
  empty?: boolean;
  emptyText?: string;
  /** Counts: the value axis ticks at whole numbers only (no "0.5 requests"). */
  wholeNumbers?: boolean;
  class?: string;
}

/** The room an x-axis label takes: this many pixels a character of its longest (12 px type), and a gap. */
const pixelsPerCharacter = 7;
const labelGap = 20;

/**
 * Which bars the x axis labels: every `step`th counted back from the last, so the axis always names the range's
 * last bar (today on Usage, now on Activity) and the labels never crowd, however long they are ("Nov 27" or
 * "Nov 27, 08:00 AM"); a chart of a few bars labels each.
 */
export function labelledIndexes(labels: readonly string[], width: number): Set<number> {
  const count = labels.length;
  const longest = labels.reduce((most, label) => Math.max(most, label.length), 0);
  const room = Math.max(2, Math.floor(width / (longest * pixelsPerCharacter + labelGap)));
  const step = Math.max(1, Math.ceil(count / room));
  const shown = new Set<number>();
  for (let i = count - 1; i >= 0; i -= step) shown.add(i);
  return shown;
}

/**
 * What a reader of the axes sees, on the canvas for a test to read too: the value axis's ticks (`data-y-ticks`),
 * how many value axes are drawn (`data-value-axes`), the x axis's labels in order (`data-x-labels`, joined by "|"),
 * and the label of the last bar with a value (`data-last-bar`, empty when none has).
 */
function markAxes(instance: Chart<'bar' | 'line', number[], string>, element: HTMLCanvasElement, p: Props): void {
  element.dataset.yTicks = (instance.scales.y?.ticks ?? []).map((tick) => tick.value).join(',');
  element.dataset.valueAxes = String(
    Object.values(instance.scales).filter((scale) => scale.axis === 'y' && scale.options.display !== false).length,
  );
  const shown = labelledIndexes(p.labels, instance.width);
  element.dataset.xLabels = p.labels.filter((_, i) => shown.has(i)).join('|');
  let last = -1;
  p.labels.forEach((_, i) => {
    if (p.series.some((s) => (s.values[i] ?? 0) !== 0)) last = i;
  });
  element.dataset.lastBar = last >= 0 ? p.labels[last]! : '';
}

/**
 * A Chart.js bar chart in a box of fixed height (set by CSS), so the page
 * never moves when the data or the charting code arrive. Chart.js is loaded
 * on first use, in its own chunk.
 */
export function BarChart(props: Props) {
  const canvas = useRef<HTMLCanvasElement>(null);
  const chart = useRef<Chart<'bar' | 'line', number[], string> | undefined>(undefined);
  const latest = useRef(props);
  latest.current = props;

  const datasets = (p: Props) => [...bars(p), ...line(p)];

  const line = (p: Props) => {
    if (!p.runningTotal) return [];
    let sum = 0;
    const data = p.labels.map((_, i) => (sum += p.series.reduce((total, s) => total + (s.values[i] ?? 0), 0)));
    return [
      {
        type: 'line' as const,
        label: p.runningTotal.label,
        data,
        // The bars' axis (one axis, on the left): a stack of its own, so it is not piled on the bars.
        stack: 'running-total',
        borderColor: p.runningTotal.color,
        backgroundColor: p.runningTotal.color,
        borderWidth: 2,
        pointRadius: 0,
        tension: 0.2,
        order: -1,
      },
    ];
  };

  const bars = (p: Props) =>
    p.series.map((s) => ({
      label: s.label,
      data: s.values,
      backgroundColor: s.color,
      hoverBackgroundColor: s.color,
      borderRadius: p.stacked ? 0 : 3,
      borderSkipped: false as const,
      maxBarThickness: 28,
      categoryPercentage: 0.8,
      barPercentage: 0.9,
    }));

  useEffect(() => {
    let dead = false;
    void import('../chart').then(({ Chart: ChartClass }) => {
      if (dead || !canvas.current) return;
      const p = latest.current;
      const config: BarConfig = {
        type: 'bar',
        data: { labels: p.labels, datasets: datasets(p) },
        options: {
          responsive: true,
          maintainAspectRatio: false,
          animation: false,
          interaction: { mode: 'index', intersect: false },
          scales: {
            x: {
              stacked: !!p.stacked,
              grid: { display: false },
              // Labelled from the last bar back (labelledIndexes), never skipped by Chart.js's own choice, which may
              // end the axis days before the last bar.
              ticks: {
                maxRotation: 0,
                autoSkip: false,
                callback(value, index) {
                  const shown = labelledIndexes(latest.current.labels, this.chart.width);
                  return shown.has(index) ? (latest.current.labels[index] ?? '') : null;
                },
              },
            },
            y: {
              stacked: !!p.stacked,
              beginAtZero: true,
              border: { display: false },
              ticks: {
                maxTicksLimit: 5,
                ...(p.wholeNumbers ? { precision: 0 } : {}),
                callback: (value) => (latest.current.axisFormat ?? latest.current.format)(Number(value)),
              },
            },
          },
          plugins: {
            legend: {
              display: p.series.length > 1 || !!p.runningTotal,
              position: 'bottom',
              labels: { boxWidth: 10, boxHeight: 10, useBorderRadius: true, borderRadius: 2, padding: 14 },
            },
            tooltip: {
              backgroundColor: '#111827',
              padding: 10,
              cornerRadius: 8,
              boxPadding: 4,
              filter: (item) => Number(item.raw) !== 0,
              callbacks: {
                label: (item) => ` ${item.dataset.label ?? ''}: ${latest.current.format(Number(item.raw))}`,
                footer: (items) => {
                  const dayItems = items.filter((item) => (item.dataset as { type?: string }).type !== 'line');
                  if (!latest.current.stacked || dayItems.length < 2) return '';
                  const total = dayItems.reduce((sum, item) => sum + Number(item.raw), 0);
                  return `Total: ${latest.current.format(total)}`;
                },
              },
            },
          },
        },
      };
      chart.current = new ChartClass(canvas.current, config);
      markAxes(chart.current, canvas.current, p);
      // The labels the axis shows depend on its width: marked again after each resize.
      chart.current.options.onResize = (instance) => {
        if (canvas.current)
          markAxes(instance as Chart<'bar' | 'line', number[], string>, canvas.current, latest.current);
      };
    });
    return () => {
      dead = true;
      chart.current?.destroy();
      chart.current = undefined;
    };
  }, []);

  useEffect(() => {
    const instance = chart.current;
    if (!instance) return;
    instance.data.labels = props.labels;
    instance.data.datasets = datasets(props);
    if (instance.options.plugins?.legend)
      instance.options.plugins.legend.display = props.series.length > 1 || !!props.runningTotal;
    instance.update();
    if (canvas.current) markAxes(instance, canvas.current, props);
  }, [props.labels, props.series]);

  return (
    <div class={`chart-box ${props.class ?? ''}`}>
      <canvas ref={canvas} role="img" aria-label={props.label}>
        {props.label}
      </canvas>
      {props.empty && (
        <p class="chart-empty" aria-hidden="true">
          {props.emptyText ?? 'No data'}
        </p>
      )}
    </div>
  );
}
