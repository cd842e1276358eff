/**
 * `npm test`: every test file under node's runner, then a loud list of what was not tested
 * because a program is missing (see helpers/prereq.ts), with the command that installs it.
 * Arguments, when given, replace the list of files: `npm test -- test/pages.test.ts`.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..');
const given = process.argv.slice(2);
const files = given.length
  ? given
  : fs.readdirSync(path.join(ROOT, 'test')).filter((f) => f.endsWith('.test.ts')).sort().map((f) => path.join('test', f));
const skipDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-skips-'));
const run = spawnSync(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=2', ...files], {
  cwd: ROOT,
  stdio: 'inherit',
  env: { ...process.env, SLUICE_SKIP_DIR: skipDir },
});
const skipped = [...new Set(fs.readdirSync(skipDir).flatMap((f) => fs.readFileSync(path.join(skipDir, f), 'utf8').split('\n').filter(Boolean)))];
fs.rmSync(skipDir, { recursive: true, force: true });
if (skipped.length > 0) {
  const bar = '!'.repeat(78);
  process.stderr.write(`\n${bar}\n!! Some tests were SKIPPED because a program is missing on this machine:\n`);
  for (const s of skipped) process.stderr.write(`!!   - ${s}\n`);
  process.stderr.write(`!! Install it and run npm test again. In CI (CI=true) these tests fail instead.\n${bar}\n`);
}
process.exit(run.status ?? 1);
