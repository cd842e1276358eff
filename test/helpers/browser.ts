import fs from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { prerequisite } from './prereq.ts';

/** Debian's Chromium, driven through playwright-core (no downloaded browser). */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
  '--disable-sync', '--no-first-run',
];

/**
 * The `skip` option for a suite that needs Chromium: locally a missing browser skips it (and npm test
 * says so at the end); in CI it fails. `what` names the suite in that message.
 */
export function chromiumSkip(what: string): string | false {
  return prerequisite({
    what,
    missing: fs.existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM}`,
    install: 'apt-get install -y chromium (or set CHROMIUM_PATH to a Chromium binary)',
  });
}

/** `args`: more Chromium switches (a host resolver rule, say). */
export function launchChromium(args: readonly string[] = []): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, args: [...ARGS, ...args], headless: true });
}
