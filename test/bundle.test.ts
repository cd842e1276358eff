import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { backends, startServer, storedPaths, type TestServer } from './helpers/server.ts';
import { request } from 'undici';
import { call, upload, type Res } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';

interface UploadedFile {
  id: number;
  name: string;
  size: number;
  mime_type: string;
  download_url: string;
}
interface Upload {
  short_code: string;
  upload_token: string;
  expires_at: string;
  files: UploadedFile[];
}

const SQL_TS = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;
const ANON_MAX = 1073741824;
const fromSqlUtc = (s: string): number => Date.parse(`${s.replace(' ', 'T')}Z`);

/** Asserts the interface's error shape: {success: false, error: <string>}. */
function assertError(r: Res, status: number): void {
  assert.equal(r.status, status, JSON.stringify(r.json));
  assert.equal(r.json.success, false);
  assert.equal(typeof r.json.error, 'string');
  assert.ok((r.json.error as string).length > 0);
}

async function newBundle(srv: TestServer, sizes: number[] = [10, 20], fields: Record<string, string> = {}): Promise<Upload> {
  const r = await upload(srv, sizes.map((n, i) => ({ name: `f${i}.txt`, data: randomBytes(n), type: 'text/plain' })), { fields });
  assert.ok(r.status === 201 || r.status === 200, JSON.stringify(r.json));
  return r.json as unknown as Upload;
}

async function storageKeys(srv: TestServer, code: string): Promise<string[]> {
  const rows = await srv.sql<{ storage_key: string }[]>`
    select f.storage_key from files f join bundles b on b.id = f.bundle_id where b.short_code = ${code}`;
  return rows.map((r) => r.storage_key);
}
const onDisk = (srv: TestServer): Set<string> => new Set(storedPaths(srv.dataDir).files.map((p) => path.basename(p)));

/** A valid-looking short code that no bundle has (codes are random; a clash is ~1e-9 likely). */
const unknownCode = (): string => `Q${randomBytes(2).toString('hex')}`;
const otherToken = (): string => randomBytes(32).toString('hex');

