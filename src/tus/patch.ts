import { createHash, type Hash } from 'node:crypto';
import { crc32 } from '../util/crc32.mjs';
import type { Ctx } from '../http/context.ts';
import { dropBody, holdBody, limitBody, onBody, onBodyOverrun, pauseBody, resumeBody } from '../http/body-flow.ts';
import { AppError } from '../errors.ts';
import type { BlobAppender } from '../storage/blob-store.ts';

export interface BodyTap {
  /**
   * Streams the body into `appender`, never past `limit` (absolute). Resolves once every received
   * byte was handed over — at the body's end, or after the client went away, with what had arrived
   * by then; the caller's appender.finish() makes them durable. Never rejects: see PatchResult.error.
   * With `crcUpTo`, the body's CRC-32 is computed too, unless it brings more bytes than that.
   */
  pipe(appender: BlobAppender, limit: number, hashName: string | null, crcUpTo?: number): Promise<PatchResult>;
  /** Drops the body (the request was refused before streaming). */
  cancel(): void;
}

export interface PatchResult {
  /** False: the client went away before the body's end. */
  readonly complete: boolean;
  readonly digest: Buffer | null;
  /** Why streaming stopped early (the size limit); what came before still counts. */
  readonly error: Error | null;
  /** Bytes handed to the appender. */
  readonly received: number;
  /** The CRC-32 of those bytes, if asked for and they were no more than `crcUpTo`. */
  readonly crc32: number | null;
}

/**
 * Must be called before the handler's first await: holds the body (body-flow.ts) until pipe().
 * The appender's backpressure pauses the body (write() false) and its drain resumes it.
 */
export function tapBody(ctx: Ctx): BodyTap {
  let ended = false;
  let onEnd: (() => void) | null = null;
  holdBody(ctx);
  ctx.onAbort(() => onEnd?.());

  return {
    cancel() {
      ended = true;
      dropBody(ctx);
    },
    pipe(appender, limit, hashName, crcUpTo = 0) {
      return new Promise<PatchResult>((resolve) => {
        const hash: Hash | null = hashName === null ? null : createHash(hashName);
        let received = 0;
        let crc = 0;
        let failure: Error | null = null;
        let sawLast = false;
        let finished = false;
        /** The appender said stop (write() false) and has not drained yet. */
        let full = false;
        const done = (): void => {
          if (finished) return;
          finished = true;
          const crcOf = received > 0 && received <= crcUpTo ? crc >>> 0 : null;
          resolve({ complete: sawLast && !failure, digest: hash ? hash.digest() : null, error: failure, received, crc32: crcOf });
        };
        const drained = (): void => {
          full = false;
          if (!finished && !ctx.aborted && !ctx.done && !sawLast) resumeBody(ctx);
        };
        // uWS reuses the memory behind a chunk once this returns: the appender copies what it keeps
        // (write's `transient`).
        const sink = (chunk: Buffer, last: boolean): void => {
          if (finished || ended) return;
          if (last) ended = true;
          if (appender.offset + received + chunk.length > limit) {
            failure = new AppError('UPLOAD_TOO_LARGE', 'Body goes past Upload-Length or the size limit');
            ended = true;
            dropBody(ctx);
            return done();
          }
          received += chunk.length;
          hash?.update(chunk);
          if (received <= crcUpTo) crc = crc32(chunk, crc);
          const more = appender.write(chunk, true);
          if (last) {
            sawLast = true;
            return done();
          }
          if (!more) {
            full = true;
            // Each stop gets its own callback: the writer runs one once, then forgets it.
            appender.onDrain(drained);
            pauseBody(ctx);
          }
        };
        // The client went away: what arrived is reported, and the caller makes it durable.
        onEnd = done;
        onBodyOverrun(ctx, () => {
          failure = new AppError('BODY_OVERRUN');
          ended = true;
          done();
        });
        limitBody(ctx, limit - appender.offset, () => {
          failure = new AppError('UPLOAD_TOO_LARGE', 'Body goes past Upload-Length or the size limit');
          ended = true;
          done();
        });
        onBody(ctx, sink);
        if (ctx.aborted) done();
        else if (!finished && !full) resumeBody(ctx);
      });
    },
  };
}
