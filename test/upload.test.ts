import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { request } from 'undici';
import { backends, startServer, storedPaths, type TestServer } from './helpers/server.ts';
import { multipart, type Part } from './helpers/multipart.ts';

const MiB = 1 << 20;
/** Per-server anonymous cap: small enough to cross cheaply, large enough for the 5 MiB round trip. */
const CAP = 8 * MiB;
const DAY_MS = 86_400_000;

interface FileJson { id: number; name: string; size: number; mime_type: string; download_url: string }
interface Reply {
  success: boolean; error?: string; short_code: string; share_url: string; upload_url: string;
  upload_token: string; expires_at: string; files: FileJson[];
}
interface Sent { status: number; json: Reply }
interface Snapshot { parts: string[]; files: string[]; bundles: number; fileRows: number }

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');
const file = (filename: string, data: Buffer | string, contentType?: string): Part => ({
  name: 'files[]', filename, data: Buffer.isBuffer(data) ? data : Buffer.from(data), contentType,
});

async function send(srv: TestServer, urlPath: string, body: Buffer | string, headers: Record<string, string>): Promise<Sent> {
  const res = await request(`${srv.url}${urlPath}`, { method: 'POST', body, headers });
  assert.match(String(res.headers['content-type']), /^application\/json/);
  return { status: res.statusCode, json: (await res.body.json()) as Reply };
}

function upload(srv: TestServer, parts: Part[], urlPath = '/api/v1/upload', headers: Record<string, string> = {}): Promise<Sent> {
  const { body, contentType } = multipart(parts);
  return send(srv, urlPath, body, { 'content-type': contentType, ...headers });
}

async function created(srv: TestServer, parts: Part[]): Promise<Reply> {
  const r = await upload(srv, parts);
  assert.equal(r.status, 201, JSON.stringify(r.json));
  return r.json;
}

async function getJson(srv: TestServer, urlPath: string): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await request(`${srv.url}${urlPath}`);
  return { status: res.statusCode, json: (await res.body.json()) as Record<string, unknown> };
}

async function download(srv: TestServer, f: FileJson): Promise<{ data: Buffer; headers: Record<string, unknown> }> {
  const res = await request(`${srv.url}${f.download_url}`);
  assert.equal(res.statusCode, 200);
  return { data: Buffer.from(await res.body.arrayBuffer()), headers: res.headers };
}

function assertError(r: Sent, status: number, pattern?: RegExp): void {
  assert.equal(r.status, status, JSON.stringify(r.json));
  assert.equal(r.json.success, false);
  assert.equal(typeof r.json.error, 'string');
  if (pattern) assert.match(r.json.error!, pattern);
}

async function snapshot(srv: TestServer): Promise<Snapshot> {
  const { parts, files } = storedPaths(srv.dataDir);
  const [row] = await srv.sql<{ bundles: number; files: number }[]>`
    select (select count(*)::int from bundles) as bundles, (select count(*)::int from files) as files`;
  return { parts: parts.sort(), files: files.sort(), bundles: row!.bundles, fileRows: row!.files };
}

/** Polls (deadline 3 s) until disk and db are back to `before`: a failed request keeps nothing. */
async function assertNothingKept(srv: TestServer, before: Snapshot): Promise<void> {
  const deadline = Date.now() + 3000;
  let now = await snapshot(srv);
  while (Date.now() < deadline && JSON.stringify(now) !== JSON.stringify({ ...before, parts: [] })) {
    await new Promise((r) => setTimeout(r, 50));
    now = await snapshot(srv);
  }
  assert.deepEqual(now, { ...before, parts: [] });
}

/** Every stored file is a server-made key with a row, and every row has its file. */
async function assertDiskMatchesRows(srv: TestServer): Promise<void> {
  const { files } = storedPaths(srv.dataDir);
  for (const p of files) assert.match(p, /^[0-9a-f]{2}\/[0-9a-f]{2}\/[0-9a-f]{32}$/);
  const rows = await srv.sql<{ storage_key: string }[]>`select storage_key from files`;
  assert.deepEqual(files.map((p) => path.basename(p)).sort(), rows.map((r) => r.storage_key).sort());
}

