// The hourly budget and tus: a creation spends one request, a termination one more; the requests to
// an upload's URL carry the X-RateLimit headers but are bounded per upload (100 + 2 per MiB), so an
// upload in small pieces, resumed after a cut, finishes within the anonymous budget (60 an hour).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'undici';
import { Upload, type UploadOptions } from 'tus-js-client';
import { backends, resumableBytes, startServer, type TestServer } from './helpers/server.ts';
import { OCTETS, tusCall, tusCreate, tusMeta, tusPatch, uploadPath, type TusRes } from './helpers/tus.ts';
import { assertNoServerErrors, MiB, rawConnect, write } from './upload-util.ts';
import { waitFor } from './helpers/wait.ts';

const RATE = 60;
let seq = 0;
const freshIp = (): string => `10.91.${Math.floor(seq / 250) % 250}.${(seq++ % 250) + 1}`;
const budget = (r: TusRes): [string | undefined, string | undefined] => [r.headers['x-ratelimit-limit'], r.headers['x-ratelimit-remaining']];

/** Uploads `file` with tus-js-client from address `ip`; resolves with the last response's budget headers. */
function runUpload(file: string, ip: string, options: Partial<UploadOptions>): Promise<{ remaining: string | null; code: string | null }> {
  return new Promise((resolve, reject) => {
    const up = new Upload(fs.createReadStream(file), {
      retryDelays: [0, 500, 1000],
      metadata: { filename: path.basename(file) },
      headers: { 'X-Forwarded-For': ip },
      ...options,
      onError: reject,
      onSuccess: ({ lastResponse }) =>
        resolve({ remaining: lastResponse.getHeader('X-RateLimit-Remaining') ?? null, code: lastResponse.getHeader('Sluice-Short-Code') ?? null }),
    });
    up.start();
  });
}

