import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { spawn } from 'node:child_process';
import { ROOT, backends, runCli, scratchDataDir, startServer, storedPaths, type TestServer } from './helpers/server.ts';
import { startTag } from '../src/util/process-tag.ts';
import { uploaded } from './helpers/http.ts';

interface Upload {
  short_code: string;
  upload_token: string;
  files: Array<{ id: number; download_url: string }>;
}

/** The non-empty lines a command wrote to stderr. */
const lines = (s: string): string[] => s.split('\n').filter((l) => l.trim() !== '');

/** A new bundle of `count` small random files. */
const bundleOf = (srv: TestServer, count = 2): Promise<Upload> =>
  uploaded(srv, Array.from({ length: count }, (_, i) => ({ name: `f${i}.bin`, data: randomBytes(100 + i) })));

async function status(srv: TestServer, url: string): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await request(`${srv.url}${url}`);
  return { status: res.statusCode, json: (await res.body.json()) as Record<string, unknown> };
}

async function storageKeys(srv: TestServer, code: string): Promise<string[]> {
  const rows = await srv.sql<{ storage_key: string }[]>`
    select f.storage_key from files f join bundles b on b.id = f.bundle_id where b.short_code = ${code}`;
  return rows.map((r) => r.storage_key);
}
async function bundleRows(srv: TestServer, code: string): Promise<number> {
  const [row] = await srv.sql<{ n: string }[]>`select count(*) as n from bundles where short_code = ${code}`;
  return Number(row!.n);
}
const onDisk = (srv: TestServer): Set<string> => new Set(storedPaths(srv.dataDir).files.map((p) => path.basename(p)));

/** Asserts the CONTRACT's failure form: exit 1 and exactly one line on stderr. */
function assertCliFailure(r: { code: number; stdout: string; stderr: string }, pattern?: RegExp): void {
  assert.equal(r.code, 1, `exit status; stderr: ${r.stderr}`);
  assert.equal(lines(r.stderr).length, 1, `one line on stderr, got: ${JSON.stringify(r.stderr)}`);
  if (pattern) assert.match(r.stderr, pattern);
}

