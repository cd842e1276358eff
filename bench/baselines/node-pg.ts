// Baseline for small requests: node:http + postgres (porsager) doing the work Sluice does for
//   GET /api/v1/bundle/:code          a bundle joined to its files, the shape Sluice returns
//   GET /api/v1/bundle/:code/status   the bundle's totals
//   GET /api/v1/download/:id          look the file up (not expired), stream it from DIR, count the download
//   POST /api/v1/upload               busboy -> temp file -> fsync -> bundle and file rows in one transaction -> rename -> fsync dir
// Env: PORT, DATABASE_URL, BUNDLE_CODE, DIR. Owns schema bench_baseline: its tables are dropped and
// recreated at start and seeded with one bundle of 3 files (stored in DIR).
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import postgres from 'postgres';
import type busboyType from 'busboy';

const busboy = createRequire(import.meta.url)('busboy') as typeof busboyType;
const dir = process.env.DIR ?? '/tmp';

const port = Number(process.env.PORT ?? 3000);
const code = process.env.BUNDLE_CODE ?? 'bench';
const sql = postgres(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', { onnotice: () => {} });

async function setup(): Promise<void> {
  await sql`create schema if not exists bench_baseline`;
  await sql`drop table if exists bench_baseline.files, bench_baseline.bundles`;
  await sql`create table bench_baseline.bundles (
    id bigserial primary key,
    short_code text not null unique,
    created_at timestamptz not null default now(),
    expires_at timestamptz not null,
    max_size_bytes bigint not null,
    is_encrypted boolean not null default false,
    password_hash text
  )`;
  await sql`create table bench_baseline.files (
    id bigserial primary key,
    bundle_id bigint not null references bench_baseline.bundles(id) on delete cascade,
    name text not null,
    size bigint not null,
    mime_type text not null,
    download_count integer not null default 0,
    created_at timestamptz not null default now()
  )`;
  await sql`create index on bench_baseline.files (bundle_id)`;
  const [bundle] = await sql<{ id: string }[]>`
    insert into bench_baseline.bundles (short_code, expires_at, max_size_bytes)
    values (${code}, now() + interval '3 days', 1073741824) returning id`;
  const files = [
    { bundle_id: bundle!.id, name: 'a.txt', size: 1024, mime_type: 'text/plain' },
    { bundle_id: bundle!.id, name: 'b.bin', size: 10240, mime_type: 'application/octet-stream' },
    { bundle_id: bundle!.id, name: 'c.png', size: 102400, mime_type: 'image/png' },
  ];
  const ids = await sql<{ id: string; size: string }[]>`insert into bench_baseline.files ${sql(files)} returning id, size`;
  for (const f of ids) fs.writeFileSync(path.join(dir, f.id), Buffer.alloc(Number(f.size), 97));
}

async function statusBody(shortCode: string): Promise<{ status: number; body: unknown }> {
  const [b] = await sql<{ expires_at: Date; max_size_bytes: string; total: string }[]>`
    select b.expires_at, b.max_size_bytes, coalesce((select sum(size) from bench_baseline.files where bundle_id = b.id), 0) as total
    from bench_baseline.bundles b where b.short_code = ${shortCode}`;
  if (!b) return { status: 404, body: { success: false, error: 'Bundle not found' } };
  const total = Number(b.total);
  const max = Number(b.max_size_bytes);
  return {
    status: 200,
    body: {
      success: true,
      exists: true,
      is_expired: b.expires_at.getTime() <= Date.now(),
      expires_at: stamp(b.expires_at),
      total_size_bytes: total,
      max_size_bytes: max,
      space_remaining: Math.max(0, max - total),
    },
  };
}

async function download(id: string, res: http.ServerResponse): Promise<void> {
  const [f] = await sql<{ id: string; name: string; size: string; mime_type: string }[]>`
    select f.id, f.name, f.size, f.mime_type from bench_baseline.files f join bench_baseline.bundles b on b.id = f.bundle_id
    where f.id = ${id} and b.expires_at > now()`;
  if (!f) return send(res, 404, { success: false, error: 'File not found' });
  sql`update bench_baseline.files set download_count = download_count + 1 where id = ${id}`.catch(() => {});
  res.writeHead(200, {
    'content-type': f.mime_type,
    'content-length': f.size,
    'content-disposition': `attachment; filename="${f.name}"`,
  });
  fs.createReadStream(path.join(dir, f.id), { highWaterMark: 1 << 20 }).pipe(res);
}

function fsyncDir(d: string): Promise<void> {
  return new Promise((resolve, reject) =>
    fs.open(d, 'r', (err, fd) => {
      if (err) return reject(err);
      fs.fsync(fd, (e) => fs.close(fd, () => (e ? reject(e) : resolve())));
    }),
  );
}

/**
 * The bundle and its file rows in one transaction. A new short code is drawn when the drawn one is
 * taken, as Sluice does: 5 base64url characters collide about once per 20k uploads in a long run,
 * and an unhandled collision would answer 500 and fail the bench.
 */
async function insertBundle(files: Array<{ name: string; size: number; mime: string }>): Promise<{ code: string; rows: Array<{ id: string }> }> {
  for (let attempt = 0; ; attempt++) {
    const code = randomBytes(4).toString('base64url').slice(0, 5);
    try {
      const rows = await sql.begin(async (tx) => {
        const [b] = await tx<{ id: string }[]>`
          insert into bench_baseline.bundles (short_code, expires_at, max_size_bytes)
          values (${code}, now() + interval '3 days', 1073741824) returning id`;
        return tx<{ id: string }[]>`insert into bench_baseline.files ${sql(
          files.map((f) => ({ bundle_id: b!.id, name: f.name, size: f.size, mime_type: f.mime })),
        )} returning id`;
      });
      return { code, rows };
    } catch (err) {
      if ((err as { code?: string }).code !== '23505' || attempt >= 10) throw err;
    }
  }
}

function upload(req: http.IncomingMessage, res: http.ServerResponse): void {
  let bb: busboyType.Busboy;
  try {
    bb = busboy({ headers: req.headers, limits: { files: 100, fields: 32 } });
  } catch {
    return send(res, 400, { success: false, error: 'Expected multipart/form-data' });
  }
  const stored: Array<Promise<{ tmp: string; name: string; size: number; mime: string }>> = [];
  bb.on('file', (_field, stream, info) => {
    const tmp = path.join(dir, `${randomBytes(8).toString('hex')}.part`);
    const out = fs.createWriteStream(tmp, { highWaterMark: 4 << 20 });
    let size = 0;
    stream.on('data', (c: Buffer) => (size += c.length));
    stream.pipe(out);
    stored.push(
      new Promise((resolve, reject) => {
        out.on('error', reject);
        out.on('finish', () => {
          fs.open(tmp, 'r', (err, fd) => {
            if (err) return reject(err);
            fs.fsync(fd, (e) => fs.close(fd, () => (e ? reject(e) : resolve({ tmp, name: info.filename ?? 'file', size, mime: info.mimeType }))));
          });
        });
      }),
    );
  });
  bb.on('close', () => {
    Promise.all(stored)
      .then(async (files) => {
        const { code, rows } = await insertBundle(files);
        for (const [i, r] of rows.entries()) fs.renameSync(files[i]!.tmp, path.join(dir, r.id));
        // The renames are durable once the directory is fsynced, as Sluice's are.
        await fsyncDir(dir);
        send(res, 201, { success: true, short_code: code, files: files.map((f, i) => ({ id: Number(rows[i]!.id), name: f.name, size: f.size })) });
      })
      .catch((err: unknown) => {
        console.error(err);
        send(res, 500, { success: false, error: 'Internal error' });
      });
  });
  req.pipe(bb);
}

interface Row {
  short_code: string;
  created_at: Date;
  expires_at: Date;
  max_size_bytes: string;
  is_encrypted: boolean;
  password_hash: string | null;
  file_id: string | null;
  name: string | null;
  size: string | null;
  mime_type: string | null;
}

const stamp = (d: Date): string => d.toISOString().slice(0, 19).replace('T', ' ');

async function bundleBody(shortCode: string): Promise<{ status: number; body: unknown }> {
  const rows = await sql<Row[]>`
    select b.short_code, b.created_at, b.expires_at, b.max_size_bytes, b.is_encrypted, b.password_hash,
           f.id as file_id, f.name, f.size, f.mime_type
    from bench_baseline.bundles b
    left join bench_baseline.files f on f.bundle_id = b.id
    where b.short_code = ${shortCode} and b.expires_at > now()
    order by f.id`;
  const first = rows[0];
  if (!first) return { status: 404, body: { success: false, error: 'Bundle not found' } };
  const files = rows
    .filter((r) => r.file_id !== null)
    .map((r) => ({
      id: Number(r.file_id),
      name: r.name,
      size: Number(r.size),
      mime_type: r.mime_type,
      download_url: `/api/v1/download/${r.file_id}`,
    }));
  return {
    status: 200,
    body: {
      success: true,
      short_code: first.short_code,
      file_count: files.length,
      total_size_bytes: files.reduce((n, f) => n + f.size, 0),
      max_size_bytes: Number(first.max_size_bytes),
      expires_at: stamp(first.expires_at),
      is_expired: false,
      is_encrypted: first.is_encrypted,
      created_at: stamp(first.created_at),
      files: first.password_hash === null ? files : [],
    },
  };
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

await setup();
http
  .createServer((req, res) => {
    const url = req.url ?? '/';
    if (req.method === 'GET' && url === '/healthz') return send(res, 200, { success: true });
    const fail = (err: unknown): void => {
      console.error(err);
      send(res, 500, { success: false, error: 'Internal error' });
    };
    if (req.method === 'POST' && url === '/api/v1/upload') return upload(req, res);
    const d = /^\/api\/v1\/download\/(\d+)$/.exec(url);
    if (req.method === 'GET' && d) return void download(d[1]!, res).catch(fail);
    const st = /^\/api\/v1\/bundle\/([a-zA-Z0-9]{5})\/status$/.exec(url);
    if (req.method === 'GET' && st) return void statusBody(st[1]!).then((r) => send(res, r.status, r.body), fail);
    const m = /^\/api\/v1\/bundle\/([^/?]*)$/.exec(url);
    if (req.method !== 'GET' || !m) return send(res, 404, { success: false, error: 'Not found' });
    if (!/^[a-zA-Z0-9]{5}$/.test(m[1]!)) return send(res, 400, { success: false, error: 'Invalid code' });
    bundleBody(m[1]!).then(
      (r) => send(res, r.status, r.body),
      (err: unknown) => {
        console.error(err);
        send(res, 500, { success: false, error: 'Internal error' });
      },
    );
  })
  .listen(port, '127.0.0.1');
