import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import type { Redis } from 'ioredis';
import type { Browser, Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { assertFits, closeClean, openContext, screenshots, signIn, tablesLoaded } from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { startFakeWebhook, type FakeWebhook } from '../support/fake-webhook.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

/*
 * Budgets in the console, in a real headless Chromium against a real gateway that delivers alerts to a webhook: a
 * team with an owner, a member and a viewer; the owner sets the team's monthly budget and the member's daily cap on
 * the Budgets page; the member makes a key with a budget of its own on the Keys page (then changes its period) and
 * spends with it through the OpenAI SDK, a queued request then a cache hit at the same price, until the cap is full
 * and the next request is refused; the page shows what was spent, the bars and when each resets, and the cap's 50, 80
 * and 100 % alerts delivered. The viewer reads the page without a form. At 1280×800 and 390×844 every table stays
 * within its box and no page is wider than the window. Screenshots land in test-artifacts/console/budgets/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console', 'budgets');
const shoot = screenshots(shots);
const adminToken = 'console-budgets-browser-admin-token';
const adminEmail = 'the-administrator@console-budgets.browser.test';
const password = 'console-budgets-password';
const ownerEmail = 'owner-of-the-evaluation-team-with-a-long-address@console-budgets.browser.test';
const memberEmail = 'member-of-the-evaluation-team@console-budgets.browser.test';
const viewerEmail = 'viewer-of-the-evaluation-team@console-budgets.browser.test';
const probeEmail = 'probe@console-budgets.browser.test';
const teamName = 'Evaluation and benchmarks';
const keyName = 'benchmark runner';
// Offline the mock answers gpt-4o at gpt-4o's prices; one output token, so what is reserved is what is billed.
const ask: OpenAI.ChatCompletionCreateParamsNonStreaming = {
  model: 'gpt-4o',
  messages: [{ role: 'user', content: 'How far is the moon?' }],
  max_tokens: 1,
};
const cached = { headers: { 'cache-control': 'max-age=600' } };
const desktop = { width: 1280, height: 800 };
const phone = { width: 390, height: 844 };
const widths = [
  ['desktop', desktop],
  ['phone', phone],
] as const;

describe('budgets in the console (Budgets page, a key’s budget, alerts) in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let redis: Redis;
  let webhook: FakeWebhook;
  let teamId = '';
  let memberId = '';
  /** What one `ask` costs (micro-dollars), measured on an account of its own. */
  let cost = 0;
  const adminApi = adminRequest(() => gateway.url, adminToken);
  const usd = (micros: number) => String(micros / 1_000_000);

  before(async () => {
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    webhook = await startFakeWebhook();
    const fresh = await freshRedis(7);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: password,
        ADMIN_TOKEN: adminToken,
        ALERT_WEBHOOK_URL: webhook.url,
        ALERT_WEBHOOK_SECRET: 'console-budgets-webhook-secret-0123456789',
        ALERT_WEBHOOK_BACKOFF_MS: '50',
        CACHE_HIT_PRICE: '1',
      },
    });
    browser = await launchChromium();
    const ids: string[] = [];
    for (const email of [ownerEmail, memberEmail, viewerEmail, probeEmail]) {
      const answer = await adminApi('POST', '/admin/accounts', { email, password, role: 'member' });
      const text = await answer.text();
      assert.equal(answer.status, 201, text);
      ids.push((JSON.parse(text) as { id: string }).id);
    }
    memberId = ids[1]!;
    const team = await adminApi('POST', '/admin/teams', { name: teamName, owner_email: ownerEmail });
    const made = await team.text();
    assert.equal(team.status, 201, made);
    teamId = (JSON.parse(made) as { id: string }).id;
    for (const [email, role] of [
      [memberEmail, 'member'],
      [viewerEmail, 'viewer'],
    ] as const) {
      const added = await adminApi('POST', `/admin/teams/${teamId}/members`, { email, role });
      assert.equal(added.status, 201, await added.text());
    }
    assert.equal((await adminApi('POST', `/admin/accounts/${teamId}/credits`, { amount_usd: 10 })).status, 200);
    // The price of one `ask`, read from a key of the probe's own account once it settled.
    assert.equal((await adminApi('POST', `/admin/accounts/${ids[3]}/credits`, { amount_usd: 10 })).status, 200);
    const probe = (await (await adminApi('POST', '/admin/keys', { name: 'probe', account_id: ids[3] })).json()) as {
      id: string;
      key: string;
    };
    await gateway.client(probe.key).chat.completions.create(ask);
    await waitFor(
      async () => {
        const view = (await (await adminApi('GET', `/admin/keys/${probe.id}`)).json()) as { spent_usd?: number };
        cost = Math.round(Number(view.spent_usd ?? 0) * 1_000_000);
        return cost > 0;
      },
      10_000,
      'the probe settled',
    );
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
    await webhook?.close();
    redis?.disconnect();
  });

  const rowOf = (page: Page, table: string, text: string) =>
    page.getByRole('table', { name: table }).locator('tbody tr').filter({ hasText: text });
  /** Signs in and works in the team with the switcher, waiting for the page drawn afresh in it. */
  const enterTeam = async (page: Page, email: string, role: string) => {
    await signIn(page, email, password);
    await page.getByRole('combobox', { name: 'Team', exact: true }).selectOption({ label: `${teamName} · ${role}` });
    await page.waitForFunction(
      (prefix) => Object.keys(localStorage).some((key) => key.startsWith(prefix)),
      'switchyard.team.',
    );
  };
  const openBudgets = async (page: Page) => {
    await page.goto('/console/budgets');
    await page.getByRole('heading', { name: `Budget of ${teamName}` }).waitFor();
    await page.locator('.budget-facts, .budget-card .muted').first().waitFor();
    await tablesLoaded(page, 'budgets');
  };
  /** The start of next month (UTC) as the API writes it: when a monthly budget resets. */
  const nextMonth = () => {
    const now = new Date();
    return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)).toISOString();
  };

  it('the owner sets the team’s monthly budget and the member’s daily cap on the Budgets page', async () => {
    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await enterTeam(page, ownerEmail, 'Owner');
    await openBudgets(page);
    await page.getByText('No budget: the team spends up to its balance.').waitFor();
    // Nothing typed: said in words, nothing sent.
    await page.getByRole('button', { name: 'Save budget' }).click();
    await page.getByRole('alert').filter({ hasText: 'Enter an amount in dollars' }).waitFor();
    // Ten asks a month: two of them fill a fifth of the bar.
    await page.getByLabel('Amount (USD)').fill(usd(10 * cost));
    await page.getByLabel('Period').selectOption('month');
    await page.getByRole('button', { name: 'Save budget' }).click();
    await page.getByRole('status').filter({ hasText: 'The team’s budget is' }).waitFor();
    await page.getByRole('button', { name: 'Clear budget' }).waitFor();
    assert.match(await page.locator('.budget-facts').innerText(), /Monthly, from 00:00 UTC/);
    // Cleared, the form starts empty again; set once more for what follows.
    await page.getByRole('button', { name: 'Clear budget' }).click();
    await page.getByRole('status').filter({ hasText: 'The team’s budget was cleared.' }).waitFor();
    await page.getByText('No budget: the team spends up to its balance.').waitFor();
    assert.equal(await page.getByLabel('Amount (USD)').inputValue(), '');
    await page.getByLabel('Amount (USD)').fill(usd(10 * cost));
    await page.getByLabel('Period').selectOption('month');
    await page.getByRole('button', { name: 'Save budget' }).click();
    await page.getByRole('button', { name: 'Clear budget' }).waitFor();

    // Two asks a day for the member: the second fills the cap.
    const row = rowOf(page, 'Members’ caps', memberEmail);
    await row.getByRole('button', { name: `Edit the cap of ${memberEmail}` }).click();
    const dialog = page.getByRole('dialog', { name: `Cap for ${memberEmail}` });
    await dialog.getByLabel('Amount (USD)').fill(usd(2 * cost));
    await dialog.getByLabel('Period').selectOption('day');
    await dialog.getByRole('button', { name: 'Save cap' }).click();
    await page
      .getByRole('status')
      .filter({ hasText: `${memberEmail} may spend` })
      .waitFor();
    assert.match(await row.innerText(), /per day/);
    assert.equal(await rowOf(page, 'Members’ caps', viewerEmail).getByText('None').count(), 1, 'the viewer has no cap');
    // A cap given and taken back: the viewer's, from its dialog.
    const viewerRow = rowOf(page, 'Members’ caps', viewerEmail);
    await viewerRow.getByRole('button', { name: `Edit the cap of ${viewerEmail}` }).click();
    const viewerDialog = page.getByRole('dialog', { name: `Cap for ${viewerEmail}` });
    await viewerDialog.getByLabel('Amount (USD)').fill('1');
    await viewerDialog.getByRole('button', { name: 'Save cap' }).click();
    await page
      .getByRole('status')
      .filter({ hasText: `${viewerEmail} may spend $1.00 per month` })
      .waitFor();
    await viewerRow.getByRole('button', { name: `Edit the cap of ${viewerEmail}` }).click();
    await viewerDialog.getByRole('button', { name: 'Remove the cap' }).click();
    await page
      .getByRole('status')
      .filter({ hasText: `${viewerEmail} has no cap now.` })
      .waitFor();
    assert.equal(await viewerRow.getByText('None').count(), 1, 'the viewer has no cap again');

    // Read again from the server: the record, not the page's note of what it sent.
    const answer = await page.request.get(`/console/api/teams/${teamId}/budget`);
    assert.equal(answer.status(), 200, await answer.text());
    const budget = (await answer.json()) as {
      budget_usd: number;
      budget_period: string;
      budget_resets_at: string;
      members: Array<{ id: string; cap_usd: number | null; cap_period: string | null }>;
    };
    assert.deepEqual(
      budget.members.find((m) => m.id === memberId),
      { ...budget.members.find((m) => m.id === memberId), cap_usd: (2 * cost) / 1_000_000, cap_period: 'day' },
    );
    assert.equal(budget.budget_usd, (10 * cost) / 1_000_000);
    assert.equal(budget.budget_period, 'month');
    assert.equal(budget.budget_resets_at, nextMonth());
    await assertFits(page, 'budgets, owner, desktop');
    await shoot(page, 'owner-set-desktop');
    await closeClean(context, 'owner');
  });

  it(
    'the member makes a key with a budget on the Keys page, changes its period, and spends it through the SDK ' +
      'until the cap refuses',
    async () => {
      const context = await openContext(browser, gateway.url, desktop);
      const page = await context.newPage();
      await enterTeam(page, memberEmail, 'Member');
      await page.getByRole('heading', { name: `Your keys in ${teamName}` }).waitFor();
      await tablesLoaded(page, 'keys');
      await page.getByRole('button', { name: 'New key' }).click();
      const form = page.getByRole('dialog', { name: 'New key' });
      await form.getByLabel('Name').fill(keyName);
      // A negative budget: said in words, no key made.
      await form.getByLabel('Budget (USD)').fill('-1');
      await form.getByRole('button', { name: 'Create key' }).click();
      await form.getByRole('alert').filter({ hasText: 'The budget must be a positive amount in USD.' }).waitFor();
      await form.getByLabel('Budget (USD)').fill('5');
      await form.getByLabel('Budget period').selectOption('day');
      await form.getByRole('button', { name: 'Create key' }).click();
      const secretDialog = page.getByRole('dialog', { name: 'Save your API key' });
      const secret = await secretDialog.locator('#new-secret').inputValue();
      await secretDialog.getByRole('button', { name: 'Done' }).click();
      await page.reload();
      await tablesLoaded(page, 'keys');
      const row = rowOf(page, `Your keys in ${teamName}`, keyName);
      assert.match(await row.innerText(), /\$0\.00 \/ \$5\.00 today/);

      // The period alone changed: the amount goes with it.
      await row.getByRole('button', { name: 'Edit' }).click();
      const edit = page.getByRole('dialog', { name: `Edit ${keyName}` });
      assert.equal(await edit.getByLabel('Budget (USD)').inputValue(), '5');
      await edit.getByLabel('Budget period').selectOption('week');
      await edit.getByRole('button', { name: 'Save' }).click();
      await edit.waitFor({ state: 'detached' });
      await page.reload();
      await tablesLoaded(page, 'keys');
      assert.match(await row.innerText(), /\$5\.00 this week/);

      // A queued request stored in the cache (half the cap), then a hit at its price (the cap full), then a refusal.
      const client = gateway.client(secret);
      await client.chat.completions.create(ask, cached);
      await client.chat.completions.create(ask, cached);
      await assert.rejects(client.chat.completions.create(ask, cached), (error) => {
        assert.ok(error instanceof OpenAI.APIError, String(error));
        assert.equal(error.status, 429);
        assert.equal(error.code, 'insufficient_quota');
        assert.match(error.message, /daily cap/i);
        return true;
      });
      await waitFor(
        async () => {
          const res = await adminApi('GET', `/admin/alerts?team_id=${teamId}`);
          const alerts = ((await res.json()) as { data: Array<{ state: string }> }).data;
          return alerts.length === 3 && alerts.every((alert) => alert.state === 'delivered');
        },
        15_000,
        'the cap’s three alerts delivered',
      );
      assert.deepEqual(
        webhook.deliveries
          .map((delivery) => [delivery.body.kind, delivery.body.scope_id, delivery.body.threshold_percent])
          .sort(),
        [
          ['member', memberId, 100],
          ['member', memberId, 50],
          ['member', memberId, 80],
        ],
      );
      await page.reload();
      await tablesLoaded(page, 'keys');
      assert.match(await row.innerText(), /\/ \$5\.00 this week/);
      assert.doesNotMatch(await row.innerText(), /\$0\.00 \/ \$5\.00/, 'the key’s budget shows what it spent');
      await assertFits(page, 'keys with a budget, member, desktop');
      await shoot(page, 'member-keys-desktop');
      await closeClean(context, 'member');
    },
  );

  it('the owner sees what was spent, the bars, when each resets and the delivered alerts, at both widths', async () => {
    for (const [label, viewport] of widths) {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await enterTeam(page, ownerEmail, 'Owner');
      await openBudgets(page);
      // The team: two asks of ten, a fifth of the bar, reset on the 1st of next month.
      const teamBar = page.locator('.budget-facts').getByRole('meter');
      assert.equal(await teamBar.getAttribute('aria-valuenow'), '20');
      const facts = await page.locator('.budget-facts').innerText();
      assert.match(facts, /Spent this period/);
      assert.match(facts, /Resets at/);
      const resets = new Date(nextMonth());
      // In the console's one date-and-time form, with its zone: the year only when it is not this one.
      const day = resets.toLocaleDateString('en-US', {
        month: 'short',
        day: 'numeric',
        ...(resets.getFullYear() === new Date().getFullYear() ? {} : { year: 'numeric' }),
      });
      assert.ok(facts.includes(day), `${label}: the reset's day (${day}) in ${facts}`);
      assert.match(
        facts,
        /Resets at\s+[A-Z][a-z]{2} \d{1,2},.*\d{2}:\d{2}\s?[AP]M (UTC|GMT[+-]\d+)/,
        `${label}: the reset's time with its zone in ${facts}`,
      );
      // The member: the cap full, red.
      const member = rowOf(page, 'Members’ caps', memberEmail);
      assert.equal(await member.getByRole('meter').getAttribute('aria-valuenow'), '100');
      assert.match((await member.getByRole('meter').getAttribute('class')) ?? '', /meter-high/);
      // The cap's alerts, by the member's address, delivered.
      const alerts = page.getByRole('table', { name: 'Alerts' }).locator('tbody tr');
      await waitFor(async () => (await alerts.count()) === 3, 10_000, 'three alerts listed');
      for (const reached of ['50 %', '80 %', '100 %']) {
        const alert = alerts.filter({ hasText: reached });
        const text = await alert.innerText();
        assert.match(text, /Member cap/, text);
        assert.ok(text.includes(memberEmail), `${label}: the alert names the member: ${text}`);
        assert.match(text, /Delivered/, text);
      }
      await assertFits(page, `budgets, owner, ${label}`);
      await shoot(page, `owner-budgets-${label}`);
      if (label === 'phone') {
        await member.getByRole('button', { name: `Edit the cap of ${memberEmail}` }).click();
        await page.getByRole('dialog', { name: `Cap for ${memberEmail}` }).waitFor();
        await shoot(page, 'owner-cap-dialog-phone');
      }
      await closeClean(context, `owner ${label}`);
    }
  });

  it('the viewer reads the Budgets page without a form, at both widths', async () => {
    for (const [label, viewport] of widths) {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await enterTeam(page, viewerEmail, 'Viewer');
      await page.waitForURL('**/console/usage');
      await openBudgets(page);
      await rowOf(page, 'Members’ caps', memberEmail).waitFor();
      assert.equal(await page.locator('form').count(), 0, `${label}: no form`);
      assert.equal(
        await page.getByRole('button', { name: /Save budget|Clear budget|Edit the cap/ }).count(),
        0,
        `${label}: nothing to change`,
      );
      assert.equal(await page.getByRole('table', { name: 'Alerts' }).locator('tbody tr').count(), 3);
      assert.equal(await page.locator('.budget-facts').getByRole('meter').getAttribute('aria-valuenow'), '20');
      await assertFits(page, `budgets, viewer, ${label}`);
      await shoot(page, `viewer-budgets-${label}`);
      await closeClean(context, `viewer ${label}`);
    }
  });
});
