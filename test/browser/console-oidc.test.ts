import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type Browser } from 'playwright-core';
import type { Redis } from 'ioredis';
import { launchChromium } from '../support/browser.js';
import { closeClean, openContext } from '../support/console-browser.js';
import { buildOnce } from '../support/build.js';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { startTestProvider, testClientId, testClientSecret, type TestProvider } from '../support/oidc-provider.js';

/*
 * The sign-in page with an identity provider, in a real Chromium against a real gateway and a real provider: the
 * provider's button signs a person in and back out through the provider's pages; a person the gateway maps no group
 * of comes back to the page with the refusal in words; under OIDC_ONLY the password form waits behind
 * "Administrator sign-in", at 1280 px and on a 390 px phone.
 */

const adminEmail = 'break-glass@oidc-browser.test';
const adminPassword = 'break-glass-password';
const desktop = { width: 1280, height: 800 };
const phone = { width: 390, height: 844 };

describe('console sign-in through an identity provider in a real browser', () => {
  let redis: Redis;
  let provider: TestProvider;
  let gateway: GatewayProcess;
  let browser: Browser;

  before(async () => {
    await buildOnce();
    let url: string;
    ({ redis, url } = await freshRedis(8));
    provider = await startTestProvider();
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        OIDC_ISSUER: provider.issuer,
        OIDC_CLIENT_ID: testClientId,
        OIDC_CLIENT_SECRET: testClientSecret,
        OIDC_SCOPES: 'openid email profile groups',
        OIDC_TEAM_MAP: 'eng=Engineering:member',
        OIDC_ONLY: 'on',
        OIDC_BREAK_GLASS: adminEmail,
        OIDC_NAME: 'Sign in with Test IdP',
      },
    });
    await provider.register({
      redirectUri: `${gateway.url}/console/api/oidc/callback`,
      postLogoutRedirectUri: `${gateway.url}/console/`,
    });
    provider.people.set('alice', { email: 'alice@oidc-browser.test', name: 'Alice', groups: ['eng'] });
    provider.people.set('mallory', { email: 'mallory@oidc-browser.test', groups: ['marketing'] });
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
    await provider?.close();
    redis?.disconnect();
  });

  for (const viewport of [desktop, phone]) {
    it(`signs in and out through the provider's button at ${viewport.width} px`, async () => {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await page.goto('/console');
      // Under OIDC_ONLY the password form is hidden until asked for.
      const button = page.getByRole('link', { name: 'Sign in with Test IdP' });
      await button.waitFor();
      assert.equal(await page.getByLabel('Password').count(), 0);
      provider.nextLogin = 'alice';
      await button.click();
      await page.waitForURL('**/console/keys');
      const session = (await (await page.request.get('/console/api/session')).json()) as {
        account: { email: string } | null;
      };
      assert.equal(session.account?.email, 'alice@oidc-browser.test');
      if (viewport === desktop) {
        // Signing out passes through the provider's sign-out page, which asks before it ends its own session.
        await page
          .getByRole('button', { name: /sign out/i })
          .first()
          .click();
        await page.waitForURL(`${provider.issuer}/session/end**`);
      }
      await closeClean(context, `sign-in at ${viewport.width} px`);
    });
  }

  it('says in words why a person in no mapped group is refused', async () => {
    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await page.goto('/console');
    provider.nextLogin = 'mallory';
    await page.getByRole('link', { name: 'Sign in with Test IdP' }).click();
    await page.waitForURL('**/console/?sso_error=not_in_mapped_group');
    await page.getByText('Your account is not in any group this gateway maps.').waitFor();
    await closeClean(context, 'refused sign-in');
  });

  it('keeps the password form for the break-glass admin behind "Administrator sign-in"', async () => {
    const context = await openContext(browser, gateway.url, phone);
    const page = await context.newPage();
    await page.goto('/console');
    await page.getByRole('button', { name: 'Administrator sign-in' }).click();
    await page.getByLabel('Email').fill(adminEmail);
    await page.getByLabel('Password').fill(adminPassword);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.waitForURL('**/console/keys');
    await closeClean(context, 'break-glass sign-in');
  });
});
