import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser, BrowserContext, Page, Request } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { closeClean, openContext, screenshots, settled, signIn } from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';

/*
 * The console's first signed-in page of a visit, in a real headless Chromium against a real gateway: once the script
 * is in, the page is usable after one round of API calls. Its HTML brings what the script would otherwise ask for
 * first (the settings, the session, the person's teams), so the page's own data are asked for at once, in the team
 * this browser remembers. A round, precisely: every call the page's script makes to /console/api/ during the load is
 * made before the script has the answer to any of them (none could have waited for another's answer), read from
 * `fetch` itself as the page calls it: when each call was made, and when its answer came back to the script (noted
 * before the console's own code sees it). That holds however slow the machine: a script cannot make a call between
 * another's answer and its code that reads it. And no URL is asked for twice (the session and the teams, which the
 * console reads again as pages change, among them). Checked for an admin and for a member working in a team, on each
 * page a visit can start on, the sign-in's address among them (a redirect to Keys), and after the sign-in form: no
 * URL asked for twice there either. Screenshots land in test-artifacts/console/first-load/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console', 'first-load');
const shoot = screenshots(shots);
const adminToken = 'console-first-load-admin-token';
const adminEmail = 'admin@first-load.browser.test';
const memberEmail = 'member@first-load.browser.test';
const password = 'first-load-password';
const teamName = 'Research';
const desktop = { width: 1280, height: 800 };

/** A call to /console/api/ as the browser sent it: its URL (path and query) and its team header. */
interface Call {
  url: string;
  team: string | undefined;
}

/**
 * A call to /console/api/ as the page's script made it: when (ms since the navigation started), and when its answer
 * came back to the script.
 */
interface Timed {
  url: string;
  called: number;
  answered: number | null;
}

/**
 * Wraps the page's `fetch` before any script of it runs, noting each call to /console/api/ (window.__apiCalls). Its
 * answer is noted by the first handler on the call's promise, so before the console's own code has it.
 */
const timeCalls = `(() => {
  const calls = [];
  window.__apiCalls = calls;
  const original = window.fetch;
  window.fetch = function (input, init) {
    const url = new URL(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url, location.href);
    const promise = original.call(this, input, init);
    if (url.pathname.startsWith('/console/api/')) {
      const call = { url: url.pathname + url.search, called: performance.now(), answered: null };
      calls.push(call);
      promise.then(
        () => { call.answered = performance.now(); },
        () => { call.answered = performance.now(); },
      );
    }
    return promise;
  };
})();`;

