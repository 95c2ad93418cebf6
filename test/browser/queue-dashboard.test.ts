import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser } from 'playwright-core';
import { createKey, freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';

/*
 * The queue dashboard in a real headless Chromium: an admin signed in to the
 * console opens it from Admin → Queues, and bull-board renders the gateway's
 * queues under the dashboard's CSP. A screenshot lands in
 * test-artifacts/queue-dashboard/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'queue-dashboard');
const adminEmail = 'admin@dashboard-browser.test';
const adminPassword = 'dashboard-admin-pw';
const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

describe('queue dashboard in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let clientKey: string;

  before(async () => {
    assert.ok(existsSync(chromiumPath), `Chromium is needed at ${chromiumPath} (apt-get install chromium), or set CHROMIUM_PATH`);
    // The console's bundle is part of the build `npm start` runs.
    execFileSync(process.execPath, ['bin/build.mjs'], { cwd: root, stdio: 'inherit' });
    mkdirSync(shots, { recursive: true });
    const { url, redis } = await freshRedis(4);
    clientKey = (await createKey(redis)).key;
    redis.disconnect();
    gateway = await startGateway({ env: { REDIS_URL: url, ADMIN_EMAIL: adminEmail, ADMIN_PASSWORD: adminPassword } });
    browser = await chromium.launch({
      executablePath: chromiumPath,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
  });

  it('signed out, answers a styled page that leads to the console, still a 401', async () => {
    for (const viewport of [{ width: 1280, height: 800 }, { width: 375, height: 812 }]) {
      const context = await browser.newContext({ viewport, baseURL: gateway.url });
      const page = await context.newPage();
      const answer = await page.goto('/admin/queues');
      assert.equal(answer!.status(), 401);
      await page.getByRole('heading', { name: 'Sign in to see the queues' }).waitFor();
      const look = await page.evaluate(() => {
        const main = getComputedStyle(document.querySelector('main')!);
        const link = document.querySelector('a')!;
        return { card: main.backgroundColor, radius: main.borderRadius, font: getComputedStyle(document.body).fontFamily, href: link.getAttribute('href'), overflow: document.documentElement.scrollWidth - window.innerWidth };
      });
      assert.equal(look.card, 'rgb(255, 255, 255)', 'a card, not a bare page');
      assert.equal(look.radius, '12px');
      assert.doesNotMatch(look.font, /^"?Times/);
      assert.equal(look.href, '/console/queue-dashboard');
      assert.ok(look.overflow <= 1, `${look.overflow}px wider than the screen`);
      await page.screenshot({ path: join(shots, `signed-out-${viewport.width}.png`) });
      await context.close();
    }
  });

  it('opens from the console for an admin and renders every queue, a job’s secret redacted', async () => {
    // One finished chat job whose prompt carries the client's own key.
    const client = gateway.client(clientKey);
    await client.chat.completions.create({ model: 'mock-chat', messages: [{ role: 'user', content: `remember ${clientKey}` }] });

    const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, baseURL: gateway.url });
    const page = await context.newPage();
    const problems: string[] = [];
    page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
    page.on('console', (message) => {
      // The page asks for Google Fonts; the dashboard's CSP keeps it to its own origin (system fonts stand in).
      if (message.type() === 'error' && !/fonts\.googleapis\.com/.test(message.text())) problems.push(message.text());
    });

    await page.goto('/console');
    await page.getByLabel('Email').fill(adminEmail);
    await page.getByLabel('Password').fill(adminPassword);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL('**/console/keys');
    await page.goto('/console/admin/queues');
    await page.getByRole('link', { name: 'Queue dashboard' }).click();
    await page.waitForURL('**/admin/queues');
    for (const name of ['chat', 'embeddings', 'image', 'audio', 'video']) {
      await page.getByText(name, { exact: true }).first().waitFor({ timeout: 10_000 });
    }
    await page.screenshot({ path: join(shots, 'overview-desktop.png') });

    // The chat queue's completed job: its card and data shown, the key in its prompt redacted (in the answer the page reads, too).
    const listed = (await (await context.request.get('/admin/queues/api/queues')).json()) as { queues: Array<{ name: string; displayName?: string }> };
    const chat = listed.queues.find((queue) => (queue.displayName ?? queue.name) === 'chat')!.name;
    await page.goto(`/admin/queues/queue/${encodeURIComponent(chat)}?status=completed`);
    await page.getByText('chat.completions · mock-chat').first().waitFor({ timeout: 10_000 });
    await page.getByText('requestId:').first().waitFor();
    await page.screenshot({ path: join(shots, 'chat-completed-desktop.png') });
    assert.equal((await page.content()).includes(clientKey), false, 'the client key is not on the page');
    const jobs = await (await context.request.get(`/admin/queues/api/queues?activeQueue=${encodeURIComponent(chat)}&status=completed`)).text();
    assert.ok(jobs.includes('remember [redacted]') && !jobs.includes(clientKey), jobs);
    assert.deepEqual(problems, []);
    await context.close();
  });
});
