import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import postgres from 'postgres';
import type { Logger } from 'pino';
import { binaries, CLUSTER, ensureCluster, reapStale, SOCKET, startPostmaster, type Postmaster } from './embedded-postgres.ts';
import { refuseLegacy } from './pglite-import.ts';
import { isAlive, ownTag, writerAlive } from '../util/process-tag.ts';
import { createUploadLocks, type UploadLocks } from './upload-locks.ts';
import type { Sql } from './sql.ts';

export interface Db {
  readonly sql: Sql;
  readonly kind: 'postgres' | 'embedded';
  /**
   * Subscribes to the announcements of bundle changes (sql/0006_bundle_changes.sql): `onChange`
   * gets the bundle id, or null when announcements may have been missed (the listening connection
   * was re-established). Resolves false where no announcement can reach this process (a process
   * that connects to another one's embedded database): callers must then not cache bundles.
   */
  watchBundles(onChange: (bundleId: number | null) => void): Promise<boolean>;
  /**
   * Runs one-off work (migrations, the start-up sweep) on connections of its own, closed when `fn`
   * settles: the catalog caches such work fills would otherwise stay in a pooled backend process.
   */
  briefly<T>(fn: (sql: Sql) => Promise<T>): Promise<T>;
  /** Locks on tus uploads, held by a database session of their own (upload-locks.ts); opened on first use. */
  readonly uploadLocks: UploadLocks;
  close(): Promise<void>;
}

export const BUNDLE_CHANNEL = 'sluice_bundle';

const bundleId = (payload: string): number | null => (/^\d+$/.test(payload) ? Number(payload) : null);

// int8 columns (sizes, ids, counts) as JS numbers: every value we store stays below 2^53.
const types = {
  bigint: { to: 20, from: [20], serialize: (x: number) => String(x), parse: (x: string) => Number(x) },
};

/**
 * Seconds a pool connection waits before its next connection attempt after `retries` failed ones.
 * postgres.js's default grows as 3^retries / 100 up to 20 s and counts every refused attempt of an
 * outage: after a few failed requests, a request queued on that connection waited 5–20 s, through the
 * database's return, instead of failing fast or going through. Capped at 0.5–1 s (jittered, so several
 * workers do not retry in step): a request never waits longer than that for a retry, and a database
 * that is down or refusing sees at most two attempts per pool connection per second. `retries` is 0
 * after an ordinary close (idle timeout): the next query reconnects at once.
 */
export const reconnectDelay = (retries: number): number =>
  retries === 0 ? 0 : (0.5 + Math.random() / 2) * Math.min(0.05 * 2 ** retries, 1);

const baseOptions = {
  types,
  onnotice: () => {},
  connect_timeout: 5,
  idle_timeout: 60,
  backoff: reconnectDelay,
  transform: { undefined: null },
} as const;

/**
 * The session that holds upload locks: never closed for idleness or age (that would drop its locks),
 * and asking the server to probe its socket, so that the locks of a machine that vanished go within
 * about 11 s (5 s idle, then 3 probes 2 s apart) rather than after the kernel's two hours.
 */
const LOCK_SESSION = {
  idle_timeout: 0,
  max_lifetime: 0,
  connection: { tcp_keepalives_idle: 5, tcp_keepalives_interval: 2, tcp_keepalives_count: 3 },
} as const;
type Connect = (max: number, extra?: typeof LOCK_SESSION) => Sql;

/**
 * Connects the raw-SQL layer: real PostgreSQL when DATABASE_URL is set, else the embedded
 * PostgreSQL in DATA_DIR/postgres (embedded-postgres.ts), on a Unix socket in that directory so
 * the CLI and other workers share it. The first process to need it hosts it (starts it and stops
 * it when it closes or dies); later ones (a CLI while the server runs) connect to it.
 */
export async function connectDb(opts: {
  databaseUrl: string | undefined;
  dataDir: string;
  log: Logger;
  max: number;
  /** For `sluice import-pglite`: start although DATA_DIR/pg holds an earlier release's database. */
  allowLegacy?: boolean;
  /**
   * A server (not a CLI command, nor a further worker of the same server): refused where another
   * server already runs the embedded database of this DATA_DIR.
   */
  server?: boolean;
}): Promise<Db> {
  const url = opts.databaseUrl;
  if (url) return wrap((max, extra) => postgres(url, { ...baseOptions, ...extra, max }) as unknown as Sql, opts.max, 'postgres', async () => {});
  return connectEmbedded(opts);
}

function wrap(connect: Connect, max: number, kind: Db['kind'], after: () => Promise<void>): Promise<Db> {
  const sql = connect(max);
  let lockSession: Sql | undefined;
  let locks: UploadLocks | undefined;
  return sql`select 1`.catch(async (err: unknown) => {
    await sql.end({ timeout: 1 }).catch(() => {});
    throw err;
  }).then(() => ({
    sql,
    kind,
    briefly: async (fn) => {
      // Two: sweepExclusive holds its lock on one connection and sweeps on another.
      const own = connect(2);
      try {
        return await fn(own);
      } finally {
        await own.end({ timeout: 5 }).catch(() => {});
      }
    },
    // postgres.js keeps one extra connection for LISTEN and re-listens after a reconnect; each
    // (re)listen reports null, since announcements made while it was down are lost.
    watchBundles: async (onChange) => {
      await sql.listen(BUNDLE_CHANNEL, (payload) => onChange(bundleId(payload)), () => onChange(null));
      return true;
    },
    get uploadLocks() {
      return (locks ??= createUploadLocks((lockSession = connect(1, LOCK_SESSION))));
    },
    close: async () => {
      await lockSession?.end({ timeout: 5 }).catch(() => {});
      await sql.end({ timeout: 5 }).catch(() => {});
      await after();
    },
  }));
}

