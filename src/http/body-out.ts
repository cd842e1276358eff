import fs from 'node:fs';
import type { Ctx } from './context.ts';
import { writeHead } from './reply.ts';

/** Reads of this size move ~2.5× more than 64 KiB reads on uWS (PERFORMANCE.md). */
const READ_BYTES = 1 << 20;

/**
 * Streams bytes [start, start+length) of a file as the response body with tryEnd/onWritable
 * backpressure. One read is always in flight ahead of the send, into the other of two buffers,
 * so memory stays at 2 MiB per download whatever the file size. Resolves true when the whole
 * body was handed to uWS, false if the client went away.
 */
export function streamFile(
  ctx: Ctx,
  filePath: string,
  status: number,
  headers: Array<[string, string]>,
  start: number,
  length: number,
): Promise<boolean> {
  const res = ctx.res;
  return new Promise<boolean>((resolve, reject) => {
    fs.open(filePath, 'r', (err, fd) => {
      if (err) return reject(err);
      const close = (): void => fs.close(fd, () => {});
      if (ctx.aborted) {
        close();
        return resolve(false);
      }
      const buffers = [Buffer.allocUnsafeSlow(Math.min(READ_BYTES, Math.max(length, 1))), Buffer.allocUnsafeSlow(Math.min(READ_BYTES, Math.max(length, 1)))];
      let settled = false;
      const finish = (ok: boolean, error?: unknown): void => {
        if (settled) return;
        settled = true;
        close();
        if (error) reject(error);
        else resolve(ok);
      };
      ctx.onAbort(() => finish(false));

      if (length === 0) {
        res.cork(() => {
          writeHead(ctx, status, headers);
          res.end();
        });
        ctx.done = true;
        return finish(true);
      }

      const read = (i: number, pos: number): Promise<Buffer> =>
        new Promise((ok, fail) => {
          const buf = buffers[i % 2]!;
          const want = Math.min(buf.length, start + length - pos);
          fs.read(fd, buf, 0, want, pos, (e, n) => {
            if (e) return fail(e);
            if (n === 0) return fail(new Error(`file shorter than recorded size: ${filePath}`));
            ok(buf.subarray(0, n));
          });
        });

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
            if (ctx.aborted) return true;
            const [wrote, done] = res.tryEnd(chunk.subarray(offset - base), length);
            // Continue on the next turn, not in this callback's microtasks: a new onWritable
            // registered before uWS has processed this return value would be lost (stalled
            // downloads under fast readers; uWebSockets.js issue 961).
            if (done || wrote) setImmediate(() => ok(done));
            return wrote;
          });
        });

      (async () => {
        let pos = start;
        let next = read(0, pos);
        for (let i = 0; ; i++) {
          const chunk = await next;
          pos += chunk.length;
          if (pos < start + length) {
            next = read(i + 1, pos);
            next.catch(() => {}); // observed by the next await; never an unhandled rejection
          }
          const complete = await send(chunk);
          if (ctx.aborted) return finish(false);
          if (complete || pos >= start + length) {
            ctx.done = true;
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
  });
}
