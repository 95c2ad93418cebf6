import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import OpenAI from 'openai';
import type { Redis } from 'ioredis';
import { type Browser, type BrowserContext, type Page } from 'playwright-core';
import { createBatch, newBatchId, recordBatchResult } from '../../shared/batches/index.js';
import { launchChromium } from '../support/browser.js';
import {
  boxFits,
  countLayoutShift,
  layoutShift,
  openContext,
  pageOverrun,
  screenshots,
  signIn,
} from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { amountsIn, followsMoneyRule } from '../support/money-rule.js';

/*
 * The console in a real headless Chromium (Debian's package, driven by
 * playwright-core), against a real gateway: found by what the page says
 * (labels, roles, names), as a person reads it. Screenshots of every page at
 * desktop and phone width land in test-artifacts/console/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console');
/** The whole page, cut at 4,000 px (the pricing page lists 200+ models). */
const shoot = screenshots(shots);
const adminEmail = 'admin@browser.test';
const adminPassword = 'browser-admin-pw';
const adminToken = 'browser-test-admin-token';
const desktop = { width: 1280, height: 800 };
const phone = { width: 375, height: 812 };
/** A larger phone's first screen, for what must be in sight without scrolling. */
const tallPhone = { width: 390, height: 844 };
const widths = [
  ['desktop', desktop],
  ['phone', phone],
] as const;

