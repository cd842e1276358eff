// The servers under test: Sluice and the baselines, each in its own process with its own temp dir.
import path from 'node:path';
import os from 'node:os';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { spawnSync } from 'node:child_process';
import postgres from 'postgres';
import { BENCH_DIR, MiB, REPO_DIR } from './report.ts';
import { freePort, sampleProc, sluiceArgs, startServer, type ProcSampler, type ServerProc } from './proc.ts';

export const SLUICE_BIN = path.join(REPO_DIR, 'bin/sluice.js');
export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/test';

export interface Target {
  readonly name: string;
  readonly baseUrl: string;
  readonly dir: string;
  readonly proc: ServerProc;
  /** RSS and CPU time of the server process. */
  readonly rss: ProcSampler;
  close(): Promise<void>;
}

const open = new Set<Target>();
let signalsHooked = false;

/** Ctrl-C or SIGTERM still stops the children and removes their temp dirs. */
function hookSignals(): void {
  if (signalsHooked) return;
  signalsHooked = true;
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      console.error(`\n${sig}: stopping servers`);
      closeAll().finally(() => process.exit(130));
    });
  }
}

/** Run by closeAll once the servers are gone (fresh databases to drop). */
const cleanups: Array<() => Promise<void>> = [];

export async function closeAll(): Promise<void> {
  await Promise.allSettled([...open].map((t) => t.close()));
  for (const fn of cleanups.splice(0)) await fn().catch((err: unknown) => console.warn(`cleanup: ${String(err)}`));
}

/** Adds the server's fate to a failed run's message when the server is gone. */
export function describeFailure(target: Target, error: string): string {
  const status = target.proc.exitStatus();
  if (status === undefined) return error;
  const last = target.proc.output().trim().split('\n').slice(-3).join(' | ');
  return `${error} [${target.name} ${status}; last output: ${last.slice(-400)}]`;
}

/**
 * Sluice on another uWebSockets.js binding, for a same-run comparison: BENCH_UWS_ALT names that
 * package's directory (e.g. an older binding installed with `npm install --prefix /tmp/old ...`),
 * and `sluice-alt` joins every scenario that runs `sluice`.
 */
export const ALT_UWS_DIR = process.env.BENCH_UWS_ALT;
/**
 * Another checkout of Sluice (with its own node_modules), for a same-run comparison of two trees:
 * `sluice-base` runs that tree's server beside `sluice` in every scenario that runs `sluice`.
 */
export const ALT_TREE_DIR = process.env.BENCH_TREE_ALT;

