// A whole Sluice node on an S3 bucket (a throwaway Ceph radosgw on loopback, memstore) against the AWS SDK talking
// to the same bucket straight from this process, in alternating rounds:
//   upload:   POST /api/v1/upload through Sluice (an API key on the premium plan)  vs  lib-storage Upload
//             and the same body through bench/baselines/uws-s3.ts, the bare stack's least CPU per GB
//   download: GET /d/<id> through Sluice                                           vs  GetObject
//   zip:      GET /zip/<code> of that one-file bundle                              vs  Sluice's own download
//   zip of small files: GET /zip/<code> of BENCH_ZIP_FILES files of 64 KiB        vs  a GetObject of each, in turn
// with the Sluice process's peak RSS (sampled VmRSS and VmHWM from /proc) and CPU in every case, and an SDK baseline's
// CPU (this process's: the least the SDK itself spends on the same bytes); then the memory cases:
// one upload and download of BENCH_LARGE, and BENCH_PARALLEL uploads, then downloads, of BENCH_SIZE8 at once.
//   node --import tsx bench/s3-server.ts [SIZE]     (default 1G)
//   env: BENCH_RUNS (3) BENCH_ZIP_FILES (300) BENCH_LARGE (4G) BENCH_PARALLEL (8) BENCH_SIZE8 (512M) BENCH_MEMORY (1; 0 skips the memory
//        cases) DATABASE_URL (a fresh database is made beside it; default postgres://postgres@127.0.0.1:5432/sluice_bench)
//        REDIS_URL (redis://127.0.0.1:6379) BENCH_S3_TLS (1: radosgw serves https) SLUICE_ENV (extra settings for the server, e.g. "S3_PART_BUFFER_MIB=32")
import { spawnSync } from 'node:child_process';
import { Readable } from 'node:stream';
import { DeleteObjectCommand, GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { startCeph, type Ceph } from '../test/helpers/ceph.ts';
import { download } from './lib/download-client.ts';
import { patternChunks, uploadMultipart } from './lib/http-client.ts';
import {
  envInt, environment, fixed, formatSize, mbps, median, parseSize, printHeader, printTable, ratio, REPO_DIR, sizesFromArgs, writeResults,
} from './lib/report.ts';
import { asUploadReply, cleanupUploads } from './lib/sluice-api.ts';
import { closeAll, describeFailure, envSettings, freshDatabase, SLUICE_BIN, startBaseline, startSluice, type Target } from './lib/targets.ts';

// The SDK's notice about Node 22 at every client (src/storage/s3/client.ts says why it is not for us).
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const SIZE = sizesFromArgs('1G')[0]!;
// 0: the memory cases alone.
const RUNS = process.env.BENCH_RUNS === '0' ? 0 : envInt('BENCH_RUNS', 3);
const LARGE = parseSize(process.env.BENCH_LARGE ?? '4G');
const PARALLEL = envInt('BENCH_PARALLEL', 8);
const SIZE8 = parseSize(process.env.BENCH_SIZE8 ?? '512M');
const MEMORY = process.env.BENCH_MEMORY !== '0';
const ZIP_FILES = envInt('BENCH_ZIP_FILES', 300);
// radosgw over https: Sluice then sends part payloads unsigned (UNSIGNED-PAYLOAD), TLS guarding them instead.
const TLS = process.env.BENCH_S3_TLS === '1';
const SMALL = 64 * 1024;
const RSS_TARGET_MIB = 160;

/**
 * One measured case: MB/s and the server's CPU seconds per GB of each run, and its peak RSS over all of
 * them; `ownCpuPerGB` is this process's, which is where the SDK runs for a baseline.
 */
interface Case {
  mbps: number[];
  cpuPerGB: number[];
  ownCpuPerGB: number[];
  peakMiB: number;
}
const newCase = (): Case => ({ mbps: [], cpuPerGB: [], ownCpuPerGB: [], peakMiB: 0 });
/** Baselines run by the SDK in this process: their CPU is this process's, not the idle server's. */
const SDK_BASELINES: readonly string[] = ['upload lib-storage', 'download GetObject', 'zip small: GetObject each'];

interface Node {
  sluice: Target;
  /** bench/baselines/uws-s3.ts on the same bucket. */
  bare: Target;
  key: string;
  ceph: Ceph;
  s3: S3Client;
}

/** Runs fn with the server's peak RSS reset before it; adds MB/s and the peak to `c`. `server`: whose CPU and RSS count. */
async function measure<T>(node: Node, c: Case | undefined, bytes: number, fn: () => Promise<T>, server = node.sluice): Promise<T> {
  server.rss.reset();
  const t = performance.now();
  const own = process.cpuUsage();
  const out = await fn();
  const ms = performance.now() - t;
  if (c) {
    const used = process.cpuUsage(own);
    c.mbps.push(mbps(bytes, ms));
    c.cpuPerGB.push(server.rss.cpuSeconds() / (bytes / 1e9));
    c.ownCpuPerGB.push((used.user + used.system) / 1e6 / (bytes / 1e9));
    c.peakMiB = Math.max(c.peakMiB, server.rss.peakMiB());
  }
  return out;
}

interface Stored {
  code: string;
  id: string;
  reply: unknown;
}

/** A bundle of `n` files of `size` bytes (one upload). */
async function sluiceUploadMany(node: Node, n: number, size: number): Promise<Stored> {
  const files = Array.from({ length: n }, (_, k) => ({ name: `f${k}.bin`, size }));
  const r = await uploadMultipart(`${node.sluice.baseUrl}/api/v1/upload`, files, { headers: { authorization: `Bearer ${node.key}` } });
  const reply = asUploadReply(r.json);
  if (r.status !== 201 || !reply?.short_code || reply.files.length !== n) throw new Error(`upload of ${n} files: HTTP ${r.status} ${r.body.slice(0, 300)}`);
  return { code: reply.short_code, id: String(reply.files[0]!.id), reply: r.json };
}

async function sluiceUpload(node: Node, size: number, name = 'bench.bin'): Promise<Stored> {
  const r = await uploadMultipart(`${node.sluice.baseUrl}/api/v1/upload`, [{ name, size }], { headers: { authorization: `Bearer ${node.key}` } });
  const reply = asUploadReply(r.json);
  const file = reply?.files[0];
  if (r.status !== 201 || !reply?.short_code || file?.size !== size) throw new Error(`upload: HTTP ${r.status} ${r.body.slice(0, 300)}`);
  return { code: reply.short_code, id: String(file.id), reply: r.json };
}

async function bareUpload(node: Node, size: number): Promise<void> {
  const r = await uploadMultipart(`${node.bare.baseUrl}/api/v1/upload`, [{ name: 'bench.bin', size }]);
  if (r.status !== 201) throw new Error(`uws-s3 upload: HTTP ${r.status} ${r.body.slice(0, 300)}`);
}

async function fetchAll(url: string, atLeast: number): Promise<void> {
  const r = await download(url);
  if (r.status !== 200 || r.bytes !== r.contentLength || r.bytes < atLeast) {
    throw new Error(`GET ${url}: HTTP ${r.status}, ${r.bytes} of ${String(r.contentLength)} bytes`);
  }
}

const directUpload = (node: Node, key: string, size: number): Promise<unknown> =>
  new Upload({ client: node.s3, params: { Bucket: node.ceph.bucket, Key: key, Body: Readable.from(patternChunks(size)) } }).done();

async function directGet(node: Node, key: string, size: number): Promise<void> {
  const o = await node.s3.send(new GetObjectCommand({ Bucket: node.ceph.bucket, Key: key }));
  let n = 0;
  for await (const chunk of o.Body as Readable) n += (chunk as Buffer).length;
  if (n !== size) throw new Error(`GetObject ${key}: ${n} of ${size} bytes`);
}

/**
 * An upload of SIZE straight to the bucket, not measured, then deleted. The first upload after the previous round's
 * purge costs Ceph more CPU than the next one: without this, whichever side went first in a round was the slower,
 * and the order within the round decided the ratio.
 */
async function warmStore(node: Node, i: number): Promise<void> {
  const key = `warm-${i}`;
  await directUpload(node, key, SIZE);
  await node.s3.send(new DeleteObjectCommand({ Bucket: node.ceph.bucket, Key: key }));
}

const CASES = [
  'upload sluice', 'upload lib-storage', 'upload uws-s3', 'download sluice', 'download GetObject', 'zip sluice', 'zip: download sluice',
  'zip small sluice', 'zip small: GetObject each',
] as const;
type CaseName = (typeof CASES)[number];

/** One round: each pair measured back to back, which side goes first alternating by round. */
async function round(node: Node, i: number, cases: Record<CaseName, Case>): Promise<void> {
  const pair = async (a: () => Promise<unknown>, b: () => Promise<unknown>) => {
    if (i % 2 === 0) {
      await a();
      await b();
    } else {
      await b();
      await a();
    }
  };
  const base = node.sluice.baseUrl;
  let stored: Stored | undefined;
  const direct = `direct-${i}`;
  await warmStore(node, i);
  await pair(
    async () => (stored = await measure(node, cases['upload sluice'], SIZE, () => sluiceUpload(node, SIZE))),
    () => measure(node, cases['upload lib-storage'], SIZE, () => directUpload(node, direct, SIZE)),
  );
  await measure(node, cases['upload uws-s3'], SIZE, () => bareUpload(node, SIZE), node.bare);
  await pair(
    () => measure(node, cases['download sluice'], SIZE, () => fetchAll(`${base}/d/${stored!.id}`, SIZE)),
    () => measure(node, cases['download GetObject'], SIZE, () => directGet(node, direct, SIZE)),
  );
  await pair(
    () => measure(node, cases['zip sluice'], SIZE, () => fetchAll(`${base}/zip/${stored!.code}`, SIZE)),
    () => measure(node, cases['zip: download sluice'], SIZE, () => fetchAll(`${base}/d/${stored!.id}`, SIZE)),
  );
  await cleanupUploads(node.sluice, [stored!.reply]);
  await node.s3.send(new DeleteObjectCommand({ Bucket: node.ceph.bucket, Key: direct }));

  // Many small files: what an archive costs per entry, against fetching each object in turn.
  const many = await sluiceUploadMany(node, ZIP_FILES, SMALL);
  const smallKeys = Array.from({ length: ZIP_FILES }, (_, k) => `direct-${i}-small-${k}`);
  const body = Buffer.alloc(SMALL, 7);
  for (let k = 0; k < smallKeys.length; k += 16) {
    await Promise.all(smallKeys.slice(k, k + 16).map((Key) => node.s3.send(new PutObjectCommand({ Bucket: node.ceph.bucket, Key, Body: body }))));
  }
  const total = ZIP_FILES * SMALL;
  await pair(
    () => measure(node, cases['zip small sluice'], total, () => fetchAll(`${base}/zip/${many.code}`, total)),
    () => measure(node, cases['zip small: GetObject each'], total, async () => {
      for (const key of smallKeys) await directGet(node, key, SMALL);
    }),
  );
  await cleanupUploads(node.sluice, [many.reply]);
  for (let k = 0; k < smallKeys.length; k += 16) {
    await Promise.all(smallKeys.slice(k, k + 16).map((Key) => node.s3.send(new DeleteObjectCommand({ Bucket: node.ceph.bucket, Key }))));
  }
  await node.ceph.purgeDeleted();
}

interface MemoryFigures {
  name: string;
  bytes: number;
  mbps: number;
  cpuPerGB: number;
  peakMiB: number;
}

/** `n` uploads of `size` at once, then `n` downloads of them at once; the objects are deleted after. */
async function memoryCase(node: Node, n: number, size: number): Promise<MemoryFigures[]> {
  const up = newCase();
  const stored = await measure(node, up, n * size, () => Promise.all(Array.from({ length: n }, (_, j) => sluiceUpload(node, size, `m${j}.bin`))));
  const down = newCase();
  try {
    await measure(node, down, n * size, () => Promise.all(stored.map((s) => fetchAll(`${node.sluice.baseUrl}/d/${s.id}`, size))));
  } finally {
    await cleanupUploads(node.sluice, stored.map((s) => s.reply));
    await node.ceph.purgeDeleted();
  }
  const label = `${n} x ${formatSize(size)}`;
  return [
    { name: `upload ${label}`, bytes: n * size, mbps: up.mbps[0]!, cpuPerGB: up.cpuPerGB[0]!, peakMiB: up.peakMiB },
    { name: `download ${label}`, bytes: n * size, mbps: down.mbps[0]!, cpuPerGB: down.cpuPerGB[0]!, peakMiB: down.peakMiB },
  ];
}

function mintKey(env: NodeJS.ProcessEnv): string {
  const r = spawnSync(process.execPath, [SLUICE_BIN, 'keys', 'create', '--plan', 'premium', '--label', 's3-bench'], { cwd: REPO_DIR, env, encoding: 'utf8' });
  const key = r.stdout.trim();
  if (r.status !== 0 || key === '') throw new Error(`sluice keys create: exit ${r.status}: ${r.stderr.trim().slice(-500)}`);
  return key;
}

async function main(): Promise<void> {
  const env = environment();
  printHeader('Sluice on S3 (Ceph radosgw, loopback) against the SDK straight to the bucket', env, {
    size: formatSize(SIZE), runs: RUNS, large: formatSize(LARGE), parallel: `${PARALLEL} x ${formatSize(SIZE8)}`, memory: MEMORY, tls: TLS, SLUICE_ENV: process.env.SLUICE_ENV ?? '',
  });
  const ceph = await startCeph({ tls: TLS });
  const s3 = ceph.client();
  try {
    const databaseUrl = await freshDatabase(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/sluice_bench', 's3');
    const serverEnv = { ...ceph.env('bench'), ...envSettings(process.env.SLUICE_ENV) };
    const sluice = await startSluice({ databaseUrl, redisUrl: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', env: serverEnv });
    const key = mintKey({ ...process.env, ...serverEnv, DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' });
    const bare = await startBaseline('uws-s3', ceph.env());
    const node: Node = { sluice, bare, key, ceph, s3 };
    const idleMiB = sluice.rss.currentMiB();
    console.log(`Sluice pid ${sluice.proc.pid}, idle RSS ${fixed(idleMiB)} MiB`);
    // Warm-up: connections, the JIT and the part buffers, unmeasured.
    await measure(node, undefined, 0, async () => {
      const s = await sluiceUpload(node, 16 << 20);
      await fetchAll(`${sluice.baseUrl}/d/${s.id}`, 16 << 20);
      await cleanupUploads(sluice, [s.reply]);
    });
    await measure(node, undefined, 0, () => bareUpload(node, 16 << 20), bare);
    const cases = Object.fromEntries(CASES.map((c) => [c, newCase()])) as Record<CaseName, Case>;
    for (let i = 0; i < RUNS; i++) {
      await round(node, i, cases);
      console.log(`round ${i + 1}: ${CASES.map((c) => `${c} ${fixed(cases[c].mbps.at(-1))}`).join(', ')} MB/s`);
    }
    const memory: MemoryFigures[] = [];
    try {
      if (MEMORY) {
        memory.push(...(await memoryCase(node, 1, LARGE)));
        console.log(memory.map((m) => `${m.name}: ${fixed(m.mbps)} MB/s, peak ${fixed(m.peakMiB)} MiB`).join('; '));
        memory.push(...(await memoryCase(node, PARALLEL, SIZE8)));
      }
    } catch (err) {
      console.error(`memory cases: ${describeFailure(sluice, String(err))}\nSluice's last output:\n${sluice.proc.output().slice(-2000)}`);
    }
    report(cases, memory, idleMiB);
    console.log(`results: ${writeResults('s3-server', { env, size: SIZE, runs: RUNS, sluiceEnv: envSettings(process.env.SLUICE_ENV), idleMiB, cases, memory })}`);
  } finally {
    await closeAll();
    s3.destroy();
    await ceph.stop();
  }
}

function report(cases: Record<CaseName, Case>, memory: readonly MemoryFigures[], idleMiB: number): void {
  if (RUNS > 0) printPairs(cases, idleMiB);
  if (memory.length === 0) return;
  console.log(`\nmemory of the Sluice process (target: peak RSS < ${RSS_TARGET_MIB} MiB)`);
  printTable(
    ['case', 'MB/s', 'CPU s/GB', 'peak RSS MiB', 'target'],
    memory.map((m) => [m.name, fixed(m.mbps), fixed(m.cpuPerGB, 2), fixed(m.peakMiB), m.peakMiB < RSS_TARGET_MIB ? 'met' : 'MISSED']),
  );
}

function printPairs(cases: Record<CaseName, Case>, idleMiB: number): void {
  const med = (c: CaseName) => median(cases[c].mbps);
  const pairs: [string, CaseName, CaseName][] = [
    ['upload', 'upload sluice', 'upload lib-storage'],
    ['upload, bare', 'upload sluice', 'upload uws-s3'],
    ['download', 'download sluice', 'download GetObject'],
    ['zip', 'zip sluice', 'zip: download sluice'],
    [`zip of ${ZIP_FILES} x 64 KiB`, 'zip small sluice', 'zip small: GetObject each'],
  ];
  console.log(`\n${formatSize(SIZE)}, medians of ${RUNS} (target: each ratio >= 0.80x); Sluice idle ${fixed(idleMiB)} MiB`);
  printTable(
    ['case', 'Sluice MB/s', 'baseline', 'baseline MB/s', 'ratio', 'Sluice peak RSS MiB', 'Sluice CPU s/GB', 'baseline CPU s/GB', 'runs (Sluice / baseline)'],
    pairs.map(([name, a, b]) => [
      name, fixed(med(a)), (b.includes(': ') ? b.slice(b.indexOf(': ') + 2) : b.replace(/^\w+ /, '')), fixed(med(b)), ratio(med(a), med(b)), fixed(cases[a].peakMiB), fixed(median(cases[a].cpuPerGB), 2),
      fixed(median(SDK_BASELINES.includes(b) ? cases[b].ownCpuPerGB : cases[b].cpuPerGB), 2),
      `${cases[a].mbps.map((x) => fixed(x)).join(' ')} / ${cases[b].mbps.map((x) => fixed(x)).join(' ')}`,
    ]),
  );
  const cpu = (c: CaseName) => median(cases[c].cpuPerGB);
  console.log(
    'upload, bare: bench/baselines/uws-s3.ts, bare uWebSockets.js putting the same body in the bucket in parts signed as\n' +
      `Sluice signs and sends them (no parsing, no checksum, no database): the least CPU per GB on this stack.\n` +
      `Sluice's upload CPU per GB is ${ratio(cpu('upload sluice'), cpu('upload uws-s3'))} of it.`,
  );
}

await main();
