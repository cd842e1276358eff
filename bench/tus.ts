// Resumable upload throughput: one file of SIZE through tus (creation, then PATCH pieces of PIECE) against the
// same file as one multipart POST, on the same Sluice process in the same run. Medians of BENCH_RUNS; the order
// alternates per run. Target: tus >= 0.9x multipart. With BENCH_TREE_ALT, the other tree's server takes its turn
// after this one's in every round.
// The `bound` rows are the disk and database alone, in the same rounds: the file written once and fsynced (multipart's
// least), and written as appends of PIECE, each fsynced and its offset committed to PostgreSQL before the next
// (tus's least, without HTTP). Their ratio is the most tus can reach against multipart on this disk (BENCH_DISK=0
// skips them). The `uws-disk` rows are the same over HTTP: bare uWebSockets.js writing each body as Sluice does, no
// database (bench/baselines/uws-disk.ts).
//   node --import tsx bench/tus.ts [4G]     env: BENCH_SIZES (default 4G) BENCH_RUNS (3) BENCH_TUS_PIECE (64M) DATABASE_URL BENCH_TREE_ALT BENCH_DISK
import http from 'node:http';
import postgres from 'postgres';
import { durableAppends, durableWrite } from './lib/disk-ceiling.ts';
import { ensureDatabase } from './lib/databases.ts';
import {
  envInt, environment, fixed, formatSize, mbps, median, parseSize, printHeader, printTable, ratio, runLine, sizesFromArgs,
  writeResults, MiB,
} from './lib/report.ts';
import { patternChunks, uploadMultipart, CONTENT_LENGTH_LIMIT } from './lib/http-client.ts';
import { IDLE_TIMEOUT_MS } from './lib/download-client.ts';
import { closeAll, describeFailure, selectServers, startTarget, type Target } from './lib/targets.ts';
import { paired, printTreeComparison } from './lib/tree-compare.ts';
import { asUploadReply, cleanupUploads } from './lib/sluice-api.ts';
import type { Measured } from './lib/summary.ts';

type Mode = 'tus' | 'multipart';

const BOUND = 'bound';
const WITH_DISK = process.env.BENCH_DISK !== '0';

interface Run {
  ms: number;
  mbps: number;
  peakRssMiB: number;
  cpuPerGB: number;
  requests: number;
}

interface Case extends Measured<Run> {
  server: string;
  mode: Mode;
  size: number;
}

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/**
 * Sends one request whose body is `size` bytes of the shared pattern, written with backpressure (no piece is
 * ever held in memory: every chunk is a view of the same 1 MiB buffer).
 */
function send(agent: http.Agent, url: string, method: string, headers: Record<string, string>, size: number): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, agent, headers: { ...headers, 'content-length': String(size) } });
    req.on('error', reject);
    req.setTimeout(IDLE_TIMEOUT_MS, () => req.destroy(new Error(`${method} idle for ${IDLE_TIMEOUT_MS / 1000} s`)));
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('error', reject);
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    const write = async (): Promise<void> => {
      for (const chunk of patternChunks(size)) {
        if (req.destroyed) return;
        if (!req.write(chunk)) await new Promise((r) => req.once('drain', r));
      }
      req.end();
    };
    write().catch((err: unknown) => req.destroy(err instanceof Error ? err : new Error(String(err))));
  });
}

const TUS = { 'tus-resumable': '1.0.0' };

/**
 * Creation, then PATCHes of `piece` bytes (the last one completes the upload into a new bundle). Pieces are
 * whole MiBs, so each piece's bytes are exactly the multipart file's bytes at that offset.
 */
async function uploadTus(base: string, name: string, size: number, piece: number): Promise<{ reply: unknown; requests: number }> {
  // One kept-alive connection for the session, like a real client, and only for it: a connection left idle between
  // rounds can meet the server's idle timeout just as the next session reuses it (a "socket hang up" on creation).
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    return await tusSession(agent, base, name, size, piece);
  } finally {
    agent.destroy();
  }
}

async function tusSession(agent: http.Agent, base: string, name: string, size: number, piece: number): Promise<{ reply: unknown; requests: number }> {
  const created = await send(agent, `${base}/api/v1/tus/`, 'POST', {
    ...TUS,
    'upload-length': String(size),
    'upload-metadata': `filename ${Buffer.from(name).toString('base64')}`,
  }, 0);
  if (created.status !== 201 || !created.headers.location) throw new Error(`tus creation: HTTP ${created.status} ${created.body.slice(0, 200)}`);
  const url = created.headers.location;
  let requests = 1;
  let last: Reply | undefined;
  for (let offset = 0; offset < size; offset += piece) {
    const len = Math.min(piece, size - offset);
    last = await send(agent, url, 'PATCH', { ...TUS, 'upload-offset': String(offset), 'content-type': 'application/offset+octet-stream' }, len);
    requests++;
    if (last.status !== 204 || Number(last.headers['upload-offset']) !== offset + len) {
      throw new Error(`PATCH at ${offset}: HTTP ${last.status} offset ${String(last.headers['upload-offset'])} ${last.body.slice(0, 200)}`);
    }
  }
  const h = last?.headers ?? {};
  return {
    reply: {
      short_code: h['sluice-short-code'],
      upload_token: h['sluice-upload-token'],
      files: [{ id: Number(h['sluice-file-id']), size }],
    },
    requests,
  };
}

