import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import type { Browser, Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import {
  assertFits,
  closeClean,
  noSidewaysScroll,
  openContext,
  screenshots,
  signIn,
  tablesLoaded,
} from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';

/*
 * Teams in the console, in a real headless Chromium against a real gateway: an admin makes a team on the Team page
 * with its first owner; the owner switches to it and adds a member and a viewer there; the member switches to it with
 * the switcher and makes a key, which the Keys page says they made; the viewer switches and is offered no key, batch
 * or Playground, the Playground's address leading to Usage, and the Team page without a way to change anyone. The owner
 * renames the team. At 1280×800 and 390×844 every table stays within its box and no page is wider than the window.
 * Screenshots land in test-artifacts/console/teams/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console', 'teams');
const shoot = screenshots(shots);
const adminToken = 'console-teams-browser-admin-token';
const adminEmail = 'the-administrator@console-teams.browser.test';
const password = 'console-teams-password';
const ownerEmail = 'owner-of-the-research-team-with-a-long-address@console-teams.browser.test';
const memberEmail = 'member-of-the-research-team@console-teams.browser.test';
const viewerEmail = 'viewer-of-the-research-team@console-teams.browser.test';
const teamName = 'Research and evaluation';
const desktop = { width: 1280, height: 800 };
const phone = { width: 390, height: 844 };
const widths = [
  ['desktop', desktop],
  ['phone', phone],
] as const;

describe('teams in the console (Team page, switcher, roles) in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let redis: Redis;
  const adminApi = adminRequest(() => gateway.url, adminToken);

  before(async () => {
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const fresh = await freshRedis(7);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: password,
        ADMIN_TOKEN: adminToken,
        MOCK_STREAM_DELAY_MS: '5',
      },
    });
    browser = await launchChromium();
    for (const email of [ownerEmail, memberEmail, viewerEmail]) {
      const answer = await adminApi('POST', '/admin/accounts', { email, password, role: 'member' });
      assert.equal(answer.status, 201, await answer.text());
    }
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
    redis?.disconnect();
  });

  const rowOf = (page: Page, table: string, text: string) =>
    page.getByRole('table', { name: table }).locator('tbody tr').filter({ hasText: text });
  /** The switcher in sight (the sidebar's on a wide screen, the top bar's on a phone). */
  const switcher = (page: Page) => page.getByRole('combobox', { name: 'Team', exact: true });
  /** Works in the team with the switcher, and waits for the page drawn afresh in it. */
  const switchTo = async (page: Page, role: string) => {
    await switcher(page).selectOption({ label: `${teamName} · ${role}` });
    await page.waitForFunction(
      (id) => localStorage.length > 0 && Object.keys(localStorage).some((key) => key.startsWith(id)),
      'switchyard.team.',
    );
  };
  /** The nav's links: on a phone, behind the menu. */
  const navLinks = async (page: Page, phoneMenu: boolean) => {
    if (phoneMenu) await page.getByRole('button', { name: 'Menu' }).click();
    const names = await page.getByRole('navigation', { name: 'Console' }).getByRole('link').allTextContents();
    if (phoneMenu) await page.getByRole('button', { name: 'Menu' }).click();
    return names.map((name) => name.trim());
  };

  it('an admin makes a team with its first owner on the Team page', async () => {
    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await signIn(page, adminEmail, password);
    await page.goto('/console/team');
    await tablesLoaded(page, 'team');
    // An owner's email nobody has: said in words, no team made.
    await page.getByLabel('Team name').fill(teamName);
    await page.getByLabel('First owner’s email').fill('nobody-here@console-teams.browser.test');
    await page.getByRole('button', { name: 'Create team' }).click();
    await page.getByText(/Nobody has the email 'nobody-here@console-teams\.browser\.test'/).waitFor();
    assert.equal(await rowOf(page, 'Teams', teamName).count(), 0, 'no team made for an unknown owner');
    await page.getByLabel('First owner’s email').fill(ownerEmail);
    await page.getByRole('button', { name: 'Create team' }).click();
    const row = rowOf(page, 'Teams', teamName);
    await row.waitFor();
    assert.match(await row.innerText(), /\b1\b/, 'one member: its owner');
    await assertFits(page, 'team page, admin, desktop');
    await shoot(page, 'admin-teams-desktop');
    await closeClean(context, 'admin');
  });

  it('the owner switches to the team and adds a member and a viewer there; the last owner stays', async () => {
    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await signIn(page, ownerEmail, password);
    await switchTo(page, 'Owner');
    await page.getByRole('link', { name: 'Team' }).click();
    await page.waitForURL('**/console/team');
    await page.getByRole('heading', { name: `Members of ${teamName}` }).waitFor();
    await tablesLoaded(page, 'team');
    for (const [email, role] of [
      [memberEmail, 'member'],
      [viewerEmail, 'viewer'],
    ] as const) {
      await page.getByLabel('Email').fill(email);
      await page.locator('#member-role').selectOption(role);
      await page.getByRole('button', { name: 'Add member' }).click();
      await rowOf(page, `Members of ${teamName}`, email).waitFor();
    }
    assert.equal(await page.locator('#member-role').inputValue(), 'member', 'the form is empty again');
    // Someone without an account here: said in words.
    await page.getByLabel('Email').fill('not-signed-up@console-teams.browser.test');
    await page.getByRole('button', { name: 'Add member' }).click();
    await page.getByRole('alert').filter({ hasText: 'not-signed-up@console-teams.browser.test' }).waitFor();
    // The last addition's success is not left standing beside this refusal.
    assert.equal(
      await page
        .getByRole('status')
        .filter({ hasText: /was added to/ })
        .count(),
      0,
      'no old success beside the new error',
    );
    // The only owner cannot make themself a member: the 409 said in words, the select back on Owner.
    const own = rowOf(page, `Members of ${teamName}`, ownerEmail);
    await own.getByRole('combobox').selectOption('member');
    await page.getByRole('alert').filter({ hasText: 'A team keeps at least one owner' }).waitFor();
    assert.equal(await own.getByRole('combobox').inputValue(), 'owner');
    // Nor remove themself: confirmed, then refused.
    await own.getByRole('button', { name: `Remove ${ownerEmail}` }).click();
    await page
      .getByRole('alertdialog', { name: 'Remove this member?' })
      .getByRole('button', { name: 'Remove member' })
      .click();
    await page.getByRole('alert').filter({ hasText: 'A team keeps at least one owner' }).waitFor();
    assert.equal(await own.count(), 1, 'the owner is still there');
    assert.equal(await rowOf(page, `Members of ${teamName}`, '@console-teams.browser.test').count(), 3);
    await assertFits(page, 'team page, owner, desktop');
    await shoot(page, 'owner-team-desktop');
    await closeClean(context, 'owner');
  });

  it('the member switches to the team and makes a key there, which Keys says they made', async () => {
    for (const [label, viewport] of widths) {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await signIn(page, memberEmail, password);
      await switchTo(page, 'Member');
      await page.getByRole('heading', { name: `Your keys in ${teamName}` }).waitFor();
      await tablesLoaded(page, 'keys');
      if (label === 'desktop') {
        // The sidebar's balance is the team's, which has had no credit, not the member's own.
        assert.equal((await page.locator('.sidebar .account-balance').innerText()).trim(), 'Team balance: $0.00');
        await page.getByRole('button', { name: 'New key' }).click();
        await page.getByLabel('Name').fill('research notebook');
        await page.getByRole('button', { name: 'Create key' }).click();
        await page.getByRole('dialog', { name: 'Save your API key' }).getByRole('button', { name: 'Done' }).click();
        // Read again from the server, not the page's own note of what it made.
        await page.reload();
        await tablesLoaded(page, 'keys');
      }
      const row = rowOf(page, `Your keys in ${teamName}`, 'research notebook');
      await row.waitFor();
      if (label === 'desktop') {
        const headers = (
          await page
            .getByRole('table', { name: `Your keys in ${teamName}` })
            .locator('thead th')
            .allTextContents()
        ).map((text) => text.trim());
        assert.ok(headers.includes('Made by'), `a Made by column: ${headers.join(', ')}`);
        assert.match(
          await row.innerText(),
          new RegExp(memberEmail.replaceAll('.', '\\.')),
          'the member named as its maker',
        );
      }
      // The choice lasts: a fresh load of the console is still in the team.
      await page.goto('/console/keys');
      await page.getByRole('heading', { name: `Your keys in ${teamName}` }).waitFor();
      assert.match(await switcher(page).inputValue(), /./);
      await tablesLoaded(page, 'keys');
      await assertFits(page, `keys in the team, member, ${label}`);
      await shoot(page, `member-keys-${label}`);
      await page.goto('/console/team');
      await tablesLoaded(page, 'team');
      await rowOf(page, `Members of ${teamName}`, viewerEmail).waitFor();
      assert.equal(await page.getByRole('button', { name: /^Remove / }).count(), 0, 'a member removes nobody');
      assert.equal(await page.getByRole('button', { name: 'Add member' }).count(), 0, 'a member adds nobody');
      await assertFits(page, `team page, member, ${label}`);
      await shoot(page, `member-team-${label}`);
      await closeClean(context, `member ${label}`);
    }
  });

  it('an admin sees the team as a team: on Accounts and over its keys, never a system account or a Member', async () => {
    for (const [label, viewport] of widths) {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await signIn(page, adminEmail, password);
      await page.goto('/console/admin/accounts');
      await tablesLoaded(page, 'accounts');
      const row = page.locator('tbody tr').filter({ hasText: teamName });
      await row.waitFor();
      const text = await row.innerText();
      assert.match(text, /\bTeam\b/, `${label}: ${text}`);
      assert.doesNotMatch(text, /system account|\bMember\b|\bSystem\b/i, `${label}: ${text}`);
      // The Default account is still the system's.
      assert.match(await page.locator('tbody tr').filter({ hasText: 'system account' }).innerText(), /System/);
      await page.goto('/console/keys');
      const others = page.locator('section[aria-labelledby="other-keys-heading"]');
      const group = others.locator('.key-group').filter({ has: page.getByRole('heading', { name: teamName }) });
      await group.locator('.key-group-count').filter({ hasText: /key/ }).waitFor();
      assert.equal((await group.locator('.key-group-count').innerText()).trim(), 'Team · 1 key', label);
      await assertFits(page, `keys, the admin, ${label}`);
      await closeClean(context, `admin ${label}`);
    }
  });

  it(
    "the viewer reads the team's usage and activity by key name, never marked revoked, no key list refused, a " +
      'batch not a link',
    async () => {
      // Traffic on the team: a key of its own (made through the admin API, its secret kept here), a request and a batch.
      const teams = (await (await adminApi('GET', '/admin/teams')).json()) as {
        data: Array<{ id: string; name: string }>;
      };
      const teamId = teams.data.find((team) => team.name === teamName)!.id;
      assert.equal((await adminApi('POST', `/admin/accounts/${teamId}/credits`, { amount_usd: 5 })).status, 200);
      const made = (await (
        await adminApi('POST', '/admin/keys', { name: 'shared notebook', account_id: teamId })
      ).json()) as { id: string; key: string };
      const client = new OpenAI({ apiKey: made.key, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
      await client.chat.completions.create({
        model: 'mock-chat',
        messages: [{ role: 'user', content: 'Hello from the team' }],
      });
      const input = await client.files.create({
        file: await toFile(
          Buffer.from(
            `${JSON.stringify({ custom_id: 'one', method: 'POST', url: '/v1/chat/completions', body: { model: 'mock-chat', messages: [{ role: 'user', content: 'In a batch' }] } })}\n`,
          ),
          'team.jsonl',
        ),
        purpose: 'batch',
      });
      const batch = await client.batches.create({
        input_file_id: input.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      });
      for (let seen = batch; seen.status !== 'completed'; seen = await client.batches.retrieve(batch.id)) {
        assert.ok(!['failed', 'expired', 'cancelled'].includes(seen.status), seen.status);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      for (const [label, viewport] of widths) {
        const context = await openContext(browser, gateway.url, viewport);
        const page = await context.newPage();
        const refused: string[] = [];
        page.on('response', (response) => {
          if (response.url().includes('/console/api/') && response.status() === 403) refused.push(response.url());
        });
        await signIn(page, viewerEmail, password);
        await switchTo(page, 'Viewer');
        await page.waitForURL('**/console/usage');
        await tablesLoaded(page, 'usage');
        const byKey = page.getByRole('table', { name: 'By key' });
        const keyRow = byKey.locator('tbody tr').filter({ hasText: 'shared notebook' });
        await keyRow.waitFor();
        assert.doesNotMatch(await byKey.innerText(), /revoked/i, `${label}: no key of the team is revoked`);
        const usageKeys = (await page.locator('#usage-key option').allTextContents()).map((text) => text.trim());
        assert.ok(usageKeys.includes('shared notebook'), `${label}: ${usageKeys.join(', ')}`);
        assert.ok(!usageKeys.some((text) => /revoked|^key_/.test(text)), `${label}: ${usageKeys.join(', ')}`);
        await page.goto('/console/activity');
        await tablesLoaded(page, 'activity');
        // The key picker fills once the team's key names arrive, which may come after the table (a busy machine).
        await page.locator('#activity-key option', { hasText: 'shared notebook' }).waitFor({ state: 'attached' });
        const activityKeys = (await page.locator('#activity-key option').allTextContents()).map((text) => text.trim());
        assert.ok(activityKeys.includes('shared notebook'), `${label}: ${activityKeys.join(', ')}`);
        const rows = page.locator('tbody tr');
        await rows
          .filter({ hasText: /batch …|batch batch_/ })
          .first()
          .waitFor();
        assert.doesNotMatch(
          await page.locator('tbody').innerText(),
          new RegExp(made.id),
          `${label}: keys named, not their ids`,
        );
        assert.equal(
          await page.getByRole('link', { name: /^Batch / }).count(),
          0,
          `${label}: a viewer has no Batches page to link to`,
        );
        assert.deepEqual(refused, [], `${label}: nothing the viewer's pages ask is refused`);
        await closeClean(context, `viewer usage ${label}`);
      }
    },
  );

  it('the viewer switches to the team: usage, activity and the team, no keys, batches or Playground', async () => {
    for (const [label, viewport] of widths) {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await signIn(page, viewerEmail, password);
      await switchTo(page, 'Viewer');
      // On Keys when they switched: a viewer is taken to Usage.
      await page.waitForURL('**/console/usage');
      const links = await navLinks(page, label === 'phone');
      for (const refused of ['Keys', 'Batches', 'Playground'])
        assert.ok(!links.includes(refused), `${label}: no ${refused} in ${links.join(', ')}`);
      for (const given of ['Usage', 'Activity', 'Team'])
        assert.ok(links.includes(given), `${label}: ${given} in ${links.join(', ')}`);
      await page.goto('/console/playground');
      await page.waitForURL('**/console/usage');
      await tablesLoaded(page, 'usage');
      await noSidewaysScroll(page, `usage, viewer, ${label}`);
      await page.goto('/console/team');
      await tablesLoaded(page, 'team');
      await rowOf(page, `Members of ${teamName}`, memberEmail).waitFor();
      assert.equal(
        await page
          .getByRole('table', { name: `Members of ${teamName}` })
          .getByRole('combobox')
          .count(),
        0,
        'no role to change',
      );
      assert.equal(await page.getByRole('button', { name: /^Remove / }).count(), 0, 'nobody to remove');
      await assertFits(page, `team page, viewer, ${label}`);
      await shoot(page, `viewer-team-${label}`);
      // Back in their own account, the keys are theirs again.
      await switcher(page).selectOption({ label: 'Personal · Owner' });
      const after = await navLinks(page, label === 'phone');
      assert.ok(
        after.includes('Keys') && after.includes('Playground'),
        `${label}: own account's pages: ${after.join(', ')}`,
      );
      await closeClean(context, `viewer ${label}`);
    }
  });

  it(
    'the owner renames the team on a phone: the heading and the switcher follow; a name another team has is ' +
      'refused in words',
    async () => {
      const taken = await adminApi('POST', '/admin/teams', { name: 'Platform' });
      assert.equal(taken.status, 201, await taken.text());
      const context = await openContext(browser, gateway.url, phone);
      const page = await context.newPage();
      await signIn(page, ownerEmail, password);
      await switchTo(page, 'Owner');
      await page.goto('/console/team');
      await tablesLoaded(page, 'team');
      // The owner's own account is not renamed here: the button is the team's only.
      await page.getByRole('button', { name: 'Rename team' }).click();
      const dialog = page.getByRole('dialog', { name: 'Rename team' });
      assert.equal(await dialog.getByLabel('Team name').inputValue(), teamName);
      await dialog.getByLabel('Team name').fill('platform');
      await dialog.getByRole('button', { name: 'Rename' }).click();
      await dialog.getByRole('alert').filter({ hasText: "A team named 'platform' already exists." }).waitFor();
      await assertFits(page, 'rename dialog, owner, phone');
      await shoot(page, 'owner-rename-phone');
      await dialog.getByLabel('Team name').fill('Research & evaluation (EU)');
      await dialog.getByRole('button', { name: 'Rename' }).click();
      await page.getByRole('heading', { name: 'Members of Research & evaluation (EU)' }).waitFor();
      await page
        .getByRole('status')
        .filter({ hasText: 'The team is now called “Research & evaluation (EU)”.' })
        .waitFor();
      await switcher(page)
        .locator('option', { hasText: 'Research & evaluation (EU) · Owner' })
        .waitFor({ state: 'attached' });
      assert.equal(await page.getByRole('dialog').count(), 0, 'the dialog closed');
      // Back in their own account: nothing to rename there.
      await switcher(page).selectOption({ label: 'Personal · Owner' });
      await page.goto('/console/team');
      await tablesLoaded(page, 'team');
      assert.equal(
        await page.getByRole('button', { name: 'Rename team' }).count(),
        0,
        'a person’s own account is not renamed',
      );
      await closeClean(context, 'owner rename');
    },
  );
});
