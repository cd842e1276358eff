// Memory of S3 uploads: N concurrent uploads of SIZE each through the S3 store's writer into a throwaway Ceph
// radosgw (memstore), fed 64 KiB chunks with backpressure as a socket would. Prints throughput and this process's
// RSS before and at peak (sampled every 20 ms); run it once per case, as a fresh process.
// `node --expose-gc --import tsx bench/s3-memory.ts [N=8] [SIZE_MIB=256]`. Not part of run.ts.
import { loadConfig } from '../src/config.ts';
import { createS3Store } from '../src/storage/s3/store.ts';
import { startCeph } from '../test/helpers/ceph.ts';

const n = Number(process.argv[2] ?? 8);
const size = Number(process.argv[3] ?? 256) * 1048576;
const chunk = Buffer.alloc(64 * 1024, 7);
const ceph = await startCeph();
const store = await createS3Store({ location: loadConfig(ceph.env('mem')).s3!, tmpDir: '/tmp' });
global.gc?.();
const base = process.memoryUsage.rss();
let peak = base;
const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 20);
const t = performance.now();
try {
  await Promise.all(
    Array.from({ length: n }, async () => {
      const w = store.createWriter();
      for (let at = 0; at < size; at += chunk.length) {
        if (!w.write(chunk, true)) await new Promise<void>((r) => w.onDrain(r));
      }
      await w.finish();
      await w.publish();
      await store.delete(w.key);
    }),
  );
  const s = (performance.now() - t) / 1000;
  const mib = (b: number) => (b / 1048576).toFixed(0);
  console.log(`${n} x ${mib(size)} MiB: ${((n * size) / 1e6 / s).toFixed(0)} MB/s, RSS ${mib(base)} MiB before, ${mib(peak)} MiB at peak (+${mib(peak - base)})`);
} finally {
  clearInterval(sampler);
  await store.close();
  await ceph.stop();
}
