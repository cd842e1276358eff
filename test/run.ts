/**
 * `npm test`: every test file under node's runner, then a loud list of what was not tested
 * because a program is missing (see helpers/prereq.ts), with the command that installs it.
 * Arguments, when given, replace the list of files: `npm test -- test/pages.test.ts`.
 *
 * A full run also runs the storage-relevant files once more with their files in a Ceph bucket
 * (SLUICE_TEST_BACKENDS=s3, one cluster for the pass), beside the main pass.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CEPH_DIR_PREFIX, cephSkip, startCeph, type Ceph } from './helpers/ceph.ts';
import { alive, reap, reapDirs, RUN_VAR } from './helpers/reaper.ts';
import { TEMPLATE_PREFIX } from './helpers/pg-template.ts';

const ROOT = path.resolve(import.meta.dirname, '..');
/**
 * Uploads, downloads, zips, tus, caps, aborts, crashes, previews and hashing stored files for the blocklist: every HTTP file that touches
 * the store. Files that test pure functions or only the database run in the main pass alone.
 */
const S3_FILES = [
  'upload', 'upload-abort', 'upload-append', 'upload-large', 'upload-buffers', 'fast-paths', 'crash',
  'download', 'download-limits', 'slow-reader', 'zip', 'large-bundle', 'content', 'preview-memory',
  'tus', 'tus-protocol', 'tus-e2e', 'tus-race', 'tus-budget', 'tus-client', 'tus-unsynced', 'blocklist-backfill',
].map((f) => path.join('test', `${f}.test.ts`));

/**
 * What the Node 22 and Node 24 legs of CI run (`.ci/node-leg MAJOR`, `npm test -- --leg`): every
 * file that touches the HTTP transport, whose uWebSockets.js build differs from Node 20's, and the
 * command-line client, which people run on whatever Node they have.
 */
const LEG_FILES = [
  'smoke', 'uws-binding', 'framing', 'memory', 'upload', 'upload-abort', 'upload-append', 'upload-large', 'upload-buffers',
  'fast-paths', 'tus', 'tus-protocol', 'tus-e2e', 'tus-client', 'client', 'range', 'download', 'slow-reader', 'zip', 'pages', 'browser',
].map((f) => path.join('test', `${f}.test.ts`));

const given = process.argv[2] === '--leg' ? LEG_FILES : process.argv.slice(2);
const files = given.length
  ? given
  : fs.readdirSync(path.join(ROOT, 'test')).filter((f) => f.endsWith('.test.ts')).map((f) => path.join('test', f));
const skipDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-skips-'));

const timesFile = path.join(skipDir, 'times.jsonl');
const report = process.stdout.isTTY ? 'spec' : 'tap';

