/** Raw tus requests for the tus test files: one client, the metadata encoding, creation and PATCH. */
import assert from 'node:assert/strict';
import { request } from 'undici';
import type { TestServer } from './server.ts';

export interface TusRes { status: number; headers: Record<string, string>; body: string }

export const OCTETS = { 'content-type': 'application/offset+octet-stream' } as const;

/** One request with `Tus-Resumable: 1.0.0` (unless `headers` overrides it); HEAD bodies are dropped. */
export async function tusCall(srv: TestServer, method: string, urlPath: string, headers: Record<string, string> = {}, body?: Buffer): Promise<TusRes> {
  const r = await request(`${srv.url}${urlPath}`, { method: method as 'GET', headers: { 'tus-resumable': '1.0.0', ...headers }, body });
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(r.headers)) out[k] = String(v);
  return { status: r.statusCode, headers: out, body: method === 'HEAD' ? (await r.body.dump(), '') : await r.body.text() };
}

export const tusMeta = (o: Record<string, string>): string =>
  Object.entries(o).map(([k, v]) => `${k} ${Buffer.from(v).toString('base64')}`).join(',');

/** The path of an upload's URL (Location may be absolute or relative). */
export const uploadPath = (location: string): string => new URL(location, 'http://x').pathname;

/** Creates an upload (201 expected); returns its path. */
export async function tusCreate(srv: TestServer, length: number, headers: Record<string, string> = {}): Promise<string> {
  const r = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': String(length), ...headers });
  assert.equal(r.status, 201, r.body);
  return uploadPath(r.headers.location!);
}

export const tusPatch = (srv: TestServer, loc: string, offset: number, piece: Buffer, extra: Record<string, string> = {}): Promise<TusRes> =>
  tusCall(srv, 'PATCH', loc, { ...OCTETS, 'upload-offset': String(offset), ...extra }, piece);

/** Whether a request holds upload `id`'s lock (src/db/upload-locks.ts): an advisory lock in `sql`'s database. */
export async function uploadLocked(sql: TestServer['sql'], id: string): Promise<boolean> {
  const [r] = await sql<{ held: boolean }[]>`
    select exists (
      select 1 from pg_locks l, (select hashtextextended(${id}, 0) as k) t
      where l.locktype = 'advisory' and l.granted and l.objsubid = 1
        and l.database = (select oid from pg_database where datname = current_database())
        and l.classid = ((t.k >> 32) & 4294967295)::oid and l.objid = (t.k & 4294967295)::oid) as held`;
  return r!.held;
}
