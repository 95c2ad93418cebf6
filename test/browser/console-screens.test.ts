import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import {
  boxFits,
  leadingCount,
  openContext,
  pageOverrun,
  screenshots,
  settled,
  signIn,
  stat,
} from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

/*
 * The whole console as an operator lives in it, in a real Chromium against a
 * real gateway that served real traffic: an admin and three members with long
 * emails and thirteen keys; chat and Messages requests on seven models, with
 * refusals (an unknown model, a bad temperature), vendor failures, cache hits;
 * images; Message Batches (one running, one canceling). Every page at 1280×800
 * and at 390×844: no table wider than its box, the page never wider than the
 * screen, a screenshot of each kept in test-artifacts/console/screens/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console', 'screens');
const shoot = screenshots(shots, 6000);
const adminEmail = 'operations-administrator@screens-browser.example-company.test';
const adminPassword = 'screens-admin-pw';
const adminToken = 'screens-browser-admin-token';
const memberPassword = 'screens-member-pw';
const members = [
  'alexandra.konstantinopoulou-vanderberg@platform-engineering.example-company.test',
  'bartholomew.oyelaran-fitzgerald@data-science.example-company.test',
  'chidinma.nakamura@research.example-company.test',
] as const;
const widths = [
  ['desktop', { width: 1280, height: 800 }],
  ['phone', { width: 390, height: 844 }],
] as const;
/** The seven models the traffic calls. */
const chatModels = ['gpt-4o-mini', 'gpt-4o', 'deepseek-chat', 'grok-3', 'mock-chat'] as const;
const messagesModels = ['claude-sonnet-4-5', 'claude-haiku-4-5'] as const;
/** The pages a member sees, and the ones only an admin does. */
const memberPages = ['keys', 'usage', 'activity', 'batches', 'playground', 'pricing'] as const;
const adminPages = ['admin/accounts', 'admin/keys', 'admin/channels', 'admin/queues'] as const;

interface LogRow {
  id: string;
  endpoint: string | null;
  status: string;
}

interface Member {
  email: string;
  account: string;
  keys: Array<{ id: string; key: string; name: string }>;
}

