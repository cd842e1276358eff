import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import postgres from 'postgres';
import type { Logger } from 'pino';
import { servePglite } from './pglite-server.ts';
import { isAlive, ownTag, writerAlive } from '../util/process-tag.ts';
import { restrictTree } from '../util/data-dir.ts';

export type Sql = postgres.Sql<Record<string, never>>;

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
 * Connects the raw-SQL layer: real PostgreSQL when DATABASE_URL is set, else the embedded PGlite
 * in DATA_DIR/pg, served on a Unix socket in DATA_DIR so the CLI and other workers share it. The
 * first process to need it hosts it; later ones (a CLI while the server runs) connect to it.
 */
export async function connectDb(opts: {
  databaseUrl: string | undefined;
  dataDir: string;
  log: Logger;
  max: number;
}): Promise<Db> {
  if (opts.databaseUrl) {
    const sql = postgres(opts.databaseUrl, { ...baseOptions, max: opts.max }) as unknown as Sql;
    await sql`select 1`;
    return {
      sql,
      kind: 'postgres',
      // postgres.js keeps one extra connection for LISTEN and re-listens after a reconnect; each
      // (re)listen reports null, since announcements made while it was down are lost.
      watchBundles: async (onChange) => {
        await sql.listen(BUNDLE_CHANNEL, (payload) => onChange(bundleId(payload)), () => onChange(null));
        return true;
      },
      close: () => sql.end({ timeout: 5 }),
    };
  }
  return connectEmbedded(opts);
}

/**
 * The embedded database is one PGlite session shared by every connection (see pglite-server.ts),
 * so it runs one query at a time whatever the pool size: each process uses ONE connection, on
 * which postgres.js pipelines its queries in order; other processes (the CLI) add one each.
 */
async function connectEmbedded(opts: { dataDir: string; log: Logger; max: number }): Promise<Db> {
  await fsp.mkdir(opts.dataDir, { recursive: true, mode: 0o700 });
  const socketPath = path.join(opts.dataDir, '.s.PGSQL.5432');
  const lockPath = path.join(opts.dataDir, 'pg.lock');
  const connect = (): Sql =>
    postgres({ ...baseOptions, path: socketPath, max: 1, user: 'postgres', database: 'postgres' }) as unknown as Sql;

  for (let attempt = 0; attempt < 50; attempt++) {
    if (fs.existsSync(socketPath)) {
      const sql = connect();
      try {
        await sql`select 1`;
        // The host process hears the single session's announcements; a guest does not.
        return { sql, kind: 'embedded', watchBundles: async () => false, close: () => sql.end({ timeout: 5 }) };
      } catch {
        await sql.end({ timeout: 1 }).catch(() => {});
      }
    }
    if (takeLock(lockPath)) return hostEmbedded(opts, socketPath, lockPath, connect);
    await new Promise((r) => setTimeout(r, 100)); // another process is starting it
  }
  throw new Error(`embedded database in ${opts.dataDir} is locked by another process that does not serve it`);
}

/**
 * Exclusive host lock: a file holding our pid and start tag (process-tag.ts); a dead holder's lock
 * is taken over, also when its pid runs again as another process.
 */
function takeLock(lockPath: string): boolean {
  const mine = `${process.pid} ${ownTag}`;
  try {
    fs.writeFileSync(lockPath, mine, { flag: 'wx', mode: 0o600 });
    return true;
  } catch {
    const [pidText, tag] = fs.readFileSync(lockPath, 'utf8').trim().split(' ');
    const holder = Number(pidText);
    if (Number.isInteger(holder) && holder > 0) {
      // (our own pid: a lock this process left, or its predecessor's under the same pid; ours to take)
      const alive = holder !== process.pid && (tag === undefined ? isAlive(holder) : writerAlive(holder, tag));
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

const EMBEDDED_SHARED_BUFFERS = '16MB';

async function hostEmbedded(
  opts: { dataDir: string; log: Logger },
  socketPath: string,
  lockPath: string,
  connect: () => Sql,
): Promise<Db> {
  const { PGlite } = await import('@electric-sql/pglite');
  // PGlite's PostgreSQL keeps its shared buffers inside the server process's memory, and the
  // default 128 MB of them ends up resident. The embedded database is small and its files sit in
  // the OS page cache anyway, so 16 MB serves as well and keeps the idle server much smaller.
  const pgDir = path.join(opts.dataDir, 'pg');
  // Owner-only before PGlite opens it (a tree an older version left open) and after (what it created).
  restrictTree(pgDir);
  const pg = await PGlite.create(pgDir, {
    startParams: [...PGlite.defaultStartParams, '-c', `shared_buffers=${EMBEDDED_SHARED_BUFFERS}`],
  });
  restrictTree(pgDir);
  // The session listens once, for good: announcements then appear in the output of whichever
  // connection commits a change, and the socket server hands them to the watchers.
  await pg.exec(`listen ${BUNDLE_CHANNEL}`);
  const watchers = new Set<(bundleId: number | null) => void>();
  fs.rmSync(socketPath, { force: true });
  const server = await servePglite(pg, socketPath, {
    onNotification: (channel, payload) => {
      if (channel !== BUNDLE_CHANNEL) return;
      for (const w of watchers) w(bundleId(payload));
    },
  });
  fs.chmodSync(socketPath, 0o600);
  opts.log.info({ socket: socketPath }, 'embedded PGlite database serving');
  const sql = connect();
  return {
    sql,
    kind: 'embedded',
    watchBundles: async (onChange) => {
      watchers.add(onChange);
      return true;
    },
    close: async () => {
      await sql.end({ timeout: 5 }).catch(() => {});
      await server.close().catch(() => {});
      await pg.close().catch(() => {});
      try {
        restrictTree(path.join(opts.dataDir, 'pg'));
      } catch (err) {
        opts.log.warn({ err }, 'embedded database files not made owner-only');
      }
      fs.rmSync(socketPath, { force: true });
      fs.rmSync(lockPath, { force: true });
    },
  };
}
