import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import {
  assertFits,
  closeClean,
  countLayoutShift,
  layoutShift,
  leadingCount,
  openContext,
  screenshots,
  signIn,
  stat,
  tablesLoaded,
} from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { usageRows } from '../support/record.js';

/*
 * The Usage and Queues pages' numbers against the request log, in a real
 * headless Chromium against a real gateway (billing the mock, so requests
 * cost and cache hits save): two members' chat requests, refusals (a model no
 * vendor serves, a bad temperature), a vendor's failure and response-cache
 * hits. Usage's request count is the record's for its days and Activity's;
 * By model sums to it and agrees with Latency by model, which names no made-up
 * model; the Accounts card counts every account; the cache's saving is named
 * and is the hits' sum; the charts' day axes reach the last bar; Queues says
 * its finished counts are what BullMQ keeps. At 1280 and 390 px no table is
 * wider than its box. Screenshots land in test-artifacts/console/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console');
const shoot = screenshots(shots, 5000);
const adminEmail = 'admin@usage-browser.test';
const adminPassword = 'usage-admin-pw';
const adminToken = 'usage-browser-admin-token';
const desktop = { width: 1280, height: 800 };
const phone = { width: 390, height: 844 };
const unknownModel = 'no-such-model-xyz';

/** A UTC day as the console labels it ("Nov 27"). */
const dayLabel = (seconds: number) =>
  new Intl.DateTimeFormat('en-US', { month: 'short', day: 'numeric', timeZone: 'UTC' }).format(
    new Date(seconds * 1000),
  );