function runFiles(list: string[], env: Record<string, string>, prefix: string, concurrency: number): Promise<number> {
  return new Promise((resolve) => {
    const reporters = [
      `--test-reporter=${report}`, '--test-reporter-destination=stdout',
      `--test-reporter=${path.join(ROOT, 'test/helpers/file-times.mjs')}`, `--test-reporter-destination=${timesFile}.${prefix ? 's3' : 'main'}`,
    ];
    const cpu = ['--import', path.join(ROOT, 'test/helpers/cpu-times.mjs')];
    const child = spawn(process.execPath, ['--import', 'tsx', ...cpu, '--test', `--test-concurrency=${concurrency}`, ...reporters, ...list], {
      cwd: ROOT,
      stdio: prefix ? ['ignore', 'pipe', 'pipe'] : 'inherit',
      env: { ...process.env, SLUICE_SKIP_DIR: skipDir, SLUICE_CPU_TIMES: `${timesFile}.cpu.${prefix ? 's3' : 'main'}`, ...env },
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
    children.add(child);
    child.on('exit', (code) => {
      children.delete(child);
      resolve(code ?? 1);
    });
  });
}

process.env.SLUICE_SKIP_DIR = skipDir;
// Everything this run starts carries its pid (helpers/reaper.ts). What an earlier run left running
// (killed before it could stop its servers and clusters) is stopped first.
process.env[RUN_VAR] = String(process.pid);
const leftovers = reap((run) => run !== process.pid && !alive(run));
const leftDirs = reapDirs(CEPH_DIR_PREFIX) + reapDirs(TEMPLATE_PREFIX);
if (leftovers || leftDirs) process.stderr.write(`stopped ${leftovers} process(es) and removed ${leftDirs} cluster dir(s) left by an earlier test run\n`);
const children = new Set<ChildProcess>();
let interrupted = false;
let ceph: Ceph | null = null;
// Interrupted (Ctrl-C, a closed terminal, a CI timeout): the passes are told to stop, and whatever
// this run started that is still running a few seconds later is killed, detached daemons included.
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(sig, () => {
    interrupted = true;
    process.stderr.write(`\n${sig}: stopping the tests and everything they started\n`);
    for (const c of children) c.kill('SIGTERM');
    const deadline = Date.now() + 5000;
    const finish = (): void => {
      if ([...children].some((c) => c.exitCode === null && c.signalCode === null) && Date.now() < deadline) {
        setTimeout(finish, 100);
        return;
      }
      reap((run) => run === process.pid);
      try {
        ceph?.stopSync();
      } catch {
        // its daemons were killed above; the directory goes with it
      }
      fs.rmSync(skipDir, { recursive: true, force: true });
      fs.rmSync(path.join(os.tmpdir(), `${TEMPLATE_PREFIX}${process.pid}`), { recursive: true, force: true });
      process.exit(sig === 'SIGINT' ? 130 : 143);
    };
    finish();
  });
}
// Checked before anything runs: in CI a missing Ceph stops the run here, naming the packages.
const withS3 = given.length === 0 && !cephSkip('the S3 pass of npm test (test/run.ts)');
/** Changed and untracked files of the checkout (git status), or null outside a git work tree. */
const treeState = (): Set<string> | null => {
  const r = spawnSync('git', ['status', '--porcelain', '--untracked-files=all'], { cwd: ROOT, encoding: 'utf8' });
  return r.status === 0 ? new Set(r.stdout.split('\n').filter(Boolean)) : null;
};
// Tests write only to temp dirs: a full run that leaves the checkout changed fails.
const treeBefore = given.length === 0 ? treeState() : null;
// Three files at a time beside the S3 pass's two. Five kept a fast 2-core machine busier (514 s against
// 600), but on a slower one the load made the server miss its six-second answer deadline (503s in
// files that passed in every run at three). SLUICE_TEST_CONCURRENCY=5 where the cores can take it. node's runner
// starts its files in name order, whatever order it is given.
const passes: Promise<number>[] = [runFiles(files, {}, '', Number(process.env.SLUICE_TEST_CONCURRENCY ?? 3))];
if (withS3) {
  ceph = await startCeph();
  const named = { endpoint: ceph.endpoint, region: ceph.region, accessKeyId: ceph.accessKeyId, secretAccessKey: ceph.secretAccessKey, bucket: ceph.bucket };
  passes.push(runFiles(S3_FILES, { SLUICE_TEST_BACKENDS: 's3', SLUICE_TEST_CEPH: JSON.stringify(named) }, '[s3] ', 2));
}
const codes = await Promise.all(passes);
// Interrupted: the signal handler ends the run once everything is stopped.
if (interrupted) await new Promise(() => {});
await ceph?.stop();
fs.rmSync(path.join(os.tmpdir(), `${TEMPLATE_PREFIX}${process.pid}`), { recursive: true, force: true });

printTimes();
const failed = printFailures();
const skipped = [...new Set(fs.readdirSync(skipDir).filter((f) => f.endsWith('.txt')).flatMap((f) => fs.readFileSync(path.join(skipDir, f), 'utf8').split('\n').filter(Boolean)))];
fs.rmSync(skipDir, { recursive: true, force: true });
if (skipped.length > 0) {
  const bar = '!'.repeat(78);
  process.stderr.write(`\n${bar}\n!! Some tests were SKIPPED because a program is missing on this machine:\n`);
  for (const s of skipped) process.stderr.write(`!!   - ${s}\n`);
  process.stderr.write(`!! Install it and run npm test again. In CI (CI=true) these tests fail instead.\n${bar}\n`);
}
const treeAfter = treeBefore ? treeState() : null;
const changed = treeAfter ? [...treeAfter].filter((l) => !treeBefore!.has(l)) : [];
if (changed.length > 0) {
  process.stderr.write(`\nthe tests changed the checkout (they may write only to temp dirs):\n${changed.map((l) => `  ${l}\n`).join('')}`);
  codes.push(1);
}
if (codes.some((c) => c !== 0)) process.stderr.write(`\ntest passes exited with ${codes.join(', ')} (main${ceph ? ', s3' : ''}) on Node ${process.version}; ${failed} failed test(s)\n`);
process.exit(codes.every((c) => c === 0) ? 0 : 1);

/** The slowest test files of each pass, by the time their top-level tests ran (test/README.md keeps the table). */
function printTimes(): void {
  for (const pass of ['main', 's3']) {
    const per = new Map<string, number>();
    for (const t of records(pass)) {
      if (t.fail !== undefined) continue;
      const name = path.relative(ROOT, t.file);
      per.set(name, (per.get(name) ?? 0) + t.ms);
    }
    if (per.size === 0) continue; // a pass that did not run
    // CPU seconds of each file's process and of what it started (helpers/cpu-times.mjs).
    const cpu = new Map<string, number>();
    const cpuFile = `${timesFile}.cpu.${pass}`;
    for (const line of fs.existsSync(cpuFile) ? fs.readFileSync(cpuFile, 'utf8').split('\n').filter(Boolean) : []) {
      const c = JSON.parse(line) as { file: string; own: number; children: number };
      cpu.set(path.relative(ROOT, c.file), c.own + c.children);
    }
    const rows = [...per].sort((a, b) => b[1] - a[1]);
    const total = rows.reduce((n, [, ms]) => n + ms, 0);
    const cpuTotal = [...cpu.values()].reduce((n, s) => n + s, 0);
    process.stderr.write(`\n${pass} pass: ${rows.length} files, ${(total / 1000).toFixed(0)} s of tests, ${cpuTotal.toFixed(0)} CPU seconds; the slowest (s, CPU s):\n`);
    const cpuOf = (name: string): string => (cpu.has(name) ? cpu.get(name)!.toFixed(1) : '-');
    for (const [name, ms] of rows.slice(0, 12)) process.stderr.write(`  ${(ms / 1000).toFixed(1).padStart(7)} ${cpuOf(name).padStart(6)}  ${name}\n`);
    const all = path.join(os.tmpdir(), `sluice-test-times-${pass}.tsv`);
    fs.writeFileSync(all, rows.map(([name, ms]) => `${(ms / 1000).toFixed(1)}\t${cpuOf(name)}\t${name}\n`).join(''));
    process.stderr.write(`  (every file: ${all})\n`);
  }
}

/**
 * Every failed test of both passes, innermost first, between two marker lines that .ci/run looks
 * for: a long log's tail then names what failed. Returns how many failed.
 */
function printFailures(): number {
  const rows: string[] = [];
  for (const pass of ['main', 's3']) {
    for (const t of records(pass)) {
      if (t.fail === undefined) continue;
      const where = `${pass === 's3' ? '[s3] ' : ''}${path.relative(ROOT, t.file)}`;
      rows.push(`${'  '.repeat(t.nesting)}${where}: ${t.fail}\n${t.message.split('\n').map((m) => `${'  '.repeat(t.nesting)}    ${m}`).join('\n')}\n`);
    }
  }
  if (rows.length === 0) return 0;
  process.stderr.write(`\n== failed tests on Node ${process.version}\n${rows.join('')}== end of failed tests\n`);
  return rows.length;
}

/** What helpers/file-times.mjs wrote for one pass: a line per top-level test's time, and one per failed test. */
function records(pass: string): Array<{ file: string; ms: number; fail?: undefined } | { file: string; fail: string; nesting: number; message: string }> {
  const file = `${timesFile}.${pass}`;
  if (!fs.existsSync(file)) return [];
  return fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line));
}
