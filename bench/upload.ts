// Upload throughput: one multipart stream of SIZE, and CONC concurrent streams of SIZE/CONC each (same total),
// against Sluice, node:http+busboy, express+multer, nginx and bare uWS (receive only). Medians of BENCH_RUNS;
// peak server RSS is the max over runs.
//   node --import tsx bench/upload.ts [256M,1G]     env: BENCH_SIZES BENCH_RUNS BENCH_CONCURRENCY BENCH_SERVERS
import {
  envInt, environment, fixed, formatSize, mbps, median, printHeader, printTable, ratio, runLine, sizesFromArgs,
  writeResults, MiB, type Cell,
} from './lib/report.ts';
import { CONTENT_LENGTH_LIMIT, uploadMultipart, type UploadResult } from './lib/http-client.ts';
import { closeAll, describeFailure, selectServers, startTarget, type Target } from './lib/targets.ts';
import { compareTreeRows } from './lib/tree-compare.ts';
import { asUploadReply, cleanupUploads } from './lib/sluice-api.ts';
import { durableWrite } from './lib/disk-ceiling.ts';
import type { Measured } from './lib/summary.ts';

/**
 * The disk's durable write speed for the same bytes, sampled in the rotation (BENCH_DISK=0 skips it):
 * with O_DIRECT as Sluice writes, and through the page cache; the faster is a durable server's ceiling.
 */
const DISK = 'disk (O_DIRECT+fsync)';
const DISK_CACHED = 'disk (page cache+fsync)';
/**
 * What a durable server could reach at best in this run: take the body as fast as the fastest server took it,
 * write it as fast as a disk row wrote it, overlapping the two, then wait for the fsync that row waited for after
 * its last write; the better of the two disk rows. Flushing while the body arrives does not shorten that wait on
 * this kind of machine: the flushes stall the writes behind them (bench/RESULTS.md, sessions 16-19).
 */
const BOUND = 'durable bound';
/** Rows that are not servers: the disk rows and the bound. They get the peer ratios, as Sluice does. */
const isReference = (server: string): boolean => server === DISK || server === DISK_CACHED || server === BOUND;
const WITH_DISK = process.env.BENCH_DISK !== '0';

interface Run {
  ms: number;
  mbps: number;
  peakRssMiB: number;
  /** Server CPU seconds (all threads) per 10^9 bytes moved. */
  cpuPerGB: number;
  /**
   * Until the last body byte of every stream was sent; the rest of `ms` is the wait for the replies.
   * For the disk row: until its writes were done; the rest is its fsyncs.
   */
  sentMs: number;
  chunked: boolean;
}

interface CaseResult extends Measured<Run> {
  server: string;
  size: number;
  streams: number;
  encoding: string;
  sentMs?: number;
}

const PATH = '/api/v1/upload';
/** BENCH_CHUNKED=1 sends every body chunked, to compare servers at equal framing below 10^9 bytes too. */
const FORCE_CHUNKED = process.env.BENCH_CHUNKED === '1' ? true : undefined;

function splitSize(total: number, streams: number): number[] {
  const each = Math.floor(total / streams);
  return Array.from({ length: streams }, (_, i) => (i === streams - 1 ? total - each * (streams - 1) : each));
}

function checkReply(r: UploadResult, size: number): string | undefined {
  if (r.status !== 201 && r.status !== 200) return `HTTP ${r.status}: ${r.body.slice(0, 200)}`;
  const reply = asUploadReply(r.json);
  if (!reply || reply.files.length !== 1) return `unexpected reply: ${r.body.slice(0, 200)}`;
  const got = reply.files[0]!.size;
  if (got !== undefined && Number(got) !== size) return `server stored ${got} bytes, sent ${size}`;
  return undefined;
}

async function runOnce(target: Target, sizes: readonly number[], run: number): Promise<{ run?: Run; error?: string }> {
  target.rss.reset();
  const started = performance.now();
  const settled = await Promise.allSettled(
    sizes.map((size, i) =>
      uploadMultipart(target.baseUrl + PATH, [{ name: `bench-${run}-${i}.bin`, size }], { chunked: FORCE_CHUNKED }),
    ),
  );
  const ms = performance.now() - started;
  const peakRssMiB = target.rss.peakMiB();
  const cpu = target.rss.cpuSeconds();
  const replies = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value.json] : []));
  await cleanupUploads(target, replies);
  for (const [i, s] of settled.entries()) {
    const error = s.status === 'rejected' ? String(s.reason) : checkReply(s.value, sizes[i]!);
    if (error) return { error };
  }
  const total = sizes.reduce((a, b) => a + b, 0);
  const chunked = settled.some((s) => s.status === 'fulfilled' && s.value.chunked);
  // (each stream starts within microseconds of `started`, so its sentMs is on the same clock)
  const sentMs = Math.max(...settled.map((s) => (s.status === 'fulfilled' ? s.value.sentMs : NaN)));
  return { run: { ms, mbps: mbps(total, ms), peakRssMiB, cpuPerGB: cpu / (total / 1e9), sentMs, chunked } };
}

