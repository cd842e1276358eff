// The embedded database against the DATABASE_URL mode, in one run: memory of every process the server owns
// (server + database children, summed from /proc), first start and restart to /healthz 200, one large upload,
// 1 KiB uploads and bundle info under autocannon (alone, and beside concurrent large uploads).
//   node --import tsx bench/embedded.ts
//   env: BENCH_LARGE (default 1GiB) BENCH_BESIDE (8) BENCH_BESIDE_SIZE (256MiB) BENCH_DURATION (8) BENCH_CONNECTIONS (20)
//        BENCH_RUNS (3 alternating rounds) BENCH_IDLE_WAIT (10 s after the restart)
//        BENCH_PGLITE_DIR: a checkout of the previous release (embedded PGlite) to measure as a third mode
import path from 'node:path';
import os from 'node:os';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { envInt, environment, median, fixed, formatSize, MiB, parseSize, printHeader, printTable, REPO_DIR, writeResults } from './lib/report.ts';
import { freePort, httpGet, sampleProc, startServer, type ServerProc } from './lib/proc.ts';
import { uploadMultipart } from './lib/http-client.ts';
import { asUploadReply } from './lib/sluice-api.ts';
import { freshDatabase, SLUICE_NODE_FLAGS } from './lib/targets.ts';

type Autocannon = (o: Record<string, unknown>) => Promise<{ requests: { average: number }; non2xx: number; errors: number }>;
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

const LARGE = parseSize(process.env.BENCH_LARGE ?? '1GiB');
const BESIDE = envInt('BENCH_BESIDE', 8);
const BESIDE_SIZE = parseSize(process.env.BENCH_BESIDE_SIZE ?? '256MiB');
const DURATION = envInt('BENCH_DURATION', 8);
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 20);
const ROUNDS = envInt('BENCH_RUNS', 3);
const BOUNDARY = 'benchboundary7MA4YWxkTrZu0gW';
const SMALL = Buffer.concat([
  Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="files[]"; filename="small.txt"\r\nContent-Type: text/plain\r\n\r\n`),
  Buffer.alloc(1024, 120),
  Buffer.from(`\r\n--${BOUNDARY}--\r\n`),
]);

interface Mode {
  name: string;
  repo: string;
  databaseUrl?: string;
}

interface Figures {
  mode: string;
  firstStartMs: number;
  firstStartPeakMiB: number;
  largeUploadPeakMiB: number;
  largeUploadMBps: number;
  restartMs: number;
  idleMiB: number;
  idlePssMiB: number;
  upload1kRps: number[];
  upload1kBesideRps: number[];
  besidePeakMiB: number;
  bundleInfoRps: number[];
}

async function serve(mode: Mode, dataDir: string): Promise<{ proc: ServerProc; ms: number; rss: ReturnType<typeof sampleProc> }> {
  const port = await freePort();
  const env: NodeJS.ProcessEnv = {
    ...process.env, HOST: '127.0.0.1', PORT: String(port), DATA_DIR: dataDir, LOG_LEVEL: 'warn', WORKERS: '1', MALLOC_ARENA_MAX: '2',
    ANON_MAX_BUNDLE_BYTES: String(100 * 1024 * MiB), RATE_LIMIT_ANON_PER_HOUR: '1000000000',
  };
  delete env.REDIS_URL;
  if (mode.databaseUrl) env.DATABASE_URL = mode.databaseUrl;
  else delete env.DATABASE_URL;
  const started = Date.now();
  const p = await startServer({ name: mode.name, args: [...SLUICE_NODE_FLAGS, path.join(mode.repo, 'bin/sluice.js'), 'serve'], cwd: mode.repo, env, port, timeoutMs: 120_000 });
  const rss = sampleProc(p.pid, 50);
  return { proc: p, ms: Date.now() - started, rss };
}

async function seed(base: string): Promise<string> {
  const r = await uploadMultipart(`${base}/api/v1/upload`, [1024, 2048, 4096].map((size, i) => ({ name: `f${i}.bin`, size })));
  const code = asUploadReply(r.json)?.short_code;
  if (!code) throw new Error(`seed upload: HTTP ${r.status} ${r.body.slice(0, 200)}`);
  return code;
}

async function cannon(url: string, extra: Record<string, unknown> = {}): Promise<number> {
  const r = await autocannon({ url, connections: CONNECTIONS, duration: DURATION, ...extra });
  if (r.non2xx + r.errors > 0) console.warn(`  ${url}: non-2xx ${r.non2xx}, errors ${r.errors}`);
  return r.requests.average;
}

const upload1k = (base: string): Promise<number> =>
  cannon(`${base}/api/v1/upload`, { method: 'POST', body: SMALL, headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` } });

