// One-request uploads past a billion bytes, sent with a Content-Length (a ten-digit one, which some
// uWebSockets.js builds drop): a keyed curl -F upload is stored byte for byte, and the anonymous cap
// is enforced mid-stream with the interface's 400, as it is for chunked bodies.
import { describe, it, before, after, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { request } from 'undici';
import { storageBackends, startServer, type TestServer } from './helpers/server.ts';
import { mintKey } from './access-util.ts';
import { MiB, created, ensureRunning, assertServes, assertNoServerErrors, snapshot, assertNothingKept, rawConnect, rawHead, partHead, closing, newBoundary, write, assertJsonError, survives, sendUntilAnswered, repeated, type Reply } from './upload-util.ts';
import { file, call } from './helpers/http.ts';

const GiB = 1024 * MiB;
/** The anonymous cap of the default configuration. */
const ANON_CAP = GiB;
const PIECE = randomBytes(MiB);
/** Body bytes held back at the end of a refused upload: the 400 must come without them. */
const HELD_BACK = 512 * 1024;
const hasCurl = spawnSync('curl', ['--version']).status === 0;

/** Writes `bytes` of pseudo-random data (every MiB block stamped with its index) to `file`; returns its SHA-256. */
async function writeTestFile(file: string, bytes: number): Promise<string> {
  const hash = createHash('sha256');
  const fh = await fs.promises.open(file, 'w');
  try {
    const block = Buffer.from(PIECE);
    for (let at = 0, i = 0; at < bytes; at += block.length, i++) {
      block.writeUInt32LE(i, 0);
      const part = block.subarray(0, Math.min(block.length, bytes - at));
      hash.update(part);
      await fh.write(part);
    }
  } finally {
    await fh.close();
  }
  return hash.digest('hex');
}

/** A multipart body of the named files (of `PIECE` data), as pieces, and its length. */
function multipartPieces(boundary: string, files: Array<[string, number]>): { length: number; pieces: Iterable<Buffer> } {
  const sep = Buffer.from('\r\n');
  const end = closing(boundary);
  const heads = files.map(([name]) => partHead(boundary, name));
  const length = files.reduce((n, [, size], i) => n + heads[i]!.length + size, 0) + sep.length * (files.length - 1) + end.length;
  function* pieces(): Generator<Buffer> {
    for (const [i, [, size]] of files.entries()) {
      if (i > 0) yield sep;
      yield heads[i]!;
      yield* repeated(PIECE, size);
    }
    yield end;
  }
  return { length, pieces: pieces() };
}

/** The first `bytes` of `pieces`. */
function* upTo(pieces: Iterable<Buffer>, bytes: number): Generator<Buffer> {
  let left = bytes;
  for (const p of pieces) {
    if (left <= 0) return;
    yield p.length <= left ? p : p.subarray(0, left);
    left -= p.length;
  }
}

for (const backend of storageBackends()) {
  describe(`uploads over a billion bytes with a Content-Length (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(async () => {
      await srv?.close();
    });
    beforeEach(() => ensureRunning(srv));
    afterEach(() => assertNoServerErrors(srv));

    /**
     * Sends a multipart upload of `files` with its Content-Length, all but its last HELD_BACK bytes,
     * and expects the cap's 400 (with Connection: close) without them; nothing is kept.
     */
    async function refusedMidStream(urlPath: string, files: Array<[string, number]>): Promise<void> {
      const before = await snapshot(srv);
      const b = newBoundary();
      const { length, pieces } = multipartPieces(b, files);
      assert.ok(length >= 1e9, `a ten-digit Content-Length (${length})`);
      const c = await rawConnect(srv.port);
      await write(c.sock, rawHead(urlPath, b, length));
      const written = await sendUntilAnswered(c, upTo(pieces, length - HELD_BACK));
      const r = await survives(srv, c.response).catch((err: unknown) =>
        assert.fail(`no answer to a ${length}-byte body (${written ?? 'all but the last'} bytes sent): ${String(err)}`),
      );
      c.sock.destroy();
      assertJsonError(r, 400, /size|limit|large/i);
      assert.equal(r.headers.connection, 'close');
      await assertNothingKept(srv, before);
    }

    it('a 1.2 GB curl -F upload under a starter key: 201, and the download has the same SHA-256', { skip: !hasCurl && 'no curl', timeout: 600_000 }, async () => {
      const key = await mintKey(srv, 'starter');
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-big-'));
      try {
        const source = path.join(dir, 'big.bin');
        const size = 1_200_000_000;
        const digest = await writeTestFile(source, size);
        const out = await new Promise<string>((resolve, reject) => {
          const curl = spawn('curl', ['-sS', '-H', `Authorization: Bearer ${key}`, '-F', `files[]=@${source}`, '-w', '\n%{http_code}', `${srv.url}/api/v1/upload`]);
          let text = '';
          curl.stdout.on('data', (d: Buffer) => (text += d));
          curl.stderr.on('data', (d: Buffer) => (text += d));
          curl.on('error', reject);
          curl.on('close', () => resolve(text));
        });
        const [json, status] = [out.slice(0, out.lastIndexOf('\n')), out.slice(out.lastIndexOf('\n') + 1)];
        assert.equal(status, '201', out);
        const reply = JSON.parse(json) as Reply;
        assert.equal(reply.files[0]!.size, size);
        fs.rmSync(source);
        const res = await request(`${srv.url}${reply.files[0]!.download_url}`);
        assert.equal(res.statusCode, 200);
        assert.equal(res.headers['content-length'], String(size));
        const hash = createHash('sha256');
        let got = 0;
        for await (const chunk of res.body) {
          hash.update(chunk as Buffer);
          got += (chunk as Buffer).length;
        }
        assert.equal(got, size);
        assert.equal(hash.digest('hex'), digest);
        const cli = await srv.cli(['bundles', 'delete', reply.short_code]);
        assert.equal(cli.code, 0, cli.stderr);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });

    // On S3 the refusal's work is the append case's (a multipart upload aborted, nothing kept), at a
    // gigabyte each through the object store: that one case stands for the three there.
    if (backend !== 's3') {
      it('anonymous, one file of 1 GiB + 1 MiB: 400 mid-stream', { timeout: 300_000 }, async () => {
        await refusedMidStream('/api/v1/upload', [['over.bin', ANON_CAP + MiB]]);
        await assertServes(srv);
      });

      it('anonymous, three files of 360 MiB in one request: 400 mid-stream', { timeout: 300_000 }, async () => {
        await refusedMidStream('/api/v1/upload', [['a.bin', 360 * MiB], ['b.bin', 360 * MiB], ['c.bin', 360 * MiB]]);
        await assertServes(srv);
      });
    }

    it('anonymous, an append of 1 GiB past the cap: 400 mid-stream, the bundle as it was', { timeout: 300_000 }, async () => {
      const bundle = await created(srv, [file('base.bin', randomBytes(MiB))]);
      await refusedMidStream(`/api/v1/upload/${bundle.upload_token}`, [['more.bin', GiB]]);
      const status = await call(srv, 'GET', `/api/v1/bundle/${bundle.short_code}/status`, { json: true });
      assert.equal(status.json.total_size_bytes, MiB);
      await assertServes(srv);
    });
  });
}
