import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, type Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { noSidewaysScroll, signIn } from '../support/console-browser.js';
import { AccountStore } from '../../api/accounts/account-store.js';
import { buildOnce } from '../support/build.js';
import { createKey, freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { testRecord } from '../support/record.js';

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
const memberEmail = 'member@dashboard-browser.test';
const memberPassword = 'dashboard-member-pw';
const viewports = [
  { width: 1280, height: 800 },
  { width: 375, height: 812 },
];

describe('queue dashboard in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let clientKey: string;

  before(async () => {
    // The console's bundle is part of the build `npm start` runs.
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const { url, redis } = await freshRedis(4);
    clientKey = (await createKey(redis)).key;
    await new AccountStore(redis, await testRecord(redis)).create({
      email: memberEmail,
      password: memberPassword,
      role: 'member',
    });
    redis.disconnect();
    gateway = await startGateway({ env: { REDIS_URL: url, ADMIN_EMAIL: adminEmail, ADMIN_PASSWORD: adminPassword } });
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
  });

  /** The card, its heading, text and button as the page draws them: what makes one page look like another. */
  async function look(page: Page, card: string, button: string) {
    return page.evaluate(
      ({ cardSelector, buttonSelector }) => {
        // No named functions in here: the page runs this code as it is, without the test's module helpers.
        const box = getComputedStyle(document.querySelector(cardSelector)!);
        const heading = getComputedStyle(document.querySelector(`${cardSelector} h1`)!);
        const action = getComputedStyle(document.querySelector(buttonSelector)!);
        // The backdrop: the nearest ancestor of the card that paints one (the console's is a div, this page's the
        // body).
        let backdrop = 'none';
        for (
          let element = document.querySelector(cardSelector)!.parentElement;
          element && backdrop === 'none';
          element = element.parentElement
        ) {
          const { backgroundImage } = getComputedStyle(element);
          if (backgroundImage !== 'none') backdrop = backgroundImage;
        }
        return {
          backdrop,
          card: [box.backgroundColor, box.borderRadius, box.borderTopColor, box.boxShadow !== 'none'],
          font: getComputedStyle(document.body).fontFamily,
          heading: [heading.fontSize, heading.fontWeight, heading.color],
          button: [action.backgroundColor, action.color, action.height, action.borderTopLeftRadius],
        };
      },
      { cardSelector: card, buttonSelector: button },
    );
  }

  it(
    'signed out, answers a page styled like the console sign-in that leads to it, still a 401; a member gets the ' +
      'same look with a 403',
    async () => {
      for (const viewport of viewports) {
        const context = await browser.newContext({ viewport, baseURL: gateway.url });
        const page = await context.newPage();
        await page.goto('/console');
        await page.getByRole('button', { name: 'Sign in' }).waitFor();
        const signInLook = await look(page, '.auth-card', '.auth-card .button-primary');

        const answer = await page.goto('/admin/queues');
        assert.equal(answer!.status(), 401);
        await page.getByRole('heading', { name: 'Sign in to see the queues' }).waitFor();
        assert.deepEqual(
          await look(page, 'main', 'a.button'),
          signInLook,
          'the same card, type and button as the console sign-in',
        );
        const link = page.getByRole('link', { name: 'Sign in to the console' });
        assert.equal(await link.getAttribute('href'), '/console/queue-dashboard');
        await noSidewaysScroll(page, 'signed out');
        await page.screenshot({ path: join(shots, `signed-out-${viewport.width}.png`) });
        // The link leads to the console's sign-in, and once signed in as an admin, to the dashboard.
        await link.click();
        await page.getByLabel('Email').fill(adminEmail);
        await page.getByLabel('Password').fill(adminPassword);
        await page.getByRole('button', { name: 'Sign in' }).click();
        // It opens in a tab of its own.
        const [tab] = await Promise.all([
          context.waitForEvent('page'),
          page.getByRole('link', { name: 'Queue dashboard' }).click(),
        ]);
        await tab.waitForURL('**/admin/queues');
        await tab.getByText('chat', { exact: true }).first().waitFor({ timeout: 10_000 });
        assert.ok(page.url().endsWith('/console/admin/queues'), `the console stays where it was: ${page.url()}`);
        await context.close();

        // A member signed in to the console: refused with a 403, on the same card, back to the console.
        const memberContext = await browser.newContext({ viewport, baseURL: gateway.url });
        const memberPage = await memberContext.newPage();
        await signIn(memberPage, memberEmail, memberPassword);
        const refused = await memberPage.goto('/console/queue-dashboard');
        assert.equal(refused!.status(), 403);
        await memberPage.getByRole('heading', { name: 'Administrators only' }).waitFor();
        assert.deepEqual(await look(memberPage, 'main', 'a.button'), signInLook);
        assert.equal(
          await memberPage.getByRole('link', { name: 'Back to the console' }).getAttribute('href'),
          '/console',
        );
        await memberPage.screenshot({ path: join(shots, `member-refused-${viewport.width}.png`) });
        await memberContext.close();
      }
    },
  );

  it('opens from the console for an admin and renders every queue, a job’s secret redacted', async () => {
    // One finished chat job whose prompt carries the client's own key.
    const client = gateway.client(clientKey);
    await client.chat.completions.create({
      model: 'mock-chat',
      messages: [{ role: 'user', content: `remember ${clientKey}` }],
    });

    const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, baseURL: gateway.url });
    const page = await context.newPage();
    const problems: string[] = [];
    const watch = (watched: Page) => {
      watched.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
      // Nothing refused by its policy either: the page asks for nothing off its own origin (no Google Fonts).
      watched.on('console', (message) => {
        if (message.type() === 'error') problems.push(message.text());
      });
    };
    watch(page);

    await signIn(page, adminEmail, adminPassword);
    await page.goto('/console/admin/queues');
    const [tab] = await Promise.all([
      context.waitForEvent('page'),
      page.getByRole('link', { name: 'Queue dashboard' }).click(),
    ]);
    watch(tab);
    await tab.waitForURL('**/admin/queues');
    assert.equal((await tab.content()).includes('fonts.googleapis.com'), false, 'no stylesheet the policy refuses');
    await tab.close();
    await page.goto('/admin/queues');
    for (const name of ['chat', 'embeddings', 'image', 'audio', 'video']) {
      await page.getByText(name, { exact: true }).first().waitFor({ timeout: 10_000 });
    }
    await page.screenshot({ path: join(shots, 'overview-desktop.png') });

    // The chat queue's completed job: its card and data shown, the key in its prompt redacted (in the answer the page
    // reads, too).
    const listed = (await (await context.request.get('/admin/queues/api/queues')).json()) as {
      queues: Array<{ name: string; displayName?: string }>;
    };
    const chat = listed.queues.find((queue) => (queue.displayName ?? queue.name) === 'chat')!.name;
    await page.goto(`/admin/queues/queue/${encodeURIComponent(chat)}?status=completed`);
    await page.getByText('chat.completions · mock-chat').first().waitFor({ timeout: 10_000 });
    await page.getByText('requestId:').first().waitFor();
    await page.screenshot({ path: join(shots, 'chat-completed-desktop.png') });
    assert.equal((await page.content()).includes(clientKey), false, 'the client key is not on the page');
    const jobs = await (
      await context.request.get(`/admin/queues/api/queues?activeQueue=${encodeURIComponent(chat)}&status=completed`)
    ).text();
    assert.ok(jobs.includes('remember [redacted]') && !jobs.includes(clientKey), jobs);
    assert.deepEqual(problems, []);
    await context.close();
  });
});
