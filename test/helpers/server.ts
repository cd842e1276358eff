import { seedCluster } from './pg-template.ts';
import { after, before } from 'node:test';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { createPgDatabase, dropPgDatabase } from './database.ts';
import { runTag } from './reaper.ts';
import { DeleteObjectCommand, ListMultipartUploadsCommand, ListObjectsV2Command, ListPartsCommand, type S3Client } from '@aws-sdk/client-s3';
import { sharedBucket } from './s3-backend.ts';

export const ROOT = path.resolve(import.meta.dirname, '../..');

/** `s3`: PostgreSQL and Redis as `postgres`, with the files in a Ceph bucket (STORAGE_URL). */
export type Backend = 'embedded' | 'postgres' | 's3';

/**
 * The backends every HTTP test runs against: the embedded defaults always, and real PostgreSQL
 * plus Redis, unless SLUICE_TEST_BACKENDS narrows the list. test/run.ts runs the storage-relevant
 * files once more with SLUICE_TEST_BACKENDS=s3.
 */
export function backends(): Backend[] {
  const only = process.env.SLUICE_TEST_BACKENDS;
  if (only) return only.split(',').map((s) => s.trim()) as Backend[];
  return ['embedded', 'postgres'];
}

/**
 * For files that test streaming and memory, which no database choice changes: the pass's first
 * backend only (the embedded default in the main pass, S3 in the S3 pass). Gigabytes sent once per
 * storage, not once per database.
 */
export function storageBackends(): Backend[] {
  return backends().slice(0, 1);
}

export interface TestServer {
  readonly url: string;
  readonly port: number;
  readonly dataDir: string;
  readonly backend: Backend;
  readonly env: Record<string, string>;
  /** Raw SQL into the server's own database (the embedded one through its socket). */
  readonly sql: postgres.Sql;
  proc: ChildProcess;
  /** Runs the CLI with the server's environment. */
  cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }>;
  /** SIGKILL, no clean-up: a crash. */
  kill(): Promise<void>;
  /** Starts the server again on the same DATA_DIR and database. */
  restart(): Promise<void>;
  /** Graceful stop (SIGTERM; SIGKILL after 10 s); the data dir and database stay for restart(). */
  stop(): Promise<void>;
  /** Graceful stop and removal of the data dir and database. */
  close(): Promise<void>;
}

/**
 * Starts the real server (`sluice serve`) in its own process on port 0 with a fresh DATA_DIR and,
 * for the postgres backend, a fresh database, so parallel test files never collide.
 */
export async function startServer(backend: Backend, extraEnv: Record<string, string> = {}): Promise<TestServer> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-'));
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/root',
    HOST: '127.0.0.1',
    PORT: '0',
    DATA_DIR: dataDir,
    LOG_LEVEL: 'info',
    // Suites make many requests from one address; the rate-limit tests set their own budget.
    RATE_LIMIT_ANON_PER_HOUR: '1000000',
    // One process (the default) unless a test asks for more.
    WORKERS: '1',
    ...runTag(),
    ...extraEnv,
  };
  let dbName: string | undefined;
  // A DATABASE_URL given (nodes sharing one database) is used as it is, and left for its owner to drop.
  if ((backend === 'postgres' || backend === 's3') && !extraEnv.DATABASE_URL) {
    const pg = await createPgDatabase();
    dbName = pg.name;
    env.DATABASE_URL = pg.url;
    env.REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
  }
  if (!env.DATABASE_URL && env.DATA_DIR === dataDir) await seedCluster(dataDir);
  // Each server its own prefix in the one bucket of the run: no test sees another's objects.
  if (backend === 's3') Object.assign(env, (await sharedBucket()).env(path.basename(dataDir)), extraEnv);
  let proc!: ChildProcess;
  let port = 0;
  const launch = async (): Promise<void> => {
    const started = await spawnServer(env);
    proc = started.proc;
    port = started.port;
    server.proc = proc;
  };
  const sql = (): postgres.Sql =>
    env.DATABASE_URL
      ? postgres(env.DATABASE_URL, { max: 2, onnotice: () => {} })
      : postgres({ path: path.join(dataDir, 'postgres', '.s.PGSQL.5432'), user: 'postgres', database: 'postgres', max: 2, onnotice: () => {} });
  let sqlClient: postgres.Sql | null = null;
  const server: TestServer = {
    get url() {
      return `http://127.0.0.1:${port}`;
    },
    get port() {
      return port;
    },
    dataDir,
    backend,
    env,
    get sql() {
      sqlClient ??= sql();
      return sqlClient;
    },
    proc,
    cli: (args) => runCli(args, env),
    async kill() {
      await sqlClient?.end({ timeout: 1 }).catch(() => {});
      sqlClient = null;
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGKILL');
      await exited;
    },
    async restart() {
      await launch();
    },
    async stop() {
      await sqlClient?.end({ timeout: 1 }).catch(() => {});
      sqlClient = null;
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
        if (proc.exitCode === null) proc.kill('SIGKILL');
      }
    },
    async close() {
      await server.stop();
      fs.rmSync(dataDir, { recursive: true, force: true });
      if (dbName) await dropPgDatabase(dbName);
    },
  };
  await launch();
  return server;
}