async function runOnce(t: Target, mode: Mode, size: number, piece: number, run: number): Promise<{ run?: Run; error?: string }> {
  t.rss.reset();
  const started = performance.now();
  let reply: unknown;
  let requests = 1;
  try {
    if (mode === 'tus') ({ reply, requests } = await uploadTus(t.baseUrl, `tus-${run}.bin`, size, piece));
    else {
      const r = await uploadMultipart(`${t.baseUrl}/api/v1/upload`, [{ name: `multipart-${run}.bin`, size }]);
      if (r.status !== 201) throw new Error(`HTTP ${r.status}: ${r.body.slice(0, 200)}`);
      reply = r.json;
    }
  } catch (err) {
    return { error: describeFailure(t, String(err)) };
  }
  const ms = performance.now() - started;
  const peakRssMiB = t.rss.peakMiB();
  const cpu = t.rss.cpuSeconds();
  const files = asUploadReply(reply)?.files ?? [];
  await cleanupUploads(t, [reply]);
  if (files.length !== 1 || (files[0]!.size !== undefined && Number(files[0]!.size) !== size)) {
    return { error: `unexpected reply ${JSON.stringify(reply).slice(0, 200)}` };
  }
  return { run: { ms, mbps: mbps(size, ms), peakRssMiB, cpuPerGB: cpu / (size / 1e9), requests } };
}

/** The disk (and database) alone: multipart's least is one durable write, tus's is durable appends of `piece`. */
async function runBound(mode: Mode, size: number, piece: number, record: (offset: number) => Promise<void>): Promise<Run> {
  const ms = mode === 'multipart' ? (await durableWrite([size])).ms : await durableAppends(size, piece, record);
  return { ms, mbps: mbps(size, ms), peakRssMiB: NaN, cpuPerGB: NaN, requests: mode === 'multipart' ? 1 : Math.ceil(size / piece) };
}

/** Commits each offset to a table of its own, as a tus server records an append (a no-op without DATABASE_URL). */
async function offsetRecorder(): Promise<{ record: (offset: number) => Promise<void>; close: () => Promise<void> }> {
  const url = process.env.DATABASE_URL;
  if (!url) return { record: async () => {}, close: async () => {} };
  await ensureDatabase(url);
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  await sql`create table if not exists bench_tus_bound (id int primary key, upload_offset bigint not null)`;
  await sql`insert into bench_tus_bound values (1, 0) on conflict (id) do update set upload_offset = 0`;
  return {
    record: async (offset) => {
      await sql`update bench_tus_bound set upload_offset = ${offset} where id = 1`;
    },
    close: async () => {
      await sql`drop table if exists bench_tus_bound`;
      await sql.end();
    },
  };
}

