/**
 * `npm test`: every test file under node's runner, then a loud list of what was not tested
 * because a program is missing (see helpers/prereq.ts), with the command that installs it.
 * Arguments, when given, replace the list of files: `npm test -- test/pages.test.ts`.
 *
 * A full run also runs the storage-relevant files once more with their files in a Ceph bucket
 * (SLUICE_TEST_BACKENDS=s3, one cluster for the pass), beside the main pass.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { cephSkip, startCeph, type Ceph } from './helpers/ceph.ts';

const ROOT = path.resolve(import.meta.dirname, '..');
/**
 * Uploads, downloads, zips, tus, caps, aborts, crashes, previews and hashing stored files for the blocklist: every HTTP file that touches
 * the store. Files that test pure functions or only the database run in the main pass alone.
 */
const S3_FILES = [
  'upload', 'upload-abort', 'upload-append', 'upload-large', 'upload-buffers', 'fast-paths', 'crash',
  'download', 'download-limits', 'slow-reader', 'zip', 'large-bundle', 'content', 'preview-memory',
  'tus', 'tus-protocol', 'tus-e2e', 'tus-race', 'tus-budget', 'tus-client', 'blocklist-backfill',
].map((f) => path.join('test', `${f}.test.ts`));

const given = process.argv.slice(2);
const files = given.length
  ? given
  : fs.readdirSync(path.join(ROOT, 'test')).filter((f) => f.endsWith('.test.ts')).sort().map((f) => path.join('test', f));
const skipDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-skips-'));

function runFiles(list: string[], env: Record<string, string>, prefix: string): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=2', ...list], {
      cwd: ROOT,
      stdio: prefix ? ['ignore', 'pipe', 'pipe'] : 'inherit',
      env: { ...process.env, SLUICE_SKIP_DIR: skipDir, ...env },
    });
    // The second pass's lines are marked, so the two interleaved reports stay readable.
    if (prefix) {
      for (const [from, to] of [[child.stdout!, process.stdout], [child.stderr!, process.stderr]] as const) {
        let rest = '';
        from.setEncoding('utf8');
        from.on('data', (c: string) => {
          const lines = (rest + c).split('\n');
          rest = lines.pop()!;
          for (const l of lines) to.write(`${prefix}${l}\n`);
        });
        from.on('end', () => rest && to.write(`${prefix}${rest}\n`));
      }
    }
    child.on('exit', (code) => resolve(code ?? 1));
  });
}

process.env.SLUICE_SKIP_DIR = skipDir;
// Checked before anything runs: in CI a missing Ceph stops the run here, naming the packages.
const withS3 = given.length === 0 && !cephSkip('the S3 pass of npm test (test/run.ts)');
let ceph: Ceph | null = null;
const passes: Promise<number>[] = [runFiles(files, {}, '')];
if (withS3) {
  ceph = await startCeph();
  const named = { endpoint: ceph.endpoint, region: ceph.region, accessKeyId: ceph.accessKeyId, secretAccessKey: ceph.secretAccessKey, bucket: ceph.bucket };
  passes.push(runFiles(S3_FILES, { SLUICE_TEST_BACKENDS: 's3', SLUICE_TEST_CEPH: JSON.stringify(named) }, '[s3] '));
}
const codes = await Promise.all(passes);
await ceph?.stop();

const skipped = [...new Set(fs.readdirSync(skipDir).flatMap((f) => fs.readFileSync(path.join(skipDir, f), 'utf8').split('\n').filter(Boolean)))];
fs.rmSync(skipDir, { recursive: true, force: true });
if (skipped.length > 0) {
  const bar = '!'.repeat(78);
  process.stderr.write(`\n${bar}\n!! Some tests were SKIPPED because a program is missing on this machine:\n`);
  for (const s of skipped) process.stderr.write(`!!   - ${s}\n`);
  process.stderr.write(`!! Install it and run npm test again. In CI (CI=true) these tests fail instead.\n${bar}\n`);
}
if (codes.some((c) => c !== 0)) process.stderr.write(`\ntest passes exited with ${codes.join(', ')} (main${ceph ? ', s3' : ''})\n`);
process.exit(codes.every((c) => c === 0) ? 0 : 1);
