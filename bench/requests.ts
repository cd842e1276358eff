// Small-request throughput with autocannon: GET /api/v1/bundle/<code> (bundle + 3 files from PostgreSQL),
// its /status, a 1 KiB download, a small multipart upload (one 1 KiB file, a new bundle each) and GET /healthz,
// on Sluice and on node:http + postgres doing the same work (bench/baselines/node-pg.ts). Both use real PostgreSQL:
// a fresh database beside DATABASE_URL's (default `sluice_bench` on the local server), named `<name>_run<pid>`,
// created for the run and dropped at its end, so both start from empty tables.
// Where wrk is installed, every case is measured again under wrk (autocannon saturates near 45k req/s here).
//   node --import tsx bench/requests.ts
//   env: BENCH_DURATION BENCH_CONNECTIONS BENCH_RUNS BENCH_WARMUP BENCH_SERVERS BENCH_PATHS BENCH_WRK=0 BENCH_WRK_DURATION
import { createRequire } from 'node:module';
import {
  envInt, environment, fixed, median, printHeader, printTable, ratio, writeResults, type Cell,
} from './lib/report.ts';
import { uploadMultipart } from './lib/http-client.ts';
import { httpGet } from './lib/proc.ts';
import { asUploadReply } from './lib/sluice-api.ts';
import { runWrk, wrkAvailable, type WrkRun } from './lib/wrk.ts';
import { ALT_TREE_DIR, closeAll, describeFailure, freshDatabase, selectServers, startBaseline, startSluice, type Target } from './lib/targets.ts';

interface Histogram {
  average: number;
  p50: number;
  p99: number;
}
interface AutocannonResult {
  requests: Histogram & { total: number };
  latency: Histogram;
  non2xx: number;
  errors: number;
  timeouts: number;
}
type Autocannon = (opts: {
  url: string;
  connections: number;
  duration: number;
  method?: string;
  body?: Buffer;
  headers?: Record<string, string>;
}) => Promise<AutocannonResult>;

/** One kind of request: its label in the table, and how to send it against a server's seed. */
interface Kind {
  label: string;
  path: (seed: Seed) => string;
  method?: string;
  body?: Buffer;
  headers?: Record<string, string>;
}
interface Seed {
  code: string;
  /** The seeded 1 KiB file. */
  fileId: number;
}

const BOUNDARY = 'benchboundary7MA4YWxkTrZu0gW';
const SMALL_UPLOAD = Buffer.concat([
  Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="files[]"; filename="small.txt"\r\nContent-Type: text/plain\r\n\r\n`),
  Buffer.alloc(1024, 120),
  Buffer.from(`\r\n--${BOUNDARY}--\r\n`),
]);
const KINDS: Kind[] = [
  { label: '/api/v1/bundle/:code', path: (s) => `/api/v1/bundle/${s.code}` },
  { label: '/api/v1/bundle/:code/status', path: (s) => `/api/v1/bundle/${s.code}/status` },
  { label: 'download 1 KiB', path: (s) => `/api/v1/download/${s.fileId}` },
  {
    label: 'upload 1 KiB',
    path: () => '/api/v1/upload',
    method: 'POST',
    body: SMALL_UPLOAD,
    headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` },
  },
  { label: '/healthz', path: () => '/healthz' },
];
const selectedKinds = (): Kind[] => {
  const wanted = process.env.BENCH_PATHS?.split(',').map((s) => s.trim());
  return wanted ? KINDS.filter((k) => wanted.some((w) => k.label.includes(w))) : KINDS;
};
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

interface Run {
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  peakRssMiB: number;
  /** Server CPU microseconds (all threads) per completed request. */
  cpuUsPerReq: number;
}

interface CaseResult {
  server: string;
  path: string;
  kind: string;
  runs: Run[];
  rps?: number;
  p50?: number;
  p99?: number;
  peakRssMiB?: number;
  cpuUsPerReq?: number;
  /** The same request under wrk, where installed (see lib/wrk.ts). */
  wrkRuns: WrkRun[];
  wrkRps?: number;
}

const BASELINE_CODE = 'bench';

