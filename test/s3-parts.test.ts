/**
 * How the S3 store cuts an object into parts: S3 takes at most MAX_PARTS parts of at least MIN_PART
 * bytes (but the last), so the part sizes must hold the largest upload a plan allows. A 100 GiB
 * object cannot be stored on the test cluster (its OSD keeps every byte in RAM), so the sizes are
 * checked by arithmetic, and the cuts around part 5,000 and at MAX_PARTS on real parts numbered
 * there (a queue may start at any part number, as an append does). bench/s3-large-object.ts
 * stores a whole 100 GiB file through the server, on a cluster that compresses.
 */
import { after, before, describe, mock, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import {
  AbortMultipartUploadCommand, CompleteMultipartUploadCommand, CreateMultipartUploadCommand, DeleteObjectCommand,
  GetObjectCommand, ListMultipartUploadsCommand, ListPartsCommand, type S3Client,
} from '@aws-sdk/client-s3';
import { PLANS } from '../src/plans.ts';
import { loadConfig } from '../src/config.ts';
import type { BlobStore } from '../src/storage/blob-store.ts';
import { createPartPool, IDLE_RELEASE_MS } from '../src/storage/s3/part-pool.ts';
import { createPartQueue, MAX_PARTS, MIN_PART, partSize, type PartQueue } from '../src/storage/s3/parts.ts';
import { createS3Store } from '../src/storage/s3/store.ts';
import { createS3Client, isNotFound, REQUEST_TIMEOUT_MS } from '../src/storage/s3/client.ts';
import { partAddress, putPart } from '../src/storage/s3/put-part.ts';
import { isBlobError } from '../src/errors.ts';
import { cephSkip } from './helpers/ceph.ts';
import { sharedBucket, type SharedBucket } from './helpers/s3-backend.ts';

const MIB = 1024 * 1024;
/** S3's largest part. */
const MAX_PART = 5 * 1024 ** 3;

/** Pushes `bytes` of `data` (repeated) in 1 MiB chunks, waiting for drain whenever write() says so. */
async function push(q: Pick<PartQueue, 'write' | 'onDrain'>, bytes: number): Promise<void> {
  const chunk = Buffer.alloc(MIB, 7);
  for (let at = 0; at < bytes; at += MIB) {
    if (!q.write(chunk.subarray(0, Math.min(MIB, bytes - at)))) await new Promise<void>((r) => q.onDrain(r));
  }
}

describe('S3 part sizes (arithmetic)', () => {
  test('every part but the last is at least MIN_PART and at most 5 GiB, and sizes never shrink', () => {
    for (let n = 1; n <= MAX_PARTS; n++) {
      const size = partSize(n);
      assert.ok(size >= MIN_PART && size <= MAX_PART, `part ${n}: ${size}`);
      if (n > 1) assert.ok(size >= partSize(n - 1), `part ${n} (${size}) is smaller than part ${n - 1}`);
    }
  });

  test('MAX_PARTS parts hold every plan cap and the default anonymous cap', () => {
    let capacity = 0;
    for (let n = 1; n <= MAX_PARTS; n++) capacity += partSize(n);
    const caps = [...Object.values(PLANS).map((p) => [p.name, p.maxBundleBytes] as const), ['anonymous', loadConfig({}).anonMaxBundleBytes] as const];
    const largest = Math.max(...caps.map(([, c]) => c));
    assert.equal(largest, 100 * 1024 ** 3, 'the largest cap is the 100 GiB plan');
    for (const [name, cap] of caps) {
      // Parts cut as a writer cuts them: full ones, then the rest as the last.
      let parts = 0;
      for (let left = cap; left > 0; left -= partSize(parts)) parts++;
      assert.ok(parts <= MAX_PARTS, `${name}: ${cap} bytes need ${parts} parts`);
    }
    assert.ok(capacity >= largest, `${capacity} bytes in ${MAX_PARTS} parts`);
  });
});

describe('S3 part cuts on radosgw', { skip: cephSkip('S3 part cuts on radosgw (test/s3-parts.test.ts)') }, () => {
  let bucket: SharedBucket;
  let s3: S3Client;
  let store: BlobStore;
  const prefix = `parts-${randomBytes(4).toString('hex')}`;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-parts-'));

  before(async () => {
    bucket = await sharedBucket();
    s3 = bucket.client();
    store = await createS3Store({ location: loadConfig(bucket.env(prefix)).s3!, tmpDir: tmp, check: false });
  });
  after(async () => {
    await store?.close();
    s3?.destroy();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  /** A queue on a fresh multipart upload whose first cut part is `firstPart`; `garbage` counts what it reports as such. */
  async function queueAt(firstPart: number, budget = 64 * MIB) {
    const Key = `${prefix}/q-${randomBytes(6).toString('hex')}`;
    const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket.bucket, Key }));
    const errors: Error[] = [];
    const garbage = { bytes: 0 };
    const queue = createPartQueue({
      client: s3, bucket: bucket.bucket, key: Key, uploadId: () => Promise.resolve(UploadId!), firstPart, deadlineMs: REQUEST_TIMEOUT_MS,
      pool: createPartPool(budget), onError: (err) => errors.push(err), garbage: (n) => (garbage.bytes += n),
    });
    const sizes = async () =>
      ((await s3.send(new ListPartsCommand({ Bucket: bucket.bucket, Key, UploadId }))).Parts ?? []).map((p) => [p.PartNumber, p.Size]);
    return { Key, UploadId: UploadId!, queue, errors, sizes, garbage };
  }

  test('from part 5,001 on, parts are 16 MiB, and S3 completes an object of such parts', async () => {
    const { Key, UploadId, queue, errors, sizes } = await queueAt(4999);
    await push(queue, 31 * MIB);
    queue.flush();
    const parts = await queue.settle();
    assert.deepEqual(errors, []);
    const want = [[4999, 6 * MIB], [5000, 6 * MIB], [5001, 16 * MIB], [5002, 3 * MIB]];
    assert.deepEqual(parts.map((p) => [p.PartNumber, p.size]), want);
    assert.deepEqual(await sizes(), want, 'the bucket holds the parts as cut');
    await s3.send(new CompleteMultipartUploadCommand({
      Bucket: bucket.bucket, Key, UploadId, MultipartUpload: { Parts: parts.map((p) => ({ PartNumber: p.PartNumber, ETag: p.ETag })) },
    }));
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket.bucket, Key, Range: 'bytes=0-0' }));
    assert.equal(got.ContentRange, `bytes 0-0/${31 * MIB}`);
    await got.Body!.transformToByteArray();
    await s3.send(new DeleteObjectCommand({ Bucket: bucket.bucket, Key }));
  });

  test('once a part upload failed, a part cut later goes back to the pool, and the pool empties', async () => {
    let released = 0;
    const pool = createPartPool(64 * MIB, () => released++);
    const queue = createPartQueue({
      client: s3, bucket: bucket.bucket, key: `${prefix}/gone`, uploadId: () => Promise.resolve('no-such-upload'), firstPart: 1, deadlineMs: REQUEST_TIMEOUT_MS,
      pool, onError: () => {},
    });
    queue.write(Buffer.alloc(6 * MIB + 1, 1)); // one full part goes up (and fails), one byte stays in the next
    await assert.rejects(queue.settle());
    // The pool lets its spares go once idle for IDLE_RELEASE_MS: the clock is mocked from here on only
    // (nothing below waits on the bucket).
    mock.timers.enable({ apis: ['setTimeout', 'Date'] });
    try {
      queue.flush();
      await assert.rejects(queue.settle());
      queue.abort();
      mock.timers.tick(IDLE_RELEASE_MS);
    } finally {
      mock.timers.reset();
    }
    assert.equal(released, 1, 'no buffer is left out: the pool let its spares go');
  });

  test('only the copies a queue held for want of a part buffer are reported as garbage, not the chunks it was given', async () => {
    const paced = await queueAt(1);
    await push(paced.queue, 20 * MIB);
    paced.queue.flush();
    assert.equal((await paced.queue.settle()).reduce((n, p) => n + p.size, 0), 20 * MIB);
    assert.equal(paced.garbage.bytes, 0, 'a writer that waits for drain never makes the queue hold a copy');
    await s3.send(new AbortMultipartUploadCommand({ Bucket: bucket.bucket, Key: paced.Key, UploadId: paced.UploadId }));

    // Written all at once into a pool with room for two parts: what finds no buffer is held, then absorbed.
    const rushed = await queueAt(1, 16 * MIB);
    const chunk = Buffer.alloc(MIB, 3);
    for (let i = 0; i < 20; i++) rushed.queue.write(chunk);
    assert.equal(rushed.garbage.bytes, 0, 'nothing is reported while the copies are still held');
    rushed.queue.flush();
    assert.equal((await rushed.queue.settle()).reduce((n, p) => n + p.size, 0), 20 * MIB);
    assert.deepEqual(rushed.errors, []);
    assert.ok(rushed.garbage.bytes > 0 && rushed.garbage.bytes <= 20 * MIB - 12 * MIB, `${rushed.garbage.bytes} bytes reported`);
    await s3.send(new AbortMultipartUploadCommand({ Bucket: bucket.bucket, Key: rushed.Key, UploadId: rushed.UploadId }));
  });

  test('a part past MAX_PARTS is refused: the queue fails, naming the limit', async () => {
    const { Key, UploadId, queue, errors, sizes } = await queueAt(MAX_PARTS - 1);
    await push(queue, 33 * MIB);
    queue.flush();
    await assert.rejects(queue.settle(), /at most 10000 parts/);
    assert.match(String(errors[0]), /at most 10000 parts/);
    const held = await sizes();
    assert.ok(held.every(([n, size]) => n! <= MAX_PARTS && size === 16 * MIB), JSON.stringify(held));
    await s3.send(new AbortMultipartUploadCommand({ Bucket: bucket.bucket, Key, UploadId }));
  });

  test('a resumable fed in pieces of 5.5 MiB holds full parts only, the rest as its tail', async () => {
    const id = randomBytes(16).toString('hex');
    const piece = 5.5 * MIB;
    const data = randomBytes(4 * piece);
    await store.createResumable(id);
    let offset = 0;
    for (let i = 0; i < 4; i++) {
      const ap = await store.append(id, offset, { limit: data.length, hashAhead: false });
      if (!ap.write(data.subarray(offset, offset + piece))) await new Promise<void>((r) => ap.onDrain(r));
      const r = await ap.finish();
      assert.equal(r.error, null);
      offset = r.offset;
    }
    assert.equal(offset, data.length);
    const ups = await s3.send(new ListMultipartUploadsCommand({ Bucket: bucket.bucket, Prefix: `${prefix}/files/` }));
    assert.equal(ups.Uploads?.length, 1, 'the resumable\'s multipart upload');
    const up = ups.Uploads[0]!;
    const parts = (await s3.send(new ListPartsCommand({ Bucket: bucket.bucket, Key: up.Key, UploadId: up.UploadId }))).Parts ?? [];
    assert.deepEqual(parts.map((p) => p.Size), [6 * MIB, 6 * MIB, 6 * MIB], 'appends of 5.5 MiB make 6 MiB parts, not parts of 5.5 MiB');
    const { key, digest } = await store.completeResumable(id, data.length);
    assert.equal(digest.size, data.length);
    const r = await s3.send(new GetObjectCommand({ Bucket: bucket.bucket, Key: `${prefix}/files/${key}` }));
    assert.ok(Buffer.from(await r.Body!.transformToByteArray()).equals(data));
    await store.delete(key);
  });
});

