// wrk, the C load generator, as a second client for small requests. autocannon (JavaScript) tops
// out near 45k req/s on this machine, so a server faster than that is measured as the client's
// ceiling; wrk reaches well past 60k here and ranks such servers (PERFORMANCE.md: "use autocannon
// for ratios below that, wrk to rank above"). Used only where a `wrk` binary is installed.
import { spawnSync, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface WrkRun {
  rps: number;
  /** Milliseconds. */
  p50: number;
  p99: number;
  /** Responses outside 2xx/3xx, and socket errors (connect, read, write, timeout). */
  non2xx: number;
  errors: number;
}

export interface WrkRequest {
  url: string;
  connections: number;
  durationS: number;
  method?: string;
  body?: Buffer;
  headers?: Record<string, string>;
}

export function wrkAvailable(): boolean {
  if (process.env.BENCH_WRK === '0') return false;
  return spawnSync('wrk', ['--version'], { encoding: 'utf8' }).error === undefined;
}

/** A Lua string literal holding `bytes` exactly (CR, LF and quotes escaped). */
function luaString(bytes: Buffer): string {
  let out = '"';
  for (const b of bytes) {
    if (b >= 0x20 && b < 0x7f && b !== 0x22 && b !== 0x5c) out += String.fromCharCode(b);
    else out += `\\${String(b).padStart(3, '0')}`; // three digits: a digit after it must not join it
  }
  return `${out}"`;
}

let scriptDir: string | undefined;

/** Writes the Lua script that sets method, headers and body; undefined for a plain GET. */
function script(req: WrkRequest): string | undefined {
  if (!req.method && !req.body && !req.headers) return undefined;
  scriptDir ??= mkdtempSync(path.join(os.tmpdir(), 'sluice-bench-wrk-'));
  const lines = [`wrk.method = "${req.method ?? 'GET'}"`];
  if (req.body) lines.push(`wrk.body = ${luaString(req.body)}`);
  for (const [k, v] of Object.entries(req.headers ?? {})) lines.push(`wrk.headers[${luaString(Buffer.from(k))}] = ${luaString(Buffer.from(v))}`);
  const file = path.join(scriptDir, `${Math.random().toString(36).slice(2)}.lua`);
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

const ms = (value: string, unit: string): number => Number(value) * ({ us: 1e-3, ms: 1, s: 1e3, m: 6e4 }[unit] ?? Number.NaN);

/** Runs wrk with two threads (one per core) and parses its report. */
export async function runWrk(req: WrkRequest): Promise<WrkRun> {
  const file = script(req);
  // --timeout: wrk's default of 2 s would count a slow baseline's queued answers as socket errors.
  const args = ['-t2', `-c${req.connections}`, `-d${req.durationS}s`, '--timeout', '10s', '--latency', ...(file ? ['-s', file] : []), req.url];
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (d: Buffer) => (text += d.toString()));
    child.stderr.on('data', (d: Buffer) => (text += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(text) : reject(new Error(`wrk exited ${code}: ${text.slice(-300)}`))));
  });
  const num = (re: RegExp): number => Number(re.exec(out)?.[1] ?? 0);
  const latency = (pct: string): number => {
    const m = new RegExp(`^\\s*${pct}%\\s+([\\d.]+)(us|ms|s|m)\\s*$`, 'm').exec(out);
    return m ? ms(m[1]!, m[2]!) : Number.NaN;
  };
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return {
    rps: num(/Requests\/sec:\s+([\d.]+)/),
    p50: latency('50'),
    p99: latency('99'),
    non2xx: num(/Non-2xx or 3xx responses: (\d+)/),
    errors: socket ? socket.slice(1).reduce((n, x) => n + Number(x), 0) : 0,
  };
}
