import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, type Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { closeClean, openContext, screenshots, signIn } from '../support/console-browser.js';
import { adminRequest } from '../support/admin-client.js';
import { buildOnce } from '../support/build.js';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { followsMoneyRule } from '../support/money-rule.js';

/*
 * The Playground's Speech tab in a real headless Chromium against a real
 * gateway: text spoken by the mock speech model through the queue, the audio
 * decoded and playable by the browser itself, its cost on the page equal to
 * the request log's, the link to its Activity row, the request id in an
 * error, and no sideways scroll at desktop or phone width. No page may break
 * the console's CSP (the audio plays from a blob URL). Screenshots land in
 * test-artifacts/console/.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, 'test-artifacts', 'console');
const shoot = screenshots(shots);
const adminEmail = 'admin@speech-browser.test';
const adminPassword = 'speech-admin-pw';
const adminToken = 'speech-browser-admin-token';
const memberEmail = 'member@speech-browser.test';
const memberPassword = 'member-password';
const brokeEmail = 'broke@speech-browser.test';
const brokePassword = 'broke-password';
const desktop = { width: 1280, height: 800 };
const phone = { width: 390, height: 844 };

interface CatalogModel {
  id: string;
  owned_by: string;
  capability: string;
  speech_formats?: string[];
}

/** The mock's speech model and the formats it claims, as the built-in catalog lists them. */
const catalog = JSON.parse(readFileSync(join(root, 'shared', 'catalog.json'), 'utf8')) as
  { models?: CatalogModel[] } | CatalogModel[];
const mockSpeech = (Array.isArray(catalog) ? catalog : (catalog.models ?? [])).find(
  (m) => m.capability === 'speech' && m.owned_by === 'mock',
);

interface Row {
  id: string;
  endpoint: string | null;
  cost_micros: number;
  cost_usd: number;
  audio_seconds: number;
  settled: boolean;
  status: string;
}