/**
 * A proxy in front of radosgw that plays a failing store for part PUTs: each attempt's
 * x-amz-content-sha256 and body size are recorded, and `fail` decides what the attempt meets.
 */
async function partProxy(endpoint: string) {
  const target = new URL(endpoint);
  const p = {
    endpoint: '',
    attempts: [] as Array<{ sha: string; bytes: number }>,
    fail: (_attempt: number): 'reset' | '503' | 'hang' | null => null,
    close: () => server.close(),
  };
  const server = http.createServer((req, res) => {
    const isPart = req.method === 'PUT' && /[?&]partNumber=/.test(req.url ?? '');
    if (!isPart) {
      req.pipe(http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode!, r.headers);
        r.pipe(res);
      }));
      return;
    }
    const seen = { sha: String(req.headers['x-amz-content-sha256']), bytes: 0 };
    p.attempts.push(seen);
    const mode = p.fail(p.attempts.length);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      seen.bytes += c.length;
      chunks.push(c);
    });
    req.on('end', () => {
      if (mode === 'reset') return void req.socket.destroy();
      if (mode === '503') return void res.writeHead(503, { 'content-type': 'application/xml' }).end('<Error><Code>SlowDown</Code></Error>');
      if (mode === 'hang') return;
      const up = http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode!, r.headers);
        r.pipe(res);
      });
      up.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  p.endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return p;
}

