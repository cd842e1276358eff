import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import { HeadObjectCommand, ListMultipartUploadsCommand, ListObjectsV2Command, ListPartsCommand, type S3Client } from '@aws-sdk/client-s3';
import { loadConfig, type S3Location } from '../src/config.ts';
import type { BlobStore, BlobWriter } from '../src/storage/blob-store.ts';
import { StorageSetupError } from '../src/storage/s3/client.ts';
import { createS3Store } from '../src/storage/s3/store.ts';
import { cephSkip, startCeph, type Ceph } from './helpers/ceph.ts';
import { waitFor } from './helpers/wait.ts';

const skip = cephSkip('S3 store on Ceph radosgw (test/s3-store.test.ts)');
const MIB = 1024 * 1024;

/** Pushes `data` in 64 KiB chunks, waiting for drain whenever write() says so. */
async function push(w: Pick<BlobWriter, 'write' | 'onDrain'>, data: Buffer, chunk = 64 * 1024): Promise<number> {
  let pauses = 0;
  for (let at = 0; at < data.length; at += chunk) {
    if (!w.write(data.subarray(at, at + chunk), true)) {
      pauses++;
      await new Promise<void>((r) => w.onDrain(r));
    }
  }
  return pauses;
}

async function readAll(s: NodeJS.ReadableStream): Promise<Buffer> {
  const out: Buffer[] = [];
  for await (const c of s) out.push(c as Buffer);
  return Buffer.concat(out);
}