interface Running {
  mode: Mode;
  dataDir: string;
  proc: ServerProc;
  code: string;
  figures: Figures;
}

/** First start, one large upload, a restart and the idle memory after it; the server stays up for the throughput rounds. */
async function lifecycle(mode: Mode): Promise<Running> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), `sl-emb-${mode.name.split(' ')[0]}-`));
  const first = await firstStart(mode, dataDir);
  const base = first.proc.baseUrl;
  const rss = sampleProc(first.proc.pid, 50);
  rss.reset();
  const t0 = Date.now();
  const large = await uploadMultipart(`${base}/api/v1/upload`, [{ name: 'large.bin', size: LARGE }]);
  if (large.status !== 201) throw new Error(`large upload: HTTP ${large.status} ${large.body.slice(0, 200)}`);
  const largeMs = Date.now() - t0;
  const largeUploadPeakMiB = rss.peakMiB();
  rss.stop();
  await first.proc.stop();
  const again = await serve(mode, dataDir);
  // Idle: after the server's start-up work, once connections it no longer uses have been closed.
  await new Promise((r) => setTimeout(r, IDLE_WAIT_MS));
  const idleMiB = again.rss.currentMiB();
  const idlePssMiB = pssMiB(again.proc.pid);
  again.rss.stop();
  const code = await seed(again.proc.baseUrl);
  return {
    mode, dataDir, proc: again.proc, code,
    figures: {
      mode: mode.name, firstStartMs: first.ms, firstStartPeakMiB: first.peakMiB, largeUploadPeakMiB, largeUploadMBps: LARGE / 1e6 / (largeMs / 1000),
      restartMs: again.ms, idleMiB, idlePssMiB, upload1kRps: [], upload1kBesideRps: [], besidePeakMiB: 0, bundleInfoRps: [],
    },
  };
}

const IDLE_WAIT_MS = envInt('BENCH_IDLE_WAIT', 10) * 1000;

/** One round of the throughput cases on one server: bundle info, 1 KiB uploads, 1 KiB uploads beside large ones. */
async function round(r: Running): Promise<void> {
  const base = r.proc.baseUrl;
  r.figures.bundleInfoRps.push(await cannon(`${base}/api/v1/bundle/${r.code}`));
  r.figures.upload1kRps.push(await upload1k(base));
  const rss = sampleProc(r.proc.pid, 50);
  rss.reset();
  let stop = false;
  const beside = Array.from({ length: BESIDE }, async () => {
    while (!stop) await uploadMultipart(`${base}/api/v1/upload`, [{ name: 'beside.bin', size: BESIDE_SIZE }]).catch(() => {});
  });
  await new Promise((res) => setTimeout(res, 500));
  r.figures.upload1kBesideRps.push(await upload1k(base));
  stop = true;
  await Promise.all(beside);
  r.figures.besidePeakMiB = Math.max(r.figures.besidePeakMiB, rss.peakMiB());
  rss.stop();
}

/** Summed proportional set size of the process tree: shared pages (PostgreSQL's libraries and buffers) counted once. */
function pssMiB(pid: number): number {
  const tree = [pid];
  for (let i = 0; i < tree.length; i++) {
    for (const t of safe(() => readdirSync(`/proc/${tree[i]}/task`), [] as string[])) {
      tree.push(...safe(() => readFileSync(`/proc/${tree[i]}/task/${t}/children`, 'utf8'), '').split(' ').filter(Boolean).map(Number));
    }
  }
  const kb = tree.reduce((sum, p) => sum + Number(/^Pss:\s+(\d+)/m.exec(safe(() => readFileSync(`/proc/${p}/smaps_rollup`, 'utf8'), ''))?.[1] ?? 0), 0);
  return kb / 1024;
}