/** Uploads 3 small files to Sluice and returns the new bundle's code and the 1 KiB file's id. */
async function seedSluice(t: Target): Promise<Seed> {
  const r = await uploadMultipart(`${t.baseUrl}/api/v1/upload`, [
    { name: 'a.txt', size: 1024 },
    { name: 'b.bin', size: 10240 },
    { name: 'c.bin', size: 102400 },
  ]);
  const reply = asUploadReply(r.json);
  const code = reply?.short_code;
  const fileId = reply?.files.find((f) => f.name === 'a.txt')?.id;
  if ((r.status !== 201 && r.status !== 200) || !code || fileId === undefined) {
    throw new Error(`seed upload: HTTP ${r.status} ${r.body.slice(0, 200)}`);
  }
  return { code, fileId: Number(fileId) };
}

function request(t: Target, kind: Kind, seed: Seed, connections: number, duration: number): Parameters<Autocannon>[0] {
  const opts: Parameters<Autocannon>[0] = { url: t.baseUrl + kind.path(seed), connections, duration };
  // autocannon refuses explicit undefined options
  if (kind.method) Object.assign(opts, { method: kind.method, body: kind.body, headers: kind.headers });
  return opts;
}

async function measure(t: Target, opts: Parameters<Autocannon>[0]): Promise<Run> {
  t.rss.reset();
  const r = await autocannon(opts);
  return {
    rps: r.requests.average,
    p50: r.latency.p50,
    p99: r.latency.p99,
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    peakRssMiB: t.rss.peakMiB(),
    cpuUsPerReq: (t.rss.cpuSeconds() * 1e6) / Math.max(1, r.requests.total),
  };
}

