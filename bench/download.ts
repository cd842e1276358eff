// Download throughput of one stored file of SIZE: 1 stream, then CONC concurrent streams of the same file.
// Sluice serves GET /api/v1/download/<id> (the file uploaded through it once); the baseline is node:http
// createReadStream().pipe(res) (bench/baselines/node-busboy.ts, GET /download/<name>) over the same bytes,
// and nginx with sendfile when installed.
//   node --import tsx bench/download.ts [1G,4G]     env: BENCH_SIZES BENCH_RUNS BENCH_CONCURRENCY BENCH_SERVERS
import path from 'node:path';
import { rm } from 'node:fs/promises';
import {
  envInt, environment, fixed, formatSize, mbps, median, printHeader, printTable, ratio, runLine, sizesFromArgs,
  writeResults, type Cell,
} from './lib/report.ts';
import { uploadMultipart, writePatternFile } from './lib/http-client.ts';
import { download } from './lib/download-client.ts';
import { closeAll, describeFailure, selectServers, startTarget, type Target } from './lib/targets.ts';
import { compareTreeRows } from './lib/tree-compare.ts';
import { asUploadReply, cleanupUploads } from './lib/sluice-api.ts';
import type { Measured } from './lib/summary.ts';

interface Run {
  ms: number;
  mbps: number;
  peakRssMiB: number;
  /** Server CPU seconds (all threads) per 10^9 bytes moved. */
  cpuPerGB: number;
}

interface CaseResult extends Measured<Run> {
  server: string;
  size: number;
  streams: number;
}

interface Stored {
  url: string;
  /** Removes the file from the server again. */
  remove(): Promise<void>;
}

/** Puts SIZE pattern bytes on the server: through Sluice's upload, or straight into the baseline's DIR. */
async function store(target: Target, size: number): Promise<Stored> {
  const name = `bench-${size}.bin`;
  if (!target.name.startsWith('sluice')) {
    await writePatternFile(path.join(target.dir, name), size);
    return { url: `${target.baseUrl}/download/${name}`, remove: () => rm(path.join(target.dir, name), { force: true }) };
  }
  const r = await uploadMultipart(`${target.baseUrl}/api/v1/upload`, [{ name, size }]);
  const id = asUploadReply(r.json)?.files[0]?.id;
  if ((r.status !== 201 && r.status !== 200) || id === undefined) {
    throw new Error(`sluice upload of ${formatSize(size)} failed: HTTP ${r.status} ${r.body.slice(0, 200)}`);
  }
  return { url: `${target.baseUrl}/api/v1/download/${id}`, remove: () => cleanupUploads(target, [r.json]) };
}

async function runOnce(target: Target, url: string, size: number, streams: number): Promise<{ run?: Run; error?: string }> {
  target.rss.reset();
  const started = performance.now();
  const settled = await Promise.allSettled(Array.from({ length: streams }, () => download(url)));
  const ms = performance.now() - started;
  const peakRssMiB = target.rss.peakMiB();
  const cpu = target.rss.cpuSeconds();
  for (const s of settled) {
    if (s.status === 'rejected') return { error: String(s.reason) };
    const r = s.value;
    if (r.status !== 200) return { error: `HTTP ${r.status}` };
    if (r.bytes !== size) return { error: `received ${r.bytes} bytes, expected ${size}` };
    if (r.contentLength !== size) return { error: `Content-Length ${r.contentLength}, expected ${size}` };
  }
  return { run: { ms, mbps: mbps(size * streams, ms), peakRssMiB, cpuPerGB: cpu / ((size * streams) / 1e9) } };
}

