// busboy's multipart parsing alone, in this process: 1 GiB of one file part written in 512 KiB chunks (uWS's largest)
// through busboy, with streamsearch's own boundary scan and with Sluice's (src/ingest/fast-search.ts: Node's search, or
// four interleaved Horspool lanes on random-like bytes).
// Alternates the two per run; prints milliseconds per GiB.
//   node --import tsx bench/parse.ts        env: BENCH_RUNS (3)
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import busboy from 'busboy';
import { fastPush } from '../src/ingest/fast-search.ts';
import { installFastSearch, originalPush } from '../src/ingest/fast-paths.ts';
import { envInt } from './lib/report.ts';

if (!installFastSearch()) throw new Error('streamsearch is not the version fast-search.ts patches');
const proto = (createRequire(createRequire(import.meta.url).resolve('busboy'))('streamsearch') as { prototype: { push: unknown } }).prototype;
const boundary = '------------------------c2a8f0b91e7d4a36'; // curl's form
const CHUNK = 512 * 1024;
const data = randomBytes(1 << 20);
const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="files[]"; filename="a.bin"\r\n\r\n`);

async function parseGiB(): Promise<number> {
  const started = performance.now();
  await new Promise<void>((resolve, reject) => {
    const bb = busboy({ headers: { 'content-type': `multipart/form-data; boundary=${boundary}` } });
    bb.on('file', (_name, stream) => stream.on('data', () => {}));
    bb.on('close', resolve);
    bb.on('error', reject);
    bb.write(head);
    for (let i = 0; i < 1024; i++) for (let at = 0; at < data.length; at += CHUNK) bb.write(data.subarray(at, at + CHUNK));
    bb.end(Buffer.from(`\r\n--${boundary}--\r\n`));
  });
  return performance.now() - started;
}

const runs = envInt('BENCH_RUNS', 3);
for (let r = 1; r <= runs; r++) {
  proto.push = originalPush;
  const own = await parseGiB();
  proto.push = fastPush;
  const fast = await parseGiB();
  console.log(`run ${r}: streamsearch ${own.toFixed(0)} ms/GiB, Sluice's scan ${fast.toFixed(0)} ms/GiB (${(own / fast).toFixed(2)}x)`);
}