/** "A=1 B=2" -> { A: '1', B: '2' }: settings given to a server on the command line (SLUICE_ENV, BENCH_ALT_ENV). */
export function envSettings(text = ''): Record<string, string> {
  return Object.fromEntries(text.split(/\s+/).filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
}

/** Which servers to run: BENCH_SERVERS=sluice,node-busboy filters the scenario's list. */
export function selectServers(given: readonly string[]): string[] {
  const twins = ['sluice', ...(ALT_UWS_DIR ? ['sluice-alt'] : []), ...(ALT_TREE_DIR ? ['sluice-base'] : [])];
  const all = given.flatMap((s) => (s === 'sluice' ? twins : [s]));
  const wanted = process.env.BENCH_SERVERS?.split(',').map((s) => s.trim()).filter(Boolean);
  const picked = wanted ? all.filter((s) => wanted.includes(s)) : [...all];
  if (picked.includes('nginx') && nginxBinary() === undefined) {
    console.log('(nginx skipped: not installed; `apt-get install nginx` adds it to the comparison)');
    return selectServers(picked.filter((s) => s !== 'nginx'));
  }
  if (picked.includes('sluice') && !existsSync(SLUICE_BIN)) {
    console.log(`(Sluice skipped: ${path.relative(REPO_DIR, SLUICE_BIN)} does not exist yet)`);
    return picked.filter((s) => !twins.includes(s));
  }
  if (picked.includes('sluice-alt')) {
    const pkg = JSON.parse(readFileSync(path.join(ALT_UWS_DIR!, 'package.json'), 'utf8')) as { name: string; version: string };
    console.log(`sluice-alt = Sluice on ${pkg.name} ${pkg.version} (BENCH_UWS_ALT); sluice = on its own binding`);
  }
  if (picked.includes('sluice-base')) console.log(`sluice-base = Sluice of ${ALT_TREE_DIR} (BENCH_TREE_ALT); sluice = this tree`);
  return picked;
}

async function launch(
  name: string,
  args: string[] | ((port: number) => Promise<string[]>),
  makeEnv: (port: number) => NodeJS.ProcessEnv,
  dir: string,
  command?: string,
  cwd = REPO_DIR,
): Promise<Target> {
  hookSignals();
  let proc: ServerProc | undefined;
  for (let attempt = 1; proc === undefined; attempt++) {
    try {
      const port = await freePort();
      const argv = typeof args === 'function' ? await args(port) : args;
      proc = await startServer({ name, command, args: argv, cwd, env: makeEnv(port), port, timeoutMs: 90_000 });
    } catch (err) {
      // one retry: on a shared machine a stray signal or a port race can kill a start that is otherwise fine
      if (attempt < 2) {
        const lines = String(err).split('\n').filter((l) => l.trim() !== '');
        const why = lines.length > 1 ? `${lines[0]} ... ${lines.at(-1)}` : lines[0];
        console.warn(`(${name} failed to start, retrying: ${why})`);
        continue;
      }
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
  }
  const rss = sampleProc(proc.pid);
  let closed = false;
  const target: Target = {
    name,
    baseUrl: proc.baseUrl,
    dir,
    proc,
    rss,
    async close() {
      if (closed) return;
      closed = true;
      open.delete(target);
      rss.stop();
      await proc.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
  open.add(target);
  return target;
}

export interface SluiceOptions {
  /** Real PostgreSQL; unset = the embedded PostgreSQL in DATA_DIR. */
  databaseUrl?: string;
  /** Real Redis for rate-limit state; unset = the in-process store. */
  redisUrl?: string;
  /** WORKERS for the server (default 1). */
  workers?: string;
  /** Name shown in tables (default `sluice`). */
  name?: string;
  /** Directory of another uWebSockets.js package to load instead of the installed one (see ALT_UWS_DIR). */
  uwsDir?: string;
  /** Another checkout to run instead of this one (see ALT_TREE_DIR). */
  treeDir?: string;
  env?: NodeJS.ProcessEnv; // more variables for the server and its migrate (STORAGE_URL, S3 credentials)
}

/** `node bin/sluice.js serve` (the compiled start path, with `npm start`'s environment) with anonymous caps raised out of the way. */
export async function startSluice(opts: SluiceOptions = {}): Promise<Target> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'sluice-bench-sluice-'));
  const tree = opts.treeDir === undefined ? REPO_DIR : path.resolve(opts.treeDir);
  const bin = path.join(tree, 'bin/sluice.js');
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOST: '127.0.0.1',
    DATA_DIR: dir,
    LOG_LEVEL: 'warn',
    ANON_MAX_BUNDLE_BYTES: String(100 * 1024 * MiB),
    RATE_LIMIT_ANON_PER_HOUR: '1000000000',
    // One process, like every baseline.
    WORKERS: opts.workers ?? '1',
    // As `npm start` and the systemd unit run it (glibc malloc arenas; see the README).
    MALLOC_ARENA_MAX: '2',
    MALLOC_MMAP_THRESHOLD_: '131072',
    ...opts.env,
  };
  if (opts.uwsDir !== undefined) {
    env.SLUICE_BENCH_UWS_DIR = path.resolve(opts.uwsDir);
    env.NODE_OPTIONS = `${env.NODE_OPTIONS ?? ''} --require ${path.join(BENCH_DIR, 'lib', 'uws-alias.cjs')}`.trim();
  }
  if (opts.databaseUrl !== undefined) env.DATABASE_URL = opts.databaseUrl;
  if (opts.redisUrl !== undefined) env.REDIS_URL = opts.redisUrl;
  else delete env.REDIS_URL;
  if (env.DATABASE_URL !== undefined) {
    // serve may migrate by itself; an explicit, idempotent migrate first makes a fresh database work either way
    const r = spawnSync(process.execPath, [bin, 'migrate'], { cwd: tree, env, encoding: 'utf8' });
    if (r.status !== 0) console.warn(`sluice migrate exited ${r.status}: ${(r.stderr || r.stdout).trim().slice(-500)}`);
  }
  return launch(opts.name ?? 'sluice', sluiceArgs(tree, 'serve'), (port) => ({ ...env, PORT: String(port) }), dir, undefined, tree);
}

/** A script from bench/baselines/, given PORT and DIR (plus extra env); `label` names it in tables. */
export async function startBaseline(name: string, extraEnv: NodeJS.ProcessEnv = {}, label = name): Promise<Target> {
  const dir = await mkdtemp(path.join(os.tmpdir(), `sluice-bench-${label}-`));
  const script = path.join(BENCH_DIR, 'baselines', `${name}.ts`);
  const env = (port: number): NodeJS.ProcessEnv => ({ ...process.env, ...extraEnv, PORT: String(port), DIR: dir });
  return launch(label, ['--import', 'tsx', script], env, dir);
}

