import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import { request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { waitFor } from './helpers/wait.ts';
import { uploaded } from './helpers/http.ts';

type UploadedFile = { id: number; name: string; size: number; mime_type: string; download_url: string };

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const header = (h: Record<string, string | string[] | undefined>, name: string): string | undefined => {
  const v = h[name];
  return Array.isArray(v) ? v.join(', ') : v;
};


async function get(srv: TestServer, path: string, headers: Record<string, string> = {}, method: 'GET' | 'HEAD' = 'GET') {
  const res = await request(`${srv.url}${path}`, { method, headers });
  const body = Buffer.from(await res.body.arrayBuffer());
  return { status: res.statusCode, headers: res.headers, body };
}

function assertJsonError(r: { status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }, status: number): void {
  assert.equal(r.status, status, r.body.toString());
  assert.match(header(r.headers, 'content-type') ?? '', /^application\/json/);
  const json = JSON.parse(r.body.toString()) as { success: unknown; error: unknown };
  assert.equal(json.success, false);
  assert.equal(typeof json.error, 'string');
}

async function downloadCount(srv: TestServer, id: number): Promise<number> {
  const [row] = await srv.sql<{ download_count: string }[]>`select download_count from files where id = ${id}`;
  return Number(row?.download_count);
}

/** Polls until the file's download_count reaches `want` (counting happens after the body is sent). */
async function waitForCount(srv: TestServer, id: number, want: number): Promise<number> {
  let n = 0;
  await waitFor(`download_count ${want}`, async () => (n = await downloadCount(srv, id)) >= want);
  return n;
}

/**
 * Sends `head` (a HEAD request) on a fresh keep-alive connection, then GET /healthz on the same
 * connection once the HEAD response headers are in. Returns what followed the HEAD's header block:
 * a HEAD response has no body (RFC 9110 9.3.2), so it must be the next status line.
 */
async function afterHeadResponse(port: number, head: string): Promise<{ status: string; rest: string }> {
  const socket = net.connect(port, '127.0.0.1');
  let out = '';
  let closed = false;
  socket.setEncoding('latin1');
  socket.on('data', (c: string) => (out += c));
  socket.on('close', () => (closed = true));
  socket.on('error', () => {});
  // (a throw is "not yet" to waitFor, and the last one names what had arrived if time runs out)
  const received = (cond: (s: string) => boolean) => (): true => {
    if (cond(out)) return true;
    throw new Error(`${closed ? 'connection closed; ' : ''}got ${JSON.stringify(out)}`);
  };
  try {
    socket.write(`${head}\r\nHost: 127.0.0.1\r\n\r\n`);
    await waitFor('HEAD response headers', received((s) => s.includes('\r\n\r\n')));
    socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    await waitFor('the next response', received((s) => s.endsWith('\r\n\r\n{"success":true}')));
    const end = out.indexOf('\r\n\r\n');
    return { status: out.slice(0, out.indexOf('\r\n')), rest: out.slice(end + 4) };
  } finally {
    socket.destroy();
  }
}

for (const backend of backends()) {
  describe(`download (${backend})`, () => {
    let srv: TestServer;
    // 1000 bytes whose every position is distinguishable, so an off-by-one range is visible.
    const content = Buffer.from(Array.from({ length: 1000 }, (_, i) => i % 251));
    const size = content.length;
    let file: UploadedFile;
    let path: string;

    before(async () => {
      srv = await startServer(backend, { RATE_LIMIT_ANON_PER_HOUR: '100000' });
      const up = await uploaded(srv, [{ name: 'data.bin', data: content, type: 'application/x-test' }]);
      file = up.files[0]!;
      path = file.download_url;
    });
    after(async () => {
      await srv?.close();
    });

    test('full GET returns the exact bytes with the documented headers', async () => {
      const r = await get(srv, path);
      assert.equal(r.status, 200);
      assert.equal(sha256(r.body), sha256(content));
      assert.equal(header(r.headers, 'content-type'), 'application/x-test');
      assert.equal(header(r.headers, 'content-disposition'), 'attachment; filename="data.bin"');
      assert.equal(header(r.headers, 'content-length'), String(size));
      assert.match(header(r.headers, 'etag') ?? '', /^"[0-9a-z]+-[0-9a-z]+-[0-9a-z]+-[0-9a-f]{8}"$/, 'a strong quoted ETag');
      const lm = header(r.headers, 'last-modified') ?? '';
      assert.match(lm, /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/);
      assert.ok(Math.abs(Date.parse(lm) - Date.now()) < 10 * 60_000, `Last-Modified ${lm} is the upload time`);
      assert.equal(header(r.headers, 'accept-ranges'), 'bytes');
      assert.equal(header(r.headers, 'content-range'), undefined);
    });

    test('a non-ASCII name gets an ASCII filename and an RFC 5987 filename*', async () => {
      const name = 'résumé ✓ 日本.txt';
      const up = await uploaded(srv, [{ name, data: Buffer.from('hi'), type: 'text/plain' }]);
      assert.equal(up.files[0]!.name, name);
      const r = await get(srv, up.files[0]!.download_url);
      assert.equal(r.status, 200);
      const cd = header(r.headers, 'content-disposition') ?? '';
      assert.match(cd, /^attachment;/);
      const ascii = /;\s*filename="([^"]*)"/.exec(cd)?.[1];
      assert.ok(ascii !== undefined && /^[\x20-\x7e]+$/.test(ascii), cd);
      const ext = /;\s*filename\*=UTF-8''([^;\s]+)/i.exec(cd)?.[1];
      assert.ok(ext !== undefined, cd);
      assert.equal(decodeURIComponent(ext), name);
    });

    test('HEAD has the same headers as GET and no body', async () => {
      const g = await get(srv, path);
      const h = await get(srv, path, {}, 'HEAD');
      assert.equal(h.status, 200);
      assert.equal(h.body.length, 0);
      assert.equal(header(h.headers, 'content-length'), String(size));
      for (const name of ['content-type', 'content-disposition', 'etag', 'last-modified', 'accept-ranges']) {
        assert.equal(header(h.headers, name), header(g.headers, name), name);
      }
    });

    const ranges: Array<[string, number, number]> = [
      ['bytes=0-0', 0, 0],
      ['bytes=0-', 0, size - 1],
      ['bytes=-1', size - 1, size - 1],
      [`bytes=-${size * 10}`, 0, size - 1],
      [`bytes=${size - 1}-`, size - 1, size - 1],
      [`bytes=100-${size + 5000}`, 100, size - 1],
      ['bytes=10-19', 10, 19],
    ];
    for (const [range, start, end] of ranges) {
      test(`Range ${range} → 206 bytes ${start}-${end}`, async () => {
        const r = await get(srv, path, { range });
        assert.equal(r.status, 206);
        assert.equal(header(r.headers, 'content-range'), `bytes ${start}-${end}/${size}`);
        assert.equal(header(r.headers, 'content-length'), String(end - start + 1));
        assert.deepEqual(r.body, content.subarray(start, end + 1));
      });
    }

    test('HEAD with a Range reports the partial length', async () => {
      const r = await get(srv, path, { range: 'bytes=10-19' }, 'HEAD');
      assert.equal(r.status, 206);
      assert.equal(r.body.length, 0);
      assert.equal(header(r.headers, 'content-range'), `bytes 10-19/${size}`);
      assert.equal(header(r.headers, 'content-length'), '10');
    });

    for (const range of [`bytes=${size}-`, `bytes=${size}-${size + 10}`, 'bytes=-0']) {
      test(`Range ${range} → 416 with Content-Range bytes */size`, async () => {
        const r = await get(srv, path, { range });
        assertJsonError(r, 416);
        assert.equal(header(r.headers, 'content-range'), `bytes */${size}`);
      });
    }

    for (const range of ['bytes=5-2', 'bytes=0-1,5-6', 'items=0-1', 'bytes=x-y']) {
      test(`Range ${range} is ignored → 200 full`, async () => {
        const r = await get(srv, path, { range });
        assert.equal(r.status, 200);
        assert.equal(header(r.headers, 'content-range'), undefined);
        assert.equal(sha256(r.body), sha256(content));
      });
    }

    test('the ETag names the stored file: the same bytes uploaded again get their own, and neither validates the other', async () => {
      const etag = header((await get(srv, path)).headers, 'etag')!;
      const again = (await uploaded(srv, [{ name: 'data.bin', data: content, type: 'application/x-test' }])).files[0]!;
      const other = header((await get(srv, again.download_url)).headers, 'etag')!;
      assert.notEqual(other, etag);
      assert.equal(header((await get(srv, path)).headers, 'etag'), etag, 'stable across requests');
      assert.equal((await get(srv, again.download_url, { 'if-none-match': etag })).status, 200);
      assert.equal((await get(srv, path, { 'if-none-match': other })).status, 200);
    });

    test('If-None-Match with the ETag → 304 without a body', async () => {
      const etag = header((await get(srv, path)).headers, 'etag')!;
      for (const inm of [etag, `W/${etag}`, `"nope", ${etag}`, '*']) {
        const r = await get(srv, path, { 'if-none-match': inm });
        assert.equal(r.status, 304, inm);
        assert.equal(r.body.length, 0);
        assert.equal(header(r.headers, 'etag'), etag);
      }
      const miss = await get(srv, path, { 'if-none-match': '"something-else"' });
      assert.equal(miss.status, 200);
      assert.equal(miss.body.length, size);
    });

    test('If-Modified-Since: not modified since → 304, modified since → 200', async () => {
      const lm = header((await get(srv, path)).headers, 'last-modified')!;
      for (const since of [lm, new Date(Date.parse(lm) + 3600_000).toUTCString()]) {
        const r = await get(srv, path, { 'if-modified-since': since });
        assert.equal(r.status, 304, since);
        assert.equal(r.body.length, 0);
      }
      const r = await get(srv, path, { 'if-modified-since': new Date(Date.parse(lm) - 3600_000).toUTCString() });
      assert.equal(r.status, 200);
      assert.equal(r.body.length, size);
    });

    test('If-Range: a matching validator honours the Range, a stale one sends everything', async () => {
      const first = await get(srv, path);
      const etag = header(first.headers, 'etag')!;
      for (const validator of [etag, header(first.headers, 'last-modified')!]) {
        const fresh = await get(srv, path, { range: 'bytes=0-9', 'if-range': validator });
        assert.equal(fresh.status, 206, validator);
        assert.deepEqual(fresh.body, content.subarray(0, 10));
      }
      for (const stale of ['"0123abcd"', `W/${etag}`, 'Tue, 01 Jan 2002 00:00:00 GMT']) {
        const r = await get(srv, path, { range: 'bytes=0-9', 'if-range': stale });
        assert.equal(r.status, 200, stale);
        assert.equal(header(r.headers, 'content-range'), undefined);
        assert.deepEqual(r.body, content);
      }
    });

    test('If-Match and If-Unmodified-Since: a resume naming another version gets 412, never its bytes', async () => {
      const first = await get(srv, path);
      const etag = header(first.headers, 'etag')!;
      const lm = header(first.headers, 'last-modified')!;
      const before = new Date(Date.parse(lm) - 3600_000).toUTCString();
      for (const h of [{ 'if-match': etag }, { 'if-match': `"x", ${etag}` }, { 'if-match': '*' }, { 'if-unmodified-since': lm }, { 'if-unmodified-since': 'not a date' }, { 'if-match': etag, 'if-unmodified-since': before }] as Array<Record<string, string>>) {
        const r = await get(srv, path, { ...h, range: 'bytes=0-9' });
        assert.equal(r.status, 206, JSON.stringify(h));
        assert.deepEqual(r.body, content.subarray(0, 10));
      }
      for (const h of [{ 'if-match': '"0123abcd"' }, { 'if-match': `W/${etag}` }, { 'if-unmodified-since': before }] as Array<Record<string, string>>) {
        for (const method of ['GET', 'HEAD'] as const) {
          const r = await get(srv, path, { ...h, range: 'bytes=10-' }, method);
          assert.equal(r.status, 412, `${method} ${JSON.stringify(h)}`);
          assert.equal(header(r.headers, 'etag'), etag);
          if (method === 'GET') assert.equal(JSON.parse(r.body.toString()).code, 'PRECONDITION_FAILED');
        }
      }
    });

    test('a 0-byte file downloads as an empty 200', async () => {
      const up = await uploaded(srv, [{ name: 'empty.txt', data: Buffer.alloc(0), type: 'text/plain' }]);
      assert.equal(up.files[0]!.size, 0);
      const r = await get(srv, up.files[0]!.download_url);
      assert.equal(r.status, 200);
      assert.equal(r.body.length, 0);
      assert.equal(header(r.headers, 'content-length'), '0');
      assert.equal(header(r.headers, 'content-type'), 'text/plain');
      const h = await get(srv, up.files[0]!.download_url, {}, 'HEAD');
      assert.equal(h.status, 200);
      assert.equal(header(h.headers, 'content-length'), '0');
    });

    test('HEAD error responses carry no body on a keep-alive connection', async () => {
      const secret = await uploaded(srv, [{ name: 's.txt', data: Buffer.from('s') }], { fields: { access_password: 'pw' } });
      const withBody: string[] = [];
      for (const [head, status] of [
        ['HEAD /api/v1/download/999999999 HTTP/1.1', '404'],
        [`HEAD ${path} HTTP/1.1\r\nRange: bytes=${size}-`, '416'],
        [`HEAD /api/v1/download/${secret.files[0]!.id} HTTP/1.1`, '404'],
        ['HEAD /no/such/route HTTP/1.1', '404'],
      ] as const) {
        const r = await afterHeadResponse(srv.port, head);
        assert.match(r.status, new RegExp(`^HTTP/1.1 ${status} `), head);
        if (!r.rest.startsWith('HTTP/1.1 200 ')) withBody.push(`${head.split('\r\n')[0]} → ${r.rest.slice(0, r.rest.indexOf('HTTP/1.1'))}`);
      }
      assert.deepEqual(withBody, [], 'bytes after a HEAD response header block must be the next response');
    });

    test('an unknown id → 404 JSON, a malformed one → 400 JSON', async () => {
      assertJsonError(await get(srv, '/api/v1/download/999999999'), 404);
      for (const id of ['abc', '0', '-1', '1.5', '01', '99999999999999999999999', '9007199254740993', '1e3']) {
        assertJsonError(await get(srv, `/api/v1/download/${id}`), 400);
      }
    });

    test('a 6 MiB file downloads byte-identical', async () => {
      const big = randomBytes(6 * 1024 * 1024 + 123);
      const up = await uploaded(srv, [{ name: 'big.bin', data: big }]);
      const r = await get(srv, up.files[0]!.download_url);
      assert.equal(r.status, 200);
      assert.equal(header(r.headers, 'content-length'), String(big.length));
      assert.equal(r.body.length, big.length);
      assert.equal(sha256(r.body), sha256(big));

      // A resumed download: the first half, then the rest from where it stopped.
      const half = Math.floor(big.length / 2);
      const a = await get(srv, up.files[0]!.download_url, { range: `bytes=0-${half - 1}` });
      const b = await get(srv, up.files[0]!.download_url, { range: `bytes=${half}-` });
      assert.equal(a.status, 206);
      assert.equal(b.status, 206);
      assert.equal(header(b.headers, 'content-range'), `bytes ${half}-${big.length - 1}/${big.length}`);
      assert.equal(sha256(Buffer.concat([a.body, b.body])), sha256(big));

      // A range across the server's 1 MiB read boundaries, and concurrent readers of one file.
      const mid = await get(srv, up.files[0]!.download_url, { range: 'bytes=1048575-3145729' });
      assert.deepEqual(mid.body, big.subarray(1048575, 3145730));
      const all = await Promise.all([1, 2, 3, 4].map(() => get(srv, up.files[0]!.download_url)));
      for (const x of all) assert.equal(sha256(x.body), sha256(big));
    });

    test('a download the client abandons is not counted and leaves the server serving', async () => {
      const big = randomBytes(16 * 1024 * 1024);
      const f = (await uploaded(srv, [{ name: 'abandoned.bin', data: big }])).files[0]!;
      const socket = net.connect(srv.port, '127.0.0.1');
      socket.on('error', () => {});
      socket.write(`GET ${f.download_url} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
      await new Promise((r) => socket.once('data', r));
      socket.pause(); // stop reading: 16 MiB cannot all fit into the socket buffers
      socket.destroy();
      const full = await get(srv, f.download_url);
      assert.equal(sha256(full.body), sha256(big));
      assert.equal(await waitForCount(srv, f.id, 1), 1);
      assert.equal((await get(srv, '/healthz')).status, 200);
      assert.equal(await downloadCount(srv, f.id), 1, 'only the complete download counted');
    });

    test('download_count grows with each complete download, not with HEAD or 304', async () => {
      const up = await uploaded(srv, [{ name: 'count.txt', data: Buffer.from('count me') }]);
      const f = up.files[0]!;
      assert.equal(await downloadCount(srv, f.id), 0);
      const first = await get(srv, f.download_url);
      assert.equal(first.status, 200);
      assert.equal(await waitForCount(srv, f.id, 1), 1);
      assert.equal((await get(srv, f.download_url, {}, 'HEAD')).status, 200);
      assert.equal((await get(srv, f.download_url, { 'if-none-match': header(first.headers, 'etag')! })).status, 304);
      assert.equal((await get(srv, f.download_url)).status, 200);
      assert.equal(await waitForCount(srv, f.id, 2), 2);
      assert.equal(await downloadCount(srv, f.id), 2);
    });

    test('concurrent downloads are all counted, and a clean shutdown writes the counts still pending', async () => {
      const up = await uploaded(srv, [{ name: 'many.txt', data: Buffer.from('counted in batches') }]);
      const f = up.files[0]!;
      const all = await Promise.all(Array.from({ length: 20 }, () => get(srv, f.download_url)));
      assert.ok(all.every((r) => r.status === 200));
      assert.equal(await waitForCount(srv, f.id, 20), 20);
      assert.equal((await get(srv, f.download_url)).status, 200);
      await srv.stop(); // at once: the last count is still in memory
      await srv.restart();
      assert.equal(await downloadCount(srv, f.id), 21);
    });

    test('a password-protected bundle hides its files', async () => {
      const up = await uploaded(srv, [{ name: 'secret.txt', data: Buffer.from('top secret') }], { fields: { access_password: 'hunter2' } });
      const f = up.files[0]!;
      assertJsonError(await get(srv, `/api/v1/download/${f.id}`), 404);
      assertJsonError(await get(srv, `/api/v1/download/${f.id}`, { range: 'bytes=0-0' }), 404);
      const info = await get(srv, `/api/v1/bundle/${up.short_code}`);
      assert.equal(info.status, 200);
      const json = JSON.parse(info.body.toString()) as { success: boolean; files: unknown[] };
      assert.equal(json.success, true);
      assert.deepEqual(json.files, []);
    });
  });
}