describe('S3 blob store on radosgw', { skip }, () => {
  let ceph: Ceph;
  let s3: S3Client;
  let store: BlobStore;
  let location: S3Location;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-s3-'));

  before(async () => {
    ceph = await startCeph();
    s3 = ceph.client();
    location = loadConfig({ ...ceph.env('t1') }).s3!;
    store = await createS3Store({ location, tmpDir: tmp });
  });
  after(async () => {
    await store?.close();
    s3?.destroy();
    await ceph?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  const uploads = async () =>
    ((await s3.send(new ListMultipartUploadsCommand({ Bucket: ceph.bucket }))).Uploads ?? []).map((u) => u.Key);
  const visible = async (key: string) =>
    s3.send(new HeadObjectCommand({ Bucket: ceph.bucket, Key: `t1/files/${key}` })).then(() => true, () => false);

  test('STORAGE_URL parses into bucket and prefix, with the endpoint from AWS_ENDPOINT_URL_S3', () => {
    assert.deepEqual(location, {
      bucket: ceph.bucket, prefix: 't1/', region: 'us-east-1', endpoint: ceph.endpoint,
      credentials: { accessKeyId: ceph.accessKeyId, secretAccessKey: ceph.secretAccessKey }, partBufferBytes: 24 * MIB,
    });
    assert.equal(loadConfig({ ...ceph.env(), S3_PART_BUFFER_MIB: '48' }).s3!.partBufferBytes, 48 * MIB);
    assert.throws(() => loadConfig({ ...ceph.env(), S3_PART_BUFFER_MIB: '8' }), /S3_PART_BUFFER_MIB: expected a whole number from 16/);
    assert.throws(() => loadConfig({ STORAGE_URL: 'https://x' }), /STORAGE_URL: expected s3:\/\/BUCKET/);
    assert.throws(() => loadConfig({ STORAGE_URL: 's3://A_B' }), /not a valid bucket name/);
  });

  test('start-up: wrong credentials or a missing bucket is one line naming the setting', async () => {
    const wrong = loadConfig({ ...ceph.env(), AWS_SECRET_ACCESS_KEY: 'wrong-secret' });
    await assert.rejects(createS3Store({ location: wrong.s3!, tmpDir: tmp }), (err: Error) => {
      assert.ok(err instanceof StorageSetupError);
      assert.match(err.message, /^AWS_ACCESS_KEY_ID\/AWS_SECRET_ACCESS_KEY: refused by s3:\/\/sluice-test at http:\/\/127\.0\.0\.1:\d+ \(/);
      assert.doesNotMatch(err.message, /\n/);
      return true;
    });
    const missing = loadConfig({ ...ceph.env(), STORAGE_URL: 's3://no-such-bucket' });
    await assert.rejects(createS3Store({ location: missing.s3!, tmpDir: tmp }), {
      name: 'StorageSetupError',
      message: /^STORAGE_URL: bucket s3:\/\/no-such-bucket at http:\/\/127\.0\.0\.1:\d+ does not exist; create it first$/,
    });
    assert.throws(() => loadConfig({ ...ceph.env(), AWS_SECRET_ACCESS_KEY: '' }), /AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set both or neither/);
  });

  test('start-up: a server that ignores Range or refuses multipart uploads is a clear error', async () => {
    // A proxy in front of the real radosgw plays a server lacking one feature at a time.
    let mode: 'no-range' | 'no-multipart' = 'no-range';
    const target = new URL(ceph.endpoint);
    const proxy = http.createServer((req, res) => {
      if (mode === 'no-multipart' && req.method === 'POST' && /[?&]uploads(=|&|$)/.test(req.url ?? '')) {
        req.resume();
        res.writeHead(501, { 'content-type': 'application/xml' });
        res.end('<?xml version="1.0"?><Error><Code>NotImplemented</Code><Message>multipart</Message></Error>');
        return;
      }
      const up = http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
        const headers = { ...r.headers };
        let status = r.statusCode!;
        if (mode === 'no-range' && status === 206) {
          status = 200;
          delete headers['content-range'];
        }
        res.writeHead(status, headers);
        r.pipe(res);
      });
      req.pipe(up);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const endpoint = `http://127.0.0.1:${(proxy.address() as { port: number }).port}`;
    const via = loadConfig({ ...ceph.env(), AWS_ENDPOINT_URL_S3: endpoint }).s3!;
    try {
      await assert.rejects(createS3Store({ location: via, tmpDir: tmp }), {
        name: 'StorageSetupError', message: /^STORAGE_URL: s3:\/\/sluice-test at .* does not honour Range reads/,
      });
      mode = 'no-multipart';
      await assert.rejects(createS3Store({ location: via, tmpDir: tmp }), {
        name: 'StorageSetupError', message: /^STORAGE_URL: s3:\/\/sluice-test at .* refuses multipart uploads \(/,
      });
    } finally {
      proxy.close();
    }
  });

  test('a small object: one PutObject at publish, digest computed while streaming', async () => {
    const data = randomBytes(100_000);
    const w = store.createWriter({ sha256: true });
    await push(w, data);
    const d = await w.finish();
    assert.deepEqual(d, { size: data.length, crc32: crc32(data), sha256: createHash('sha256').update(data).digest('hex') });
    assert.equal(await visible(w.key), false, 'not visible before publish');
    assert.ok(!(await uploads()).includes(`t1/files/${w.key}`), 'held, not uploaded');
    await w.publish();
    assert.deepEqual(await readAll(await store.read(w.key)), data);
  });

  test('small objects past what the process may hold go up at finish(), as one part each', async () => {
    // 24 MiB may be held: four of 5 MiB are, the fifth and sixth upload their one part.
    const data = Array.from({ length: 6 }, () => randomBytes(5 * MIB));
    const writers = data.map(() => store.createWriter());
    for (const [i, w] of writers.entries()) {
      await push(w, data[i]!);
      assert.equal((await w.finish()).size, 5 * MIB);
    }
    const pending = await uploads();
    assert.deepEqual(writers.map((w) => pending.includes(`t1/files/${w.key}`)), [false, false, false, false, true, true]);
    assert.equal((await Promise.all(writers.map((w) => visible(w.key)))).some(Boolean), false, 'none visible before publish');
    await writers[2]!.abort();
    for (const w of writers.filter((_, i) => i !== 2)) await w.publish();
    for (const [i, w] of writers.entries()) {
      if (i === 2) assert.equal(await visible(w.key), false);
      else assert.deepEqual(await readAll(await store.read(w.key)), data[i]);
    }
    // What was held is free again: a small object is held once more.
    const again = store.createWriter();
    await push(again, data[0]!);
    await again.finish();
    assert.ok(!(await uploads()).includes(`t1/files/${again.key}`));
    await again.abort();
  });

  test('an empty object appears at publish', async () => {
    const w = store.createWriter();
    assert.deepEqual(await w.finish(), { size: 0, crc32: 0, sha256: null });
    assert.equal(await visible(w.key), false);
    await w.publish();
    assert.equal((await readAll(await store.read(w.key))).length, 0);
  });

  test('a large object streams into a multipart upload with backpressure and appears only at publish', async () => {
    const data = randomBytes(37 * MIB + 123);
    const w = store.createWriter();
    const pauses = await push(w, data);
    assert.ok(pauses > 0, 'write() asked the caller to wait');
    const d = await w.finish();
    assert.equal(d.size, data.length);
    assert.equal(d.crc32, crc32(data));
    assert.equal(d.sha256, null);
    assert.equal(await visible(w.key), false, 'parts are not an object');
    assert.ok((await uploads()).includes(`t1/files/${w.key}`));
    await w.publish();
    assert.ok(!(await uploads()).includes(`t1/files/${w.key}`));
    assert.deepEqual(createHash('sha256').update(await readAll(await store.read(w.key))).digest('hex'), createHash('sha256').update(data).digest('hex'));
    // Ranges across the 6 MiB part boundary, at the end, and past it.
    const b = 6 * MIB;
    assert.deepEqual(await readAll(await store.read(w.key, { start: b - 5, end: b + 5 })), data.subarray(b - 5, b + 5));
    assert.deepEqual(await readAll(await store.read(w.key, { start: data.length - 3, end: data.length + 100 })), data.subarray(-3));
    assert.equal((await readAll(await store.read(w.key, { start: data.length }))).length, 0);
    await assert.rejects(store.read(w.key, { start: data.length + 1 }), { code: 'OUT_OF_RANGE' });
    const r = await store.open(w.key);
    assert.equal(r.size, data.length);
    const buf = Buffer.alloc(1000);
    await r.readInto(buf, b - 500);
    assert.deepEqual(buf, data.subarray(b - 500, b + 500));
    await assert.rejects(r.readInto(buf, data.length - 10), { code: 'SHORT' });
    r.close();
    await store.delete(w.key);
    await assert.rejects(store.read(w.key), { code: 'NOT_FOUND' });
    await assert.rejects(store.open(w.key), { code: 'NOT_FOUND' });
  });

  test('a reader read in order costs one GET; a read elsewhere or beside it still gets its own bytes', async () => {
    const data = randomBytes(9 * MIB + 77);
    const w = store.createWriter();
    await push(w, data);
    await w.finish();
    await w.publish();
    // A proxy in front of radosgw counts the GETs the reader makes.
    const target = new URL(ceph.endpoint);
    let gets = 0;
    const proxy = http.createServer((req, res) => {
      if (req.method === 'GET' && req.url?.includes(w.key)) gets++;
      const up = http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode!, r.headers);
        r.pipe(res);
      });
      req.pipe(up);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const endpoint = `http://127.0.0.1:${(proxy.address() as { port: number }).port}`;
    const via = await createS3Store({ location: loadConfig({ ...ceph.env('t1'), AWS_ENDPOINT_URL_S3: endpoint }).s3!, tmpDir: tmp, check: false });
    try {
      const r = await via.open(w.key);
      const got: Buffer[] = [];
      for (let at = 0; at < data.length; at += MIB) {
        const buf = Buffer.alloc(Math.min(MIB, data.length - at));
        await r.readInto(buf, at);
        got.push(buf);
      }
      assert.deepEqual(Buffer.concat(got), data);
      assert.equal(gets, 1, 'one GET for the whole object');
      const back = Buffer.alloc(1000);
      await r.readInto(back, 5);
      assert.deepEqual(back, data.subarray(5, 1005));
      const [a, b] = [Buffer.alloc(3 * MIB), Buffer.alloc(100)];
      await Promise.all([r.readInto(a, 1005), r.readInto(b, 7 * MIB)]);
      assert.deepEqual(a, data.subarray(1005, 1005 + 3 * MIB));
      assert.deepEqual(b, data.subarray(7 * MIB, 7 * MIB + 100));
      const next = Buffer.alloc(10);
      await r.readInto(next, 1005 + 3 * MIB);
      assert.deepEqual(next, data.subarray(1005 + 3 * MIB, 1015 + 3 * MIB));
      assert.equal(gets, 3, 'the read back moved the GET, the one beside it had its own, the next one continued');
      await new Promise((res) => setTimeout(res, 1500));
      await r.readInto(next, 1015 + 3 * MIB);
      assert.deepEqual(next, data.subarray(1015 + 3 * MIB, 1025 + 3 * MIB));
      assert.equal(gets, 4, 'a GET left unread for a second was closed; the next read opened another');
      r.close();
    } finally {
      await via.close();
      proxy.close();
      await store.delete(w.key);
    }
  });

  test('uploads beyond the part budget wait their turn and all finish with their own bytes', async () => {
    const small = await createS3Store({ location: { ...location, partBufferBytes: 16 * MIB }, tmpDir: tmp, check: false });
    try {
      const datas = Array.from({ length: 4 }, (_, i) => randomBytes(20 * MIB + i));
      const keys = await Promise.all(
        datas.map(async (data) => {
          const w = small.createWriter();
          await push(w, data);
          assert.equal((await w.finish()).crc32, crc32(data));
          await w.publish();
          return w.key;
        }),
      );
      for (const [i, key] of keys.entries()) {
        assert.ok((await readAll(await small.read(key))).equals(datas[i]!), `upload ${i} holds its own bytes`);
        await small.delete(key);
      }
    } finally {
      await small.close();
    }
  });

  test('abort mid-stream leaves no multipart upload and no object', async () => {
    const w = store.createWriter();
    await push(w, randomBytes(20 * MIB));
    // abort() resolves once nothing of the object is left.
    const aborted = w.abort();
    await assert.rejects(w.finish(), { code: 'ABORTED' });
    await aborted;
    assert.ok(!(await uploads()).includes(`t1/files/${w.key}`));
    assert.equal(await visible(w.key), false);
  });

  test('a crashed writer is a leftover for another node; a live one is not', async () => {
    const other = await createS3Store({ location, tmpDir: tmp, check: false });
    const w = other.createWriter();
    await push(w, randomBytes(9 * MIB));
    await waitFor('the writer\'s multipart upload to exist', async () => (await uploads()).includes(`t1/files/${w.key}`));
    assert.ok(!(await other.listLeftovers(0)).some((l) => l.id.startsWith(`t1/files/${w.key}`)), 'own live writer');
    // 9 MiB make one 6 MiB part, the rest held. A part landing while a listing runs counts as a write
    // after it began: the listings below start once that part is in, so they all agree.
    const parts = async () => {
      const u = ((await s3.send(new ListMultipartUploadsCommand({ Bucket: ceph.bucket }))).Uploads ?? []).find((x) => x.Key === `t1/files/${w.key}`);
      return u ? ((await s3.send(new ListPartsCommand({ Bucket: ceph.bucket, Key: u.Key, UploadId: u.UploadId }))).Parts ?? []).length : 0;
    };
    await waitFor('the writer\'s first part to land', async () => (await parts()) === 1);
    const leftovers = async () => (await store.listLeftovers(0)).filter((l) => l.id.startsWith(`t1/files/${w.key} `));
    await waitFor('the other node\'s writer to be listed as a leftover', async () => (await leftovers()).length === 1);
    const found = await leftovers();
    assert.equal(found.length, 1);
    assert.equal(found[0]!.kind, 'temp');
    assert.equal((await store.listLeftovers(60_000)).filter((l) => l.id.startsWith(`t1/files/${w.key} `)).length, 0, 'not idle yet');
    await store.removeLeftover(found[0]!);
    assert.ok(!(await uploads()).includes(`t1/files/${w.key}`));
    w.abort();
    await other.close();
  });

  test('resumable: parts of at least 5 MiB, a short tail as its own object, crashes past the offset cut off', async () => {
    const id = randomBytes(16).toString('hex');
    const data = randomBytes(26 * MIB);
    await store.createResumable(id);
    await assert.rejects(store.createResumable(id));
    let ap = await store.append(id, 0, { limit: data.length, hashAhead: true });
    await assert.rejects(store.append(id, 0, { limit: data.length, hashAhead: true }), { code: 'BUSY' });
    await push(ap, data.subarray(0, 7 * MIB + 10));
    let r = await ap.finish();
    assert.deepEqual(r, { offset: 7 * MIB + 10, error: null });
    // 7 MiB made one 6 MiB part and a 1 MiB tail; with 3 MiB more, the 4 MiB after the part are still a tail.
    ap = await store.append(id, r.offset, { limit: data.length, hashAhead: true });
    await push(ap, data.subarray(r.offset, 10 * MIB));
    r = await ap.finish();
    assert.equal(r.offset, 10 * MIB);
    // The tail it started from stays until the next append: a crash before the caller records 10 MiB needs it.
    const tails = async () =>
      ((await s3.send(new ListObjectsV2Command({ Bucket: ceph.bucket, Prefix: `t1/resumable/${id}/tail-` }))).Contents ?? []).map((c) => c.Key);
    assert.deepEqual(await tails(), [`t1/resumable/${id}/tail-${6 * MIB}-${10 * MIB}`, `t1/resumable/${id}/tail-${6 * MIB}-${7 * MIB + 10}`]);
    // An append that uploads parts and then is dropped (a checksum mismatch): the offset stays.
    ap = await store.append(id, 10 * MIB, { limit: data.length, hashAhead: true });
    await push(ap, randomBytes(12 * MIB));
    await new Promise((res) => setTimeout(res, 300));
    r = await ap.finish({ cutTo: 10 * MIB });
    assert.equal(r.offset, 10 * MIB);
    assert.deepEqual(await tails(), [`t1/resumable/${id}/tail-${6 * MIB}-${10 * MIB}`], 'the stale tail went');
    // The limit: bytes past it end the append with TOO_LARGE, what came before stays.
    ap = await store.append(id, 10 * MIB, { limit: data.length, hashAhead: true });
    await push(ap, Buffer.concat([data.subarray(10 * MIB), randomBytes(MIB)]));
    r = await ap.finish();
    assert.equal(r.offset, data.length);
    assert.equal((r.error as { code?: string } | null)?.code, 'TOO_LARGE');
    await assert.rejects(store.completeResumable(id, data.length + 1), { code: 'SHORT' });
    const { key, digest } = await store.completeResumable(id, data.length);
    assert.equal(digest.size, data.length);
    assert.equal(digest.crc32, crc32(data));
    assert.ok(createHash('sha256').update(await readAll(await store.read(key))).digest('hex') === createHash('sha256').update(data).digest('hex'));
    const left = await s3.send(new ListObjectsV2Command({ Bucket: ceph.bucket, Prefix: `t1/resumable/${id}/` }));
    assert.equal(left.KeyCount, 0, 'the resumable is gone');
    // Reopen (the row commit failed): the same bytes become a resumable again.
    await store.reopenResumable(id, key);
    await assert.rejects(store.read(key), { code: 'NOT_FOUND' });
    const again = await store.completeResumable(id, data.length);
    assert.equal(again.digest.crc32, crc32(data));
    await store.delete(again.key);
  });

  test('completion with parts left past the durable offset: the bytes below it are copied inside the bucket', async () => {
    const id = randomBytes(16).toString('hex');
    const data = randomBytes(8 * MIB + 5);
    await store.createResumable(id);
    let ap = await store.append(id, 0, { limit: 100 * MIB, hashAhead: false });
    await push(ap, data);
    const { offset } = await ap.finish();
    assert.equal(offset, data.length);
    // Two more parts uploaded, then refused (a checksum mismatch): radosgw still holds them.
    ap = await store.append(id, offset, { limit: 100 * MIB, hashAhead: false });
    await push(ap, randomBytes(13 * MIB));
    assert.equal((await ap.finish({ cutTo: offset })).offset, offset);
    const { key, digest } = await store.completeResumable(id, offset);
    assert.equal(digest.size, data.length);
    assert.equal(digest.crc32, crc32(data));
    assert.deepEqual(await readAll(await store.read(key)), data);
    assert.ok(!(await uploads()).includes(`t1/files/${key}`), 'no upload left on the key');
    await store.delete(key);
  });

  test('join concatenates resumables, small ones included', async () => {
    const parts = [randomBytes(6 * MIB), randomBytes(1000), randomBytes(2 * MIB)];
    const ids = parts.map(() => randomBytes(16).toString('hex'));
    for (const [i, p] of parts.entries()) {
      await store.createResumable(ids[i]!);
      const ap = await store.append(ids[i]!, 0, { limit: p.length, hashAhead: false });
      await push(ap, p);
      assert.equal((await ap.finish()).offset, p.length);
    }
    const final = randomBytes(16).toString('hex');
    await store.createResumable(final);
    await store.join(final, ids.map((id, i) => ({ id, length: parts[i]!.length })));
    const all = Buffer.concat(parts);
    const { key, digest } = await store.completeResumable(final, all.length);
    assert.equal(digest.crc32, crc32(all));
    assert.deepEqual(await readAll(await store.read(key)), all);
    for (const id of ids) await store.removeResumable(id);
    await store.removeResumable(final);
    assert.equal((await s3.send(new ListObjectsV2Command({ Bucket: ceph.bucket, Prefix: 't1/resumable/' }))).KeyCount, 0);
    assert.equal((await uploads()).filter((k) => k?.startsWith('t1/')).length, 0, 'no upload left behind');
  });

  test('radosgw stopped mid-upload: finish rejects, nothing is visible; once it is back the same store works', async () => {
    const w = store.createWriter();
    const errors: Error[] = [];
    const w2 = store.createWriter({ onError: (e) => errors.push(e) });
    await push(w2, randomBytes(9 * MIB));
    await ceph.stopRgw();
    try {
      void push(w, randomBytes(20 * MIB)).catch(() => {});
      await assert.rejects(w.finish());
      await assert.rejects(w2.finish());
      assert.equal(errors.length, 1, 'onError ran once');
    } finally {
      await ceph.startRgw();
    }
    await w.abort();
    await w2.abort();
    assert.equal(await visible(w.key), false);
    assert.ok(!(await uploads()).includes(`t1/files/${w.key}`));
    const data = randomBytes(10 * MIB);
    const w3 = store.createWriter();
    await push(w3, data);
    await w3.finish();
    await w3.publish();
    assert.deepEqual(await readAll(await store.read(w3.key)), data);
  });

  test('cache entries live in the bucket and go with their object; listKeys finds published keys', async () => {
    const w = store.createWriter();
    w.write(Buffer.from('x'));
    await w.finish();
    await w.publish();
    await store.cache.put(`${w.key}.webp`, Buffer.from('preview'));
    await store.cache.put('orphan/card.png', Buffer.from('card'));
    assert.deepEqual(await store.cache.get(`${w.key}.webp`), Buffer.from('preview'));
    assert.equal(await store.cache.get('nothing'), null);
    assert.equal(await store.cache.prune(0), 1, 'the orphan entry goes, the owned one stays');
    assert.deepEqual(await store.cache.get(`${w.key}.webp`), Buffer.from('preview'));
    const keys: string[] = [];
    for await (const batch of store.listKeys(0)) keys.push(...batch);
    assert.ok(keys.includes(w.key));
    await store.delete(w.key);
    assert.equal(await store.cache.get(`${w.key}.webp`), null);
    const data = randomBytes(3000);
    const w2 = store.createWriter();
    w2.write(data);
    await w2.finish();
    await w2.publish();
    assert.deepEqual(await store.withLocalFile(w2.key, async (p) => fs.promises.readFile(p)), data);
  });
});
