import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, type Page } from 'playwright-core';
import WebSocket from 'ws';
import { launchChromium } from '../support/browser.js';
import {
  assertCellsKeepTheirText,
  boxOverrun,
  closeClean,
  openContext,
  pageOverrun,
  screenshots,
  signIn,
} from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { followsMoneyRule } from '../support/money-rule.js';
import { testRecord } from '../support/record.js';
import { writeLog, writeUsage, type LogRow, type UsageRow } from '../../storage/record/usage-writer.js';

/*
 * The console's Activity page (the request log) and the Usage page's latency
 * table in a real headless Chromium against a real gateway: requests made
 * with a member's key, read back as the member and as an admin, the filters
 * kept in the address. No page may break the console's CSP. Screenshots land
 * in test-artifacts/console/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console');
const shoot = screenshots(shots);
const adminEmail = 'admin@activity-browser.test';
const adminPassword = 'activity-admin-pw';
const adminToken = 'activity-browser-admin-token';
const memberEmail = 'member@activity-browser.test';
const memberPassword = 'member-password';
const bulkEmail = 'bulk@activity-browser.test';
const desktop = { width: 1280, height: 800 };
const phone = { width: 390, height: 844 };
const model = 'gpt-4o-mini';

interface Row {
  id: string;
  status: string;
  latency_ms: number | null;
  ttft_ms: number | null;
  settled: boolean;
}

describe('console activity page in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let redisUrl: string;
  let member: { account: string; key: string; keyId: string };
  let bulkAccount: string;
  /**
   * The member's requests by what became of them: `invalid` refused by validation, `vendor` failed at the (mock) vendor
   * with a 502.
   */
  const requests: Record<'completed' | 'stream' | 'refused' | 'failed' | 'invalid' | 'vendor', string[]> = {
    completed: [],
    stream: [],
    refused: [],
    failed: [],
    invalid: [],
    vendor: [],
  };
  /** The message each request's client got with its error, by request id. */
  const messages = new Map<string, string>();

  const adminApi = adminRequest(() => gateway.url, adminToken);

  async function chat(body: Record<string, unknown>, into: keyof typeof requests, status: number): Promise<void> {
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${member.key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    assert.equal(res.status, status, text);
    const id = res.headers.get('x-request-id')!;
    requests[into].push(id);
    if (status >= 400) messages.set(id, (JSON.parse(text) as { error: { message: string } }).error.message);
  }

  before(async () => {
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const { url, redis } = await freshRedis(7);
    redis.disconnect();
    redisUrl = url;
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        ADMIN_TOKEN: adminToken,
        MOCK_STREAM_DELAY_MS: '20',
        // The mock serves every tier as asked, and every tier is granted: the page shows each tier's requests.
        SERVICE_TIER_NATIVE_VENDORS: 'openai,mock',
        SERVICE_TIERS_GRANTED: 'priority,default,flex',
        // The vendor's 502 is answered at its first attempt (no retries to wait through).
        JOB_ATTEMPTS: '1',
      },
    });
    browser = await launchChromium();

    // A member with credit and a key, and the requests of that key: completions, a stream, a refusal and a failure at
    // the vendor.
    const account = (await (
      await adminApi('POST', '/admin/accounts', { email: memberEmail, password: memberPassword, role: 'member' })
    ).json()) as { id: string };
    assert.equal((await adminApi('POST', `/admin/accounts/${account.id}/credits`, { amount_usd: 5 })).status, 200);
    const key = (await (
      await adminApi('POST', '/admin/keys', { name: 'activity key', account_id: account.id })
    ).json()) as { id: string; key: string };
    member = { account: account.id, key: key.key, keyId: key.id };
    for (let i = 0; i < 3; i++)
      await chat({ model, messages: [{ role: 'user', content: `Hello ${i}` }], max_tokens: 8 }, 'completed', 200);
    await chat(
      { model, stream: true, messages: [{ role: 'user', content: 'Count slowly [mock:slow:25]' }], max_tokens: 6 },
      'stream',
      200,
    );
    await chat({ model: 'no-such-model', messages: [{ role: 'user', content: 'Hi' }] }, 'refused', 404);
    await chat({ model, messages: [{ role: 'user', content: 'Fail [mock:error:400]' }] }, 'failed', 400);
    // On another model, so gpt-4o-mini's counts on the Usage page stay those above: a refusal by validation, a vendor's
    // 502.
    await chat({ model: 'mock-chat', temperature: 5, messages: [{ role: 'user', content: 'Hi' }] }, 'invalid', 400);
    await chat({ model: 'mock-chat', messages: [{ role: 'user', content: 'Fail [mock:error:502]' }] }, 'vendor', 502);
    assert.equal(messages.get(requests.invalid[0]!), "Invalid 'temperature': expected a value ≤ 2.");
    const total = Object.values(requests).flat().length;
    await waitFor(
      async () => {
        const page = (await (
          await adminApi('GET', `/admin/requests?account_id=${member.account}&limit=100`)
        ).json()) as { data: Row[] };
        return (
          page.data.length === total &&
          page.data.every((row) => row.latency_ms !== null && (row.status === 'refused' || row.settled))
        );
      },
      15_000,
      'every request in the record',
    );

    // Another account with more requests than a page holds, written as the usage writer writes the api's log events.
    bulkAccount = (
      (await (
        await adminApi('POST', '/admin/accounts', { email: bulkEmail, password: 'bulk-password', role: 'member' })
      ).json()) as { id: string }
    ).id;
    const now = Math.floor(Date.now() / 1000);
    const rows: LogRow[] = Array.from({ length: 62 }, (_, i) => ({
      request_id: `req_bulk_${String(i).padStart(3, '0')}`,
      account_id: bulkAccount,
      key_id: 'key_bulk',
      model: 'mock-chat',
      endpoint: 'chat.completions',
      stream: false,
      status: i % 10 === 0 ? 'failed' : 'completed',
      http_status: i % 10 === 0 ? 502 : 200,
      error_code: i % 10 === 0 ? 'upstream_error' : null,
      latency_ms: 200 + i,
      ttft_ms: null,
      created: now - 60 * (i + 1),
    }));
    const record = await testRecord(redisUrl);
    await record.transaction().execute((tx) => writeLog(tx, rows));
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
  });

  const table = (page: Page) => page.getByRole('table', { name: 'Requests' });
  const bodyRows = (page: Page) => table(page).locator('tbody tr:not(.skeleton-row)');
  /** The rows once `n` are shown (the list loads after the page). */
  async function rowsShown(page: Page, n: number, what: string): Promise<void> {
    await waitFor(
      async () => (await bodyRows(page).count()) === n && !(await bodyRows(page).first().locator('.skeleton').count()),
      10_000,
      `${n} rows: ${what}`,
    ).catch(async (error: unknown) => {
      throw new Error(`${(error as Error).message}; shown: ${JSON.stringify(await bodyRows(page).allInnerTexts())}`);
    });
  }

  it(
    'lists a member’s requests from the nav, filters them in the address (reload and back keep step), details one, ' +
      'and shows an empty range',
    async () => {
      const context = await openContext(browser, gateway.url, desktop);
      const page = await context.newPage();
      await signIn(page, memberEmail, memberPassword);
      // Beside Usage in the nav (drawn once the session and its teams are in, which may be after the address changed).
      const nav = page.getByRole('navigation', { name: 'Console' });
      await nav.getByRole('link', { name: 'Activity', exact: true }).waitFor();
      const navNames = await nav.getByRole('link').allInnerTexts();
      assert.deepEqual(navNames.slice(navNames.indexOf('Usage'), navNames.indexOf('Usage') + 2), ['Usage', 'Activity']);
      await page.getByRole('link', { name: 'Activity', exact: true }).click();
      await page.waitForURL('**/console/activity');
      await page.getByRole('heading', { level: 1, name: 'Activity' }).waitFor();
      const total = Object.values(requests).flat().length;
      await rowsShown(page, total, 'every request of the member');
      const texts = await bodyRows(page).allInnerTexts();
      // Made within a second or two, so in no order to rely on here (the admin's pages below check the order): each shown
      // once as it ended.
      assert.equal(texts.filter((text) => /\bfailed\b/.test(text) && /\b400\b/.test(text)).length, 1, texts.join('\n'));
      assert.equal(
        texts.filter((text) => /no-such-model[\s\S]*refused[\s\S]*\b404\b/.test(text)).length,
        1,
        texts.join('\n'),
      );
      assert.equal(
        texts.filter((text) => /gpt-4o-mini[\s\S]*chat\.completions[\s\S]*completed[\s\S]*\b200\b/.test(text)).length,
        4,
        texts.join('\n'),
      );
      assert.equal(
        texts.filter((text) => /mock-chat[\s\S]*refused[\s\S]*\b400\b/.test(text)).length,
        1,
        texts.join('\n'),
      );
      assert.equal(
        texts.filter((text) => /mock-chat[\s\S]*failed[\s\S]*\b502\b/.test(text)).length,
        1,
        texts.join('\n'),
      );
      for (const text of texts) {
        const amounts = text.match(/\$[\d,]*\.\d+/g) ?? [];
        assert.ok(amounts.every(followsMoneyRule), text);
      }
      // Every row dated, today's too ("Nov 28, 06:14:03 AM"), the whole date and time in its tooltip.
      const today = new Date().toLocaleDateString('en-US', { month: 'short', day: 'numeric' });
      const times = await bodyRows(page).locator('.col-time').allInnerTexts();
      assert.ok(
        times.every((text) => text.trim().startsWith(`${today}, `) && /\d{2}:\d{2}:\d{2}/.test(text)),
        JSON.stringify(times),
      );
      // The key of each: its name, its id in the tooltip.
      const keys = await bodyRows(page)
        .locator('.col-key')
        .evaluateAll((cells) =>
          cells.map((cell) => [(cell as HTMLElement).innerText.trim(), cell.getAttribute('title')]),
        );
      assert.ok(
        keys.length === total &&
          keys.every(([name, title]) => name === 'activity key' && title === `activity key (${member.keyId})`),
        JSON.stringify(keys),
      );
      assert.equal(
        (await table(page).locator('thead th').allInnerTexts()).filter((text) => text.trim() === 'Key').length,
        1,
        'a Key column',
      );
      // The count line: every request, refusals included, and how many did not complete.
      await page
        .getByText(`${total} requests, 2 of them refused and 2 failed · ${total} shown, newest first`)
        .waitFor();
      // The chart of the range counts them all, the refusals and the failures as not completed.
      await page.getByText(`${total} requests · 4 not completed`).waitFor();
      const chart = page.locator('canvas[aria-label^="Requests per 15 minutes"]');
      await waitFor(async () => ((await chart.getAttribute('data-y-ticks')) ?? '') !== '', 5000, 'the chart');
      assert.ok((await pageOverrun(page)) <= 0, 'the page is no wider than the screen');
      assert.ok((await boxOverrun(table(page))) <= 1, 'at 1280 px every column is in sight');
      await shoot(page, 'activity-member-desktop');
      // A narrower window (1024 px): the key, HTTP status and tokens move to the row's details, and the table still fits.
      await page.setViewportSize({ width: 1024, height: 800 });
      await waitFor(
        async () => await bodyRows(page).first().locator('.col-key').isHidden(),
        5000,
        'the key out of the row',
      );
      assert.ok((await boxOverrun(table(page))) <= 1, 'at 1024 px every column is in sight');
      await bodyRows(page).first().getByRole('button', { name: 'Details', exact: true }).click();
      const more = table(page).locator('tr.dt-details-row');
      await more.waitFor();
      assert.match(await more.innerText(), /Key\s+activity key/);
      assert.equal(await page.getByRole('dialog').count(), 0, 'Details opens the row, not the dialog');
      await shoot(page, 'activity-member-narrow');
      await bodyRows(page).first().getByRole('button', { name: 'Less', exact: true }).click();
      await page.setViewportSize(desktop);

      // Status filter: in the address, and the rows follow.
      await page.getByLabel('Status').selectOption('refused');
      await page.waitForURL(/\/console\/activity\?status=refused$/);
      await rowsShown(page, 2, 'the refusals');
      assert.ok((await bodyRows(page).allInnerTexts()).every((text) => /refused/.test(text)));
      // A reload keeps it, and the count line says what it counts.
      await page.reload();
      await rowsShown(page, 2, 'the refusals after a reload');
      assert.equal(await page.getByLabel('Status').inputValue(), 'refused');
      await page.getByText('2 requests, 2 of them refused · 2 shown, newest first').waitFor();
      // A second filter, then back: one step at a time.
      await page.getByLabel('Range').selectOption('1h');
      await page.waitForURL(/\?range=1h&status=refused$/);
      await page.goBack();
      await page.waitForURL(/\/console\/activity\?status=refused$/);
      assert.equal(await page.getByLabel('Range').inputValue(), '24h');
      await page.goBack();
      await page.waitForURL(/\/console\/activity$/);
      await rowsShown(page, total, 'every request again');
      assert.equal(await page.getByLabel('Status').inputValue(), '');

      // The stream's details (opened by its link, `?request=<id>`): its time to first token, latency, cost, tokens and
      // ids.
      const [streamId] = requests.stream;
      await page.goto(`/console/activity?request=${streamId}`);
      const dialog = page.getByRole('dialog', { name: 'Request details' });
      await dialog.waitFor();
      const detail = async (label: string) =>
        (
          await dialog
            .locator('.detail')
            .filter({ has: page.getByText(label, { exact: true }) })
            .locator('dd')
            .innerText()
        ).trim();
      assert.equal(await detail('Request ID'), streamId);
      assert.match(await detail('Latency'), /^\d[\d,.]* (ms|s)$/);
      assert.match(await detail('Time to first token'), /^\d[\d,.]* (ms|s)$/);
      assert.match(await detail('Queue time'), /^\d[\d,.]* (ms|s)$/);
      assert.equal(await detail('Service tier'), 'Default');
      assert.ok(followsMoneyRule(await detail('Cost')), await detail('Cost'));
      assert.match(await detail('Input tokens'), /^\d+$/);
      assert.match(await detail('Output tokens'), /^\d+$/);
      assert.equal(await detail('Cached tokens'), '0');
      assert.equal(await detail('Stream'), 'Yes');
      assert.equal(await detail('Attempts'), '1');
      assert.match(await detail('Finish reason'), /^(stop|length)$/);
      assert.equal(await detail('Key'), 'activity key');
      assert.match(await detail('Answer ID'), /^chatcmpl/);
      assert.notEqual(await detail('Channel'), '—');
      assert.notEqual(await detail('Vendor'), '—');
      await shoot(page, 'activity-detail-desktop');
      await page.keyboard.press('Escape');
      await dialog.waitFor({ state: 'detached' });
      await page.waitForURL(/\/console\/activity$/);
      await rowsShown(page, total, 'every request after the link');
      // The refusal's: its error and the message its client got, no cost settled but nothing owed.
      await bodyRows(page).filter({ hasText: 'no-such-model' }).getByRole('button').click();
      assert.equal(await detail('HTTP status'), '404');
      assert.equal(await detail('Error code'), 'model_not_found');
      assert.equal(await detail('Message'), messages.get(requests.refused[0]!));
      assert.equal(await detail('Cost'), '$0.00');
      assert.equal(await detail('Input tokens'), '—');
      await page.keyboard.press('Escape');
      await dialog.waitFor({ state: 'detached' });
      // A refusal by validation: the message the client read, not only the code.
      await bodyRows(page).filter({ hasText: 'mock-chat' }).filter({ hasText: 'refused' }).getByRole('button').click();
      assert.equal(await detail('HTTP status'), '400');
      assert.equal(await detail('Message'), "Invalid 'temperature': expected a value ≤ 2.");
      await page.keyboard.press('Escape');
      await dialog.waitFor({ state: 'detached' });
      // The vendor's failure (the mock's 502): its code and its message.
      await bodyRows(page).filter({ hasText: 'mock-chat' }).filter({ hasText: 'failed' }).getByRole('button').click();
      assert.equal(await detail('HTTP status'), '502');
      assert.equal(await detail('Error code'), 'mock_error');
      const vendorMessage = messages.get(requests.vendor[0]!)!;
      assert.match(vendorMessage, /Mock vendor failed on purpose/);
      assert.equal(await detail('Message'), vendorMessage);
      await shoot(page, 'activity-failure-detail-desktop');
      await page.keyboard.press('Escape');
      await dialog.waitFor({ state: 'detached' });

      // A filter nothing matches: the empty state, in the table and the chart.
      await page.getByLabel('Status').selectOption('cancelled');
      await page.waitForURL(/status=cancelled/);
      await table(page)
        .getByText(/No requests in this range/)
        .waitFor();
      await page.getByText('0 requests · 0 not completed').waitFor();
      assert.equal(await page.locator('.chart-empty').innerText(), 'No requests in this range');
      await shoot(page, 'activity-empty-desktop');
      await page.getByRole('button', { name: 'Clear filters' }).click();
      await page.waitForURL(/\/console\/activity$/);
      await rowsShown(page, total, 'every request after clearing');

      // The Usage page: latency by model, beside the spend.
      await page.getByRole('link', { name: 'Usage', exact: true }).click();
      await page.waitForURL('**/console/usage');
      const latency = page.getByRole('table', { name: 'Latency by model' });
      const mini = latency.getByRole('row').filter({ has: page.getByRole('cell', { name: model, exact: true }) });
      await mini.waitFor();
      const cells = (await mini.getByRole('cell').allInnerTexts()).map((text) => text.trim());
      // Three completions, the stream and the failure; one in five not completed.
      assert.deepEqual(cells.slice(0, 3), [model, '5', '20%']);
      assert.ok(
        cells.slice(3, 6).every((text) => /^\d[\d,.]* (ms|s)$/.test(text)),
        JSON.stringify(cells),
      );
      // A model no vendor serves is not listed by the name the client made up: its refusal is under "Unknown model".
      assert.equal(await latency.getByRole('row').filter({ hasText: 'no-such-model' }).count(), 0);
      const unknown = (
        await latency.getByRole('row').filter({ hasText: 'Unknown model' }).getByRole('cell').allInnerTexts()
      ).map((text) => text.trim());
      assert.deepEqual(unknown.slice(0, 3), ['Unknown model', '1', '100%']);
      await shoot(page, 'usage-latency-desktop');
      await closeClean(context, 'member, desktop');
    },
  );

  it('shows an admin every account, narrows to one with the account filter, and loads more a page at a time', async () => {
    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await signIn(page, adminEmail, adminPassword);
    await page.goto('/console/activity');
    // Every account's, the first page of 50: the member's newest on top.
    await rowsShown(page, 50, 'the first page of every account');
    // The Account column shows an account's id until the account list is in, then its email.
    await bodyRows(page).first().getByText(memberEmail, { exact: true }).waitFor();
    await page.getByLabel('Account').selectOption({ label: bulkEmail });
    await page.waitForURL(new RegExp(`account_id=${bulkAccount}`));
    await rowsShown(page, 50, 'the first page of the bulk account');
    assert.ok(
      (await bodyRows(page).allInnerTexts()).every((text) => text.includes(bulkEmail) && !text.includes(memberEmail)),
    );
    // The admin's Account column too: every column in sight at 1280 px, the filters on one line.
    assert.ok((await boxOverrun(table(page))) <= 1, 'at 1280 px every column is in sight');
    // An admin's seven filters: on two lines at most, none cut to less than its choices need.
    const filterBoxes = await page
      .getByRole('group', { name: 'Filters' })
      .locator('select')
      .evaluateAll((elements) =>
        elements.map((element) => ({
          top: Math.round(element.getBoundingClientRect().top),
          width: element.getBoundingClientRect().width,
        })),
      );
    assert.equal(filterBoxes.length, 7);
    assert.ok(
      new Set(filterBoxes.map((box) => box.top)).size <= 2,
      `the filters on two lines at most: ${JSON.stringify(filterBoxes)}`,
    );
    assert.ok(
      filterBoxes.every((box) => box.width >= 96),
      `no filter squeezed: ${JSON.stringify(filterBoxes)}`,
    );
    await shoot(page, 'activity-admin-desktop');
    await page.getByRole('button', { name: 'Load more' }).click();
    await rowsShown(page, 62, 'both pages');
    assert.equal(await page.getByRole('button', { name: 'Load more' }).count(), 0, 'no more to load');
    // Every row once, newest first.
    const times = await bodyRows(page).evaluateAll((trs) =>
      trs.map((tr) => (tr.querySelector('td') as HTMLElement).innerText),
    );
    assert.equal(new Set(times).size, 62, 'one row a minute, none twice');
    const details = await bodyRows(page).evaluateAll((trs) =>
      trs.map((tr) => tr.querySelector('.col-latency')!.textContent),
    );
    assert.deepEqual(
      details,
      Array.from({ length: 62 }, (_, i) => `${200 + i} ms`),
      'latency by row: newest (200 ms) to oldest',
    );
    // The failures among them, by the status filter.
    await page.getByLabel('Status').selectOption('failed');
    await page.waitForURL(/status=failed/);
    await rowsShown(page, 7, 'the failed ones');
    await closeClean(context, 'admin, desktop');
  });

  it('says when the list cannot load and loads it on Try again; shows placeholder rows while loading', async () => {
    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await signIn(page, memberEmail, memberPassword);
    let failing = true;
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    await page.route(/\/console\/api\/requests\?/, async (route) => {
      if (failing) {
        failing = false;
        await route.fulfill({
          status: 503,
          contentType: 'application/json',
          body: JSON.stringify({
            error: {
              message: 'The record is unavailable.',
              type: 'server_error',
              param: null,
              code: 'record_unavailable',
            },
          }),
        });
        return;
      }
      await held;
      await route.continue();
    });
    await page.goto('/console/activity');
    const alert = page
      .getByRole('alert')
      .filter({ hasText: 'Could not load the requests: The record is unavailable.' });
    await alert.waitFor();
    await shoot(page, 'activity-error-desktop');
    await page.getByRole('button', { name: 'Try again' }).click();
    // Held: the placeholder rows stand in.
    await table(page).locator('.skeleton-row').first().waitFor();
    release();
    await rowsShown(page, Object.values(requests).flat().length, 'after Try again');
    assert.equal(await alert.count(), 0);
    await page.unrouteAll({ behavior: 'wait' });
    await closeClean(context, 'error state');
  });

  it(
    'fits a 390 px phone: the page never wider than the screen, each request a card with its time, model, status ' +
      'and cost',
    async () => {
      for (const [who, email, password] of [
        ['member', memberEmail, memberPassword],
        ['admin', adminEmail, adminPassword],
      ] as const) {
        const context = await openContext(browser, gateway.url, phone);
        const page = await context.newPage();
        await signIn(page, email, password);
        await page.goto('/console/activity');
        await rowsShown(page, who === 'member' ? Object.values(requests).flat().length : 50, `${who} on a phone`);
        await waitFor(
          async () => ((await page.locator('canvas').getAttribute('data-y-ticks')) ?? '') !== '',
          5000,
          'the chart',
        );
        const fits = await page.evaluate(() => ({
          page: document.documentElement.scrollWidth - window.innerWidth,
          body: document.body.scrollWidth - window.innerWidth,
          table: (() => {
            const box = document.querySelector('.table-scroll')!;
            return { hidden: box.scrollWidth - box.clientWidth, right: box.getBoundingClientRect().right };
          })(),
          // What matters of the first request, whole in sight.
          cells: ['col-time', 'col-model', 'col-status', 'col-cost'].map((name) => {
            const rect = document.querySelector(`.activity-table tbody tr .${name}`)!.getBoundingClientRect();
            return { name, left: rect.left, right: rect.right, width: rect.width };
          }),
        }));
        assert.ok(fits.page <= 0 && fits.body <= 0, `${who}: the page overflows: ${JSON.stringify(fits)}`);
        assert.ok(
          fits.table.hidden <= 1 && fits.table.right <= phone.width,
          `${who}: nothing to scroll sideways for: ${JSON.stringify(fits)}`,
        );
        assert.ok(
          fits.cells.every((cell) => cell.width > 0 && cell.left >= 0 && cell.right <= phone.width),
          `${who}: time, model, status and cost in sight: ${JSON.stringify(fits)}`,
        );
        await shoot(page, `activity-${who}-phone`);
        if (who === 'admin') {
          // The request dialog wraps an email after its @ or at a dot or hyphen, never inside a word.
          await bodyRows(page)
            .filter({ hasText: memberEmail })
            .first()
            .locator('.col-time')
            .getByRole('button')
            .click();
          const dialog = page.getByRole('dialog', { name: 'Request details' });
          await dialog.waitFor();
          const account = dialog
            .locator('.detail')
            .filter({ has: page.getByText('Account', { exact: true }) })
            .locator('dd');
          assert.equal((await account.innerText()).replace(/\s+/g, ''), memberEmail);
          // The email's lines as laid out: where each character sits.
          const lines = await account.evaluate((dd) => {
            const text = dd.textContent ?? '';
            const tops: number[] = [];
            const walker = document.createTreeWalker(dd, NodeFilter.SHOW_TEXT);
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
              for (let i = 0; i < (node.textContent ?? '').length; i++) {
                const range = document.createRange();
                range.setStart(node, i);
                range.setEnd(node, i + 1);
                tops.push(Math.round(range.getBoundingClientRect().top));
              }
            }
            const out: string[] = [];
            tops.forEach((top, i) => {
              if (i === 0 || top !== tops[i - 1]) out.push('');
              out[out.length - 1] = `${out.at(-1) ?? ''}${text[i] ?? ''}`;
            });
            return out;
          });
          assert.ok(lines.length > 1, `the email wraps in a phone's dialog: ${JSON.stringify(lines)}`);
          assert.ok(
            lines.every((line, i) => i === lines.length - 1 || /@$|-$/.test(line) || lines[i + 1]!.startsWith('.')),
            `wrapped after @ or -, or before a dot: ${JSON.stringify(lines)}`,
          );
          await shoot(page, 'activity-admin-detail-phone');
          await page.keyboard.press('Escape');
        }
        if (who === 'member') {
          await bodyRows(page).first().getByRole('button').click();
          const dialog = page.getByRole('dialog', { name: 'Request details' });
          await dialog.waitFor();
          const box = (await dialog.boundingBox())!;
          assert.ok(box.x >= 0 && box.x + box.width <= phone.width, `the dialog fits: ${JSON.stringify(box)}`);
          assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth));
          await shoot(page, 'activity-detail-phone');
          await page.keyboard.press('Escape');
          await page.goto('/console/usage');
          await page
            .getByRole('table', { name: 'Latency by model' })
            .getByRole('cell', { name: model, exact: true })
            .waitFor();
          assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth));
          await shoot(page, 'usage-latency-phone');
        }
        await closeClean(context, `${who}, phone`);
      }
    },
  );

  it('shows the tier that served each request, and filters by tier in the address', async () => {
    // A member of their own whose requests name tiers (made last: the counts above are of the accounts before it).
    const email = 'tiers@activity-browser.test';
    const password = 'tiers-password';
    const account = (await (await adminApi('POST', '/admin/accounts', { email, password, role: 'member' })).json()) as {
      id: string;
    };
    assert.equal((await adminApi('POST', `/admin/accounts/${account.id}/credits`, { amount_usd: 5 })).status, 200);
    const { key } = (await (
      await adminApi('POST', '/admin/keys', { name: 'tier key', account_id: account.id })
    ).json()) as { key: string };
    const ids: Record<string, string> = {};
    for (const tier of ['flex', 'priority', undefined]) {
      const res = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model,
          messages: [{ role: 'user', content: 'Hi' }],
          max_tokens: 8,
          ...(tier ? { service_tier: tier } : {}),
        }),
      });
      await res.arrayBuffer();
      assert.equal(res.status, 200);
      ids[tier ?? 'default'] = res.headers.get('x-request-id')!;
    }
    await waitFor(
      async () => {
        const page = (await (await adminApi('GET', `/admin/requests?account_id=${account.id}`)).json()) as {
          data: Row[];
        };
        return page.data.length === 3 && page.data.every((row) => row.settled && row.latency_ms !== null);
      },
      15_000,
      'the tiered requests in the record',
    );

    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await signIn(page, email, password);
    await page.goto('/console/activity');
    await rowsShown(page, 3, 'the three tiered requests');
    // A tier other than the default one is a badge beside the status.
    const tiers = await bodyRows(page).evaluateAll((trs) =>
      trs.map((tr) => tr.querySelector('.tier-badge')?.textContent?.trim() ?? 'default'),
    );
    assert.deepEqual([...tiers].sort(), ['default', 'flex', 'priority']);
    assert.ok((await boxOverrun(table(page))) <= 1, 'at 1280 px every column is in sight, the tier badges included');

    await page.getByLabel('Tier').selectOption('flex');
    await page.waitForURL(/\/console\/activity\?service_tier=flex$/);
    await rowsShown(page, 1, 'the flex request');
    await page.getByText('1 requests · 0 not completed').waitFor();
    await page.reload();
    await rowsShown(page, 1, 'the flex request after a reload');
    assert.equal(await page.getByLabel('Tier').inputValue(), 'flex');
    await bodyRows(page).first().getByRole('button').click();
    const dialog = page.getByRole('dialog', { name: 'Request details' });
    await dialog.waitFor();
    const detail = async (label: string) =>
      (
        await dialog
          .locator('.detail')
          .filter({ has: page.getByText(label, { exact: true }) })
          .locator('dd')
          .innerText()
      ).trim();
    assert.equal(await detail('Request ID'), ids.flex);
    assert.equal(await detail('Service tier'), 'Flex');
    await shoot(page, 'activity-tier-detail-desktop');
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'detached' });

    await page.getByLabel('Tier').selectOption('priority');
    await page.waitForURL(/\?service_tier=priority$/);
    await rowsShown(page, 1, 'the priority request');
    assert.match(await bodyRows(page).first().innerText(), /priority/);
    await page.getByRole('button', { name: 'Clear filters' }).click();
    await page.waitForURL(/\/console\/activity$/);
    await rowsShown(page, 3, 'every tier after clearing');
    assert.equal(await page.getByLabel('Tier').inputValue(), '');
    await shoot(page, 'activity-tiers-desktop');
    await closeClean(context, 'tiers, desktop');
  });

  it(
    'marks a request answered from the response cache and one that shared a vendor call, and the Usage page says ' +
      'what the cache saved',
    async () => {
      // A member of their own whose settlements are written as the usage writer writes them: a hit, a shared call, a miss
      // and one without the cache. The two that reached the vendor used its prompt cache too, which the pages keep apart
      // from the response cache: the miss only wrote it (dearer than plain input: a saving below zero), the other read
      // most of its prompt from it.
      const email = 'cache@activity-browser.test';
      const password = 'cache-password';
      const account = (await (
        await adminApi('POST', '/admin/accounts', { email, password, role: 'member' })
      ).json()) as {
        id: string;
      };
      const key = (await (
        await adminApi('POST', '/admin/keys', { name: 'cache key', account_id: account.id })
      ).json()) as { id: string };
      const now = Math.floor(Date.now() / 1000);
      const marks = [
        ['hit', 1234, 0],
        ['coalesced', 0, 900],
        ['miss', 0, 900],
        [undefined, 0, 900],
      ] as const;
      const rows: UsageRow[] = marks.map(([cache, saved, cost], i) => ({
        request_id: `req_cache_${cache ?? 'none'}`,
        account_id: account.id,
        key_id: key.id,
        model,
        vendor: 'mock',
        input_tokens: 10,
        cached_tokens: 0,
        output_tokens: 5,
        images: 0,
        audio_seconds: 0,
        video_seconds: 0,
        cost_micros: cost,
        status: 'completed',
        created: now - 10 * (i + 1),
        duration_ms: 12,
        endpoint: 'chat.completions',
        ...(cache ? { cache } : {}),
        saved_micros: saved,
        ...(cache === 'miss' ? { input_tokens: 1000, cache_write_tokens: 1000, prompt_cache_saved_micros: -125 } : {}),
        ...(cache === undefined ? { input_tokens: 2000, cached_tokens: 1500, prompt_cache_saved_micros: 987 } : {}),
      }));
      const record = await testRecord(redisUrl);
      await record.transaction().execute((tx) => writeUsage(tx, rows));

      const context = await openContext(browser, gateway.url, desktop);
      const page = await context.newPage();
      await signIn(page, email, password);
      await page.goto('/console/activity');
      await rowsShown(page, 4, "the cache's requests");
      // Newest first: the hit, the shared call, the miss (its answer stored), and the request without the cache,
      // unmarked.
      const badges = await bodyRows(page).evaluateAll((trs) =>
        trs.map((tr) => tr.querySelector('.cache-badge')?.textContent?.trim() ?? ''),
      );
      assert.deepEqual(badges, ['cache hit', 'shared call', 'cache miss', '']);
      // The hit's saving in its row, beside its cost; its tokens not read as billed ones.
      const hitRow = bodyRows(page).first();
      assert.equal(
        (await hitRow.locator('.col-cost').innerText()).replace(/\s+/g, ' ').trim(),
        '$0.00 saved $0.001234',
      );
      assert.equal((await hitRow.locator('.col-tokens').innerText()).trim(), '—');
      assert.equal(
        await hitRow.locator('.col-tokens').getAttribute('title'),
        'Answered from the cache: no tokens billed',
      );
      assert.equal(await bodyRows(page).locator('.activity-saved').count(), 1, 'a saving only where there is one');
      assert.ok(
        (await boxOverrun(table(page))) <= 1,
        'at 1280 px every column is in sight, the cache badges and the saving included',
      );
      await shoot(page, 'activity-cache-desktop');
      // The cache filter, in the address: a reload keeps it.
      for (const [choice, badge] of [
        ['hit', 'cache hit'],
        ['miss', 'cache miss'],
        ['coalesced', 'shared call'],
      ] as const) {
        await page.getByLabel('Cache').selectOption(choice);
        await page.waitForURL(new RegExp(`/console/activity\\?cache=${choice}$`));
        await rowsShown(page, 1, `the ${choice}`);
        assert.equal((await bodyRows(page).first().locator('.cache-badge').innerText()).trim(), badge);
      }
      await page.getByLabel('Cache').selectOption('none');
      await page.waitForURL(/\/console\/activity\?cache=none$/);
      await page.reload();
      await rowsShown(page, 1, 'the one not cached, after a reload');
      assert.equal(await page.getByLabel('Cache').inputValue(), 'none');
      assert.equal(await bodyRows(page).first().locator('.cache-badge').count(), 0);
      await page.getByText('1 request · 1 shown, newest first').waitFor();
      await page.getByRole('button', { name: 'Clear filters' }).click();
      await page.waitForURL(/\/console\/activity$/);
      await rowsShown(page, 4, 'every request of the cache again');
      await bodyRows(page).first().getByRole('button').click();
      const dialog = page.getByRole('dialog', { name: 'Request details' });
      await dialog.waitFor();
      const detail = async (label: string) =>
        (
          await dialog
            .locator('.detail')
            .filter({ has: page.getByText(label, { exact: true }) })
            .locator('dd')
            .innerText()
        ).trim();
      assert.match(await detail('Cost'), /saved \$0\.001234/);
      assert.equal(await detail('Response cache'), 'Hit (answered from the cache)');
      // A hit asked no vendor: its prompt cache did nothing.
      assert.deepEqual([await detail('Cache-write tokens'), await detail('Prompt cache saved')], ['0', '$0.00']);
      await shoot(page, 'activity-cache-detail-desktop');
      await page.keyboard.press('Escape');
      await dialog.waitFor({ state: 'detached' });
      // The vendor's prompt caching, in the details of the two that reached it: what it read, wrote and saved, named as
      // the vendor's.
      for (const [nth, cached, written, saved] of [
        [
          2,
          '0',
          '1,000',
          /^-\$0\.000125 \(by the vendor’s prompt caching: its cache writes cost more than its reads saved\)$/,
        ],
        [3, '1,500', '0', /^\$0\.000987 \(by the vendor’s prompt caching\)$/],
      ] as const) {
        await bodyRows(page).nth(nth).getByRole('button').click();
        await dialog.waitFor();
        assert.deepEqual([await detail('Cached tokens'), await detail('Cache-write tokens')], [cached, written]);
        assert.match(await detail('Prompt cache saved'), saved);
        if (nth === 3) await shoot(page, 'activity-prompt-cache-detail-desktop');
        await page.keyboard.press('Escape');
        await dialog.waitFor({ state: 'detached' });
      }

      await page.goto('/console/usage');
      const spend = page.locator('.stat').filter({ has: page.getByText('Spend', { exact: true }) });
      await spend.locator('.stat-note').waitFor();
      assert.equal(
        (await spend.locator('.stat-note').innerText()).trim(),
        'saved by the response cache: $0.001234 on 1 hit',
      );
      // The vendor's prompt caching, apart: under the input it lowered, net (987 − 125 micro-dollars), and a column of
      // its own.
      const input = page.locator('.stat').filter({ has: page.getByText('Input tokens', { exact: true }) });
      assert.equal(
        (await input.locator('.stat-note').innerText()).trim(),
        'prompt cache saved $0.000862: 1,500 tokens read from it, 1,000 written',
      );
      const byModel = page.getByRole('table', { name: 'By model', exact: true });
      assert.equal(
        (
          await byModel.locator('tbody tr:not(.dt-details-row) td[data-label="Prompt cache saved"]').first().innerText()
        ).trim(),
        '$0.000862',
      );
      assert.equal(
        (await byModel.locator('tbody tr:not(.dt-details-row) td[data-label="Saved"]').first().innerText()).trim(),
        '$0.001234',
      );
      assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth));
      await shoot(page, 'usage-cache-saved-desktop');
      await closeClean(context, 'cache, desktop');
    },
  );

  it(
    'shows a Realtime session as one row of its own: its length, responses, tokens, cost and why it closed; each ' +
      'response beside it',
    async () => {
      // A member of their own, with one session on the mock: two responses, then the client closes it.
      const email = 'realtime@activity-browser.test';
      const password = 'realtime-password';
      const account = (await (
        await adminApi('POST', '/admin/accounts', { email, password, role: 'member' })
      ).json()) as {
        id: string;
      };
      assert.equal((await adminApi('POST', `/admin/accounts/${account.id}/credits`, { amount_usd: 5 })).status, 200);
      const { key } = (await (
        await adminApi('POST', '/admin/keys', { name: 'realtime key', account_id: account.id })
      ).json()) as { key: string };
      const socket = new WebSocket(`${gateway.url.replace(/^http/, 'ws')}/v1/realtime?model=mock-realtime`, {
        headers: { authorization: `Bearer ${key}` },
        handshakeTimeout: 15_000,
      });
      const events: Array<{ type: string; [field: string]: unknown }> = [];
      socket.on('message', (data) => events.push(JSON.parse(String(data)) as { type: string }));
      const closed = new Promise<number>((resolve) => socket.once('close', (code) => resolve(code)));
      await new Promise<void>((resolve, reject) => {
        socket.once('open', () => resolve());
        socket.once('error', reject);
      });
      const seen = (type: string, n: number) =>
        waitFor(
          () => events.filter((event) => event.type === type).length >= n,
          15_000,
          `${n} × ${type}: saw ${events.map((event) => event.type).join(', ')}`,
        );
      await seen('session.created', 1);
      for (const [i, text] of ['Hello there', 'And once more'].entries()) {
        socket.send(
          JSON.stringify({
            type: 'conversation.item.create',
            item: { type: 'message', role: 'user', content: [{ type: 'input_text', text }] },
          }),
        );
        socket.send(JSON.stringify({ type: 'response.create', response: { output_modalities: ['text'] } }));
        await seen('response.done', i + 1);
      }
      socket.close(1000);
      await closed;

      interface SessionRow extends Row {
        endpoint: string | null;
        input_tokens: number;
        output_tokens: number;
        cost_micros: number;
        cost_usd: number;
        finish_reason: string | null;
      }
      let rows: SessionRow[] = [];
      await waitFor(
        async () => {
          rows = (
            (await (await adminApi('GET', `/admin/requests?account_id=${account.id}`)).json()) as { data: SessionRow[] }
          ).data;
          return rows.length === 3 && rows.every((row) => row.settled);
        },
        20_000,
        'the session and its two responses in the record',
      ).catch((error: unknown) => {
        throw new Error(`${(error as Error).message}: ${JSON.stringify(rows)}`);
      });
      const session = rows.find((row) => row.endpoint === 'realtime')!;
      assert.ok(session, JSON.stringify(rows));
      const responses = rows.filter((row) => row.endpoint === 'realtime.response');
      assert.equal(responses.length, 2);
      assert.ok(session.input_tokens > 0 && session.output_tokens > 0, JSON.stringify(session));

      for (const viewport of [desktop, phone]) {
        const context = await openContext(browser, gateway.url, viewport);
        const page = await context.newPage();
        await signIn(page, email, password);
        await page.goto('/console/activity');
        await rowsShown(page, 3, 'the session and its responses');
        // The session reads as one: its endpoint named, its length where a request's latency is.
        const sessionRow = bodyRows(page).filter({ hasText: 'Realtime session' });
        assert.equal(await sessionRow.count(), 1);
        assert.equal(await bodyRows(page).filter({ hasText: 'Realtime response' }).count(), 2);
        const length = sessionRow.locator('.col-duration');
        assert.match((await length.innerText()).trim(), /^\d[\d,.]* (ms|s)$/);
        // On a phone each cell says what it is: a session's length is its duration, not a latency.
        if (viewport === phone)
          assert.equal(await length.evaluate((cell) => getComputedStyle(cell, '::before').content), '"Duration "');
        assert.match((await length.getAttribute('title')) ?? '', /, 2 responses$/);
        assert.ok(
          (await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)) <= 0,
          'no sideways scroll',
        );
        if (viewport === desktop)
          assert.ok((await boxOverrun(table(page))) <= 1, 'at 1280 px every column is in sight');
        await shoot(page, `activity-realtime-${viewport === phone ? 'phone' : 'desktop'}`);

        await sessionRow.getByRole('button').click();
        const dialog = page.getByRole('dialog', { name: 'Session details' });
        await dialog.waitFor();
        const detail = async (label: string) =>
          (
            await dialog
              .locator('.detail')
              .filter({ has: page.getByText(label, { exact: true }) })
              .locator('dd')
              .innerText()
          ).trim();
        assert.equal(await detail('Session ID'), session.id);
        assert.equal(await detail('Endpoint'), 'Realtime session (realtime)');
        assert.match(await detail('Duration'), /^\d[\d,.]* (ms|s)$/);
        assert.equal(await detail('Responses'), '2');
        assert.equal(await detail('Input tokens'), session.input_tokens.toLocaleString('en-US'));
        assert.equal(await detail('Output tokens'), session.output_tokens.toLocaleString('en-US'));
        const cost = await detail('Cost');
        assert.ok(followsMoneyRule(cost.split(' ')[0]!), cost);
        assert.equal(Number(cost.split(' ')[0]!.slice(1)), Number(session.cost_usd.toFixed(6)));
        assert.equal(await detail('Close reason'), 'Closed by the client (client_closed)');
        if (viewport === phone) {
          const box = (await dialog.boundingBox())!;
          assert.ok(box.x >= 0 && box.x + box.width <= phone.width, `the dialog fits: ${JSON.stringify(box)}`);
        }
        await shoot(page, `activity-realtime-detail-${viewport === phone ? 'phone' : 'desktop'}`);
        await page.keyboard.press('Escape');
        await dialog.waitFor({ state: 'detached' });

        // A response: its own row, naming its session.
        await bodyRows(page).filter({ hasText: 'Realtime response' }).first().getByRole('button').click();
        const response = page.getByRole('dialog', { name: 'Request details' });
        await response.waitFor();
        assert.equal(
          (
            await response
              .locator('.detail')
              .filter({ has: page.getByText('Session', { exact: true }) })
              .locator('dd')
              .innerText()
          ).trim(),
          session.id,
        );
        await page.keyboard.press('Escape');
        await closeClean(context, `realtime session, ${viewport === phone ? 'phone' : 'desktop'}`);
      }

      // A session that billed no response, written as the worker writes its row: its length is the worker's, and a
      // response row of another account whose id happens to start with the session's is not counted as one of its.
      const now = Math.floor(Date.now() / 1000);
      const written = (
        fields: Partial<UsageRow> & Pick<UsageRow, 'request_id' | 'account_id' | 'key_id' | 'endpoint'>,
      ): UsageRow => ({
        model: 'mock-realtime',
        vendor: 'mock',
        input_tokens: 0,
        cached_tokens: 0,
        output_tokens: 0,
        images: 0,
        audio_seconds: 0,
        video_seconds: 0,
        cost_micros: 0,
        status: 'completed',
        created: now - 5,
        duration_ms: 65_000,
        finish_reason: 'insufficient_quota',
        ...fields,
      });
      const record = await testRecord(redisUrl);
      await record.transaction().execute((tx) =>
        writeUsage(tx, [
          written({ request_id: 'sess_quiet', account_id: account.id, key_id: 'key_quiet', endpoint: 'realtime' }),
          written({
            request_id: 'sess_quiet:resp_elsewhere',
            account_id: bulkAccount,
            key_id: 'key_bulk',
            endpoint: 'realtime.response',
            duration_ms: 10,
          }),
        ]),
      );
      const context = await openContext(browser, gateway.url, desktop);
      const page = await context.newPage();
      await signIn(page, email, password);
      await page.goto('/console/activity');
      await rowsShown(page, 4, 'both sessions and the responses');
      // Found by its length, whichever session the list puts first (the other may be the newer by a second or two).
      const quiet = bodyRows(page).filter({ hasText: 'Realtime session' }).filter({ hasText: '1 min 5 s' });
      assert.equal(await quiet.count(), 1, 'the quiet session, its 65 s written as 1 min 5 s');
      assert.equal((await quiet.locator('.col-duration').innerText()).trim(), '1 min 5 s');
      await quiet.getByRole('button').click();
      const dialog = page.getByRole('dialog', { name: 'Session details' });
      await dialog.waitFor();
      const detail = async (label: string) =>
        (
          await dialog
            .locator('.detail')
            .filter({ has: page.getByText(label, { exact: true }) })
            .locator('dd')
            .innerText()
        ).trim();
      assert.equal(await detail('Session ID'), 'sess_quiet');
      assert.equal(await detail('Responses'), '0');
      assert.equal(await detail('Close reason'), 'Out of credit (insufficient_quota)');
      await closeClean(context, 'a quiet session');
    },
  );
  it(
    "shows a batch request with what its line has (its outcome, its worker's time), links it to its batch, and " +
      'filters by batch in the address',
    async () => {
      const email = 'batch@activity-browser.test';
      const password = 'batch-password';
      const account = (await (
        await adminApi('POST', '/admin/accounts', { email, password, role: 'member' })
      ).json()) as {
        id: string;
      };
      const key = (await (
        await adminApi('POST', '/admin/keys', { name: 'batch key', account_id: account.id })
      ).json()) as { id: string };
      const now = Math.floor(Date.now() / 1000);
      // Settled as the worker settles a batch's requests: no HTTP answer, no api latency, its run's time (0: none
      // recorded).
      const line = (
        request_id: string,
        status: string,
        duration_ms: number,
        created: number,
        error?: { code: string; message: string },
      ): UsageRow => ({
        request_id,
        account_id: account.id,
        key_id: key.id,
        model,
        vendor: 'mock',
        input_tokens: 10,
        cached_tokens: 0,
        output_tokens: status === 'completed' ? 5 : 0,
        images: 0,
        audio_seconds: 0,
        video_seconds: 0,
        cost_micros: status === 'completed' ? 450 : 0,
        status,
        created,
        duration_ms,
        endpoint: 'messages',
        ...(error ? { error_code: error.code, error_message: error.message } : {}),
      });
      const batch = 'msgbatch_activity01';
      const record = await testRecord(redisUrl);
      await record.transaction().execute((tx) =>
        writeUsage(tx, [
          line(`${batch}.0`, 'completed', 1234, now - 30),
          line(`${batch}.1`, 'failed', 0, now - 20, {
            code: 'mock_error',
            message: 'Mock vendor failed on purpose with status 500.',
          }),
          line('msgbatch_other02.0', 'completed', 800, now - 10),
        ]),
      );

      const context = await openContext(browser, gateway.url, desktop);
      const page = await context.newPage();
      await signIn(page, email, password);
      await page.goto('/console/activity');
      await rowsShown(page, 3, 'the batch requests');
      const ours = bodyRows(page).filter({ has: page.locator(`a[href="/console/batches?batch=${batch}"]`) });
      assert.equal(await ours.count(), 2, 'each of its requests links to its batch');
      // HTTP: what a batch line has (its outcome's code, else "batch"); latency: its worker's time, else "batch".
      const cells = await ours.evaluateAll((trs) =>
        trs.map((tr) => [
          tr.querySelector('.col-http')!.textContent!.trim(),
          tr.querySelector('.col-latency')!.textContent!.trim(),
        ]),
      );
      assert.deepEqual(cells, [
        ['mock_error', 'batch'],
        ['batch', '1.23 s'],
      ]);
      assert.ok((await boxOverrun(table(page))) <= 1, 'at 1280 px every column is in sight, the batch links included');
      await shoot(page, 'activity-batch-desktop');

      // Its details: the batch, linked.
      await ours.last().locator('.col-time').getByRole('button').click();
      const dialog = page.getByRole('dialog', { name: 'Request details' });
      await dialog.waitFor();
      const detail = async (label: string) =>
        (
          await dialog
            .locator('.detail')
            .filter({ has: page.getByText(label, { exact: true }) })
            .locator('dd')
            .innerText()
        ).trim();
      assert.equal((await detail('Batch')).replace(/\s+/g, ''), batch);
      assert.match(await detail('Latency'), /^1\.23 s \(a batch request/);
      await page.keyboard.press('Escape');
      await dialog.waitFor({ state: 'detached' });
      // The failed one's: what its result told the client, as the worker noted it.
      await ours.first().locator('.col-time').getByRole('button').click();
      await dialog.waitFor();
      assert.equal(await detail('HTTP status'), 'None (a batch request)');
      assert.equal(await detail('Message'), 'Mock vendor failed on purpose with status 500.');
      await page.keyboard.press('Escape');
      await dialog.waitFor({ state: 'detached' });

      // The link opens the Batches page at the batch.
      await ours.first().getByRole('link').click();
      await page.waitForURL(`**/console/batches?batch=${batch}`);

      // `batch=<id>` (the Batches page's link here): its requests alone, kept by a reload, counted.
      await page.goto(`/console/activity?batch=${batch}`);
      await rowsShown(page, 2, "the batch's requests");
      await page.getByText('2 requests, 1 of them failed · 2 shown, newest first').waitFor();
      await page.reload();
      await rowsShown(page, 2, "the batch's requests after a reload");
      assert.equal(await bodyRows(page).filter({ hasText: 'other02' }).count(), 0);
      await page.getByRole('button', { name: "Show every batch's requests" }).click();
      await page.waitForURL(/\/console\/activity$/);
      await rowsShown(page, 3, 'every batch request again');
      await closeClean(context, 'batches, desktop');

      const phoneContext = await openContext(browser, gateway.url, phone);
      const phonePage = await phoneContext.newPage();
      await signIn(phonePage, email, password);
      await phonePage.goto(`/console/activity?batch=${batch}`);
      await rowsShown(phonePage, 2, 'the batch on a phone');
      assert.ok(
        (await phonePage.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)) <= 0,
        'nothing wider than a phone',
      );
      // A card says "Latency 1.23 s" for the timed one, plain "batch" for the one not timed.
      const latencies = await bodyRows(phonePage)
        .locator('.col-latency')
        .evaluateAll((cells) =>
          cells.map((cell) => `${getComputedStyle(cell, '::before').content}|${cell.textContent!.trim()}`),
        );
      assert.deepEqual(latencies, ['none|batch', '"Latency "|1.23 s']);
      await shoot(phonePage, 'activity-batch-phone');
      await closeClean(phoneContext, 'batches, phone');
    },
  );

  it(
    'keeps each cell\'s text in its cell at 1280 and 390 px: a speech request\'s "512 / 7 s audio", a large token ' +
      'count, a saving',
    async () => {
      // A member of their own whose settlements are written as the usage writer writes them.
      const email = 'fit@activity-browser.test';
      const password = 'fit-password';
      const account = (await (
        await adminApi('POST', '/admin/accounts', { email, password, role: 'member' })
      ).json()) as {
        id: string;
      };
      const key = (await (
        await adminApi('POST', '/admin/keys', {
          name: 'a key with a name long enough to be cut short in its cell',
          account_id: account.id,
        })
      ).json()) as { id: string };
      const now = Math.floor(Date.now() / 1000);
      const settled = (
        fields: Partial<UsageRow> & Pick<UsageRow, 'request_id' | 'model' | 'endpoint' | 'created'>,
      ): UsageRow => ({
        account_id: account.id,
        key_id: key.id,
        vendor: 'mock',
        input_tokens: 0,
        cached_tokens: 0,
        output_tokens: 0,
        images: 0,
        audio_seconds: 0,
        video_seconds: 0,
        cost_micros: 1_234,
        status: 'completed',
        duration_ms: 2_345,
        ...fields,
      });
      const record = await testRecord(redisUrl);
      await record.transaction().execute((tx) =>
        writeUsage(tx, [
          settled({
            request_id: 'req_fit_speech',
            model: 'mock-speech',
            endpoint: 'audio.speech',
            input_tokens: 512,
            output_tokens: 140,
            audio_seconds: 7,
            created: now - 10,
          }),
          settled({
            request_id: 'req_fit_large',
            model: 'gpt-4o-mini',
            endpoint: 'chat.completions',
            input_tokens: 1_234_567,
            output_tokens: 98_765,
            cost_micros: 12_345_678,
            created: now - 20,
          }),
          settled({
            request_id: 'req_fit_saved',
            model: 'gpt-4o-mini',
            endpoint: 'chat.completions',
            input_tokens: 10,
            output_tokens: 5,
            cost_micros: 0,
            cache: 'hit',
            saved_micros: 1_234,
            created: now - 30,
          }),
        ]),
      );

      for (const [label, viewport] of [
        ['desktop', desktop],
        ['phone', phone],
      ] as const) {
        for (const [who, signInAs, signInPassword, address] of [
          ['member', email, password, '/console/activity'],
          ['admin', adminEmail, adminPassword, `/console/activity?account_id=${account.id}`],
        ] as const) {
          const context = await openContext(browser, gateway.url, viewport);
          const page = await context.newPage();
          await signIn(page, signInAs, signInPassword);
          await page.goto(address);
          await rowsShown(page, 3, `${who}'s rows at ${label} width`);
          const speech = bodyRows(page).filter({ hasText: 'mock-speech' });
          if (viewport === desktop) {
            // The speech row's tokens as the issue saw them: the text's tokens in, the audio's seconds out.
            assert.equal(
              (await speech.locator('.col-tokens').innerText()).replace(/\s+/g, ' ').trim(),
              '512 / 7 s audio',
            );
            assert.ok((await boxOverrun(table(page))) <= 1, `${who}, ${label}: every column in sight`);
          }
          // Newest first: the speech, the large count, the saving.
          for (const [i, name] of ['speech', 'large', 'saved'].entries())
            await assertCellsKeepTheirText(bodyRows(page).nth(i), `${who}, ${label}, the ${name} row`);
          assert.ok((await pageOverrun(page)) <= 0, `${who}, ${label}: no sideways scroll`);
          await shoot(page, `activity-fit-${who}-${label}`);
          await closeClean(context, `cells kept, ${who}, ${label}`);
        }
      }
    },
  );
});
