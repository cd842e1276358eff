// The largest file a plan allows, stored in an S3 bucket and read back whole: a multipart upload through Sluice into
// a throwaway Ceph radosgw (bluestore with lz4 on every blob, so 100 GiB of compressible bytes fit on a small disk),
// past the 5,000th part where parts grow from 6 to 16 MiB, then a download of the whole file through Sluice.
// Checks: the upload is accepted (201, the size and SHA-256 the client computed), the object in the bucket has the
// size and the number of parts expected, and the download's SHA-256 equals the upload's. Reports MB/s and the
// Sluice process's peak RSS for both.
//   node --import tsx bench/s3-large-object.ts [SIZE]     (default 100G, the max plan's cap)
//   env: DATABASE_URL (a fresh database is made beside it; default postgres://postgres@127.0.0.1:5432/sluice_bench)
//        REDIS_URL (redis://127.0.0.1:6379)
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import http from 'node:http';
import { HeadObjectCommand, ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import { PLANS } from '../src/plans.ts';
import { partSize } from '../src/util/s3-sizes.ts';
import { startCeph } from '../test/helpers/ceph.ts';
import { uploadMultipart } from './lib/http-client.ts';
import { environment, fixed, formatSize, mbps, MiB, printHeader, REPO_DIR, sizesFromArgs, writeResults } from './lib/report.ts';
import { asUploadReply } from './lib/sluice-api.ts';
import { closeAll, freshDatabase, SLUICE_BIN, startSluice } from './lib/targets.ts';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const SIZE = sizesFromArgs('100G')[0]!;

/**
 * Mostly zeros (lz4 shrinks them to almost nothing), but every MiB different: its index, written every 4 KiB,
 * so bytes out of place or a part repeated change the SHA-256. One buffer, rewritten per MiB: the upload client
 * copies each piece into its socket before asking for the next.
 */
function* compressibleChunks(size: number): Generator<Buffer> {
  const buf = Buffer.alloc(MiB);
  for (let i = 0, left = size; left > 0; i++, left -= MiB) {
    for (let at = 0; at < MiB; at += 4096) buf.writeUInt32LE(i, at);
    yield left >= MiB ? buf : buf.subarray(0, left);
  }
}

/** The number of parts the S3 store cuts an object of `size` into (partSize(n) each, the last one shorter). */
function partsFor(size: number): number {
  let n = 0;
  for (let left = size; left > 0; ) left -= partSize(++n);
  return n;
}

/** GETs url and returns the SHA-256 of its body with its length. */
function hashDownload(url: string): Promise<{ status: number; bytes: number; sha256: string }> {
  return new Promise((resolve, reject) => {
    http.get(url, { agent: false }, (res) => {
      const h = createHash('sha256');
      let bytes = 0;
      res.on('data', (c: Buffer) => {
        bytes += c.length;
        h.update(c);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes, sha256: h.digest('hex') }));
      res.on('error', reject);
    }).on('error', reject);
  });
}

/** The one object under `prefix`: its size, ETag and the number of parts its ETag names (`"<md5>-<parts>"`). */
async function headStored(s3: S3Client, bucket: string, prefix: string): Promise<{ size: number; etag: string; parts: number }> {
  const listed = (await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }))).Contents ?? [];
  if (listed.length !== 1) throw new Error(`expected one object under ${prefix}, found ${listed.length}`);
  const h = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: listed[0]!.Key! }));
  const etag = h.ETag ?? '';
  return { size: h.ContentLength ?? -1, etag, parts: Number(/-(\d+)"?$/.exec(etag)?.[1] ?? 1) };
}

async function main(): Promise<void> {
  const env = environment();
  printHeader('The largest object: one file of the max plan\'s cap into S3 and back, through Sluice', env, { size: formatSize(SIZE) });
  if (SIZE > PLANS.max.maxBundleBytes) throw new Error(`${formatSize(SIZE)} is past the max plan's cap`);
  const ceph = await startCeph({ backend: 'bluestore-lz4' });
  const s3 = ceph.client();
  try {
    const databaseUrl = await freshDatabase(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/sluice_bench', 's3big');
    const serverEnv = ceph.env('big');
    const sluice = await startSluice({ databaseUrl, redisUrl: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', env: serverEnv });
    const keyRun = spawnSync(process.execPath, [SLUICE_BIN, 'keys', 'create', '--plan', 'max', '--label', 's3-large'], {
      cwd: REPO_DIR, env: { ...process.env, ...serverEnv, DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' }, encoding: 'utf8',
    });
    const apiKey = keyRun.stdout.trim();
    if (keyRun.status !== 0 || !apiKey) throw new Error(`sluice keys create: ${keyRun.stderr.slice(-500)}`);

    const want = createHash('sha256');
    for (const c of compressibleChunks(SIZE)) want.update(c);
    const sha256 = want.digest('hex');

    sluice.rss.reset();
    let t = performance.now();
    const up = await uploadMultipart(`${sluice.baseUrl}/api/v1/upload`, [{ name: 'large.bin', size: SIZE, chunks: compressibleChunks }], {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    const upMs = performance.now() - t;
    const upPeak = sluice.rss.peakMiB();
    const file = asUploadReply(up.json)?.files[0];
    if (up.status !== 201 || file?.size !== SIZE) throw new Error(`upload: HTTP ${up.status} ${up.body.slice(0, 300)}`);
    console.log(`upload: ${fixed(mbps(SIZE, upMs))} MB/s, peak RSS ${fixed(upPeak)} MiB`);

    const head = await headStored(s3, ceph.bucket, 'big/files/');
    console.log(`in the bucket: ${head.size} bytes, ETag ${head.etag} (${head.parts} parts; expected ${partsFor(SIZE)})`);

    sluice.rss.reset();
    t = performance.now();
    const down = await hashDownload(`${sluice.baseUrl}/d/${String(file.id)}`);
    const downMs = performance.now() - t;
    const downPeak = sluice.rss.peakMiB();
    console.log(`download: HTTP ${down.status}, ${down.bytes} bytes, ${fixed(mbps(SIZE, downMs))} MB/s, peak RSS ${fixed(downPeak)} MiB`);
    const ok = down.status === 200 && down.bytes === SIZE && down.sha256 === sha256 && head.size === SIZE && head.parts === partsFor(SIZE);
    console.log(ok ? `OK: ${formatSize(SIZE)} in ${head.parts} parts, read back byte-identical (sha256 ${sha256})` : `FAILED: expected sha256 ${sha256}, downloaded ${down.sha256}`);
    console.log(`results: ${writeResults('s3-large-object', { env, size: SIZE, parts: head.parts, upload: { mbps: mbps(SIZE, upMs), peakMiB: upPeak }, download: { mbps: mbps(SIZE, downMs), peakMiB: downPeak }, ok })}`);
    if (!ok) process.exitCode = 1;
  } finally {
    await closeAll();
    s3.destroy();
    await ceph.stop();
  }
}

await main();