describe('the console’s first signed-in page: usable after one round of API calls', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let teamId = '';
  const adminApi = adminRequest(() => gateway.url, adminToken);

  before(async () => {
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const { url, redis } = await freshRedis(5);
    redis.disconnect();
    gateway = await startGateway({
      env: { REDIS_URL: url, ADMIN_EMAIL: adminEmail, ADMIN_PASSWORD: password, ADMIN_TOKEN: adminToken },
    });
    browser = await launchChromium();
    const member = await adminApi('POST', '/admin/accounts', { email: memberEmail, password, role: 'member' });
    assert.equal(member.status, 201, await member.text());
    const team = await adminApi('POST', '/admin/teams', { name: teamName, owner_email: adminEmail });
    const made = await team.text();
    assert.equal(team.status, 201, made);
    teamId = (JSON.parse(made) as { id: string }).id;
    assert.equal(
      (await adminApi('POST', `/admin/teams/${teamId}/members`, { email: memberEmail, role: 'member' })).status,
      201,
    );
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
  });

  /** Notes every call the page makes to /console/api/ from now on. */
  function recordCalls(page: Page): Call[] {
    const calls: Call[] = [];
    page.on('request', (request: Request) => {
      const url = new URL(request.url());
      if (url.pathname.startsWith('/console/api/'))
        calls.push({ url: url.pathname + url.search, team: request.headers()['x-team'] });
    });
    return calls;
  }

  /** The page's calls to /console/api/ as its script made them (timeCalls). */
  const timings = (page: Page): Promise<Timed[]> => page.evaluate('window.__apiCalls') as Promise<Timed[]>;

  /** A URL asked for more than once among some calls. */
  const twice = (urls: string[]) => urls.filter((url, i) => urls.indexOf(url) !== i);

  /**
   * Opens `path` in a new tab of a signed-in context, waits until it is usable (its main drawn, its tables' rows in)
   * and a moment more for any call still to come, then asserts the load was one round of calls, none twice.
   */
  async function firstLoad(
    context: BrowserContext,
    path: string,
    landing: string,
    who: string,
    team: string | undefined,
  ): Promise<void> {
    const page = await context.newPage();
    await page.addInitScript(timeCalls);
    const calls = recordCalls(page);
    await page.goto(path);
    await page.waitForURL(`**${landing}`);
    await settled(page);
    await page.getByRole('heading', { level: 1 }).waitFor();
    // Whatever the page would still ask for, asked by now.
    await page.waitForTimeout(1000);
    const timed = await timings(page);
    const what = `${who}, ${path}: ${JSON.stringify(timed.map((call) => `${call.url} called at ${Math.round(call.called)} ms, answered at ${call.answered === null ? '—' : Math.round(call.answered)} ms`))}`;
    assert.ok(
      calls.length > 0 && timed.length === calls.length,
      `${what}: the page's own data asked for, every call seen (${JSON.stringify(calls)})`,
    );
    assert.deepEqual(twice(calls.map((call) => call.url)), [], `${what}: a URL asked for twice`);
    // One round: the last call was made before the script had any answer, so none of them waited on another's.
    const lastCalled = Math.max(...timed.map((call) => call.called));
    const firstAnswered = Math.min(...timed.map((call) => call.answered ?? Infinity));
    assert.ok(lastCalled < firstAnswered, `${what}: a call made after another's answer came back (a second round)`);
    // In the team this browser remembers, from the first call.
    assert.deepEqual(
      calls.filter((call) => call.team !== team),
      [],
      `${what}: every call in ${team ?? 'the person’s own account'}`,
    );
    await shoot(page, `${who}-${landing.split('/').pop()}`);
    await page.close();
  }

  it('an admin’s first page, wherever the visit starts, is one round of calls, none twice', async () => {
    const context = await openContext(browser, gateway.url, desktop);
    const signInPage = await context.newPage();
    await signIn(signInPage, adminEmail, password);
    for (const [path, landing] of [
      ['/console/keys', '/console/keys'],
      ['/console/usage', '/console/usage'],
      ['/console/activity', '/console/activity'],
      ['/console/budgets', '/console/budgets'],
      ['/console/team', '/console/team'],
      // The sign-in's address, signed in: a redirect to Keys, nothing read again for it.
      ['/console', '/console/keys'],
    ] as const) {
      await firstLoad(context, path, landing, 'admin', undefined);
    }
    await closeClean(context, 'admin');
  });

  it('a member’s first page is in the team the browser remembers, one round of calls, none twice', async () => {
    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await signIn(page, memberEmail, password);
    await page.getByRole('combobox', { name: 'Team', exact: true }).selectOption({ label: `${teamName} · Member` });
    await page.waitForFunction(
      (prefix) => Object.keys(localStorage).some((key) => key.startsWith(prefix)),
      'switchyard.team.',
    );
    for (const path of ['/console/keys', '/console/usage', '/console/activity', '/console/budgets', '/console/team'])
      await firstLoad(context, path, path, 'member', teamId);
    // The page drawn is the team's.
    const budgets = await context.newPage();
    await budgets.goto('/console/budgets');
    await budgets.getByRole('heading', { name: `Budget of ${teamName}` }).waitFor();
    await budgets.close();
    await closeClean(context, 'member');
  });

  it('after the sign-in form, the first page asks for no URL twice', async () => {
    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await page.goto('/console');
    await page.getByLabel('Email').waitFor();
    const calls = recordCalls(page);
    await page.getByLabel('Email').fill(adminEmail);
    await page.getByLabel('Password').fill(password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL('**/console/keys');
    await settled(page);
    await page.waitForTimeout(1000);
    const urls = calls.map((call) => call.url);
    assert.ok(urls.includes('/console/api/session') && urls.includes('/console/api/keys'), JSON.stringify(urls));
    assert.deepEqual(twice(urls), [], `a URL asked for twice after signing in: ${JSON.stringify(urls)}`);
    await closeClean(context, 'sign-in');
  });
});