async function main(): Promise<void> {
  const env = environment();
  const sizes = sizesFromArgs('4G');
  const runs = envInt('BENCH_RUNS', 3);
  const piece = parseSize(process.env.BENCH_TUS_PIECE ?? '64M');
  if (piece % MiB !== 0 || piece >= CONTENT_LENGTH_LIMIT) throw new Error('BENCH_TUS_PIECE must be whole MiBs below 1e9 bytes');
  printHeader('tus: POST + PATCH pieces on /api/v1/tus/ vs one multipart POST /api/v1/upload', env, {
    sizes: sizes.map(formatSize).join(','), runs, piece: formatSize(piece), database: process.env.DATABASE_URL ? 'postgres' : 'embedded',
  });
  console.log(
    `tus = creation POST, then PATCHes of ${formatSize(piece)} on one kept-alive connection, Content-Length each; ` +
      `multipart = one streamed POST (chunked when >= ${CONTENT_LENGTH_LIMIT} bytes). Same bytes, same server, same run.`,
  );
  // with BENCH_TREE_ALT, `sluice-base` too: the servers take turns round by round (A, B, then B, A ...)
  const targets: Target[] = [];
  for (const name of selectServers(['sluice', 'uws-disk'])) {
    const t = await startTarget(name, { databaseUrl: process.env.DATABASE_URL });
    targets.push(t);
    const warm = await runOnce(t, 'tus', 16 * MiB, 4 * MiB, 0);
    const warm2 = await runOnce(t, 'multipart', 16 * MiB, piece, 0);
    console.log(`${t.name}: pid ${t.proc.pid}, idle RSS ${fixed(t.rss.currentMiB())} MiB, warm-up ${warm.error ?? 'ok'} / ${warm2.error ?? 'ok'}`);
  }

  const recorder = await offsetRecorder();
  const results: Case[] = [];
  for (const size of sizes) {
    const cases = targets.map((t) => (['tus', 'multipart'] as const).map((mode): Case => ({ server: t.name, mode, size, runs: [], errors: [] })));
    const bound = (['tus', 'multipart'] as const).map((mode): Case => ({ server: BOUND, mode, size, runs: [], errors: [] }));
    for (let r = 0; r < runs; r++) {
      // Rotate which server goes first each run, as the modes alternate: the first upload after the previous run's
      // deletes is slower on a disk that discards freed blocks, whichever server makes it.
      for (let j = 0; j < targets.length; j++) {
        const i = (j + r) % targets.length;
        for (let k = 0; k < 2; k++) {
          const c = cases[i]![(k + r) % 2]!; // alternate which goes first after the previous run's writeback
          const out = await runOnce(targets[i]!, c.mode, size, piece, r + 1);
          if (out.run) c.runs.push(out.run);
          else c.errors.push(out.error ?? 'unknown');
          console.log(`  ${formatSize(size)} run ${r + 1} ${c.server} ${c.mode}: ${runLine(out.run, out.error)}${out.run ? `, ${out.run.requests} request(s)` : ''}`);
        }
      }
      for (let k = 0; k < 2 && WITH_DISK; k++) {
        const c = bound[(k + r) % 2]!;
        const run = await runBound(c.mode, size, piece, recorder.record);
        c.runs.push(run);
        console.log(`  ${formatSize(size)} run ${r + 1} ${BOUND} ${c.mode}: ${fixed(run.mbps)} MB/s`);
      }
    }
    for (const c of [...cases.flat(), ...(WITH_DISK ? bound : [])]) {
      results.push({
        ...c,
        mbps: c.runs.length ? median(c.runs.map((x) => x.mbps)) : undefined,
        wallMs: c.runs.length ? median(c.runs.map((x) => x.ms)) : undefined,
        peakRssMiB: c.runs.length ? Math.max(...c.runs.map((x) => x.peakRssMiB)) : undefined,
        cpuPerGB: c.runs.length ? median(c.runs.map((x) => x.cpuPerGB)) : undefined,
      });
    }
  }
  await closeAll();
  await recorder.close();

  const multipartOf = (c: Case): number | undefined =>
    results.find((x) => x.server === c.server && x.mode === 'multipart' && x.size === c.size)?.mbps;
  console.log(`\nmedians of ${runs} run(s); MB/s = 10^6 bytes/s of file data, creation to final 204 (completion included)`);
  if (WITH_DISK) {
    console.log(
      `${BOUND}: the disk alone, O_DIRECT; multipart = one write and fsync; tus = appends of ${formatSize(piece)}, each fsynced` +
        (process.env.DATABASE_URL ? ' and its offset committed to PostgreSQL' : ' (no database: DATABASE_URL unset)') + ' before the next',
    );
  }
  if (targets.some((t) => t.name === 'uws-disk')) {
    console.log(
      'uws-disk: bare uWebSockets.js writing each body as Sluice does (1 MiB O_DIRECT writes, fsync, then the answer), with\n' +
        'no parsing and no database: its tus / multipart is the most a durable tus server reaches over HTTP on the same disk',
    );
  }
  printTable(
    ['server', 'mode', 'size', 'MB/s', 'wall s', 'peak RSS MiB', 'srv CPU s/GB', 'tus / multipart', 'errors'],
    results.map((c) => [
      c.server,
      c.mode,
      formatSize(c.size),
      fixed(c.mbps),
      fixed(c.wallMs === undefined ? undefined : c.wallMs / 1000, 2),
      fixed(c.peakRssMiB),
      fixed(c.cpuPerGB, 2),
      c.mode === 'tus' ? ratio(c.mbps, multipartOf(c)) : '',
      c.errors.length ? `${c.errors.length} failed: ${c.errors[0]!.slice(0, 120)}` : '',
    ]),
  );
  const pairs = results
    .filter((c) => c.server === 'sluice')
    .flatMap((c) => {
      const base = results.find((x) => x.server === 'sluice-base' && x.mode === c.mode && x.size === c.size);
      return base ? [{ label: `${formatSize(c.size)} ${c.mode}`, ...paired(c.runs, base.runs) }] : [];
    });
  const trees = pairs.length ? printTreeComparison(pairs) : undefined;
  const file = writeResults('tus', { scenario: 'tus', environment: env, runs, pieceBytes: piece, results, trees });
  console.log(`\nJSON: ${file}`);
  if (results.some((c) => c.errors.length > 0)) process.exitCode = 1;
}

main().catch(async (err: unknown) => {
  console.error(err);
  await closeAll();
  process.exit(1);
});
