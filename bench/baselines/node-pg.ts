// Baseline for small JSON requests: node:http + postgres (porsager) answering GET /api/v1/bundle/:code
// with a bundle joined to its files, the shape Sluice returns. Env: PORT, DATABASE_URL, BUNDLE_CODE.
// Owns schema bench_baseline: its tables are dropped and recreated at start and seeded with one bundle of 3 files.
import http from 'node:http';
import postgres from 'postgres';

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
  await sql`insert into bench_baseline.files ${sql(files)}`;
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