describe('web console in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  /** The gateway's Redis: message batches are written into it as the api writes them. */
  let redis: Redis;

  before(async () => {
    // The same build `npm start` runs: the console's bundle is part of it.
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const fresh = await freshRedis(8);
    const url = fresh.url;
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        ADMIN_TOKEN: adminToken,
        MOCK_STREAM_DELAY_MS: '30',
      },
    });
    browser = await launchChromium();
    // The admin made from ADMIN_EMAIL spends without a balance: its own requests need no credit.
    const accounts = (await (await adminApi('GET', '/admin/accounts')).json()) as {
      data: Array<{ id: string; email: string; balance_usd: number | null }>;
    };
    assert.equal(accounts.data.find((a) => a.email === adminEmail)!.balance_usd, null);
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
    redis?.disconnect();
  });

  const adminApi = adminRequest(() => gateway.url, adminToken);
  /** How far the page, and each table's own scroll box, run past their width (px). */
  const overflow = async (page: Page) => ({
    page: await pageOverrun(page),
    boxes: (await boxFits(page)).map((box) => box.box),
  });

  async function newContext(viewport: { width: number; height: number } = desktop): Promise<BrowserContext> {
    // en-US: the money rule is checked on the page's own digits and separators.
    const context = await openContext(browser, gateway.url, viewport);
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: gateway.url });
    return context;
  }

  /** What a Copy button put on the clipboard: emptied first, so a button that copies nothing is caught. */
  async function copiedBy(page: Page, button: ReturnType<Page['getByRole']>): Promise<string> {
    await page.evaluate(() => navigator.clipboard.writeText(''));
    await button.click();
    await waitFor(async () => (await page.evaluate(() => navigator.clipboard.readText())) !== '', 2000, 'the copy');
    return page.evaluate(() => navigator.clipboard.readText());
  }

  /**
   * The new key's dialog: the key and every snippet whole in sight (wrapped,
   * never cut off), each with its own Copy that copies exactly it. Returns the
   * secret.
   */
  async function checkSecretDialog(page: Page, shot: string): Promise<string> {
    const field = page.getByLabel('Secret key');
    const secret = await field.inputValue();
    assert.match(secret, /^sy-[A-Za-z0-9_-]{20,}$/);
    const hidden = await field.evaluate((element) => [
      element.scrollWidth - element.clientWidth,
      element.scrollHeight - element.clientHeight,
    ]);
    assert.ok(
      hidden.every((px) => px <= 1),
      `${shot}: the key field hides ${hidden.join(' × ')}px of the key`,
    );
    assert.equal(await copiedBy(page, page.getByRole('button', { name: 'Copy key' })), secret);
    for (const [title, label] of [
      ['curl', 'curl example'],
      ['Python (openai)', 'Python example'],
      ['JavaScript (openai)', 'JavaScript example'],
    ] as const) {
      const snippet = page.getByLabel(label);
      const copied = await copiedBy(page, page.getByRole('button', { name: `Copy ${title}` }));
      assert.equal(copied, await snippet.innerText(), `${shot}: Copy ${title} copies its own snippet`);
      assert.ok(copied.includes(secret), `${shot}: the ${title} snippet holds the whole key`);
      const cut = await snippet.evaluate((element) => element.scrollWidth - element.clientWidth);
      assert.ok(cut <= 1, `${shot}: ${cut}px of the ${title} snippet is out of sight`);
    }
    await shoot(page, shot);
    return secret;
  }

  async function memberAccount(email: string, password: string, creditUsd = 0): Promise<string> {
    const made = (await (await adminApi('POST', '/admin/accounts', { email, password, role: 'member' })).json()) as {
      id: string;
    };
    if (creditUsd) await adminApi('POST', `/admin/accounts/${made.id}/credits`, { amount_usd: creditUsd });
    return made.id;
  }

  it('ships under 200 KB of gzipped JavaScript, with no inline script', () => {
    const dir = join(root, 'dist', 'console');
    const scripts = readdirSync(join(dir, 'assets')).filter((f) => f.endsWith('.js'));
    const gzipped = scripts.reduce(
      (sum, f) => sum + gzipSync(readFileSync(join(dir, 'assets', f)), { level: 9 }).length,
      0,
    );
    assert.ok(gzipped < 200 * 1024, `${gzipped} bytes of gzipped JavaScript`);
    const html = readFileSync(join(dir, 'index.html'), 'utf8');
    assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/i, 'every script is a file: the CSP forbids inline ones');
  });

  it(
    'signs in, creates and copies a key that works with the openai client, shows its usage, and revoking it locks ' +
      'the client out',
    async () => {
      const context = await newContext();
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      await page.waitForURL('**/console/keys');
      await page.getByRole('button', { name: 'New key' }).click();
      await page.getByLabel('Name').fill('browser key');
      await page.getByRole('button', { name: 'Create key' }).click();
      const secret = await checkSecretDialog(page, 'keys-created-desktop');
      // The page shows the gateway's own base URL in its snippets.
      await assert.doesNotReject(page.getByText(`${gateway.url}/v1`).first().waitFor());

      const client = new OpenAI({ apiKey: secret, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
      const answer = await client.chat.completions.create({
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: 'Hello from the browser test' }],
      });
      assert.ok(answer.choices[0]!.message.content);

      // The secret is gone once the dialog is closed: not in the page any more.
      await page.keyboard.press('Escape');
      await page.reload();
      await page.getByRole('cell', { name: 'browser key' }).waitFor();
      assert.equal((await page.content()).includes(secret), false, 'the secret is never rendered twice');

      // Usage: the request appears, by model and by key, with the cost /admin/usage reports.
      await page.getByRole('link', { name: 'Usage' }).click();
      await page.waitForURL('**/console/usage');
      let adminRows: Array<{ model: string; requests: number; cost_usd: number }> = [];
      await waitFor(
        async () => {
          adminRows = (
            (await (await adminApi('GET', '/admin/usage?group_by=model')).json()) as { data: typeof adminRows }
          ).data.filter((r) => r.model === 'gpt-4o-mini');
          return adminRows.length === 1;
        },
        5000,
        'the request to be settled',
      );
      await page.reload();
      const byModel = page.getByRole('table', { name: 'By model', exact: true });
      await byModel.getByRole('cell', { name: 'gpt-4o-mini', exact: true }).waitFor();
      const row = byModel.getByRole('row').filter({ hasText: 'gpt-4o-mini' });
      const rowText = await row.innerText();
      assert.match(rowText, new RegExp(`\\b${adminRows[0]!.requests}\\b`));
      // The spend as the one money rule writes it: within its rounding of what /admin/usage reports.
      // Spend is the row's last amount (before it, what the response cache saved).
      const spend = amountsIn(rowText).at(-1);
      const cost = adminRows[0]!.cost_usd;
      assert.ok(spend && followsMoneyRule(spend), `${rowText}: ${spend}`);
      assert.ok(
        Math.abs(Number(spend.replace(/[$,]/g, '')) - cost) <= Math.max(5e-7, cost * 5e-4),
        `${spend} vs ${cost}`,
      );
      await page
        .getByRole('table', { name: /by key/i })
        .getByRole('cell', { name: 'browser key' })
        .waitFor();
      await shoot(page, 'usage-desktop');

      // Revoke, with its confirmation; the client is refused.
      await page.getByRole('link', { name: 'Keys' }).click();
      await page.getByRole('row').filter({ hasText: 'browser key' }).getByRole('button', { name: 'Revoke' }).click();
      await page.getByRole('button', { name: 'Revoke key' }).click();
      await page.getByRole('row').filter({ hasText: 'browser key' }).getByText('Revoked', { exact: true }).waitFor();
      await waitFor(
        async () => {
          try {
            await client.models.list();
            return false;
          } catch (error) {
            return error instanceof OpenAI.AuthenticationError;
          }
        },
        1000,
        'the revoked key to be refused',
      );
      await context.close();
    },
  );

  it('lists every model of /v1/models with a price on the public pricing page, and filters them', async () => {
    const { key } = (await (await adminApi('POST', '/admin/keys', { name: 'models' })).json()) as { key: string };
    const models = await new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0 }).models.list();
    const context = await newContext();
    const page = await context.newPage();
    await page.goto('/console/pricing');
    const table = page.getByRole('table');
    await table.getByRole('cell', { name: 'gpt-4o', exact: true }).waitFor();
    const ids = await table
      .locator('tbody tr')
      .evaluateAll((rows) => rows.map((r) => (r.querySelector('td, th') as HTMLElement | null)?.innerText.trim()));
    assert.deepEqual([...ids].sort(), models.data.map((m) => m.id).sort());
    const gpt4o = await table
      .getByRole('row')
      .filter({ has: page.getByRole('cell', { name: 'gpt-4o', exact: true }) })
      .innerText();
    assert.match(gpt4o, /\$\s?2\.5/);
    // The tiers' multiples of the token prices (SERVICE_TIER_PRICE_FLEX and _PRIORITY, unset here).
    assert.match(
      await page.locator('.pricing-tiers').innerText(),
      /×0\.5 for flex, ×1 for default and ×2 for priority/,
    );
    await shoot(page, 'pricing-desktop');
    await page.getByLabel('Search models').fill('claude');
    await waitFor(
      async () => (await table.locator('tbody tr').count()) < models.data.length,
      2000,
      'the search to filter',
    );
    const shown = await table.locator('tbody tr').allInnerTexts();
    assert.ok(shown.length > 0 && shown.every((text) => /claude/i.test(text)));
    await page.setViewportSize(phone);
    await shoot(page, 'pricing-phone');
    await context.close();
  });

  it(
    'pricing: at 1280 px every column, "Other prices" too, is in its box beside the sidebar; narrower, the table ' +
      'scrolls in its box, never the page',
    async () => {
      const context = await newContext();
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      await page.waitForURL('**/console/keys');
      for (const signedIn of [true, false]) {
        await page.setViewportSize(desktop);
        if (!signedIn) {
          await page.getByRole('button', { name: 'Sign out' }).click();
          await page.getByRole('button', { name: 'Sign in' }).waitFor();
        }
        await page.goto('/console/pricing');
        const other = page
          .getByRole('row')
          .filter({ has: page.getByRole('cell', { name: 'claude-3-opus-20240229', exact: true }) })
          .getByText(/Cache write/);
        await other.waitFor();
        const fits = await overflow(page);
        const where = signedIn ? 'signed in, beside the sidebar' : 'signed out';
        assert.deepEqual(fits, { page: 0, boxes: [0] }, `${where} at 1280px: ${JSON.stringify(fits)}`);
        // The last column's text ends inside the card: none of it clipped at its edge.
        const [cellRight, boxRight] = await other.evaluate((element) => [
          element.closest('td')!.getBoundingClientRect().right,
          element.closest('.table-scroll')!.getBoundingClientRect().right,
        ]);
        assert.ok(
          cellRight <= boxRight + 0.5,
          `${where}: "Other prices" ends at ${cellRight}px, its box at ${boxRight}px`,
        );
        if (signedIn) await shoot(page, 'pricing-signed-in-desktop');
        // A tablet: the table is wider than the screen and scrolls inside its own box; the page itself does not.
        await page.setViewportSize({ width: 768, height: 1024 });
        const tablet = await overflow(page);
        assert.ok(tablet.page <= 0 && tablet.boxes[0]! > 0, `at 768px: ${JSON.stringify(tablet)}`);
        const scrolled = await page.evaluate(() => {
          const box = document.querySelector('.pricing-card .table-scroll')!;
          box.scrollLeft = box.scrollWidth;
          return box.scrollLeft > 0 && window.scrollX === 0;
        });
        assert.ok(scrolled, 'the box scrolls sideways, the page stays');
        if (signedIn) await shoot(page, 'pricing-signed-in-tablet');
        // A phone: a card for each model, each inside the screen, every price labelled.
        await page.setViewportSize(phone);
        const cards = await page.evaluate(() => {
          const rows = [...document.querySelectorAll('.pricing-table tbody tr')];
          return {
            page: document.documentElement.scrollWidth - window.innerWidth,
            outside: rows.filter(
              (row) => row.getBoundingClientRect().right > window.innerWidth || row.scrollWidth > row.clientWidth + 1,
            ).length,
            rows: rows.length,
          };
        });
        assert.ok(cards.rows > 100 && cards.page <= 0 && cards.outside === 0, `at 375px: ${JSON.stringify(cards)}`);
        if (signedIn) await shoot(page, 'pricing-signed-in-phone');
      }
      await context.close();
    },
  );

  it(
    'streams a playground reply with its system prompt, temperature and max tokens, billed to the Playground key, ' +
      'at both widths',
    async () => {
      for (const [label, viewport] of widths) {
        const context = await newContext(viewport);
        const page = await context.newPage();
        await signIn(page, adminEmail, adminPassword);
        await page.waitForURL('**/console/keys');
        await page.goto('/console/playground');
        await page.getByLabel('Model').selectOption('gpt-4o-mini');
        await page.getByLabel('System prompt').fill('Answer in one line.');
        await page.getByLabel('Temperature').fill('0.3');
        await page.getByLabel('Max tokens').fill('64');
        const sent = page.waitForRequest(
          (request) =>
            request.url().endsWith('/console/api/playground/chat/completions') && request.method() === 'POST',
        );
        await page.getByLabel('Message').fill('Tell me something');
        // Every length the reply's text takes, recorded in the page as the DOM changes (polling from here could miss the
        // steps).
        await page.evaluate(() => {
          const seen: number[] = [];
          (window as unknown as { __replyLengths: number[] }).__replyLengths = seen;
          new MutationObserver(() => {
            const replies = document.querySelectorAll('[data-role="assistant"]');
            const length = replies[replies.length - 1]?.textContent?.length ?? 0;
            if (length > 0 && length !== seen[seen.length - 1]) seen.push(length);
          }).observe(document.body, { childList: true, subtree: true, characterData: true });
        });
        await page.getByRole('button', { name: 'Send' }).click();
        const body = (await sent).postDataJSON() as {
          messages: Array<{ role: string; content: string }>;
          temperature: number;
          max_tokens: number;
          stream: boolean;
        };
        assert.deepEqual(body.messages, [
          { role: 'system', content: 'Answer in one line.' },
          { role: 'user', content: 'Tell me something' },
        ]);
        assert.deepEqual([body.temperature, body.max_tokens, body.stream], [0.3, 64, true]);
        const lengths = async () =>
          page.evaluate(() => (window as unknown as { __replyLengths: number[] }).__replyLengths);
        await waitFor(
          async () => (await lengths()).length >= 2 && (await page.getByRole('button', { name: 'Send' }).isEnabled()),
          15_000,
          'the streamed reply',
        ).catch(async (error: unknown) => {
          throw new Error(
            `${(error as Error).message}: lengths seen ${JSON.stringify(await lengths())}, page text: ${(await page.locator('main').innerText()).slice(0, 500)}`,
          );
        });
        // The reply grew in steps while it streamed, and ended as the whole answer.
        const seen = await lengths();
        assert.ok(
          seen.every((length, i) => i === 0 || length > seen[i - 1]!),
          JSON.stringify(seen),
        );
        assert.match(await page.locator('[data-role="assistant"]').last().innerText(), /Tell me something/);
        await shoot(page, `playground-reply-${label}`);
        // Out of range, the page says so and sends nothing.
        await page.getByLabel('Temperature').fill('3');
        let posted = false;
        page.on('request', (request) => {
          if (request.url().endsWith('/chat/completions')) posted = true;
        });
        await page.getByLabel('Message').fill('Too hot');
        await page.getByRole('button', { name: 'Send' }).click();
        await page
          .getByRole('alert')
          .filter({ hasText: /Temperature must be a number from 0 to 2/ })
          .waitFor();
        assert.equal(posted, false);
        await page.goto('/console/keys');
        await page.getByRole('cell', { name: 'Playground', exact: true }).waitFor();
        await context.close();
      }
    },
  );

  it(
    'accounts: no Disable on your own row or the system account, a confirmation before any other, Add credit only ' +
      'where a balance is kept, at both widths',
    async () => {
      await memberAccount('disable-me@browser.test', 'member-password', 2.5);
      // The phone first: the desktop pass disables the account for good.
      for (const [label, viewport] of [...widths].reverse()) {
        const context = await newContext(viewport);
        const page = await context.newPage();
        await signIn(page, adminEmail, adminPassword);
        await page.waitForURL('**/console/keys');
        await page.goto('/console/admin/accounts');
        const rowOf = (text: string) => page.getByRole('row').filter({ hasText: text });
        await rowOf('disable-me@browser.test').waitFor();
        const mine = rowOf(adminEmail);
        assert.equal(await mine.getByRole('button', { name: 'Disable' }).count(), 0, `${label}: not on your own row`);
        assert.equal(
          await mine.getByRole('button', { name: 'Add credit' }).count(),
          0,
          `${label}: an unlimited admin takes no credit`,
        );
        assert.match(await mine.innerText(), /Unlimited/);
        // The default account: what it is ("System"), not an admin; unlimited, so no credit; never disabled from here.
        const system = rowOf('system account');
        const systemText = await system.innerText();
        assert.match(systemText, /System/);
        assert.match(systemText, /Unlimited/);
        assert.doesNotMatch(systemText, /Admin/);
        assert.equal(await system.getByRole('button', { name: 'Disable' }).count(), 0);
        assert.equal(await system.getByRole('button', { name: 'Add credit' }).count(), 0);
        // Every unlimited row goes without Add credit; every row with a balance has it.
        const rows = await page.locator('tbody tr').evaluateAll((trs) =>
          trs.map((tr) => ({
            unlimited: /Unlimited/.test((tr as HTMLElement).innerText),
            credit: [...tr.querySelectorAll('button')].some((b) => b.textContent === 'Add credit'),
          })),
        );
        assert.ok(
          rows.length >= 3 && rows.every((row) => row.unlimited !== row.credit),
          `${label}: ${JSON.stringify(rows)}`,
        );
        const member = rowOf('disable-me@browser.test');
        assert.match(await member.innerText(), /\$2\.50/);
        await member.getByRole('button', { name: 'Add credit' }).waitFor({ state: 'attached' });
        // Disable asks first, like Revoke; Cancel leaves the account as it was.
        await member.getByRole('button', { name: 'Disable' }).click();
        const confirm = page.getByRole('alertdialog', { name: 'Disable this account?' });
        await confirm.getByText(/signed out everywhere/).waitFor();
        await shoot(page, `accounts-disable-confirm-${label}`);
        await confirm.getByRole('button', { name: 'Cancel' }).click();
        await confirm.waitFor({ state: 'detached' });
        assert.match(await member.innerText(), /Active/, `${label}: cancel leaves it active`);
        // The account's weight (its share of contended capacity): shown in its row, set from it, kept.
        const weight = member.getByRole('button', { name: /^Change weight, now \d+$/ });
        const before = Number((await weight.innerText()).replace(/\D/g, ''));
        await weight.click();
        const dialog = page.getByRole('dialog', { name: /^Weight of disable-me@browser\.test/ });
        await dialog.getByLabel('Weight (1–100)').fill('101');
        await dialog.getByRole('button', { name: 'Save' }).click();
        await dialog.getByText('Enter a whole number from 1 to 100.').waitFor();
        await dialog.getByLabel('Weight (1–100)').fill(String(before + 2));
        await dialog.getByRole('button', { name: 'Save' }).click();
        await dialog.waitFor({ state: 'detached' });
        await member.getByRole('button', { name: `Change weight, now ${before + 2}`, exact: true }).waitFor();
        const stored = (await (await adminApi('GET', '/admin/accounts')).json()) as {
          data: Array<{ email: string; weight: number }>;
        };
        assert.equal(
          stored.data.find((a) => a.email === 'disable-me@browser.test')?.weight,
          before + 2,
          `${label}: the weight is kept`,
        );
        // The account's service tiers: shown under its role, set from it (at least one, or the gateway's default), kept.
        const tiersButton = () => member.getByRole('button', { name: /^Change service tiers, now / });
        await tiersButton().click();
        const tiersDialog = page.getByRole('dialog', { name: /^Service tiers of disable-me@browser\.test/ });
        await tiersDialog.getByRole('checkbox', { name: 'Use the gateway’s default' }).setChecked(false);
        for (const tier of ['Priority', 'Default', 'Flex'])
          await tiersDialog.getByRole('checkbox', { name: tier, exact: true }).setChecked(false);
        await tiersDialog.getByRole('button', { name: 'Save' }).click();
        await tiersDialog.getByText('Choose at least one tier, or use the gateway’s default.').waitFor();
        await tiersDialog.getByRole('checkbox', { name: 'Priority', exact: true }).check();
        await tiersDialog.getByRole('checkbox', { name: 'Default', exact: true }).check();
        await shoot(page, `accounts-tiers-${label}`);
        await tiersDialog.getByRole('button', { name: 'Save' }).click();
        await tiersDialog.waitFor({ state: 'detached' });
        await member
          .getByRole('button', { name: 'Change service tiers, now Priority, Default', exact: true })
          .waitFor();
        const granted = (await (await adminApi('GET', '/admin/accounts')).json()) as {
          data: Array<{ email: string; service_tiers: string[] | null }>;
        };
        assert.deepEqual(
          granted.data.find((a) => a.email === 'disable-me@browser.test')?.service_tiers,
          ['priority', 'default'],
          `${label}: the tiers are kept`,
        );
        // And back to the gateway's default.
        await tiersButton().click();
        await tiersDialog.getByRole('checkbox', { name: 'Use the gateway’s default' }).check();
        await tiersDialog.getByRole('button', { name: 'Save' }).click();
        await tiersDialog.waitFor({ state: 'detached' });
        await member
          .getByRole('button', { name: 'Change service tiers, now the gateway’s default', exact: true })
          .waitFor();
        const reset = (await (await adminApi('GET', '/admin/accounts')).json()) as {
          data: Array<{ email: string; service_tiers: string[] | null }>;
        };
        assert.equal(
          reset.data.find((a) => a.email === 'disable-me@browser.test')?.service_tiers,
          null,
          `${label}: the default again`,
        );
        // The account's cache cap: shown under its role, set from it (whole seconds; 0 turns caching off; empty: none),
        // kept.
        type Capped = { data: Array<{ email: string; cache_max_ttl_s: number | null }> };
        const capOf = async () =>
          ((await (await adminApi('GET', '/admin/accounts')).json()) as Capped).data.find(
            (a) => a.email === 'disable-me@browser.test',
          )?.cache_max_ttl_s;
        await member.getByRole('button', { name: 'Change cache cap, now no cap', exact: true }).click();
        const capDialog = page.getByRole('dialog', { name: /^Cache cap of disable-me@browser\.test/ });
        await capDialog.getByText(/the gateway’s 86,400 s still holds/).waitFor();
        await capDialog.getByLabel('Cache cap (s)').fill('-1');
        await capDialog.getByRole('button', { name: 'Save' }).click();
        await capDialog.getByText(/^Enter a whole number of seconds from 0 to 31,536,000/).waitFor();
        await capDialog.getByLabel('Cache cap (s)').fill('0');
        await shoot(page, `accounts-cache-cap-${label}`);
        await capDialog.getByRole('button', { name: 'Save' }).click();
        await capDialog.waitFor({ state: 'detached' });
        await member.getByRole('button', { name: 'Change cache cap, now off', exact: true }).waitFor();
        assert.equal(await capOf(), 0, `${label}: 0, caching off, is kept`);
        await member.getByRole('button', { name: 'Change cache cap, now off', exact: true }).click();
        assert.equal(await capDialog.getByLabel('Cache cap (s)').inputValue(), '0');
        await capDialog.getByLabel('Cache cap (s)').fill('3600');
        await capDialog.getByRole('button', { name: 'Save' }).click();
        await capDialog.waitFor({ state: 'detached' });
        await member.getByRole('button', { name: 'Change cache cap, now 3,600 s', exact: true }).waitFor();
        assert.equal(await capOf(), 3600, `${label}: the cap is kept`);
        await member.getByRole('button', { name: /^Change cache cap, now / }).click();
        await capDialog.getByLabel('Cache cap (s)').fill('');
        await capDialog.getByRole('button', { name: 'Save' }).click();
        await capDialog.waitFor({ state: 'detached' });
        await member.getByRole('button', { name: 'Change cache cap, now no cap', exact: true }).waitFor();
        assert.equal(await capOf(), null, `${label}: no cap again`);
        if (label === 'desktop') {
          await member.getByRole('button', { name: 'Disable' }).click();
          await confirm.getByRole('button', { name: 'Disable account' }).click();
          await member.getByText('Disabled').waitFor();
          await member.getByRole('button', { name: 'Enable' }).waitFor();
          // The API refuses what the page does not offer, in the OpenAI error shape.
          // (No named functions inside: the page runs this code as it is, without the test's module helpers.)
          const refused = await page.evaluate(async () => {
            const session = (await (await fetch('/console/api/session')).json()) as {
              csrf_token: string;
              account: { id: string };
            };
            return Promise.all(
              [session.account.id, 'acct_default'].map((id) =>
                fetch(`/console/api/admin/accounts/${id}`, {
                  method: 'PATCH',
                  headers: { 'content-type': 'application/json', 'x-csrf-token': session.csrf_token },
                  body: JSON.stringify({ disabled: true }),
                }).then(async (r) => ({
                  status: r.status,
                  ...((await r.json()) as { error: { type: string; code: string; param: string; message: string } })
                    .error,
                })),
              ),
            );
          });
          assert.deepEqual(
            refused.map(({ status, type, code, param }) => ({ status, type, code, param })),
            [
              { status: 400, type: 'invalid_request_error', code: 'own_account', param: 'disabled' },
              { status: 400, type: 'invalid_request_error', code: 'default_account', param: 'disabled' },
            ],
          );
          assert.ok(refused.every((error) => error.message.length > 0));
          // Both still active.
          const accounts = (await (await adminApi('GET', '/admin/accounts')).json()) as {
            data: Array<{ id: string; email: string; disabled: boolean }>;
          };
          assert.ok(
            accounts.data.filter((a) => a.email === adminEmail || a.id === 'acct_default').every((a) => !a.disabled),
          );
        }
        await context.close();
      }
    },
  );

  it("names the default account on its keys' rows in All keys, at both widths", async () => {
    await adminApi('POST', '/admin/keys', { name: 'no-account key' });
    for (const [label, viewport] of widths) {
      const context = await newContext(viewport);
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      await page.waitForURL('**/console/keys');
      await page.goto('/console/admin/keys');
      // Its keys under the Default account's heading, their table named by it.
      await page
        .getByRole('table', { name: 'Default', exact: true })
        .getByRole('row')
        .filter({ hasText: 'no-account key' })
        .waitFor();
      // Every account's heading names it: none blank.
      const blank = await page
        .locator('.key-group-title')
        .evaluateAll((headings) => headings.filter((h) => !(h as HTMLElement).innerText.trim()).length);
      assert.equal(blank, 0);
      await shoot(page, `admin-keys-default-${label}`);
      await context.close();
    }
  });

  it(
    'keys: the list first (on a phone, its first row on the first screen), the new-key form behind a button, its ' +
      'dialog whole on a phone',
    async () => {
      for (const [label, viewport] of [
        ['phone', tallPhone],
        ['small-phone', phone],
        ['desktop', desktop],
      ] as const) {
        const context = await newContext(viewport);
        const page = await context.newPage();
        await signIn(page, adminEmail, adminPassword);
        await page.waitForURL('**/console/keys');
        const firstRow = page.getByRole('table', { name: 'Your keys' }).locator('tbody tr').first();
        await firstRow.getByRole('button', { name: 'Revoke' }).waitFor();
        assert.equal(await page.getByLabel('Name').count(), 0, 'no form until asked for');
        // The first key's whole row is on the first screen, without scrolling.
        const box = (await firstRow.boundingBox())!;
        assert.ok(
          box.y >= 0 && box.y + box.height <= viewport.height,
          `${label}: the first key's row spans ${Math.round(box.y)}–${Math.round(box.y + box.height)}px of a ` +
            `${viewport.height}px screen`,
        );
        await shoot(page, `keys-first-screen-${label}`);
        if (label !== 'small-phone') {
          await page.getByRole('button', { name: 'New key' }).click();
          await page.getByLabel('Name').fill(`${label} key`);
          // The key's default cache TTL: a whole number of seconds, said before anything is sent.
          if (label === 'desktop') {
            await page.getByLabel('Cache TTL (s)').fill('1.5');
            await page.getByRole('button', { name: 'Create key' }).click();
            await page.getByText(/^The cache TTL must be a whole number of seconds/).waitFor();
            await page.getByLabel('Cache TTL (s)').fill('600');
          }
          await shoot(page, `keys-new-dialog-${label}`);
          await page.getByRole('button', { name: 'Create key' }).click();
          if (label === 'phone') await checkSecretDialog(page, 'keys-created-phone');
          await page.getByRole('button', { name: 'Done' }).click();
          await page.getByRole('cell', { name: `${label} key` }).waitFor();
        }
        if (label === 'desktop') {
          type Listed = { data: Array<{ name: string; cache_ttl_s: number | null }> };
          const ttlOf = async (name: string) =>
            ((await (await adminApi('GET', '/admin/keys')).json()) as Listed).data.find((key) => key.name === name)
              ?.cache_ttl_s;
          const row = page
            .getByRole('table', { name: 'Your keys' })
            .getByRole('row')
            .filter({ hasText: 'desktop key' });
          assert.match(await row.innerText(), /Cache TTL: 600 s/, 'the list shows the cache TTL, under the name');
          assert.equal(await ttlOf('desktop key'), 600);
          // Changed from Edit, then cleared (empty: none).
          await row.getByRole('button', { name: 'Edit' }).click();
          const edit = page.getByRole('dialog', { name: 'Edit desktop key' });
          assert.equal(await edit.getByLabel('Cache TTL (s)').inputValue(), '600');
          await edit.getByLabel('Cache TTL (s)').fill('7200');
          await edit.getByRole('button', { name: 'Save' }).click();
          await edit.waitFor({ state: 'detached' });
          await row.getByText('Cache TTL: 7,200 s').waitFor();
          assert.equal(await ttlOf('desktop key'), 7200);
          await row.getByRole('button', { name: 'Edit' }).click();
          await edit.getByLabel('Cache TTL (s)').fill('');
          await edit.getByRole('button', { name: 'Save' }).click();
          await edit.waitFor({ state: 'detached' });
          await waitFor(
            async () => !/Cache TTL/.test(await row.innerText()),
            2000,
            'the cleared TTL gone from the row',
          );
          assert.equal(await ttlOf('desktop key'), null);
        }
        await context.close();
      }
    },
  );

  it('writes every amount by one money rule and counts requests in whole numbers, at both widths', async () => {
    // A balance past the cent, beside the first test's spend of a fraction of a cent.
    await memberAccount('money@browser.test', 'member-password', 2.345678);
    for (const [label, viewport] of widths) {
      const context = await newContext(viewport);
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      await page.waitForURL('**/console/keys');
      for (const path of ['usage', 'keys', 'pricing', 'admin/accounts', 'admin/keys']) {
        await page.goto(`/console/${path}`);
        await page.getByRole('heading', { level: 1 }).waitFor();
        await page.waitForLoadState('networkidle');
        const amounts = amountsIn(await page.locator('body').innerText());
        assert.ok(amounts.length > 0, `${path}: amounts shown`);
        const off = [...new Set(amounts.filter((amount) => !followsMoneyRule(amount)))];
        assert.deepEqual(off, [], `${path} at ${label}: amounts off the rule`);
      }
      await page.goto('/console/admin/accounts');
      assert.match(await page.getByRole('row').filter({ hasText: 'money@browser.test' }).innerText(), /\$2\.35\b/);
      await page.goto('/console/pricing');
      const gemini = page
        .getByRole('row')
        .filter({ has: page.getByRole('cell', { name: 'gemini-1.5-flash', exact: true }) });
      assert.match(await gemini.innerText(), /\$0\.01875\b/, 'a price below a dollar keeps its digits');
      // The requests chart's value axis: whole numbers only.
      await page.goto('/console/usage');
      const ticks = page.locator('canvas[aria-label^="Requests per day"]');
      await waitFor(async () => ((await ticks.getAttribute('data-y-ticks')) ?? '') !== '', 5000, 'the requests chart');
      const values = (await ticks.getAttribute('data-y-ticks'))!.split(',').map(Number);
      assert.ok(values.length > 1 && values.every(Number.isInteger), `${label}: ticks ${values.join(', ')}`);
      await shoot(page, `usage-ticks-${label}`);
      await context.close();
    }
  });

  it(
    'lists the account’s batches newest first with their progress, counts and cost so far, the results line of an ' +
      'ended one, and more on request',
    async () => {
      const accountId = await memberAccount('batches@browser.test', 'member-password');
      const dayMs = 86_400_000;
      const now = Date.now();
      const batchOf = async (
        created: number,
        total: number,
        results: Array<['succeeded' | 'errored', number]> = [],
      ) => {
        const id = newBatchId();
        await createBatch(
          redis,
          { id, accountId, keyId: 'key_browser_batches', created, expires: now + dayMs, total },
          dayMs,
        );
        for (const [index, [outcome, cost]] of results.entries()) {
          const result =
            outcome === 'succeeded'
              ? {
                  type: 'succeeded' as const,
                  message: { id: `msg_${index}`, type: 'message', role: 'assistant', content: [] },
                }
              : {
                  type: 'errored' as const,
                  error: { type: 'error' as const, error: { type: 'api_error', message: 'failed' }, request_id: null },
                };
          assert.equal(await recordBatchResult(redis, id, index, `req-${index}`, result, dayMs, cost), 'recorded');
        }
        return id;
      };
      // 20 older ones, nothing run yet: the first page's 20 rows end among them, the rest behind "Load more".
      const older: string[] = [];
      for (let i = 0; i < 20; i++) older.push(await batchOf(now - 3_600_000 + i * 1000, 1));
      const ended = await batchOf(now - 120_000, 2, [
        ['succeeded', 500],
        ['errored', 0],
      ]);
      const running = await batchOf(now - 60_000, 4, [
        ['succeeded', 1_000_000],
        ['succeeded', 250_000],
        ['errored', 0],
      ]);

      for (const [label, viewport] of widths) {
        const context = await newContext(viewport);
        const page = await context.newPage();
        await signIn(page, 'batches@browser.test', 'member-password');
        await page.waitForURL('**/console/keys');
        if (label === 'phone') await page.getByRole('button', { name: 'Menu' }).click();
        await page.getByRole('link', { name: 'Batches' }).click();
        await page.waitForURL('**/console/batches');
        const table = page.getByRole('table', { name: 'Batches' });
        await table.getByRole('cell', { name: running, exact: true }).waitFor();

        // Newest first: the one under way, then the ended one, then the older ones.
        const ids = await table.locator('tbody tr.batch-row td:first-child').allInnerTexts();
        assert.deepEqual(ids.slice(0, 2), [running, ended], `${label}: ${ids.join(', ')}`);
        assert.equal(ids.length, 20, `${label}: one page of 20`);

        // The one under way: 3 of 4 done, by outcome, $1.25 billed so far, no results yet.
        const runningRow = table
          .getByRole('row')
          .filter({ has: page.getByRole('cell', { name: running, exact: true }) });
        const runningText = await runningRow.innerText();
        assert.match(runningText, /in progress/);
        assert.match(runningText, /3\/4/);
        assert.match(runningText, /2 succeeded · 1 errored · 1 processing/);
        assert.deepEqual(amountsIn(runningText), ['$1.25'], runningText);
        assert.match(runningText, /\bexpires\b/);
        const bar = page.getByRole('progressbar', { name: `${running}: 3 of 4 requests done` });
        assert.deepEqual([await bar.getAttribute('value'), await bar.getAttribute('max')], ['3', '4']);
        assert.equal(
          await page.getByRole('button', { name: `Copy the results command of ${running}` }).count(),
          0,
          'no results before it ends',
        );

        // The ended one: 2 of 2, $0.0005, and its results path in a curl line read with an API key, copied whole.
        const endedRow = table.getByRole('row').filter({ has: page.getByRole('cell', { name: ended, exact: true }) });
        const endedText = await endedRow.innerText();
        assert.match(endedText, /\bended\b/);
        assert.match(endedText, /2\/2/);
        assert.match(endedText, /1 succeeded · 1 errored/);
        assert.deepEqual(amountsIn(endedText), ['$0.0005'], endedText);
        assert.match(endedText, /\bended\b[^]*\bended\b/, 'its status, and when it ended');
        const curl = `curl ${gateway.url}/v1/messages/batches/${ended}/results -H "x-api-key: $SWITCHYARD_KEY"`;
        assert.equal(await page.getByLabel(`Results of ${ended}`).innerText(), curl);
        await page.getByText('read with an API key of this account').first().waitFor();
        assert.equal(
          await copiedBy(page, page.getByRole('button', { name: `Copy the results command of ${ended}` })),
          curl,
        );

        const amounts = amountsIn(await page.locator('main').innerText());
        assert.deepEqual(
          amounts.filter((amount) => !followsMoneyRule(amount)),
          [],
          `${label}: amounts off the rule`,
        );
        await shoot(page, `batches-list-${label}`);
        const wide = await overflow(page);
        assert.ok(wide.page <= 1, `${label}: the page is ${wide.page}px wider than the screen`);
        if (label === 'desktop')
          assert.ok(
            wide.boxes.every((px) => px <= 1),
            `batches at 1280px: the table is wider than its box by ${wide.boxes.join(', ')}px`,
          );

        // More: the two oldest come after the first page, and nothing is listed twice.
        await page.getByRole('button', { name: 'Load more' }).click();
        await table.getByRole('cell', { name: older[0]!, exact: true }).waitFor();
        const all = await table.locator('tbody tr.batch-row td:first-child').allInnerTexts();
        assert.deepEqual(all, [running, ended, ...[...older].reverse()]);
        assert.equal(await page.getByRole('button', { name: 'Load more' }).count(), 0, 'no more after the last page');
        await context.close();
      }
    },
  );

  it('keeps members out of admin pages and admin endpoints; refuses CSRF-less POSTs', async () => {
    await memberAccount('member@browser.test', 'member-password');
    const context = await newContext();
    const page = await context.newPage();
    await signIn(page, 'member@browser.test', 'member-password');
    await page.waitForURL('**/console/keys');
    assert.equal(await page.getByRole('link', { name: 'Accounts' }).count(), 0, 'no admin links for a member');
    const statuses = await page.evaluate(async () => {
      const paths = [
        '/console/api/admin/accounts',
        '/console/api/admin/keys',
        '/console/api/admin/channels',
        '/console/api/admin/queues',
      ];
      return Promise.all(paths.map((p) => fetch(p).then((r) => r.status)));
    });
    assert.deepEqual(statuses, [403, 403, 403, 403]);
    await page.goto('/console/admin/accounts');
    await page
      .getByText(/administrators/i)
      .first()
      .waitFor();
    const csrfLess = await page.evaluate(() =>
      fetch('/console/api/keys', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'sneaky' }),
      }).then((r) => r.status),
    );
    assert.equal(csrfLess, 403);
    await context.close();
  });

  it('throttles repeated failed sign-ins and says so', async () => {
    await memberAccount('throttle@browser.test', 'throttle-password');
    const context = await newContext();
    const page = await context.newPage();
    for (let i = 0; i < 5; i++) {
      await signIn(page, 'throttle@browser.test', `wrong-password-${i}`, null);
      await page
        .getByRole('alert')
        .filter({ hasText: /incorrect email or password/i })
        .waitFor();
    }
    await signIn(page, 'throttle@browser.test', 'throttle-password', null);
    await page
      .getByRole('alert')
      .filter({ hasText: /too many sign-in attempts/i })
      .waitFor();
    await shoot(page, 'signin-throttled-desktop');
    await context.close();
  });

  it('renders every page at desktop and phone width without layout shift, keyboard reachable', async () => {
    for (const [label, viewport] of widths) {
      const context = await newContext(viewport);
      await countLayoutShift(context);
      const page = await context.newPage();
      await page.goto('/console');
      await shoot(page, `signin-${label}`);
      await page.keyboard.press('Tab');
      const focused = await page.evaluate(() => document.activeElement?.tagName);
      assert.ok(focused && focused !== 'BODY', 'Tab moves focus into the page');
      await signIn(page, adminEmail, adminPassword);
      await page.waitForURL('**/console/keys');
      for (const path of [
        'keys',
        'usage',
        'activity',
        'batches',
        'pricing',
        'playground',
        'admin/accounts',
        'admin/keys',
        'admin/channels',
        'admin/queues',
      ]) {
        await page.goto(`/console/${path}`);
        await page.getByRole('heading', { level: 1 }).waitFor();
        await page.waitForLoadState('networkidle');
        const cls = await layoutShift(page);
        assert.ok(cls < 0.1, `${path} at ${label}: cumulative layout shift ${cls.toFixed(3)}`);
        const wide = await overflow(page);
        assert.ok(wide.page <= 1, `${path} at ${label}: the page is ${wide.page}px wider than the screen`);
        // At 1280 px no table needs its own scrolling: no column out of sight (on a phone a table may scroll in its
        // box).
        if (label === 'desktop')
          assert.ok(
            wide.boxes.every((px) => px <= 1),
            `${path} at 1280px: tables wider than their boxes by ${wide.boxes.join(', ')}px`,
          );
        await shoot(page, `${path.replace('/', '-')}-${label}`);
      }
      await context.close();
    }
  });
});
