import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { connectDb } from '../src/db/client.ts';
import { prerequisite } from './helpers/prereq.ts';

// The embedded PostgreSQL is owned by the process that hosts it: started with it, stopped when it
// goes away however it goes, and every fault at start is a one-line refusal, never a hang.
const ROOT = path.resolve(import.meta.dirname, '..');
const log = pino({ level: 'silent' });
const dirs: string[] = [];
const dataDir = (): string => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-edb-'));
  dirs.push(d);
  return d;
};
after(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

/** A process that hosts the embedded database of `dir`, inserts a row, says `ready` and waits. */
function host(dir: string, row: string, server = false): Promise<{ child: ChildProcess; postmaster: number }> {
  const script = `
    import pino from 'pino';
    import { connectDb } from ${JSON.stringify(path.join(ROOT, 'src/db/client.ts'))};
    const db = await connectDb({ databaseUrl: undefined, dataDir: ${JSON.stringify(dir)}, log: pino({ level: 'silent' }), max: 2, server: ${server} });
    await db.sql\`create table if not exists t (v text)\`;
    await db.sql\`insert into t values (${'${'}${JSON.stringify(row)}})\`;
    process.stdout.write('ready\\n');
    setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      if (d.toString().includes('ready')) resolve({ child, postmaster: postmasterPid(dir) });
    });
    child.on('exit', (code) => reject(new Error(`host exited ${code}`)));
  });
}

const postmasterPid = (dir: string): number => Number(fs.readFileSync(path.join(dir, 'postgres', 'postmaster.pid'), 'utf8').split('\n')[0]);
/** Running (an exited orphan may stay a zombie until init reaps it). */
const alive = (pid: number): boolean => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
};
async function gone(pid: number, ms = 10_000): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; ) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}
/** The start's refusal: one line, naming its cause; it must come, not hang. */
async function refusal(dir: string): Promise<string> {
  const err = await connectDb({ databaseUrl: undefined, dataDir: dir, log, max: 1 }).then(
    async (db) => {
      await db.close();
      return null;
    },
    (e: Error) => e.message,
  );
  assert.ok(err !== null, 'the start was not refused');
  assert.doesNotMatch(err, /\n/, 'one line');
  return err;
}

describe('embedded PostgreSQL', () => {
  it('a SIGKILLed host leaves no database process; the next start has every committed row', async () => {
    const dir = dataDir();
    const { child, postmaster } = await host(dir, 'before the crash');
    child.kill('SIGKILL');
    assert.ok(await gone(postmaster), `PostgreSQL ${postmaster} outlived its killed host`);
    const db = await connectDb({ databaseUrl: undefined, dataDir: dir, log, max: 1 });
    try {
      assert.deepEqual((await db.sql<{ v: string }[]>`select v from t`).map((r) => r.v), ['before the crash']);
    } finally {
      await db.close();
    }
    assert.ok(await gone(postmasterPidOr(dir, postmaster)), 'close() stops PostgreSQL');
  });

  it('a PostgreSQL left running without its keeper (both killed) is stopped and the database starts again', async () => {
    const dir = dataDir();
    const { child, postmaster } = await host(dir, 'x');
    // Kill the keeper shells first, so that nothing stops PostgreSQL when the host dies.
    for (const pid of descendants(child.pid!).filter((p) => p !== postmaster && !isDescendant(p, postmaster))) {
      if (readCmd(pid).includes('sluice-db')) process.kill(pid, 'SIGKILL');
    }
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await gone;
    assert.ok(alive(postmaster), 'the orphan runs (the test set-up)');
    const db = await connectDb({ databaseUrl: undefined, dataDir: dir, log, max: 1 });
    try {
      assert.ok(!alive(postmaster), 'the orphan was stopped');
      assert.equal((await db.sql`select v from t`).length, 1);
    } finally {
      await db.close();
    }
  });

  it('a stale lock and socket from a killed server do not stop the next start', async () => {
    const dir = dataDir();
    const db = await connectDb({ databaseUrl: undefined, dataDir: dir, log, max: 1 });
    await db.close();
    fs.writeFileSync(path.join(dir, 'db.lock'), '999999 deadbeef');
    fs.writeFileSync(path.join(dir, 'postgres', '.s.PGSQL.5432'), '');
    fs.writeFileSync(path.join(dir, 'postgres', '.s.PGSQL.5432.lock'), '999999\n');
    const again = await connectDb({ databaseUrl: undefined, dataDir: dir, log, max: 1 });
    assert.equal((await again.sql`select 1 as one`)[0]!.one, 1);
    await again.close();
  });

  it('a second process on the same DATA_DIR uses the running database; a second PostgreSQL on its files is refused', async () => {
    const dir = dataDir();
    const { child, postmaster } = await host(dir, 'from the first');
    try {
      const guest = await connectDb({ databaseUrl: undefined, dataDir: dir, log, max: 1 });
      assert.equal((await guest.sql`select v from t`)[0]!.v, 'from the first');
      assert.equal(postmasterPid(dir), postmaster, 'one PostgreSQL');
      await guest.close();
      assert.ok(alive(postmaster), "a guest's close leaves the host's database running");
      fs.rmSync(path.join(dir, 'db.lock')); // an operator's mistake: the host lock is gone
      assert.match(await refusal(dir), /already run by another process/);
      assert.ok(alive(postmaster));
    } finally {
      child.kill('SIGTERM');
      await gone(postmaster);
    }
  });

  it('a second server on the same DATA_DIR is refused in one line; a CLI command beside the server is served', async () => {
    const dir = dataDir();
    const { child, postmaster } = await host(dir, 'x', true);
    try {
      const err = await connectDb({ databaseUrl: undefined, dataDir: dir, log, max: 1, server: true }).then(() => null, (e: Error) => e.message);
      assert.match(err ?? '', new RegExp(`^another Sluice server \\(pid ${child.pid}\\) runs on this DATA_DIR`));
      assert.doesNotMatch(err!, /\n/);
      const cli = await connectDb({ databaseUrl: undefined, dataDir: dir, log, max: 1 });
      assert.equal((await cli.sql`select count(*)::int as n from t`)[0]!.n, 1);
      await cli.close();
    } finally {
      child.kill('SIGTERM');
      await gone(postmaster);
    }
  });

  it('a data directory of another PostgreSQL major version is refused, not replaced', async () => {
    const dir = dataDir();
    const db = await connectDb({ databaseUrl: undefined, dataDir: dir, log, max: 1 });
    await db.close();
    fs.writeFileSync(path.join(dir, 'postgres', 'PG_VERSION'), '17\n');
    assert.match(await refusal(dir), /holds a PostgreSQL 17 database and this build embeds PostgreSQL 18/);
    assert.equal(fs.readFileSync(path.join(dir, 'postgres', 'PG_VERSION'), 'utf8'), '17\n');
  });

  it("an earlier release's PGlite database is refused with the command that imports it", async () => {
    const dir = dataDir();
    fs.mkdirSync(path.join(dir, 'pg'));
    fs.writeFileSync(path.join(dir, 'pg', 'PG_VERSION'), '17\n');
    assert.match(await refusal(dir), /earlier Sluice \(PGlite\).*sluice import-pglite/);
    assert.ok(!fs.existsSync(path.join(dir, 'postgres')));
  });

  it("`sluice import-pglite` copies an earlier release's PGlite database, all or nothing, and leaves it in place", async () => {
    const dir = dataDir();
    const { PGlite } = await import('@electric-sql/pglite');
    const pg = await PGlite.create(path.join(dir, 'pg'));
    // The database as an earlier release left it: its migrations applied (all but the newest), a bundle in it.
    const files = fs.readdirSync(path.join(ROOT, 'sql')).filter((f) => /^\d{4}_/.test(f)).sort().slice(0, -1);
    for (const f of files) await pg.exec(fs.readFileSync(path.join(ROOT, 'sql', f), 'utf8'));
    await pg.exec(`insert into bundles (short_code, upload_token_hash, max_size_bytes) values ('abcde', '\\x01', 100), ('fghij', '\\x02', 100)`);
    const instance = (await pg.query<{ id: string }>('select id from instance')).rows[0]!.id;
    await pg.close();
    const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dir, LOG_LEVEL: 'warn' };
    delete env.DATABASE_URL;
    const cli = (args: string[]) => spawnSync(process.execPath, [path.join(ROOT, 'bin/sluice.js'), ...args], { cwd: ROOT, env, encoding: 'utf8' });
    assert.match(cli(['sweep']).stderr, /earlier Sluice \(PGlite\).*sluice import-pglite/);
    const r = cli(['import-pglite']);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /imported \d+ rows \(.*bundles 2.*\)/);
    const db = await connectDb({ databaseUrl: undefined, dataDir: dir, log, max: 1 });
    try {
      assert.deepEqual((await db.sql<{ short_code: string }[]>`select short_code from bundles order by id`).map((b) => b.short_code), ['abcde', 'fghij']);
      assert.equal((await db.sql<{ id: string }[]>`select id from instance`)[0]!.id, instance);
      // New ids continue after the imported ones.
      const [next] = await db.sql<{ id: number }[]>`insert into bundles (short_code, upload_token_hash, max_size_bytes) values ('klmno', '\\x03', 1) returning id`;
      assert.equal(next!.id, 3);
    } finally {
      await db.close();
    }
    assert.ok(fs.existsSync(path.join(dir, 'pg', 'PG_VERSION')), 'the PGlite directory is kept');
    assert.match(cli(['import-pglite']).stderr, /imported already/);
  });

  it('a full disk is refused with its cause and leaves no half-made database', {
    skip: prerequisite({ what: 'embedded database on a full disk', missing: canMountTmpfs(), install: 'run the tests as root, with mount allowed' }),
  }, async () => {
    const dir = dataDir();
    assert.equal(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=16m,mode=0700', 'tmpfs', dir]).status, 0, 'mount tmpfs');
    try {
      fs.writeFileSync(path.join(dir, 'filler'), Buffer.alloc(15 * 1024 * 1024));
      assert.match(await refusal(dir), /No space left on device/);
      assert.ok(!fs.existsSync(path.join(dir, 'postgres')) && !fs.existsSync(path.join(dir, 'postgres.init')));
    } finally {
      spawnSync('umount', [dir]);
    }
  });
});

/** False when a small tmpfs can be mounted here (root, and mount permitted), else why not. */
function canMountTmpfs(): string | false {
  if (process.getuid?.() !== 0) return 'needs root to mount a small tmpfs';
  const probe = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-mnt-'));
  try {
    const r = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', probe], { encoding: 'utf8' });
    if (r.status !== 0) return `mount -t tmpfs is not permitted (${(r.stderr || String(r.error)).trim()})`;
    spawnSync('umount', [probe]);
    return false;
  } finally {
    fs.rmSync(probe, { recursive: true, force: true });
  }
}

function postmasterPidOr(dir: string, fallback: number): number {
  try {
    return postmasterPid(dir);
  } catch {
    return fallback;
  }
}
function readCmd(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}
function children(pid: number): number[] {
  try {
    return fs.readdirSync(`/proc/${pid}/task`).flatMap((t) => fs.readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').split(' ').filter(Boolean).map(Number));
  } catch {
    return [];
  }
}
function descendants(pid: number): number[] {
  const out = children(pid);
  for (let i = 0; i < out.length; i++) out.push(...children(out[i]!));
  return out;
}
const isDescendant = (pid: number, of: number): boolean => descendants(of).includes(pid);
