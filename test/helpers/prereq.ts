import fs from 'node:fs';
import path from 'node:path';

/**
 * A test that needs an outside program (Chromium, the Prometheus parser). Locally a missing one
 * skips the test, and test/run.ts lists it loudly at the end of `npm test` with how to install it;
 * in CI (CI set) the test file fails instead, naming what to install: CI never skips silently.
 * Returns the `skip` option for describe/test.
 */
export function prerequisite(o: { what: string; missing: string | false; install: string }): string | false {
  if (o.missing === false) return false;
  const line = `${o.what} NOT TESTED: ${o.missing}. Install: ${o.install}`;
  if (process.env.CI && process.env.CI !== 'false' && process.env.CI !== '0') {
    throw new Error(`CI must run every test: ${line}`);
  }
  const dir = process.env.SLUICE_SKIP_DIR;
  if (dir) fs.appendFileSync(path.join(dir, `${process.pid}.txt`), `${line}\n`);
  return line;
}
