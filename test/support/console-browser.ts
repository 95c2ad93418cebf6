import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { Browser, BrowserContext, Locator, Page } from 'playwright-core';
import { waitFor } from './gateway.js';

/**
 * What the console's browser tests share: a context that notes what goes
 * wrong on its pages, signing in, screenshots, and the measures of a page
 * that fits its window (its own width, each table's scroll box).
 */

/** A box on the page, as getBoundingClientRect gives it (px). */
export interface Box {
  left: number;
  right: number;
  top: number;
  bottom: number;
}

export interface Viewport {
  width: number;
  height: number;
}

/** What each context's pages did wrong: CSP violations (event or console) and uncaught errors. */
const problems = new WeakMap<BrowserContext, string[]>();

/**
 * A context on `baseURL` (en-US) that notes every CSP violation, console error about the CSP and uncaught error of its
 * pages.
 */
export async function openContext(browser: Browser, baseURL: string, viewport: Viewport): Promise<BrowserContext> {
  const context = await browser.newContext({ viewport, baseURL, locale: 'en-US' });
  const seen: string[] = [];
  problems.set(context, seen);
  await context.exposeBinding('__cspViolation', (_source, text: string) => {
    seen.push(text);
  });
  await context.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (event) => {
      void (window as unknown as { __cspViolation: (text: string) => Promise<void> }).__cspViolation(
        `${event.violatedDirective}: ${event.blockedURI} ${event.sample}`,
      );
    });
  });
  context.on('page', (page) => {
    page.on('pageerror', (error) => seen.push(`page error: ${error.message}`));
    page.on('console', (message) => {
      if (message.type() === 'error' && /content security policy/i.test(message.text())) seen.push(message.text());
    });
  });
  return context;
}

/** Closes a context of openContext, then asserts its pages met no CSP violation and no uncaught error. */
export async function closeClean(context: BrowserContext, what: string): Promise<void> {
  const seen = problems.get(context) ?? [];
  await context.close();
  assert.deepEqual(seen, [], `${what}: CSP violations or page errors`);
}

/**
 * Signs in on the console's form and waits for `landing` (the Keys page), or for nothing when `landing` is null (a
 * sign-in that may fail).
 */
export async function signIn(
  page: Page,
  email: string,
  password: string,
  landing: string | null = '**/console/keys',
): Promise<void> {
  await page.goto('/console');
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  if (landing) await page.waitForURL(landing);
}

/**
 * A `shoot(page, name)` writing `<folder>/<name>.png`: the whole page cut at `cut` px, or an open dialog as the screen
 * shows it.
 */
export function screenshots(folder: string, cut = 4000): (page: Page, name: string) => Promise<void> {
  return async (page, name) => {
    const path = join(folder, `${name}.png`);
    // A full-page shot would draw a modal's sticky top bar and backdrop out of place.
    if (await page.locator('dialog[open]').count()) {
      await page.screenshot({ path });
      return;
    }
    const height = await page.evaluate(() => document.documentElement.scrollHeight);
    const { width } = page.viewportSize()!;
    // A tall page drawn whole takes Chromium seconds on two busy cores (one took past Playwright's 30 s in a full run):
    // the shot is the test's record, given the time it needs.
    await page.screenshot({
      path,
      fullPage: true,
      clip: { x: 0, y: 0, width, height: Math.min(height, cut) },
      timeout: 90_000,
    });
  };
}

/** Waits until the page has no placeholder (skeleton) row left. */
async function noSkeletonRows(page: Page, what: string): Promise<void> {
  await waitFor(async () => (await page.locator('.skeleton-row').count()) === 0, 20_000, what);
}

/** A page's tables once their rows are in: a table drawn, no placeholder row left. */
export async function tablesLoaded(page: Page, what: string): Promise<void> {
  await page.locator('table').first().waitFor();
  await noSkeletonRows(page, `the tables of ${what}`);
}

/** A page once its tables (if any) hold rows or say they have none: its main drawn, no placeholder row left. */
export async function settled(page: Page): Promise<void> {
  await page.locator('main').waitFor();
  await noSkeletonRows(page, `${page.url()}: its tables loaded`);
}

