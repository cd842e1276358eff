import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import busboy from 'busboy';
import { fastPush } from '../src/ingest/fast-search.ts';
import { findNeedle, skipTable } from '../src/ingest/needle-search.ts';
import { installFastSearch, originalPush } from '../src/ingest/fast-paths.ts';

type Cb = (isMatch: boolean, data: Buffer | undefined, start: number, end: number, isSafeData: boolean) => void;
interface Search {
  push(chunk: Buffer, pos?: number): number;
}
const require = createRequire(createRequire(import.meta.url).resolve('busboy'));
const StreamSearch = require('streamsearch') as new (needle: Buffer, cb: Cb) => Search;

/** Every callback as plain values: the bytes it hands over (copied at once), and its flags. */
function record(push: typeof fastPush, needle: Buffer, chunks: Buffer[]): string[] {
  const out: string[] = [];
  const s = new StreamSearch(needle, (isMatch, data, start, end, isSafeData) => {
    out.push(`${isMatch ? 'M' : '-'} ${isSafeData ? 's' : 'u'} ${data ? data.subarray(start, end).toString('hex') : 'undefined'}`);
  });
  for (const c of chunks) out.push(`push ${push.call(s as never, c)}`);
  return out;
}

/** `data` cut at random points, some pieces shorter than the needle. */
function pieces(data: Buffer, rnd: () => number): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < data.length; ) {
    const n = Math.min(data.length - at, 1 + Math.floor(rnd() * (rnd() < 0.3 ? 8 : 400)));
    out.push(data.subarray(at, at + n));
    at += n;
  }
  return out;
}

describe('fast boundary search (streamsearch with a native scan)', () => {
  test('is installed into the streamsearch busboy uses', () => {
    assert.equal(installFastSearch(), true);
    assert.ok(originalPush, 'the original is kept');
    assert.equal((StreamSearch as unknown as { prototype: { push: unknown } }).prototype.push, fastPush);
  });

  test('hands over exactly what streamsearch does, callback for callback, for any way the bytes arrive', () => {
    installFastSearch();
    let seed = 12345;
    const rnd = (): number => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x80000000);
    for (let round = 0; round < 400; round++) {
      // A multipart-like needle, or a tiny one over a small alphabet (many partial matches).
      const needle = round % 3 === 0 ? Buffer.from('aab') : Buffer.from(`\r\n--${randomBytes(6).toString('hex')}`);
      const parts: Buffer[] = [];
      for (let i = 0; i < 12; i++) {
        const kind = rnd();
        if (kind < 0.3) parts.push(needle);
        else if (kind < 0.5) parts.push(needle.subarray(0, 1 + Math.floor(rnd() * (needle.length - 1)))); // a near miss
        else if (round % 3 === 0) parts.push(Buffer.from(Array.from({ length: Math.floor(rnd() * 20) }, () => 'ab'[Math.floor(rnd() * 2)]).join('')));
        else parts.push(randomBytes(Math.floor(rnd() * 3000)));
      }
      const data = Buffer.concat(parts);
      const chunks = pieces(data, rnd);
      assert.deepEqual(record(fastPush, needle, chunks), record(originalPush!, needle, chunks), `round ${round}`);
    }
  });

  test('findNeedle finds what Buffer#indexOf finds, on random, text and crafted bytes', () => {
    let seed = 777;
    const rnd = (): number => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x80000000);
    const text = Buffer.from('the quick brown fox jumps over the lazy dog, 0123456789abcdef-\n'.repeat(2000));
    for (let round = 0; round < 600; round++) {
      const len = [8, 9, 20, 44, 70, 255, 256, 300][round % 8]!;
      const needle = Buffer.concat([Buffer.from('\r\n--'), randomBytes(len)]).subarray(0, len);
      needle[0] = 13;
      const size = 1 + Math.floor(rnd() * (rnd() < 0.2 ? 5000 : 300_000));
      let hay: Buffer;
      const kind = round % 4;
      if (kind === 0) hay = randomBytes(size);
      else if (kind === 1) hay = Buffer.from(text.subarray(0, size));
      else if (kind === 2) {
        // Crafted: every window a near miss (the needle with its first byte changed), CRs throughout.
        const miss = Buffer.from(needle);
        miss[0] = 0x0d ^ 1;
        hay = Buffer.alloc(size);
        for (let at = 0; at < size; at += miss.length) miss.copy(hay, at);
        for (let at = 0; at < size; at += 97) hay[at] = 13;
      } else hay = Buffer.concat([randomBytes(size >> 1), Buffer.from(text.subarray(0, size >> 1))]);
      // Needles planted anywhere, including across the lanes' borders and at the very end.
      const planted = Math.floor(rnd() * 4);
      for (let i = 0; i < planted && hay.length >= needle.length; i++) {
        const at = i === 0 && rnd() < 0.3 ? hay.length - needle.length : Math.floor(rnd() * (hay.length - needle.length + 1));
        needle.copy(hay, at);
      }
      const from = rnd() < 0.5 ? 0 : Math.floor(rnd() * hay.length);
      assert.equal(findNeedle(hay, needle, skipTable(needle), from), hay.indexOf(needle, from), `round ${round}`);
    }
  });

  test('busboy still parses bodies cut anywhere, delimiters split across chunks', async () => {
    installFastSearch();
    const boundary = 'xYz0123456789';
    const files = [randomBytes(70_000), Buffer.from(`almost\r\n--${boundary.slice(0, 5)}`), randomBytes(3), Buffer.alloc(0)];
    const body = Buffer.concat([
      ...files.map((f, i) => Buffer.concat([
        Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="files[]"; filename="f${i}"\r\n\r\n`), f, Buffer.from('\r\n'),
      ])),
      Buffer.from(`--${boundary}--\r\n`),
    ]);
    for (const size of [1, 7, 13, 64, 1000, 65536]) {
      const got = await new Promise<Buffer[]>((resolve, reject) => {
        const out: Buffer[] = [];
        const bb = busboy({ headers: { 'content-type': `multipart/form-data; boundary=${boundary}` } });
        bb.on('file', (_name, stream) => {
          const bufs: Buffer[] = [];
          stream.on('data', (d: Buffer) => bufs.push(Buffer.from(d)));
          stream.on('end', () => out.push(Buffer.concat(bufs)));
        });
        bb.on('close', () => resolve(out));
        bb.on('error', reject);
        for (let at = 0; at < body.length; at += size) bb.write(body.subarray(at, at + size));
        bb.end();
      });
      assert.deepEqual(got.map((b) => b.toString('hex')), files.map((b) => b.toString('hex')), `chunks of ${size}`);
    }
  });
});