for (const backend of backends()) {
  describe(`sluice CLI (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { RATE_LIMIT_ANON_PER_HOUR: '100000', SWEEP_INTERVAL_SECONDS: '86400' });
    });
    after(async () => {
      await srv?.close();
    });

    test('bundles expire CODE takes the bundle down while the server runs', async () => {
      const up = await bundleOf(srv);
      const r = await srv.cli(['bundles', 'expire', up.short_code]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(lines(r.stderr).length, 0, r.stderr);
      const s = await status(srv, `/api/v1/bundle/${up.short_code}/status`);
      assert.equal(s.status, 200);
      assert.equal(s.json.is_expired, true);
      assert.equal((await status(srv, `/api/v1/bundle/${up.short_code}`)).status, 404);
    });

    test('bundles delete CODE removes the rows and the stored files', async () => {
      const up = await bundleOf(srv, 3);
      const keys = await storageKeys(srv, up.short_code);
      assert.equal(keys.length, 3);
      const r = await srv.cli(['bundles', 'delete', up.short_code]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(lines(r.stderr).length, 0, r.stderr);
      assert.equal(await bundleRows(srv, up.short_code), 0);
      const [files] = await srv.sql<{ n: string }[]>`select count(*) as n from files where storage_key = any(${keys})`;
      assert.equal(Number(files!.n), 0);
      const disk = onDisk(srv);
      for (const k of keys) assert.ok(!disk.has(k), `${k} removed from disk`);
      assert.equal((await status(srv, `/api/v1/bundle/${up.short_code}/status`)).status, 404);
      assert.equal((await status(srv, up.files[0]!.download_url)).status, 404);
    });

    test('an unknown code → exit 1 with one line on stderr', async () => {
      for (const action of ['expire', 'delete']) {
        assertCliFailure(await srv.cli(['bundles', action, 'Zz9Q0']), /Zz9Q0/);
      }
    });

    test('a malformed short code → exit 1 with one line on stderr', async () => {
      for (const code of ['ab-cd', 'abcdef', 'abc', "x'; drop table bundles; --"]) {
        assertCliFailure(await srv.cli(['bundles', 'expire', code]));
      }
      assert.equal((await srv.sql`select 1 from bundles limit 0`).length, 0, 'bundles table still there');
    });

    test('bad usage of bundles → exit 1 with one line on stderr', async () => {
      assertCliFailure(await srv.cli(['bundles']));
      assertCliFailure(await srv.cli(['bundles', 'expire']));
      assertCliFailure(await srv.cli(['bundles', 'frobnicate', 'abcde']));
      assertCliFailure(await srv.cli(['bundles', 'expire', 'abcde', 'extra']));
    });

    test('an unknown command, or arguments a command does not take → exit 1 with one line on stderr; no command → the help', async () => {
      assertCliFailure(await srv.cli(['frobnicate']), /frobnicate/);
      const bare = await srv.cli([]);
      assert.equal(bare.code, 0, bare.stderr);
      assert.match(bare.stdout, /^usage: sluice <command>/);
      assert.equal(bare.stderr, '');
      for (const args of [['sweep', '--dry-run'], ['sweep', 'extra'], ['migrate', 'extra'], ['serve', '--bogus'], ['help', 'me']]) {
        assertCliFailure(await srv.cli(args), new RegExp(args[1]!));
      }
      const help = await srv.cli(['help']);
      assert.equal(help.code, 0, help.stderr);
      assert.match(help.stdout, /^usage: sluice <command>/);
    });

    test('migrate is idempotent', async () => {
      for (let i = 0; i < 2; i++) {
        const r = await srv.cli(['migrate']);
        assert.equal(r.code, 0, r.stderr);
        assert.equal(lines(r.stderr).length, 0, r.stderr);
      }
      const [row] = await srv.sql<{ n: string }[]>`select count(*) as n from schema_migrations`;
      assert.equal(Number(row!.n), fs.readdirSync(path.join(import.meta.dirname, '../sql')).filter((f) => /^\d{4}_.*\.sql$/.test(f)).length);
    });

    test('sweep removes expired bundles, their files and dead writers\' parts, and prints counts', async (t) => {
      const expired = await bundleOf(srv, 2);
      const live = await bundleOf(srv, 1);
      const expiredKeys = await storageKeys(srv, expired.short_code);
      const liveKeys = await storageKeys(srv, live.short_code);
      assert.equal((await srv.cli(['bundles', 'expire', expired.short_code])).code, 0);
      // A part left by a writer that no longer exists (pid above any pid_max).
      const deadPart = path.join(srv.dataDir, 'tmp', `2147483646-${randomBytes(12).toString('hex')}.part`);
      fs.writeFileSync(deadPart, randomBytes(10));
      // A crashed writer whose pid runs again as another process (a container's pid 1 at every start):
      // this test runner's pid with another start tag. Beside it, a part that really is the runner's.
      const tag = startTag(process.pid);
      const reusedPid = path.join(srv.dataDir, 'tmp', `${process.pid}-${tag === '00000000' ? '11111111' : '00000000'}-${randomBytes(12).toString('hex')}.part`);
      const livePart = path.join(srv.dataDir, 'tmp', `${process.pid}-${tag}-${randomBytes(12).toString('hex')}.part`);
      fs.writeFileSync(reusedPid, randomBytes(10));
      fs.writeFileSync(livePart, randomBytes(10));

      const r = await srv.cli(['sweep']);
      assert.equal(r.code, 0, r.stderr);
      const counts = [...r.stdout.matchAll(/(\d+)/g)].map((m) => Number(m[1]));
      assert.ok(counts.length >= 2, `counts printed: ${r.stdout}`);
      assert.match(r.stdout, /expired bundles: [1-9]/);
      assert.match(r.stdout, /stale parts: [1-9]/);

      assert.equal(await bundleRows(srv, expired.short_code), 0);
      assert.equal((await status(srv, `/api/v1/bundle/${expired.short_code}/status`)).status, 404);
      const disk = onDisk(srv);
      for (const k of expiredKeys) assert.ok(!disk.has(k), `${k} of the expired bundle removed`);
      assert.ok(!fs.existsSync(deadPart), 'dead writer part removed');
      if (tag === null) t.diagnostic('no /proc start times here: the reused-pid case is not checked');
      else {
        assert.ok(!fs.existsSync(reusedPid), 'a part of an earlier process with the same pid removed');
        assert.ok(fs.existsSync(livePart), 'a live writer\'s part kept');
      }
      fs.rmSync(livePart, { force: true });

      assert.equal(await bundleRows(srv, live.short_code), 1);
      for (const k of liveKeys) assert.ok(disk.has(k), `${k} of the live bundle kept`);
      assert.equal((await status(srv, `/api/v1/bundle/${live.short_code}`)).status, 200);
    });

    test('the CLI works while the server is stopped, and the server sees its changes', async () => {
      const gone = await bundleOf(srv, 1);
      const kept = await bundleOf(srv, 1);
      const keys = await storageKeys(srv, gone.short_code);
      const exited = new Promise((r) => srv.proc.once('exit', r));
      srv.proc.kill('SIGTERM');
      await exited;
      const r = await srv.cli(['bundles', 'delete', gone.short_code]);
      assert.equal(r.code, 0, r.stderr);
      assert.ok(!onDisk(srv).has(keys[0]!), 'stored file removed by the CLI');
      assert.equal((await srv.cli(['migrate'])).code, 0);
      await srv.restart();
      assert.equal((await status(srv, `/api/v1/bundle/${gone.short_code}/status`)).status, 404);
      assert.equal((await status(srv, `/api/v1/bundle/${kept.short_code}`)).status, 200);
    });
  });
}

describe('configuration errors', () => {
  const scratch = scratchDataDir('sl-cfg-');
  const env = scratch.env;

  test('bad values stop `sluice serve` with one stderr line per problem, naming each variable', async () => {
    const r = await runCli(['serve'], env({ PORT: 'abc', LOG_LEVEL: 'loud', WORKERS: '0' }));
    assert.equal(r.code, 1, r.stderr);
    const errs = lines(r.stderr);
    assert.equal(errs.length, 3, JSON.stringify(errs));
    for (const name of ['PORT', 'LOG_LEVEL', 'WORKERS']) {
      assert.equal(errs.filter((l) => l.includes(name)).length, 1, `${name} in ${JSON.stringify(errs)}`);
    }
  });

  test('a DATA_DIR that is a file, or a database that cannot be reached, stops serve with one line naming it', async () => {
    const file = path.join(scratch.dir, 'not-a-dir');
    fs.writeFileSync(file, 'x');
    const asFile = await runCli(['serve'], env({ DATA_DIR: file, PORT: '0' }));
    assert.equal(asFile.code, 1, asFile.stderr);
    assert.match(asFile.stderr, /^sluice: DATA_DIR \S+not-a-dir: not a directory\n$/);
    const noDb = await runCli(['serve'], env({ DATABASE_URL: 'postgres://postgres@127.0.0.1:9/none', PORT: '0' }));
    assert.equal(noDb.code, 1, noDb.stderr);
    assert.equal(lines(noDb.stderr).filter((l) => /^sluice: DATABASE_URL: /.test(l)).length, 1, noDb.stderr);
  });

  test('other commands refuse a bad configuration the same way', async () => {
    const r = await runCli(['migrate'], env({ PORT: '70000', LOG_LEVEL: 'loud' }));
    assert.equal(r.code, 1, r.stderr);
    const errs = lines(r.stderr);
    assert.equal(errs.length, 2, JSON.stringify(errs));
    assert.ok(errs.some((l) => l.includes('PORT')) && errs.some((l) => l.includes('LOG_LEVEL')), JSON.stringify(errs));
  });
});

describe('a stop signal while the server starts', () => {
  test('is acted on once it is up: a clean shutdown, exit 0, no READY-then-serve', { timeout: 60_000 }, async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-sig-'));
    try {
      const proc = spawn(process.execPath, [path.join(ROOT, 'bin/sluice.js'), 'serve'], {
        cwd: ROOT,
        env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root', DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'info' },
      });
      let log = '';
      proc.stderr.on('data', (c) => (log += c));
      proc.stdout.on('data', (c) => (log += c));
      const exit = new Promise<{ code: number | null; signal: string | null }>((r) => proc.on('exit', (code, signal) => r({ code, signal })));
      // The first line comes from inside start-up (the uWS binding), before migrations and listening.
      for (let i = 0; i < 400 && !log.includes('binding loaded'); i++) await new Promise((r) => setTimeout(r, 25));
      assert.ok(log.includes('binding loaded'), log);
      proc.kill('SIGTERM');
      assert.deepEqual(await exit, { code: 0, signal: null }, log);
      assert.match(log, /stop requested while starting/);
      assert.match(log, /shutting down/);
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('a port another server listens on', () => {
  test('is refused at start (one process or several): exit 1 naming the port; the first server keeps it', { timeout: 60_000 }, async () => {
    const first = await startServer('embedded');
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-port-'));
    try {
      const base = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root', DATA_DIR: dataDir, PORT: String(first.port), HOST: '127.0.0.1' };
      const shared = {
        DATABASE_URL: process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
        REDIS_URL: process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379',
        WORKERS: '2',
      };
      for (const env of [base, { ...base, ...shared }]) {
        const proc = spawn(process.execPath, [path.join(ROOT, 'bin/sluice.js'), 'serve'], { cwd: ROOT, env });
        let stderr = '';
        proc.stderr.on('data', (c) => (stderr += c));
        proc.stdout.resume();
        const killer = setTimeout(() => proc.kill('SIGKILL'), 30_000); // it must not start serving
        const code = await new Promise<number | null>((r) => proc.on('exit', (c) => r(c)));
        clearTimeout(killer);
        assert.equal(code, 1, stderr);
        assert.match(stderr, new RegExp(`^sluice: port ${first.port} on 127\\.0\\.0\\.1 is already in use`, 'm'));
      }
      const still = await request(`${first.url}/healthz`);
      assert.equal(still.statusCode, 200);
      await still.body.text();
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
      await first.close();
    }
  });
});
