import { describe, it, before, after, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import zlib from 'node:zlib';
import path from 'node:path';
import os from 'node:os';
import { spawnSync } from 'node:child_process';
import { backends, startServer, storedBlobs, type TestServer } from './helpers/server.ts';
import { multipart } from './helpers/multipart.ts';
import { MiB, DAY_MS, sha, created, type FileJson, download, assertError, ensureRunning, assertServes, assertNoServerErrors, snapshot, assertNothingKept, assertDiskMatchesRows, dispositionName, survives, rawConnect, write, type Reply } from './upload-util.ts';
import { file, upload, call } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';
import { mintKey } from './access-util.ts';
import { MAX_FORM_OVERHEAD } from '../src/ingest/multipart.ts';

/** Per-server anonymous cap: small enough to cross cheaply, large enough for the 5 MiB round trip. */
const CAP = 8 * MiB;

/** DATA_DIR entries outside the embedded database, as relative paths. */
function dataTree(dataDir: string): string[] {
  return (fs.readdirSync(dataDir, { recursive: true }) as string[]).filter((p) => p !== 'postgres' && !p.startsWith(`postgres${path.sep}`)).sort();
}

for (const backend of backends()) {
  describe(`upload (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend, { ANON_MAX_BUNDLE_BYTES: String(CAP) });
    });
    after(async () => {
      await srv?.close();
    });
    beforeEach(() => ensureRunning(srv));
    afterEach(() => assertNoServerErrors(srv));

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
      const ids = j.files.map((f: FileJson) => f.id);
      assert.ok(ids.every(Number.isInteger), 'integer ids');
      assert.equal(new Set(ids).size, ids.length, 'distinct ids');
      for (const [i, f] of j.files.entries()) {
        assert.deepEqual(Object.keys(f).sort(), ['download_url', 'id', 'mime_type', 'name', 'size']);
        assert.equal(f.name, sent[i]!.name);
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

      const info = await call(srv, 'GET', `/api/v1/bundle/${j.short_code}`, { json: true });
      assert.equal(info.status, 200);
      assert.equal(info.json.file_count, sent.length);
      assert.equal(info.json.total_size_bytes, 5 * MiB + 12 + 7);
      assert.equal(info.json.is_encrypted, false);
      assert.deepEqual(info.json.files, j.files);
      await assertDiskMatchesRows(srv);
    });

    it('form fields are read before or after the files', async () => {
      const after = await created(srv, [file('a.txt', 'a')], {
        parts: [
          { name: 'description', value: 'described after the file' },
          { name: 'notify_email', value: 'someone@example.com' },
        ],
      });
      const beforeFiles = await created(srv, [file('b.txt', 'b')], { fields: { description: 'described first' } });
      const rows = await srv.sql<{ short_code: string; description: string; notify_email: string | null }[]>`
        select short_code, description, notify_email from bundles
        where short_code in (${after.short_code}, ${beforeFiles.short_code})`;
      const byCode = new Map(rows.map((r) => [r.short_code, r]));
      assert.equal(byCode.get(after.short_code)?.description, 'described after the file');
      assert.equal(byCode.get(after.short_code)?.notify_email, 'someone@example.com');
      assert.equal(byCode.get(beforeFiles.short_code)?.description, 'described first');
    });

    it('stored CRC-32 matches the bytes at every size (inline, worker and mixed checksumming); no SHA-256 is computed', async () => {
      const sizes = [0, 1, 10 * 1024, 64 * 1024, 64 * 1024 + 1, 100 * 1024, 250 * 1024, 400 * 1024, 2 * MiB + 3];
      const datas = sizes.map((n) => randomBytes(n));
      const j = await created(srv, datas.map((d, i) => file(`s${i}.bin`, d)));
      const rows = await srv.sql<{ id: number; sha256: Uint8Array | null; crc32: number }[]>`
        select id, sha256, crc32 from files where id in ${srv.sql(j.files.map((f: FileJson) => f.id))} order by seq`;
      for (const [i, r] of rows.entries()) {
        assert.equal(r.sha256, null);
        assert.equal(Number(r.crc32), zlib.crc32(datas[i]!) >>> 0, `crc32 of ${sizes[i]} bytes`);
      }
    });

    it('a kept-alive connection is read again after an upload', async () => {
      // When busboy's queue was full as the body ended, the socket stayed paused: the next request on
      // the same connection was never answered.
      for (const size of [1024, 100 * 1024, 3 * MiB]) {
        const { body, contentType } = multipart([{ name: 'files[]', filename: 'k.bin', data: randomBytes(size) }]);
        const sock = net.connect(srv.port, '127.0.0.1');
        let got = '';
        sock.on('data', (d: Buffer) => (got += d.toString('latin1')));
        sock.write(`POST /api/v1/upload HTTP/1.1\r\nHost: x\r\nContent-Type: ${contentType}\r\nContent-Length: ${body.length}\r\n\r\n`);
        sock.write(body);
        await waitFor('the upload answer', () => /HTTP\/1\.1 201[\s\S]*"files"/.test(got));
        got = '';
        sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
        await waitFor(`an answer on the same connection after a ${size}-byte upload`, () => /HTTP\/1\.1 200/.test(got));
        sock.destroy();
      }
    });

    /** Sends `body` cut at `cuts` (sorted), pausing between pieces so each arrives as chunks of its own; expects 201. */
    async function createdInPieces(body: Buffer, contentType: string, cuts: number[]): Promise<Reply> {
      const conn = await rawConnect(srv.port);
      await write(conn.sock, `POST /api/v1/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: ${contentType}\r\n` +
        `Content-Length: ${body.length}\r\n\r\n`);
      let at = 0;
      for (const cut of [...cuts, body.length]) {
        if (cut <= at) continue;
        await write(conn.sock, body.subarray(at, cut));
        await new Promise((r) => setTimeout(r, 15));
        at = cut;
      }
      const r = await conn.response;
      conn.sock.destroy();
      assert.equal(r.status, 201, r.body);
      return JSON.parse(r.body) as Reply;
    }

    it('files and fields survive any chunking of the body (copy buffers are recycled)', async () => {
      // The server reuses its copies of socket chunks once nothing refers to them: a field split
      // across chunks, or a file slice still queued, must keep its own bytes. Pieces are written
      // with pauses so they arrive as separate chunks, cut inside field values and file bodies.
      const letters = (n: number): string => Array.from(randomBytes(n), (b) => String.fromCharCode(97 + (b % 26))).join('');
      for (let round = 0; round < 3; round++) {
        // The big one goes at full speed, so disk writes fall behind and the writer queues slices.
        const files = [randomBytes(700 * 1024 + round), randomBytes(1536 * 1024 - round), randomBytes(round === 0 ? 5 * MiB : 10 * 1024)];
        const description = letters(1000);
        const { body, contentType } = multipart([
          { name: 'files[]', filename: 'a.bin', data: files[0] },
          { name: 'description', value: description },
          { name: 'files[]', filename: 'b.bin', data: files[1] },
          { name: 'encrypted', value: '1' },
          { name: 'files[]', filename: 'c.bin', data: files[2] },
        ]);
        const cuts = [
          body.indexOf(description) + 300 + round * 100,
          body.indexOf('name="encrypted"') + 5,
          ...Array.from({ length: 12 }, () => Math.floor(Math.random() * body.indexOf(files[2]!.subarray(0, 64)))),
        ].sort((a, b) => a - b);
        const j = await createdInPieces(body, contentType, cuts);
        for (const [i, f] of j.files.entries()) assert.equal(sha((await download(srv, f)).data), sha(files[i]!), `file ${i}`);
        // (No notify_email here: its mail would be sent in the background while later tests query
        // the embedded database, which serves one connection at a time.)
        const info = await call(srv, 'GET', `/api/v1/bundle/${j.short_code}`, { json: true });
        assert.equal(info.json.is_encrypted, true);
        const [row] = await srv.sql<{ description: string }[]>`select description from bundles where short_code = ${j.short_code}`;
        assert.equal(row?.description, description);
      }
    });

    it('files hold every byte when chunks end inside delimiters and their near misses', async () => {
      // Large chunks of file bytes skip the parser (straight into the file), but only when they hold
      // no delimiter and do not end inside the start of one: chunk ends are placed just there.
      const boundary = `----cut${randomBytes(8).toString('hex')}`;
      const needle = Buffer.from(`\r\n--${boundary}`);
      const a = randomBytes(900 * 1024);
      const nearMisses = [100_000, 250_000, 400_000, 600_000];
      // Near misses: the delimiter's first 1, 5, 20 and all but one of its bytes, then a wrong byte.
      for (const [i, at] of nearMisses.entries()) {
        const n = [1, 5, 20, needle.length - 1][i]!;
        needle.copy(a, at, 0, n);
        a[at + n] = needle[n]! ^ 0x55;
      }
      const b = randomBytes(300 * 1024);
      const { body, contentType } = multipart([
        { name: 'files[]', filename: 'a.bin', data: a },
        { name: 'files[]', filename: 'b.bin', data: b },
      ], boundary);
      const aAt = body.indexOf(a.subarray(0, 64));
      const bAt = body.indexOf(b.subarray(0, 64));
      const afterA = aAt + a.length; // where the delimiter after a begins
      const cuts = [
        ...nearMisses.map((at, i) => aAt + at + [1, 3, 11, needle.length - 1][i]!), // inside each near miss
        afterA + 2, // inside the real delimiter: "\r\n" of it sent, the rest in the next chunk
        afterA + needle.length - 1,
        bAt + 200_000,
        body.length - 3, // inside the closing delimiter
      ].sort((x, y) => x - y);
      const j = await createdInPieces(body, contentType, cuts);
      assert.deepEqual(j.files.map((f) => f.size), [a.length, b.length]);
      for (const [i, f] of j.files.entries()) assert.equal(sha((await download(srv, f)).data), sha([a, b][i]!), `file ${i}`);
    });

    it('description: 1000 characters accepted; 1001, or a NUL, rejected with nothing kept', async () => {
      await created(srv, [file('a.txt', 'a')], { fields: { description: 'é'.repeat(1000) } });
      const before = await snapshot(srv);
      assertError(await upload(srv, [file('a.txt', 'a')], { parts: [{ name: 'description', value: 'd'.repeat(1001) }] }), 400, /description/i);
      // PostgreSQL text cannot hold NUL: a clear 400, not a failed insert.
      assertError(await upload(srv, [file('a.txt', 'a')], { parts: [{ name: 'description', value: 'a\u0000b' }] }), 400, /description/i);
      await assertNothingKept(srv, before);
    });

    it('notify_email must be a valid address of at most 255 characters', async () => {
      const before = await snapshot(srv);
      for (const bad of ['not-an-email', 'a@b', 'x y@example.com', `${'a'.repeat(244)}@example.com`, 'a\u0000b@example.com', 'a\u0001@b.co']) {
        assertError(await upload(srv, [file('a.txt', 'a')], { fields: { notify_email: bad } }), 400);
      }
      await assertNothingKept(srv, before);
    });

    it('encrypted=1 sets is_encrypted', async () => {
      const j = await created(srv, [file('secret.bin', randomBytes(100))], { fields: { encrypted: '1' } });
      const info = await call(srv, 'GET', `/api/v1/bundle/${j.short_code}`, { json: true });
      assert.equal(info.status, 200);
      assert.equal(info.json.is_encrypted, true);
    });

    it('non-ASCII names round-trip in JSON and Content-Disposition', async () => {
      const names = ['café.txt', '日本語のファイル.pdf', '🎉 party 👨‍👩‍👧.png', 'Ünïcödé ñ.tar.gz'];
      const j = await created(srv, names.map((n) => file(n, n)));
      assert.deepEqual(j.files.map((f: FileJson) => f.name), names);
      for (const f of j.files) {
        const { data, headers } = await download(srv, f);
        assert.equal(data.toString(), f.name);
        assert.match(String(headers['content-disposition']), /filename\*=UTF-8''/);
        assert.equal(dispositionName(headers['content-disposition']), f.name);
      }
    });

    it('hostile file names are sanitized and never become paths', async () => {
      const treeBefore = dataTree(srv.dataDir);
      const objectsBefore = srv.backend === 's3' ? (await storedBlobs(srv)).files : [];
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
        "filename*=UTF-8''%01%02%03.txt",
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
      const r = await call(srv, 'POST', '/api/v1/upload', { body: body, headers: { 'content-type': `multipart/form-data; boundary=${boundary}` }, json: true });
      assert.equal(r.status, 201, JSON.stringify(r.json));
      const names = r.json.files.map((f: FileJson) => f.name);
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
      assert.match(names[8]!, /\.txt$/);
      assert.match(names[9]!, /^x{200,}\.txt$/, 'a long name is cut in its stem: the extension stays');
      assert.equal([...names[9]!].length, 255);
      assert.match(names[10]!, /^日{200,}$/);

      const added = dataTree(srv.dataDir).filter((p) => !treeBefore.includes(p));
      for (const p of added) {
        assert.match(p, /^files(\/[0-9a-f]{2}){1,2}$|^files\/[0-9a-f]{2}\/[0-9a-f]{2}\/[0-9a-f]{32}$/, `unexpected ${p}`);
      }
      // In a bucket the files are objects, named by key alone; nothing on this disk may come from a name.
      const storedFiles = srv.backend === 's3' ? (await storedBlobs(srv)).files.filter((p) => !objectsBefore.includes(p)) : added;
      assert.equal(storedFiles.filter((p) => /[0-9a-f]{32}$/.test(p)).length, dispositions.length);
      assert.equal(fs.existsSync(outside), outsideBefore, `${outside} appeared`);
      const keys = await srv.sql<{ storage_key: string }[]>`
        select f.storage_key from files f join bundles b on b.id = f.bundle_id where b.short_code = ${r.json.short_code}`;
      for (const k of keys) assert.match(k.storage_key, /^[0-9a-f]{32}$/);
      await assertDiskMatchesRows(srv);
    });

    it('a file whose name reduces to nothing is kept under a placeholder name, not dropped', async () => {
      const boundary = `----dots${randomBytes(6).toString('hex')}`;
      const names = ['..', '.', 'dir/', '../..'];
      const body = Buffer.concat([
        ...names.map((n, i) => Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="files[]"; filename="${n}"\r\n` +
          `Content-Type: application/octet-stream\r\n\r\ncontent ${i}\r\n`)),
        Buffer.from(`--${boundary}--\r\n`),
      ]);
      const r = await call(srv, 'POST', '/api/v1/upload', { body: body, headers: { 'content-type': `multipart/form-data; boundary=${boundary}` }, json: true });
      assert.equal(r.status, 201, JSON.stringify(r.json));
      assert.equal(r.json.files.length, names.length, `kept ${JSON.stringify(r.json.files.map((f: FileJson) => f.name))}`);
      for (const [i, f] of r.json.files.entries()) {
        assert.ok(f.name.length > 0 && !['.', '..'].includes(f.name) && !/[/\\]/.test(f.name), f.name);
        assert.equal((await download(srv, f)).data.toString(), `content ${i}`);
      }
    });

    it('400 for requests without files, with nothing kept', async () => {
      const before = await snapshot(srv);
      const json = { 'content-type': 'application/json' };
      assertError(await upload(srv, [], { fields: { description: 'only fields' } }), 400);
      assertError(await upload(srv, [], { parts: [{ name: 'files[]', filename: '', data: Buffer.alloc(0) }] }), 400);
      assertError(await upload(srv, [], { parts: [{ name: 'other', filename: 'x.txt', data: Buffer.from('x') }] }), 400);
      assertError(await call(srv, 'POST', '/api/v1/upload', { body: '', headers: { 'content-type': multipart([]).contentType }, json: true }), 400);
      assertError(await call(srv, 'POST', '/api/v1/upload', { body: '', headers: {}, json: true }), 400);
      assertError(await call(srv, 'POST', '/api/v1/upload', { body: JSON.stringify({ files: ['a.txt'] }), headers: json, json: true }), 400);
      assertError(await call(srv, 'POST', '/api/v1/upload', { body: 'files=a.txt', headers: { 'content-type': 'application/x-www-form-urlencoded' }, json: true }), 400);
      await assertNothingKept(srv, before);
      await created(srv, [file('still.txt', 'serving')]);
    });

    it('400 for a text field sent as a file part (the bundle would have come out public), with nothing kept', async () => {
      const before = await snapshot(srv);
      for (const name of ['access_password', 'description', 'notify_email', 'encrypted']) {
        const r = await upload(srv, [file('a.txt', 'a')], { parts: [{ name, filename: 'pw.txt', data: Buffer.from('secret\n') }] });
        assertError(r, 400);
        assert.match(r.json.error as string, new RegExp(`${name} must be a text field`));
      }
      await assertNothingKept(srv, before);
    });

    it('a Bearer header on upload is 401 while no API keys exist', async () => {
      const before = await snapshot(srv);
      assertError(await upload(srv, [file('a.txt', 'a')], { headers: { authorization: 'Bearer sk_test_not_a_key' } }), 401);
      assertError(await upload(srv, [file('a.txt', 'a')], { headers: { authorization: 'bearer x' } }), 401);
      // A Bearer without exactly one value is a key that is not valid, not an anonymous upload.
      for (const authorization of ['Bearer ', 'Bearer', 'Bearer a b']) {
        assertError(await upload(srv, [file('a.txt', 'a')], { headers: { authorization } }), 401);
      }
      await assertNothingKept(srv, before);
      // Another scheme is no key at all: an anonymous upload.
      assert.equal((await upload(srv, [file('b.txt', 'b')], { headers: { authorization: 'Basic dXNlcjpwdw==' } })).status, 201);
    });

    it('the cap counts file bytes: exactly the cap is 201, one byte more is 400', async () => {
      const exact = await created(srv, [file('exact.bin', randomBytes(CAP))]);
      assert.equal(exact.files[0]!.size, CAP);
      const status = await call(srv, 'GET', `/api/v1/bundle/${exact.short_code}/status`, { json: true });
      assert.equal(status.json.total_size_bytes, CAP);
      assert.equal(status.json.space_remaining, 0);
      const before = await snapshot(srv);
      // The refusal names the cap in bytes and in words, and how to raise it.
      const overCap = /^Bundle size limit exceeded: a bundle without an API key holds at most 8388608 bytes \(8 MB\)\. An API key's plan holds 5 GB or more: see \/api-keys\.$/;
      assertError(await survives(srv, upload(srv, [file('over.bin', randomBytes(CAP + 1))])), 400, overCap);
      const halves = [file('half1.bin', randomBytes(CAP / 2)), file('half2.bin', randomBytes(CAP / 2 + 1))];
      assertError(await survives(srv, upload(srv, halves)), 400, /size|limit|large/i);
      await assertNothingKept(srv, before);
      assertError(await survives(srv, upload(srv, [file('one.bin', 'x')], { path: `/api/v1/upload/${exact.upload_token}` })), 400,
        /^Bundle size limit exceeded: this bundle holds at most 8388608 bytes \(8 MB\), and 0 bytes \(0 B\) of it are left\.$/);
      await assertNothingKept(srv, before);
      await assertServes(srv);
    });

    it('a Content-Length that cannot fit is refused before any body byte is read: curl with Expect: 100-continue sends none', async () => {
      const before = await snapshot(srv);
      const conn = await rawConnect(srv.port);
      let first = '';
      conn.sock.once('data', (d: Buffer) => (first = d.toString('latin1')));
      await write(conn.sock, 'POST /api/v1/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=xyz\r\n' +
        `Content-Length: ${CAP + MAX_FORM_OVERHEAD + 1}\r\nExpect: 100-continue\r\n\r\n`);
      await waitFor('the refusal', () => first.includes('\r\n\r\n{'));
      conn.sock.destroy();
      // uWS answers 100 Continue before any handler runs; the refusal goes out in the same write.
      assert.match(first, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 400 /);
      assert.match(first, /Bundle size limit exceeded: a bundle without an API key holds at most 8388608 bytes \(8 MB\)/);
      // curl reads both at once and sends no byte of the body.
      const big = path.join(os.tmpdir(), `sl-sparse-${process.pid}.bin`);
      fs.closeSync(fs.openSync(big, 'w'));
      fs.truncateSync(big, CAP + MAX_FORM_OVERHEAD + 1);
      try {
        const curl = spawnSync('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code} %{size_upload}', '-F', `files[]=@${big}`, `${srv.url}/api/v1/upload`], { encoding: 'utf8' });
        assert.equal(curl.stdout, '400 0', curl.stderr);
      } finally {
        fs.rmSync(big, { force: true });
      }
      await assertNothingKept(srv, before);
    });

    it('expires_in_days shortens a new bundle\'s expiry within the plan; anything else is 400 INVALID_EXPIRY; appends ignore it', async () => {
      /** How many days from now `expires_at` of the answer and of bundle info name (both must agree). */
      const daysLeft = async (j: { short_code: string; expires_at: string | null }): Promise<number | null> => {
        const info = await call(srv, 'GET', `/api/v1/bundle/${j.short_code}`, { json: true });
        if (j.expires_at === null) {
          assert.equal(info.json.expires_at, null);
          return null;
        }
        assert.ok(Math.abs(Date.parse(`${info.json.expires_at.replace(' ', 'T')}Z`) - Date.parse(j.expires_at)) < 1000);
        return Math.round((Date.parse(j.expires_at) - Date.now()) / (DAY_MS / 100)) / 100;
      };
      const send = (days: string | undefined, key?: string): ReturnType<typeof upload> =>
        upload(srv, [file('e.txt', 'expiry')], { key, fields: days === undefined ? {} : { expires_in_days: days } });
      const ok = async (days: string | undefined, key?: string): Promise<number | null> => {
        const r = await send(days, key);
        assert.equal(r.status, 201, r.text);
        return daysLeft(r.json);
      };
      const starter = await mintKey(srv, 'starter');
      const premium = await mintKey(srv, 'premium');
      assert.equal(await ok('1'), 1);
      assert.equal(await ok('3'), 3);
      assert.equal(await ok(''), 3, 'empty: the plan\'s expiry');
      assert.equal(await ok('2', starter), 2);
      assert.equal(await ok('7', starter), 7);
      assert.equal(await ok(undefined, premium), null, 'a Premium bundle without the field never expires');
      assert.equal(await ok('3650', premium), 3650);
      const before = await snapshot(srv);
      for (const [days, key, most] of [['4', undefined, 3], ['0', undefined, 3], ['-1', undefined, 3], ['1.5', undefined, 3], ['2.0', undefined, 3],
        [' 2', undefined, 3], ['two', undefined, 3], ['1e1', undefined, 3], ['8', starter, 7], ['3651', premium, 3650], ['99999999999', premium, 3650]] as const) {
        const r = await send(days, key);
        assertError(r, 400, new RegExp(`^expires_in_days must be a whole number from 1 to ${most}$`));
        assert.equal(r.json.code, 'INVALID_EXPIRY', days);
      }
      // The form field's name is a text field: a file part under it is refused like any bundle field's.
      assertError(await upload(srv, [file('e.txt', 'x')], { parts: [{ name: 'expires_in_days', filename: 'd.txt', data: Buffer.from('1') }] }), 400);
      await assertNothingKept(srv, before);
      // An append takes no new-bundle field: the bundle keeps its expiry.
      const made = await send('2');
      const appended = await upload(srv, [file('more.txt', 'more')], { path: `/api/v1/upload/${made.json.upload_token}`, fields: { expires_in_days: '999' } });
      assert.equal(appended.status, 200, appended.text);
      const info = await call(srv, 'GET', `/api/v1/bundle/${made.json.short_code}`, { json: true });
      assert.equal(info.json.file_count, 2);
      assert.ok(Math.abs(Date.parse(`${info.json.expires_at.replace(' ', 'T')}Z`) - Date.parse(made.json.expires_at)) < 1000, info.json.expires_at);
    });
  });
}