async function connectEmbedded(opts: { dataDir: string; log: Logger; max: number; allowLegacy?: boolean; server?: boolean }): Promise<Db> {
  await fsp.mkdir(opts.dataDir, { recursive: true, mode: 0o700 });
  const clusterDir = path.join(opts.dataDir, CLUSTER);
  const socketPath = path.join(clusterDir, SOCKET);
  if (Buffer.byteLength(socketPath) > 107) {
    throw new Error(`DATA_DIR ${opts.dataDir} is too long a path for the embedded database's socket (${socketPath}): use a shorter DATA_DIR`);
  }
  const lockPath = path.join(opts.dataDir, 'db.lock');
  // Each open connection is a PostgreSQL process of ~5-15 MiB counted against the server's memory:
  // connections idle for a few seconds are closed (reopening one costs a fork, about a millisecond).
  const connect: Connect = (max, extra) =>
    postgres({ ...baseOptions, idle_timeout: EMBEDDED_IDLE_S, ...extra, path: socketPath, max, user: 'postgres', database: 'postgres' }) as unknown as Sql;

  for (let attempt = 0; attempt < 600; attempt++) {
    if (takeLock(lockPath, opts.server ? 'server' : 'cli')) {
      try {
        return await hostEmbedded(opts, clusterDir, connect, () => fs.rmSync(lockPath, { force: true }));
      } catch (err) {
        fs.rmSync(lockPath, { force: true });
        throw err;
      }
    }
    const holder = readLock(lockPath);
    if (opts.server && holder?.role === 'server') {
      throw new Error(`another Sluice server (pid ${holder.pid}) runs on this DATA_DIR: stop it, or give this one its own DATA_DIR`);
    }
    if (fs.existsSync(socketPath)) {
      try {
        return await wrap(connect, opts.max, 'embedded', async () => {});
      } catch {
        // not serving yet: try again
      }
    }
    await new Promise((r) => setTimeout(r, 100)); // another process is starting it
  }
  throw new Error(`the embedded database in ${opts.dataDir} is locked by another process (${lockPath}) that does not serve it within 60 s`);
}

/**
 * Exclusive host lock: a file holding our pid, start tag (process-tag.ts) and role; a dead holder's
 * lock is taken over, also when its pid runs again as another process.
 */
function takeLock(lockPath: string, role: 'server' | 'cli'): boolean {
  const mine = `${process.pid} ${ownTag} ${role}`;
  try {
    fs.writeFileSync(lockPath, mine, { flag: 'wx', mode: 0o600 });
    return true;
  } catch {
    const holder = readLock(lockPath);
    if (holder) {
      // (our own pid: a lock this process left, or its predecessor's under the same pid; ours to take)
      const alive = holder.pid !== process.pid && (holder.tag === undefined ? isAlive(holder.pid) : writerAlive(holder.pid, holder.tag));
      if (alive) return false;
    }
    fs.rmSync(lockPath, { force: true });
    try {
      fs.writeFileSync(lockPath, mine, { flag: 'wx', mode: 0o600 });
      return true;
    } catch {
      return false;
    }
  }
}

function readLock(lockPath: string): { pid: number; tag: string | undefined; role: string | undefined } | null {
  let text: string;
  try {
    text = fs.readFileSync(lockPath, 'utf8');
  } catch {
    return null;
  }
  const [pidText, tag, role] = text.trim().split(' ');
  const pid = Number(pidText);
  return Number.isInteger(pid) && pid > 0 ? { pid, tag, role } : null;
}

const RESTART_DELAY_MS = 1000;
const EMBEDDED_IDLE_S = 5;

async function hostEmbedded(
  opts: { dataDir: string; log: Logger; max: number; allowLegacy?: boolean },
  clusterDir: string,
  connect: (max: number) => Sql,
  unlock: () => void,
): Promise<Db> {
  const bins = binaries();
  if (!opts.allowLegacy) refuseLegacy(opts.dataDir, clusterDir);
  await ensureCluster(opts.dataDir, bins, opts.log);
  await reapStale(clusterDir, opts.log);
  let closing = false;
  let pm: Postmaster;
  // PostgreSQL stopping on its own (the OOM killer, an operator's kill) is restarted: the pool
  // reconnects, and PostgreSQL's crash recovery replays what was committed.
  const start = async (): Promise<void> => {
    pm = startPostmaster(clusterDir, bins, opts.log);
    pm.onExit = (code) => {
      if (closing) return;
      opts.log.error({ code }, 'the embedded PostgreSQL stopped unexpectedly: restarting it');
      setTimeout(() => void start().catch((err: Error) => opts.log.error({ err: err.message }, 'the embedded PostgreSQL does not restart')), RESTART_DELAY_MS);
    };
    await pm.ready;
  };
  try {
    await start();
  } catch (err) {
    throw new Error(`the embedded PostgreSQL in ${clusterDir} does not start: ${(err as Error).message}`, { cause: err });
  }
  opts.log.info({ socket: path.join(clusterDir, SOCKET) }, 'embedded PostgreSQL serving');
  const stop = async (): Promise<void> => {
    closing = true;
    await pm.stop();
    unlock();
  };
  return wrap(connect, opts.max, 'embedded', stop).catch(async (err: unknown) => {
    await stop();
    throw err;
  });
}