/** BOUND per round: the fastest body among the servers' runs of that round, paired with each disk row's run. */
function durableBound(servers: readonly CaseResult[], disks: readonly CaseResult[], size: number, streams: number): CaseResult {
  const out: CaseResult = { server: BOUND, size, streams, encoding: 'none', runs: [], errors: [] };
  const rounds = Math.min(...disks.map((d) => d.runs.length));
  const complete = servers.filter((c) => c.errors.length === 0 && c.runs.length === rounds);
  if (complete.length === 0) return out;
  for (let r = 0; r < rounds; r++) {
    const body = Math.min(...complete.map((c) => c.runs[r]!.sentMs));
    // per disk row: its writes can end no sooner than the body; its fsync wait follows
    const ends = disks.map((d) => {
      const { sentMs, ms } = d.runs[r]!;
      const written = Math.max(body, sentMs);
      return { written, ms: written + (ms - sentMs) };
    });
    const best = ends.reduce((a, b) => (b.ms < a.ms ? b : a));
    out.runs.push({ ms: best.ms, mbps: mbps(size, best.ms), peakRssMiB: NaN, cpuPerGB: NaN, sentMs: best.written, chunked: false });
  }
  return out;
}

async function main(): Promise<void> {
  const env = environment();
  const sizes = sizesFromArgs('1G,4G');
  const runs = envInt('BENCH_RUNS', 3);
  const conc = envInt('BENCH_CONCURRENCY', 8);
  printHeader('upload: POST /api/v1/upload, multipart field files[]', env, {
    sizes: sizes.map(formatSize).join(','), runs, concurrency: conc,
  });
  console.log(
    `single = 1 stream of SIZE; x${conc} = ${conc} concurrent streams of SIZE/${conc} (same total bytes).\n` +
      `Request bodies >= ${CONTENT_LENGTH_LIMIT} bytes go chunked (uWS v20.30 drops 10-digit Content-Length), ` +
      'smaller ones carry Content-Length; the same rule for every server.',
  );
  const names = selectServers(['sluice', 'node-busboy', 'express-multer', 'express-multer-fsync', 'nginx', 'uws-sink', 'uws-disk']);
  const targets: Target[] = [];
  for (const name of names) {
    try {
      targets.push(await startTarget(name, { databaseUrl: process.env.DATABASE_URL }));
    } catch (err) {
      console.error(`! ${name} did not start: ${String(err)}`);
    }
  }
  for (const t of targets) {
    const warm = await runOnce(t, [16 * MiB], 0);
    console.log(`${t.name}: pid ${t.proc.pid}, idle RSS ${fixed(t.rss.currentMiB())} MiB, warm-up ${warm.error ?? 'ok'}`);
  }

  const results: CaseResult[] = [];
  for (const size of sizes) {
    for (const streams of [1, conc]) {
      const parts = splitSize(size, streams);
      const cases = targets.map((t): CaseResult => ({ server: t.name, size, streams, encoding: '', runs: [], errors: [] }));
      const disks: CaseResult[] = [DISK, DISK_CACHED].map((server) => ({ server, size, streams, encoding: 'none', runs: [], errors: [] }));
      for (let r = 0; r < runs; r++) {
        for (const disk of WITH_DISK ? disks : []) {
          const { ms, writtenMs } = await durableWrite(parts, disk.server === DISK_CACHED);
          disk.runs.push({ ms, mbps: mbps(size, ms), peakRssMiB: NaN, cpuPerGB: NaN, sentMs: writtenMs, chunked: false });
          const split = `written in ${fixed(writtenMs / 1000, 2)} s + fsync ${fixed((ms - writtenMs) / 1000, 2)} s`;
          console.log(`  ${formatSize(size)} ${streams === 1 ? 'single' : `x${streams}`} run ${r + 1} ${disk.server}: ${fixed(mbps(size, ms))} MB/s, ${split}`);
        }
        // rotate the order each run so no server always goes first after a disk flush
        for (let k = 0; k < targets.length; k++) {
          const i = (k + r) % targets.length;
          const out = await runOnce(targets[i]!, parts, r + 1);
          const c = cases[i]!;
          if (out.run) c.runs.push(out.run);
          else c.errors.push((out.error = describeFailure(targets[i]!, out.error ?? 'unknown')));
          const label = `${formatSize(size)} ${streams === 1 ? 'single' : `x${streams}`} run ${r + 1} ${c.server}`;
          const after = out.run ? `, sent in ${fixed(out.run.sentMs / 1000, 2)} s + reply after ${fixed((out.run.ms - out.run.sentMs) / 1000, 2)} s` : '';
          console.log(`  ${label}: ${runLine(out.run, out.error)}${after}`);
        }
      }
      for (const c of cases) {
        if (c.runs.length > 0) {
          c.encoding = c.runs[0]!.chunked ? 'chunked' : 'length';
          c.mbps = median(c.runs.map((x) => x.mbps));
          c.wallMs = median(c.runs.map((x) => x.ms));
          c.peakRssMiB = Math.max(...c.runs.map((x) => x.peakRssMiB));
          c.cpuPerGB = median(c.runs.map((x) => x.cpuPerGB));
          c.sentMs = median(c.runs.map((x) => x.sentMs));
        }
      }
      const bound = durableBound(cases, disks, size, streams);
      for (const ref of [...disks, bound].filter((d) => d.runs.length > 0)) {
        ref.mbps = median(ref.runs.map((x) => x.mbps));
        ref.wallMs = median(ref.runs.map((x) => x.ms));
        ref.sentMs = median(ref.runs.map((x) => x.sentMs));
        cases.push(ref);
      }
      results.push(...cases);
    }
  }
  await closeAll();

  const find = (server: string, c: CaseResult): number | undefined =>
    results.find((x) => x.server === server && x.size === c.size && x.streams === c.streams)?.mbps;
  // The bound's ratios are the most a server that syncs before it answers could read here (the faster disk row's, were
  // its network free).
  const vsPeer = (c: CaseResult, peer: string): string =>
    c.server === 'sluice' || c.server === 'uws-disk' || isReference(c.server) ? ratio(c.mbps, find(peer, c)) : '';
  const rows: Cell[][] = results.map((c) => [
    c.server,
    formatSize(c.size),
    c.streams === 1 ? '1' : `${c.streams} x ${formatSize(c.size / c.streams)}`,
    c.encoding,
    fixed(c.mbps),
    fixed(c.wallMs === undefined ? undefined : c.wallMs / 1000, 2),
    fixed(c.sentMs === undefined ? undefined : c.sentMs / 1000, 2),
    fixed(c.peakRssMiB),
    fixed(c.cpuPerGB, 2),
    vsPeer(c, 'express-multer'),
    vsPeer(c, 'express-multer-fsync'),
    vsPeer(c, 'nginx'),
    vsPeer(c, 'node-busboy'),
    c.server === 'sluice' ? ratio(c.mbps, find(DISK, c)) : '',
    c.server === 'sluice' ? ratio(c.mbps, find(DISK_CACHED, c)) : '',
    c.errors.length > 0 ? `${c.errors.length} failed` : '',
  ]);
  console.log(`\nmedians of ${runs} run(s); MB/s = 10^6 bytes/s over the whole body; RSS = server peak (max of runs)`);
  console.log(
    `${DISK}: the same bytes from memory to disk with O_DIRECT and fsync, no network; ${DISK_CACHED}: the same\n` +
      'through the page cache, then fsync. The faster of the two is a durable server\'s ceiling: its ratios are the most\n' +
      'that any server which syncs before it answers could read against the peers in this run, were its network free.\n' +
      `${BOUND}: were it not, the least such a server could take: the fastest server's body time or a disk row's\n` +
      "writes, whichever is longer, then that row's wait for its fsync; the better row, paired by round, then the median",
  );
  console.log(
    "sent s = until the client's last body byte went into the socket (the slowest stream); the rest of wall s is the\n" +
      'wait for the replies after it: for a durable server mostly its final fsync, the disk flushing what it was given\n' +
      '(for the disk rows, sent s is until their writes were done and the rest their fsyncs)',
  );
  if (names.includes('uws-sink')) {
    console.log(
      'uws-sink: bare uWebSockets.js taking the body and dropping it (one copy per chunk, no parsing, no disk): the\n' +
        "stack's receive ceiling; what Sluice takes beyond it is its own work on the bytes and the wait for the disk",
    );
  }
  if (names.includes('uws-disk')) {
    console.log(
      'uws-disk: bare uWebSockets.js writing the body as Sluice writes a file (1 MiB O_DIRECT writes, then fsync of the\n' +
        'file and its directory; no parsing, no checksum, no database): the least a durable server on this stack does,\n' +
        'its receive and its writes sharing the cores with the client as Sluice\'s do',
    );
  }
  printTable(
    ['server', 'total', 'streams', 'body', 'MB/s', 'wall s', 'sent s', 'peak RSS MiB', 'srv CPU s/GB', 'vs express-multer', 'vs multer+fsync', 'vs nginx', 'vs node-busboy', 'vs disk', 'vs disk cached', 'errors'],
    rows,
  );
  const trees = compareTreeRows(results, (size, streams) => `${formatSize(size)} ${streams === 1 ? 'single' : `x${streams}`}`);
  const file = writeResults('upload', { scenario: 'upload', environment: env, runs, concurrency: conc, results, trees });
  console.log(`\nJSON: ${file}`);
  if (results.some((c) => c.errors.length > 0)) process.exitCode = 1;
}

main().catch(async (err: unknown) => {
  console.error(err);
  await closeAll();
  process.exit(1);
});
