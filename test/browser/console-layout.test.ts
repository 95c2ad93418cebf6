import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { type Browser } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { openContext, screenshots, signIn, tablesLoaded } from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { recordUrlFor } from '../support/record.js';

/*
 * The console as a first operator meets it, in a real headless Chromium
 * against a real gateway started without ADMIN_EMAIL: the sign-in page says
 * how the first admin is made; a key made with `npm run keys -- create`
 * (the Default account's) is on the admin's Keys page and in its Usage; and
 * the tables show what matters: at 1280 px every table's last column in
 * sight, on a 390 px phone Activity's time, model, status and cost, Keys
 * as cards inside the screen, a revoked key by its name,
 * and the sidebar down to the bottom of a long page. Screenshots land in
 * test-artifacts/console/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console');
const shoot = screenshots(shots);
const adminToken = 'layout-browser-admin-token';
const adminEmail = 'first-admin-with-a-rather-long-address@layout-browser.test';
const adminPassword = 'layout-admin-pw';
const memberEmail = 'member-with-a-long-email-address@layout-browser.test';
const desktop = { width: 1280, height: 800 };
const phone = { width: 390, height: 844 };
/** Every console page with a table. */
const tablePages = [
  'keys',
  'usage',
  'activity',
  'pricing',
  'admin/accounts',
  'admin/keys',
  'admin/channels',
  'admin/queues',
];