/** The name a download's Content-Disposition carries (filename* preferred); the header must be well-formed. */
function dispositionName(h: unknown): string {
  const value = String(h);
  assert.match(value, /^attachment; filename="[\x20\x21\x23-\x5b\x5d-\x7e]*"(; filename\*=UTF-8''[A-Za-z0-9!#$&+.^_`|~%-]+)?$/);
  const star = /filename\*=UTF-8''(\S+)$/.exec(value);
  return star ? decodeURIComponent(star[1]!) : /filename="([^"]*)"/.exec(value)![1]!;
}

/** DATA_DIR entries outside the embedded database, as relative paths. */
function dataTree(dataDir: string): string[] {
  return (fs.readdirSync(dataDir, { recursive: true }) as string[]).filter((p) => p !== 'pg' && !p.startsWith(`pg${path.sep}`)).sort();
}

for (const backend of backends()) {
  describe(`upload (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { ANON_MAX_BUNDLE_BYTES: String(CAP), RATE_LIMIT_ANON_PER_HOUR: '100000' });
    });
    after(async () => {
      await srv?.close();
    });

    it('201 with the documented fields; every byte comes back', async () => {
      const big = randomBytes(5 * MiB);
      const sent = [
        file('empty.bin', Buffer.alloc(0)),
        file('hello.txt', 'hello world\n', 'text/plain'),
        file('big.bin', big),
        file('small.json', '{"a":1}', 'application/json'),
      ];
      const t0 = Date.now();
      const r = await upload(srv, sent);
      assert.equal(r.status, 201, JSON.stringify(r.json));
      const j = r.json;
      assert.equal(j.success, true);
      assert.match(j.short_code, /^[a-zA-Z0-9]{5}$/);
      assert.equal(j.share_url, `/${j.short_code}`);
      assert.match(j.upload_token, /^[0-9a-f]{64}$/);
      assert.equal(j.upload_url, `/u/${j.upload_token}`);
      assert.match(j.expires_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$/);
      const expires = Date.parse(j.expires_at);
      assert.ok(expires >= t0 + 3 * DAY_MS - 2000 && expires <= Date.now() + 3 * DAY_MS + 2000, j.expires_at);
      assert.equal(j.files.length, sent.length);
      const ids = j.files.map((f) => f.id);
      assert.ok(ids.every(Number.isInteger), 'integer ids');
      assert.deepEqual([...ids].sort((a, b) => a - b), ids, 'ids in upload order');
      for (const [i, f] of j.files.entries()) {
        assert.deepEqual(Object.keys(f).sort(), ['download_url', 'id', 'mime_type', 'name', 'size']);
        assert.equal(f.name, sent[i]!.filename);
        assert.equal(f.size, sent[i]!.data!.length);
        assert.equal(f.download_url, `/api/v1/download/${f.id}`);
        assert.equal(typeof f.mime_type, 'string');
        const { data, headers } = await download(srv, f);
        assert.equal(data.length, f.size);
        assert.equal(sha(data), sha(sent[i]!.data!), `${f.name} bytes`);
        assert.equal(headers['content-type'], f.mime_type);
        assert.equal(dispositionName(headers['content-disposition']), f.name);
      }
      assert.equal(j.files[1]!.mime_type, 'text/plain');
      assert.equal(j.files[3]!.mime_type, 'application/json');

      const info = await getJson(srv, `/api/v1/bundle/${j.short_code}`);
      assert.equal(info.status, 200);
      assert.equal(info.json.file_count, sent.length);
      assert.equal(info.json.total_size_bytes, 5 * MiB + 12 + 7);
      assert.equal(info.json.is_encrypted, false);
      assert.deepEqual(info.json.files, j.files);
      await assertDiskMatchesRows(srv);
    });

    it('form fields are read before or after the files', async () => {
      const after = await created(srv, [
        file('a.txt', 'a'),
        { name: 'description', value: 'described after the file' },
        { name: 'notify_email', value: 'someone@example.com' },
      ]);
      const beforeFiles = await created(srv, [{ name: 'description', value: 'described first' }, file('b.txt', 'b')]);
      const rows = await srv.sql<{ short_code: string; description: string; notify_email: string | null }[]>`
        select short_code, description, notify_email from bundles
        where short_code in (${after.short_code}, ${beforeFiles.short_code})`;
      const byCode = new Map(rows.map((r) => [r.short_code, r]));
      assert.equal(byCode.get(after.short_code)?.description, 'described after the file');
      assert.equal(byCode.get(after.short_code)?.notify_email, 'someone@example.com');
      assert.equal(byCode.get(beforeFiles.short_code)?.description, 'described first');
    });

    it('description: 1000 characters accepted, 1001 rejected with nothing kept', async () => {
      await created(srv, [{ name: 'description', value: 'é'.repeat(1000) }, file('a.txt', 'a')]);
      const before = await snapshot(srv);
      assertError(await upload(srv, [file('a.txt', 'a'), { name: 'description', value: 'd'.repeat(1001) }]), 400, /description/i);
      await assertNothingKept(srv, before);
    });

    it('notify_email must be a valid address of at most 255 characters', async () => {
      const before = await snapshot(srv);
      for (const bad of ['not-an-email', 'a@b', 'x y@example.com', `${'a'.repeat(244)}@example.com`]) {
        assertError(await upload(srv, [{ name: 'notify_email', value: bad }, file('a.txt', 'a')]), 400);
      }
      await assertNothingKept(srv, before);
    });

    it('encrypted=1 sets is_encrypted', async () => {
      const j = await created(srv, [{ name: 'encrypted', value: '1' }, file('secret.bin', randomBytes(100))]);
      const info = await getJson(srv, `/api/v1/bundle/${j.short_code}`);
      assert.equal(info.status, 200);
      assert.equal(info.json.is_encrypted, true);
    });

    it('non-ASCII names round-trip in JSON and Content-Disposition', async () => {
      const names = ['café.txt', '日本語のファイル.pdf', '🎉 party 👨‍👩‍👧.png', 'Ünïcödé ñ.tar.gz'];
      const j = await created(srv, names.map((n) => file(n, n)));
      assert.deepEqual(j.files.map((f) => f.name), names);
      for (const f of j.files) {
        const { data, headers } = await download(srv, f);
        assert.equal(data.toString(), f.name);
        assert.match(String(headers['content-disposition']), /filename\*=UTF-8''/);
        assert.equal(dispositionName(headers['content-disposition']), f.name);
      }
    });

    it('hostile file names are sanitized and never become paths', async () => {
      const treeBefore = dataTree(srv.dataDir);
      const outside = path.join(path.dirname(srv.dataDir), 'etc');
      const outsideBefore = fs.existsSync(outside);
      const long = 'x'.repeat(996) + '.txt';
      // Raw Content-Disposition values: quoted with backslash escapes, or RFC 5987 percent-encoded.
      const dispositions = [
        'filename="../../etc/passwd"',
        "filename*=UTF-8''..%2F..%2Fetc%2Fpasswd",
        'filename="a\\b"',
        'filename="C:\\Windows\\system32\\evil.dll"',
        'filename="say \\"hi\\".txt"',
        "filename*=UTF-8''line%0D%0Abreak%00nul%1Besc%7Fdel.txt",
        'filename="tab\there.txt"',
        "filename*=UTF-8''evil%E2%80%AEtxt.exe",
        'filename=".."',
        "filename*=UTF-8''%01%02%03",
        `filename="${long}"`,
        `filename="${'日'.repeat(1000)}"`,
      ];
      const boundary = `----hostile${randomBytes(6).toString('hex')}`;
      const body = Buffer.concat([
        ...dispositions.map((d, i) =>
          Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="files[]"; ${d}\r\n` +
            `Content-Type: application/octet-stream\r\n\r\nfile${i}\r\n`),
        ),
        Buffer.from(`--${boundary}--\r\n`),
      ]);
      const r = await send(srv, '/api/v1/upload', body, { 'content-type': `multipart/form-data; boundary=${boundary}` });
      assert.equal(r.status, 201, JSON.stringify(r.json));
      const names = r.json.files.map((f) => f.name);
      assert.equal(names.length, dispositions.length);
      for (const [i, name] of names.entries()) {
        assert.ok(name.length > 0, `name ${i} empty`);
        assert.doesNotMatch(name, /[/\\]/, `name ${i}: ${name}`);
        assert.doesNotMatch(name, /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/u, `name ${i}: ${JSON.stringify(name)}`);
        assert.ok(name !== '.' && name !== '..', `name ${i}: ${name}`);
        assert.ok([...name].length <= 255, `name ${i} is ${[...name].length} characters`);
        assert.doesNotThrow(() => encodeURIComponent(name), `name ${i} is well-formed UTF-16`);
        const { data, headers } = await download(srv, r.json.files[i]!);
        assert.equal(data.toString(), `file${i}`);
        assert.equal(dispositionName(headers['content-disposition']), name);
      }
      assert.match(names[0]!, /passwd$/);
      assert.match(names[1]!, /passwd$/);
      assert.match(names[3]!, /evil\.dll$/);
      assert.equal(names[4], 'say "hi".txt');
      assert.match(names[5]!, /^line ?break ?nul ?esc ?del\.txt$/);
      assert.ok(long.startsWith(names[10]!.replace(/\.txt$/, '')));

      const added = dataTree(srv.dataDir).filter((p) => !treeBefore.includes(p));
      for (const p of added) {
        assert.match(p, /^files(\/[0-9a-f]{2}){1,2}$|^files\/[0-9a-f]{2}\/[0-9a-f]{2}\/[0-9a-f]{32}$/, `unexpected ${p}`);
      }
      assert.equal(added.filter((p) => /[0-9a-f]{32}$/.test(p)).length, dispositions.length);
      assert.equal(fs.existsSync(outside), outsideBefore, `${outside} appeared`);
      const keys = await srv.sql<{ storage_key: string }[]>`
        select f.storage_key from files f join bundles b on b.id = f.bundle_id where b.short_code = ${r.json.short_code}`;
      for (const k of keys) assert.match(k.storage_key, /^[0-9a-f]{32}$/);
      await assertDiskMatchesRows(srv);
    });

    it('400 for requests without files, with nothing kept', async () => {
      const before = await snapshot(srv);
      const json = { 'content-type': 'application/json' };
      assertError(await upload(srv, [{ name: 'description', value: 'only fields' }]), 400);
      assertError(await upload(srv, [{ name: 'files[]', filename: '', data: Buffer.alloc(0) }]), 400);
      assertError(await upload(srv, [{ name: 'other', filename: 'x.txt', data: Buffer.from('x') }]), 400);
      assertError(await send(srv, '/api/v1/upload', '', { 'content-type': multipart([]).contentType }), 400);
      assertError(await send(srv, '/api/v1/upload', '', {}), 400);
      assertError(await send(srv, '/api/v1/upload', JSON.stringify({ files: ['a.txt'] }), json), 400);
      assertError(await send(srv, '/api/v1/upload', 'files=a.txt', { 'content-type': 'application/x-www-form-urlencoded' }), 400);
      await assertNothingKept(srv, before);
      await created(srv, [file('still.txt', 'serving')]);
    });

    it('a Bearer header on upload is 401 while no API keys exist', async () => {
      const before = await snapshot(srv);
      assertError(await upload(srv, [file('a.txt', 'a')], '/api/v1/upload', { authorization: 'Bearer sk_test_not_a_key' }), 401);
      assertError(await upload(srv, [file('a.txt', 'a')], '/api/v1/upload', { authorization: `Bearer ${'a'.repeat(64)}` }), 401);
      await assertNothingKept(srv, before);
    });

    it('the cap counts file bytes: exactly the cap is 201, one byte more is 400', async () => {
      const exact = await created(srv, [file('exact.bin', randomBytes(CAP))]);
      assert.equal(exact.files[0]!.size, CAP);
      const status = await getJson(srv, `/api/v1/bundle/${exact.short_code}/status`);
      assert.equal(status.json.total_size_bytes, CAP);
      assert.equal(status.json.space_remaining, 0);
      const before = await snapshot(srv);
      assertError(await upload(srv, [file('over.bin', randomBytes(CAP + 1))]), 400, /size|limit|large/i);
      assertError(await upload(srv, [file('half1.bin', randomBytes(CAP / 2)), file('half2.bin', randomBytes(CAP / 2 + 1))]), 400, /size|limit|large/i);
      await assertNothingKept(srv, before);
      assertError(await upload(srv, [file('one.bin', 'x')], `/api/v1/upload/${exact.upload_token}`), 400, /size|limit|large/i);
      await assertNothingKept(srv, before);
    });
  });
}
