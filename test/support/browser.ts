import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/** Debian's chromium (browsers cannot be downloaded here), or CHROMIUM_PATH. */
export const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/**
 * A headless Chromium as every browser test drives it: quiet, no sandbox (root in CI), nothing fetched in the
 * background.
 */
export async function launchChromium(): Promise<Browser> {
  assert.ok(
    existsSync(chromiumPath),
    `Chromium is needed at ${chromiumPath} (apt-get install chromium), or set CHROMIUM_PATH`,
  );
  return chromium.launch({
    executablePath: chromiumPath,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}