describe('the Playground’s Speech tab in a real browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let member: string;
  const adminApi = adminRequest(() => gateway.url, adminToken);

  before(async () => {
    assert.ok(mockSpeech, 'the catalog has a mock speech model');
    await buildOnce();
    mkdirSync(shots, { recursive: true });
    const { url, redis } = await freshRedis(9);
    redis.disconnect();
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
    // A member with no credit: every request refused, with its id.
    assert.equal(
      (await adminApi('POST', '/admin/accounts', { email: brokeEmail, password: brokePassword, role: 'member' }))
        .status,
      201,
    );
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
  });

  async function openSpeech(page: Page): Promise<void> {
    await page.goto('/console/playground');
    await page.getByRole('group', { name: 'Mode' }).getByRole('button', { name: 'Speech' }).click();
    await page.getByLabel('Model').selectOption(mockSpeech!.id);
  }

  /**
   * The audio element's duration once its metadata is in (the browser decoded the source), or the media error it met.
   */
  function playable(page: Page): Promise<{ duration: number; error: number | null; src: string }> {
    // A string, not a function: tsx's compiled helpers (names kept on inner functions) do not exist in the page.
    return page.evaluate(`new Promise((resolve) => {
      const audio = document.querySelector('audio');
      const done = () => resolve({ duration: audio.duration, error: audio.error ? audio.error.code : null, src: audio.currentSrc });
      if (audio.readyState >= 1 || audio.error) return done();
      audio.addEventListener('loadedmetadata', done, { once: true });
      audio.addEventListener('error', done, { once: true });
      // Whatever happens, an answer: a source the browser never reads is a failure, not a hang.
      setTimeout(done, 10000);
    })`);
  }

  /** A request's row as an admin reads the log, once settled. */
  async function settledRow(id: string): Promise<Row> {
    let found: Row | undefined;
    await waitFor(
      async () => {
        const page = (await (await adminApi('GET', `/admin/requests?account_id=${member}&limit=100`)).json()) as {
          data: Row[];
        };
        found = page.data.find((row) => row.id === id);
        return !!found?.settled;
      },
      15_000,
      `the record of ${id}`,
    );
    return found!;
  }

  /** Each clip spoken: its length as the browser read it, and the whole seconds billed for it. */
  const lengths: Array<{ seconds: number; billed: number }> = [];

  /** Speaks `text` and returns the request's id, from the link to its Activity row. */
  async function speakAndCheck(page: Page, text: string, format: string, label: string): Promise<string> {
    const sent = page.waitForRequest(
      (request) => request.url().endsWith('/console/api/playground/audio/speech') && request.method() === 'POST',
    );
    await page.getByLabel('Format').selectOption(format);
    await page.getByLabel('Text', { exact: true }).fill(text);
    await page.getByRole('button', { name: 'Speak' }).click();
    const body = (await sent).postDataJSON() as Record<string, unknown>;
    assert.deepEqual(
      { model: body.model, input: body.input, voice: body.voice, response_format: body.response_format },
      { model: mockSpeech!.id, input: text, voice: 'coral', response_format: format },
    );
    // The browser plays it: its metadata read from the blob, a duration above zero.
    await page.locator('audio').waitFor();
    const audio = await playable(page);
    assert.equal(audio.error, null, `${label}: the browser could not decode the ${format} audio`);
    assert.ok(
      audio.duration > 0 && Number.isFinite(audio.duration),
      `${label}: a playable ${format} source: ${JSON.stringify(audio)}`,
    );
    assert.match(audio.src, /^blob:/);
    // The cost, as the request log recorded it.
    const link = page.getByRole('link', { name: 'See it in Activity' });
    const href = (await link.getAttribute('href'))!;
    const id = new URL(href, gateway.url).searchParams.get('request')!;
    assert.match(id, /\S/);
    const cost = page.locator('.speech-cost');
    await cost.waitFor({ timeout: 20_000 });
    const row = await settledRow(id);
    assert.equal(row.endpoint, 'audio.speech');
    assert.equal(row.status, 'completed');
    assert.ok(row.cost_micros > 0, `${label}: the mock's speech is billed`);
    assert.equal(
      Number(await cost.getAttribute('data-cost-micros')),
      row.cost_micros,
      `${label}: the page's cost is the log's`,
    );
    const shown = (await cost.innerText()).trim();
    const amount = /^Cost: (\$[\d,.]+)$/.exec(shown)?.[1];
    assert.ok(amount && followsMoneyRule(amount), `${label}: ${shown}`);
    // Four significant digits of the log's amount (the console's money rule).
    const dollars = Number(amount.slice(1).replace(/,/g, ''));
    assert.ok(
      Math.abs(dollars - row.cost_usd) <= row.cost_usd * 5e-4 + 5e-7,
      `${label}: ${shown} against ${row.cost_usd}`,
    );
    assert.match(await page.locator('.speech-meta').innerText(), new RegExp(`${[...text].length} characters`));
    // The clip's own length, as the browser reads it from the audio ("2.16 s long"), beside the whole seconds billed
    // for it ("3 s billed"), each said as what it is: the billed count is never given as the clip's length.
    const meta = page.locator('.speech-meta');
    await meta
      .getByText(`${audio.duration.toLocaleString('en-US', { maximumFractionDigits: 2 })} s long`, { exact: true })
      .waitFor();
    assert.ok(row.audio_seconds > 0, `${label}: the record counts the audio's seconds`);
    await meta.getByText(`${row.audio_seconds} s billed (whole seconds)`, { exact: true }).waitFor();
    assert.doesNotMatch(await meta.innerText(), /s audio\b/, `${label}: no length without saying which`);
    lengths.push({ seconds: audio.duration, billed: row.audio_seconds });
    return id;
  }

  it(
    'speaks on the mock speech model: played by the browser, its cost the request log’s, its Activity row one ' +
      'click away, at 1280×800 and 390×844',
    async () => {
      for (const [label, viewport] of [
        ['desktop', desktop],
        ['phone', phone],
      ] as const) {
        const context = await openContext(browser, gateway.url, viewport);
        const page = await context.newPage();
        await signIn(page, memberEmail, memberPassword);
        await openSpeech(page);
        await page.getByLabel('Voice').selectOption('coral');
        // The text's limit is shown, and counts as the text grows.
        await page.getByText('0 / 4,096 characters').waitFor();
        const text = `Hello from the ${label} speech tab.`;
        const id = await speakAndCheck(page, text, 'mp3', label);
        await page.getByText(`${text.length} / 4,096 characters`).waitFor();
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        assert.ok(overflow <= 0, `${label}: the page scrolls sideways by ${overflow}px`);
        const audioBox = (await page.locator('audio').boundingBox())!;
        assert.ok(
          audioBox.x >= 0 && audioBox.x + audioBox.width <= viewport.width,
          `${label}: the player fits: ${JSON.stringify(audioBox)}`,
        );
        await shoot(page, `playground-speech-${label}`);

        // Its Activity row: the details opened on arrival, the request read as speech.
        await page.getByRole('link', { name: 'See it in Activity' }).click();
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
        assert.equal(await detail('Endpoint'), 'Speech (audio.speech)');
        // Read as speech: the text's tokens in, the audio's length and tokens out.
        assert.match(await detail('Text in'), /^\d+ tokens$/);
        // The seconds there are the billed ones, whole, and say so.
        assert.match(await detail('Audio out'), /^\d+ s billed \(whole seconds\) · \d+ audio tokens$/);
        assert.equal((await detail('Time to first audio')) === '—', false);
        await page.keyboard.press('Escape');
        await dialog.waitFor({ state: 'detached' });
        // Closed, the address no longer asks for it: a reload does not open it again.
        await page.waitForURL((url) => !url.searchParams.has('request'));
        await closeClean(context, `speech, ${label}`);
      }
      // A clip whose length is not a whole number of seconds, so the length shown and the seconds billed differ.
      assert.ok(
        lengths.some(({ seconds, billed }) => Math.abs(seconds - billed) >= 0.01),
        `a clip of a part second: ${JSON.stringify(lengths)}`,
      );
    },
  );

  it('plays every other format the mock claims (raw PCM made a WAV by the page), and keeps the audio across tabs', async () => {
    const formats = (mockSpeech!.speech_formats ?? ['mp3', 'wav', 'pcm']).filter((format) => format !== 'mp3');
    assert.ok(formats.includes('wav') && formats.includes('pcm'), `the mock claims wav and pcm: ${formats.join(', ')}`);
    const context = await openContext(browser, gateway.url, desktop);
    const page = await context.newPage();
    await signIn(page, memberEmail, memberPassword);
    await openSpeech(page);
    await page.getByLabel('Voice').selectOption('coral');
    const urls: string[] = [];
    for (const format of formats) {
      await speakAndCheck(page, `Format ${format}, spoken.`, format, format);
      urls.push(await page.locator('audio').evaluate((audio: HTMLAudioElement) => audio.currentSrc));
    }
    // Each new audio's blob URL replaced (and revoked) the one before.
    assert.equal(new Set(urls).size, urls.length);
    /** Whether a blob URL still loads as audio (a revoked one errors). */
    const loads = (url: string) =>
      page.evaluate(`new Promise((resolve) => {
        const probe = new Audio();
        probe.addEventListener('loadedmetadata', () => resolve(true), { once: true });
        probe.addEventListener('error', () => resolve(false), { once: true });
        probe.src = ${JSON.stringify(url)};
      })`);
    assert.equal(await loads(urls.at(-1)!), true, 'the audio shown loads');
    const revoked = (await loads(urls[0]!)) === false;
    assert.ok(revoked, 'the replaced audio’s blob URL is revoked');
    // To Chat and back: the last audio still there and playable.
    await page.getByRole('group', { name: 'Mode' }).getByRole('button', { name: 'Chat' }).click();
    await page.getByRole('group', { name: 'Mode' }).getByRole('button', { name: 'Speech' }).click();
    assert.equal(await page.locator('audio').evaluate((audio: HTMLAudioElement) => audio.currentSrc), urls.at(-1));
    assert.ok((await playable(page)).duration > 0);
    await closeClean(context, 'formats');
  });

  it('says what went wrong with the request’s id, and checks the speed and the text before sending', async () => {
    const context = await openContext(browser, gateway.url, phone);
    const page = await context.newPage();
    await signIn(page, brokeEmail, brokePassword);
    await openSpeech(page);
    let posted = 0;
    page.on('request', (request) => {
      if (request.url().endsWith('/playground/audio/speech')) posted++;
    });
    // Nothing to say: nothing sent.
    await page.getByRole('button', { name: 'Speak' }).click();
    await page.getByRole('alert').filter({ hasText: 'Type the text to speak.' }).waitFor();
    // A speed out of range: nothing sent.
    await page.getByLabel('Text', { exact: true }).fill('Hello');
    await page.getByLabel('Speed').fill('9');
    await page.getByRole('button', { name: 'Speak' }).click();
    await page.getByRole('alert').filter({ hasText: 'Speed must be a number from 0.25 to 4.' }).waitFor();
    assert.equal(posted, 0);
    // The text box takes no more than the limit.
    await page.getByLabel('Text', { exact: true }).fill('x'.repeat(5000));
    assert.equal((await page.getByLabel('Text', { exact: true }).inputValue()).length, 4096);
    await page.getByText('4,096 / 4,096 characters').waitFor();
    // No credit: the gateway's refusal, with the id of the request it refused.
    await page.getByLabel('Speed').fill('1.5');
    await page.getByLabel('Text', { exact: true }).fill('Hello');
    const answered = page.waitForResponse((response) =>
      response.url().endsWith('/console/api/playground/audio/speech'),
    );
    await page.getByRole('button', { name: 'Speak' }).click();
    const response = await answered;
    assert.equal(response.status(), 429);
    const id = (await response.headerValue('x-request-id'))!;
    assert.ok(id);
    const alert = page.getByRole('alert').filter({ hasText: `(request ${id})` });
    await alert.waitFor();
    assert.match(await alert.innerText(), /quota|balance|credit/i);
    assert.equal(await page.locator('audio').count(), 0);
    assert.ok((await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)) <= 0);
    await shoot(page, 'playground-speech-error-phone');
    await closeClean(context, 'errors');
  });
});