describe('a part on its own request (put-part.ts), on radosgw', { skip: cephSkip('part uploads on radosgw (test/s3-parts.test.ts)') }, () => {
  let bucket: SharedBucket;
  let s3: S3Client;
  let proxy: Awaited<ReturnType<typeof partProxy>>;
  let client: S3Client;
  const Key = `putpart-${randomBytes(4).toString('hex')}`;
  let UploadId: string;

  before(async () => {
    bucket = await sharedBucket();
    s3 = bucket.client();
    proxy = await partProxy(bucket.endpoint);
    client = createS3Client({ ...loadConfig(bucket.env('')).s3!, endpoint: proxy.endpoint });
    UploadId = (await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket.bucket, Key }))).UploadId!;
  });
  after(async () => {
    await s3?.send(new AbortMultipartUploadCommand({ Bucket: bucket.bucket, Key, UploadId })).catch(() => {});
    proxy?.close();
    client?.destroy();
    s3?.destroy();
  });

  test('over http the payload is signed; a reset attempt is sent again whole, and the parts complete the object', async () => {
    const to = await partAddress(client, bucket.bucket, Key, UploadId);
    const one = randomBytes(6 * MIB);
    const two = randomBytes(1000);
    proxy.attempts = [];
    proxy.fail = (n) => (n === 1 ? 'reset' : null);
    const etags = [await putPart(client, to, 1, one, REQUEST_TIMEOUT_MS), await putPart(client, to, 2, two, REQUEST_TIMEOUT_MS)];
    const sha = createHash('sha256').update(one).digest('hex');
    assert.deepEqual(proxy.attempts, [{ sha, bytes: one.length }, { sha, bytes: one.length }, { sha: createHash('sha256').update(two).digest('hex'), bytes: 1000 }]);
    await s3.send(new CompleteMultipartUploadCommand({
      Bucket: bucket.bucket, Key, UploadId, MultipartUpload: { Parts: etags.map((ETag, i) => ({ PartNumber: i + 1, ETag })) },
    }));
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket.bucket, Key }));
    assert.ok(Buffer.from(await got.Body!.transformToByteArray()).equals(Buffer.concat([one, two])));
    await s3.send(new DeleteObjectCommand({ Bucket: bucket.bucket, Key }));
    UploadId = (await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket.bucket, Key }))).UploadId!;
  });

  test('5xx is UNAVAILABLE after three attempts, silence at the deadline; the caller\'s abort is its own; 404 is NoSuchUpload', async () => {
    const to = await partAddress(client, bucket.bucket, Key, UploadId);
    const body = randomBytes(1000);
    proxy.attempts = [];
    proxy.fail = () => '503';
    await assert.rejects(putPart(client, to, 1, body, REQUEST_TIMEOUT_MS), (err) => isBlobError(err, 'UNAVAILABLE'));
    assert.equal(proxy.attempts.length, 3);

    proxy.fail = () => 'hang';
    await assert.rejects(putPart(client, to, 1, body, 1000), (err) => isBlobError(err, 'UNAVAILABLE') && /within 1 s/.test((err as Error).message));

    const ac = new AbortController();
    proxy.attempts = [];
    const sent = putPart(client, to, 1, body, REQUEST_TIMEOUT_MS, ac.signal);
    while (proxy.attempts.length === 0) await new Promise((r) => setImmediate(r));
    ac.abort();
    await assert.rejects(sent, (err) => (err as Error).name === 'AbortError');

    proxy.fail = () => null;
    const gone = await partAddress(client, bucket.bucket, Key, 'no-such-upload');
    await assert.rejects(putPart(client, gone, 1, body, REQUEST_TIMEOUT_MS), (err) => isNotFound(err));
  });
});
