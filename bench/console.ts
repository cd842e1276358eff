// The operator console on a large instance: 10^6 bundles (each with a file), 10^5 reports, 10^5 audit
// rows and 10^4 blocked hashes seeded straight into a fresh PostgreSQL database, then every console
// page (lists, searches, a report, the overview) asked BENCH_ROUNDS times in turn by a signed-in
// operator. Reports p50, p95 and max per page against the 200 ms target.
//   node --import tsx bench/console.ts     env: BENCH_BUNDLES (1000000) BENCH_REPORTS (100000) BENCH_ROUNDS (20)
//   DATABASE_URL=postgres://… (default: the local test server; a fresh database is made in it)
import { spawnSync } from 'node:child_process';
import postgres from 'postgres';
import { request } from 'undici';
import { closeAll, DEFAULT_DATABASE_URL, freshDatabase, SLUICE_BIN, startSluice } from './lib/targets.ts';
import { envInt, environment, printHeader, printTable, writeResults } from './lib/report.ts';

const BUNDLES = envInt('BENCH_BUNDLES', 1_000_000);
const REPORTS = envInt('BENCH_REPORTS', 100_000);
const ROUNDS = envInt('BENCH_ROUNDS', 20);
const TARGET_MS = 200;

/** Rows as an instance that has run for a long time would have them, in a few set-based statements. */
async function seed(url: string): Promise<{ code: string; prefix: string; sha: string; reportId: number }> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql`insert into api_keys (key_hash, prefix, label, plan)
              select sha256(('key' || i)::bytea), 'slk_bench' || lpad(i::text, 3, '0'), 'bench ' || i, 'power'
              from generate_series(1, 100) i`;
    // Codes are the id in hex, 5 digits: unique, and of the code's alphabet.
    await sql`insert into bundles (short_code, upload_token_hash, max_size_bytes, total_size_bytes, file_count, created_at, expires_at, api_key_id)
              select lpad(to_hex(i), 5, '0'), sha256(('t' || i)::bytea), 1073741824, 1000 + i % 5000, 1,
                     now() - make_interval(secs => ${BUNDLES} - i), now() + interval '3 days',
                     case when i % 3 = 0 then (select min(id) from api_keys) + i % 100 end
              from generate_series(1, ${BUNDLES}) i`;
    await sql`insert into files (bundle_id, storage_key, name, size, mime_type, sha256, crc32)
              select b.id, md5('f' || b.id), 'file-' || b.id || '.bin', b.total_size_bytes, 'application/octet-stream', sha256(('f' || b.id)::bytea), 0
              from bundles b`;
    await sql`insert into reports (short_code, reason, details, reporter_hash, created_at, closed_at)
              select lpad(to_hex(1 + (i * 7919) % ${BUNDLES}), 5, '0'), (array['malware','phishing','copyright','illegal','other'])[1 + i % 5],
                     'seeded report ' || i, sha256(('r' || i)::bytea), now() - make_interval(secs => ${REPORTS} - i),
                     case when i % 4 <> 0 then now() end
              from generate_series(1, ${REPORTS}) i`;
    await sql`insert into audit (action, target, operator, detail)
              select 'bundles expire', lpad(to_hex(i), 5, '0'), 'bench', null from generate_series(1, ${REPORTS}) i`;
    await sql`insert into blocked_hashes (sha256, reason, created_by)
              select sha256(('blocked' || i)::bytea), 'seeded', 'bench' from generate_series(1, 10000) i`;
    await sql`analyze`;
    const [r] = await sql<{ id: string }[]>`select id from reports where closed_at is null order by id desc limit 1`;
    const code = lpadHex(Math.floor(BUNDLES / 2));
    const [f] = await sql<{ sha: string }[]>`
      select encode(f.sha256, 'hex') as sha from files f join bundles b on b.id = f.bundle_id where b.short_code = ${code}`;
    return { code, prefix: 'slk_bench050', sha: f!.sha, reportId: Number(r!.id) };
  } finally {
    await sql.end();
  }
}

