/**
 * Upload and download buffers are reused, not allocated per request: a fresh 512 KiB chunk buffer
 * per 1 KiB upload once made V8 collect every few milliseconds and more than doubled the CPU per
 * upload; a fresh 2 MiB per download stayed resident until the next GC. Read through GET /metrics
 * (sluice_buffer_allocations_total).
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { MiB, created, createTus, download, sha } from './upload-util.ts';
import { file } from './helpers/http.ts';

async function allocations(srv: TestServer): Promise<Record<string, number>> {
  const res = await request(`${srv.url}/metrics`);
  const text = await res.body.text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^sluice_buffer_allocations_total\{pool="([^"]+)"\} (\d+)$/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

for (const backend of backends()) {
  describe(`upload and download buffers (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(() => srv?.close());

    test('small and multi-chunk uploads reuse the chunk pool instead of allocating per request', async () => {
      const before_ = await allocations(srv);
      assert.ok('chunk' in before_, 'the chunk pool is reported');
      for (let round = 0; round < 8; round++) {
        await Promise.all(Array.from({ length: 10 }, (_, i) => created(srv, [file(`s${round}-${i}.txt`, randomBytes(1024))])));
      }
      for (let i = 0; i < 4; i++) {
        const data = randomBytes(3 * MiB + i);
        const reply = await created(srv, [file(`big${i}.bin`, data), file(`tail${i}.txt`, 'tail')]);
        const got = await download(srv, reply.files[0]!);
        assert.equal(sha(got.data), sha(data), 'bytes survive buffer reuse');
      }
      // Long enough for the part writer to push back many times: chunks still referenced then must
      // come back as soon as they are free, not only at the body's end.
      const big = randomBytes(48 * MiB);
      const reply = await created(srv, [file('long.bin', big)]);
      assert.equal(sha((await download(srv, reply.files[0]!)).data), sha(big));
      const after_ = await allocations(srv);
      // The pool keeps 16: 80 small and 5 multi-chunk uploads, one at a time or 10 at once, fit in it.
      assert.ok(after_.chunk! - before_.chunk! <= 16, `chunk buffers allocated: ${after_.chunk! - before_.chunk!}`);
    });

    test('downloads reuse their read buffers, also after aborted and ranged ones', async () => {
      const data = randomBytes(12 * MiB + 5);
      const reply = await created(srv, [file('dl.bin', data)]);
      const url = `${srv.url}${reply.files[0]!.download_url}`;
      const before_ = await allocations(srv);
      assert.ok('download' in before_, 'the download pool is reported');
      for (let round = 0; round < 3; round++) {
        const got = await Promise.all(Array.from({ length: 4 }, () => download(srv, reply.files[0]!)));
        for (const g of got) assert.equal(sha(g.data), sha(data), 'bytes survive buffer reuse');
        // Clients that leave after the first chunk: their buffers come back once the read in flight ends.
        await Promise.all(
          Array.from({ length: 4 }, async () => {
            const r = await request(url);
            for await (const _ of r.body) break;
          }),
        );
        const ranged = await request(url, { headers: { range: `bytes=${MiB - 7}-${3 * MiB}` } });
        assert.equal(ranged.statusCode, 206);
        assert.equal(sha(Buffer.from(await ranged.body.arrayBuffer())), sha(data.subarray(MiB - 7, 3 * MiB + 1)));
      }
      const after_ = await allocations(srv);
      // Two buffers per response and at most 4 responses at once; 16 spares are kept.
      const fresh = after_.download! - before_.download!;
      assert.ok(fresh <= 8, `download buffers allocated: ${fresh}`);
    });

    test('tus PATCHes reuse their slot buffers: a long upload allocates no more than the first PATCH did', async () => {
      const before_ = await allocations(srv);
      const data = randomBytes(64 * MiB);
      const piece = 8 * MiB;
      const tus = { 'tus-resumable': '1.0.0' };
      const loc = await createTus(srv, data.length, 't.bin');
      let fileId = 0;
      for (let at = 0; at < data.length; at += piece) {
        const r = await request(`${srv.url}${loc}`, {
          method: 'PATCH',
          headers: { ...tus, 'content-type': 'application/offset+octet-stream', 'upload-offset': String(at) },
          body: data.subarray(at, at + piece),
        });
        await r.body.dump();
        assert.equal(r.statusCode, 204);
        fileId = Number(r.headers['sluice-file-id'] ?? 0);
      }
      const got = await request(`${srv.url}/api/v1/download/${fileId}`);
      assert.equal(sha(Buffer.from(await got.body.arrayBuffer())), sha(data));
      const after_ = await allocations(srv);
      // A PATCH writes through the same ring as multipart files (at most 4 slots; 16 spares kept): after
      // the first PATCH, none is allocated again.
      const fresh = after_.slot! - before_.slot!;
      assert.ok(fresh <= 4, `slot buffers allocated over 8 PATCHes: ${fresh}`);
    });
  });
}
