import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, type Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import {
  closeClean,
  noSidewaysScroll,
  openContext,
  screenshots,
  signIn,
  textContrast,
} from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { followsMoneyRule } from '../support/money-rule.js';

/*
 * The Playground's Chat tab and the console's mock badge in a real headless
 * Chromium against real gateways: a chat answer shows its tokens and its cost,
 * both the request log's, and links to its Activity row; a failed request
 * shows its id (the one the log has), copyable; and every page's header says
 * whether the built-in mock answers and whether it is billed (MOCK_BILLING
 * on, off), or nothing when a vendor is configured and the mock is off. At
 * 1280×800 and 390×844, with no page scrolling sideways. Screenshots land in
 * test-artifacts/console/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console');
const shoot = screenshots(shots);
const adminEmail = 'admin@playground-browser.test';
const adminPassword = 'playground-admin-pw';
const adminToken = 'playground-browser-admin-token';
const memberEmail = 'member@playground-browser.test';
const memberPassword = 'member-password';
const desktop = { width: 1280, height: 800 };
const phone = { width: 390, height: 844 };
const viewports = [
  ['desktop', desktop],
  ['phone', phone],
] as const;

interface Row {
  id: string;
  model: string;
  endpoint: string | null;
  status: string;
  http_status: number | null;
  error_code: string | null;
  input_tokens: number;
  output_tokens: number;
  cost_micros: number;
  cost_usd: number;
  settled: boolean;
}

describe('the Playground’s answers and the mock badge in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let member: string;
  const adminApi = adminRequest(() => gateway.url, adminToken);

  before(async () => {
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const { url, redis } = await freshRedis(12);
    redis.disconnect();
    // The test support's default: MOCK_BILLING=on, the mock's answers billed.
    gateway = await startGateway({
      env: { REDIS_URL: url, ADMIN_EMAIL: adminEmail, ADMIN_PASSWORD: adminPassword, ADMIN_TOKEN: adminToken },
    });
    browser = await launchChromium();
    member = (
      (await (
        await adminApi('POST', '/admin/accounts', { email: memberEmail, password: memberPassword, role: 'member' })
      ).json()) as { id: string }
    ).id;
    assert.equal((await adminApi('POST', `/admin/accounts/${member}/credits`, { amount_usd: 5 })).status, 200);
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
  });

  /** The member's request with this id as the request log has it, once `done` says it is in as wanted. */
  async function loggedRow(id: string, done: (row: Row) => boolean = (row) => row.settled): Promise<Row> {
    let found: Row | undefined;
    await waitFor(
      async () => {
        const page = (await (await adminApi('GET', `/admin/requests?account_id=${member}&limit=100`)).json()) as {
          data: Row[];
        };
        found = page.data.find((row) => row.id === id);
        return !!found && done(found);
      },
      15_000,
      `the record of ${id}`,
    );
    return found!;
  }

  /** The chat model: a priced one, answered offline by the mock standing in for its vendor. */
  const chatModel = 'gpt-4o-mini';
  const imageModel = 'dall-e-3';

  async function openChat(page: Page): Promise<void> {
    await page.goto('/console/playground');
    await page.getByRole('group', { name: 'Mode' }).getByRole('button', { name: 'Chat' }).click();
    await page.getByLabel('Model').selectOption(chatModel);
  }

  it(
    'shows a chat answer’s tokens and cost as the request log has them, and opens its Activity row, at 1280×800 ' +
      'and 390×844',
    async () => {
      for (const [label, viewport] of viewports) {
        const context = await openContext(browser, gateway.url, viewport);
        const page = await context.newPage();
        await signIn(page, memberEmail, memberPassword);
        await openChat(page);
        // The modes not chosen still read: WCAG AA's 4.5:1 for their 14 px text.
        for (const mode of ['Image', 'Speech']) {
          const button = page.getByRole('group', { name: 'Mode' }).getByRole('button', { name: mode });
          assert.equal(await button.getAttribute('aria-pressed'), 'false');
          const ratio = await textContrast(button);
          assert.ok(ratio >= 4.5, `${label}: the ${mode} mode button's contrast ${ratio.toFixed(2)}:1`);
        }
        const sent = page.waitForRequest(
          (request) =>
            request.url().endsWith('/console/api/playground/chat/completions') && request.method() === 'POST',
        );
        await page.getByLabel('Message', { exact: true }).fill(`Hello from the ${label} playground.`);
        await page.getByRole('button', { name: 'Send' }).click();
        const body = (await sent).postDataJSON() as {
          model?: string;
          stream?: boolean;
          stream_options?: { include_usage?: boolean };
        };
        // The model picked, kept however soon after the page's load it was picked.
        assert.equal(body.model, chatModel);
        // Streamed, with the usage asked for in the stream's last chunk.
        assert.equal(body.stream, true);
        assert.deepEqual(body.stream_options, { include_usage: true });

        const answer = page.locator('.bubble-assistant').last();
        const cost = answer.locator('.answer-cost');
        await cost.waitFor({ timeout: 20_000 });
        assert.match(await answer.locator('.bubble-text').innerText(), /Mock reply/);
        const link = answer.getByRole('link', { name: 'See it in Activity' });
        const id = new URL((await link.getAttribute('href'))!, gateway.url).searchParams.get('request')!;
        assert.match(id, /^req_/);
        const row = await loggedRow(id);
        assert.equal(row.model, chatModel);
        assert.equal(row.status, 'completed');
        assert.ok(row.input_tokens > 0 && row.output_tokens > 0, `${label}: tokens counted: ${JSON.stringify(row)}`);
        assert.ok(row.cost_micros > 0, `${label}: the mock is billed here (MOCK_BILLING=on)`);
        // The tokens, in and out, the log's.
        const tokens = answer.locator('.answer-tokens');
        assert.equal(
          (await tokens.innerText()).trim(),
          `${row.input_tokens.toLocaleString('en-US')} tokens in / ${row.output_tokens.toLocaleString('en-US')} out`,
        );
        // The cost, the log's, shown by the console's money rule.
        assert.equal(
          Number(await cost.getAttribute('data-cost-micros')),
          row.cost_micros,
          `${label}: the page's cost is the log's`,
        );
        const shown = (await cost.innerText()).trim();
        const amount = /^Cost: (\$[\d,.]+)$/.exec(shown)?.[1];
        assert.ok(amount && followsMoneyRule(amount), `${label}: ${shown}`);
        const dollars = Number(amount.slice(1).replace(/,/g, ''));
        assert.ok(
          Math.abs(dollars - row.cost_usd) <= row.cost_usd * 5e-4 + 5e-7,
          `${label}: ${shown} against ${row.cost_usd}`,
        );
        await noSidewaysScroll(page, label);
        const meta = (await answer.locator('.answer-meta').boundingBox())!;
        assert.ok(
          meta.x >= 0 && meta.x + meta.width <= viewport.width,
          `${label}: the answer's line fits: ${JSON.stringify(meta)}`,
        );
        await shoot(page, `playground-chat-${label}`);

        // Its Activity row: the details opened on arrival, the same request.
        await link.click();
        await page.waitForURL(/\/console\/activity\?/);
        const dialog = page.getByRole('dialog', { name: 'Request details' });
        await dialog.waitFor();
        const detail = async (name: string) =>
          (
            await dialog
              .locator('.detail')
              .filter({ has: page.getByText(name, { exact: true }) })
              .locator('dd')
              .innerText()
          ).trim();
        assert.equal(await detail('Request ID'), id);

        // An image: its cost the log's too, and its link.
        await page.goto('/console/playground');
        await page.getByRole('group', { name: 'Mode' }).getByRole('button', { name: 'Image' }).click();
        await page.getByLabel('Model').selectOption(imageModel);
        await page.getByLabel('Prompt').fill(`A lighthouse, ${label}`);
        await page.getByRole('button', { name: 'Generate' }).click();
        const tile = page.locator('figure.image-tile').first();
        const imageCost = tile.locator('.answer-cost');
        await imageCost.waitFor({ timeout: 20_000 });
        const imageId = new URL(
          (await tile.getByRole('link', { name: 'See it in Activity' }).getAttribute('href'))!,
          gateway.url,
        ).searchParams.get('request')!;
        assert.match(imageId, /^req_/);
        const imageRow = await loggedRow(imageId);
        assert.equal(imageRow.model, imageModel);
        assert.ok(imageRow.cost_micros > 0, `${label}: the image is billed`);
        assert.equal(
          Number(await imageCost.getAttribute('data-cost-micros')),
          imageRow.cost_micros,
          `${label}: the image's cost is the log's`,
        );
        // Priced by the image, not by tokens: the image counted, no "0 tokens".
        assert.equal((await tile.locator('.answer-images').innerText()).trim(), '1 image');
        assert.equal(await tile.locator('.answer-tokens').count(), 0);
        assert.ok(
          followsMoneyRule(/^Cost: (\$[\d,.]+)$/.exec((await imageCost.innerText()).trim())?.[1] ?? ''),
          `${label}: ${await imageCost.innerText()}`,
        );
        await noSidewaysScroll(page, `${label}, image`);
        await shoot(page, `playground-image-${label}`);
        await closeClean(context, `chat, ${label}`);
      }
    },
  );

  it(
    'shows a failed request’s id beside its message, the id the log has, copyable; a setting the page refuses ' +
      'sends nothing and names no request',
    async () => {
      for (const [label, viewport] of viewports) {
        const context = await openContext(browser, gateway.url, viewport);
        await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: gateway.url });
        const page = await context.newPage();
        await signIn(page, memberEmail, memberPassword);
        await openChat(page);
        let posted = 0;
        page.on('request', (request) => {
          if (request.url().endsWith('/playground/chat/completions')) posted++;
        });
        // Temperature 3, past the API's limit: the page says so and sends nothing, so there is no request to name.
        await page.getByLabel('Temperature').fill('3');
        await page.getByLabel('Message', { exact: true }).fill('Too hot');
        await page.getByRole('button', { name: 'Send' }).click();
        const refused = page.getByRole('alert').filter({ hasText: 'Temperature must be a number from 0 to 2.' });
        await refused.waitFor();
        assert.doesNotMatch(await refused.innerText(), /request/);
        assert.equal(await page.getByRole('button', { name: /^Copy the request ID/ }).count(), 0);
        assert.equal(posted, 0);

        // The vendor (the mock, told to) fails the request: the gateway's answer names it.
        await page.getByLabel('Temperature').fill('');
        await page.getByLabel('Message', { exact: true }).fill(`[mock:error:500] fail for the ${label} test`);
        const answered = page.waitForResponse((response) =>
          response.url().endsWith('/console/api/playground/chat/completions'),
        );
        await page.getByRole('button', { name: 'Send' }).click();
        const response = await answered;
        const id = (await response.headerValue('x-request-id'))!;
        assert.match(id, /^req_/);
        const alert = page.getByRole('alert').filter({ hasText: `(request ${id})` });
        await alert.waitFor();
        const message = (await alert.innerText()).replace(`(request ${id})`, '').trim();
        assert.ok(message.length > 0, `${label}: the message the client got is shown`);
        // The log has the request by that id, failed.
        const row = await loggedRow(id, (r) => r.status !== 'queued' && r.status !== 'running');
        assert.equal(row.model, chatModel);
        assert.notEqual(row.status, 'completed', `${label}: ${JSON.stringify(row)}`);
        // Copied whole.
        await page.getByRole('button', { name: `Copy the request ID ${id}` }).click();
        await page
          .getByRole('button', { name: `Copy the request ID ${id}` })
          .filter({ hasText: 'Copied' })
          .waitFor();
        assert.equal(await page.evaluate(() => navigator.clipboard.readText()), id);
        await noSidewaysScroll(page, `${label}, error`);
        const box = (await page.locator('.request-error').boundingBox())!;
        assert.ok(
          box.x >= 0 && box.x + box.width <= viewport.width,
          `${label}: the error fits: ${JSON.stringify(box)}`,
        );
        await shoot(page, `playground-chat-error-${label}`);
        await closeClean(context, `errors, ${label}`);
      }
    },
  );

  /**
   * The header's mock badge on two pages at both widths: its text and tooltip, or its absence; and the config the
   * console read.
   */
  async function checkBadge(base: string, expected: 'billed' | 'free' | 'none'): Promise<void> {
    const config = (await (await fetch(`${base}/console/api/config`)).json()) as {
      mock: { on: boolean; billed: boolean; models: 'all' | number };
    };
    if (expected === 'none') assert.equal(config.mock.on, false);
    else assert.deepEqual(config.mock, { on: true, billed: expected === 'billed', models: 'all' });
    for (const [label, viewport] of viewports) {
      const context = await openContext(browser, base, viewport);
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      for (const path of ['/console/keys', '/console/usage', '/console/playground']) {
        await page.goto(path);
        await page.locator('.page h1').first().waitFor();
        const notice = page.getByRole('note', { name: 'Mock vendor' });
        const where = `${expected}, ${label}, ${path}`;
        if (expected === 'none') {
          assert.equal(await notice.count(), 0, where);
          assert.equal(await page.getByText(/Mock vendor/).count(), 0, where);
        } else {
          await notice.waitFor();
          assert.equal((await notice.locator('.mock-badge').innerText()).trim(), `Mock vendor · ${expected}`, where);
          const text = await notice.innerText();
          assert.match(text, /Answers come from the built-in mock, not a real model/, where);
          assert.match(text, expected === 'billed' ? /billed at list prices/ : /nothing is charged/, where);
          const title = (await notice.getAttribute('title'))!;
          assert.match(title, /built-in mock, not a real model/, where);
          assert.match(title, expected === 'billed' ? /MOCK_BILLING=on/ : /MOCK_BILLING is off/, where);
          const box = (await notice.boundingBox())!;
          assert.ok(
            box.x >= 0 && box.x + box.width <= viewport.width && box.y < viewport.height,
            `${where}: the notice is in sight: ${JSON.stringify(box)}`,
          );
        }
        await noSidewaysScroll(page, where);
      }
      await page.goto('/console/keys');
      await page.locator('.page h1').first().waitFor();
      await shoot(page, `mock-badge-${expected}-${label}`);
      await closeClean(context, `badge ${expected}, ${label}`);
    }
  }

  it('says in the header, on every page, that the mock answers and is billed with MOCK_BILLING=on', async () => {
    await checkBadge(gateway.url, 'billed');
  });

  it('says the mock is free with MOCK_BILLING unset, and nothing when a vendor is configured and the mock is off', async () => {
    const free = await freshRedis(13);
    free.redis.disconnect();
    // MOCK_BILLING off is what an unset MOCK_BILLING loads as (the test support sets it on unless told).
    const unbilled = await startGateway({
      env: { REDIS_URL: free.url, MOCK_BILLING: 'off', ADMIN_EMAIL: adminEmail, ADMIN_PASSWORD: adminPassword },
    });
    try {
      await checkBadge(unbilled.url, 'free');
    } finally {
      await unbilled.stop();
    }
    // A vendor configured (a fake OpenAI): MOCK_VENDOR=auto leaves the mock off.
    const off = await freshRedis(14);
    off.redis.disconnect();
    const openai: FakeOpenAI = await startFakeOpenAI();
    const real = await startGateway({
      env: {
        REDIS_URL: off.url,
        OPENAI_API_KEY: 'sk-openai-test',
        OPENAI_BASE_URL: openai.url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
      },
    });
    try {
      await checkBadge(real.url, 'none');
    } finally {
      await real.stop();
      await openai.close();
    }
  });
});
