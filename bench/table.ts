/** The plain-text tables and pass/fail bars every bench report prints. */

export interface Bar {
  name: string;
  target: string;
  actual: string;
  pass: boolean;
  /** Reported, not counted: a failing informational bar does not fail the run. */
  informational?: boolean;
}

export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}
