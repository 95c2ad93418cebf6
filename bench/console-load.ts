/**
 * How fast the web console is usable on localhost, in Debian's Chromium
 * (playwright-core), against a gateway started as `npm start` would be:
 * for each page, from navigation to its data on screen (the first row of its
 * table or its form), cold (a new browser context: nothing cached) and warm
 * (the same context again: hashed assets come from the cache). Also the
 * bytes of JavaScript the browser fetched, as sent (gzip).
 *
 *   node --import tsx bench/console-load.ts [runs=10]
 */
import { execFileSync } from 'node:child_process';
import { chromium, type Page } from 'playwright-core';
import { freshRedis, startGateway } from '../test/support/gateway.js';
import { root } from './procs.js';

const runs = Number(process.argv[2] ?? 10);
const email = 'bench@console.test';
const password = 'bench-console-pw';

execFileSync(process.execPath, ['bin/build.mjs'], { cwd: root, stdio: 'inherit' });
const { url, redis } = await freshRedis(14);
redis.disconnect();
const gateway = await startGateway({ env: { REDIS_URL: url, ADMIN_EMAIL: email, ADMIN_PASSWORD: password } });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
  args: [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});

const pages: Array<{ path: string; ready: (page: Page) => Promise<unknown> }> = [
  { path: '/console', ready: (page) => page.getByRole('button', { name: 'Sign in' }).waitFor() },
  { path: '/console/pricing', ready: (page) => page.getByRole('cell', { name: 'gpt-4o', exact: true }).waitFor() },
  { path: '/console/keys', ready: (page) => page.getByRole('button', { name: 'Create key' }).waitFor() },
  // The account has no usage yet: its tables say so once the report arrived, and the chart (its own chunk) has drawn
  // its canvas.
  {
    path: '/console/usage',
    ready: (page) =>
      Promise.all([
        page.getByText('No usage in this range.').first().waitFor(),
        page.waitForFunction(() =>
          [...document.querySelectorAll('canvas')].some((c) => c.width > 0 && c.getContext('2d') !== null),
        ),
      ]),
  },
];

const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor((p / 100) * values.length))]!;
const rows: string[] = [];
let scriptBytes = 0;

for (const { path, ready } of pages) {
  const cold: number[] = [];
  const warm: number[] = [];
  for (let run = 0; run < runs; run++) {
    const context = await browser.newContext({ baseURL: gateway.url, viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    if (path !== '/console') {
      await page.goto('/console');
      await page.getByLabel('Email').fill(email);
      await page.getByLabel('Password').fill(password);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForURL('**/console/keys');
      // Signing in loaded the app: for a cold figure, empty the cache of this context (cookies stay).
      const session = await context.newCDPSession(page);
      await session.send('Network.clearBrowserCache');
    }
    let bytes = 0;
    let counting = true;
    page.on('response', (response) => {
      if (counting && response.url().endsWith('.js'))
        void response.headerValue('content-length').then((length) => (bytes += Number(length ?? 0)));
    });
    for (const into of [cold, warm]) {
      if (into === warm) counting = false;
      const started = performance.now();
      await page.goto(path);
      await ready(page);
      into.push(performance.now() - started);
    }
    if (path === '/console/usage') scriptBytes = Math.max(scriptBytes, bytes);
    await context.close();
  }
  rows.push(
    `| \`${path}\` | ${percentile(cold, 50).toFixed(0)} | ${percentile(cold, 90).toFixed(0)} | ` +
      `${percentile(warm, 50).toFixed(0)} | ${percentile(warm, 90).toFixed(0)} |`,
  );
}

await browser.close();
await gateway.stop();
console.log(`${runs} runs per page; ms from navigation to the page's data on screen\n`);
console.log('| page | cold p50 | cold p90 | warm p50 | warm p90 |\n|---|---|---|---|---|');
console.log(rows.join('\n'));
console.log(`\nJavaScript fetched for the usage page (gzip, as sent): ${scriptBytes} bytes`);
process.exit(0);
