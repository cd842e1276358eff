// Bundle as ZIP vs the same bytes as plain downloads: BENCH_ZIP_FILES files of BENCH_ZIP_MB MiB are uploaded
// through one Sluice, then GET /zip/<code> (one stream) is timed against GET /api/v1/download/<id> for each file
// (sequentially) in the same run, alternating which goes first. Target: zip >= 0.8x plain, server RSS flat.
// With BENCH_TREE_ALT, the other tree's server gets the same bundle and the two take turns round by round.
//   node --import tsx bench/zip.ts     env: BENCH_ZIP_MB (256) BENCH_ZIP_FILES (4) BENCH_RUNS (3) DATABASE_URL BENCH_TREE_ALT
import { envInt, environment, fixed, formatSize, mbps, median, MiB, printHeader, printTable, ratio, writeResults, type Cell } from './lib/report.ts';
import { uploadMultipart } from './lib/http-client.ts';
import { download, type DownloadResult } from './lib/download-client.ts';
import { closeAll, DEFAULT_DATABASE_URL, describeFailure, ensureDatabase, selectServers, startTarget, type Target } from './lib/targets.ts';
import { paired, printTreeComparison } from './lib/tree-compare.ts';
import { asUploadReply, cleanupUploads } from './lib/sluice-api.ts';
import type { Measured } from './lib/summary.ts';

type Mode = 'zip' | 'plain';

interface Run {
  ms: number;
  bytes: number;
  mbps: number;
  peakRssMiB: number;
  /** Server CPU seconds (all threads) per 10^9 bytes moved. */
  cpuPerGB: number;
}

interface ModeResult extends Measured<Run> {
  mode: Mode;
}

function check(r: DownloadResult, what: string, expected?: number): number {
  if (r.status !== 200) throw new Error(`${what}: HTTP ${r.status}`);
  if (r.contentLength === undefined || r.bytes !== r.contentLength) {
    throw new Error(`${what}: received ${r.bytes} bytes, Content-Length ${r.contentLength}`);
  }
  if (expected !== undefined && r.bytes !== expected) throw new Error(`${what}: ${r.bytes} bytes, expected ${expected}`);
  return r.bytes;
}

async function measure(target: Target, body: () => Promise<number>): Promise<Run> {
  target.rss.reset();
  const started = performance.now();
  const bytes = await body();
  const ms = performance.now() - started;
  const peakRssMiB = target.rss.peakMiB();
  const cpu = target.rss.cpuSeconds();
  return { ms, bytes, mbps: mbps(bytes, ms), peakRssMiB, cpuPerGB: cpu / (bytes / 1e9) };
}

interface Subject {
  target: Target;
  results: ModeResult[];
  idleRssMiB: number;
  zipBytes: number;
  uploads: unknown[];
  bodies?: Record<Mode, () => Promise<number>>;
}

/** Uploads the bundle into one server, checks the archive, warms the page cache and JIT. */
async function prepare(s: Subject, fileBytes: number, count: number): Promise<void> {
  const { target } = s;
  const files = Array.from({ length: count }, (_, i) => ({ name: `zip-bench-${i}.bin`, size: fileBytes }));
  const up = await uploadMultipart(`${target.baseUrl}/api/v1/upload`, files);
  s.uploads.push(up.json);
  const reply = asUploadReply(up.json);
  if ((up.status !== 201 && up.status !== 200) || !reply?.short_code || reply.files.length !== count) {
    throw new Error(`upload failed: HTTP ${up.status} ${up.body.slice(0, 200)}`);
  }
  console.log(`${target.name}: uploaded ${count} x ${formatSize(fileBytes)} as bundle ${reply.short_code} (${fixed(mbps(up.bodyBytes, up.ms))} MB/s)`);
  const zipUrl = `${target.baseUrl}/zip/${reply.short_code}`;
  const plainUrls = reply.files.map((f) => `${target.baseUrl}/api/v1/download/${f.id}`);
  const total = fileBytes * count;
  // the archive size: data plus a few hundred bytes of headers
  const zipBytes = check(await download(zipUrl), 'zip warm-up');
  if (zipBytes <= total || zipBytes > total + 4096 * count) throw new Error(`implausible archive size ${zipBytes}`);
  for (const u of plainUrls) check(await download(u), 'plain warm-up', fileBytes);
  s.zipBytes = zipBytes;
  s.idleRssMiB = target.rss.currentMiB();
  console.log(`${target.name}: archive ${zipBytes} bytes (${zipBytes - total} bytes of ZIP structure); idle server RSS ${fixed(s.idleRssMiB)} MiB`);
  s.bodies = {
    zip: async () => check(await download(zipUrl), 'zip', zipBytes),
    plain: async () => {
      let n = 0;
      for (const u of plainUrls) n += check(await download(u), 'plain', fileBytes);
      return n;
    },
  };
}

