import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type OpenAI from 'openai';
import type { Browser, Locator, Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import {
  assertCellsKeepTheirText,
  closeClean,
  noSidewaysScroll,
  openContext,
  screenshots,
  signIn,
  stat,
  tablesLoaded,
} from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { ConsoleClient } from '../support/console-client.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { followsMoneyRule } from '../support/money-rule.js';

/*
 * One team's spend as every page of the console shows it, in a real headless Chromium against a real gateway: a
 * team with an owner, two members and a viewer; the members spend through the Playground (each has a Playground key
 * of their own there) and one of them and the owner through keys of theirs, part of it before the owner sets the
 * team's monthly budget and the members' daily caps and part after. Then, for the owner at 1280×800 and 390×844 and
 * for the admin, a member and the viewer at 1280×800: Usage's spend, the sum of its By key rows, Budgets' spent this
 * period and the sum of the Keys page's spends are one number, the record's; a member's cap spent is their keys'
 * Usage rows. And each Playground key is named for its person ("Playground (ana@…)") on Keys, Usage (the admin's
 * every-account report too) and Activity, never two rows of one name. Screenshots land in
 * test-artifacts/console/team-spend/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console', 'team-spend');
const shoot = screenshots(shots);
const adminToken = 'console-team-spend-admin-token';
const adminEmail = 'admin@team-spend.browser.test';
const password = 'team-spend-password';
const ownerEmail = 'owner@team-spend.browser.test';
const anaEmail = 'ana@team-spend.browser.test';
const benEmail = 'ben@team-spend.browser.test';
const viewerEmail = 'viewer@team-spend.browser.test';
const teamName = 'Research';
const desktop = { width: 1280, height: 800 };
const phone = { width: 390, height: 844 };
const ask: OpenAI.ChatCompletionCreateParamsNonStreaming = {
  model: 'gpt-4o-mini',
  messages: [{ role: 'user', content: 'How far is the moon?' }],
  max_tokens: 8,
};

/**
 * An amount the console shows ("$0.000123") in micro-dollars; the money rule writes every amount under $0.01 to the
 * micro-dollar.
 */
function micros(text: string, what: string): number {
  const amount = /\$[\d,]*\.\d+/.exec(text)?.[0];
  assert.ok(amount && followsMoneyRule(amount), `${what}: an amount in "${text}"`);
  const dollars = Number(amount.slice(1).replaceAll(',', ''));
  assert.ok(dollars < 0.01, `${what}: ${amount} is under $0.01, so shown to the micro-dollar`);
  return Math.round(dollars * 1_000_000);
}

describe('one team’s spend is one number on Usage, Budgets and Keys; its Playground keys are named for their people', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let teamId = '';
  const ids: Record<string, string> = {};
  /** What the team spent, by key, as the record settled it (micro-dollars). */
  let spentByKey = new Map<string, number>();
  /** Each key's id by its name, as the team's keys are named. */
  const keyIds = new Map<string, string>();
  const adminApi = adminRequest(() => gateway.url, adminToken);

  /** A person signed in to the console API, working in the team. */
  async function consoleOf(
    email: string,
  ): Promise<
    (method: string, path: string, body?: unknown) => Promise<{ status: number; json: Record<string, unknown> }>
  > {
    const client = new ConsoleClient(gateway.url);
    assert.equal((await client.signIn(email, password)).status, 200);
    return (method, path, body) => client.request(method, path, body, { headers: { 'x-team': teamId } });
  }

  /** The team's settled requests in the record, once there are `n`. */
  async function settled(n: number): Promise<Array<{ key_id: string; cost_micros: number }>> {
    let rows: Array<{ key_id: string; cost_micros: number; settled: boolean }> = [];
    await waitFor(
      async () => {
        rows = (
          (await (await adminApi('GET', `/admin/requests?account_id=${teamId}&limit=100`)).json()) as {
            data: typeof rows;
          }
        ).data;
        return rows.length === n && rows.every((row) => row.settled);
      },
      20_000,
      `${n} settled requests of the team`,
    ).catch((error: unknown) => {
      throw new Error(`${(error as Error).message}: ${JSON.stringify(rows)}`);
    });
    return rows;
  }

  before(async () => {
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const { url, redis } = await freshRedis(6);
    redis.disconnect();
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: password,
        ADMIN_TOKEN: adminToken,
        MOCK_BILLING: 'on',
      },
    });
    browser = await launchChromium();
    for (const email of [ownerEmail, anaEmail, benEmail, viewerEmail]) {
      const answer = await adminApi('POST', '/admin/accounts', { email, password, role: 'member' });
      const text = await answer.text();
      assert.equal(answer.status, 201, text);
      ids[email] = (JSON.parse(text) as { id: string }).id;
    }
    const team = await adminApi('POST', '/admin/teams', { name: teamName, owner_email: ownerEmail });
    const made = await team.text();
    assert.equal(team.status, 201, made);
    teamId = (JSON.parse(made) as { id: string }).id;
    for (const [email, role] of [
      [anaEmail, 'member'],
      [benEmail, 'member'],
      [viewerEmail, 'viewer'],
    ] as const) {
      const added = await adminApi('POST', `/admin/teams/${teamId}/members`, { email, role });
      assert.equal(added.status, 201, await added.text());
    }
    assert.equal((await adminApi('POST', `/admin/accounts/${teamId}/credits`, { amount_usd: 10 })).status, 200);

    const owner = await consoleOf(ownerEmail);
    const ana = await consoleOf(anaEmail);
    const ben = await consoleOf(benEmail);
    const played = async (who: typeof ana, n: number) => {
      for (let i = 0; i < n; i++) {
        const answer = await who('POST', '/console/api/playground/chat/completions', ask);
        assert.equal(answer.status, 200, JSON.stringify(answer.json));
      }
    };
    const keyOf = async (who: typeof ana, name: string) => {
      const answer = await who('POST', '/console/api/keys', { name });
      assert.equal(answer.status, 201, JSON.stringify(answer.json));
      return gateway.client(String(answer.json.key));
    };
    const benKey = await keyOf(ben, 'ben’s batch runner');
    const ownerKey = await keyOf(owner, 'owner’s script');
    // Before the budget and the caps: what was spent in their period already counts once they are set.
    await played(ana, 1);
    await played(ben, 1);
    await benKey.chat.completions.create(ask);
    await settled(3);
    assert.equal(
      (await owner('PUT', `/console/api/teams/${teamId}/budget`, { budget_usd: 5, budget_period: 'month' })).status,
      200,
    );
    for (const email of [anaEmail, benEmail]) {
      const capped = await owner('PUT', `/console/api/teams/${teamId}/members/${ids[email]}/cap`, {
        cap_usd: 1,
        cap_period: 'day',
      });
      assert.equal(capped.status, 200, JSON.stringify(capped.json));
    }
    // After.
    await played(ana, 1);
    await played(ben, 1);
    await ownerKey.chat.completions.create(ask);
    const rows = await settled(6);
    spentByKey = new Map();
    for (const row of rows) spentByKey.set(row.key_id, (spentByKey.get(row.key_id) ?? 0) + Number(row.cost_micros));
    const keys = (await owner('GET', '/console/api/keys')).json as unknown as {
      data: Array<{ id: string; name: string }>;
    };
    for (const key of keys.data) keyIds.set(key.name, key.id);
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
  });

  const total = () => [...spentByKey.values()].reduce((sum, n) => sum + n, 0);
  const spentBy = (...names: string[]) =>
    names.reduce((sum, name) => sum + (spentByKey.get(keyIds.get(name) ?? '') ?? 0), 0);

  /** Signs in and works in the team with the switcher, waiting for the pages drawn afresh in it. */
  async function enterTeam(page: Page, email: string, role: string): Promise<void> {
    await signIn(page, email, password);
    await page.getByRole('combobox', { name: 'Team', exact: true }).selectOption({ label: `${teamName} · ${role}` });
    await page.waitForFunction(
      (prefix) => Object.keys(localStorage).some((key) => key.startsWith(prefix)),
      'switchyard.team.',
    );
  }

  /** A table's rows, once loaded: each one's cells by column id (`dt-col-<id>`), as shown. */
  async function tableRows(table: Locator, columns: string[]): Promise<Array<Record<string, string>>> {
    await table.locator('tbody tr').first().waitFor();
    await waitFor(async () => (await table.locator('.skeleton-row').count()) === 0, 20_000, 'the table loaded');
    return table
      .locator('tbody tr')
      .evaluateAll(
        (trs, names) =>
          trs.map((tr) =>
            Object.fromEntries(
              names.map((name) => [
                name,
                (tr.querySelector(`.dt-col-${name}`) as HTMLElement | null)?.innerText.trim() ?? '',
              ]),
            ),
          ),
        columns,
      );
  }

  /** Usage as the page shows it over the last 7 days: its Spend, and its By key rows (name, spend). */
  async function usage(
    page: Page,
    account?: string,
  ): Promise<{ spend: number; keys: Array<{ name: string; spend: number }> }> {
    await page.goto('/console/usage');
    await page.getByLabel('Range', { exact: true }).selectOption('7');
    if (account) await page.getByLabel('Account', { exact: true }).selectOption({ label: account });
    const value = stat(page, 'Spend').locator('.stat-value');
    await waitFor(
      async () =>
        (await value.locator('.skeleton').count()) === 0 &&
        (await page.locator('.filters-note').innerText()).trim() !== 'Updating…',
      20_000,
      'Usage loaded',
    );
    const rows = await tableRows(page.getByRole('table', { name: 'By key' }), ['key', 'spend']);
    return {
      spend: micros(await value.innerText(), 'Usage’s Spend'),
      keys: rows.map((row) => ({ name: row.key!, spend: micros(row.spend!, `Usage’s ${row.key}`) })),
    };
  }

  /** Budgets as the page shows it: the team's spent this period, and each capped member's. */
  async function budgets(page: Page): Promise<{ team: number; caps: Map<string, number> }> {
    await page.goto('/console/budgets');
    await page.getByRole('heading', { name: `Budget of ${teamName}` }).waitFor();
    const spent = page.locator('.budget-facts .budget-spend > .nowrap').first();
    await spent.waitFor();
    await tablesLoaded(page, 'Budgets');
    const rows = await tableRows(page.getByRole('table', { name: 'Members’ caps' }), ['member', 'spent']);
    const caps = new Map(
      rows
        .filter((row) => row.spent !== '—')
        .map((row) => [row.member!.split('\n')[0]!, micros(row.spent!, `${row.member}'s cap`)]),
    );
    return { team: micros(await spent.innerText(), 'Budgets’ spent this period'), caps };
  }

  /**
   * The Keys page's keys of the team (the first table: the signed-in person's, or every one for an owner): name, spend.
   */
  async function keysPage(page: Page): Promise<Array<{ name: string; spend: number }>> {
    await page.goto('/console/keys');
    const rows = await tableRows(page.locator('section[aria-labelledby="keys-heading"]').getByRole('table'), [
      'name',
      'limits',
    ]);
    return rows.map((row) => ({ name: row.name!.split('\n')[0]!, spend: micros(row.limits!, `Keys’ ${row.name}`) }));
  }

  const sum = (rows: ReadonlyArray<{ spend: number }>) => rows.reduce((n, row) => n + row.spend, 0);

  it(
    'shows the owner one number for the team’s spend on Usage, By key, Budgets and Keys, at 1280 and 390 px; each ' +
      'capped member’s is their keys’',
    async () => {
      assert.equal(spentByKey.size, 4, 'the two Playground keys, ben’s key and the owner’s');
      for (const [label, viewport] of [
        ['desktop', desktop],
        ['phone', phone],
      ] as const) {
        const context = await openContext(browser, gateway.url, viewport);
        const page = await context.newPage();
        await enterTeam(page, ownerEmail, 'Owner');
        const used = await usage(page);
        await shoot(page, `usage-owner-${label}`);
        const budget = await budgets(page);
        await shoot(page, `budgets-owner-${label}`);
        const keys = await keysPage(page);
        await shoot(page, `keys-owner-${label}`);
        const figures = {
          record: total(),
          usage: used.spend,
          usageByKey: sum(used.keys),
          budgets: budget.team,
          keys: sum(keys),
        };
        assert.deepEqual(
          new Set(Object.values(figures)).size,
          1,
          `${label}: one number for the team's spend: ${JSON.stringify(figures)}`,
        );
        // A member's cap spent is what their keys spent (their Playground key's among them), as Usage says it.
        const anaPlayground = `Playground (${anaEmail})`;
        const benPlayground = `Playground (${benEmail})`;
        const usageOf = (name: string) => used.keys.find((row) => row.name === name)?.spend;
        assert.deepEqual(
          { ana: budget.caps.get(anaEmail), ben: budget.caps.get(benEmail) },
          {
            ana: usageOf(anaPlayground),
            ben: (usageOf(benPlayground) ?? NaN) + (usageOf('ben’s batch runner') ?? NaN),
          },
          `${label}: each member's cap against their keys' usage: ` +
            `${JSON.stringify({ caps: [...budget.caps], keys: used.keys })}`,
        );
        assert.equal(budget.caps.get(anaEmail), spentBy(anaPlayground));
        assert.equal(budget.caps.get(benEmail), spentBy(benPlayground, 'ben’s batch runner'));
        await noSidewaysScroll(page, `owner, ${label}`);
        await closeClean(context, `owner's figures, ${label}`);
      }
    },
  );

  it(
    'shows a member their share, the viewer and the admin the team’s, each one number across Usage, Budgets and ' +
      'Keys',
    async () => {
      // Ben: his keys' usage, his cap, his keys.
      {
        const context = await openContext(browser, gateway.url, desktop);
        const page = await context.newPage();
        await enterTeam(page, benEmail, 'Member');
        const used = await usage(page);
        const budget = await budgets(page);
        const keys = await keysPage(page);
        const mine = spentBy(`Playground (${benEmail})`, 'ben’s batch runner');
        const figures = {
          record: mine,
          usage: used.spend,
          usageByKey: sum(used.keys),
          cap: budget.caps.get(benEmail),
          keys: sum(keys),
        };
        assert.equal(new Set(Object.values(figures)).size, 1, `the member's share: ${JSON.stringify(figures)}`);
        // The team's budget is the team's: what everyone spent.
        assert.equal(budget.team, total());
        await shoot(page, 'budgets-member-desktop');
        await closeClean(context, 'member’s figures');
      }
      // The viewer: the team's usage and budget (no keys page).
      {
        const context = await openContext(browser, gateway.url, desktop);
        const page = await context.newPage();
        await enterTeam(page, viewerEmail, 'Viewer');
        const used = await usage(page);
        const budget = await budgets(page);
        const figures = { record: total(), usage: used.spend, usageByKey: sum(used.keys), budgets: budget.team };
        assert.equal(new Set(Object.values(figures)).size, 1, `the viewer's: ${JSON.stringify(figures)}`);
        await closeClean(context, 'viewer’s figures');
      }
      // The admin in the team: Usage narrowed to it by its account filter, its Budgets, its keys.
      {
        const context = await openContext(browser, gateway.url, desktop);
        const page = await context.newPage();
        await enterTeam(page, adminEmail, 'Owner');
        const used = await usage(page, teamName);
        const budget = await budgets(page);
        const keys = await keysPage(page);
        const figures = {
          record: total(),
          usage: used.spend,
          usageByKey: sum(used.keys),
          budgets: budget.team,
          keys: sum(keys),
        };
        assert.equal(new Set(Object.values(figures)).size, 1, `the admin's: ${JSON.stringify(figures)}`);
        await shoot(page, 'usage-admin-desktop');
        await closeClean(context, 'admin’s figures');
      }
    },
  );

  it(
    'names each Playground key for its person on Keys, Usage (the admin’s every account too) and Activity: no two ' +
      'rows of one name',
    async () => {
      const playgrounds = [`Playground (${anaEmail})`, `Playground (${benEmail})`];
      // The owner's Keys at both widths: every key of the team, each name once, both Playground keys told apart in
      // sight (their names drawn as far as the person's "@", not cut before it), no cell's text running into another's.
      for (const [label, viewport] of [
        ['desktop', desktop],
        ['phone', phone],
      ] as const) {
        const context = await openContext(browser, gateway.url, viewport);
        const page = await context.newPage();
        await enterTeam(page, ownerEmail, 'Owner');
        const keyNames = (await keysPage(page)).map((row) => row.name);
        assert.equal(new Set(keyNames).size, keyNames.length, `Keys, ${label}: ${keyNames.join(', ')}`);
        const table = page.locator('section[aria-labelledby="keys-heading"]').getByRole('table');
        for (const name of playgrounds) {
          assert.ok(keyNames.includes(name), `Keys, ${label}: ${name} in ${keyNames.join(', ')}`);
          const shown = table.locator('.key-name').filter({ hasText: name });
          // No named function inside: the page runs this as it is.
          const inSight = await shown.evaluate((element) => {
            const node = element.firstChild;
            const text = node?.textContent ?? '';
            if (!node || node.nodeType !== Node.TEXT_NODE || !text.includes('@')) return false;
            const range = document.createRange();
            range.setStart(node, 0);
            range.setEnd(node, text.indexOf('@') + 1);
            const box = element.getBoundingClientRect();
            return [...range.getClientRects()].every(
              (r) =>
                r.left >= box.left - 0.5 &&
                r.right <= box.right + 0.5 &&
                r.top >= box.top - 0.5 &&
                r.bottom <= box.bottom + 0.5,
            );
          });
          assert.ok(inSight, `Keys, ${label}: "${name}" is drawn as far as its person's address`);
        }
        for (const [i] of keyNames.entries())
          await assertCellsKeepTheirText(table.locator('tbody tr').nth(i), `Keys, ${label}, row ${i + 1}`);
        await shoot(page, `keys-names-${label}`);
        await closeClean(context, `names on Keys, ${label}`);
      }
      const context = await openContext(browser, gateway.url, desktop);
      const page = await context.newPage();
      await enterTeam(page, ownerEmail, 'Owner');
      const keyNames = (await keysPage(page)).map((row) => row.name);
      // Usage's By key and its key filter.
      const usageNames = (await usage(page)).keys.map((row) => row.name);
      assert.deepEqual([...usageNames].sort(), [...keyNames].sort(), 'Usage names the keys as Keys does');
      const filter = (await page.getByLabel('Key', { exact: true }).locator('option').allInnerTexts()).map((text) =>
        text.trim(),
      );
      assert.equal(new Set(filter).size, filter.length, `Usage's key filter: ${filter.join(', ')}`);
      for (const name of playgrounds) assert.ok(filter.includes(name), `Usage's key filter: ${name}`);
      // Activity: each request's key by its name, in its column and its filter.
      await page.goto('/console/activity');
      const requests = page.getByRole('table', { name: 'Requests' });
      await waitFor(
        async () => (await requests.locator('tbody tr:not(.skeleton-row)').count()) === 6,
        20_000,
        'the team’s six requests on Activity',
      );
      // A row names its key once the page has the keys' names (read beside the requests): until then, by its id.
      let shown: string[] = [];
      await waitFor(
        async () => {
          shown = (await requests.locator('tbody td.col-key').allInnerTexts()).map((text) => text.trim());
          return playgrounds.every((name) => shown.includes(name));
        },
        10_000,
        'the keys named on Activity',
      ).catch(() => undefined);
      for (const name of playgrounds)
        assert.equal(
          shown.filter((text) => text === name).length,
          2,
          `Activity: two requests of ${name}: ${shown.join(', ')}`,
        );
      const activityFilter = (await page.getByLabel('Key', { exact: true }).locator('option').allInnerTexts()).map(
        (text) => text.trim(),
      );
      assert.equal(
        new Set(activityFilter).size,
        activityFilter.length,
        `Activity's key filter: ${activityFilter.join(', ')}`,
      );
      await shoot(page, 'activity-owner-desktop');
      await closeClean(context, 'names, owner');

      // The admin's Usage of every account: the team's keys each a row of its own name, the team under each.
      const adminContext = await openContext(browser, gateway.url, desktop);
      const adminPage = await adminContext.newPage();
      await signIn(adminPage, adminEmail, password);
      const every = await usage(adminPage);
      const teamRows = every.keys
        .filter((row) => row.name.endsWith(`\n${teamName}`))
        .map((row) => row.name.split('\n')[0]!);
      assert.equal(teamRows.length, 4, `the team's keys in the admin's report: ${JSON.stringify(every.keys)}`);
      assert.equal(new Set(teamRows).size, teamRows.length, `no two of one name: ${teamRows.join(', ')}`);
      for (const name of playgrounds) assert.ok(teamRows.includes(name), `${name} in ${teamRows.join(', ')}`);
      await shoot(adminPage, 'usage-admin-every-account-desktop');
      await closeClean(adminContext, 'names, admin');
    },
  );
});
