import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import type { Browser, Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { assertFits, closeClean, openContext, screenshots, signIn, tablesLoaded } from '../support/console-browser.js';
import { adminRequest, okJson } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startFakeMcp, type FakeMcp } from '../support/fake-mcp.js';

/*
 * The console's Tools page in a real headless Chromium against a real gateway with one upstream MCP server (the SDK's,
 * behind a secret header): a member sees the server, the endpoint and the configs to paste, and which tools each of
 * their keys may use (one key limited to one tool); a team's rule set by an admin narrows what the member is shown;
 * an admin sees where the server is reached, never the header's value. At 1280×800 and 390×844 the page fits.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shoot = screenshots(join(root, 'test-artifacts', 'console'));
const adminToken = 'tools-browser-admin-token';
const adminEmail = 'admin@tools.browser.test';
const adminPassword = 'tools-admin-pw';
const memberEmail = 'member@tools.browser.test';
const memberPassword = 'tools-member-pw';
const upstreamSecret = 'upstream-secret-never-shown';

describe('the Tools page (MCP) in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let redis: Redis;
  let notes: FakeMcp;
  let dir: string;
  let memberId: string;
  let searchOnly: string;
  let everyTool: string;

  const adminApi = adminRequest(() => gateway.url, adminToken);
  const json = okJson;

  before(async () => {
    await buildOnce();
    mkdirSync(join(root, 'test-artifacts', 'console'), { recursive: true });
    notes = await startFakeMcp({ token: upstreamSecret });
    dir = mkdtempSync(join(tmpdir(), 'console-tools-'));
    const file = join(dir, 'mcp.json');
    writeFileSync(
      file,
      JSON.stringify({
        servers: {
          notes: {
            url: notes.url,
            headers: { Authorization: `Bearer ${upstreamSecret}` },
            price_per_call_usd: '0.002',
          },
        },
      }),
    );
    const fresh = await freshRedis(5);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        ADMIN_TOKEN: adminToken,
        MCP_SERVERS_FILE: file,
        MCP_CHECK_INTERVAL_MS: '1000',
        SECRETS_KEY: 'console-tools-secrets-key-0123456789abcdef',
      },
    });
    browser = await launchChromium();
    memberId = (
      await json<{ id: string }>(
        adminApi('POST', '/admin/accounts', { email: memberEmail, password: memberPassword, role: 'member' }),
      )
    ).id;
    everyTool = (
      await json<{ id: string }>(
        adminApi('POST', '/admin/keys', { name: 'every tool', account_id: memberId, created_by: memberId }),
      )
    ).id;
    searchOnly = (
      await json<{ id: string }>(
        adminApi('POST', '/admin/keys', {
          name: 'search only',
          account_id: memberId,
          created_by: memberId,
          mcp_tools: ['notes/search'],
        }),
      )
    ).id;
    await waitFor(
      async () =>
        (await json<{ data: Array<{ status: string }> }>(adminApi('GET', '/admin/mcp/servers'))).data[0]?.status ===
        'ok',
      30_000,
      'the server checked',
    );
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
    await notes?.close();
    redis?.disconnect();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const toolNames = async (page: Page) =>
    (await page.locator('.tool-list dt').allInnerTexts()).map((text) => text.trim());

  it('a member sees the server, the configs to paste, and the tools each key may use; a team rule narrows them', async () => {
    for (const [label, viewport] of [
      ['desktop', { width: 1280, height: 800 }],
      ['phone', { width: 390, height: 844 }],
    ] as const) {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await signIn(page, memberEmail, memberPassword);
      await page.goto('/console/tools');
      await tablesLoaded(page, 'tools');
      const row = page.locator('tbody tr').filter({ hasText: 'notes' }).first();
      assert.match(await row.innerText(), /OK/);
      assert.match(await row.innerText(), /\$0\.002(?!\d)/);
      // The endpoint and both agents' configs, with the gateway's /mcp.
      const codes = await page.locator('pre.code').allInnerTexts();
      assert.equal(codes.length, 4);
      for (const code of codes.slice(0, 3))
        assert.ok(code.includes(`${gateway.url}/mcp`) && code.includes('<your key>'), code);
      assert.match(codes[2]!, /bearer_token_env_var = "SWITCHYARD_API_KEY"/);
      // And the Responses API's mcp tool naming the server, for any model: the gateway runs the tool loop.
      assert.ok(
        codes[3]!.includes(`${gateway.url}/v1/responses`) && codes[3]!.includes('"server_label":"notes"'),
        codes[3],
      );
      assert.deepEqual(await toolNames(page), [
        'notes__search',
        'notes__add',
        'notes__crash',
        'notes__slow',
        'notes__count',
      ]);
      // One key's tools: only what it may use, and its hint in the configs.
      await page.getByLabel('Key').selectOption(searchOnly);
      await page.getByRole('heading', { name: 'Tools search only may use' }).waitFor();
      assert.deepEqual(await toolNames(page), ['notes__search']);
      assert.match(await page.locator('pre.code').first().innerText(), /Bearer <your key sy-/);
      // Nothing of where the server is reached, nor its secret, is on a member's page.
      const text = await page.locator('main').innerText();
      assert.ok(!text.includes(notes.url) && !text.includes(upstreamSecret), 'no URL or secret shown to a member');
      await assertFits(page, `tools ${label}`);
      await shoot(page, `tools-member-${label}`);
      await closeClean(context, `tools ${label}`);
    }

    // The team (the member's own account) narrowed by an admin: the page says so and lists only those.
    await json(adminApi('PATCH', `/admin/accounts/${memberId}`, { mcp_tools: ['notes/add', 'notes/search'] }));
    const context = await openContext(browser, gateway.url, { width: 1280, height: 800 });
    const page = await context.newPage();
    await signIn(page, memberEmail, memberPassword);
    await page.goto('/console/tools');
    await tablesLoaded(page, 'tools');
    await page.getByText('This team may use only notes/add, notes/search.').waitFor();
    assert.deepEqual((await toolNames(page)).sort(), ['notes__add', 'notes__search']);
    await page.getByLabel('Key').selectOption(searchOnly);
    await page.getByRole('heading', { name: 'Tools search only may use' }).waitFor();
    assert.deepEqual(await toolNames(page), ['notes__search']);
    await closeClean(context, 'tools narrowed');
  });

  it(
    "an admin sees where the server is reached and every tool, never the header's value, checks it now, and limits " +
      "a member's key to a tool",
    async () => {
      const context = await openContext(browser, gateway.url, { width: 1280, height: 800 });
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      await page.goto('/console/tools');
      await tablesLoaded(page, 'tools');
      await page
        .locator('tbody tr')
        .filter({ hasText: 'notes' })
        .first()
        .getByRole('button', { name: 'Details' })
        .click();
      await page.getByText(new URL(notes.url).host).first().waitFor();
      const text = await page.locator('main').innerText();
      assert.ok(text.includes('authorization') || text.includes('Authorization'), 'the header by name');
      assert.ok(!text.includes(upstreamSecret), 'never its value');
      assert.equal((await toolNames(page)).length, 5);
      // Check now: a worker checks the server at once; the row says when.
      const check = page.getByRole('button', { name: 'Check notes now' });
      await check.click();
      await page.getByRole('button', { name: 'Check notes now' }).filter({ hasText: 'Check now' }).waitFor();
      assert.equal(await page.locator('.alert-error').count(), 0, 'no error');
      assert.match(await page.locator('tbody tr').filter({ hasText: 'notes' }).first().innerText(), /OK[\s\S]*checked/);
      await shoot(page, 'tools-admin-desktop');

      // Accounts: an admin sets the tools of the member's account (their team) in the console.
      await page.goto('/console/admin/accounts');
      await tablesLoaded(page, 'accounts');
      await page
        .locator('tbody tr')
        .filter({ hasText: memberEmail })
        .first()
        .getByRole('button', { name: /^Change MCP tools/ })
        .click();
      const tools = page.getByRole('dialog', { name: `MCP tools of ${memberEmail}` });
      await tools.getByLabel('Only these tools').fill('notes/*');
      await tools.getByRole('button', { name: 'Save' }).click();
      await tools.waitFor({ state: 'detached' });
      assert.deepEqual(
        (await json<{ mcp_tools: string[] | null }>(adminApi('GET', `/admin/accounts/${memberId}`))).mcp_tools,
        ['notes/*'],
      );

      // All keys: an admin limits a member's key to one tool; the key may use that one only (and the member is told).
      await page.goto('/console/admin/keys');
      await tablesLoaded(page, 'all keys');
      await page
        .locator('tbody tr')
        .filter({ hasText: 'every tool' })
        .first()
        .getByRole('button', { name: 'Edit' })
        .click();
      const edit = page.getByRole('dialog', { name: 'Edit every tool' });
      await edit.getByLabel('MCP tools').fill('notes/add, no-slash');
      await edit.getByRole('button', { name: 'Save' }).click();
      await edit.getByText('"no-slash" is no tool pattern').waitFor();
      await edit.getByLabel('MCP tools').fill('notes/add');
      await edit.getByRole('button', { name: 'Save' }).click();
      await edit.waitFor({ state: 'detached' });
      assert.deepEqual(
        (await json<{ mcp_tools: string[] | null }>(adminApi('GET', `/admin/keys/${everyTool}`))).mcp_tools,
        ['notes/add'],
      );
      await closeClean(context, 'tools admin');
      const member = await openContext(browser, gateway.url, { width: 1280, height: 800 });
      const memberPage = await member.newPage();
      await signIn(memberPage, memberEmail, memberPassword);
      await memberPage.goto('/console/tools');
      await tablesLoaded(memberPage, 'tools');
      await memberPage.getByLabel('Key').selectOption(everyTool);
      await memberPage.getByText('This key is limited to notes/add.').waitFor();
      assert.deepEqual(await toolNames(memberPage), ['notes__add']);
      await closeClean(member, "tools after the admin's change");
    },
  );

  it('an admin adds a server with a secret header, sees it checked, changes it and removes it', async () => {
    const context = await openContext(browser, gateway.url, { width: 1280, height: 800 });
    const page = await context.newPage();
    await signIn(page, adminEmail, adminPassword);
    await page.goto('/console/tools');
    await tablesLoaded(page, 'tools');
    await page.getByRole('button', { name: 'Add server' }).click();
    const add = page.getByRole('dialog', { name: 'Add an MCP server' });
    await add.getByLabel('Name').fill('Wiki Tools');
    await add.getByLabel('URL').fill(notes.url);
    await add.getByLabel('Headers', { exact: true }).fill(`Authorization: Bearer ${upstreamSecret}`);
    await add.getByLabel('Price per call (USD)').fill('0.003');
    await add.getByRole('button', { name: 'Add server' }).click();
    await add.getByText('Name: lower-case letters').waitFor();
    await add.getByLabel('Name').fill('wiki');
    await add.getByRole('button', { name: 'Add server' }).click();
    await add.waitFor({ state: 'detached' });
    // A worker checks it at once; the page (read again every 10 s, or on Check now) shows it OK with its tools.
    const row = page.locator('tbody tr').filter({ hasText: 'wiki' }).first();
    await page.getByRole('button', { name: 'Check wiki now' }).click();
    await waitFor(async () => /OK/.test(await row.innerText()), 15_000, 'the added server checked');
    assert.match(await row.innerText(), /\$0\.003(?!\d)/);
    assert.ok((await toolNames(page)).includes('wiki__search'));
    assert.ok(!(await page.locator('main').innerText()).includes(upstreamSecret), 'the header never shown');
    await shoot(page, 'tools-admin-added');

    // Changed: its price; the headers stay as they were (nothing entered).
    await page.getByRole('button', { name: 'Change wiki' }).click();
    const change = page.getByRole('dialog', { name: 'Change wiki' });
    assert.equal(await change.getByLabel('Headers', { exact: true }).inputValue(), '');
    await change.getByLabel('Price per call (USD)').fill('0.005');
    await change.getByRole('button', { name: 'Save' }).click();
    await change.waitFor({ state: 'detached' });
    await waitFor(async () => /\$0\.005(?!\d)/.test(await row.innerText()), 5000, 'the new price shown');
    const listed = await json<{ data: Array<{ name: string; header_names: string[]; status: string }> }>(
      adminApi('GET', '/admin/mcp/servers'),
    );
    assert.deepEqual(listed.data.find((server) => server.name === 'wiki')?.header_names, ['Authorization']);

    // The file's server offers no Change or Remove.
    assert.equal(await page.getByRole('button', { name: 'Change notes' }).count(), 0);
    await page.getByRole('button', { name: 'Remove wiki' }).click();
    const remove = page.getByRole('alertdialog', { name: 'Remove wiki?' });
    await remove.getByRole('button', { name: 'Remove server' }).click();
    await remove.waitFor({ state: 'detached' });
    await page.locator('tbody tr').filter({ hasText: 'wiki' }).waitFor({ state: 'detached' });
    assert.ok(!(await toolNames(page)).some((name) => name.startsWith('wiki__')));
    await closeClean(context, 'tools servers added');
  });
});
