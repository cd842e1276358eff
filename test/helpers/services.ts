/**
 * Private PostgreSQL clusters, Redis servers and tmpfs mounts for failure tests: each on its own
 * free port or directory, started and stopped by the test alone (the machine's shared PostgreSQL
 * and Redis are never touched).
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const PG_BIN = process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin';

/** Whether nothing listens on `port` at 127.0.0.1 (bound and released). */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** The first port of the kernel's ephemeral range (where outgoing connections take theirs). */
function ephemeralLow(): number {
  try {
    return Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || 32_768;
  } catch {
    return 32_768;
  }
}

/**
 * A port on which nothing listens, for a program that binds it later. Taken from the 12,000 ports
 * below the kernel's ephemeral range: a port from listen(0) is one an outgoing connection of any
 * process may take before that program binds it (radosgw once failed so, "Address already in use").
 */
export async function freePort(): Promise<number> {
  const high = ephemeralLow();
  const low = Math.max(1024, high - 12_000);
  for (let i = 0; i < 100; i++) {
    const port = low + Math.floor(Math.random() * (high - low));
    if (await bindable(port)) return port;
  }
  throw new Error(`no free port between ${low} and ${high - 1}`);
}

/** Why private PostgreSQL cannot run here, or null when it can. */
export function pgUnavailable(): string | null {
  if (!fs.existsSync(path.join(PG_BIN, 'initdb'))) return `no PostgreSQL binaries in ${PG_BIN} (set PG_BIN)`;
  if (process.getuid?.() === 0 && spawnSync('id', ['-u', 'postgres']).status !== 0) return 'running as root without a postgres user';
  return null;
}

export function redisUnavailable(): string | null {
  return spawnSync('redis-server', ['--version']).error ? 'no redis-server on PATH' : null;
}

/** Asynchronous, so the test's own traffic keeps flowing while PostgreSQL stops and starts. */
function run(cmd: string, args: string[]): Promise<void> {
  // initdb and pg_ctl refuse to run as root: run them as the postgres user.
  const [file, argv] = process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args];
  return new Promise((resolve, reject) =>
    execFile(file, argv, { encoding: 'utf8', timeout: 60_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${cmd} ${args.join(' ')} failed: ${err.message}\n${stdout}${stderr}`)) : resolve(),
    ),
  );
}

export interface PrivatePg {
  readonly url: string;
  readonly port: number;
  start(): Promise<void>;
  /** Fast shutdown: sessions are terminated, new connections refused. */
  stop(): Promise<void>;
  restart(): Promise<void>;
  destroy(): Promise<void>;
}

/** initdb into a temp dir and start on a free port (trust auth on 127.0.0.1 and the socket in the dir). */
export async function startPrivatePg(): Promise<PrivatePg> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-pg-'));
  fs.chmodSync(dir, 0o755);
  if (process.getuid?.() === 0) spawnSync('chown', ['postgres:postgres', dir]);
  const data = path.join(dir, 'data');
  const port = await freePort();
  await run(path.join(PG_BIN, 'initdb'), ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']);
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=30`;
  const ctl = (...args: string[]): Promise<void> => run(path.join(PG_BIN, 'pg_ctl'), ['-D', data, '-l', path.join(dir, 'log'), '-w', '-t', '30', ...args]);
  let running = false;
  const pg: PrivatePg = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    async start() {
      await ctl('-o', opts, 'start');
      running = true;
    },
    async stop() {
      await ctl('-m', 'fast', 'stop');
      running = false;
    },
    async restart() {
      await ctl('-m', 'fast', '-o', opts, 'restart');
      running = true;
    },
    async destroy() {
      if (running) await pg.stop().catch(() => {});
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  await pg.start();
  return pg;
}

export interface PrivateRedis {
  readonly url: string;
  readonly port: number;
  start(): Promise<void>;
  /** SIGKILL: connections reset, nothing flushed. */
  kill(): Promise<void>;
  /** SIGSTOP / SIGCONT: connections stay open and nothing answers (a partition, not a crash). */
  freeze(): void;
  thaw(): void;
  destroy(): Promise<void>;
}

export async function privateRedis(): Promise<PrivateRedis> {
  const port = await freePort();
  let proc: ChildProcess | null = null;
  const r: PrivateRedis = {
    url: `redis://127.0.0.1:${port}`,
    port,
    async start() {
      proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
        stdio: ['ignore', 'pipe', 'ignore'],
      });
      await new Promise<void>((resolve, reject) => {
        let out = '';
        const timer = setTimeout(() => reject(new Error(`redis-server did not start: ${out}`)), 10_000);
        proc!.stdout!.on('data', (c: Buffer) => {
          out += String(c);
          if (/Ready to accept connections/i.test(out)) {
            clearTimeout(timer);
            proc!.stdout!.resume();
            resolve();
          }
        });
        proc!.once('exit', (code) => reject(new Error(`redis-server exited ${code}: ${out}`)));
      });
    },
    async kill() {
      const p = proc;
      if (!p || p.exitCode !== null || p.signalCode !== null) return;
      const exited = new Promise((res) => p.once('exit', res));
      p.kill('SIGCONT');
      p.kill('SIGKILL');
      await exited;
      proc = null;
    },
    freeze: () => void proc?.kill('SIGSTOP'),
    thaw: () => void proc?.kill('SIGCONT'),
    destroy: () => r.kill(),
  };
  return r;
}

/** Mounts a tmpfs of `mb` MiB on a fresh directory; null when mounting is not permitted here. */
export function mountTmpfs(mb: number): { dir: string; unmount(): void } | null {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-full-'));
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${mb}m,mode=0700`, 'tmpfs', dir], { encoding: 'utf8' });
  if (r.status !== 0) {
    fs.rmSync(dir, { recursive: true, force: true });
    return null;
  }
  return {
    dir,
    unmount() {
      spawnSync('umount', ['-l', dir]);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