describe('every console page fits its screen, with real traffic behind it', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  const people: Member[] = [];
  /** Every request sent, by its id and the status the client got. */
  const sent: Array<{ id: string; status: number }> = [];
  /** The batches by what becomes of them. */
  const batches = { ended: '', running: '', canceling: '', toCancel: '' };

  const adminApi = adminRequest(() => gateway.url, adminToken);

  async function call(path: string, key: string, body: unknown, headers: Record<string, string> = {}): Promise<number> {
    const res = await fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${key}`,
        'x-api-key': key,
        'anthropic-version': '2023-06-01',
        'content-type': 'application/json',
        ...headers,
      },
      body: JSON.stringify(body),
    });
    await res.arrayBuffer();
    const id = res.headers.get('x-request-id');
    assert.ok(id, `${path}: a request id`);
    sent.push({ id, status: res.status });
    return res.status;
  }

  before(async () => {
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const { url, redis } = await freshRedis(11);
    redis.disconnect();
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        ADMIN_TOKEN: adminToken,
        MOCK_STREAM_DELAY_MS: '2',
      },
    });
    browser = await launchChromium();

    // Three members with long emails, credit, and thirteen keys between them with long names and limits.
    for (const [m, email] of members.entries()) {
      const made = (await (
        await adminApi('POST', '/admin/accounts', { email, password: memberPassword, role: 'member' })
      ).json()) as { id: string };
      assert.equal((await adminApi('POST', `/admin/accounts/${made.id}/credits`, { amount_usd: 25 })).status, 200);
      const person: Member = { email, account: made.id, keys: [] };
      for (let k = 0; k < [5, 4, 4][m]!; k++) {
        const name = `${['production', 'staging', 'nightly evaluation', 'notebook', 'ci'][k]} key of ${email.split('@')[0]} for the ${['search', 'support-bot', 'summaries', 'agents', 'reports'][k]} service`;
        const limits =
          k % 2 === 0
            ? {
                limit_usd: 10 + k,
                rpm: 600,
                tpm: 200_000,
                models: [
                  'gpt-4o-mini',
                  'gpt-4o',
                  'claude-sonnet-4-5',
                  'claude-haiku-4-5',
                  'deepseek-chat',
                  'grok-3',
                  'mock-chat',
                  'gpt-image-1',
                ],
              }
            : {};
        const key = (await (
          await adminApi('POST', '/admin/keys', { name, account_id: made.id, ...limits })
        ).json()) as { id: string; key: string };
        assert.ok(key.key, `key ${name} made`);
        person.keys.push({ id: key.id, key: key.key, name });
      }
      people.push(person);
    }

    // Traffic: chat and Messages on seven models, refusals, vendor failures, cache hits, images.
    for (const [m, person] of people.entries()) {
      const [key, other] = [person.keys[0]!.key, person.keys[1]!.key];
      for (const [i, model] of chatModels.entries()) {
        for (let n = 0; n < 2; n++)
          assert.equal(
            await call('/v1/chat/completions', n ? other : key, {
              model,
              messages: [{ role: 'user', content: `Hello ${m} ${i} ${n}` }],
              max_tokens: 8,
            }),
            200,
          );
      }
      for (const model of messagesModels)
        assert.equal(
          await call('/v1/messages', key, {
            model,
            max_tokens: 16,
            messages: [{ role: 'user', content: `Hi from ${m}` }],
          }),
          200,
        );
      assert.equal(
        await call('/v1/chat/completions', key, {
          model: 'no-such-model-xyz',
          messages: [{ role: 'user', content: 'Hi' }],
        }),
        404,
      );
      assert.equal(
        await call('/v1/chat/completions', key, {
          model: 'gpt-4o-mini',
          temperature: 3,
          messages: [{ role: 'user', content: 'Hi' }],
        }),
        400,
      );
      assert.equal(
        await call('/v1/chat/completions', key, {
          model: 'gpt-4o',
          messages: [{ role: 'user', content: 'Fail [mock:error:502]' }],
        }),
        502,
      );
      // The same question twice with Cache-Control: a miss stored, then a hit.
      for (let n = 0; n < 2; n++)
        assert.equal(
          await call(
            '/v1/chat/completions',
            key,
            { model: 'gpt-4o-mini', messages: [{ role: 'user', content: `Cached question of ${m}` }], max_tokens: 8 },
            { 'cache-control': 'max-age=600' },
          ),
          200,
        );
      if (m < 2)
        assert.equal(
          await call('/v1/images/generations', key, {
            model: 'gpt-image-1',
            prompt: `a lighthouse ${m}`,
            size: '1024x1024',
          }),
          200,
        );
    }
    await waitFor(
      async () => {
        const page = (await (await adminApi('GET', '/admin/requests?limit=100')).json()) as { data: unknown[] };
        return page.data.length >= sent.length;
      },
      20_000,
      'every request in the record',
    );

    // Message Batches: one ended, and three whose requests take minutes at the mock: one left running, one canceled
    // here (canceling while its requests finish), one for the page to cancel.
    const owner = people[1]!;
    const batch = async (slow: boolean, n = 3) => {
      const res = await fetch(`${gateway.url}/v1/messages/batches`, {
        method: 'POST',
        headers: {
          'x-api-key': owner.keys[0]!.key,
          'anthropic-version': '2023-06-01',
          'content-type': 'application/json',
        },
        body: JSON.stringify({
          requests: Array.from({ length: n }, (_, i) => ({
            custom_id: `row-${i}`,
            params: {
              model: i % 2 ? 'claude-haiku-4-5' : 'claude-sonnet-4-5',
              max_tokens: 16,
              messages: [{ role: 'user', content: `Summarise item ${i}${slow ? ' [mock:slow:180000]' : ''}` }],
            },
          })),
        }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      return ((await res.json()) as { id: string }).id;
    };
    const status = async (id: string) =>
      (
        (await (
          await fetch(`${gateway.url}/v1/messages/batches/${id}`, {
            headers: { 'x-api-key': owner.keys[0]!.key, 'anthropic-version': '2023-06-01' },
          })
        ).json()) as { processing_status: string }
      ).processing_status;
    batches.ended = await batch(false, 2);
    await waitFor(async () => (await status(batches.ended)) === 'ended', 20_000, 'the quick batch ended');
    // Its two requests are in the log too (the usage writer's pace), before any page is read against it.
    await waitFor(
      async () => (await requestLog()).length === sent.length + 2,
      20_000,
      'the ended batch’s requests in the record',
    );
    batches.running = await batch(true);
    batches.canceling = await batch(true);
    batches.toCancel = await batch(true);
    const cancel = await fetch(`${gateway.url}/v1/messages/batches/${batches.canceling}/cancel`, {
      method: 'POST',
      headers: { 'x-api-key': owner.keys[0]!.key, 'anthropic-version': '2023-06-01' },
    });
    assert.equal(cancel.status, 200);
    assert.equal(await status(batches.canceling), 'canceling');
  });

  after(async () => {
    await browser?.close();
    // Batch requests are still at the mock for minutes: no drain.
    await gateway?.stop('SIGKILL');
  });

  /** The request log as the admin API lists it, every page: what each page's numbers are checked against. */
  async function requestLog(): Promise<LogRow[]> {
    const rows: LogRow[] = [];
    let cursor = '';
    for (;;) {
      const page = (await (
        await adminApi('GET', `/admin/requests?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
      ).json()) as { data: LogRow[]; next_cursor: string | null };
      rows.push(...page.data);
      if (!page.next_cursor) return rows;
      cursor = page.next_cursor;
    }
  }

  for (const [label, viewport] of widths) {
    it(
      `at ${viewport.width} px: Usage, Activity and Accounts count what the request log holds; a failure's message ` +
        `and a hit's saving shown; revoke from All keys and cancel a batch work`,
      async () => {
        const log = await requestLog();
        // A request is a row of the log, refusals included; a Realtime session's own row is not (none here).
        const requests = log.filter((row) => row.endpoint !== 'realtime');
        const refused = requests.filter((row) => row.status === 'refused').length;
        const failed = requests.filter((row) => row.status === 'failed').length;
        assert.ok(
          refused >= 6 && failed >= 3,
          `the traffic's refusals and failures are in the log: ${refused} refused, ${failed} failed`,
        );
        const accounts = ((await (await adminApi('GET', '/admin/accounts')).json()) as { data: unknown[] }).data.length;

        const context = await openContext(browser, gateway.url, viewport);
        const page = await context.newPage();
        await signIn(page, adminEmail, adminPassword);
        // The header draws once the session, the config and the person's teams are read: waited for, not assumed.
        if (label === 'phone')
          await page.getByRole('note', { name: 'Mock vendor' }).waitFor({ state: 'visible', timeout: 10_000 });
        assert.match(await page.getByRole('note', { name: 'Mock vendor' }).innerText(), /Mock vendor · billed/);

        // Usage: every account's requests over its range (30 days) are the log's, refusals and failures said.
        await page.goto('/console/usage');
        await settled(page);
        const total = stat(page, 'Requests');
        await waitFor(
          async () => !Number.isNaN(leadingCount(await total.locator('.stat-value').innerText())),
          10_000,
          'Usage’s request count',
        );
        assert.equal(
          leadingCount(await total.locator('.stat-value').innerText()),
          requests.length,
          'Usage counts the log’s requests',
        );
        assert.equal(
          (await total.locator('.stat-note').innerText()).trim(),
          `of which ${refused} refused · ${failed} failed`,
        );
        assert.equal(
          leadingCount(await stat(page, 'Accounts').locator('.stat-value').innerText()),
          accounts,
          'the Accounts card counts every account',
        );
        assert.match(
          await stat(page, 'Spend').locator('.stat-note').innerText(),
          /saved by the response cache: \$0\.\d+ on 3 hits/,
        );

        // Activity over the same days: the same count, the same refusals and failures.
        await page.goto('/console/activity?range=30d');
        await settled(page);
        const line = page.locator('#activity-chart-heading ~ p');
        await waitFor(async () => /requests/.test(await line.innerText()), 10_000, 'Activity’s count line');
        assert.equal(leadingCount(await line.innerText()), requests.length, await line.innerText());
        const countLine = await page.getByText(/^\d[\d,]* requests, \d+ of them refused/).innerText();
        assert.match(
          countLine,
          new RegExp(`^${requests.length} requests, ${refused} of them refused and ${failed} failed`),
          countLine,
        );

        // A cache hit's row says what it saved; a refusal's details say what the client was told.
        const rows = page.getByRole('table', { name: 'Requests' }).locator('tbody tr:not(.skeleton-row)');
        const hit = rows.filter({ hasText: 'cache hit' }).first();
        assert.match(await hit.innerText(), /saved \$0\.\d+/, 'a hit’s saving in its row');
        await rows
          .filter({ hasText: /\b400\b|refused/ })
          .filter({ hasText: 'gpt-4o-mini' })
          .filter({ hasNotText: 'cache' })
          .first()
          .locator('.row-open')
          .click();
        const dialog = page.getByRole('dialog', { name: 'Request details' });
        await dialog.waitFor();
        assert.match(await dialog.innerText(), /Invalid 'temperature': expected a value ≤ 2\./);
        await shoot(page, `admin-activity-refusal-detail-${label}`);
        await page.keyboard.press('Escape');
        await dialog.waitFor({ state: 'detached' });

        // Accounts: every account listed, as many as the card counts.
        await page.goto('/console/admin/accounts');
        await settled(page);
        assert.equal(
          await page.getByRole('table', { name: 'All accounts' }).locator('tbody tr:not(.dt-details-row)').count(),
          accounts,
        );

        // Queues: what its finished column counts is said, so it is not read against the log.
        await page.goto('/console/admin/queues');
        await settled(page);
        assert.match(await page.locator('.queue-keeps-note').innerText(), /request log has every request/);

        // All keys: a member's key revoked where it is listed, and refused at /v1 after.
        const doomed = people[2]!.keys[label === 'desktop' ? 3 : 2]!;
        const works = () =>
          fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${doomed.key}` } }).then(
            async (res) => (await res.arrayBuffer(), res.status),
          );
        assert.equal(await works(), 200);
        await page.goto('/console/admin/keys');
        await settled(page);
        const keyRow = page.locator('tbody tr').filter({ hasText: doomed.name });
        await keyRow.getByRole('button', { name: 'Revoke' }).click();
        const confirm = page.getByRole('alertdialog', { name: 'Revoke this key?' });
        await confirm.getByRole('button', { name: 'Revoke key' }).click();
        await confirm.waitFor({ state: 'detached' });
        await keyRow.getByText('Revoked', { exact: true }).waitFor();
        await waitFor(async () => (await works()) === 401, 5000, 'the revoked key refused at /v1');

        // Batches: the admin sees every account's; one canceled from its row, and the API agrees.
        const target = label === 'desktop' ? batches.toCancel : batches.running;
        await page.goto('/console/batches');
        await settled(page);
        for (const id of Object.values(batches)) await page.locator(`[id="batch-${id}"]`).waitFor();
        await page.getByRole('button', { name: `Cancel ${target}` }).click();
        const sure = page.getByRole('alertdialog', { name: 'Cancel this batch?' });
        await sure.getByRole('button', { name: 'Cancel batch' }).click();
        await sure.waitFor({ state: 'detached' });
        const owner = people[1]!.keys[0]!.key;
        const state = async () =>
          (
            (await (
              await fetch(`${gateway.url}/v1/messages/batches/${target}`, {
                headers: { 'x-api-key': owner, 'anthropic-version': '2023-06-01' },
              })
            ).json()) as { processing_status: string }
          ).processing_status;
        await waitFor(async () => (await state()) !== 'in_progress', 5000, 'the batch canceled');
        const batchRow = page.locator('tbody tr').filter({ has: page.locator(`[id="batch-${target}"]`) });
        await waitFor(async () => /cancel/i.test(await batchRow.innerText()), 10_000, 'the row says it is canceling');
        const over = { page: await pageOverrun(page), tables: await boxFits(page) };
        assert.ok(over.page <= 1 && over.tables.every((box) => box.box <= 1), JSON.stringify(over));
        await shoot(page, `admin-batches-after-cancel-${label}`);
        await context.close();
      },
    );
  }

  for (const [label, viewport] of widths) {
    it(
      `at ${viewport.width} px: no table wider than its box and no page wider than the screen, for a member and ` +
        `for the admin`,
      async () => {
        const problems: string[] = [];
        for (const [who, email, password, pages] of [
          ['member', members[0], memberPassword, memberPages],
          ['admin', adminEmail, adminPassword, [...memberPages, ...adminPages]],
        ] as const) {
          const context = await openContext(browser, gateway.url, viewport);
          const page = await context.newPage();
          page.on('pageerror', (error) => problems.push(`${who} page error: ${error.message}`));
          await signIn(page, email, password);
          for (const path of pages) {
            await page.goto(`/console/${path}`);
            await settled(page);
            const over = await pageOverrun(page);
            if (over > 1)
              problems.push(`${who} ${path} at ${viewport.width}: the page is ${over}px wider than the screen`);
            for (const box of await boxFits(page))
              if (box.box > 1)
                problems.push(
                  `${who} ${path} at ${viewport.width}: table "${box.name}" (${box.columns} in ${box.width}) is ` +
                    `${box.box}px wider than its box`,
                );
            await shoot(page, `${who}-${path.replace('/', '-')}-${label}`);
          }
          await context.close();
        }
        assert.deepEqual(problems, []);
      },
    );
  }
});