for (const backend of backends()) {
  describe(`bundle API (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { RATE_LIMIT_ANON_PER_HOUR: '100000', SWEEP_INTERVAL_SECONDS: '86400' });
    });
    after(async () => {
      await srv?.close();
    });

    test('GET /api/v1/bundle/{code} has exactly the documented fields', async () => {
      const up = await newBundle(srv, [10, 20]);
      const r = await call(srv, 'GET', `/api/v1/bundle/${up.short_code}`, { json: true });
      assert.equal(r.status, 200);
      const b = r.json;
      assert.deepEqual(Object.keys(b).sort(), [
        'created_at', 'expires_at', 'file_count', 'files', 'is_encrypted', 'is_expired',
        'max_size_bytes', 'short_code', 'success', 'total_size_bytes',
      ]);
      assert.equal(b.success, true);
      assert.equal(b.short_code, up.short_code);
      assert.equal(b.file_count, 2);
      assert.equal(b.total_size_bytes, 30);
      assert.equal(b.max_size_bytes, ANON_MAX);
      assert.equal(b.is_expired, false);
      assert.equal(b.is_encrypted, false);
      assert.match(b.created_at as string, SQL_TS);
      assert.match(b.expires_at as string, SQL_TS);
      const created = fromSqlUtc(b.created_at as string);
      assert.ok(Math.abs(created - Date.now()) < 10 * 60_000, `created_at ${b.created_at as string} is now (UTC)`);
      assert.ok(Math.abs(fromSqlUtc(b.expires_at as string) - created - 3 * 86_400_000) <= 2000, 'expires 3 days after creation');
      assert.equal(fromSqlUtc(b.expires_at as string), Math.floor(Date.parse(up.expires_at) / 1000) * 1000);
      const files = b.files as Array<Record<string, unknown>>;
      assert.equal(files.length, 2);
      for (const [i, f] of files.entries()) {
        assert.deepEqual(Object.keys(f).sort(), ['download_url', 'id', 'mime_type', 'name', 'size']);
        assert.equal(f.id, up.files[i]!.id);
        assert.equal(f.name, `f${i}.txt`);
        assert.equal(f.size, [10, 20][i]);
        assert.equal(f.mime_type, 'text/plain');
        assert.equal(f.download_url, `/api/v1/download/${f.id as number}`);
      }
    });

    test('encrypted=1 at upload shows as is_encrypted', async () => {
      const up = await newBundle(srv, [5], { encrypted: '1' });
      const r = await call(srv, 'GET', `/api/v1/bundle/${up.short_code}`, { json: true });
      assert.equal(r.json.is_encrypted, true);
    });

    test('bad code format → 400, unknown code → 404', async () => {
      for (const code of ['abc', 'abcdef', 'ab-cd', 'ab%20c', '%C3%A4bcde', 'abcd%2F']) {
        assertError(await call(srv, 'GET', `/api/v1/bundle/${code}`, { json: true }), 400);
        assertError(await call(srv, 'GET', `/api/v1/bundle/${code}/status`, { json: true }), 400);
      }
      assertError(await call(srv, 'GET', `/api/v1/bundle/${unknownCode()}`, { json: true }), 404);
    });

    test('GET /status has exactly the documented fields', async () => {
      const up = await newBundle(srv, [100, 23]);
      const r = await call(srv, 'GET', `/api/v1/bundle/${up.short_code}/status`, { json: true });
      assert.equal(r.status, 200);
      assert.deepEqual(Object.keys(r.json).sort(), [
        'exists', 'expires_at', 'is_expired', 'max_size_bytes', 'space_remaining', 'success', 'total_size_bytes',
      ]);
      assert.equal(r.json.success, true);
      assert.equal(r.json.exists, true);
      assert.equal(r.json.is_expired, false);
      assert.match(r.json.expires_at as string, SQL_TS);
      assert.equal(r.json.total_size_bytes, 123);
      assert.equal(r.json.max_size_bytes, ANON_MAX);
      assert.equal(r.json.space_remaining, ANON_MAX - 123);
      assertError(await call(srv, 'GET', `/api/v1/bundle/${unknownCode()}/status`, { json: true }), 404);
    });

    test('DELETE /api/v1/bundle/{code}: 401, 403, 404, then 200 removes everything', async () => {
      const up = await newBundle(srv, [10, 20, 30]);
      const keys = await storageKeys(srv, up.short_code);
      assert.equal(keys.length, 3);
      for (const k of keys) assert.ok(onDisk(srv).has(k), `${k} stored`);
      const url = `/api/v1/bundle/${up.short_code}`;

      assertError(await call(srv, 'DELETE', url, { json: true }), 401);
      assertError(await call(srv, 'DELETE', url, { headers: { 'x-upload-token': otherToken() }, json: true }), 403);
      assertError(await call(srv, 'DELETE', url, { headers: { 'x-upload-token': 'not-a-token' }, json: true }), 403);
      assertError(await call(srv, 'DELETE', `/api/v1/bundle/${unknownCode()}`, { headers: { 'x-upload-token': up.upload_token }, json: true }), 404);
      assert.equal((await call(srv, 'GET', url, { json: true })).status, 200, 'failed attempts changed nothing');

      const ok = await call(srv, 'DELETE', url, { headers: { 'x-upload-token': up.upload_token }, json: true });
      assert.equal(ok.status, 200);
      assert.deepEqual(ok.json, { success: true });

      assertError(await call(srv, 'GET', url, { json: true }), 404);
      assertError(await call(srv, 'GET', `${url}/status`, { json: true }), 404);
      for (const f of up.files) assertError(await call(srv, 'GET', f.download_url, { json: true }), 404);
      const disk = onDisk(srv);
      for (const k of keys) assert.ok(!disk.has(k), `${k} removed from disk`);
      assertError(await call(srv, 'DELETE', url, { headers: { 'x-upload-token': up.upload_token }, json: true }), 404);
    });

    test('DELETE /api/v1/file/{id}: 400, 401, 403, then Bearer and ?upload_token= delete', async () => {
      const up = await newBundle(srv, [10, 20, 40]);
      const keys = await storageKeys(srv, up.short_code);
      const [a, b, c] = up.files as [UploadedFile, UploadedFile, UploadedFile];

      for (const bad of ['abc', '0', '-1', '1.5']) assertError(await call(srv, 'DELETE', `/api/v1/file/${bad}?upload_token=${up.upload_token}`, { json: true }), 400);
      assertError(await call(srv, 'DELETE', `/api/v1/file/${a.id}`, { json: true }), 401);
      assertError(await call(srv, 'DELETE', `/api/v1/file/${a.id}`, { headers: { authorization: `Bearer ${otherToken()}` }, json: true }), 403);
      assertError(await call(srv, 'DELETE', `/api/v1/file/${a.id}?upload_token=${otherToken()}`, { json: true }), 403);
      // Another bundle's token does not reach this bundle's files.
      const other = await newBundle(srv, [1]);
      assertError(await call(srv, 'DELETE', `/api/v1/file/${a.id}`, { headers: { authorization: `Bearer ${other.upload_token}` }, json: true }), 403);

      const byHeader = await call(srv, 'DELETE', `/api/v1/file/${a.id}`, { headers: { authorization: `Bearer ${up.upload_token}` }, json: true });
      assert.equal(byHeader.status, 200);
      assert.deepEqual(byHeader.json, { success: true, deleted_file_id: a.id });
      const byQuery = await call(srv, 'DELETE', `/api/v1/file/${b.id}?upload_token=${up.upload_token}`, { json: true });
      assert.equal(byQuery.status, 200);
      assert.deepEqual(byQuery.json, { success: true, deleted_file_id: b.id });

      const info = await call(srv, 'GET', `/api/v1/bundle/${up.short_code}`, { json: true });
      assert.equal(info.json.file_count, 1);
      assert.equal(info.json.total_size_bytes, 40);
      assert.deepEqual((info.json.files as UploadedFile[]).map((f) => f.id), [c.id]);
      const status = await call(srv, 'GET', `/api/v1/bundle/${up.short_code}/status`, { json: true });
      assert.equal(status.json.total_size_bytes, 40);
      assert.equal(status.json.space_remaining, ANON_MAX - 40);

      for (const f of [a, b]) assertError(await call(srv, 'GET', f.download_url, { json: true }), 404);
      const kept = await request(`${srv.url}${c.download_url}`);
      assert.equal((await kept.body.arrayBuffer()).byteLength, 40);
      assert.equal(kept.statusCode, 200);
      // The answer comes once the rows are gone; the bytes go right after it.
      await waitFor('the deleted files to be gone from disk', () => {
        const disk = onDisk(srv);
        return !disk.has(keys[0]!) && !disk.has(keys[1]!);
      });
      assert.ok(onDisk(srv).has(keys[2]!), 'the remaining file stays');
      // Gone: answered as any file the token does not open (see the next test).
      assertError(await call(srv, 'DELETE', `/api/v1/file/${a.id}`, { headers: { authorization: `Bearer ${up.upload_token}` }, json: true }), 403);
    });

    test('DELETE /api/v1/file/{id}: no such file and not yours (locked, expired) get the same answer', async () => {
      const mine = await newBundle(srv, [5]);
      const locked = await newBundle(srv, [6], { access_password: 'pw' });
      const expired = await newBundle(srv, [7]);
      assert.equal((await srv.cli(['bundles', 'expire', expired.short_code])).code, 0);
      const tries: Array<[number, string]> = [
        [12_345, mine.upload_token], // no such file (ids are random in 1 … 2^53−1)
        [999_999_999_999, mine.upload_token],
        [locked.files[0]!.id, mine.upload_token], // another bundle's, locked
        [expired.files[0]!.id, mine.upload_token], // another bundle's, expired
        [mine.files[0]!.id, otherToken()], // not this token's
      ];
      const answers = [];
      for (const [id, token] of tries) {
        const r = await call(srv, 'DELETE', `/api/v1/file/${id}`, { headers: { authorization: `Bearer ${token}` }, json: true });
        answers.push({ status: r.status, body: r.json });
      }
      for (const a of answers) assert.deepEqual(a, answers[0], JSON.stringify(answers));
      assert.equal(answers[0]!.status, 403);
    });

    test('DELETE /api/v1/file/{id}?upload_token= works when the Bearer header carries an API key', async () => {
      // CONTRACT: API keys are never 64-hex, so a Bearer key is never mistaken for an upload token;
      // the spec accepts an API key on any request, and the token is then the query parameter.
      const key = await srv.cli(['keys', 'create', '--plan', 'starter']);
      assert.equal(key.code, 0, key.stderr);
      const up = await newBundle(srv, [10, 20]);
      const r = await call(srv, 'DELETE', `/api/v1/file/${up.files[0]!.id}?upload_token=${up.upload_token}`, {
        headers: { authorization: `Bearer ${key.stdout.trim()}` },
        json: true,
      });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual(r.json, { success: true, deleted_file_id: up.files[0]!.id });
    });

    test('an expired bundle: info and downloads 404, status says expired, append and delete 403', async () => {
      const up = await newBundle(srv, [10]);
      const cli = await srv.cli(['bundles', 'expire', up.short_code]);
      assert.equal(cli.code, 0, cli.stderr);

      assertError(await call(srv, 'GET', `/api/v1/bundle/${up.short_code}`, { json: true }), 404);
      assertError(await call(srv, 'GET', up.files[0]!.download_url, { json: true }), 404);
      const status = await call(srv, 'GET', `/api/v1/bundle/${up.short_code}/status`, { json: true });
      assert.equal(status.status, 200);
      assert.equal(status.json.success, true);
      assert.equal(status.json.exists, true);
      assert.equal(status.json.is_expired, true);
      assert.match(status.json.expires_at as string, SQL_TS);
      assert.ok(fromSqlUtc(status.json.expires_at as string) <= Date.now() + 1000);

      assertError(await upload(srv, [{ name: 'late.txt', data: Buffer.from('late') }], { path: `/api/v1/upload/${up.upload_token}` }), 403);
      assertError(await call(srv, 'DELETE', `/api/v1/file/${up.files[0]!.id}?upload_token=${up.upload_token}`, { json: true }), 403);
    });

    test('file ids are random in 1 … 2^53−1, exact in JSON; listings and zips keep upload order', async () => {
      const up = await newBundle(srv, [1, 2, 3, 4, 5, 6]);
      const ids = up.files.map((f) => f.id);
      for (const id of ids) assert.ok(Number.isSafeInteger(id) && id >= 1, String(id));
      // Sequential ids would differ by one; six random draws are all far apart.
      const sorted = [...ids].sort((a, b) => a - b);
      for (let i = 1; i < sorted.length; i++) assert.ok(sorted[i]! - sorted[i - 1]! > 1000, `ids ${sorted.join(', ')}`);
      const info = await call(srv, 'GET', `/api/v1/bundle/${up.short_code}`, { json: true });
      assert.deepEqual(info.json.files.map((f: { id: number; name: string }) => [f.id, f.name]), up.files.map((f) => [f.id, f.name]));
      // A file of an earlier release keeps its small id.
      const [b] = await srv.sql<{ id: number }[]>`select id from bundles where short_code = ${up.short_code}`;
      const [old] = await srv.sql<{ id: string }[]>`
        insert into files (id, seq, bundle_id, storage_key, name, size, mime_type, crc32)
        select 77, nextval('files_id_seq'), ${b!.id}, md5('old'), 'old.txt', 0, 'text/plain', 0 returning id::text`;
      await srv.sql`update bundles set file_count = file_count + 1 where id = ${b!.id}`;
      assert.equal(old!.id, '77');
      const r = await call(srv, 'GET', '/api/v1/download/77');
      assert.equal(r.status, 200);
    });

    test('appending with an unknown token → 403', async () => {
      assertError(await upload(srv, [{ name: 'x.txt', data: Buffer.from('x') }], { path: `/api/v1/upload/${otherToken()}` }), 403);
    });

    test('unknown routes → 404 JSON', async () => {
      assertError(await call(srv, 'GET', '/api/v1/nope', { json: true }), 404);
      assertError(await call(srv, 'POST', '/api/v2/upload', { json: true }), 404);
      assertError(await call(srv, 'GET', '/api/v1/bundle/abcde/files', { json: true }), 404);
    });
  });
}
