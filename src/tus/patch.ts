import { createHash, type Hash } from 'node:crypto';
import { onBody, type Ctx } from '../http/context.ts';
import { AppError } from '../errors.ts';
import type { BlobAppender } from '../storage/blob-store.ts';

export interface BodyTap {
  /**
   * Streams the body into `appender`, never past `limit` (absolute). Resolves once every received
   * byte was handed over — at the body's end, or after the client went away, with what had arrived
   * by then; the caller's appender.finish() makes them durable. Never rejects: see PatchResult.error.
   */
  pipe(appender: BlobAppender, limit: number, hashName: string | null): Promise<PatchResult>;
  /** Drops the body (the request was refused before streaming). */
  cancel(): void;
}

export interface PatchResult {
  /** False: the client went away before the body's end. */
  readonly complete: boolean;
  readonly digest: Buffer | null;
  /** Why streaming stopped early (the size limit); what came before still counts. */
  readonly error: Error | null;
}

/**
 * Must be called before the handler's first await: registers onData and pauses the socket, keeping
 * what arrives before pipe() (at most one uWS chunk after the pause). The appender's backpressure
 * pauses the socket (write() false) and its drain resumes it.
 */
export function tapBody(ctx: Ctx): BodyTap {
  const res = ctx.res;
  const early: Array<{ buf: Buffer; last: boolean }> = [];
  /** Takes one body chunk; it must not keep `chunk` (it may be uWS's memory) past its return. */
  let sink: ((chunk: Buffer, last: boolean) => void) | null = null;
  let ended = false;
  let onEnd: (() => void) | null = null;
  res.pause();
  onBody(ctx, (ab, isLast) => {
    if (ended) return;
    if (isLast) ended = true;
    // uWS reuses the memory behind `ab` once we return: the appender copies what it keeps (write's
    // `transient`), so only early bytes need a copy here.
    if (sink) return sink(Buffer.from(ab), isLast);
    const copy = Buffer.allocUnsafe(ab.byteLength);
    copy.set(new Uint8Array(ab));
    early.push({ buf: copy, last: isLast });
  });
  ctx.onAbort(() => onEnd?.());

  return {
    cancel() {
      ended = true;
      early.length = 0;
    },
    pipe(appender, limit, hashName) {
      return new Promise<PatchResult>((resolve) => {
        const hash: Hash | null = hashName === null ? null : createHash(hashName);
        let received = 0;
        let failure: Error | null = null;
        let sawLast = false;
        let finished = false;
        /** The appender said stop (write() false) and has not drained yet. */
        let full = false;
        const done = (): void => {
          if (finished) return;
          finished = true;
          resolve({ complete: sawLast && !failure, digest: hash ? hash.digest() : null, error: failure });
        };
        const drained = (): void => {
          full = false;
          if (!finished && !ctx.aborted && !ctx.done && !sawLast) res.resume();
        };
        sink = (chunk, last) => {
          if (finished) return;
          if (appender.offset + received + chunk.length > limit) {
            failure = new AppError('UPLOAD_TOO_LARGE', 'Body goes past Upload-Length or the size limit');
            ended = true;
            return done();
          }
          received += chunk.length;
          hash?.update(chunk);
          const more = appender.write(chunk, true);
          if (last) {
            sawLast = true;
            // uWS keeps a paused socket paused across requests: a kept-alive connection would stall.
            if (!ctx.aborted) res.resume();
            return done();
          }
          if (!more) {
            full = true;
            // Each stop gets its own callback: the writer runs one once, then forgets it.
            appender.onDrain(drained);
            if (!ctx.aborted) res.pause();
          }
        };
        // The client went away: what arrived is reported, and the caller makes it durable.
        onEnd = done;
        for (const e of early.splice(0)) sink(e.buf, e.last);
        if (ctx.aborted) done();
        else if (!finished && !full) res.resume();
      });
    },
  };
}
