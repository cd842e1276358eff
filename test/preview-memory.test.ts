/**
 * A preview's memory is bounded by the image's decoded size, not its pixel count: a small
 * Adam7-interlaced 16-bit RGBA PNG of 7071×7071 (50 MP, 400 MB decoded) gets no preview, costs the
 * server no memory to refuse, and its share page still lists it.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { request } from 'undici';
import sharp from 'sharp';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { uploaded } from './helpers/http.ts';
import { decodedBytes, MAX_DECODED_BYTES } from '../src/thumbs/preview.ts';

const rssMiB = (pid: number): number => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

test('decoded size: width × height × channels × bytes per channel; unknown is refused', () => {
  assert.equal(decodedBytes({ width: 7071, height: 7071, channels: 4, depth: 'ushort' }), 7071 * 7071 * 8);
  assert.equal(decodedBytes({ width: 8000, height: 6000, channels: 3, depth: 'uchar' }), 144_000_000);
  assert.ok(decodedBytes({ width: 8000, height: 6000, channels: 3, depth: 'uchar' }) <= MAX_DECODED_BYTES);
  assert.equal(decodedBytes({ width: 10, height: 10, channels: 3 }), Infinity);
});

let png: Buffer;
before(async () => {
  png = await sharp({ create: { width: 7071, height: 7071, channels: 4, background: { r: 10, g: 20, b: 30, alpha: 0.5 } } })
    .toColourspace('rgb16')
    .png({ progressive: true, compressionLevel: 9 })
    .toBuffer();
  const meta = await sharp(png).metadata();
  assert.deepEqual([meta.width, meta.height, meta.channels, meta.depth, meta.isProgressive], [7071, 7071, 4, 'ushort', true]);
  assert.ok(png.length < 2_000_000, `${png.length} bytes`);
});

for (const backend of backends()) {
  describe(`preview memory (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(async () => {
      await srv?.close();
    });

    test('an interlaced 16-bit 50 MP PNG: previews refused (404) at no memory cost; the share page still lists it', async () => {
      const b = await uploaded(srv, [{ name: 'bomb.png', data: png, type: 'image/png' }]);
      const id = (b.files as Array<{ id: number }>)[0]!.id;
      // sharp loads with the first image request: warm it with a small image so the measure is the render's.
      const small = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#888' } }).png().toBuffer();
      const s = await uploaded(srv, [{ name: 'small.png', data: small, type: 'image/png' }]);
      assert.equal((await request(`${srv.url}/d/${(s.files as Array<{ id: number }>)[0]!.id}?preview=1`)).statusCode, 200);
      const pid = srv.proc.pid!;
      const before = rssMiB(pid);
      let peak = before;
      const sampler = setInterval(() => (peak = Math.max(peak, rssMiB(pid))), 20);
      try {
        const answers = await Promise.all(
          [1, 2, 3, 4].map(async () => {
            const r = await request(`${srv.url}/d/${id}?preview=1`);
            const body = await r.body.text();
            return { status: r.statusCode, body };
          }),
        );
        for (const a of answers) {
          assert.equal(a.status, 404, a.body);
          assert.equal(JSON.parse(a.body).success, false);
        }
      } finally {
        clearInterval(sampler);
      }
      assert.ok(peak - before < 64, `RSS grew ${(peak - before).toFixed(0)} MiB refusing four previews`);
      const page = await request(`${srv.url}/${b.short_code}`);
      assert.equal(page.statusCode, 200);
      assert.match(await page.body.text(), /bomb\.png/);
      // The file itself still downloads whole.
      const d = await request(`${srv.url}/d/${id}`);
      assert.equal(Buffer.from(await d.body.arrayBuffer()).length, png.length);
    });
  });
}
