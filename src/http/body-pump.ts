import type { Ctx } from './context.ts';
import { writeHead } from './reply.ts';
import { pageAligned, spareBuffers } from '../storage/spare-buffers.ts';

/** Reads of this size move ~2.5× more than 64 KiB reads on uWS (PERFORMANCE.md). */
const CHUNK_BYTES = 1 << 20;
/**
 * Bodies larger than this read through reused 1 MiB buffers. Each response used to allocate its
 * own pair, and a finished response's 2 MiB stayed resident until the next GC: eight downloads
 * started right after eight others peaked at 32 MiB of buffers instead of 16. Spares for eight
 * concurrent responses are kept. They are page-aligned (see pageAligned): reads from the page cache
 * into them move ~3× faster than into malloc's. Smaller bodies get one buffer of their own size.
 */
const POOLED_OVER_BYTES = 64 * 1024;
const spares = spareBuffers('download', CHUNK_BYTES, 16, pageAligned);

/** Where a streamed body comes from: any positioned reader (one file, a ZIP layout, …). */
export interface BodySource {
  /** Fills all of `target` with body bytes from body offset `pos`, or rejects. Calls never overlap. */
  read(target: Buffer, pos: number): Promise<void>;
  /** Releases what the source holds; called exactly once, also after abort and errors. */
  close(): void;
}

/**
 * Streams a body of exactly `length` bytes with tryEnd/onWritable backpressure: the same pump as
 * streamFile, generalized to any BodySource. One read is in flight ahead of the send, into the other
 * of two buffers, so memory stays at 2 MiB per response whatever the body size (reused, see
 * POOLED_OVER_BYTES). Resolves true when the whole body was handed to uWS, false if the client went
 * away. A failure before the first byte rejects (the caller can still answer with an error); after
 * it, the connection is dropped.
 */
export function streamBody(
  ctx: Ctx,
  status: number,
  headers: Array<[string, string]>,
  length: number,
  source: BodySource,
): Promise<boolean> {
  const res = ctx.res;
  return new Promise<boolean>((resolve, reject) => {
    const pooled = length > POOLED_OVER_BYTES;
    const buffers: Buffer[] = [];
    // The read in flight, if any: buffers go back to the spares only once no read can still write
    // into them (an abort settles the response while the pool thread may be mid-read).
    let reading: Promise<unknown> = Promise.resolve();
    let settled = false;
    const finish = (ok: boolean, error?: unknown): void => {
      if (settled) return;
      settled = true;
      source.close();
      if (pooled) {
        const held = buffers.splice(0);
        void reading.then(() => held.forEach((b) => spares.give(b)));
      }
      if (error) reject(error);
      else resolve(ok);
    };
    if (ctx.aborted) return finish(false);
    ctx.onAbort(() => finish(false));

    if (length === 0) {
      res.cork(() => {
        writeHead(ctx, status, headers);
        res.end();
      });
      ctx.done = true;
      return finish(true);
    }

    const size = Math.min(CHUNK_BYTES, length);
    const buffer = (i: number): Buffer => (buffers[i] ??= pooled ? spares.take() : Buffer.allocUnsafeSlow(size));
    const read = (i: number, pos: number): Promise<Buffer> => {
      const chunk = buffer(i % 2).subarray(0, Math.min(size, length - pos));
      const done = source.read(chunk, pos).then(() => chunk);
      reading = done.catch(() => {});
      return done;
    };

    let first = true;
    // Hands one chunk to uWS; resolves when uWS has taken all of it (true: response complete).
    const send = (chunk: Buffer): Promise<boolean> =>
      new Promise((ok) => {
        if (ctx.aborted) return ok(true);
        const base = res.getWriteOffset();
        let result: [boolean, boolean] = [false, false];
        res.cork(() => {
          if (first) {
            writeHead(ctx, status, headers);
            first = false;
          }
          result = res.tryEnd(chunk, length);
        });
        if (result[1]) return ok(true);
        if (result[0]) return ok(false);
        res.onWritable((offset) => {
          // After the response settled, `chunk` may already belong to another response.
          if (settled || ctx.aborted) return true;
          const [wrote, done] = res.tryEnd(chunk.subarray(offset - base), length);
          // Continue on the next turn, not in this callback's microtasks: when the next read is already
          // done, the next send's onWritable would be registered before uWS has processed this return
          // value and be lost (uWebSockets.js issue 961): the download stalled for good.
          if (done) setImmediate(ok, true);
          else if (wrote) setImmediate(ok, false);
          return wrote;
        });
      });

    (async () => {
      let pos = 0;
      let next = read(0, pos);
      for (let i = 0; ; i++) {
        const chunk = await next;
        if (ctx.aborted) return finish(false);
        pos += chunk.length;
        if (pos < length) {
          next = read(i + 1, pos);
          next.catch(() => {}); // observed by the next await; never an unhandled rejection
        }
        const complete = await send(chunk);
        if (ctx.aborted) return finish(false);
        if (complete || pos >= length) {
          ctx.done = true;
          ctx.bytesOut = length;
          return finish(true);
        }
      }
    })().catch((e: unknown) => {
      // Headers may be out already: the only honest signal left is to drop the connection.
      if (!first && !ctx.aborted) {
        ctx.done = true;
        res.close();
      }
      finish(false, first ? e : undefined);
    });
  });
}