async function main(): Promise<void> {
  const env = environment();
  const fileBytes = envInt('BENCH_ZIP_MB', 256) * MiB;
  const count = envInt('BENCH_ZIP_FILES', 4);
  const runs = envInt('BENCH_RUNS', 3);
  const databaseUrl = process.env.DATABASE_URL ?? DEFAULT_DATABASE_URL;
  printHeader('zip: one bundle as GET /zip/<code> vs GET /api/v1/download/<id> per file', env, {
    files: `${count}x${formatSize(fileBytes)}`,
    runs,
    database: databaseUrl.replace(/\/\/[^@]*@/, '//'),
  });
  await ensureDatabase(databaseUrl);
  const subjects: Subject[] = [];
  try {
    // with BENCH_TREE_ALT, `sluice-base` too: the servers take turns round by round (A, B, A, B ...)
    for (const name of selectServers(['sluice'])) {
      const s: Subject = {
        target: await startTarget(name, { databaseUrl }),
        results: [
          { mode: 'zip', runs: [], errors: [] },
          { mode: 'plain', runs: [], errors: [] },
        ],
        idleRssMiB: 0,
        zipBytes: 0,
        uploads: [],
      };
      subjects.push(s);
      await prepare(s, fileBytes, count);
    }
    for (let r = 0; r < runs; r++) {
      const order: Mode[] = r % 2 === 0 ? ['zip', 'plain'] : ['plain', 'zip']; // rotate who goes first
      for (const s of subjects) {
        for (const mode of order) {
          const res = s.results.find((x) => x.mode === mode)!;
          try {
            const run = await measure(s.target, s.bodies![mode]);
            res.runs.push(run);
            console.log(`  run ${r + 1} ${s.target.name} ${mode.padEnd(5)}: ${fixed(run.mbps)} MB/s, peak RSS ${fixed(run.peakRssMiB)} MiB, CPU ${fixed(run.cpuPerGB, 2)} s/GB`);
          } catch (err) {
            const msg = describeFailure(s.target, String(err));
            res.errors.push(msg);
            console.log(`  run ${r + 1} ${s.target.name} ${mode.padEnd(5)}: ERROR ${msg}`);
          }
        }
      }
    }
  } finally {
    for (const s of subjects) await cleanupUploads(s.target, s.uploads).catch((err: unknown) => console.warn(`cleanup: ${String(err)}`));
    await closeAll();
  }

  const rows: Cell[][] = [];
  for (const s of subjects) {
    for (const c of s.results) {
      if (c.runs.length === 0) continue;
      c.mbps = median(c.runs.map((x) => x.mbps));
      c.wallMs = median(c.runs.map((x) => x.ms));
      c.peakRssMiB = Math.max(...c.runs.map((x) => x.peakRssMiB));
      c.cpuPerGB = median(c.runs.map((x) => x.cpuPerGB));
    }
    const plain = s.results.find((c) => c.mode === 'plain');
    rows.push(...s.results.map((c): Cell[] => [
      s.target.name,
      c.mode === 'zip' ? 'GET /zip/<code>' : `GET /api/v1/download x${count}`,
      formatSize(c.runs[0]?.bytes ?? 0),
      fixed(c.mbps),
      fixed(c.wallMs === undefined ? undefined : c.wallMs / 1000, 2),
      fixed(c.peakRssMiB),
      fixed(c.peakRssMiB === undefined ? undefined : c.peakRssMiB - s.idleRssMiB),
      fixed(c.cpuPerGB, 2),
      c.mode === 'zip' ? ratio(c.mbps, plain?.mbps) : '',
      c.errors.length > 0 ? `${c.errors.length} failed` : '',
    ]));
  }
  console.log(`\nmedians of ${runs} run(s); MB/s = 10^6 bytes/s; RSS = server peak (max of runs); idle RSS ${subjects.map((s) => `${s.target.name} ${fixed(s.idleRssMiB)} MiB`).join(', ')}`);
  printTable(['server', 'mode', 'bytes', 'MB/s', 'wall s', 'peak RSS MiB', 'over idle', 'srv CPU s/GB', 'zip/plain', 'errors'], rows);
  const mine = subjects.find((s) => s.target.name === 'sluice');
  const zip = mine?.results[0];
  const plain = mine?.results[1];
  if (zip?.mbps !== undefined && plain?.mbps !== undefined) {
    console.log(`target zip >= 0.80x plain: ${zip.mbps / plain.mbps >= 0.8 ? 'met' : 'NOT met'} (${ratio(zip.mbps, plain.mbps)})`);
  }
  const base = subjects.find((s) => s.target.name === 'sluice-base');
  const trees = mine && base
    ? printTreeComparison((['zip', 'plain'] as const).map((mode, i) => ({
      label: mode === 'zip' ? 'GET /zip/<code>' : `GET /api/v1/download x${count}`,
      ...paired(mine.results[i]!.runs, base.results[i]!.runs),
    })))
    : undefined;
  const file = writeResults('zip', {
    scenario: 'zip',
    environment: env,
    runs,
    fileBytes,
    files: count,
    servers: subjects.map((s) => ({ server: s.target.name, archiveBytes: s.zipBytes, idleRssMiB: s.idleRssMiB, results: s.results })),
    trees,
  });
  console.log(`\nJSON: ${file}`);
  if (subjects.some((s) => s.results.some((c) => c.errors.length > 0 || c.runs.length === 0))) process.exitCode = 1;
}

main().catch(async (err: unknown) => {
  console.error(err);
  await closeAll();
  process.exit(1);
});
