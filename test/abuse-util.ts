/** Shared steps of the abuse tests: uploads, reports and what is left on disk and in the database. */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'undici';
import { storedPaths, type TestServer } from './helpers/server.ts';
import { multipart } from './helpers/multipart.ts';

export interface Uploaded {
  short_code: string;
  upload_token: string;
  files: Array<{ id: number }>;
}

export async function uploadFiles(
  srv: TestServer, files: Array<{ name: string; data: Buffer; type?: string }>, headers: Record<string, string> = {},
  /** An append names the bundle's upload token: `/api/v1/upload/TOKEN`. */
  to = '/api/v1/upload',
): Promise<{ status: number; json: Record<string, unknown> }> {
  const { body, contentType } = multipart(files.map((f) => ({ name: 'files[]', filename: f.name, data: f.data, contentType: f.type })));
  const res = await request(`${srv.url}${to}`, { method: 'POST', body, headers: { 'content-type': contentType, ...headers } });
  return { status: res.statusCode, json: (await res.body.json()) as Record<string, unknown> };
}

export async function uploadOk(srv: TestServer, headers: Record<string, string> = {}): Promise<Uploaded> {
  const r = await uploadFiles(srv, [{ name: 'a.txt', data: randomBytes(200) }, { name: 'pic.png', data: randomBytes(300), type: 'image/png' }], headers);
  assert.equal(r.status, 201, JSON.stringify(r.json));
  return r.json as unknown as Uploaded;
}

export const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Nothing of a refused upload: no parts, no stored files beyond `before`, no new rows. */
export async function assertNothingKept(srv: TestServer, before: { files: number; rows: number }): Promise<void> {
  // A refused upload's parts are unlinked as the refusal goes out, not before it: allow them a moment.
  const deadline = Date.now() + 20_000;
  while (storedPaths(srv.dataDir).parts.length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  const { parts, files } = storedPaths(srv.dataDir);
  assert.deepEqual(parts, [], 'no temp parts left');
  assert.equal(files.length, before.files, 'no stored file added');
  const [r] = await srv.sql<{ n: number }[]>`select count(*)::int as n from files`;
  assert.equal(r!.n, before.rows, 'no file row added');
}

export async function counts(srv: TestServer): Promise<{ files: number; rows: number }> {
  const [r] = await srv.sql<{ n: number }[]>`select count(*)::int as n from files`;
  return { files: storedPaths(srv.dataDir).files.length, rows: r!.n };
}

export async function postReport(
  srv: TestServer, body: unknown, headers: Record<string, string> = {},
): Promise<{ status: number; json: Record<string, unknown>; headers: Record<string, string> }> {
  const res = await request(`${srv.url}/api/v1/reports`, {
    method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json', ...headers },
  });
  const h: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) h[k] = String(v);
  return { status: res.statusCode, json: (await res.body.json()) as Record<string, unknown>, headers: h };
}

export async function get(srv: TestServer, path: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string; type: string }> {
  const res = await request(`${srv.url}${path}`, { headers });
  return { status: res.statusCode, text: await res.body.text(), type: String(res.headers['content-type'] ?? '') };
}
