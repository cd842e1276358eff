import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { prerequisite } from './helpers/prereq.ts';
import { tusCall, tusMeta, tusPatch, uploadPath } from './helpers/tus.ts';
import { assertError, isolateIds, mintKey } from './access-util.ts';
import { bearer, call, upload, uploaded, type Json } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';

const ariaMissing = prerequisite({
  what: 'download limits with parallel segments (test/download-limits.test.ts)',
  missing: spawnSync('aria2c', ['--version']).status === 0 ? false : 'aria2c is missing',
  install: 'apt-get install -y aria2',
});

/** GET with a user agent of its own (one client each); the body read whole. */
async function fetchAs(url: string, agent: string, headers: Record<string, string> = {}): Promise<{ status: number; body: Buffer }> {
  const r = await request(url, { headers: { 'user-agent': agent, ...headers } });
  return { status: r.statusCode, body: Buffer.from(await r.body.arrayBuffer()) };
}

function run(cmd: string, args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    p.on('close', (code) => resolve({ code, stderr }));
  });
}

for (const backend of backends()) {
  describe(`download limits (${backend})`, () => {
    let srv: TestServer;
    let key: string;
    let tmp: string;
    before(async () => {
      srv = await startServer(backend);
      await isolateIds(srv);
      key = await mintKey(srv, 'starter');
      tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-limits-'));
    });
    after(async () => {
      fs.rmSync(tmp, { recursive: true, force: true });
      await srv?.close();
    });

    const limited = (n: string, files: Array<{ name: string; data: string | Buffer }>, o: { key?: string } = {}): Promise<Json> =>
      uploaded(srv, files, { fields: { max_downloads: n }, key: o.key });
    const info = (code: string): Promise<Json> => call(srv, 'GET', `/api/v1/bundle/${code}`).then((r) => r.json);

    test('max_downloads 2: two complete downloads, then 404 everywhere; HEAD never counts; the bundle expires', async () => {
      const b = await limited('2', [{ name: 'a.txt', data: 'burn after reading' }], { key });
      assert.equal(b.max_downloads, 2);
      const id = b.files[0].id as number;
      let i = await info(b.short_code);
      assert.equal(i.max_downloads, 2);
      assert.equal(i.files[0].downloads_remaining, 2);
      for (let k = 0; k < 5; k++) assert.equal((await call(srv, 'HEAD', `/api/v1/download/${id}`)).status, 200);
      assert.equal((await call(srv, 'HEAD', `/zip/${b.short_code}`)).status, 200);
      const first = await call(srv, 'GET', `/api/v1/download/${id}`);
      assert.equal(first.status, 200);
      assert.equal(first.text, 'burn after reading');
      // Read-your-writes: counted before the last bytes went out, so the next answer already shows it.
      assert.equal((await info(b.short_code)).files[0].downloads_remaining, 1, 'bundle info right after the download');
      const mine = await call(srv, 'GET', '/api/v1/my/bundles', { headers: bearer(key) });
      const entry = mine.json.bundles.find((x: Json) => x.short_code === b.short_code);
      assert.equal(entry.max_downloads, 2);
      assert.equal(entry.files[0].downloads_remaining, 1);
      const page = await call(srv, 'GET', `/${b.short_code}`);
      assert.match(page.text, /1 download left/);
      assert.equal((await call(srv, 'GET', `/d/${id}`)).status, 200);
      await waitFor('the bundle expired', async () => (await call(srv, 'GET', `/api/v1/bundle/${b.short_code}`)).status === 404);
      for (const p of [`/api/v1/download/${id}`, `/d/${id}`, `/zip/${b.short_code}`, `/${b.short_code}`]) {
        assert.equal((await call(srv, 'GET', p)).status, 404, p);
        assert.equal((await call(srv, 'HEAD', p)).status, 404, p);
      }
      assertError(await call(srv, 'GET', `/api/v1/bundle/${b.short_code}`), 404);
    });

    test('unlimited bundles keep the interface\'s fields and are never cut off', async () => {
      const b = await uploaded(srv, [{ name: 'u.txt', data: 'u' }]);
      const i = await info(b.short_code);
      assert.ok(!('max_downloads' in i), 'the interface\'s fields only');
      assert.ok(!('downloads_remaining' in i.files[0]));
      for (let k = 0; k < 3; k++) assert.equal((await call(srv, 'GET', `/api/v1/download/${b.files[0].id}`)).status, 200);
    });

    test('Range pieces count once, when the whole file has been sent; the last byte alone does not', async () => {
      const data = randomBytes(100_000);
      const b = await limited('1', [{ name: 'r.bin', data }]);
      const url = `${srv.url}/api/v1/download/${b.files[0].id}`;
      // Someone else asking only for the last byte takes the download but is not sent the rest.
      const tail = await fetchAs(url, 'tail-only', { range: 'bytes=-1' });
      assert.equal(tail.status, 206);
      assert.equal((await fetchAs(url, 'other', { range: 'bytes=0-9' })).status, 404, 'the only download is in progress elsewhere');
      await srv.sql`delete from download_sessions`; // (as if the lease ran out)
      const pieces = ['bytes=50000-', 'bytes=0-29999', 'bytes=20000-50000'];
      const got: Buffer[] = [];
      for (const range of pieces) {
        const r = await fetchAs(url, 'resumer', { range });
        assert.equal(r.status, 206, range);
        got.push(r.body);
      }
      assert.deepEqual(Buffer.concat([got[1]!, got[2]!.subarray(10_000), got[0]!.subarray(1)]), data);
      // The count is credited once the response has been sent, a moment after the client has it.
      await waitFor('counted: the file is gone', async () => (await fetchAs(url, 'resumer', { range: 'bytes=0-0' })).status === 404);
    });

    test('nearly a whole copy counts, whichever ranges it came in; limited images have no preview', async () => {
      const data = randomBytes(200_000);
      const b = await limited('2', [{ name: 'n.bin', data }], { key });
      const url = `${srv.url}/api/v1/download/${b.files[0].id}`;
      // All but the last byte, once: a copy in all but name.
      const r = await fetchAs(url, 'almost', { range: `bytes=0-${data.length - 2}` });
      assert.equal(r.status, 206);
      assert.equal((await info(b.short_code)).files[0].downloads_remaining, 1, 'all but one byte counts');
      // The same half twice: as many bytes as the file holds count too.
      for (let k = 0; k < 2; k++) assert.equal((await fetchAs(url, 'halves', { range: 'bytes=0-99999' })).status, 206);
      assert.equal((await call(srv, 'GET', `/api/v1/bundle/${b.short_code}`)).status, 404, 'both downloads counted: gone');
      // An image under a limit: no preview anywhere (a preview is a copy nobody counts).
      const png = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex');
      const img = await limited('1', [{ name: 'p.png', data: png }], { key });
      const imgId = img.files[0].id as number;
      assert.equal((await call(srv, 'GET', `/d/${imgId}?preview=1`)).status, 404);
      const mine = await call(srv, 'GET', '/api/v1/my/bundles', { headers: bearer(key) });
      assert.ok(!('thumbnail_url' in mine.json.bundles.find((x: Json) => x.short_code === img.short_code).files[0]));
      assert.doesNotMatch((await call(srv, 'GET', `/${img.short_code}`)).text, /preview=1/);
      assert.equal((await info(img.short_code)).files[0].downloads_remaining, 1);
    });

    test('curl -C - after a break: one download', async () => {
      const data = randomBytes(32 << 20);
      const b = await limited('1', [{ name: 'big.bin', data }]);
      const url = `${srv.url}/api/v1/download/${b.files[0].id}`;
      const out = path.join(tmp, 'curl2.bin');
      // The break: the reader goes away after 1 MiB, as curl dies on the pipe it writes to. (A break by time
      // depended on the kernel's socket buffers, which may grow to hold all of a slowly read file.)
      const cut = await run('bash', ['-c', 'curl -s -A curl-resume "$1" | head -c 1048576 > "$2"; exit ${PIPESTATUS[0]}', 'cut', url, out]);
      assert.equal(cut.code, 23, 'the first try breaks part-way');
      const part = fs.statSync(out).size;
      assert.equal(part, 1 << 20);
      assert.equal((await info(b.short_code)).files[0].downloads_remaining, 1, 'a cut download is not counted');
      const resumed = await run('curl', ['-s', '-f', '-A', 'curl-resume', '-C', '-', '-o', out, url]);
      assert.equal(resumed.code, 0, resumed.stderr);
      assert.ok(fs.readFileSync(out).equals(data));
      await waitFor('counted', async () => (await call(srv, 'GET', `/api/v1/download/${b.files[0].id}`)).status === 404);
    });

    test('aria2c -x4: parallel segments are one download', { skip: ariaMissing }, async () => {
      // aria2c's first request asks for the whole file and is cut where the second segment starts: the file must
      // be large enough that the server cannot have handed all of it to the socket by then (a whole response
      // sent counts as the download, and the other segments would find the file gone).
      const data = randomBytes(48 << 20);
      const b = await limited('1', [{ name: 'seg.bin', data }]);
      const url = `${srv.url}/api/v1/download/${b.files[0].id}`;
      const r = await run('aria2c', ['-q', '-x4', '-s4', '-k1M', '--allow-overwrite=true', '--auto-file-renaming=false', '-d', tmp, '-o', 'aria.bin', url]);
      assert.equal(r.code, 0, r.stderr);
      assert.ok(fs.readFileSync(path.join(tmp, 'aria.bin')).equals(data));
      await waitFor('counted', async () => (await call(srv, 'GET', `/api/v1/download/${b.files[0].id}`)).status === 404);
    });

    test('a zip counts once for each file; in pieces too', async () => {
      const b = await limited('2', [{ name: 'x.txt', data: 'x'.repeat(5000) }, { name: 'y.txt', data: 'y'.repeat(5000) }]);
      const zipUrl = `${srv.url}/zip/${b.short_code}`;
      const whole = await fetchAs(zipUrl, 'zipper');
      assert.equal(whole.status, 200);
      const left = async (): Promise<number[]> => (await info(b.short_code)).files.map((f: Json) => f.downloads_remaining);
      await waitFor('counted', async () => (await left()).join() === '1,1');
      // The second time in two pieces, split inside the first file's data.
      const size = whole.body.length;
      assert.equal((await fetchAs(zipUrl, 'zipper2', { range: 'bytes=0-2999' })).status, 206);
      assert.deepEqual(await left(), [1, 1], 'nothing whole yet');
      assert.equal((await fetchAs(zipUrl, 'zipper2', { range: `bytes=3000-${size - 1}` })).status, 206);
      await waitFor('every file at its limit: the bundle expired', async () => (await call(srv, 'GET', `/api/v1/bundle/${b.short_code}`)).status === 404);
      assert.equal((await fetchAs(zipUrl, 'zipper3')).status, 404);
    });

    test('concurrent downloads racing for the last ones: exactly N complete', async () => {
      const data = randomBytes(256 * 1024);
      const b = await limited('3', [{ name: 'race.bin', data }]);
      const url = `${srv.url}/api/v1/download/${b.files[0].id}`;
      // One address and one user agent: each whole GET at once is a download of its own.
      const rs = await Promise.all(Array.from({ length: 10 }, () => fetchAs(url, 'same-client')));
      const ok = rs.filter((r) => r.status === 200);
      assert.equal(ok.length, 3, rs.map((r) => r.status).join(','));
      for (const r of ok) assert.ok(r.body.equals(data));
      assert.ok(rs.every((r) => r.status === 200 || r.status === 404));
      await waitFor('all counted', async () => (await fetchAs(url, 'late')).status === 404);
    });

    test('bad max_downloads: 400 naming the field, nothing created (form and tus)', async () => {
      const count = async (): Promise<number> => Number((await srv.sql`select count(*)::int as n from bundles`)[0]!.n);
      const before = await count();
      for (const v of ['0', '1001', 'abc', '1e3', '-1', '2.5', ' 3', '0x10', '01']) {
        const r = await upload(srv, [{ name: 'a.txt', data: 'a' }], { fields: { max_downloads: v } });
        assertError(r, 400, v);
        assert.match(r.json.error, /max_downloads/, v);
        const t = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '1', 'upload-metadata': tusMeta({ filename: 'a', max_downloads: v }) });
        assert.equal(t.status, 400, `tus ${v}: ${t.body}`);
      }
      assert.equal(await count(), before);
      for (const v of ['1', '1000']) assert.equal((await upload(srv, [{ name: 'a.txt', data: 'a' }], { fields: { max_downloads: v } })).status, 201);
    });

    test('tus: max_downloads in the metadata', async () => {
      const created = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '3', 'upload-metadata': tusMeta({ filename: 't.txt', max_downloads: '1' }) });
      assert.equal(created.status, 201, created.body);
      const done = await tusPatch(srv, uploadPath(created.headers.location!), 0, Buffer.from('abc'));
      assert.equal(done.status, 204, done.body);
      const code = done.headers['sluice-short-code']!;
      assert.equal((await info(code)).max_downloads, 1);
      const id = done.headers['sluice-file-id'];
      assert.equal((await call(srv, 'GET', `/api/v1/download/${id}`)).status, 200);
      await waitFor('counted', async () => (await call(srv, 'GET', `/api/v1/download/${id}`)).status === 404);
    });
  });
}