for (const backend of backends()) {
  describe(`tus and the hourly budget (${backend})`, () => {
    let srv: TestServer;
    let dir: string;
    let big: { file: string; sha: string };
    before(async () => {
      srv = await startServer(backend, { RATE_LIMIT_ANON_PER_HOUR: String(RATE), TRUST_PROXY: '127.0.0.1' });
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-tus-budget-'));
      const file = path.join(dir, 'big.bin');
      const h = createHash('sha256');
      const fd = fs.openSync(file, 'w');
      for (let i = 0; i < 64; i++) {
        const piece = randomBytes(MiB);
        h.update(piece);
        fs.writeSync(fd, piece);
      }
      fs.closeSync(fd);
      big = { file, sha: h.digest('hex') };
    });
    after(async () => {
      await srv?.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    const sha = async (code: string, ip: string): Promise<string> => {
      const info = await request(`${srv.url}/api/v1/bundle/${code}`, { headers: { 'x-forwarded-for': ip } });
      const { files } = (await info.body.json()) as { files: Array<{ id: number }> };
      const dl = await request(`${srv.url}/api/v1/download/${files[0]!.id}`);
      const h = createHash('sha256');
      for await (const c of dl.body) h.update(c as Buffer);
      return h.digest('hex');
    };

    for (const duringCreation of [false, true]) {
      test(`an anonymous 64 MiB upload in 1 MiB pieces spends one request${duringCreation ? ' (uploadDataDuringCreation)' : ''}`, async () => {
        const ip = freshIp();
        const done = await runUpload(big.file, ip, { endpoint: `${srv.url}/api/v1/tus/`, chunkSize: MiB, uploadDataDuringCreation: duringCreation });
        assert.equal(done.remaining, String(RATE - 1), 'only the creation was spent');
        assert.equal(await sha(done.code!, ip), big.sha);
        assertNoServerErrors(srv);
      });
    }

    test('creation spends one, PATCH/HEAD/OPTIONS/GET none, termination one; the upload has its own bound', async () => {
      const ip = freshIp();
      const from = { 'x-forwarded-for': ip };
      const c = await tusCall(srv, 'POST', '/api/v1/tus/', { ...from, 'upload-length': '2048', 'upload-metadata': tusMeta({ filename: 'b.bin' }) });
      assert.equal(c.status, 201);
      assert.deepEqual(budget(c), [String(RATE), String(RATE - 1)]);
      const loc = uploadPath(c.headers.location!);
      const p = await tusPatch(srv, loc, 0, randomBytes(1024), from);
      assert.equal(p.status, 204, p.body);
      assert.deepEqual(budget(p), [String(RATE), String(RATE - 1)]);
      for (const method of ['HEAD', 'OPTIONS']) {
        const r = await tusCall(srv, method, loc, from);
        assert.ok(r.status === 200 || r.status === 204, `${method} ${r.status}`);
        assert.deepEqual(budget(r), [String(RATE), String(RATE - 1)], method);
      }
      // 100 + 2 per MiB of its length (2048 bytes: one MiB begun): 102 requests, three made.
      for (let i = 3; i < 102; i++) assert.equal((await tusCall(srv, 'HEAD', loc, from)).status, 200);
      const over = await tusCall(srv, 'HEAD', loc, from);
      assert.equal(over.status, 429);
      assert.deepEqual(budget(over), [String(RATE), String(RATE - 1)], 'the hourly budget is untouched');
      assert.ok(Number(over.headers['retry-after']) > 0);
      assert.equal(over.headers['tus-resumable'], '1.0.0');
      const overPatch = await tusPatch(srv, loc, 1024, randomBytes(1024), from);
      assert.equal(overPatch.status, 429);
      const [row] = await srv.sql<{ n: string }[]>`select upload_offset::text as n from tus_uploads where id = ${path.basename(loc)}`;
      assert.equal(row!.n, '1024', 'the refused PATCH wrote nothing');
      // Another upload of the same client has its own bound.
      const other = await tusCreate(srv, 10, from);
      assert.equal((await tusCall(srv, 'HEAD', other, from)).status, 200);
      const del = await tusCall(srv, 'DELETE', loc, from);
      assert.equal(del.status, 204);
      assert.deepEqual(budget(del), [String(RATE), String(RATE - 3)], 'a termination spends one');
      // A request naming no live upload spends the hourly budget: probing ids is not free.
      const gone = await tusCall(srv, 'HEAD', loc, from);
      assert.equal(gone.status, 404);
      assert.deepEqual(budget(gone), [String(RATE), String(RATE - 4)]);
      // A creation refused for its protocol version counts too.
      const wrong = await tusCall(srv, 'POST', '/api/v1/tus/', { ...from, 'tus-resumable': '0.2.2', 'upload-length': '5' });
      assert.equal(wrong.status, 412);
      assert.deepEqual(budget(wrong), [String(RATE), String(RATE - 5)]);
    });

    test('a deferred length earns its bound from the bytes received', async () => {
      const from = { 'x-forwarded-for': freshIp() };
      const r = await tusCall(srv, 'POST', '/api/v1/tus/', { ...from, 'upload-defer-length': '1' });
      const loc = uploadPath(r.headers.location!);
      for (let i = 0; i < 100; i++) assert.equal((await tusCall(srv, 'HEAD', loc, from)).status, 200);
      assert.equal((await tusCall(srv, 'HEAD', loc, from)).status, 429, '100 with nothing received');
      const m = await tusCall(srv, 'POST', '/api/v1/tus/', { ...from, 'upload-defer-length': '1' });
      const loc2 = uploadPath(m.headers.location!);
      assert.equal((await tusPatch(srv, loc2, 0, randomBytes(3 * MiB), from)).status, 204);
      for (let i = 1; i < 106; i++) assert.equal((await tusCall(srv, 'HEAD', loc2, from)).status, 200, `request ${i + 1}`);
      assert.equal((await tusCall(srv, 'HEAD', loc2, from)).status, 429, '100 + 2 × 3 after 3 MiB');
    });

    test('curl-style pieces: a connection cut mid-PATCH, then HEAD, then the rest; one request spent', async () => {
      const ip = freshIp();
      const from = { 'x-forwarded-for': ip };
      const data = randomBytes(8 * MiB);
      const c = await tusCall(srv, 'POST', '/api/v1/tus/', { ...from, 'upload-length': String(data.length), 'upload-metadata': tusMeta({ filename: 'c.bin' }) });
      const loc = uploadPath(c.headers.location!);
      const conn = await rawConnect(srv.port);
      await write(conn.sock, `PATCH ${loc} HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\nX-Forwarded-For: ${ip}\r\nUpload-Offset: 0\r\n` +
        `Content-Type: application/offset+octet-stream\r\nContent-Length: ${data.length}\r\n\r\n`);
      // More than one part of the S3 store (6 MiB), so the bytes show in the bucket before the cut.
      await write(conn.sock, data.subarray(0, 7 * MiB));
      await waitFor('the server to receive the bytes', async () => ((await resumableBytes(srv, path.basename(loc))) ?? 0) > 0);
      conn.sock.destroy();
      let offset = 0;
      await waitFor('the cut PATCH to record its offset', async () => {
        const h = await tusCall(srv, 'HEAD', loc, from);
        offset = Number(h.headers['upload-offset']);
        return offset > 0 && (await tusPatch(srv, loc, offset, Buffer.alloc(0), from)).status === 204;
      });
      let last: TusRes | undefined;
      for (let at = offset; at < data.length; at += MiB) {
        last = await tusPatch(srv, loc, at, data.subarray(at, Math.min(at + MiB, data.length)), { ...OCTETS, ...from });
        assert.equal(last.status, 204, last.body);
      }
      assert.deepEqual(budget(last!), [String(RATE), String(RATE - 1)]);
      assert.equal(await sha(last!.headers['sluice-short-code']!, ip), createHash('sha256').update(data).digest('hex'));
      assertNoServerErrors(srv);
    });
  });
}