function safe<T>(f: () => T, fallback: T): T {
  try {
    return f();
  } catch {
    return fallback;
  }
}

/** Starts a fresh server, sampling the summed RSS of its process tree every 20 ms from its spawn. */
async function firstStart(mode: Mode, dataDir: string): Promise<{ proc: ServerProc; ms: number; peakMiB: number }> {
  // startServer owns the child; its pid is found as our newest child while it starts.
  const before = new Set(childPids());
  let peak = 0;
  let sampler: ReturnType<typeof sampleProc> | undefined;
  const timer = setInterval(() => {
    if (!sampler) {
      const pid = childPids().find((p) => !before.has(p));
      if (pid !== undefined) sampler = sampleProc(pid, 20);
    }
    if (sampler) peak = Math.max(peak, sampler.peakMiB());
  }, 10);
  const s = await serve(mode, dataDir);
  clearInterval(timer);
  if (sampler) peak = Math.max(peak, sampler.peakMiB());
  sampler?.stop();
  s.rss.stop();
  return { proc: s.proc, ms: s.ms, peakMiB: peak };
}

function childPids(): number[] {
  return readdirSync(`/proc/${process.pid}/task`).flatMap((t) =>
    readFileSync(`/proc/${process.pid}/task/${t}/children`, 'utf8').split(' ').filter(Boolean).map(Number),
  );
}
async function main(): Promise<void> {
  printHeader('embedded database vs DATABASE_URL', environment(), {
    large: formatSize(LARGE), beside: `${BESIDE} × ${formatSize(BESIDE_SIZE)}`, duration: `${DURATION}s`, connections: CONNECTIONS,
  });
  const modes: Mode[] = [
    { name: 'embedded', repo: REPO_DIR },
    { name: 'DATABASE_URL', repo: REPO_DIR, databaseUrl: await freshDatabase(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/sluice_bench') },
  ];
  if (process.env.BENCH_PGLITE_DIR) modes.push({ name: 'pglite (previous)', repo: path.resolve(process.env.BENCH_PGLITE_DIR) });
  const running: Running[] = [];
  for (const m of modes) {
    try {
      running.push(await lifecycle(m));
      console.log(JSON.stringify(running.at(-1)!.figures));
    } catch (err) {
      console.error(`! ${m.name}: ${String(err)}`);
    }
  }
  // Throughput rounds alternate between the servers, so a busy spell of the machine hits each alike.
  for (let i = 0; i < ROUNDS; i++) for (const r of i % 2 ? [...running].reverse() : running) await round(r);
  for (const r of running) {
    await r.proc.stop();
    await rm(r.dataDir, { recursive: true, force: true });
  }
  const results = running.map((r) => r.figures);
  const ref = results.find((r) => r.mode === 'DATABASE_URL');
  const x = (a: number[], b: number[] | undefined): string => (b ? `${fixed(median(a) / median(b), 2)}×` : '');
  printTable(
    ['mode', 'first start s', 'peak MiB first start', `peak MiB ${formatSize(LARGE)} upload`, 'upload MB/s', 'restart s', 'idle MiB (PSS)',
      '1 KiB up/s', 'ratio', `1 KiB up/s beside ${BESIDE}`, 'ratio', 'peak MiB beside', 'bundle info/s', 'ratio'],
    results.map((r) => [
      r.mode, fixed(r.firstStartMs / 1000, 1), fixed(r.firstStartPeakMiB), fixed(r.largeUploadPeakMiB), fixed(r.largeUploadMBps), fixed(r.restartMs / 1000, 1),
      `${fixed(r.idleMiB)} (${fixed(r.idlePssMiB)})`, fixed(median(r.upload1kRps)), x(r.upload1kRps, ref?.upload1kRps), fixed(median(r.upload1kBesideRps)),
      x(r.upload1kBesideRps, ref?.upload1kBesideRps), fixed(r.besidePeakMiB), fixed(median(r.bundleInfoRps)), x(r.bundleInfoRps, ref?.bundleInfoRps),
    ]),
  );
  console.log(`results: ${writeResults('embedded', { large: LARGE, beside: BESIDE, besideSize: BESIDE_SIZE, results })}`);
}

await main();
