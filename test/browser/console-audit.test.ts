import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import type { Browser } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { assertFits, closeClean, openContext, screenshots, signIn, tablesLoaded } from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

/*
 * The console's Audit log page in a real headless Chromium against a real
 * gateway: an admin's changes with long emails and key names, read at
 * 1280×800 and 390×844. The page fits (no table wider than its box, the page
 * never wider than the window, every row inside the window), a filter picked
 * narrows the rows and lands in the address, and a row's Details show what
 * changed. Screenshots land in test-artifacts/console/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console');
const shoot = screenshots(shots);
const adminToken = 'audit-browser-admin-token';
const adminEmail = 'the-administrator-with-a-rather-long-address@audit.browser.test';
const adminPassword = 'audit-admin-password';
const widths = [
  ['desktop', { width: 1280, height: 800 }],
  ['phone', { width: 390, height: 844 }],
] as const;

describe('the audit log page in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let redis: Redis;
  const adminApi = adminRequest(() => gateway.url, adminToken);

  before(async () => {
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const fresh = await freshRedis(15);
    redis = fresh.redis;
    gateway = await startGateway({
      env: { REDIS_URL: fresh.url, ADMIN_EMAIL: adminEmail, ADMIN_PASSWORD: adminPassword, ADMIN_TOKEN: adminToken },
    });
    browser = await launchChromium();
    const made = await adminApi('POST', '/admin/accounts', {
      email: 'member-with-an-exceedingly-long-email-address@audit.browser.test',
      role: 'member',
    });
    const id = ((await made.json()) as { id: string }).id;
    await adminApi('POST', `/admin/accounts/${id}/credits`, {
      amount_usd: 12.5,
      note: 'a note long enough to wrap in a narrow window, and then some more words',
    });
    await adminApi('PATCH', `/admin/accounts/${id}`, { weight: 3, service_tiers: ['default', 'flex'] });
    for (let i = 0; i < 6; i++)
      await adminApi('POST', '/admin/keys', {
        name: `production backend for the nightly reconciliation exporter ${i}`,
        account_id: id,
        rpm: 60 + i,
      });
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
    redis?.disconnect();
  });

  it('fits at 1280 and 390 px, narrows to the action picked, and shows a row’s changes in its details', async () => {
    for (const [label, viewport] of widths) {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      await page.goto('/console/audit');
      await tablesLoaded(page, 'the audit log');
      await page.locator('tbody tr', { hasText: 'credit.granted' }).first().waitFor();
      await assertFits(page, `audit ${label}`);
      await shoot(page, `audit-${label}`);

      await page.getByLabel('Action').selectOption('key.created');
      await page.waitForURL('**/console/audit?action=key.created');
      await waitFor(
        async () =>
          (await page.locator('tbody tr', { hasText: 'key.created' }).count()) === 6 &&
          (await page.locator('tbody tr', { hasText: 'credit.granted' }).count()) === 0,
        10_000,
        'the filtered rows',
      );
      await assertFits(page, `audit ${label}, filtered`);
      // Every row (a card on a phone) within the window.
      for (const box of await page
        .locator('tbody tr', { hasText: 'key.created' })
        .evaluateAll((rows) => rows.map((row) => row.getBoundingClientRect().toJSON() as DOMRect))) {
        assert.ok(
          box.x >= 0 && box.x + box.width <= viewport.width,
          `${label}: a row within the window: ${JSON.stringify(box)}`,
        );
      }
      // The Export link carries the same filter.
      assert.equal(
        await page.getByRole('link', { name: 'Export' }).getAttribute('href'),
        '/console/api/audit.jsonl?action=key.created',
      );

      await page
        .locator('tbody tr', { hasText: 'key.created' })
        .first()
        .getByRole('button', { name: /Details/ })
        .click();
      await page.getByText('"production backend for the nightly reconciliation exporter 5"').waitFor();
      await shoot(page, `audit-${label}-details`);
      await closeClean(context, `audit ${label}`);
    }
  });

  it('names accounts, keys and teams where the rows hold their ids, and filters by a team picked by its name', async () => {
    const team = (await (
      await adminApi('POST', '/admin/teams', {
        name: 'Audit research',
        owner_email: 'member-with-an-exceedingly-long-email-address@audit.browser.test',
      })
    ).json()) as { id: string };
    const key = (await (
      await adminApi('POST', '/admin/keys', { name: 'research exporter', account_id: team.id })
    ).json()) as { id: string };
    assert.equal((await adminApi('DELETE', `/admin/keys/${key.id}`)).status, 200);
    const context = await openContext(browser, gateway.url, widths[0][1]);
    const page = await context.newPage();
    await signIn(page, adminEmail, adminPassword);
    await page.goto('/console/audit');
    await tablesLoaded(page, 'the audit log');
    // The sidebar shows the signed-in email whole (a long one on two lines), not cut short.
    const email = page.locator('.account-box .account-email');
    assert.equal((await email.innerText()).replace(/\s/g, ''), adminEmail);
    assert.deepEqual(
      await email.evaluate(
        (node) => node.scrollWidth <= node.clientWidth && node.getBoundingClientRect().right <= window.innerWidth,
      ),
      true,
      'the email within its box',
    );
    const revoked = page.locator('tbody tr', { hasText: 'key.revoked' }).first();
    await revoked.waitFor();
    assert.match(await revoked.innerText(), /research exporter/, 'a key by its name');
    // Its time in the console's one date-and-time form, with its zone (the browser's: UTC on this machine).
    const time = (await revoked.locator('td').first().innerText()).trim();
    assert.match(time, /^[A-Z][a-z]{2} \d{1,2}, \d{2}:\d{2}:\d{2}\s?[AP]M (UTC|GMT[+-]\d+)$/, time);
    const credit = page.locator('tbody tr', { hasText: 'credit.granted' }).first();
    assert.match(
      await credit.innerText(),
      /member-with-an-exceedingly-long-email-address@audit\.browser\.test/,
      'an account by its email',
    );
    assert.doesNotMatch(
      await page.locator('tbody').innerText(),
      /\b(acct|key)_[0-9a-f]/,
      'no id where a name is known',
    );
    // The Team filter lists teams by name and narrows to the one picked.
    const options = (await page.locator('#audit-team option').allTextContents()).map((text) => text.trim());
    assert.ok(options.includes('Audit research') && options.includes('All teams'), options.join(', '));
    await page.locator('#audit-team').selectOption({ label: 'Audit research' });
    await page.waitForURL(`**/console/audit?team=${team.id}`);
    await waitFor(
      async () =>
        (await page.locator('tbody tr', { hasText: 'credit.granted' }).count()) === 0 &&
        (await page.locator('tbody tr', { hasText: 'key.revoked' }).count()) === 1,
      10_000,
      "the team's rows alone",
    );
    await page
      .locator('tbody tr', { hasText: 'key.revoked' })
      .getByRole('button', { name: /Details/ })
      .click();
    await page.locator('tbody').getByText('Audit research').first().waitFor();
    await closeClean(context, 'audit names');
  });
});