/** How far the page runs past the window's width (px; 0 when it fits). */
export function pageOverrun(page: Page): Promise<number> {
  return page.evaluate(() => Math.max(0, document.documentElement.scrollWidth - window.innerWidth));
}

/** Asserts the page never scrolls sideways. */
export async function noSidewaysScroll(page: Page, label: string): Promise<void> {
  const overrun = await pageOverrun(page);
  assert.ok(overrun <= 0, `${label}: the page scrolls sideways by ${overrun}px`);
}

/**
 * One `.table-scroll` box: its table's name, how far the box scrolls and the table runs past it (px), its width, its
 * columns' widths.
 */
export interface BoxFit {
  name: string;
  box: number;
  table: number;
  width: number;
  columns: string;
}

/** Every `.table-scroll` box of the page, measured (see BoxFit). */
export function boxFits(page: Page): Promise<BoxFit[]> {
  return page.evaluate(() =>
    [...document.querySelectorAll<HTMLElement>('.table-scroll')].map((box, i) => {
      const table = box.querySelector('table');
      const name =
        table?.getAttribute('aria-label') ??
        document.getElementById(table?.getAttribute('aria-labelledby') ?? '')?.textContent ??
        `table ${i}`;
      return {
        name: name.trim(),
        box: box.scrollWidth - box.clientWidth,
        table: (table?.scrollWidth ?? 0) - box.clientWidth,
        width: box.clientWidth,
        // Each column's width, to say which is too wide.
        columns: [...(table?.querySelectorAll('thead th') ?? [])]
          .map((th) => `${th.textContent?.trim() || '·'} ${Math.round(th.getBoundingClientRect().width)}`)
          .join(', '),
      };
    }),
  );
}

/** How far the scroll box holding this table scrolls sideways (px). */
export function boxOverrun(table: Locator): Promise<number> {
  return table.evaluate(
    (element) => element.closest('.table-scroll')!.scrollWidth - element.closest('.table-scroll')!.clientWidth,
  );
}

/**
 * Asserts the page has a table, is no wider than the window, and no table or its box is more than `slack` px wider than
 * the box.
 */
export async function assertFits(page: Page, what: string, slack = 0): Promise<void> {
  const overrun = await pageOverrun(page);
  const boxes = await boxFits(page);
  assert.ok(boxes.length > 0, `${what}: a table`);
  assert.ok(overrun <= 0, `${what}: the page is ${overrun}px wider than the window`);
  for (const box of boxes)
    assert.ok(box.box <= slack && box.table <= slack, `${what}, ${box.name}: ${JSON.stringify(box)}`);
}

/**
 * Each shown cell of a row as drawn: its box, and the box of every piece of its text, cut to what the boxes holding it
 * (the cell among them) let show when they hide what overflows them. A piece narrower or lower than a pixel (a
 * visually hidden label) is not drawn text.
 */
export function drawnCells(
  row: Locator,
): Promise<Array<{ name: string; box: Box; texts: Array<Box & { text: string }> }>> {
  // No named function inside: the page runs this as it is, without the helpers a build adds to name them.
  return row.evaluate((tr) =>
    [...tr.querySelectorAll<HTMLElement>(':scope > td')]
      .filter((td) => td.getClientRects().length > 0)
      .map((td) => {
        const cell = td.getBoundingClientRect();
        const texts: Array<Box & { text: string }> = [];
        const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          const text = (node.textContent ?? '').trim();
          if (!text) continue;
          let clip = { left: -Infinity, right: Infinity, top: -Infinity, bottom: Infinity };
          for (let at = node.parentElement; at; at = at.parentElement) {
            if (getComputedStyle(at).overflowX !== 'visible') {
              const r = at.getBoundingClientRect();
              clip = {
                left: Math.max(clip.left, r.left),
                right: Math.min(clip.right, r.right),
                top: Math.max(clip.top, r.top),
                bottom: Math.min(clip.bottom, r.bottom),
              };
            }
            if (at === td) break;
          }
          const range = document.createRange();
          range.selectNodeContents(node);
          for (const rect of range.getClientRects()) {
            const piece = {
              text,
              left: Math.max(rect.left, clip.left),
              right: Math.min(rect.right, clip.right),
              top: Math.max(rect.top, clip.top),
              bottom: Math.min(rect.bottom, clip.bottom),
            };
            if (piece.right - piece.left > 1 && piece.bottom - piece.top > 1) texts.push(piece);
          }
        }
        return {
          name: td.className,
          box: { left: cell.left, right: cell.right, top: cell.top, bottom: cell.bottom },
          texts,
        };
      }),
  );
}

