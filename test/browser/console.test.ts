import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import OpenAI from 'openai';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

/*
 * The console in a real headless Chromium (Debian's package, driven by
 * playwright-core), against a real gateway: found by what the page says
 * (labels, roles, names), as a person reads it. Screenshots of every page at
 * desktop and phone width land in test-artifacts/console/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console');
const adminEmail = 'admin@browser.test';
const adminPassword = 'browser-admin-pw';
const adminToken = 'browser-test-admin-token';
const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const desktop = { width: 1280, height: 800 };
const phone = { width: 375, height: 812 };

describe('web console in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;

  before(async () => {
    assert.ok(existsSync(chromiumPath), `Chromium is needed at ${chromiumPath} (apt-get install chromium), or set CHROMIUM_PATH`);
    // The same build `npm start` runs: the console's bundle is part of it.
    execFileSync(process.execPath, ['bin/build.mjs'], { cwd: root, stdio: 'inherit' });
    mkdirSync(shots, { recursive: true });
    const { url, redis } = await freshRedis(8);
    redis.disconnect();
    gateway = await startGateway({
      env: { REDIS_URL: url, ADMIN_EMAIL: adminEmail, ADMIN_PASSWORD: adminPassword, ADMIN_TOKEN: adminToken, MOCK_STREAM_DELAY_MS: '30' },
    });
    browser = await chromium.launch({
      executablePath: chromiumPath,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    // The admin made from ADMIN_EMAIL spends without a balance: its own requests need no credit.
    const accounts = (await (await adminApi('GET', '/admin/accounts')).json()) as { data: Array<{ id: string; email: string; balance_usd: number | null }> };
    assert.equal(accounts.data.find((a) => a.email === adminEmail)!.balance_usd, null);
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
  });

  function adminApi(method: string, path: string, body?: unknown) {
    return fetch(`${gateway.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  }

  async function newContext(viewport = desktop): Promise<BrowserContext> {
    const context = await browser.newContext({ viewport, baseURL: gateway.url });
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: gateway.url });
    return context;
  }

  async function signIn(page: Page, email: string, password: string): Promise<void> {
    await page.goto('/console');
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(password);
    await page.getByRole('button', { name: 'Sign in' }).click();
  }

  /** The whole page, cut at 4,000 px (the pricing page lists 200+ models). */
  async function shoot(page: Page, name: string): Promise<void> {
    const height = await page.evaluate(() => document.documentElement.scrollHeight);
    const { width } = page.viewportSize()!;
    await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true, clip: { x: 0, y: 0, width, height: Math.min(height, 4000) } });
  }

  async function memberAccount(email: string, password: string, creditUsd = 0): Promise<string> {
    const made = (await (await adminApi('POST', '/admin/accounts', { email, password, role: 'member' })).json()) as { id: string };
    if (creditUsd) await adminApi('POST', `/admin/accounts/${made.id}/credits`, { amount_usd: creditUsd });
    return made.id;
  }

  it('ships under 200 KB of gzipped JavaScript, with no inline script', () => {
    const dir = join(root, 'dist', 'console');
    const scripts = readdirSync(join(dir, 'assets')).filter((f) => f.endsWith('.js'));
    const gzipped = scripts.reduce((sum, f) => sum + gzipSync(readFileSync(join(dir, 'assets', f)), { level: 9 }).length, 0);
    assert.ok(gzipped < 200 * 1024, `${gzipped} bytes of gzipped JavaScript`);
    const html = readFileSync(join(dir, 'index.html'), 'utf8');
    assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/i, 'every script is a file: the CSP forbids inline ones');
  });

  it('signs in, creates and copies a key that works with the openai client, shows its usage, and revoking it locks the client out', async () => {
    const context = await newContext();
    const page = await context.newPage();
    await signIn(page, adminEmail, adminPassword);
    await page.waitForURL('**/console/keys');
    await page.getByRole('button', { name: 'New key' }).click();
    await page.getByLabel('Name').fill('browser key');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByRole('button', { name: 'Copy key' }).click();
    const secret = await page.evaluate(() => navigator.clipboard.readText());
    assert.match(secret, /^sy-[A-Za-z0-9_-]{20,}$/);
    // Each snippet has its own Copy, copies itself whole, and shows the whole key (wrapped, never cut off).
    for (const [name, label] of [['Copy curl', 'curl example'], ['Copy Python (openai)', 'Python example'], ['Copy JavaScript (openai)', 'JavaScript example']] as const) {
      await page.getByRole('button', { name }).click();
      const copied = await page.evaluate(() => navigator.clipboard.readText());
      const snippet = page.getByLabel(label);
      assert.equal(copied, await snippet.innerText(), name);
      assert.ok(copied.includes(secret), `${name} holds the key`);
      const cut = await snippet.evaluate((element) => element.scrollWidth - element.clientWidth);
      assert.ok(cut <= 1, `${label}: ${cut}px of it is out of sight`);
    }
    await shoot(page, 'keys-created-desktop');
    // The page shows the gateway's own base URL in its snippets.
    await assert.doesNotReject(page.getByText(`${gateway.url}/v1`).first().waitFor());

    const client = new OpenAI({ apiKey: secret, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
    const answer = await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello from the browser test' }] });
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
    await waitFor(async () => {
      adminRows = ((await (await adminApi('GET', '/admin/usage?group_by=model')).json()) as { data: typeof adminRows }).data.filter((r) => r.model === 'gpt-4o-mini');
      return adminRows.length === 1;
    }, 5000, 'the request to be settled');
    await page.reload();
    const byModel = page.getByRole('table', { name: /by model/i });
    await byModel.getByRole('cell', { name: 'gpt-4o-mini', exact: true }).waitFor();
    const row = byModel.getByRole('row').filter({ hasText: 'gpt-4o-mini' });
    const rowText = await row.innerText();
    assert.match(rowText, new RegExp(`\\b${adminRows[0]!.requests}\\b`));
    assert.ok(rowText.includes(String(adminRows[0]!.cost_usd)) || rowText.includes(adminRows[0]!.cost_usd.toFixed(6)), `${rowText} vs ${adminRows[0]!.cost_usd}`);
    await page.getByRole('table', { name: /by key/i }).getByRole('cell', { name: 'browser key' }).waitFor();
    // A count axis ticks at whole numbers: one request is never drawn against "0.5".
    const ticks = page.locator('canvas[aria-label^="Requests per day"]');
    await waitFor(async () => ((await ticks.getAttribute('data-y-ticks')) ?? '') !== '', 5000, 'the requests chart');
    const values = (await ticks.getAttribute('data-y-ticks'))!.split(',').map(Number);
    assert.ok(values.length > 1 && values.every(Number.isInteger), `ticks ${values.join(', ')}`);
    await shoot(page, 'usage-desktop');

    // Revoke, with its confirmation; the client is refused.
    await page.getByRole('link', { name: 'Keys' }).click();
    await page.getByRole('row').filter({ hasText: 'browser key' }).getByRole('button', { name: 'Revoke' }).click();
    await page.getByRole('button', { name: 'Revoke key' }).click();
    await page.getByRole('cell', { name: 'browser key' }).waitFor({ state: 'detached' });
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
  });

  it('lists every model of /v1/models with a price on the public pricing page, and filters them', async () => {
    const { key } = (await (await adminApi('POST', '/admin/keys', { name: 'models' })).json()) as { key: string };
    const models = await new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0 }).models.list();
    const context = await newContext();
    const page = await context.newPage();
    await page.goto('/console/pricing');
    const table = page.getByRole('table');
    await table.getByRole('cell', { name: 'gpt-4o', exact: true }).waitFor();
    const ids = await table.locator('tbody tr').evaluateAll((rows) => rows.map((r) => (r.querySelector('td, th') as HTMLElement | null)?.innerText.trim()));
    assert.deepEqual([...ids].sort(), models.data.map((m) => m.id).sort());
    const gpt4o = await table.getByRole('row').filter({ has: page.getByRole('cell', { name: 'gpt-4o', exact: true }) }).innerText();
    assert.match(gpt4o, /\$\s?2\.5/);
    // At 1280 px every column, "Other prices" too, is in view: the table is no wider than its box.
    const clipped = await page.evaluate(() => {
      const box = document.querySelector('.pricing-card .table-scroll') as HTMLElement;
      return box.scrollWidth - box.clientWidth;
    });
    assert.ok(clipped <= 1, `the pricing table is ${clipped}px wider than its box at 1280px`);
    await shoot(page, 'pricing-desktop');
    await page.getByLabel('Search models').fill('claude');
    await waitFor(async () => (await table.locator('tbody tr').count()) < models.data.length, 2000, 'the search to filter');
    const shown = await table.locator('tbody tr').allInnerTexts();
    assert.ok(shown.length > 0 && shown.every((text) => /claude/i.test(text)));
    await page.setViewportSize(phone);
    await shoot(page, 'pricing-phone');
    await context.close();
  });

  it('streams a playground reply, billed to the Playground key', async () => {
    const context = await newContext();
    const page = await context.newPage();
    await signIn(page, adminEmail, adminPassword);
    await page.waitForURL('**/console/keys');
    await page.getByRole('link', { name: 'Playground' }).click();
    await page.getByLabel('Model').selectOption('gpt-4o-mini');
    await page.getByLabel('System prompt').fill('Answer in one line.');
    await page.getByLabel('Temperature').fill('0.3');
    await page.getByLabel('Max tokens').fill('64');
    const sent = page.waitForRequest((request) => request.url().endsWith('/console/api/playground/chat/completions') && request.method() === 'POST');
    await page.getByLabel('Message').fill('Tell me something');
    // Every length the reply's text takes, recorded in the page as the DOM changes (polling from here could miss the steps).
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
    const body = (await sent).postDataJSON() as { messages: Array<{ role: string; content: string }>; temperature: number; max_tokens: number; stream: boolean };
    assert.deepEqual(body.messages[0], { role: 'system', content: 'Answer in one line.' });
    assert.deepEqual([body.temperature, body.max_tokens, body.stream], [0.3, 64, true]);
    const lengths = async () => page.evaluate(() => (window as unknown as { __replyLengths: number[] }).__replyLengths);
    await waitFor(
      async () => (await lengths()).length >= 2 && (await page.getByRole('button', { name: 'Send' }).isEnabled()),
      15_000,
      'the streamed reply',
    ).catch(async (error: unknown) => {
      throw new Error(`${(error as Error).message}: lengths seen ${JSON.stringify(await lengths())}, page text: ${(await page.locator('main').innerText()).slice(0, 500)}`);
    });
    // The reply grew in steps while it streamed, and ended as the whole answer.
    const seen = await lengths();
    assert.ok(seen.every((length, i) => i === 0 || length > seen[i - 1]!), JSON.stringify(seen));
    assert.match(await page.locator('[data-role="assistant"]').last().innerText(), /Tell me something/);
    await shoot(page, 'playground-reply-desktop');
    await page.getByRole('link', { name: 'Keys' }).click();
    await page.getByRole('cell', { name: 'Playground', exact: true }).waitFor();
    await context.close();
  });

  it('accounts: no Disable on your own row or the system account, a confirmation before any other, Add credit only where a balance is kept', async () => {
    await memberAccount('disable-me@browser.test', 'member-password', 2.5);
    const context = await newContext();
    const page = await context.newPage();
    await signIn(page, adminEmail, adminPassword);
    await page.waitForURL('**/console/keys');
    await page.goto('/console/admin/accounts');
    const rowOf = (text: string) => page.getByRole('row').filter({ hasText: text });
    await rowOf('disable-me@browser.test').waitFor();
    const mine = rowOf(adminEmail);
    assert.equal(await mine.getByRole('button', { name: 'Disable' }).count(), 0, 'not on your own row');
    assert.equal(await mine.getByRole('button', { name: 'Add credit' }).count(), 0, 'an unlimited admin takes no credit');
    assert.match(await mine.innerText(), /Unlimited/);
    const system = rowOf('acct_default');
    assert.match(await system.innerText(), /System/);
    assert.doesNotMatch(await system.innerText(), /Admin/);
    assert.equal(await system.getByRole('button', { name: 'Disable' }).count(), 0);
    assert.equal(await system.getByRole('button', { name: 'Add credit' }).count(), 0);
    const member = rowOf('disable-me@browser.test');
    assert.match(await member.innerText(), /\$2\.50/);
    await member.getByRole('button', { name: 'Add credit' }).waitFor();
    await member.getByRole('button', { name: 'Disable' }).click();
    await page.getByRole('alertdialog').getByText(/signed out everywhere/).waitFor();
    await shoot(page, 'accounts-disable-confirm-desktop');
    await page.getByRole('button', { name: 'Cancel' }).click();
    assert.match(await member.innerText(), /Active/, 'cancel leaves it active');
    await member.getByRole('button', { name: 'Disable' }).click();
    await page.getByRole('button', { name: 'Disable account' }).click();
    await member.getByText('Disabled').waitFor();
    // The API refuses what the page does not offer.
    // (No named functions inside: the page runs this code as it is, without the test's module helpers.)
    const refused = await page.evaluate(async () => {
      const session = (await (await fetch('/console/api/session')).json()) as { csrf_token: string; account: { id: string } };
      return Promise.all(
        [session.account.id, 'acct_default'].map((id) =>
          fetch(`/console/api/admin/accounts/${id}`, { method: 'PATCH', headers: { 'content-type': 'application/json', 'x-csrf-token': session.csrf_token }, body: JSON.stringify({ disabled: true }) }).then(
            async (r) => [r.status, ((await r.json()) as { error: { code: string } }).error.code],
          ),
        ),
      );
    });
    assert.deepEqual(refused, [[400, 'own_account'], [400, 'default_account']]);
    // The system account's key names its account.
    await adminApi('POST', '/admin/keys', { name: 'no-account key' });
    await page.goto('/console/admin/keys');
    assert.match(await page.getByRole('row').filter({ hasText: 'no-account key' }).innerText(), /Default account/);
    await context.close();
  });

  it('the keys page shows the keys first on a phone, the new-key form behind a button', async () => {
    const context = await newContext(phone);
    const page = await context.newPage();
    await signIn(page, adminEmail, adminPassword);
    await page.waitForURL('**/console/keys');
    await page.getByRole('button', { name: 'New key' }).click();
    await page.getByLabel('Name').fill('phone key');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByRole('button', { name: 'Done' }).click();
    await page.reload();
    const firstKey = page.getByRole('cell', { name: 'phone key' });
    await firstKey.waitFor();
    const box = (await firstKey.boundingBox())!;
    assert.ok(box.y < phone.height, `the first key starts at ${Math.round(box.y)}px, below the first screen of ${phone.height}px`);
    assert.equal(await page.getByLabel('Name').count(), 0, 'no form until asked for');
    await shoot(page, 'keys-phone-first-screen');
    await context.close();
  });

  it('keeps members out of admin pages and admin endpoints; refuses CSRF-less POSTs', async () => {
    await memberAccount('member@browser.test', 'member-password');
    const context = await newContext();
    const page = await context.newPage();
    await signIn(page, 'member@browser.test', 'member-password');
    await page.waitForURL('**/console/keys');
    assert.equal(await page.getByRole('link', { name: 'Accounts' }).count(), 0, 'no admin links for a member');
    const statuses = await page.evaluate(async () => {
      const paths = ['/console/api/admin/accounts', '/console/api/admin/keys', '/console/api/admin/channels', '/console/api/admin/queues'];
      return Promise.all(paths.map((p) => fetch(p).then((r) => r.status)));
    });
    assert.deepEqual(statuses, [403, 403, 403, 403]);
    await page.goto('/console/admin/accounts');
    await page.getByText(/administrators/i).first().waitFor();
    const csrfLess = await page.evaluate(() =>
      fetch('/console/api/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'sneaky' }) }).then((r) => r.status),
    );
    assert.equal(csrfLess, 403);
    await context.close();
  });

  it('throttles repeated failed sign-ins and says so', async () => {
    await memberAccount('throttle@browser.test', 'throttle-password');
    const context = await newContext();
    const page = await context.newPage();
    for (let i = 0; i < 5; i++) {
      await signIn(page, 'throttle@browser.test', `wrong-password-${i}`);
      await page.getByRole('alert').filter({ hasText: /incorrect email or password/i }).waitFor();
    }
    await signIn(page, 'throttle@browser.test', 'throttle-password');
    await page.getByRole('alert').filter({ hasText: /too many sign-in attempts/i }).waitFor();
    await shoot(page, 'signin-throttled-desktop');
    await context.close();
  });

  it('renders every page at desktop and phone width without layout shift, keyboard reachable', async () => {
    for (const [label, viewport] of [['desktop', desktop], ['phone', phone]] as const) {
      const context = await newContext(viewport);
      await context.addInitScript(() => {
        (window as unknown as { __cls: number }).__cls = 0;
        new PerformanceObserver((list) => {
          for (const entry of list.getEntries() as Array<PerformanceEntry & { value: number; hadRecentInput: boolean }>) {
            if (!entry.hadRecentInput) (window as unknown as { __cls: number }).__cls += entry.value;
          }
        }).observe({ type: 'layout-shift', buffered: true });
      });
      const page = await context.newPage();
      await page.goto('/console');
      await shoot(page, `signin-${label}`);
      await page.keyboard.press('Tab');
      const focused = await page.evaluate(() => document.activeElement?.tagName);
      assert.ok(focused && focused !== 'BODY', 'Tab moves focus into the page');
      await signIn(page, adminEmail, adminPassword);
      await page.waitForURL('**/console/keys');
      for (const path of ['keys', 'usage', 'pricing', 'playground', 'admin/accounts', 'admin/keys', 'admin/channels', 'admin/queues']) {
        await page.goto(`/console/${path}`);
        await page.getByRole('heading', { level: 1 }).waitFor();
        await page.waitForLoadState('networkidle');
        const cls = await page.evaluate(() => (window as unknown as { __cls: number }).__cls);
        assert.ok(cls < 0.1, `${path} at ${label}: cumulative layout shift ${cls.toFixed(3)}`);
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        assert.ok(overflow <= 1, `${path} at ${label}: the page is ${overflow}px wider than the screen`);
        await shoot(page, `${path.replace('/', '-')}-${label}`);
      }
      await context.close();
    }
  });
});