async function main(): Promise<void> {
  const env = environment();
  const sizes = sizesFromArgs('1G,4G');
  const runs = envInt('BENCH_RUNS', 3);
  const conc = envInt('BENCH_CONCURRENCY', 8);
  printHeader('download: GET one stored file', env, { sizes: sizes.map(formatSize).join(','), runs, concurrency: conc });
  console.log(`single = 1 stream; x${conc} = ${conc} concurrent streams of the same file (${conc} x SIZE bytes moved).`);
  const targets: Target[] = [];
  for (const name of selectServers(['sluice', 'node-busboy', 'nginx'])) {
    try {
      targets.push(await startTarget(name, { databaseUrl: process.env.DATABASE_URL }));
    } catch (err) {
      console.error(`! ${name} did not start: ${String(err)}`);
    }
  }

  const results: CaseResult[] = [];
  for (const size of sizes) {
    const stored = new Map<Target, Stored>();
    for (const t of targets) {
      try {
        const s = await store(t, size);
        const warm = await runOnce(t, s.url, size, 1); // also checks the bytes come back whole
        if (warm.error) throw new Error(warm.error);
        stored.set(t, s);
        console.log(`${t.name}: ${formatSize(size)} stored, warm-up ${fixed(warm.run?.mbps)} MB/s`);
      } catch (err) {
        console.error(`! ${t.name}: ${String(err)}`);
      }
    }
    const ready = targets.filter((t) => stored.has(t));
    for (const streams of [1, conc]) {
      const cases = ready.map((t): CaseResult => ({ server: t.name, size, streams, runs: [], errors: [] }));
      for (let r = 0; r < runs; r++) {
        for (let k = 0; k < ready.length; k++) {
          const i = (k + r) % ready.length; // rotate who goes first
          const t = ready[i]!;
          const out = await runOnce(t, stored.get(t)!.url, size, streams);
          const c = cases[i]!;
          if (out.run) c.runs.push(out.run);
          else c.errors.push((out.error = describeFailure(t, out.error ?? 'unknown')));
          const label = `${formatSize(size)} ${streams === 1 ? 'single' : `x${streams}`} run ${r + 1} ${t.name}`;
          console.log(`  ${label}: ${runLine(out.run, out.error)}`);
        }
      }
      for (const c of cases) {
        if (c.runs.length === 0) continue;
        c.mbps = median(c.runs.map((x) => x.mbps));
        c.wallMs = median(c.runs.map((x) => x.ms));
        c.peakRssMiB = Math.max(...c.runs.map((x) => x.peakRssMiB));
        c.cpuPerGB = median(c.runs.map((x) => x.cpuPerGB));
      }
      results.push(...cases);
    }
    for (const s of stored.values()) await s.remove();
  }
  await closeAll();

  const baseline = (c: CaseResult, server = 'node-busboy'): number | undefined =>
    results.find((x) => x.server === server && x.size === c.size && x.streams === c.streams)?.mbps;
  const rows: Cell[][] = results.map((c) => [
    c.server === 'node-busboy' ? 'node:http pipe' : c.server,
    formatSize(c.size),
    String(c.streams),
    fixed(c.mbps),
    fixed(c.wallMs === undefined ? undefined : c.wallMs / 1000, 2),
    fixed(c.peakRssMiB),
    fixed(c.cpuPerGB, 2),
    c.server === 'sluice' ? ratio(c.mbps, baseline(c)) : '',
    c.server === 'sluice' ? ratio(c.mbps, baseline(c, 'nginx')) : '',
    c.errors.length > 0 ? `${c.errors.length} failed` : '',
  ]);
  console.log(`\nmedians of ${runs} run(s); MB/s = 10^6 bytes/s summed over streams; RSS = server peak (max of runs)`);
  printTable(['server', 'file', 'streams', 'MB/s', 'wall s', 'peak RSS MiB', 'srv CPU s/GB', 'vs node:http pipe', 'vs nginx sendfile', 'errors'], rows);
  const trees = compareTreeRows(results, (size, streams) => `${formatSize(size)} ${streams === 1 ? 'single' : `x${streams}`}`);
  const file = writeResults('download', { scenario: 'download', environment: env, runs, concurrency: conc, results, trees });
  console.log(`\nJSON: ${file}`);
  if (results.some((c) => c.errors.length > 0)) process.exitCode = 1;
}

main().catch(async (err: unknown) => {
  console.error(err);
  await closeAll();
  process.exit(1);
});