/** Asserts no text of a row's cells runs out of its cell (into a neighbour's), and no two cells' boxes overlap. */
export async function assertCellsKeepTheirText(row: Locator, what: string): Promise<void> {
  const cells = await drawnCells(row);
  assert.ok(cells.length >= 4, `${what}: the row's cells: ${JSON.stringify(cells)}`);
  const within = (inner: Box, outer: Box) =>
    inner.left >= outer.left - 0.5 &&
    inner.right <= outer.right + 0.5 &&
    inner.top >= outer.top - 0.5 &&
    inner.bottom <= outer.bottom + 0.5;
  const overlap = (a: Box, b: Box) =>
    Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.5 &&
    Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.5;
  const wrong: string[] = [];
  for (const [i, cell] of cells.entries()) {
    for (const piece of cell.texts)
      if (!within(piece, cell.box))
        wrong.push(`"${piece.text}" runs out of its cell (${cell.name}): ${JSON.stringify({ piece, cell: cell.box })}`);
    for (const other of cells.slice(i + 1)) {
      if (overlap(cell.box, other.box))
        wrong.push(`the cells ${cell.name} and ${other.name} overlap: ${JSON.stringify([cell.box, other.box])}`);
      for (const piece of cell.texts) {
        for (const theirs of other.texts)
          if (overlap(piece, theirs))
            wrong.push(`"${piece.text}" (${cell.name}) runs into "${theirs.text}" (${other.name})`);
      }
    }
  }
  assert.deepEqual(wrong, [], what);
}

/** The whole number a text starts with ("1,234 requests" → 1234; NaN when none). */
export const leadingCount = (text: string): number =>
  Number(/^\s*([\d,]+)/.exec(text)?.[1]?.replaceAll(',', '') ?? Number.NaN);

/** The stat card whose label is exactly `label`. */
export const stat = (page: Page, label: string): Locator =>
  page.locator('.stat').filter({ has: page.locator('.stat-label', { hasText: new RegExp(`^${label}$`) }) });

/** Makes the context's pages count their cumulative layout shift (shifts after input left out), read by layoutShift. */
export async function countLayoutShift(context: BrowserContext): Promise<void> {
  await context.addInitScript(() => {
    (window as unknown as { __cls: number }).__cls = 0;
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries() as Array<PerformanceEntry & { value: number; hadRecentInput: boolean }>) {
        if (!entry.hadRecentInput) (window as unknown as { __cls: number }).__cls += entry.value;
      }
    }).observe({ type: 'layout-shift', buffered: true });
  });
}

/** The page's cumulative layout shift so far (its context made by countLayoutShift). */
export function layoutShift(page: Page): Promise<number> {
  return page.evaluate(() => (window as unknown as { __cls: number }).__cls);
}

/**
 * WCAG's contrast ratio of an element's text against what is behind it: its colour over the first ancestor's
 * background that is not transparent (white past the page), both as the browser computed them.
 */
export async function textContrast(element: Locator): Promise<number> {
  // No named function inside: the page runs this as it is, without the helpers a build adds to name them.
  return element.evaluate((node) => {
    let back = [255, 255, 255];
    for (let at: Element | null = node; at; at = at.parentElement) {
      const [r, g, b, a = 1] = (getComputedStyle(at).backgroundColor.match(/[\d.]+/g) ?? []).map(Number);
      if (a > 0) {
        back = [r!, g!, b!];
        break;
      }
    }
    const front = (getComputedStyle(node).color.match(/[\d.]+/g) ?? []).map(Number).slice(0, 3);
    const [lighter, darker] = [front, back]
      .map((rgb) =>
        rgb.map((value) => (value / 255 <= 0.04045 ? value / 255 / 12.92 : ((value / 255 + 0.055) / 1.055) ** 2.4)),
      )
      .map(([r, g, b]) => 0.2126 * r! + 0.7152 * g! + 0.0722 * b!)
      .sort((x, y) => y - x);
    return (lighter! + 0.05) / (darker! + 0.05);
  });
}