function spawnServer(env: Record<string, string>): Promise<{ proc: ChildProcess; port: number }> {
  const serve = [process.execPath, path.join(ROOT, 'bin/sluice.js'), 'serve'];
  // SLUICE_TEST_HOSTS: the server resolves names through that hosts file, mounted over /etc/hosts in a
  // mount namespace of its own (root only), so a test can make a name resolve to any address.
  const [cmd, ...args] = env.SLUICE_TEST_HOSTS
    ? ['unshare', '-m', 'sh', '-c', 'mount --bind "$SLUICE_TEST_HOSTS" /etc/hosts && exec "$0" "$@"', ...serve]
    : serve;
  return new Promise((resolve, reject) => {
    const proc = spawn(cmd!, args, { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`server did not start in 60 s:\n${log}`));
    }, 60_000);
    proc.stderr!.setEncoding('utf8');
    proc.stderr!.on('data', (chunk: string) => {
      log += chunk;
      if (process.env.SLUICE_TEST_LOGS) process.stderr.write(chunk);
      // Several workers: ready once the supervisor says all of them listen.
      const m = (Number(env.WORKERS) > 1 ? /"port":(\d+)[^\n]*"msg":"all workers listening"/ : /"port":(\d+)[^\n]*"msg":"sluice listening"/).exec(log);
      if (m) {
        clearTimeout(timer);
        log = '';
        resolve({ proc, port: Number(m[1]) });
      }
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}:\n${log}`));
    });
  });
}

/**
 * A fresh DATA_DIR for the enclosing describe block (made before its tests, removed after) and a bare
 * environment naming it, for running the CLI as an operator would.
 */
export function scratchDataDir(prefix: string): { readonly dir: string; env(extra?: Record<string, string>): Record<string, string> } {
  let dataDir = '';
  before(() => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  });
  after(() => {
    fs.rmSync(dataDir, { recursive: true, force: true });
  });
  return {
    get dir() {
      return dataDir;
    },
    env: (extra = {}) => ({ PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root', DATA_DIR: dataDir, ...extra }),
  };
}

export function runCli(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [path.join(ROOT, 'bin/sluice.js'), ...args], { cwd: ROOT, env });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (c) => (stdout += c));
    proc.stderr.on('data', (c) => (stderr += c));
    proc.on('exit', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

/**
 * Files under DATA_DIR/tmp and DATA_DIR/files (recursively), relative paths, sorted. The entry types
 * come with the listing, so a file the server removes while it is listed is simply not there.
 */
export function storedPaths(dataDir: string): { parts: string[]; files: string[] } {
  const list = (dir: string): string[] =>
    fs.existsSync(dir)
      ? (fs.readdirSync(dir, { recursive: true, withFileTypes: true }) as fs.Dirent[])
          .filter((d) => d.isFile())
          .map((d) => path.relative(dir, path.join(d.parentPath, d.name)))
          .sort()
      : [];
  return { parts: list(path.join(dataDir, 'tmp')), files: list(path.join(dataDir, 'files')) };
}

/**
 * What the server's store holds, whichever it is: `files` as storedPaths names them (xx/yy/KEY),
 * `parts` the uploads not yet published (temp files on disk; multipart uploads and temp objects in a
 * bucket). Files the server removes while they are listed are simply not there.
 */
export async function storedBlobs(srv: TestServer): Promise<{ parts: string[]; files: string[] }> {
  if (srv.backend !== 's3') return storedPaths(srv.dataDir);
  const b = await sharedBucket();
  const prefix = `${/^s3:\/\/[^/]+\/?(.*)$/.exec(srv.env.STORAGE_URL!)![1]}/`;
  const client = b.client();
  try {
    const files: string[] = [];
    const parts: string[] = [];
    let token: string | undefined;
    do {
      const page = await client.send(new ListObjectsV2Command({ Bucket: b.bucket, Prefix: `${prefix}files/`, ContinuationToken: token }));
      for (const o of page.Contents ?? []) {
        const rest = o.Key!.slice(prefix.length + 'files/'.length);
        // Temp objects of a writer sit beside the published ones, named with a dot.
        if (/^[0-9a-f]{32}$/.test(rest)) files.push(`${rest.slice(0, 2)}/${rest.slice(2, 4)}/${rest}`);
        else parts.push(o.Key!.slice(prefix.length));
      }
      token = page.NextContinuationToken;
    } while (token);
    // A tus upload's multipart upload is its resumable object (on disk under DATA_DIR/tus), not a temp part.
    const resumable = new Set<string>();
    const markers = await client.send(new ListObjectsV2Command({ Bucket: b.bucket, Prefix: `${prefix}resumable/` }));
    for (const o of markers.Contents ?? []) {
      const m = /\/key-([0-9a-f]{32})$/.exec(o.Key!);
      if (m) resumable.add(`${prefix}files/${m[1]}`);
    }
    const ups = await client.send(new ListMultipartUploadsCommand({ Bucket: b.bucket, Prefix: `${prefix}files/` }));
    for (const u of ups.Uploads ?? []) if (!resumable.has(u.Key!)) parts.push(`${u.Key!.slice(prefix.length)}#${u.UploadId}`);
    return { parts: parts.sort(), files: files.sort() };
  } finally {
    client.destroy();
  }
}

