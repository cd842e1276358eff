// Upload into Ceph radosgw (loopback, a throwaway memstore cluster from test/helpers/ceph.ts) through the S3
// blob store's writer, against the AWS SDK's own lib-storage Upload of the same bytes straight to the bucket
// (the ceiling of that store here), then reads back through the store against a direct GetObject. Each case
// runs in this process, alternating, so both see the same cluster; peak RSS is this process's.
// `node --import tsx bench/s3-store.ts [SIZES]` (default 1G), BENCH_RUNS (default 3). Not part of run.ts.
import { Readable } from 'node:stream';
import { DeleteObjectCommand, GetObjectCommand } from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { loadConfig } from '../src/config.ts';
import { createS3Store } from '../src/storage/s3/store.ts';
import { startCeph } from '../test/helpers/ceph.ts';
import { envInt, environment, formatSize, median, mbps, sizesFromArgs } from './lib/report.ts';

const CHUNK = 64 * 1024;
const sizes = sizesFromArgs('1G');
const runs = envInt('BENCH_RUNS', 3);
const env = environment();
console.log(`node ${env.node}, ${env.cpu}`);

// One random 8 MiB block, sent over and over: the source costs nothing, and no part is all zeros.
const block = Buffer.alloc(8 * 1024 * 1024);
for (let i = 0; i < block.length; i += 4) block.writeUInt32LE((Math.random() * 2 ** 32) >>> 0, i);
function* chunks(size: number): Generator<Buffer> {
  for (let at = 0; at < size; at += CHUNK) {
    const off = at % block.length;
    yield block.subarray(off, Math.min(off + CHUNK, block.length, off + size - at));
  }
}

let peak = 0;
const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 50);
async function timed(fn: () => Promise<void>): Promise<{ ms: number; rssMiB: number }> {
  global.gc?.();
  peak = process.memoryUsage.rss();
  const t = performance.now();
  await fn();
  return { ms: performance.now() - t, rssMiB: Math.round(peak / 1048576) };
}

const ceph = await startCeph();
const s3 = ceph.client();
const store = await createS3Store({ location: loadConfig(ceph.env('bench')).s3!, tmpDir: '/tmp' });
const rows: string[] = [];
try {
  for (const size of sizes) {
    const res: Record<string, { mbps: number; rss: number }[]> = { store: [], 'lib-storage': [], 'store read': [], GetObject: [] };
    for (let i = 0; i < runs; i++) {
      let key = '';
      const a = await timed(async () => {
        const w = store.createWriter();
        key = w.key;
        for (const c of chunks(size)) {
          if (!w.write(c, true)) await new Promise<void>((r) => w.onDrain(r));
        }
        await w.finish();
        await w.publish();
      });
      res.store!.push({ mbps: mbps(size, a.ms), rss: a.rssMiB });
      const r = await timed(async () => {
        for await (const _ of await store.read(key));
      });
      res['store read']!.push({ mbps: mbps(size, r.ms), rss: r.rssMiB });
      await store.delete(key);
      const b = await timed(async () => {
        await new Upload({ client: s3, params: { Bucket: ceph.bucket, Key: 'direct', Body: Readable.from(chunks(size)) } }).done();
      });
      res['lib-storage']!.push({ mbps: mbps(size, b.ms), rss: b.rssMiB });
      const g = await timed(async () => {
        const o = await s3.send(new GetObjectCommand({ Bucket: ceph.bucket, Key: 'direct' }));
        for await (const _ of o.Body as Readable);
      });
      res.GetObject!.push({ mbps: mbps(size, g.ms), rss: g.rssMiB });
      await s3.send(new DeleteObjectCommand({ Bucket: ceph.bucket, Key: 'direct' }));
    }
    const med = (k: string) => median(res[k]!.map((x) => x.mbps));
    const rss = (k: string) => Math.max(...res[k]!.map((x) => x.rss));
    for (const k of Object.keys(res)) {
      rows.push(`${formatSize(size).padEnd(6)} ${k.padEnd(12)} ${med(k).toFixed(0).padStart(6)} MB/s  peak RSS ${rss(k)} MiB  runs ${res[k]!.map((x) => x.mbps.toFixed(0)).join(' ')}`);
    }
    rows.push(`${formatSize(size).padEnd(6)} upload store/lib-storage ${(med('store') / med('lib-storage')).toFixed(2)}x, read store/GetObject ${(med('store read') / med('GetObject')).toFixed(2)}x`);
  }
} finally {
  clearInterval(sampler);
  await store.close();
  s3.destroy();
  await ceph.stop();
}
console.log(rows.join('\n'));