describe('usage and queues pages: counts defined once, in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let redisUrl: string;
  const statuses: number[] = [];
  const adminApi = adminRequest(() => gateway.url, adminToken);

  async function chat(
    key: string,
    body: Record<string, unknown>,
    headers: Record<string, string> = {},
  ): Promise<number> {
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    await res.arrayBuffer();
    statuses.push(res.status);
    return res.status;
  }

  async function member(email: string, credit: number, keyName: string): Promise<string> {
    const account = (await (
      await adminApi('POST', '/admin/accounts', { email, password: 'member-password', role: 'member' })
    ).json()) as { id: string };
    if (credit > 0)
      assert.equal(
        (await adminApi('POST', `/admin/accounts/${account.id}/credits`, { amount_usd: credit })).status,
        200,
      );
    const key = (await (await adminApi('POST', '/admin/keys', { name: keyName, account_id: account.id })).json()) as {
      key: string;
    };
    return key.key;
  }

  before(async () => {
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const { url, redis } = await freshRedis(11);
    redis.disconnect();
    redisUrl = url;
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        ADMIN_TOKEN: adminToken,
        MOCK_BILLING: 'on',
      },
    });
    browser = await launchChromium();

    const alice = await member('alice@usage-browser.test', 5, 'alice key');
    const bob = await member('bob@usage-browser.test', 5, 'bob key');
    // An account with no traffic: counted among the accounts, not among the active.
    await member('carol@usage-browser.test', 0, 'carol key');
    const ask = (content: string, extra: Record<string, unknown> = {}) => ({
      model: 'gpt-4o-mini',
      max_tokens: 8,
      messages: [{ role: 'user', content }],
      ...extra,
    });
    for (let i = 0; i < 3; i++) assert.equal(await chat(alice, ask(`Hello ${i}`)), 200);
    assert.equal(await chat(alice, { ...ask('Hi'), model: unknownModel }), 404);
    assert.equal(await chat(alice, ask('Too hot', { temperature: 5 })), 400);
    // The response cache: a miss stores the answer, the same request again is a hit.
    const cached = { 'cache-control': 'max-age=300' };
    for (let i = 0; i < 3; i++) assert.equal(await chat(alice, ask('Cache me', { temperature: 0 }), cached), 200);
    for (let i = 0; i < 2; i++) assert.equal(await chat(bob, { ...ask(`Bob ${i}`), model: 'gpt-4o' }), 200);
    assert.equal(await chat(bob, { ...ask('Hi'), model: unknownModel }), 404);
    for (let i = 0; i < 2; i++) assert.equal(await chat(bob, ask('Bob caches', { temperature: 0 }), cached), 200);
    // Last: the vendor's failure (a 502 may cool the mock's channel for what would come after).
    assert.equal(await chat(alice, ask('Fail [mock:error:502]')), 502);

    await waitFor(
      async () => {
        const rows = await usageRows(redisUrl);
        return (
          rows.length === statuses.length &&
          rows.every((row) => row.latency_ms !== null && (row.status === 'refused' || row.settled))
        );
      },
      20_000,
      'every request in the record',
    );
    const hits = (await usageRows(redisUrl)).filter((row) => row.cache === 'hit');
    assert.equal(hits.length, 3, 'three cache hits');
    assert.ok(
      hits.every((row) => row.saved_micros > 0),
      'each hit saved something (the mock is billed)',
    );
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
  });

  async function newContext(viewport: { width: number; height: number }): Promise<BrowserContext> {
    const context = await openContext(browser, gateway.url, viewport);
    // Layout shift, as console.test.ts measures it: nothing moves as the numbers come in.
    await countLayoutShift(context);
    return context;
  }

  /** A page opened afresh (its layout shift counted from its start): no shift once its numbers are in. */
  async function openSteady(page: Page, path: string, what: string): Promise<void> {
    await page.goto(path);
    await tablesLoaded(page, what);
    await page.waitForLoadState('networkidle');
    const cls = await layoutShift(page);
    assert.ok(cls < 0.1, `${what}: cumulative layout shift ${cls.toFixed(3)}`);
  }

  /** A table's rows as { lead, cells }: the lead cell's text and each labelled cell's, by its column's label. */
  async function tableRows(table: Locator): Promise<Array<{ lead: string; cells: Record<string, string> }>> {
    return table.locator('tbody tr:not(.dt-details-row)').evaluateAll((trs) =>
      trs.map((tr) => ({
        lead: (tr.querySelector('.dt-lead') as HTMLElement | null)?.innerText.trim() ?? '',
        cells: Object.fromEntries(
          [...tr.querySelectorAll('td[data-label]')].map((td) => [
            td.getAttribute('data-label')!,
            (td as HTMLElement).innerText.trim(),
          ]),
        ),
      })),
    );
  }

  it('counts on Usage every request the record holds for its days, as Activity does, refusals and failures said', async () => {
    const context = await newContext(desktop);
    const page = await context.newPage();
    await signIn(page, adminEmail, adminPassword);
    await openSteady(page, '/console/usage', 'usage at 1280 px');
    const report = await page.evaluate(
      async () => (await fetch('/console/api/usage?days=30')).json() as Promise<{ from: string; to: string }>,
    );
    const rows = await usageRows(redisUrl);
    const since = Date.parse(`${report.from}T00:00:00Z`) / 1000;
    const until = Date.parse(`${report.to}T00:00:00Z`) / 1000 + 86_400;
    const inRange = rows.filter((row) => row.created >= since && row.created < until);
    assert.equal(inRange.length, statuses.length);

    // The Requests card: the record's count, with how many were refused and failed.
    const requests = stat(page, 'Requests');
    assert.equal(leadingCount(await requests.locator('.stat-value').innerText()), inRange.length);
    const refused = inRange.filter((row) => row.status === 'refused').length;
    const failed = inRange.filter((row) => row.status === 'failed').length;
    assert.deepEqual([refused, failed], [3, 1]);
    assert.equal(
      (await requests.locator('.stat-note').innerText()).trim(),
      `of which ${refused} refused · ${failed} failed`,
    );

    // By model sums to the total; each model's count is Latency by model's; no made-up model is named in either.
    const byModel = await tableRows(page.getByRole('table', { name: 'By model', exact: true }));
    const latency = await tableRows(page.getByRole('table', { name: 'Latency by model' }));
    assert.equal(
      byModel.reduce((sum, row) => sum + leadingCount(row.cells.Requests ?? ''), 0),
      inRange.length,
    );
    assert.deepEqual(
      Object.fromEntries(latency.map((row) => [row.lead, leadingCount(row.cells.Requests ?? '')])),
      Object.fromEntries(byModel.map((row) => [row.lead, leadingCount(row.cells.Requests ?? '')])),
    );
    for (const table of [byModel, latency])
      assert.ok(!table.some((row) => row.lead.includes(unknownModel)), JSON.stringify(table));
    const unknown = latency.find((row) => row.lead === 'Unknown model');
    assert.ok(unknown, 'the unknown model’s refusals have a row of their own');
    assert.deepEqual(
      [leadingCount(unknown.cells.Requests!), unknown.cells['Error rate'], unknown.cells['p50 latency']],
      [2, '100%', '—'],
    );
    assert.match(
      await page.locator('section[aria-labelledby="latency-heading"] .table-note').innerText(),
      /latency is over completed requests only/,
    );

    // The Accounts card: every account (the Default, the admin's, three members'), and the two with requests.
    const accounts = (await page.evaluate(async () => (await fetch('/console/api/admin/accounts')).json())) as {
      data: unknown[];
    };
    assert.equal(accounts.data.length, 5);
    assert.equal(leadingCount(await stat(page, 'Accounts').locator('.stat-value').innerText()), accounts.data.length);
    assert.equal((await stat(page, 'Accounts').locator('.stat-note').innerText()).trim(), '2 with requests in range');

    // What the cache saved, by name, and the sum of the hits' savings; By model and By key say the same.
    const hits = inRange.filter((row) => row.cache === 'hit');
    const saved = hits.reduce((sum, row) => sum + row.saved_micros, 0);
    const note = (await stat(page, 'Spend').locator('.stat-note').innerText()).trim();
    const match = /^saved by the response cache: \$([\d.,]+) on (\d+) hits$/.exec(note);
    assert.ok(match, note);
    assert.equal(Number(match[2]), hits.length);
    assert.ok(
      Math.abs(Number(match[1]!.replaceAll(',', '')) * 1e6 - saved) <= Math.max(1, saved * 5e-4),
      `${note} vs ${saved} micro-dollars`,
    );
    assert.equal(
      byModel.reduce((sum, row) => sum + leadingCount(row.cells['Cache hits'] ?? ''), 0),
      hits.length,
    );
    const byKey = await tableRows(page.getByRole('table', { name: 'By key' }));
    assert.equal(
      byKey.reduce((sum, row) => sum + leadingCount(row.cells['Cache hits'] ?? ''), 0),
      hits.length,
    );
    assert.ok(
      byKey.every((row) => /^\$/.test(row.cells.Saved ?? '')),
      JSON.stringify(byKey),
    );
    // The vendor's prompt caching is named as such (in a row's details), never "Cached tokens" beside the hits.
    assert.equal(await page.getByRole('columnheader', { name: /Cached tokens/ }).count(), 0);
    await page
      .getByRole('table', { name: 'By model', exact: true })
      .getByRole('button', { name: 'Details' })
      .first()
      .click();
    await page.locator('.dt-detail-list dt', { hasText: 'Prompt-cache tokens' }).first().waitFor();
    await page.locator('.dt-detail-list dt', { hasText: 'Cache-write tokens' }).first().waitFor();
    // What it saved is a column of its own by model (by key, where the key's name takes the width, in a row's
    // details), apart from the response cache's; the mock caches no prompt, so it saved nothing, and the Input tokens
    // card says nothing of it.
    assert.ok(
      byModel.every((row) => row.cells['Prompt cache saved'] === '$0.00'),
      JSON.stringify(byModel),
    );
    assert.ok(
      byKey.every((row) => row.cells['Prompt cache saved'] === undefined),
      JSON.stringify(byKey),
    );
    assert.equal(await page.getByRole('columnheader', { name: /Prompt cache saved/ }).count(), 1);
    assert.equal(await stat(page, 'Input tokens').locator('.stat-note').count(), 0);
    const tableNote = page.locator('section[aria-labelledby="by-model-heading"] .table-note');
    assert.match(await tableNote.innerText(), /Prompt cache saved: what the vendor’s prompt caching saved/);

    // The charts: their day axes end at the last bar's day (today), the spend read on one axis.
    const today = dayLabel(Date.now() / 1000);
    for (const name of ['Spend per day', 'Requests per day']) {
      const canvas = page.locator(`canvas[aria-label^="${name}"]`);
      await waitFor(async () => ((await canvas.getAttribute('data-x-labels')) ?? '') !== '', 5000, `the ${name} chart`);
      const labels = (await canvas.getAttribute('data-x-labels'))!.split('|');
      assert.equal(await canvas.getAttribute('data-last-bar'), today, name);
      assert.equal(labels.at(-1), today, `${name}: the axis reaches the last bar (${labels.join(', ')})`);
      assert.equal(await canvas.getAttribute('data-value-axes'), '1', `${name}: one value axis`);
    }

    await assertFits(page, 'usage at 1280 px', 1);
    await shoot(page, 'usage-counts-desktop');

    // Activity counts the same requests over the same days.
    await page.goto('/console/activity?range=30d');
    const line = page.locator('#activity-chart-heading ~ p');
    await waitFor(async () => /requests/.test(await line.innerText()), 10_000, 'Activity’s count line');
    assert.equal(leadingCount(await line.innerText()), inRange.length, await line.innerText());
    await closeClean(context, 'usage, desktop');
  });

  it('shows Usage on a phone as cards, the page never wider than the screen', async () => {
    const context = await newContext(phone);
    const page = await context.newPage();
    await signIn(page, adminEmail, adminPassword);
    await openSteady(page, '/console/usage', 'usage at 390 px');
    await page.locator('canvas[aria-label^="Requests per day"][data-x-labels]').waitFor();
    await assertFits(page, 'usage at 390 px', 1);
    // Every table a card a row: its rows are blocks, not table rows.
    const displays = await page
      .locator('table.data-table tbody tr:not(.dt-details-row)')
      .evaluateAll((trs) => trs.map((tr) => getComputedStyle(tr).display));
    assert.ok(displays.length > 0 && displays.every((display) => display !== 'table-row'), JSON.stringify(displays));
    const today = dayLabel(Date.now() / 1000);
    for (const name of ['Spend per day', 'Requests per day']) {
      const labels = (await page.locator(`canvas[aria-label^="${name}"]`).getAttribute('data-x-labels'))!.split('|');
      assert.equal(labels.at(-1), today, `${name} on a phone: ${labels.join(', ')}`);
    }
    await shoot(page, 'usage-counts-phone');
    await closeClean(context, 'usage, phone');
  });

  it('says on Queues that its finished counts are the jobs BullMQ keeps, not totals', async () => {
    for (const [viewport, name] of [
      [desktop, 'desktop'],
      [phone, 'phone'],
    ] as const) {
      const context = await newContext(viewport);
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      await openSteady(page, '/console/admin/queues', `queues, ${name}`);
      const table = page.getByRole('table', { name: 'Queues' });
      const chat = (await tableRows(table)).find((row) => row.lead === 'chat');
      assert.ok(chat, 'the chat queue is listed');
      assert.ok('Kept completed' in chat.cells && !('Completed' in chat.cells), JSON.stringify(chat.cells));
      assert.ok(leadingCount(chat.cells['Kept completed']!) <= statuses.filter((status) => status === 200).length);
      const note = await page.locator('.queue-keeps-note').innerText();
      assert.match(note, /not every job that ran/);
      assert.match(note, /60 s after it completes/);
      assert.match(note, /request log has every request/);
      if (name === 'desktop')
        assert.match(
          await table.getByRole('columnheader', { name: /Kept completed/ }).innerText(),
          /last 60 s, at most 1,000/,
        );
      await assertFits(page, `queues, ${name}`, 1);
      await shoot(page, `queues-kept-${name}`);
      await closeClean(context, `queues, ${name}`);
    }
  });
});
