import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';
import { request } from 'undici';
import { backends, removeStored, startServer, type TestServer } from './helpers/server.ts';
import { bufferReader, parseZip } from './zip-util.ts';
import { assertNotFound, get, hdr, openStoredFds, pythonZip, sha, storedFiles, unzipTest, yazlZip, type Upload } from './zip-tools.ts';
import { uploaded } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';

for (const backend of backends()) {
  describe(`GET /zip/<code> (${backend})`, () => {
    let srv: TestServer;
    let tmp: string;
    const big = randomBytes(24 * 1024 * 1024 + 17); // more than the socket buffers hold: backpressure is real
    const files = [
      { name: 'a.txt', data: Buffer.from('first a') },
      { name: 'a.txt', data: Buffer.from('second a') },
      { name: 'A.TXT', data: Buffer.from('third, other case') },
      { name: '../x', data: Buffer.from('dot-dot x') },
      { name: 'x', data: Buffer.from('plain x') },
      { name: 'empty.txt', data: Buffer.alloc(0) },
      { name: 'résumé ✓.txt', data: Buffer.from('unicode') },
      { name: 'big.bin', data: big },
    ];
    let up: Upload;
    let zip: Buffer;
    let zipPath: string;

    before(async () => {
      srv = await startServer(backend);
      tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-zipt-'));
      up = await uploaded(srv, files);
      zipPath = `/zip/${up.short_code}`;
    });
    after(async () => {
      await srv?.close();
      if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
    });

    test('the whole bundle: exact length, headers, every entry intact under a unique safe name', async () => {
      const r = await get(srv, zipPath);
      assert.equal(r.status, 200, r.body.toString().slice(0, 200));
      zip = r.body;
      assert.equal(hdr(r.headers, 'content-length'), String(zip.length));
      assert.equal(hdr(r.headers, 'content-type'), 'application/zip');
      assert.equal(hdr(r.headers, 'content-disposition'), `attachment; filename="${up.short_code}.zip"`);
      assert.equal(hdr(r.headers, 'accept-ranges'), 'bytes');
      assert.match(hdr(r.headers, 'etag') ?? '', /^"[^"]+"$/);
      assert.equal(hdr(r.headers, 'x-ratelimit-limit'), undefined, 'content paths are not admitted');

      const { entries } = parseZip(bufferReader(zip), zip.length);
      const names = entries.map((e) => e.name);
      assert.deepEqual(names, ['a.txt', 'a (1).txt', 'A (2).TXT', 'x', 'x (1)', 'empty.txt', 'résumé ✓.txt', 'big.bin']);
      assert.equal(new Set(names.map((n) => n.toLowerCase())).size, names.length, 'unique');
      for (const n of names) assert.ok(!/[/\\\u0000-\u001f]/.test(n) && !n.startsWith('.'), n);
      entries.forEach((e, i) => {
        const data = zip.subarray(e.dataOffset, e.dataOffset + e.size);
        assert.equal(sha(data), sha(files[i]!.data), `${e.name} content`);
        assert.equal(e.crc32, crc32(data), `${e.name} CRC`);
        assert.equal(e.method, 0);
        assert.equal(e.flags, 1 << 11, 'UTF-8 flag, no data descriptor');
      });
    });

    test('the same bytes yazl builds from the same names, data and upload times', async () => {
      const stored = await storedFiles(srv, up.short_code);
      const { entries } = parseZip(bufferReader(zip), zip.length);
      const ref = await yazlZip(stored.map((s, i) => ({ name: entries[i]!.name, data: files[i]!.data, mtime: s.created_at })));
      assert.equal(ref.finalSize, zip.length);
      assert.ok(ref.bytes.equals(zip), 'byte-identical to yazl');
    });

    test('python zipfile and unzip accept the archive', async (t) => {
      const file = path.join(tmp, 'bundle.zip');
      fs.writeFileSync(file, zip);
      const py = pythonZip(file, 'test');
      if (py === undefined) t.diagnostic('python3 not installed: skipped');
      else {
        assert.equal(py.bad, null, 'every CRC checks');
        assert.deepEqual(py.entries.map(([n, s]) => [n, s]), parseZip(bufferReader(zip), zip.length).entries.map((e) => [e.name, e.size]));
      }
      const u = unzipTest(file);
      if (u === undefined) t.diagnostic('unzip not installed: skipped');
      else assert.equal(u.status, 0, u.out);
    });

    test('HEAD carries the GET headers and no body', async () => {
      const g = await get(srv, zipPath, {}, 'GET');
      const h = await get(srv, zipPath, {}, 'HEAD');
      assert.equal(h.status, 200);
      assert.equal(h.body.length, 0);
      for (const k of ['content-length', 'content-type', 'content-disposition', 'etag', 'accept-ranges']) {
        assert.equal(hdr(h.headers, k), hdr(g.headers, k), k);
      }
      const hr = await get(srv, zipPath, { range: 'bytes=100-199' }, 'HEAD');
      assert.equal(hr.status, 206);
      assert.equal(hdr(hr.headers, 'content-length'), '100');
      assert.equal(hdr(hr.headers, 'content-range'), `bytes 100-199/${zip.length}`);
    });

    test('Range: a broken download resumes; any slice matches; If-Range guards a changed archive', async () => {
      const etag = hdr((await get(srv, zipPath, {}, 'HEAD')).headers, 'etag')!;
      const cut = 5_000_123;
      const first = await get(srv, zipPath, { range: `bytes=0-${cut - 1}` });
      assert.equal(first.status, 206);
      assert.equal(first.body.length, cut);
      const rest = await get(srv, zipPath, { range: `bytes=${cut}-`, 'if-range': etag });
      assert.equal(rest.status, 206);
      assert.equal(hdr(rest.headers, 'content-range'), `bytes ${cut}-${zip.length - 1}/${zip.length}`);
      assert.equal(hdr(rest.headers, 'content-length'), String(zip.length - cut));
      assert.ok(Buffer.concat([first.body, rest.body]).equals(zip), 'first part + resumed part = archive');

      // slices across headers, file data and the central directory
      const { entries, cdOffset } = parseZip(bufferReader(zip), zip.length);
      const bigEntry = entries.at(-1)!;
      for (const [s, e] of [[0, 0], [20, 400], [bigEntry.localOffset - 3, bigEntry.dataOffset + 2_000_000], [cdOffset - 10, zip.length - 1]] as const) {
        const r = await get(srv, zipPath, { range: `bytes=${s}-${e}` });
        assert.equal(r.status, 206, `${s}-${e}`);
        assert.ok(r.body.equals(zip.subarray(s, e + 1)), `bytes ${s}-${e}`);
      }
      const suffix = await get(srv, zipPath, { range: 'bytes=-100' });
      assert.ok(suffix.body.equals(zip.subarray(zip.length - 100)));

      const stale = await get(srv, zipPath, { range: `bytes=${cut}-`, 'if-range': '"not-the-etag"' });
      assert.equal(stale.status, 200, 'If-Range mismatch: the whole archive');
      assert.ok(stale.body.equals(zip));

      const bad = await get(srv, zipPath, { range: `bytes=${zip.length}-` });
      assert.equal(bad.status, 416);
      assert.equal(hdr(bad.headers, 'content-range'), `bytes */${zip.length}`);
      const nm = await get(srv, zipPath, { 'if-none-match': etag });
      assert.equal(nm.status, 304);

      // a resume guarded by If-Match instead of If-Range: 412 on a changed archive, never a splice
      const matched = await get(srv, zipPath, { range: `bytes=${cut}-`, 'if-match': etag });
      assert.equal(matched.status, 206);
      const changed = await get(srv, zipPath, { range: `bytes=${cut}-`, 'if-match': '"z1-an-older-archive"' });
      assert.equal(changed.status, 412);
      assert.equal(hdr(changed.headers, 'etag'), etag);
      const undated = await get(srv, zipPath, { range: 'bytes=0-9', 'if-unmodified-since': 'Tue, 01 Jan 2002 00:00:00 GMT' });
      assert.equal(undated.status, 206, 'no modification date: If-Unmodified-Since is ignored');
    });

    // Counts the server's open descriptors under DATA_DIR/files; an S3 read holds a request instead.
    const countsFds = backend === 's3' && 'counts open files under DATA_DIR/files (disk store only)';
    test('a client that stops reading holds one file open; going away releases it', { skip: countsFds }, async () => {
      assert.equal(openStoredFds(srv), 0);
      const sock = net.connect(srv.port, '127.0.0.1');
      sock.pause(); // never read: the server must stall on backpressure, not buffer the archive
      sock.write(`GET ${zipPath} HTTP/1.1\r\nHost: x\r\n\r\n`);
      await waitFor('the server to open big.bin', () => openStoredFds(srv) === 1);
      // Checkpoint: a reading client gets the whole archive meanwhile, so a server that buffered the
      // stalled one instead of waiting on it would have read big.bin to the end and closed it by now.
      assert.equal((await get(srv, zipPath)).status, 200);
      await waitFor("the reading client's files to close", () => openStoredFds(srv) <= 1);
      assert.equal(openStoredFds(srv), 1, 'still stalled on the unread socket');
      sock.destroy();
      await waitFor('the file to be closed after the abort', () => openStoredFds(srv) === 0);
      assert.equal((await get(srv, '/healthz')).status, 200);
    });

    test('unknown, malformed and expired codes are 404 JSON; no API budget is spent', async () => {
      assertNotFound(await get(srv, '/zip/zzzzz'), 'unknown');
      assertNotFound(await get(srv, '/zip/bad!'), 'bad format');
      assertNotFound(await get(srv, '/zip/toolong1'), 'too long');
      const before = Number(hdr((await get(srv, `/api/v1/bundle/${up.short_code}`)).headers, 'x-ratelimit-remaining'));
      for (let i = 0; i < 3; i++) await get(srv, zipPath, {}, 'HEAD');
      const afterZip = Number(hdr((await get(srv, `/api/v1/bundle/${up.short_code}`)).headers, 'x-ratelimit-remaining'));
      assert.equal(afterZip, before - 1, 'only the API call counted');

      const other = await uploaded(srv, [{ name: 'soon.txt', data: Buffer.from('gone') }]);
      assert.equal((await get(srv, `/zip/${other.short_code}`)).status, 200);
      await srv.sql`update bundles set expires_at = now() - interval '1 second' where short_code = ${other.short_code}`;
      assertNotFound(await get(srv, `/zip/${other.short_code}`), 'expired');
    });

    test('hostile stored names still become safe, unique entries', async () => {
      const hostile = await uploaded(srv, ['h1', 'h2', 'h3', 'h4', 'h5', 'h6'].map((n) => ({ name: n, data: Buffer.from(n) })));
      const raw = ['../../etc/passwd', '..', '.hidden', 'a\\b', 'ctl\u0001\u202e.txt', '/abs/a\\b'];
      for (const [i, f] of hostile.files.entries()) await srv.sql`update files set name = ${raw[i]!} where id = ${f.id}`;
      const r = await get(srv, `/zip/${hostile.short_code}`);
      assert.equal(r.status, 200);
      const names = parseZip(bufferReader(r.body), r.body.length).entries.map((e) => e.name);
      assert.deepEqual(names, ['_.._etc_passwd', 'file', 'hidden', 'a_b', 'ctl.txt', '_abs_a_b']);
    });

    test('a file gone from the disk before the first byte: 404 JSON, not a 500; the server goes on', async () => {
      const b = await uploaded(srv, [{ name: 'keep', data: Buffer.from('kept') }, { name: 'lost', data: randomBytes(4096) }]);
      const [row] = await srv.sql<Array<{ storage_key: string }>>`select storage_key from files where id = ${b.files[1]!.id}`;
      await removeStored(srv, row!.storage_key);
      for (const headers of [{}, { range: 'bytes=100-' }] as Array<Record<string, string>>) {
        const r = await get(srv, `/zip/${b.short_code}`, headers);
        assertNotFound(r, `zip with ${JSON.stringify(headers)}`);
        assert.match(JSON.parse(r.body.toString()).error, /file/i);
      }
      assert.equal((await get(srv, zipPath)).status, 200, 'other bundles are served');
    });

    test('many small files, read several at once: every entry in place; one gone mid-archive cuts the response, the server goes on', async () => {
      const small = Array.from({ length: 60 }, (_, i) => ({ name: `s${i}.bin`, data: randomBytes(1000 + ((i * 7919) % 60_000)) }));
      const b = await uploaded(srv, small);
      const whole = await get(srv, `/zip/${b.short_code}`);
      assert.equal(whole.status, 200);
      const { entries } = parseZip(bufferReader(whole.body), whole.body.length);
      assert.deepEqual(entries.map((e) => e.name), small.map((f) => f.name));
      entries.forEach((e, i) => assert.equal(sha(whole.body.subarray(e.dataOffset, e.dataOffset + e.size)), sha(small[i]!.data), e.name));
      // A slice starting inside one entry and spanning dozens matches the whole archive's bytes.
      const from = entries[3]!.dataOffset + 100;
      const part = await get(srv, `/zip/${b.short_code}`, { range: `bytes=${from}-${from + 1_500_000}` });
      assert.equal(part.status, 206);
      assert.ok(part.body.equals(whole.body.subarray(from, from + 1_500_001)));

      // Gone past the first MiB: the headers are out by then, so the body is cut short; nothing hangs.
      const lost = entries.findIndex((e) => e.dataOffset > 1.5 * 1024 * 1024);
      const [row] = await srv.sql<Array<{ storage_key: string }>>`select storage_key from files where id = ${b.files[lost]!.id}`;
      await removeStored(srv, row!.storage_key);
      const cut = await request(`${srv.url}/zip/${b.short_code}`);
      assert.equal(cut.statusCode, 200);
      const got = await cut.body.arrayBuffer().then((a) => a.byteLength, () => -1);
      assert.ok(got < whole.body.length, `the cut response carried ${got} of ${whole.body.length} bytes`);
      assert.equal((await get(srv, zipPath)).status, 200, 'other bundles are served');
    });

    test('a bundle whose files were all deleted is a valid empty zip with a new ETag', async (t) => {
      const b = await uploaded(srv, [{ name: 'one', data: Buffer.from('1') }, { name: 'two', data: Buffer.from('22') }]);
      const full = await get(srv, `/zip/${b.short_code}`);
      for (const f of b.files) {
        const res = await request(`${srv.url}/api/v1/file/${f.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${b.upload_token}` } });
        assert.equal(res.statusCode, 200, await res.body.text());
      }
      const r = await get(srv, `/zip/${b.short_code}`);
      assert.equal(r.status, 200);
      assert.equal(r.body.length, 22);
      assert.equal(hdr(r.headers, 'content-length'), '22');
      assert.deepEqual(parseZip(bufferReader(r.body), 22).entries, []);
      assert.notEqual(hdr(r.headers, 'etag'), hdr(full.headers, 'etag'));
      const resumed = await get(srv, `/zip/${b.short_code}`, { range: 'bytes=10-', 'if-range': hdr(full.headers, 'etag')! });
      assert.equal(resumed.status, 200, 'the old ETag no longer validates a resume');
      const file = path.join(tmp, 'empty.zip');
      fs.writeFileSync(file, r.body);
      const py = pythonZip(file, 'test');
      if (py === undefined) t.diagnostic('python3 not installed: skipped');
      else assert.deepEqual(py.entries, []);
    });

    test('password bundle: 404 without a token, 200 with one from /api/verify-access', async () => {
      const b = await uploaded(srv, [{ name: 'secret.txt', data: Buffer.from('s3cret') }], { fields: { access_password: 'hunter2' } });
      const p = `/zip/${b.short_code}`;
      assertNotFound(await get(srv, p), 'locked');
      assert.equal((await get(srv, p, {}, 'HEAD')).status, 404, 'HEAD is gated too');
      assertNotFound(await get(srv, p, { 'x-access-token': 'garbage' }), 'bad token');
      const v = await request(`${srv.url}/api/verify-access`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ short_code: b.short_code, password: 'hunter2' }),
      });
      const json = (await v.body.json()) as { access_token?: string };
      assert.equal(v.statusCode, 200, JSON.stringify(json));
      const token = json.access_token!;
      const viaHeader = await get(srv, p, { 'x-access-token': token });
      assert.equal(viaHeader.status, 200);
      const [entry] = parseZip(bufferReader(viaHeader.body), viaHeader.body.length).entries;
      assert.equal(entry?.name, 'secret.txt');
      assert.equal(viaHeader.body.subarray(entry.dataOffset, entry.dataOffset + entry.size).toString(), 's3cret');
      const viaQuery = await get(srv, `${p}?t=${encodeURIComponent(token)}`);
      assert.equal(viaQuery.status, 200);
      assert.ok(viaQuery.body.equals(viaHeader.body));
    });
  });
}
