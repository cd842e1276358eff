// Memory held by downloads whose clients never read: READERS connections, spread over ADDRESSES
// client addresses (127.0.0.1, .2, …), GET one stored file of SIZE and stop reading. Reports the
// server's RSS before (after a warm-up of 8 downloads that read), at its peak while they wait, and
// after every connection is closed; and how many the server closed for stalling (its own metric and
// what the clients saw) once the stall timeout passed. Checks the documented bound: growth within
// the 64 MiB response budget + 32 MiB, and back within 16 MiB of the start after close.
//   node --import tsx bench/slow-readers.ts
//   env: BENCH_READERS (2400) BENCH_ADDRESSES (8) BENCH_SIZE (100M) BENCH_WAIT_S (10) BENCH_STALL_S (20)
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { closeAll, startSluice } from './lib/targets.ts';
import { sampleProc } from './lib/proc.ts';
import { uploadMultipart } from './lib/http-client.ts';
import { asUploadReply } from './lib/sluice-api.ts';
import { envInt, formatSize, parseSize } from './lib/report.ts';

const readers = envInt('BENCH_READERS', 2400);
const addresses = envInt('BENCH_ADDRESSES', 8);
const size = parseSize(process.env.BENCH_SIZE ?? '100M');
const waitS = envInt('BENCH_WAIT_S', 10);
const stallS = envInt('BENCH_STALL_S', 20);
const BUDGET_MIB = 64;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Reads a whole response from a raw socket (the warm-up's downloads). */
const download = (port: number, path: string): Promise<number> =>
  new Promise((resolve, reject) => {
    let bytes = 0;
    const s = net.connect(port, '127.0.0.1');
    s.on('data', (c: Buffer) => {
      bytes += c.length;
      if (bytes >= size) s.destroy();
    });
    s.on('error', reject);
    s.on('close', () => resolve(bytes));
    s.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
  });

async function stalledCount(baseUrl: string): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('sluice_stalled_responses_closed_total'));
  return Number(line?.split(' ')[1] ?? NaN);
}

async function main(): Promise<void> {
  const target = await startSluice({ env: { DOWNLOAD_STALL_TIMEOUT_SECONDS: String(stallS) } });
  try {
    const up = await uploadMultipart(`${target.baseUrl}/api/v1/upload`, [{ name: 'big.bin', size }]);
    const id = asUploadReply(up.json)?.files[0]?.id;
    if (id === undefined) throw new Error(`upload failed: ${up.status} ${up.body}`);
    const port = Number(new URL(target.baseUrl).port);
    // A server that has served downloads: its spare read buffers exist before the crowd arrives.
    await Promise.all(Array.from({ length: 8 }, () => download(port, `/d/${id}`)));
    await sleep(6000);
    // The server process alone: its embedded database's processes share pages that every backend counts.
    const rss = sampleProc(target.proc.pid, 100, false);
    const before = rss.currentMiB();
    const stalledBefore = await stalledCount(target.baseUrl);
    rss.reset();

    const socks: net.Socket[] = [];
    const opened = Date.now();
    for (let i = 0; i < readers; i++) {
      const s = net.connect({ port, host: '127.0.0.1', localAddress: `127.0.0.${1 + (i % addresses)}` });
      s.on('error', () => {});
      s.pause(); // never read: the server's sends stop once the socket buffers are full
      s.write(`GET /d/${id} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
      socks.push(s);
    }
    await sleep(waitS * 1000);
    const waiting = rss.currentMiB();
    console.log(`slow readers: ${readers} x GET ${formatSize(size)} from ${addresses} addresses, never read; stall timeout ${stallS} s`);

    // A client that does not read cannot see the close: once the stall timeout has passed for
    // every response, read, and count the connections that end short of the body.
    let stalled = 0;
    const stallDeadline = Date.now() + (stallS + 60) * 1000;
    for (;;) {
      await sleep(1000);
      stalled = (await stalledCount(target.baseUrl)) - stalledBefore;
      if (stalled >= readers || Date.now() > stallDeadline) break;
    }
    const closedAfter = (Date.now() - opened) / 1000;
    const peak = rss.peakMiB();
    let closedSeen = 0;
    await Promise.all(
      socks.map(
        (s) =>
          new Promise<void>((resolve) => {
            let bytes = 0;
            let open = true;
            s.on('data', (c: Buffer) => (bytes += c.length));
            const timer = setTimeout(() => {
              open = false;
              resolve();
            }, 15_000);
            s.on('close', () => {
              if (open && bytes < size) closedSeen++;
              clearTimeout(timer);
              resolve();
            });
            s.resume();
          }),
      ),
    );
    for (const s of socks) s.destroy();
    // Closed connections, their timers and the buffers let go are collected within seconds.
    await sleep(8000);
    const after = rss.currentMiB();
    if (process.env.BENCH_DEBUG) {
      for (let i = 0; i < 4; i++) {
        await sleep(4000);
        const st = readFileSync(`/proc/${target.proc.pid}/smaps_rollup`, 'utf8').split('\n').filter((l) => /^(Rss|Anonymous)/.test(l)).join(' ');
        const m = (await (await fetch(`${target.baseUrl}/metrics`)).text()).split('\n').filter((l) => /^nodejs_(heap_size_used_bytes|external_memory_bytes|heap_size_total_bytes) /.test(l)).join(' ');
        console.log(`  +${12 + 4 * i} s: ${rss.currentMiB().toFixed(0)} MiB ${st.replace(/\s+/g, ' ')} ${m}`);
      }
    }
    rss.stop();
    const growth = peak - before;
    console.log(`server RSS: before ${before.toFixed(0)} MiB, after ${waitS} s ${waiting.toFixed(0)} MiB, peak ${peak.toFixed(0)} MiB (+${growth.toFixed(0)}), after close ${after.toFixed(0)} MiB (${after - before >= 0 ? '+' : ''}${(after - before).toFixed(0)})`);
    console.log(`closed by the server short of the body: ${closedSeen} of ${readers}; sluice_stalled_responses_closed_total +${stalled}, all of them ${closedAfter.toFixed(0)} s after the first request`);
    const okPeak = growth <= BUDGET_MIB + 32;
    const okAfter = after - before <= 16;
    console.log(`peak growth within ${BUDGET_MIB} + 32 MiB: ${okPeak ? 'yes' : 'NO'}; back within 16 MiB after close: ${okAfter ? 'yes' : 'NO'}; every stalled response counted: ${stalled === closedSeen ? 'yes' : 'NO'}`);
    if (!okPeak || !okAfter) process.exitCode = 1;
  } finally {
    await target.close();
    await closeAll();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
