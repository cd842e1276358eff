import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { request } from 'undici';
import sharp from 'sharp';
import { GetObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { sharedBucket, type SharedBucket } from './helpers/s3-backend.ts';
import { isolateIds, mintKey, verifyAccess } from './access-util.ts';
import { bearer, call, uploaded, type Json } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';

const PW = 'hunter2 but longer';

/** The bucket, and the prefix of `srv`'s derived files in it. */
async function cacheIn(srv: TestServer): Promise<{ bucket: SharedBucket; prefix: string }> {
  return { bucket: await sharedBucket(), prefix: `${/^s3:\/\/[^/]+\/?(.*)$/.exec(srv.env.STORAGE_URL!)![1]}/cache/` };
}
/** A cache entry of an S3-backed server (null: none). */
async function cacheObject(srv: TestServer, name: string): Promise<Buffer | null> {
  const { bucket, prefix } = await cacheIn(srv);
  const client = bucket.client();
  try {
    const r = await client.send(new GetObjectCommand({ Bucket: bucket.bucket, Key: `${prefix}${name}` }));
    return Buffer.from(await r.Body!.transformToByteArray());
  } catch {
    return null;
  } finally {
    client.destroy();
  }
}
/** Names of an S3-backed server's cache entries under `dir` (ending in '/'), without it. */
async function cacheNames(srv: TestServer, dir: string): Promise<string[]> {
  const { bucket, prefix } = await cacheIn(srv);
  const client = bucket.client();
  try {
    const r = await client.send(new ListObjectsV2Command({ Bucket: bucket.bucket, Prefix: `${prefix}${dir}` }));
    return (r.Contents ?? []).map((o) => o.Key!.slice(`${prefix}${dir}`.length));
  } finally {
    client.destroy();
  }
}

interface Bin {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}
async function bin(srv: TestServer, method: string, urlPath: string, headers: Record<string, string> = {}): Promise<Bin> {
  const r = await request(`${srv.url}${urlPath}`, { method: method as 'GET', headers });
  return { status: r.statusCode, headers: r.headers, body: Buffer.from(await r.body.arrayBuffer()) };
}
const json = (r: Bin): Json => JSON.parse(r.body.toString());
function assert404(r: Bin, what: string): void {
  assert.equal(r.status, 404, `${what}: ${r.body.toString().slice(0, 200)}`);
  assert.match(String(r.headers['content-type']), /^application\/json/);
  assert.equal(json(r).success, false);
}
function noRateHeaders(r: Bin): void {
  for (const h of Object.keys(r.headers)) assert.doesNotMatch(h, /^x-ratelimit/i, `unexpected ${h}`);
}
async function assertThumb(r: Bin, w: number, h: number): Promise<void> {
  assert.equal(r.status, 200, r.body.toString().slice(0, 200));
  assert.equal(r.headers['content-type'], 'image/webp');
  assert.equal(r.headers['cache-control'], 'private, max-age=3600');
  assert.equal(r.headers['x-content-type-options'], 'nosniff');
  assert.match(String(r.headers.etag), /^"t1-[0-9a-z]+-[0-9a-z]+-[0-9a-z]+-[0-9a-f]{8}"$/);
  const meta = await sharp(r.body).metadata();
  assert.equal(meta.format, 'webp');
  assert.deepEqual([meta.width, meta.height], [w, h]);
}

for (const backend of backends()) {
  describe(`content paths /d and /og (${backend})`, () => {
    let srv: TestServer;
    let owner: string;
    let pub: Json;
    let locked: Json;
    const bytes = Buffer.from(Array.from({ length: 1000 }, (_, i) => i % 251));
    let png: Buffer;
    let jpeg: Buffer;

    /** The cached thumbnail of file `id`, stored under key `k` (null: none): beside the file on disk, under cache/ in a bucket. */
    const cachedThumb = async (id: number, k?: string): Promise<Buffer | null> => {
      k ??= (await srv.sql<{ storage_key: string }[]>`select storage_key from files where id = ${id}`)[0]!.storage_key;
      if (srv.backend === 's3') return cacheObject(srv, `${k}.thumb.webp`);
      return fs.promises.readFile(path.join(srv.dataDir, 'files', k.slice(0, 2), k.slice(2, 4), `${k}.thumb.webp`)).catch(() => null);
    };
    const token = async (): Promise<string> => {
      const r = await verifyAccess(srv, locked.short_code, PW);
      assert.equal(r.status, 200, r.text);
      return encodeURIComponent(r.json.access_token);
    };

    before(async () => {
      srv = await startServer(backend);
      await isolateIds(srv);
      owner = await mintKey(srv);
      // 1000×500 PNG; a 400×1200 JPEG whose EXIF says "rotate 90°": displayed 1200 wide, 400 high.
      png = await sharp({ create: { width: 1000, height: 500, channels: 3, background: '#3080c0' } }).png().toBuffer();
      jpeg = await sharp({ create: { width: 400, height: 1200, channels: 3, background: '#c03080' } })
        .jpeg()
        .withMetadata({ orientation: 6 })
        .toBuffer();
      pub = await uploaded(srv, [
        { name: 'data.bin', data: bytes, type: 'application/octet-stream' },
        { name: 'pic.png', data: png, type: 'image/png' },
        { name: 'photo.jpg', data: jpeg, type: 'image/jpeg' },
        { name: 'notes.txt', data: 'just text', type: 'text/plain' },
        { name: 'broken.png', data: Buffer.concat([png.subarray(0, 60), Buffer.alloc(200, 7)]), type: 'image/png' },
        { name: 'tiny.png', data: await sharp({ create: { width: 40, height: 30, channels: 4, background: '#fff0' } }).png().toBuffer(), type: 'image/png' },
        { name: 'x.svg', data: '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>', type: 'image/svg+xml' },
        // SVG content declared as PNG: the decoder must never see it.
        { name: 'sneaky.png', data: '<svg xmlns="http://www.w3.org/2000/svg" width="100" height="100"><rect width="100" height="100"/></svg>', type: 'image/png' },
      ]);
      locked = await uploaded(srv, [{ name: 'secret.png', data: png, type: 'image/png' }], { key: owner, fields: { access_password: PW } });
    });
    after(() => srv?.close());
    const idOf = (b: Json, name: string): number => b.files.find((f: Json) => f.name === name).id;

    test('/d/<id> is the download: bytes, headers, Range, HEAD, 304; no rate-limit headers', async () => {
      const id = idOf(pub, 'data.bin');
      const [d, api] = await Promise.all([bin(srv, 'GET', `/d/${id}`), bin(srv, 'GET', `/api/v1/download/${id}`)]);
      assert.equal(d.status, 200);
      assert.deepEqual(d.body, bytes);
      for (const h of ['content-type', 'content-disposition', 'etag', 'last-modified', 'accept-ranges', 'cache-control', 'content-length']) {
        assert.equal(d.headers[h], api.headers[h], h);
      }
      noRateHeaders(d);
      assert.ok(Object.keys(api.headers).some((h) => /^x-ratelimit/i.test(h)), 'the API path is rate-limited');
      const part = await bin(srv, 'GET', `/d/${id}`, { range: 'bytes=10-19' });
      assert.equal(part.status, 206);
      assert.equal(part.headers['content-range'], 'bytes 10-19/1000');
      assert.deepEqual(part.body, bytes.subarray(10, 20));
      const head = await bin(srv, 'HEAD', `/d/${id}`);
      assert.equal(head.status, 200);
      assert.equal(head.headers['content-length'], '1000');
      assert.equal(head.body.length, 0);
      const again = await bin(srv, 'GET', `/d/${id}`, { 'if-none-match': String(d.headers.etag) });
      assert.equal(again.status, 304);
      assert404(await bin(srv, 'GET', '/d/999999999'), 'unknown id');
      assert404(await bin(srv, 'GET', '/d/abc'), 'bad id');
    });

    test('preview of a PNG and an EXIF-rotated JPEG: WebP, long side 320, cached beside the file', async () => {
      const p = await bin(srv, 'GET', `/d/${idOf(pub, 'pic.png')}?preview=1`);
      await assertThumb(p, 320, 160);
      noRateHeaders(p);
      await assertThumb(await bin(srv, 'GET', `/d/${idOf(pub, 'photo.jpg')}?preview=1`), 320, 107);
      // Never enlarged.
      await assertThumb(await bin(srv, 'GET', `/d/${idOf(pub, 'tiny.png')}?preview=1`), 40, 30);
      assert.deepEqual(await cachedThumb(idOf(pub, 'pic.png')), p.body, 'thumbnail cached in the store');
      const again = await bin(srv, 'GET', `/d/${idOf(pub, 'pic.png')}?preview=1`);
      assert.deepEqual(again.body, p.body);
      assert.equal(again.headers.etag, p.headers.etag);
      assert.equal((await bin(srv, 'GET', `/d/${idOf(pub, 'pic.png')}?preview=1`, { 'if-none-match': String(p.headers.etag) })).status, 304);
    });

    test('deleting the file removes its cached thumbnail', async () => {
      const b = await uploaded(srv, [{ name: 'gone.png', data: png, type: 'image/png' }]);
      const id = b.files[0].id;
      await assertThumb(await bin(srv, 'GET', `/d/${id}?preview=1`), 320, 160);
      const [row] = await srv.sql<{ storage_key: string }[]>`select storage_key from files where id = ${id}`;
      const cached = () => cachedThumb(id, row!.storage_key);
      assert.ok(await cached());
      const del = await call(srv, 'DELETE', `/api/v1/file/${id}`, { headers: bearer(b.upload_token) });
      assert.equal(del.status, 200, del.text);
      await waitFor('thumbnail removed', async () => (await cached()) === null);
      assert404(await bin(srv, 'GET', `/d/${id}?preview=1`), 'preview of a deleted file');
    });

    test('no preview (404, never 500) for non-images, SVG, corrupt and oversized images', async () => {
      for (const name of ['data.bin', 'notes.txt', 'broken.png', 'x.svg', 'sneaky.png']) {
        assert404(await bin(srv, 'GET', `/d/${idOf(pub, name)}?preview=1`), name);
      }
      // 10000×10000 is over limitInputPixels (50 MP), though it compresses to a small file.
      const huge = await sharp({ create: { width: 10000, height: 10000, channels: 3, background: '#000' } })
        .png({ compressionLevel: 9 })
        .toBuffer();
      assert.ok(huge.length < 2_000_000, `${huge.length} bytes`);
      const b = await uploaded(srv, [{ name: 'huge.png', data: huge, type: 'image/png' }]);
      assert404(await bin(srv, 'GET', `/d/${b.files[0].id}?preview=1`), 'huge image');
      assert.equal(await cachedThumb(b.files[0].id), null);
    });

    test('password bundle: /d and preview need the owner key or an access token', async () => {
      const id = locked.files[0]?.id ?? (await srv.sql<{ id: number }[]>`select f.id from files f join bundles b on b.id = f.bundle_id where b.short_code = ${locked.short_code}`)[0]!.id;
      assert404(await bin(srv, 'GET', `/d/${id}`), 'anonymous download');
      assert404(await bin(srv, 'GET', `/d/${id}?preview=1`), 'anonymous preview');
      const t = await token();
      const d = await bin(srv, 'GET', `/d/${id}?t=${t}`);
      assert.equal(d.status, 200);
      assert.deepEqual(d.body, png);
      await assertThumb(await bin(srv, 'GET', `/d/${id}?preview=1&t=${t}`), 320, 160);
      assert.equal((await bin(srv, 'GET', `/d/${id}`, bearer(owner))).status, 200);
      await assertThumb(await bin(srv, 'GET', `/d/${id}?preview=1`, bearer(owner)), 320, 160);
    });

    test('a signed thumbnail_url opens the preview only; tampered or expired signatures do not', async () => {
      const my = await call(srv, 'GET', '/api/v1/my/bundles', { headers: bearer(owner) });
      assert.equal(my.status, 200, my.text);
      const f = my.json.bundles.find((b: Json) => b.short_code === locked.short_code).files[0];
      assert.match(f.thumbnail_url, /^\/d\/\d+\?preview=1&exp=\d+&sig=[A-Za-z0-9_-]{43}$/);
      await assertThumb(await bin(srv, 'GET', f.thumbnail_url), 320, 160);
      const signed = f.thumbnail_url.slice(f.thumbnail_url.indexOf('&') + 1);
      assert404(await bin(srv, 'GET', `/d/${f.id}?${signed}`), 'signature on the download');
      assert404(await bin(srv, 'GET', `/d/${f.id}?preview=0&${signed}`), 'signature with preview=0');
      assert404(await bin(srv, 'GET', `/api/v1/download/${f.id}?${signed}`), 'signature on the API download');
      const sig = /sig=([^&]+)/.exec(signed)![1]!;
      const exp = Number(/exp=(\d+)/.exec(signed)![1]);
      const flipped = `${sig.slice(0, -1)}${sig.endsWith('A') ? 'B' : 'A'}`;
      assert404(await bin(srv, 'GET', `/d/${f.id}?preview=1&exp=${exp}&sig=${flipped}`), 'tampered sig');
      assert404(await bin(srv, 'GET', `/d/${f.id}?preview=1&exp=${exp + 60}&sig=${sig}`), 'moved expiry');
      assert404(await bin(srv, 'GET', `/d/${f.id}?preview=1&exp=${Math.floor(Date.now() / 1000) - 10}&sig=${sig}`), 'expired');
    });

    test('/og/<code>.png: a 1200×630 card, gated like the bundle', async () => {
      const r = await bin(srv, 'GET', `/og/${pub.short_code}.png`);
      assert.equal(r.status, 200, r.body.toString().slice(0, 200));
      assert.equal(r.headers['content-type'], 'image/png');
      assert.equal(r.headers['cache-control'], 'public, max-age=300');
      noRateHeaders(r);
      const meta = await sharp(r.body).metadata();
      assert.deepEqual([meta.format, meta.width, meta.height], ['png', 1200, 630]);
      const cached = srv.backend === 's3' ? await cacheNames(srv, 'og/') : fs.readdirSync(path.join(srv.dataDir, 'cache', 'og'));
      assert.ok(cached.some((n) => n.startsWith(`${pub.short_code}-`) && n.endsWith('.png')), cached.join());
      assert.equal((await bin(srv, 'GET', `/og/${pub.short_code}.png`, { 'if-none-match': String(r.headers.etag) })).status, 304);

      assert404(await bin(srv, 'GET', `/og/${locked.short_code}.png`), 'locked card');
      const withToken = await bin(srv, 'GET', `/og/${locked.short_code}.png?t=${await token()}`);
      assert.equal(withToken.status, 200);
      assert.equal(withToken.headers['content-type'], 'image/png');
      assert.equal(withToken.headers['cache-control'], 'private, max-age=300');
      assert.equal((await bin(srv, 'GET', `/og/${locked.short_code}.png`, bearer(owner))).status, 200);

      assert404(await bin(srv, 'GET', '/og/ZZZZ9.png'), 'unknown code');
      assert404(await bin(srv, 'GET', `/og/${pub.short_code}`), 'no .png suffix');
      assert404(await bin(srv, 'GET', `/og/${pub.short_code}.jpg`), 'other suffix');
    });
  });
}