const lpadHex = (i: number): string => i.toString(16).padStart(5, '0');

async function signIn(baseUrl: string, env: NodeJS.ProcessEnv): Promise<string> {
  const r = spawnSync(process.execPath, [SLUICE_BIN, 'admin', 'link', '--label', 'bench'], { env, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`sluice admin link: ${r.stderr}`);
  const res = await request(`${baseUrl}${new URL(r.stdout.trim()).pathname}`, { method: 'POST' });
  await res.body.dump();
  const cookie = /^(sluice_admin=[^;]+)/.exec(String(res.headers['set-cookie'] ?? ''))?.[1];
  if (!cookie) throw new Error(`sign-in answered ${res.statusCode}`);
  return cookie;
}

async function timed(url: string, cookie: string): Promise<{ status: number; ms: number; body: string }> {
  const t = performance.now();
  const res = await request(url, { headers: { cookie } });
  const body = await res.body.text();
  return { status: res.statusCode, ms: performance.now() - t, body };
}

const pct = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

async function main(): Promise<void> {
  printHeader('operator console on a large instance', environment(), { BUNDLES, REPORTS, ROUNDS, TARGET_MS });
  const databaseUrl = await freshDatabase(process.env.DATABASE_URL ?? DEFAULT_DATABASE_URL, 'console');
  const target = await startSluice({ databaseUrl });
  try {
    const t0 = performance.now();
    const s = await seed(databaseUrl);
    console.log(`seeded ${BUNDLES} bundles and files, ${REPORTS} reports and audit rows, 10000 blocked hashes in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
    const cookie = await signIn(target.baseUrl, { ...process.env, DATABASE_URL: databaseUrl, DATA_DIR: target.dir });
    // Each page with a text its answer must hold: a fast page that found nothing proves nothing.
    const pages: Array<[string, string, string]> = [
      ['overview', '/admin', 'Overview'],
      ['overview data (day)', '/admin/overview.json?range=day', '"range":"day"'],
      ['bundles, newest', '/admin/bundles', lpadHex(BUNDLES)],
      ['bundles by code', `/admin/bundles?q=${s.code}`, s.code],
      ['bundles by key prefix', `/admin/bundles?q=${s.prefix}`, s.prefix],
      ['bundles by SHA-256', `/admin/bundles?q=${s.sha}`, s.code],
      ['reports, open first', '/admin/reports', 'seeded report'],
      ['one report', `/admin/reports/${s.reportId}`, `seeded report ${s.reportId}`],
      ['keys', '/admin/keys', 'slk_bench100'],
      ['blocklist', '/admin/blocklist', 'seeded'],
      ['audit trail', '/admin/audit', 'bundles expire'],
    ];
    const rows: Array<Array<string | number>> = [];
    const results: Record<string, unknown> = {};
    for (const [name, path, holds] of pages) {
      const first = await timed(`${target.baseUrl}${path}`, cookie);
      if (first.status !== 200) throw new Error(`${path}: HTTP ${first.status}`);
      if (!first.body.includes(holds)) throw new Error(`${path}: the answer does not hold ${JSON.stringify(holds)}`);
      const ms: number[] = [];
      for (let i = 0; i < ROUNDS; i++) ms.push((await timed(`${target.baseUrl}${path}`, cookie)).ms);
      const p95 = pct(ms, 95);
      rows.push([name, pct(ms, 50).toFixed(1), p95.toFixed(1), Math.max(...ms).toFixed(1), p95 < TARGET_MS ? 'yes' : 'NO']);
      results[name] = { path, firstMs: first.ms, p50: pct(ms, 50), p95, max: Math.max(...ms) };
    }
    printTable(['page', 'p50 ms', 'p95 ms', 'max ms', `p95 < ${TARGET_MS} ms`], rows);
    console.log(`results: ${writeResults('console', { bundles: BUNDLES, reports: REPORTS, rounds: ROUNDS, results })}`);
  } finally {
    await closeAll();
  }
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
