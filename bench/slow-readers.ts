// Memory held by downloads whose clients never read: READERS connections GET one stored file of SIZE
// and stop reading. Reports the server's RSS before, at its peak while they wait, after WAIT_S
// seconds, and how many the server closed short of the body once the stall timeout
// (DOWNLOAD_STALL_TIMEOUT_SECONDS) passed.
//   node --import tsx bench/slow-readers.ts     env: BENCH_READERS (500) BENCH_SIZE (100M) BENCH_WAIT_S (10)
import net from 'node:net';
import { closeAll, startSluice } from './lib/targets.ts';
import { uploadMultipart } from './lib/http-client.ts';
import { asUploadReply } from './lib/sluice-api.ts';
import { envInt, formatSize, parseSize } from './lib/report.ts';

const readers = envInt('BENCH_READERS', 500);
const size = parseSize(process.env.BENCH_SIZE ?? '100M');
const waitS = envInt('BENCH_WAIT_S', 10);
const stallS = Number(process.env.DOWNLOAD_STALL_TIMEOUT_SECONDS ?? 60);

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  const target = await startSluice();
  try {
    const up = await uploadMultipart(`${target.baseUrl}/api/v1/upload`, [{ name: 'big.bin', size }]);
    const id = asUploadReply(up.json)?.files[0]?.id;
    if (id === undefined) throw new Error(`upload failed: ${up.status} ${up.body}`);
    const { port } = new URL(target.baseUrl);
    await sleep(1000);
    const before = target.rss.currentMiB();
    target.rss.reset();
    const socks: net.Socket[] = [];
    let closedSeen = 0;
    for (let i = 0; i < readers; i++) {
      const s = net.connect(Number(port), '127.0.0.1');
      s.on('error', () => {});
      s.pause(); // never read: the server's sends stop once the socket buffers are full
      s.write(`GET /d/${id} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
      socks.push(s);
    }
    await sleep(waitS * 1000);
    const peak = target.rss.peakMiB();
    const after = target.rss.currentMiB();
    console.log(`slow readers: ${readers} x GET ${formatSize(size)}, never read; stall timeout ${stallS} s`);
    console.log(`server RSS: before ${before.toFixed(0)} MiB, peak ${peak.toFixed(0)} MiB, after ${waitS} s ${after.toFixed(0)} MiB`);
    // A client that does not read cannot see the close: read now, and count the connections that end.
    await sleep(Math.max(0, (stallS + 2 - waitS) * 1000));
    await Promise.all(
      socks.map(
        (s) =>
          new Promise<void>((resolve) => {
            let bytes = 0;
            s.on('data', (c: Buffer) => (bytes += c.length));
            const timer = setTimeout(() => resolve(), 15_000);
            s.on('close', () => {
              if (bytes < size) closedSeen++;
              clearTimeout(timer);
              resolve();
            });
            s.resume();
          }),
      ),
    );
    console.log(`closed by the server short of the body: ${closedSeen} of ${readers}`);
    for (const s of socks) s.destroy();
  } finally {
    await target.close();
    await closeAll();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
