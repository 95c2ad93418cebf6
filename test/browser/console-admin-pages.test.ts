import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { type Browser, type Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { assertFits, openContext, screenshots, signIn, tablesLoaded } from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { ConsoleClient } from '../support/console-client.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

/*
 * The admin's pages and a member's Keys in a real headless Chromium against a
 * real gateway (its mock vendor standing in): an admin and two members with
 * long emails and many keys. At 1280×800 and 390×844, Keys, All keys,
 * Accounts, Channels and Pricing fit (no table wider than its box, the page
 * never wider than the window); All keys groups keys by account and edits
 * and revokes them; a key of an account whose cache cap is 0 says caching is
 * off; the Default account is never `acct_default`; a model's failures on a
 * channel are counted and only that model is marked while it rests; Pricing's
 * header stays in sight. Screenshots land in test-artifacts/console/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console');
const shoot = screenshots(shots);
const adminToken = 'admin-pages-browser-admin-token';
const adminEmail = 'the-administrator-with-a-rather-long-address@admin-pages.browser.test';
const adminPassword = 'admin-pages-admin-pw';
const memberEmail = 'member-one-with-an-exceedingly-long-email-address@admin-pages.browser.test';
const uncachedEmail = 'member-two-whose-answers-are-never-cached@admin-pages.browser.test';
const memberPassword = 'member-password';
const desktop = { width: 1280, height: 800 };
const phone = { width: 390, height: 844 };
const widths = [
  ['desktop', desktop],
  ['phone', phone],
] as const;

interface KeyMade {
  id: string;
  key: string;
  name: string;
}

describe('the admin pages (keys, all keys, accounts, channels, pricing) in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let redis: Redis;
  let memberId: string;
  let uncachedId: string;
  /** The member's keys, by name. */
  const memberKeys = new Map<string, KeyMade>();
  let uncachedTtlKey: KeyMade;

  const adminApi = adminRequest(() => gateway.url, adminToken);
  const json = async <T>(response: Promise<Response>): Promise<T> => {
    const answer = await response;
    assert.ok(answer.ok, `${answer.status}: ${await answer.clone().text()}`);
    return (await answer.json()) as T;
  };

  before(async () => {
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const fresh = await freshRedis(6);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        ADMIN_TOKEN: adminToken,
        MOCK_STREAM_DELAY_MS: '5',
        // One vendor call a request, and a model rests on its channel after its second failure, for 30 s.
        JOB_ATTEMPTS: '1',
        CHANNEL_FAILURE_THRESHOLD: '2',
        CHANNEL_COOLDOWN_MS: '30000',
      },
    });
    browser = await launchChromium();

    const accounts = await json<{ data: Array<{ id: string; email: string }> }>(adminApi('GET', '/admin/accounts'));
    const adminId = accounts.data.find((a) => a.email === adminEmail)!.id;
    memberId = (
      await json<{ id: string }>(
        adminApi('POST', '/admin/accounts', { email: memberEmail, password: memberPassword, role: 'member' }),
      )
    ).id;
    await json(adminApi('POST', `/admin/accounts/${memberId}/credits`, { amount_usd: 12.5 }));
    await json(adminApi('PATCH', `/admin/accounts/${memberId}`, { weight: 3 }));
    uncachedId = (
      await json<{ id: string }>(
        adminApi('POST', '/admin/accounts', { email: uncachedEmail, password: memberPassword, role: 'member' }),
      )
    ).id;
    await json(adminApi('PATCH', `/admin/accounts/${uncachedId}`, { cache_max_ttl_s: 0 }));

    const make = async (accountId: string | undefined, name: string, limits: Record<string, unknown> = {}) => ({
      ...(await json<{ id: string; key: string }>(
        adminApi('POST', '/admin/keys', { name, ...(accountId ? { account_id: accountId } : {}), ...limits }),
      )),
      name,
    });
    // The member's: limits an admin set (each with its "admin" chip), long names, a default cache TTL, one expired.
    const day = 86_400;
    const now = Math.floor(Date.now() / 1000);
    for (const [name, limits] of [
      [
        'production backend for the nightly reconciliation exporter',
        {
          limit_usd: 50,
          rpm: 600,
          tpm: 250_000,
          models: ['gpt-4o-mini', 'claude-sonnet-4-5', 'gemini-2.5-pro'],
          expires_at: now + 90 * day,
        },
      ],
      ['staging', { limit_usd: 5, rpm: 60 }],
      ['cached answers', { cache_ttl_s: 120 }],
      ['to be revoked from all keys', {}],
      ['to be renamed from all keys', { models: ['gpt-4o-mini'] }],
      ['soon expired', { expires_at: now + day }],
      ['plain', {}],
    ] as const) {
      memberKeys.set(name, await make(memberId, name, limits));
    }
    // Expired: an admin may set an expiry in the past (the key is refused from then on).
    await json(adminApi('PATCH', `/admin/keys/${memberKeys.get('soon expired')!.id}`, { expires_at: now - day }));
    uncachedTtlKey = await make(uncachedId, 'uncached but asks for two minutes', { cache_ttl_s: 120 });
    await make(uncachedId, 'second key of the uncached account', { rpm: 30 });
    await make(uncachedId, 'third key of the uncached account', {});
    await make(undefined, 'made on the command line');
    await make(adminId, 'the admin’s own key', { limit_usd: 100 });
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
    redis?.disconnect();
  });

  const rowOf = (page: Page, text: string) => page.locator('tbody tr').filter({ hasText: text });

  it("a member's Keys: fits, the Expired badge in sight, the admin chips said in words", async () => {
    for (const [label, viewport] of widths) {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await signIn(page, memberEmail, memberPassword);
      await tablesLoaded(page, 'keys');
      await rowOf(page, 'plain').waitFor();
      await assertFits(page, `keys ${label}`);
      // The expired key says so, in sight, whatever the width.
      const expired = rowOf(page, 'soon expired').getByText('Expired', { exact: true });
      assert.ok(await expired.isVisible(), `${label}: the Expired badge`);
      const box = (await expired.boundingBox())!;
      assert.ok(
        box.x >= 0 && box.x + box.width <= viewport.width,
        `${label}: the Expired badge within the window: ${JSON.stringify(box)}`,
      );
      // Limits an admin set: a chip, and what it means in words under the table (not only a tooltip).
      assert.ok(
        (await rowOf(page, 'staging').locator('.key-admin-chip').count()) >= 2,
        `${label}: admin chips beside the staging key's limits`,
      );
      const note = page.locator('.key-table-note');
      assert.ok(await note.isVisible(), `${label}: the chips' note`);
      assert.match(await note.innerText(), /administrator set it/);
      // Edit and Revoke on every live row.
      for (const name of memberKeys.keys()) {
        const row = rowOf(page, name);
        assert.ok(await row.getByRole('button', { name: 'Edit' }).isVisible(), `${label}: Edit on ${name}`);
        assert.ok(await row.getByRole('button', { name: 'Revoke' }).isVisible(), `${label}: Revoke on ${name}`);
      }
      await shoot(page, `admin-pages-keys-member-${label}`);
      await context.close();
    }
  });

  it('All keys: by account (the Default account by its name), fits, caching off where the account never caches', async () => {
    for (const [label, viewport] of widths) {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      await page.goto('/console/admin/keys');
      await tablesLoaded(page, 'all keys');
      await rowOf(page, 'made on the command line').waitFor();
      await assertFits(page, `all keys ${label}`);
      // A heading per account, a table under each, named by it.
      const headings = await page.locator('.key-group-title').allInnerTexts();
      assert.deepEqual(
        [...headings].sort(),
        [adminEmail, memberEmail, uncachedEmail, 'Default'].sort(),
        `${label}: ${headings.join(' | ')}`,
      );
      const memberTable = page.getByRole('table', { name: memberEmail });
      assert.equal(await memberTable.locator('tbody tr:not(.dt-details-row)').count(), memberKeys.size);
      await page
        .getByRole('table', { name: 'Default', exact: true })
        .getByRole('row')
        .filter({ hasText: 'made on the command line' })
        .waitFor();
      assert.ok(
        !(await page.locator('main').innerText()).includes('acct_default'),
        `${label}: no acct_default on the page`,
      );
      // The account that never caches: its key's two-minute TTL is not what its row says.
      const uncached = rowOf(page, uncachedTtlKey.name);
      const uncachedText = await uncached.innerText();
      assert.match(uncachedText, /Cache: off for this account/);
      assert.doesNotMatch(uncachedText, /Cache TTL/);
      // An account that caches: the key's TTL.
      assert.match(await rowOf(page, 'cached answers').innerText(), /Cache TTL: 120 s/);
      assert.ok(await page.locator('.key-table-note').isVisible(), `${label}: the admin chips' note`);
      await shoot(page, `admin-pages-all-keys-${label}`);
      await context.close();
    }
  });

  it(
    'All keys: Edit renames a member’s key, Revoke revokes it (refused at /v1 after), with the dialogs of the Keys ' +
      'page',
    async () => {
      const context = await openContext(browser, gateway.url, desktop);
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      await page.goto('/console/admin/keys');
      await tablesLoaded(page, 'all keys');

      const renamed = memberKeys.get('to be renamed from all keys')!;
      await rowOf(page, renamed.name).getByRole('button', { name: 'Edit' }).click();
      const edit = page.getByRole('dialog', { name: `Edit ${renamed.name}` });
      await edit.getByLabel('Name').fill('renamed by the admin');
      await shoot(page, 'admin-pages-all-keys-edit');
      await edit.getByRole('button', { name: 'Save' }).click();
      await edit.waitFor({ state: 'detached' });
      await rowOf(page, 'renamed by the admin').waitFor();
      const listed = await json<{ data: Array<{ id: string; name: string }> }>(adminApi('GET', '/admin/keys'));
      assert.equal(listed.data.find((key) => key.id === renamed.id)?.name, 'renamed by the admin');

      const doomed = memberKeys.get('to be revoked from all keys')!;
      const models = () =>
        fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${doomed.key}` } }).then(
          async (res) => (await res.arrayBuffer(), res.status),
        );
      assert.equal(await models(), 200, 'the key works before');
      const row = rowOf(page, doomed.name);
      await row.getByRole('button', { name: 'Revoke' }).click();
      const confirm = page.getByRole('alertdialog', { name: 'Revoke this key?' });
      await confirm.getByText(/stops working at once/).waitFor();
      await confirm.getByRole('button', { name: 'Revoke key' }).click();
      await confirm.waitFor({ state: 'detached' });
      // Shown as revoked, its buttons gone.
      await row.getByText('Revoked', { exact: true }).waitFor();
      assert.equal(await row.getByRole('button', { name: 'Revoke' }).count(), 0);
      assert.equal(await row.getByRole('button', { name: 'Edit' }).count(), 0);
      await shoot(page, 'admin-pages-all-keys-revoked');
      await waitFor(async () => (await models()) === 401, 5000, 'the revoked key refused at /v1');
      await context.close();
    },
  );

  it(
    'Accounts: fits, Add credit whole, rows a few lines high, weight in words, the Default account never ' +
      'acct_default',
    async () => {
      for (const [label, viewport] of widths) {
        const context = await openContext(browser, gateway.url, viewport);
        const page = await context.newPage();
        await signIn(page, adminEmail, adminPassword);
        await page.goto('/console/admin/accounts');
        await tablesLoaded(page, 'accounts');
        await rowOf(page, memberEmail).waitFor();
        await assertFits(page, `accounts ${label}`);
        const system = rowOf(page, 'system account');
        const systemText = await system.innerText();
        assert.doesNotMatch(systemText, /acct_default/, `${label}: ${systemText}`);
        assert.match(systemText, /Default \(system account\)/);
        const member = rowOf(page, memberEmail);
        const memberText = await member.innerText();
        assert.match(memberText, /Weight: 3/);
        assert.doesNotMatch(memberText, /×/);
        // Caching: "no cap" and "off" read apart.
        assert.match(memberText, /Cache: no cap/);
        assert.match(await rowOf(page, uncachedEmail).innerText(), /Cache: off \(never cached\)/);
        // Add credit whole and inside its box.
        const credit = member.getByRole('button', { name: 'Add credit' });
        const whole = await credit.evaluate((button) => {
          const box = button.closest('.table-scroll')!.getBoundingClientRect();
          const rect = button.getBoundingClientRect();
          return {
            cut: button.scrollWidth - button.clientWidth,
            inside: rect.left >= box.left && rect.right <= box.right + 0.5 && rect.right <= window.innerWidth,
          };
        });
        assert.deepEqual(whole, { cut: 0, inside: true }, `${label}: Add credit`);
        if (label === 'desktop') {
          // No row of six lines: each a few lines high.
          const heights = await page
            .locator('tbody tr:not(.dt-details-row)')
            .evaluateAll((trs) => trs.map((tr) => Math.round(tr.getBoundingClientRect().height)));
          assert.ok(
            heights.every((height) => height <= 90),
            `row heights ${heights.join(', ')}`,
          );
          // The Role column readable: its badges on one line.
          const role = await member
            .locator('.account-badges')
            .evaluate((element) => element.getBoundingClientRect().height);
          assert.ok(role < 30, `the role cell's badges on one line: ${role}px`);
        }
        await shoot(page, `admin-pages-accounts-${label}`);
        await context.close();
      }
    },
  );

  it('Channels: a model’s recent failures counted, only that model marked while it rests, OK with its count after', async () => {
    const chat = (content: string) =>
      fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${memberKeys.get('plain')!.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content }] }),
      }).then(async (res) => (await res.arrayBuffer(), res.status));
    // Two vendor failures (the mock fails on purpose): the second rests gpt-4o on its channel.
    assert.deepEqual([await chat('Fail [mock:error:502]'), await chat('Fail again [mock:error:502]')], [502, 502]);
    type Listed = {
      data: Array<{
        id: string;
        status: string;
        cooldowns: Array<{ model: string | null }>;
        model_health: Array<{ model: string; failures: number; cooling_until: number | null }>;
      }>;
    };
    // The page's own data, read as the admin's console reads it.
    const admin = new ConsoleClient(gateway.url);
    await admin.request('GET', '/console/api/session');
    assert.equal(
      (await admin.request('POST', '/console/api/session', { email: adminEmail, password: adminPassword })).status,
      200,
    );
    const channelOf = async () =>
      (await admin.request<Listed>('GET', '/console/api/admin/channels')).json.data.find((c) =>
        c.model_health.some((m) => m.model === 'gpt-4o'),
      );
    await waitFor(
      async () => (await channelOf())?.model_health.find((m) => m.model === 'gpt-4o')?.cooling_until != null,
      10_000,
      'gpt-4o resting on its channel',
    );
    const channel = (await channelOf())!;
    assert.deepEqual(
      channel.model_health.map((m) => [m.model, m.failures]),
      [['gpt-4o', 2]],
    );
    assert.ok(
      channel.cooldowns.every((rest) => rest.model === 'gpt-4o'),
      'the model rests, not the channel',
    );

    for (const [label, viewport] of widths) {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      await page.goto('/console/admin/channels');
      await tablesLoaded(page, 'channels');
      const row = rowOf(page, channel.id);
      const model = row.locator('.channel-model').filter({ hasText: 'gpt-4o' });
      await model.waitFor();
      const text = await model.innerText();
      assert.match(text, /Cooling down until/);
      assert.match(text, /2 failures in the last 15 min/);
      // The channel itself is not marked: only its model.
      assert.equal(
        await row.locator('.channel-status-cell').getByText('Cooling down').count(),
        0,
        `${label}: the channel is not badged`,
      );
      assert.match(await row.locator('.channel-status-cell').innerText(), /OK/);
      assert.equal(await page.locator('.channel-status-cell .badge-warn').count(), 0, `${label}: no channel badged`);
      await assertFits(page, `channels ${label}`);
      await shoot(page, `admin-pages-channels-cooling-${label}`);
      await context.close();
    }

    // The rest ended (cleared where every worker reads it, as an operator would): OK, with its count.
    await redis.hdel('sy:cooldowns', `${channel.id}|gpt-4o`);
    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await signIn(page, adminEmail, adminPassword);
    await page.goto('/console/admin/channels');
    await tablesLoaded(page, 'channels');
    const model = rowOf(page, channel.id).locator('.channel-model').filter({ hasText: 'gpt-4o' });
    await model.waitFor();
    const text = await model.innerText();
    assert.match(text, /\bOK\b/);
    assert.doesNotMatch(text, /Cooling down/);
    assert.match(text, /2 failures in the last 15 min/);
    await shoot(page, 'admin-pages-channels-recovered-desktop');
    await context.close();
  });

  it('Pricing: fits, vendors named as Channels names them, the header in sight after scrolling', async () => {
    for (const [label, viewport] of widths) {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      await page.goto('/console/pricing');
      await tablesLoaded(page, 'pricing');
      await assertFits(page, `pricing ${label}`);
      const text = await page.locator('main').innerText();
      assert.ok(!text.includes('black-forest-labs'), `${label}: no black-forest-labs`);
      const flux = page
        .locator('tbody tr')
        .filter({ has: page.getByText(/^flux/) })
        .first();
      assert.match(await flux.innerText(), /\bbfl\b/);
      if (label === 'desktop') {
        // Scrolled well down the page: the header row still at the top of the window.
        await page.evaluate(() => window.scrollTo(0, 2500));
        const header = await page
          .locator('.pricing-table thead th')
          .first()
          .evaluate((th) => {
            const rect = th.getBoundingClientRect();
            return { top: rect.top, bottom: rect.bottom, scrolled: window.scrollY };
          });
        assert.ok(
          header.scrolled >= 2000 && header.top >= -1 && header.bottom <= 80,
          `the header in sight: ${JSON.stringify(header)}`,
        );
        await page.screenshot({ path: join(shots, 'admin-pages-pricing-scrolled-desktop.png') });
        // Narrower, the table scrolls in a box no taller than the screen: its header stays at the box's top.
        await page.setViewportSize({ width: 900, height: 800 });
        await page.evaluate(() => window.scrollTo(0, 0));
        const boxed = await page.evaluate(() => {
          const box = document.querySelector('.pricing-card .table-scroll')!;
          box.scrollTop = 1500;
          const th = document.querySelector('.pricing-table thead th')!.getBoundingClientRect();
          const frame = box.getBoundingClientRect();
          return {
            scrolled: box.scrollTop,
            page: document.documentElement.scrollWidth - window.innerWidth,
            headerTop: th.top,
            boxTop: frame.top,
            boxBottom: frame.bottom,
          };
        });
        assert.ok(
          boxed.scrolled >= 1000 &&
            boxed.page <= 0 &&
            Math.abs(boxed.headerTop - boxed.boxTop) <= 2 &&
            boxed.boxBottom - boxed.boxTop <= 800,
          `at 900 px: ${JSON.stringify(boxed)}`,
        );
        await page.screenshot({ path: join(shots, 'admin-pages-pricing-scrolled-tablet.png') });
        await page.setViewportSize(viewport);
      }
      await shoot(page, `admin-pages-pricing-${label}`);
      await context.close();
    }
    // Signed out (public pricing), the header sticks under the public page's own bar, not behind it.
    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await page.goto('/console/pricing');
    await tablesLoaded(page, 'public pricing');
    await page.evaluate(() => window.scrollTo(0, 2500));
    const under = await page.evaluate(() => ({
      bar: document.querySelector('.public-bar')!.getBoundingClientRect().bottom,
      header: document.querySelector('.pricing-table thead th')!.getBoundingClientRect().top,
      scrolled: window.scrollY,
    }));
    assert.ok(
      under.scrolled >= 2000 && under.header >= under.bar - 1 && under.header <= under.bar + 2,
      `signed out: ${JSON.stringify(under)}`,
    );
    await page.screenshot({ path: join(shots, 'admin-pages-pricing-public-scrolled-desktop.png') });
    await context.close();
  });
});
