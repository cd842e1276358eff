// One resumable download into a part file: what is already there is asked for no more (Range), a
// broken connection is tried again from where it broke, and the result must be exactly `size` bytes.
import fs from 'node:fs';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ClientFailure, EXIT, failureOf, unreachable } from './failure.ts';
import type { Interruption } from './interrupt.ts';

const RETRY_DELAYS = [1000, 3000, 5000, 10_000, 20_000];
/** A connection that brings no byte for this long is dropped and tried again (a dead link never errors). */
const IDLE_MS = 60_000;

export interface Fetch {
  readonly url: string;
  readonly part: string;
  readonly size: number;
  readonly headers: Record<string, string>;
  /** Sent as If-Range: a changed resource (a zip whose bundle grew) is then sent whole. */
  readonly etag: string | null;
  readonly label: string;
  progress(done: number): void;
  readonly stop: Interruption;
}

const sizeOf = (file: string): number => {
  try {
    return fs.statSync(file).size;
  } catch {
    return 0;
  }
};

/** One request from what the part file holds; false when the connection broke (try again). */
async function attempt(f: Fetch): Promise<boolean> {
  let have = sizeOf(f.part);
  if (have > f.size) have = 0;
  if (have === f.size && f.size > 0) return true;
  const headers: Record<string, string> = { ...f.headers };
  if (have > 0) {
    headers.Range = `bytes=${have}-`;
    if (f.etag) headers['If-Range'] = f.etag;
  }
  const abort = new AbortController();
  let idle = setTimeout(() => abort.abort(), IDLE_MS);
  let res: Response;
  try {
    // Redirects are not followed: the access token must not travel to another host.
    res = await fetch(f.url, { headers, signal: abort.signal, redirect: 'manual' });
  } catch (err) {
    clearTimeout(idle);
    if (have === 0 && sizeOf(f.part) === 0) throw unreachable(err, new URL(f.url).origin, `getting ${f.label}`);
    return false;
  }
  if (res.status === 200) have = 0;
  else if (res.status !== 206) throw failureOf(res.status, await res.text(), res.headers.get('retry-after'), `getting ${f.label}`);
  let done = have;
  const count = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      clearTimeout(idle);
      idle = setTimeout(() => abort.abort(), IDLE_MS);
      done += chunk.length;
      f.progress(done);
      cb(null, chunk);
    },
  });
  const body = Readable.fromWeb(res.body as import('node:stream/web').ReadableStream);
  const write = pipeline(body, count, fs.createWriteStream(f.part, { flags: have > 0 ? 'a' : 'w' }));
  try {
    await f.stop.race(write, async () => abort.abort());
    return true;
  } catch (err) {
    if (err instanceof ClientFailure) throw err;
    return false;
  } finally {
    clearTimeout(idle);
  }
}

/** Fills `f.part` with the whole resource; fails with status 7 when its size is not `f.size`. */
export async function fetchWhole(f: Fetch): Promise<void> {
  f.progress(Math.min(sizeOf(f.part), f.size));
  for (let i = 0; ; i++) {
    if (await attempt(f)) break;
    if (i >= RETRY_DELAYS.length) throw new ClientFailure(EXIT.UNREACHABLE, `getting ${f.label}: the connection kept breaking; run the command again to resume`);
    await new Promise((r) => setTimeout(r, RETRY_DELAYS[i]));
  }
  const got = sizeOf(f.part);
  if (got !== f.size) {
    fs.rmSync(f.part, { force: true });
    throw new ClientFailure(EXIT.MISMATCH, `${f.label}: got ${got} bytes where the server lists ${f.size}`);
  }
}