export function nginxBinary(): string | undefined {
  return ['/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
}

/**
 * nginx as the native reference: GET /download/<name> serves DIR/<name> with sendfile; POST
 * /api/v1/upload writes the whole request body (multipart, not parsed) into a file under DIR
 * (client_body_in_file_only, 1 MiB body buffer, its fastest setting here), then answers 201 from
 * a second internal server block. Two worker processes (auto), access log off. RSS and CPU
 * figures cover the master process only.
 */
export async function startNginx(): Promise<Target> {
  const bin = nginxBinary();
  if (bin === undefined) throw new Error('nginx is not installed');
  const dir = await mkdtemp(path.join(os.tmpdir(), 'sluice-bench-nginx-'));
  const conf = path.join(dir, 'nginx.conf');
  const args = async (port: number): Promise<string[]> => {
    const inner = await freePort();
    await mkdir(path.join(dir, 'body'), { recursive: true });
    await writeFile(
      conf,
      `worker_processes auto;
user root root;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  server {
    listen 127.0.0.1:${port};
    client_max_body_size 0;
    client_body_buffer_size 1m;
    location = /healthz { default_type application/json; return 200 '{"success":true}'; }
    location /download/ { alias ${dir}/; }
    location = /api/v1/upload {
      client_body_in_file_only clean;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-Body-File $request_body_file;
      proxy_pass http://127.0.0.1:${inner};
    }
  }
  server {
    listen 127.0.0.1:${inner};
    location / { default_type application/json; return 201 '{"success":true,"files":[{"name":"body"}]}'; }
  }
}
`,
    );
    return ['-p', dir, '-c', conf, '-g', 'daemon off;'];
  };
  return launch('nginx', args, () => ({ ...process.env }), dir, bin);
}

export async function startTarget(name: string, sluice: SluiceOptions = {}): Promise<Target> {
  // Two trees may differ in schema, and neither should pay for the other's rows: each gets its own empty database.
  if (ALT_TREE_DIR !== undefined && sluice.databaseUrl !== undefined && (name === 'sluice' || name === 'sluice-base')) {
    sluice = { ...sluice, databaseUrl: await freshDatabase(sluice.databaseUrl, name) };
  }
  if (name === 'sluice') return startSluice(sluice);
  if (name === 'sluice-alt') return startSluice({ ...sluice, name, uwsDir: ALT_UWS_DIR });
  if (name === 'sluice-base') return startSluice({ ...sluice, name, treeDir: ALT_TREE_DIR, env: { ...sluice.env, ...envSettings(process.env.BENCH_ALT_ENV) } });
  if (name === 'nginx') return startNginx();
  // express + multer, then fsync of each stored file and its directory before the reply: the same
  // durability Sluice gives (multer itself answers with the bytes in the page cache only).
  if (name === 'express-multer-fsync') return startBaseline('express-multer', { FSYNC: '1' }, name);
  return startBaseline(name);
}

export { removeLargeFiles } from './files.ts';
export { ensureDatabase } from './databases.ts';

/**
 * A new, empty database beside `url`'s (its name plus `_run<pid>`, plus `_<tag>` when given), dropped by closeAll. Every server
 * of a run then starts from the same empty state, as the node-pg baseline recreates its tables at
 * each start: a database kept across runs held ~2M bundles after a day of runs here, and Sluice's
 * inserts into its larger indexes cost more than the baseline's into fresh ones.
 */
export async function freshDatabase(url: string, tag?: string): Promise<string> {
  const u = new URL(url);
  const suffix = tag === undefined ? '' : `_${tag.replace(/[^a-z0-9]+/gi, '_')}`;
  const name = `${decodeURIComponent(u.pathname.slice(1))}_run${process.pid}${suffix}`;
  const quoted = `"${name.replace(/"/g, '""')}"`;
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const run = async (statement: string): Promise<void> => {
    const sql = postgres(admin.toString(), { max: 1, onnotice: () => {} });
    try {
      await sql.unsafe(statement);
    } finally {
      await sql.end();
    }
  };
  await run(`drop database if exists ${quoted}`);
  await run(`create database ${quoted}`);
  hookSignals();
  cleanups.push(() => run(`drop database if exists ${quoted} with (force)`));
  u.pathname = `/${encodeURIComponent(name)}`;
  return u.toString();
}
