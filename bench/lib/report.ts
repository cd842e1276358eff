// Shared numbers, env knobs and output for every bench scenario.
// Units: MB/s is 10^6 bytes per second; sizes given as 256M / 1G are binary (MiB / GiB).
import os from 'node:os';
import path from 'node:path';
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const BENCH_DIR = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
export const REPO_DIR = path.dirname(BENCH_DIR);
export const MiB = 1024 * 1024;
export const GiB = 1024 * MiB;

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

const UNITS: Record<string, number> = { '': 1, K: 1024, M: MiB, G: GiB, T: 1024 * GiB };

/** "256M", "1G", "4GiB", "1.5G", "1048576" -> bytes (binary suffixes). */
export function parseSize(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$/i.exec(text);
  if (!m) throw new Error(`bad size "${text}" (use e.g. 256M, 1G, 4G)`);
  return Math.round(Number(m[1]) * UNITS[m[2]!.toUpperCase()]!);
}

export function formatSize(bytes: number): string {
  if (bytes >= GiB && bytes % (GiB / 4) === 0) return `${bytes / GiB} GiB`;
  if (bytes >= MiB) return `${+(bytes / MiB).toFixed(1)} MiB`;
  return `${bytes} B`;
}

/** Sizes from the command line, else BENCH_SIZES, else the given default list. */
export function sizesFromArgs(fallback: string): number[] {
  const args = process.argv.slice(2).filter((a) => !a.startsWith('-'));
  const text = args.length > 0 ? args.join(',') : process.env.BENCH_SIZES ?? fallback;
  return text.split(',').filter((s) => s.trim() !== '').map(parseSize);
}

export function envInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got "${raw}"`);
  return n;
}

export function mbps(bytes: number, ms: number): number {
  return bytes / 1e6 / (ms / 1000);
}

export function fixed(n: number | undefined, digits = 0): string {
  return n === undefined || !Number.isFinite(n) ? 'n/a' : n.toFixed(digits);
}

export function ratio(a: number | undefined, b: number | undefined): string {
  return a === undefined || b === undefined || !(b > 0) || !Number.isFinite(a) ? 'n/a' : `${(a / b).toFixed(2)}x`;
}

/** One line per streaming run, printed as it finishes. */
export function runLine(run: { mbps: number; peakRssMiB: number; cpuPerGB: number } | undefined, error?: string): string {
  if (!run) return `ERROR ${error ?? 'unknown'}`;
  return `${fixed(run.mbps)} MB/s, RSS ${fixed(run.peakRssMiB)} MiB, CPU ${fixed(run.cpuPerGB, 2)} s/GB`;
}

export interface Environment {
  node: string;
  cpu: string;
  cores: number;
  kernel: string;
  memGiB: number;
  /** 1-minute load average at start: other work on the 2 cores skews every figure. */
  loadAvg1: number;
  startedAt: string;
}

export function environment(): Environment {
  return {
    node: process.version,
    cpu: os.cpus()[0]?.model ?? 'unknown',
    cores: os.cpus().length,
    kernel: `${os.type()} ${os.release()}`,
    memGiB: Math.round(os.totalmem() / GiB),
    loadAvg1: os.loadavg()[0] ?? 0,
    startedAt: new Date().toISOString(),
  };
}

export function printHeader(title: string, env: Environment, knobs: Record<string, unknown>): void {
  console.log(`\n=== ${title} ===`);
  console.log(`Node ${env.node} | CPU ${env.cpu} x${env.cores} | ${env.kernel} | RAM ${env.memGiB} GiB`);
  console.log(`settings: ${Object.entries(knobs).map(([k, v]) => `${k}=${String(v)}`).join(' ')}`);
  if (env.loadAvg1 > 0.5 * env.cores) {
    console.log(`WARNING: load average ${env.loadAvg1.toFixed(2)} on ${env.cores} cores: other work is running, figures will be skewed`);
  }
}

export type Cell = string | number;

export function printTable(columns: readonly string[], rows: readonly (readonly Cell[])[]): void {
  const text = rows.map((r) => r.map((c) => String(c)));
  const width = columns.map((c, i) => Math.max(c.length, ...text.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells.map((c, i) => (i === 0 ? c.padEnd(width[i]!) : c.padStart(width[i]!))).join('  ');
  console.log(line(columns));
  console.log(width.map((w) => '-'.repeat(w)).join('  '));
  for (const r of text) console.log(line(r));
}

/** Writes bench/results/<name>-<timestamp>.json and returns its path. */
export function writeResults(name: string, data: unknown): string {
  const dir = path.join(BENCH_DIR, 'results');
  mkdirSync(dir, { recursive: true });
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const file = path.join(dir, `${name}-${stamp}.json`);
  writeFileSync(file, `${JSON.stringify(data, null, 2)}\n`);
  return file;
}