/** The ids of the resumable (tus) objects the server's store holds. */
export async function resumableIds(srv: TestServer): Promise<string[]> {
  if (srv.backend !== 's3') {
    const dir = path.join(srv.dataDir, 'tus');
    return fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.part')).map((f) => f.slice(0, -5)).sort() : [];
  }
  const ids = new Set<string>();
  await withBucket(srv, async (client, bucket, prefix) => {
    let token: string | undefined;
    do {
      const page = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: `${prefix}resumable/`, ContinuationToken: token }));
      for (const o of page.Contents ?? []) ids.add(o.Key!.slice(`${prefix}resumable/`.length).split('/')[0]!);
      token = page.NextContinuationToken;
    } while (token);
  });
  return [...ids].sort();
}

/**
 * Bytes the store holds for a resumable object, offered or not (null: none). On S3 the parts and
 * tails written so far: an append holds up to a part in memory until it finishes.
 */
export async function resumableBytes(srv: TestServer, id: string): Promise<number | null> {
  if (srv.backend !== 's3') return fs.statSync(path.join(srv.dataDir, 'tus', `${id}.part`), { throwIfNoEntry: false })?.size ?? null;
  return withBucket(srv, async (client, bucket, prefix) => {
    const listed = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: `${prefix}resumable/${id}/` }));
    const names = (listed.Contents ?? []).map((o) => o.Key!.slice(`${prefix}resumable/${id}/`.length));
    const key = names.find((n) => n.startsWith('key-'))?.slice(4);
    if (key === undefined) return null;
    let bytes = Math.max(0, ...names.filter((n) => n.startsWith('tail-')).map((n) => Number(n.split('-')[2])));
    const ups = await client.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: `${prefix}files/${key}` }));
    for (const u of ups.Uploads ?? []) {
      const parts = await client.send(new ListPartsCommand({ Bucket: bucket, Key: u.Key, UploadId: u.UploadId }));
      bytes = Math.max(bytes, (parts.Parts ?? []).reduce((n, p) => n + (p.Size ?? 0), 0));
    }
    return bytes;
  });
}

async function withBucket<T>(srv: TestServer, fn: (client: S3Client, bucket: string, prefix: string) => Promise<T>): Promise<T> {
  const b = await sharedBucket();
  const prefix = `${/^s3:\/\/[^/]+\/?(.*)$/.exec(srv.env.STORAGE_URL!)![1]}/`;
  const client = b.client();
  try {
    return await fn(client, b.bucket, prefix);
  } finally {
    client.destroy();
  }
}

/** Removes a stored file behind the server's back (a file lost from the disk or the bucket). */
export async function removeStored(srv: TestServer, key: string): Promise<void> {
  if (srv.backend !== 's3') {
    fs.rmSync(path.join(srv.dataDir, 'files', key.slice(0, 2), key.slice(2, 4), key));
    return;
  }
  await withBucket(srv, (client, bucket, prefix) => client.send(new DeleteObjectCommand({ Bucket: bucket, Key: `${prefix}files/${key}` })));
}
