// Server child processes: free port, spawn + readiness wait, stop, and RSS sampling from /proc.
import path from 'node:path';
import http from 'node:http';
import net from 'node:net';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { spawn, type ChildProcess } from 'node:child_process';
import { MiB } from './report.ts';

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr !== null ? addr.port : 0;
      srv.close(() => (port > 0 ? resolve(port) : reject(new Error('no port'))));
    });
  });
}

/** GET url; resolves with status and body text, never throws for HTTP errors. */
export function httpGet(url: string, timeoutMs = 2000): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: false, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`timeout GET ${url}`)));
    req.on('error', reject);
  });
}

export interface ServerProc {
  readonly name: string;
  readonly pid: number;
  readonly baseUrl: string;
  /** Last few KiB of the child's stdout+stderr, for error messages. */
  output(): string;
  /** "exited with <code or signal>" once the child is gone, else undefined. */
  exitStatus(): string | undefined;
  stop(): Promise<void>;
}

export interface SpawnOptions {
  name: string;
  /** Executable; default: this node. */
  command?: string;
  args: readonly string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
  port: number;
  readyPath?: string;
  timeoutMs?: number;
}

const TAIL = 8192;

/** Spawns `node <args>` (or `command <args>`) and resolves once GET readyPath answers 200. */
export async function startServer(opts: SpawnOptions): Promise<ServerProc> {
  const child: ChildProcess = spawn(opts.command ?? process.execPath, opts.args, {
    cwd: opts.cwd,
    env: opts.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let tail = '';
  const keep = (chunk: Buffer): void => {
    tail = (tail + chunk.toString('utf8')).slice(-TAIL);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  let exited: string | undefined;
  const exit = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      exited = `exited with ${signal ?? code}`;
      resolve();
    }),
  );
  const baseUrl = `http://127.0.0.1:${opts.port}`;
  const proc: ServerProc = {
    name: opts.name,
    pid: child.pid ?? -1,
    baseUrl,
    output: () => tail,
    exitStatus: () => exited,
    async stop() {
      if (exited !== undefined) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exit;
      clearTimeout(timer);
    },
  };
  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  const readyUrl = baseUrl + (opts.readyPath ?? '/healthz');
  for (;;) {
    if (exited !== undefined) throw new Error(`${opts.name} ${exited} before ready:\n${tail}`);
    const status = await httpGet(readyUrl, 1000).then((r) => r.status, () => 0);
    if (status === 200) return proc;
    if (Date.now() > deadline) {
      await proc.stop();
      throw new Error(`${opts.name} not ready at ${readyUrl} (last status ${status}):\n${tail}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

export interface ProcSampler {
  /** Resets the kernel's high-water marks (VmHWM), the sampled peak and the CPU-time origin. */
  reset(): void;
  /** User + system CPU seconds of the server's processes (all threads) since the last reset. */
  cpuSeconds(): number;
  /** Peak since the last reset of the summed VmRSS, or of the summed VmHWM where that is larger, in MiB. */
  peakMiB(): number;
  /** Current summed VmRSS in MiB. */
  currentMiB(): number;
  stop(): void;
}

/**
 * The process and its descendants: nginx does its work in forked workers, whose CPU and memory the
 * master's own /proc entries do not show (the tables read "0.00 s/GB, 7 MiB" for nginx before).
 */
function treeOf(pid: number): number[] {
  const out = [pid];
  for (let i = 0; i < out.length; i++) {
    let tasks: string[] = [];
    try {
      tasks = readdirSync(`/proc/${out[i]}/task`);
    } catch {
      continue; // gone
    }
    for (const tid of tasks) {
      try {
        for (const child of readFileSync(`/proc/${out[i]}/task/${tid}/children`, 'utf8').split(' ')) {
          if (child.trim() !== '') out.push(Number(child));
        }
      } catch {
        // thread gone
      }
    }
  }
  return out;
}

function readStatus(pid: number): { rss: number; hwm: number } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (key: string): number => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
    return { rss: kb('VmRSS') * 1024, hwm: kb('VmHWM') * 1024 };
  } catch {
    return undefined; // process gone
  }
}

const CLK_TCK = 100; // USER_HZ: /proc/<pid>/stat times are in these ticks on Linux

function readCpuSeconds(pid: number): number {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // fields after "pid (comm) ": state is [0], utime [11], stime [12]; comm may contain spaces, so split after ')'
    const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / CLK_TCK;
  } catch {
    return 0;
  }
}

/**
 * Samples /proc/<pid>/status of the process and its descendants every intervalMs; VmHWM also
 * catches spikes between samples. CPU is per process since the last reset, so a child that exits
 * mid-run takes its share with it (the servers here keep theirs for their lifetime).
 */
export function sampleProc(pid: number, intervalMs = 100, descendants = true): ProcSampler {
  const processTree = descendants ? treeOf : (p: number): number[] => [p];
  let peak = 0;
  const cpuNow = (): Map<number, number> => new Map(processTree(pid).map((p) => [p, readCpuSeconds(p)]));
  let cpuOrigin = cpuNow();
  let useHwm = true;
  const tick = (): number => {
    let rss = 0;
    let hwm = 0;
    for (const p of processTree(pid)) {
      const s = readStatus(p);
      rss += s?.rss ?? 0;
      hwm += s?.hwm ?? 0;
    }
    peak = Math.max(peak, rss, useHwm ? hwm : 0);
    return rss;
  };
  const timer = setInterval(tick, intervalMs);
  timer.unref();
  return {
    reset() {
      for (const p of processTree(pid)) {
        try {
          writeFileSync(`/proc/${p}/clear_refs`, '5'); // "5" resets VmHWM to the current RSS
        } catch {
          useHwm = false; // not permitted: VmHWM would span the process lifetime, keep sampled VmRSS only
        }
      }
      cpuOrigin = cpuNow();
      peak = 0;
      tick();
    },
    // A process born after the reset counts from 0.
    cpuSeconds: () => processTree(pid).reduce((sum, p) => sum + readCpuSeconds(p) - (cpuOrigin.get(p) ?? 0), 0),
    peakMiB: () => {
      tick();
      return peak / MiB;
    },
    currentMiB: () => tick() / MiB,
    stop: () => clearInterval(timer),
  };
}

/** argv for `node` to run a tree's bin/sluice.js as its launcher line does (the V8 flags after `env -S node`). */
export function sluiceArgs(tree: string, ...rest: string[]): string[] {
  const bin = path.join(tree, 'bin/sluice.js');
  const first = readFileSync(bin, 'utf8').split('\n')[0] ?? '';
  const flags = first.startsWith('#!/usr/bin/env -S node') ? first.slice('#!/usr/bin/env -S node'.length).trim().split(/\s+/).filter(Boolean) : [];
  return [...flags, bin, ...rest];
}