describe('console layout and the first admin in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let redisUrl: string;
  let revokedKeyId: string;

  const adminApi = adminRequest(() => gateway.url, adminToken);

  async function chat(key: string, body: Record<string, unknown>): Promise<number> {
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    await res.arrayBuffer();
    return res.status;
  }

  before(async () => {
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const { url, redis } = await freshRedis(10);
    redis.disconnect();
    redisUrl = url;
    // No ADMIN_EMAIL: nobody can sign in as an admin yet.
    gateway = await startGateway({ env: { REDIS_URL: url, ADMIN_TOKEN: adminToken, MOCK_STREAM_DELAY_MS: '5' } });
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
  });

  it('says on the sign-in page how the first admin is made, while there is none', async () => {
    const context = await openContext(browser, gateway.url, phone);
    const page = await context.newPage();
    await page.goto('/console');
    const hint = page.getByRole('region', { name: 'No administrator yet' });
    await hint.waitFor();
    const text = await hint.innerText();
    assert.match(text, /ADMIN_EMAIL=you@example\.com ADMIN_PASSWORD='at least 8 chars' npm start/);
    assert.match(text, /npm run accounts -- create --email you@example\.com --password '…' --role admin/);
    // In sight on the phone: not wider than the screen.
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth));
    await shoot(page, 'sign-in-first-admin-phone');
    await context.close();
  });

  it(
    'sets up: the first admin made as the hint says, a key made with npm run keys, a member, requests, a revoked ' +
      'key',
    async () => {
      // The accounts CLI, as the hint says.
      const env = { ...process.env, REDIS_URL: redisUrl, DATABASE_URL: await recordUrlFor(redisUrl) };
      const run = promisify(execFile);
      await run(
        process.execPath,
        [
          '--import',
          'tsx',
          'bin/accounts.ts',
          'create',
          '--email',
          adminEmail,
          '--password',
          adminPassword,
          '--role',
          'admin',
        ],
        { cwd: root, env },
      );
      const made = await run(
        process.execPath,
        ['--import', 'tsx', 'bin/keys.ts', 'create', '--name', 'made on the command line'],
        { cwd: root, env },
      );
      const secret = made.stdout.trim();
      assert.match(secret, /^sy-/);

      const member = (await (
        await adminApi('POST', '/admin/accounts', { email: memberEmail, password: 'member-password', role: 'member' })
      ).json()) as { id: string };
      assert.equal((await adminApi('POST', `/admin/accounts/${member.id}/credits`, { amount_usd: 5 })).status, 200);
      const memberKey = (await (
        await adminApi('POST', '/admin/keys', { name: 'soon revoked', account_id: member.id })
      ).json()) as { id: string; key: string };
      revokedKeyId = memberKey.id;
      // Long model names, a flex request, a failure and a refusal: the widest rows Activity draws.
      const statuses = [
        await chat(secret, { model: 'claude-sonnet-4-5', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8 }),
        await chat(secret, {
          model: 'gpt-4o-mini',
          messages: [{ role: 'user', content: 'Hi' }],
          max_tokens: 8,
          service_tier: 'flex',
        }),
        await chat(secret, { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Fail [mock:error:400]' }] }),
        await chat(memberKey.key, {
          model: 'gemini-2.5-pro',
          messages: [{ role: 'user', content: 'Hi' }],
          max_tokens: 8,
        }),
        await chat(memberKey.key, {
          model: 'no-such-model-with-a-long-name',
          messages: [{ role: 'user', content: 'Hi' }],
        }),
      ];
      assert.deepEqual(
        statuses.map((status) => status < 300),
        [true, true, false, true, false],
        JSON.stringify(statuses),
      );
      await waitFor(
        async () => {
          const page = (await (await adminApi('GET', '/admin/requests?limit=100')).json()) as {
            data: Array<{ status: string; settled: boolean; latency_ms: number | null }>;
          };
          return (
            page.data.length === 5 &&
            page.data.every((row) => row.latency_ms !== null && (row.status !== 'completed' || row.settled))
          );
        },
        20_000,
        'every request in the record',
      );
      assert.equal((await adminApi('DELETE', `/admin/keys/${revokedKeyId}`)).status, 200);
      // The config says an admin can sign in now (a new page reads it).
      await waitFor(
        async () =>
          ((await (await fetch(`${gateway.url}/console/api/config`)).json()) as { has_admin: boolean }).has_admin,
        15_000,
        'has_admin',
      );
    },
  );

  it(
    'shows the admin the command line’s key on the Keys page, with its account, and counts it in Usage as Activity ' +
      'does',
    async () => {
      const context = await openContext(browser, gateway.url, desktop);
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      // No hint once an admin exists.
      // Under the Default account's heading, its table named by it.
      const others = page.getByRole('region', { name: 'Other accounts’ keys' });
      const row = others
        .getByRole('table', { name: 'Default', exact: true })
        .getByRole('row')
        .filter({ hasText: 'made on the command line' });
      await row.waitFor();
      await page
        .getByRole('table', { name: 'Your keys' })
        .getByText(/No keys of your own yet/)
        .waitFor();
      await shoot(page, 'keys-admin-cli-desktop');

      await page.getByRole('link', { name: 'Usage', exact: true }).click();
      await page.waitForURL('**/console/usage');
      assert.equal(await page.getByLabel('Account').inputValue(), '');
      const byKey = page.getByRole('table', { name: 'By key' });
      const cliRow = byKey.getByRole('row').filter({ hasText: 'made on the command line' });
      await cliRow.waitFor();
      // Every request, as Activity lists them: the CLI key's two completed and its failure, the member's one and its
      // refusal.
      const requestsCard = page
        .locator('.stat')
        .filter({ has: page.locator('.stat-label', { hasText: /^Requests$/ }) });
      const requests = requestsCard.locator('.stat-value');
      await waitFor(async () => (await requests.innerText()).trim() === '5', 10_000, 'five requests in usage').catch(
        async (error: unknown) => {
          throw new Error(
            `${(error as Error).message}: ${await requests.innerText()}; by key: ${await byKey.innerText()}`,
          );
        },
      );
      assert.equal((await requestsCard.locator('.stat-note').innerText()).trim(), 'of which 1 refused · 1 failed');
      assert.deepEqual((await cliRow.getByRole('cell').nth(1).innerText()).trim().split(/\s*\n\s*/), ['3', '1 failed']);
      // The revoked key by its name, marked, never its id.
      const revoked = byKey.getByRole('row').filter({ hasText: 'soon revoked' });
      await revoked.waitFor();
      assert.match(await revoked.innerText(), /soon revoked\s*revoked/);
      assert.ok(!(await byKey.innerText()).includes(revokedKeyId), 'no key shown by its id');
      await shoot(page, 'usage-admin-all-desktop');

      const listed = page.getByRole('table', { name: 'Requests' }).locator('tbody tr:not(.skeleton-row)');
      await page.goto('/console/activity');
      await waitFor(async () => (await listed.count()) === 5, 10_000, 'five requests in activity');
      // The same five Usage counts, the refusal among them.
      await context.close();
    },
  );

  it('keeps every table’s last column in sight at 1280 px, and the sidebar down to the bottom of a long page', async () => {
    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await signIn(page, adminEmail, adminPassword);
    for (const path of tablePages) {
      await page.goto(`/console/${path}`);
      await tablesLoaded(page, path);
      const tables = await page.evaluate(() =>
        [...document.querySelectorAll('table')].map((table) => {
          // The last header shown (a column a wider screen shows, or the Details button a narrower one needs, is not).
          const headers = [...table.querySelectorAll('thead th')].filter(
            (th) => getComputedStyle(th).display !== 'none',
          );
          const last = headers[headers.length - 1]!.getBoundingClientRect();
          const box = table.closest('.table-scroll')!.getBoundingClientRect();
          return {
            name: table.getAttribute('aria-labelledby') ?? table.className,
            last: { left: last.left, right: last.right },
            box: { left: box.left, right: box.right },
            width: window.innerWidth,
          };
        }),
      );
      assert.ok(tables.length > 0, `${path}: a table`);
      for (const table of tables) {
        assert.ok(
          table.last.right <= table.box.right + 1 && table.last.right <= table.width,
          `${path}, ${table.name}: the last column header ends at ${table.last.right}, past its box ` +
            `(${table.box.right}) or the screen`,
        );
        assert.ok(
          table.last.left >= table.box.left,
          `${path}, ${table.name}: the last column header starts left of its box`,
        );
      }
    }
    // Pricing, the longest page: the sidebar's column runs to the page's bottom, its account box in sight there.
    await page.goto('/console/pricing');
    await tablesLoaded(page, 'pricing');
    const long = await page.evaluate(() => {
      window.scrollTo(0, document.documentElement.scrollHeight);
      const sidebar = document.querySelector('.sidebar')!.getBoundingClientRect();
      const account = document.querySelector('.account-box')!.getBoundingClientRect();
      return {
        page: document.documentElement.scrollHeight,
        sidebarTop: sidebar.top + window.scrollY,
        sidebarBottom: sidebar.bottom + window.scrollY,
        accountBottom: account.bottom,
        viewport: window.innerHeight,
      };
    });
    assert.ok(long.page > 2 * desktop.height, `a long page: ${long.page} px`);
    assert.ok(
      long.sidebarTop <= 0 && long.sidebarBottom >= long.page - 1,
      `the sidebar runs from the top to the bottom of the page: ${JSON.stringify(long)}`,
    );
    assert.ok(
      long.accountBottom <= long.viewport && long.accountBottom > long.viewport - 200,
      `the account box in sight at the bottom: ${JSON.stringify(long)}`,
    );
    await shoot(page, 'pricing-sidebar-desktop');
    await context.close();
  });

  it(
    'on a 390 px phone shows Activity’s time, model, status and cost, and Keys as cards inside the screen, nothing ' +
      'to scroll sideways',
    async () => {
      const context = await openContext(browser, gateway.url, phone);
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);

      await page.goto('/console/activity');
      const rows = page.getByRole('table', { name: 'Requests' }).locator('tbody tr:not(.skeleton-row)');
      await waitFor(async () => (await rows.count()) === 5, 10_000, 'five requests on the phone');
      for (const cell of ['col-time', 'col-model', 'col-status', 'col-cost']) {
        const boxes = await rows.evaluateAll(
          (trs, name) =>
            trs.map((tr) => {
              const rect = tr.querySelector(`.${name}`)!.getBoundingClientRect();
              return { left: rect.left, right: rect.right, width: rect.width, height: rect.height };
            }),
          cell,
        );
        for (const box of boxes)
          assert.ok(
            box.width > 0 && box.height > 0 && box.left >= 0 && box.right <= phone.width,
            `${cell} in sight on the phone: ${JSON.stringify(box)}`,
          );
      }
      assert.ok(
        await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth),
        'the page no wider than the phone',
      );
      await shoot(page, 'activity-admin-cards-phone');

      // Keys: a card a key, inside the screen, nothing to scroll sideways.
      await page.goto('/console/keys');
      await tablesLoaded(page, 'keys');
      const others = page.getByRole('region', { name: 'Other accounts’ keys' });
      await others.getByRole('row').filter({ hasText: 'made on the command line' }).waitFor();
      const cards = await others
        .locator('tbody tr')
        .evaluateAll((trs) =>
          trs.map((tr) => tr.getBoundingClientRect()).map((rect) => ({ left: rect.left, right: rect.right })),
        );
      assert.ok(
        cards.length > 0 && cards.every((card) => card.left >= 0 && card.right <= phone.width),
        `the cards inside the screen: ${JSON.stringify(cards)}`,
      );
      assert.equal(await others.locator('.scroll-hint').count(), 0, 'nothing to scroll sideways for');
      assert.ok(
        await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth),
        'the page no wider than the phone',
      );
      await shoot(page, 'keys-admin-phone');

      // Usage: the revoked key by its name.
      await page.goto('/console/usage');
      const revoked = page.getByRole('table', { name: 'By key' }).getByRole('row').filter({ hasText: 'soon revoked' });
      await revoked.waitFor();
      assert.match(await revoked.innerText(), /revoked/);
      await context.close();
    },
  );
});
