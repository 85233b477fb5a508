// Debian's Chromium driven by playwright-core (`npx playwright install` cannot download browsers here):
// headless, and with host resolution pinned so no request can leave the machine.
import fs from 'node:fs';
import { expect } from 'vitest';
import { chromium, type Browser } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

/** Launches Chromium; `hostMap` maps extra names to 127.0.0.1, every other name (but 127.0.0.1) resolves to nothing. */
export async function launchChromium(hostMap: string[] = []): Promise<Browser> {
  expect(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: run scripts/start-services.sh (apt-get install -y chromium)`).toBe(true);
  const maps = hostMap.map((h) => `MAP ${h} 127.0.0.1, `).join('');
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-quic',
      '--no-first-run',
      '--disable-sync',
      `--host-resolver-rules=EXCLUDE 127.0.0.1, ${maps}MAP * ~NOTFOUND`,
    ],
  });
}