async function main(): Promise<void> {
  const env = environment();
  const duration = envInt('BENCH_DURATION', 10);
  const connections = envInt('BENCH_CONNECTIONS', 100);
  const runs = envInt('BENCH_RUNS', 3);
  const warmup = envInt('BENCH_WARMUP', 2);
  const dbUrl = await freshDatabase(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/sluice_bench');
  printHeader('requests: autocannon', env, { connections, duration: `${duration}s`, runs, warmup: `${warmup}s` });
  console.log(`database: ${dbUrl.replace(/\/\/[^@]*@/, '//')}`);

  const cases: { target: Target; kind: Kind; seed: Seed; result: CaseResult }[] = [];
  // `sluice` counts requests in its in-process store; `sluice-redis` in Redis (one Lua round trip
  // per request), with the budget raised out of the way: the limiter's cost is the difference.
  const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  for (const name of selectServers(['sluice', 'sluice-redis', 'node-pg'])) {
    try {
      const isSluice = name.startsWith('sluice');
      const t = isSluice
        ? await startSluice({ databaseUrl: dbUrl, name, ...(name === 'sluice-redis' ? { redisUrl } : {}), ...(name === 'sluice-base' ? { treeDir: ALT_TREE_DIR } : {}) })
        : await startBaseline(name, { DATABASE_URL: dbUrl, BUNDLE_CODE: BASELINE_CODE });
      // The baseline's seed is its first bundle; its first file (id 1) is the 1 KiB one.
      const seed = isSluice ? await seedSluice(t) : { code: BASELINE_CODE, fileId: 1 };
      for (const kind of selectedKinds()) {
        const path = kind.path(seed);
        if (kind.method === undefined) {
          const check = await httpGet(t.baseUrl + path);
          if (check.status !== 200) throw new Error(`GET ${path}: HTTP ${check.status} ${check.body.slice(0, 200)}`);
        }
        cases.push({ target: t, kind, seed, result: { server: name, path, kind: kind.label, runs: [], wrkRuns: [] } });
      }
      console.log(`${name}: pid ${t.proc.pid}, idle RSS ${fixed(t.rss.currentMiB())} MiB`);
    } catch (err) {
      console.error(`! ${name}: ${String(err)}`);
    }
  }

  for (const c of cases) await autocannon(request(c.target, c.kind, c.seed, connections, warmup));
  for (let r = 0; r < runs; r++) {
    for (let k = 0; k < cases.length; k++) {
      const c = cases[(k + r) % cases.length]!; // rotate who goes first
      const run = await measure(c.target, request(c.target, c.kind, c.seed, connections, duration));
      c.result.runs.push(run);
      const bad = run.non2xx + run.errors > 0
        ? describeFailure(c.target, `, non-2xx ${run.non2xx}, errors ${run.errors}`)
        : '';
      console.log(
        `  run ${r + 1} ${c.result.server} ${c.kind.label}: ${fixed(run.rps)} req/s, p50 ${run.p50} ms, ` +
          `p99 ${run.p99} ms, CPU ${fixed(run.cpuUsPerReq)} us/req${bad}`,
      );
    }
  }
  // The same cases under wrk: autocannon's own ceiling (~45k req/s here) caps the fast ones.
  const wrkDuration = envInt('BENCH_WRK_DURATION', 5);
  const useWrk = wrkAvailable();
  if (useWrk) {
    for (let r = 0; r < runs; r++) {
      for (let k = 0; k < cases.length; k++) {
        const c = cases[(k + r) % cases.length]!;
        const run = await runWrk({ ...request(c.target, c.kind, c.seed, connections, wrkDuration), durationS: wrkDuration });
        c.result.wrkRuns.push(run);
        const bad = run.non2xx + run.errors > 0 ? `, non-2xx ${run.non2xx}, errors ${run.errors}` : '';
        console.log(`  wrk run ${r + 1} ${c.result.server} ${c.kind.label}: ${fixed(run.rps)} req/s, p50 ${fixed(run.p50, 2)} ms, p99 ${fixed(run.p99, 2)} ms${bad}`);
      }
    }
  } else console.log('wrk is not installed (or BENCH_WRK=0): autocannon only');
  await closeAll();

  const results = cases.map((c) => c.result);
  for (const c of results) {
    c.rps = median(c.runs.map((x) => x.rps));
    c.p50 = median(c.runs.map((x) => x.p50));
    c.p99 = median(c.runs.map((x) => x.p99));
    c.peakRssMiB = Math.max(...c.runs.map((x) => x.peakRssMiB));
    c.cpuUsPerReq = median(c.runs.map((x) => x.cpuUsPerReq));
    if (c.wrkRuns.length > 0) c.wrkRps = median(c.wrkRuns.map((x) => x.rps));
  }
  const baseline = (c: CaseResult): number | undefined =>
    results.find((x) => x.server === 'node-pg' && x.kind === c.kind)?.rps;
  const inProcess = (c: CaseResult): number | undefined =>
    results.find((x) => x.server === 'sluice' && x.kind === c.kind)?.rps;
  const rows: Cell[][] = results.map((c) => [
    c.server,
    c.kind,
    fixed(c.rps),
    fixed(c.p50, 1),
    fixed(c.p99, 1),
    c.runs.reduce((n, x) => n + x.non2xx, 0),
    c.runs.reduce((n, x) => n + x.errors, 0),
    fixed(c.peakRssMiB),
    fixed(c.cpuUsPerReq),
    c.server.startsWith('sluice') ? ratio(c.rps, baseline(c)) : '',
    c.server === 'sluice-redis' ? ratio(c.rps, inProcess(c)) : '',
  ]);
  console.log(
    `\nmedians of ${runs} run(s) x ${duration}s, ${connections} connections. autocannon runs in this process and ` +
      'saturates near ~45k req/s here: figures close to that are client-bound.',
  );
  printTable(['server', 'path', 'req/s', 'p50 ms', 'p99 ms', 'non-2xx', 'errors', 'peak RSS MiB', 'srv CPU us/req', 'vs node-pg', 'redis vs in-process'], rows);
  if (useWrk) {
    const wrkBaseline = (c: CaseResult): number | undefined =>
      results.find((x) => x.server === 'node-pg' && x.kind === c.kind)?.wrkRps;
    console.log(`\nthe same under wrk (2 threads, ${connections} connections, medians of ${runs} x ${wrkDuration}s):`);
    printTable(
      ['server', 'path', 'wrk req/s', 'p50 ms', 'p99 ms', 'non-2xx', 'errors', 'vs node-pg'],
      results.map((c) => [
        c.server,
        c.kind,
        fixed(c.wrkRps),
        fixed(median(c.wrkRuns.map((x) => x.p50)), 2),
        fixed(median(c.wrkRuns.map((x) => x.p99)), 2),
        c.wrkRuns.reduce((n, x) => n + x.non2xx, 0),
        c.wrkRuns.reduce((n, x) => n + x.errors, 0),
        c.server.startsWith('sluice') ? ratio(c.wrkRps, wrkBaseline(c)) : '',
      ]),
    );
  }
  const file = writeResults('requests', { scenario: 'requests', environment: env, connections, duration, runs, results });
  console.log(`\nJSON: ${file}`);
  if (results.some((c) => [...c.runs, ...c.wrkRuns].some((x) => x.non2xx + x.errors > 0))) process.exitCode = 1;
}

main().catch(async (err: unknown) => {
  console.error(err);
  await closeAll();
  process.exit(1);
});
