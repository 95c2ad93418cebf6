import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { toFile } from 'openai';
import { type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { boxFits, closeClean, openContext, pageOverrun, screenshots, signIn } from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { ConsoleClient } from '../support/console-client.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

/*
 * The console's Batches page in a real headless Chromium against a real gateway (its mock vendor, its batch engine,
 * Redis and PostgreSQL): batches made through the APIs (Message Batches, and OpenAI's Batch API over a file) by two
 * members, one kept running by slow requests. An admin sees every account's by default; a running batch's counts
 * move without a reload; Cancel and Delete from the rows do what the API's cancel and delete do, as the API then
 * reads them; a member cannot touch another's batch through the console's endpoints. At 1280 px no table is wider
 * than its box, at 390 px every row is a card. Screenshots land in test-artifacts/console/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console');
const shoot = screenshots(shots);
const adminEmail = 'admin@batches-browser.test';
const adminPassword = 'batches-admin-pw';
const adminToken = 'batches-browser-admin-token';
const ann = { email: 'ann@batches-browser.test', password: 'ann-password' };
const bob = { email: 'bob@batches-browser.test', password: 'bob-password' };
const desktop = { width: 1280, height: 800 };
const phone = { width: 390, height: 844 };
/** How long each of the running batch's requests takes at the mock vendor: a cancel finds two of them under way. */
const slowMs = 4000;

interface MessageBatch {
  id: string;
  processing_status: string;
  request_counts: Record<'processing' | 'succeeded' | 'errored' | 'canceled' | 'expired', number>;
  cancel_initiated_at: string | null;
  ended_at: string | null;
}

describe('console batches page in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  const keys: Record<'ann' | 'bob', string> = { ann: '', bob: '' };
  const accounts: Record<'ann' | 'bob', string> = { ann: '', bob: '' };
  /**
   * Ann's: ended at once (two models), and one kept running (40 slow requests, two at a time). Bob's: an OpenAI batch.
   */
  let quick: string;
  let running: string;
  let openaiBatch: string;
  const adminApi = adminRequest(() => gateway.url, adminToken);

  /** A Message Batch made with the member's key; each request's text as given. */
  async function messageBatch(key: string, requests: Array<{ model: string; text: string }>): Promise<MessageBatch> {
    const res = await fetch(`${gateway.url}/v1/messages/batches`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
      body: JSON.stringify({
        requests: requests.map((request, i) => ({
          custom_id: `req-${i}`,
          params: { model: request.model, max_tokens: 16, messages: [{ role: 'user', content: request.text }] },
        })),
      }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    return (await res.json()) as MessageBatch;
  }

  /** The batch as the API reads it: its JSON, or the status (404) when it is gone. */
  async function readMessageBatch(key: string, id: string): Promise<{ status: number; batch: MessageBatch }> {
    const res = await fetch(`${gateway.url}/v1/messages/batches/${id}`, {
      headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01' },
    });
    return { status: res.status, batch: (await res.json()) as MessageBatch };
  }

  before(async () => {
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const { url, redis } = await freshRedis(8);
    redis.disconnect();
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        ADMIN_TOKEN: adminToken,
        // Two of a batch's requests queued at once: a batch of slow requests runs a while, and a cancel finds what
        // waits.
        BATCH_WINDOW: '2',
        BATCH_SWEEP_INTERVAL_S: '1',
      },
    });
    browser = await launchChromium();

    for (const [name, who] of [
      ['ann', ann],
      ['bob', bob],
    ] as const) {
      const account = (await (
        await adminApi('POST', '/admin/accounts', { email: who.email, password: who.password, role: 'member' })
      ).json()) as { id: string };
      assert.equal((await adminApi('POST', `/admin/accounts/${account.id}/credits`, { amount_usd: 5 })).status, 200);
      const key = (await (
        await adminApi('POST', '/admin/keys', { name: `${name}'s batch key`, account_id: account.id })
      ).json()) as { key: string };
      accounts[name] = account.id;
      keys[name] = key.key;
    }

    quick = (
      await messageBatch(keys.ann, [
        { model: 'gpt-4o-mini', text: 'Hello one' },
        { model: 'claude-sonnet-4-5', text: 'Hello two' },
      ])
    ).id;
    // Bob's, with OpenAI's Batch API over a file of two lines.
    const client = gateway.client(keys.bob);
    const lines = [0, 1].map((i) =>
      JSON.stringify({
        custom_id: `line-${i}`,
        method: 'POST',
        url: '/v1/chat/completions',
        body: { model: 'gpt-4o-mini', max_tokens: 8, messages: [{ role: 'user', content: `Hi ${i}` }] },
      }),
    );
    const input = await client.files.create({
      file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'bob-batch.jsonl'),
      purpose: 'batch',
    });
    openaiBatch = (
      await client.batches.create({
        input_file_id: input.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      })
    ).id;
    await waitFor(
      async () => (await readMessageBatch(keys.ann, quick)).batch.processing_status === 'ended',
      20_000,
      'the quick batch ends',
    );
    await waitFor(
      async () => (await client.batches.retrieve(openaiBatch)).status === 'completed',
      20_000,
      'the OpenAI batch completes',
    );
    // Last, so it is the newest: still running through every check below until it is canceled.
    running = (
      await messageBatch(
        keys.ann,
        Array.from({ length: 40 }, (_, i) => ({ model: 'gpt-4o-mini', text: `Answer ${i} [mock:slow:${slowMs}]` })),
      )
    ).id;
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
  });

  const table = (page: Page) => page.getByRole('table', { name: 'Batches' });
  const row = (page: Page, id: string): Locator =>
    table(page)
      .locator('tbody tr.batch-row')
      .filter({ has: page.locator(`[id="batch-${id}"]`) });
  const listedIds = (page: Page) => table(page).locator('tbody tr.batch-row .batch-id').allInnerTexts();
  /** How many of the running batch's requests the page says are done ("12/40"). */
  const doneShown = async (page: Page, id: string) =>
    Number((await row(page, id).locator('.batch-done').innerText()).split('/')[0]);

  /**
   * The page no wider than the screen, no table wider than its box, and at 390 px every row a card with its status
   * whole.
   */
  async function checkFit(page: Page, label: string): Promise<void> {
    const overrun = await pageOverrun(page);
    assert.ok(overrun <= 0, `${label}: the page is ${overrun}px wider than the screen`);
    const boxes = await boxFits(page);
    assert.ok(
      boxes.every((box) => box.table <= 0),
      `${label}: a table is wider than its box by ${boxes.map((box) => box.table).join(', ')}px (${boxes.map((box) => box.columns).join('; ')})`,
    );
    // Every cell's content whole in its cell (the canceling batch's Ends, a status badge): nothing cut.
    const cut = await table(page)
      .locator('tbody tr.batch-row td')
      .evaluateAll((cells) =>
        cells
          .filter((cell) => !cell.classList.contains('cell-clip'))
          .filter((cell) => cell.scrollWidth > cell.clientWidth + 1)
          .map((cell) => cell.textContent),
      );
    assert.deepEqual(cut, [], `${label}: cells cut short`);
    if (page.viewportSize()!.width < 640) {
      const display = await table(page)
        .locator('tbody tr.batch-row')
        .first()
        .evaluate((tr) => getComputedStyle(tr).display);
      assert.equal(display, 'flex', `${label}: a row is a card (a column of its lines)`);
      const badges = await table(page)
        .locator('tbody tr.batch-row .badge')
        .evaluateAll((all) =>
          all.map((badge) => {
            const box = badge.getBoundingClientRect();
            const card = badge.closest('tr')!.getBoundingClientRect();
            return box.left >= card.left && box.right <= card.right && badge.scrollWidth <= badge.clientWidth + 1;
          }),
        );
      assert.ok(badges.length > 0 && badges.every(Boolean), `${label}: every status whole in its card`);
    }
  }

  it(
    'shows an admin every account’s batches by default, live, with their models, accounts and links, and the batch ' +
      'a link names',
    async () => {
      const context = await openContext(browser, gateway.url, desktop);
      const page = await context.newPage();
      await signIn(page, adminEmail, adminPassword);
      await page.getByRole('link', { name: 'Batches' }).click();
      await page.waitForURL('**/console/batches');
      await row(page, running).waitFor();
      assert.equal(await page.getByLabel('Account').inputValue(), '', 'All accounts is the default');
      assert.equal(await page.getByLabel('Account').locator('option:checked').innerText(), 'All accounts');
      const ids = await listedIds(page);
      assert.deepEqual(ids, [running, openaiBatch, quick], 'every account’s, newest first');
      assert.equal(await page.getByText('No batches yet').count(), 0);

      // Whose each is, and the model(s) its requests name.
      assert.match(await row(page, running).innerText(), new RegExp(ann.email.replace('.', '\\.')));
      assert.match(await row(page, openaiBatch).innerText(), new RegExp(bob.email.replace('.', '\\.')));
      assert.match(await row(page, running).locator('td').nth(2).innerText(), /^gpt-4o-mini$/);
      assert.match(await row(page, quick).innerText(), /\b2 models\b/);
      await row(page, quick).getByRole('button', { name: 'Details' }).click();
      const details = page.locator('tr.dt-details-row');
      await details.getByText('claude-sonnet-4-5, gpt-4o-mini').waitFor();
      await details.getByText('Message Batches').waitFor();
      await row(page, quick).getByRole('button', { name: 'Less' }).click();

      // Batch requests cost the flex price, the multiple said.
      await page.getByText('Batch requests cost the flex price: half the standard price (×0.5)').waitFor();
      // A link to each batch's requests in Activity.
      assert.equal(
        await page.getByRole('link', { name: `Requests of ${running} in Activity` }).getAttribute('href'),
        `/console/activity?batch=${running}`,
      );
      // Results read with $SWITCHYARD_KEY, as the README names it.
      assert.match(await page.getByLabel(`Results of ${quick}`).innerText(), /-H "x-api-key: \$SWITCHYARD_KEY"$/);
      assert.match(
        await page.locator('code.batch-curl').filter({ hasText: '/v1/files/' }).first().innerText(),
        /-H "Authorization: Bearer \$SWITCHYARD_KEY"$/,
      );

      // Live: the running batch's counts move with no reload, and the page says when it last read them.
      const first = await doneShown(page, running);
      await page.getByText(/Updated \d/).waitFor();
      // Within a minute: the batch's own pace is the fake's, slower when the machine is busy (two test files at a time).
      await waitFor(
        async () => (await doneShown(page, running)) > first,
        60_000,
        'the running batch’s count moves without a reload',
      );
      assert.ok((await doneShown(page, running)) < 40, 'still running');
      await shoot(page, 'batches-admin-all-desktop');
      await checkFit(page, 'admin at 1280');

      // One account picked: only its batches, and the account column gone.
      await page.getByLabel('Account').selectOption(accounts.bob);
      await page.waitForURL(`**/console/batches?account_id=${accounts.bob}`);
      await waitFor(
        async () => JSON.stringify(await listedIds(page)) === JSON.stringify([openaiBatch]),
        10_000,
        'Bob’s batches only',
      );
      assert.equal(await table(page).locator('.batch-account').count(), 0, 'no account under the id');

      // A link to one batch (Activity's rows link so): marked and shown, whatever account is picked.
      await page.goto(`/console/batches?account_id=${accounts.bob}&batch=${quick}`);
      await row(page, quick).waitFor();
      assert.match((await row(page, quick).getAttribute('class')) ?? '', /\brow-target\b/);
      assert.deepEqual(await listedIds(page), [quick, openaiBatch]);
      await shoot(page, 'batches-admin-linked-desktop');

      // Every account's on a phone: cards, each with its account under its id.
      await page.setViewportSize(phone);
      await page.goto('/console/batches');
      await row(page, running).waitFor();
      assert.equal(await row(page, openaiBatch).locator('.batch-account').innerText(), bob.email);
      await shoot(page, 'batches-admin-all-phone');
      await checkFit(page, 'admin at 390');
      await closeClean(context, 'admin');
    },
  );

  it('lets a member cancel a running batch and delete an ended one from the rows, as the API then reads them', async () => {
    for (const [label, viewport] of [
      ['desktop', desktop],
      ['phone', phone],
    ] as const) {
      const context = await openContext(browser, gateway.url, viewport);
      const page = await context.newPage();
      await signIn(page, ann.email, ann.password);
      await page.goto('/console/batches');
      await row(page, running).waitFor();
      assert.deepEqual(await listedIds(page), [running, quick], `${label}: her own only`);
      assert.equal(await page.getByLabel('Account').count(), 0, 'no account chooser for a member');
      await shoot(page, `batches-member-${label}`);
      await checkFit(page, `member at ${label}`);
      await closeClean(context, `member ${label}`);
    }

    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await signIn(page, ann.email, ann.password);
    await page.goto('/console/batches');
    await row(page, running).waitFor();
    // Delete is offered only once ended; Cancel only while running.
    assert.equal(await page.getByRole('button', { name: `Delete ${running}` }).count(), 0);
    assert.equal(await page.getByRole('button', { name: `Cancel ${quick}` }).count(), 0);

    // Cancel, confirmed: the row turns canceling and says why requests still show as processing.
    await page.getByRole('button', { name: `Cancel ${running}` }).click();
    const confirm = page.getByRole('alertdialog', { name: 'Cancel this batch?' });
    await confirm.waitFor();
    await shoot(page, 'batches-cancel-confirm-desktop');
    await confirm.getByRole('button', { name: 'Cancel batch' }).click();
    await confirm.waitFor({ state: 'detached' });
    await page
      .getByText(
        /still shown as processing were already queued or sent to a vendor: those a vendor is answering finish \(and are billed\), the others are canceled when a worker reaches them/,
      )
      .waitFor();
    assert.match(await row(page, running).innerText(), /canceling/);
    await shoot(page, 'batches-canceling-desktop');
    await checkFit(page, 'a canceling batch at 1280');
    const phonePage = await (await newContextSignedIn(phone)).newPage();
    await phonePage.goto('/console/batches');
    await row(phonePage, running).waitFor();
    await shoot(phonePage, 'batches-canceling-phone');
    await checkFit(phonePage, 'a canceling batch at 390');
    await closeClean(phonePage.context(), 'member phone, canceling');

    // It ends through the real engine (the page follows it live), and the API agrees.
    await waitFor(
      async () => /\bended\b/.test(await row(page, running).locator('td').nth(1).innerText()),
      30_000,
      'the canceled batch ends on the page',
    );
    const { batch } = await readMessageBatch(keys.ann, running);
    assert.equal(batch.processing_status, 'ended');
    assert.ok(batch.cancel_initiated_at !== null);
    assert.ok(batch.request_counts.canceled > 0, JSON.stringify(batch.request_counts));
    assert.equal(batch.request_counts.processing, 0);
    assert.equal(
      batch.request_counts.succeeded + batch.request_counts.canceled,
      40,
      JSON.stringify(batch.request_counts),
    );
    const shownCounts = await row(page, running).innerText();
    assert.match(shownCounts, new RegExp(`${batch.request_counts.canceled} canceled`));
    await page.getByText(/refreshes every 5 s/).waitFor({ state: 'detached' });

    // Delete the quick one, confirmed: gone from the rows, and the API says 404.
    await page.getByRole('button', { name: `Delete ${quick}` }).click();
    const sure = page.getByRole('alertdialog', { name: 'Delete this batch?' });
    await sure.getByRole('button', { name: 'Delete batch' }).click();
    await row(page, quick).waitFor({ state: 'detached' });
    assert.equal((await readMessageBatch(keys.ann, quick)).status, 404);
    await page.reload();
    await row(page, running).waitFor();
    assert.deepEqual(await listedIds(page), [running]);
    await closeClean(context, 'member');

    async function newContextSignedIn(viewport: { width: number; height: number }): Promise<BrowserContext> {
      const made = await openContext(browser, gateway.url, viewport);
      const signing = await made.newPage();
      await signIn(signing, ann.email, ann.password);
      await signing.close();
      return made;
    }
  });

  it(
    'refuses another member’s batch (404, as an unknown one), a cancel or delete without the CSRF token, and ' +
      'deleting a running batch',
    async () => {
      const other = new ConsoleClient(gateway.url);
      assert.equal((await other.signIn(bob.email, bob.password)).status, 200);
      // Ann's, as Bob: not found, whatever is asked.
      for (const [method, path] of [
        ['GET', `/console/api/batches/${running}`],
        ['POST', `/console/api/batches/${running}/cancel`],
        ['DELETE', `/console/api/batches/${running}`],
      ] as const) {
        const answer = await other.request(method, path);
        assert.equal(answer.status, 404, `${method} ${path}: ${JSON.stringify(answer.json)}`);
        assert.equal(answer.json.error?.code, 'batch_not_found');
      }
      assert.equal((await other.request('POST', '/console/api/batches/msgbatch_nosuchbatch/cancel')).status, 404);
      // Ann's list is not Bob's, whatever account it names.
      const listed = await other.request<{ data: Array<{ id: string }> }>(
        'GET',
        `/console/api/batches?account_id=${accounts.ann}`,
      );
      assert.deepEqual(
        listed.json.data.map((b) => b.id),
        [openaiBatch],
      );
      // His own: no CSRF token, no cancel or delete.
      assert.equal(
        (await other.request('DELETE', `/console/api/batches/${openaiBatch}`, undefined, { csrf: false })).status,
        403,
      );
      assert.equal(
        (await other.request('POST', `/console/api/batches/${openaiBatch}/cancel`, undefined, { csrf: false })).status,
        403,
      );
      // A completed OpenAI batch cannot be cancelled (as OpenAI's API says).
      const late = await other.request('POST', `/console/api/batches/${openaiBatch}/cancel`);
      assert.equal(late.status, 400);
      assert.equal(late.json.error?.code, 'batch_not_cancellable');

      // A running batch is not deleted: the admin makes one for Ann and tries.
      const admin = new ConsoleClient(gateway.url);
      assert.equal((await admin.signIn(adminEmail, adminPassword)).status, 200);
      const slow = (
        await messageBatch(keys.ann, [
          { model: 'gpt-4o-mini', text: `Wait [mock:slow:${slowMs}]` },
          { model: 'gpt-4o-mini', text: `Wait more [mock:slow:${slowMs}]` },
          { model: 'gpt-4o-mini', text: `And more [mock:slow:${slowMs}]` },
        ])
      ).id;
      const refused = await admin.request('DELETE', `/console/api/batches/${slow}`);
      assert.equal(refused.status, 400);
      assert.equal(refused.json.error?.code, 'batch_not_ended');
      // An admin may cancel any account's.
      const canceled = await admin.request<{ status: string }>('POST', `/console/api/batches/${slow}/cancel`);
      assert.equal(canceled.status, 200, JSON.stringify(canceled.json));
      assert.ok(['canceling', 'ended'].includes(canceled.json.status), canceled.json.status);
      await waitFor(
        async () => (await readMessageBatch(keys.ann, slow)).batch.processing_status === 'ended',
        30_000,
        'the admin’s cancel ends it',
      );
      const deleted = await admin.request('DELETE', `/console/api/batches/${slow}`);
      assert.equal(deleted.status, 200, JSON.stringify(deleted.json));
      assert.equal((await readMessageBatch(keys.ann, slow)).status, 404);
    },
  );
});
