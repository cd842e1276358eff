import type { Ctx } from './context.ts';
import { writeHead } from './reply.ts';
import { pageAligned, spareBuffers } from '../storage/spare-buffers.ts';

/** Reads of this size move much more per second through uWS than 64 KiB reads (see bench/RESULTS.md). */
const CHUNK_BYTES = 1 << 20;
/**
 * Bodies larger than this read through reused 1 MiB buffers: a pair allocated per response would stay
 * resident until the next GC after the response ends, so back-to-back downloads would hold twice the
 * buffers. Spares for eight concurrent responses are kept. They are page-aligned (see pageAligned):
 * reads from the page cache into them are much faster than into malloc's. Smaller bodies get one
 * buffer of their own size. Figures: bench/RESULTS.md, "Design notes moved from the code".
 */
const POOLED_OVER_BYTES = 64 * 1024;
const spares = spareBuffers('download', CHUNK_BYTES, 16, pageAligned);

/**
 * How long a response may wait on a client that takes no bytes before it is closed, and what is told
 * of it. Set once at start (configureSlowReaders); the defaults serve tests that never set them.
 */
export interface SlowReaderSettings {
  /** A response whose client accepts no byte for this long is closed. */
  readonly stallMs: number;
  /** Called once per response closed for stalling (a metric). */
  readonly onStall: () => void;
}

let slowReaders: SlowReaderSettings = { stallMs: 60_000, onStall: () => {} };

export function configureSlowReaders(settings: SlowReaderSettings): void {
  slowReaders = settings;
}

/**
 * A response that waits this long on one chunk gives its buffers back and reads the unsent bytes
 * again once the client drains: a reader that stalls holds no pump buffer while it waits.
 */
export const RELEASE_AFTER_MS = 1_000;
/**
 * Pump buffer bytes all responses may hold together. Past it, a response reads through 64 KiB
 * buffers of its own, and one that has to wait for its client gives its buffers back at once: a
 * crowd of clients that stop reading cannot pin more than this plus 128 KiB each, and that only
 * until RELEASE_AFTER_MS.
 */
export const TOTAL_BUDGET_BYTES = 64 * CHUNK_BYTES;
const SMALL_BYTES = 64 * 1024;
let inUse = 0;
/** Pump buffer bytes held by all responses right now (for tests). */
export const pumpBytesInUse = (): number => inUse;

/** Where a streamed body comes from: any positioned reader (one file, a ZIP layout, …). */
export interface BodySource {
  /** Fills all of `target` with body bytes from body offset `pos`, or rejects. Calls never overlap. */
  read(target: Buffer, pos: number): Promise<void>;
  /** Releases what the source holds; called exactly once, also after abort and errors. */
  close(): void;
}

/** How one send ended: the whole response went out, this chunk went out, or sending resumes at a body offset. */
type Sent = { kind: 'complete' } | { kind: 'sent' } | { kind: 'resume'; at: number };

/**
 * Streams a body of exactly `length` bytes with tryEnd/onWritable backpressure: the same pump as
 * streamFile, generalized to any BodySource. One read is in flight ahead of the send, into the other
 * of two buffers, so memory stays at 2 MiB per response whatever the body size (reused, see
 * POOLED_OVER_BYTES), within a total budget (TOTAL_BUDGET_BYTES), and at none while a client
 * stalls (RELEASE_AFTER_MS). A client that takes no byte for the stall time is disconnected.
 * Resolves true when the whole body was handed to uWS, false if the client went away. A failure
 * before the first byte rejects (the caller can still answer with an error); after it, the
 * connection is dropped.
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
    let reading: Promise<void> = Promise.resolve();
    let settled = false;
    // Ends the wait of the send in progress, if any (its timers).
    let endWait: (() => void) | null = null;
    const releaseBuffers = (): void => {
      const held = buffers.splice(0);
      for (const b of held) inUse -= b.length;
      void reading.then(() => held.forEach((b) => spares.give(b)));
    };
    const finish = (ok: boolean, error?: unknown): void => {
      if (settled) return;
      settled = true;
      endWait?.();
      source.close();
      releaseBuffers();
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

    const acquire = (): Buffer => {
      const b =
        inUse + CHUNK_BYTES > TOTAL_BUDGET_BYTES
          ? Buffer.allocUnsafeSlow(Math.min(SMALL_BYTES, length))
          : pooled
            ? spares.take()
            : Buffer.allocUnsafeSlow(length);
      inUse += b.length;
      return b;
    };
    // Reads body bytes from `pos` into buffer i % 2; resolves with how many (the buffer may be released meanwhile).
    const read = (i: number, pos: number): Promise<number> => {
      const target = (buffers[i % 2] ??= acquire());
      const n = Math.min(target.length, length - pos);
      const done = source.read(target.subarray(0, n), pos).then(() => n);
      reading = done.then(
        () => {},
        () => {},
      );
      return done;
    };

    let first = true;
    // Hands `n` bytes of buffer i % 2, body offset `at`, to uWS; resolves once uWS has taken all of
    // them, or once the buffers were released while waiting (sending then resumes where the client is).
    const send = (i: number, n: number, at: number): Promise<Sent> =>
      new Promise((ok) => {
        if (ctx.aborted) return ok({ kind: 'complete' });
        const base = res.getWriteOffset();
        // Dropped on release: nothing may keep a released buffer reachable (it would stay resident).
        let chunk: Buffer | null = buffers[i % 2]!.subarray(0, n);
        let result: [boolean, boolean] = [false, false];
        res.cork(() => {
          if (first) {
            writeHead(ctx, status, headers);
            first = false;
          }
          result = res.tryEnd(chunk!, length);
        });
        if (result[1]) return ok({ kind: 'complete' });
        if (result[0]) return ok({ kind: 'sent' });

        // The client is behind: wait for it, with a deadline on its progress and a bound on what is held.
        const release = (): void => {
          if (chunk === null || settled) return;
          chunk = null;
          releaseBuffers();
        };
        const stall = (): void => {
          if (settled || ctx.aborted) return;
          slowReaders.onStall();
          ctx.done = true;
          res.close(); // runs onAborted: the response settles as aborted
        };
        let stallTimer = setTimeout(stall, slowReaders.stallMs);
        const releaseTimer = setTimeout(release, RELEASE_AFTER_MS);
        if (inUse > TOTAL_BUDGET_BYTES) release();
        const leave = (): void => {
          clearTimeout(stallTimer);
          clearTimeout(releaseTimer);
          endWait = null;
        };
        endWait = leave;
        res.onWritable((offset) => {
          // After the response settled, its buffers may already belong to another response.
          if (settled || ctx.aborted) return true;
          if (chunk === null) {
            // Released: nothing to write from. Say so, and read the rest again from where the client is.
            leave();
            setImmediate(ok, { kind: 'resume', at: at + offset - base });
            return true;
          }
          const [wrote, done] = res.tryEnd(chunk.subarray(offset - base), length);
          // Continue on the next turn, not in this callback's microtasks: when the next read is already
          // done, the next send's onWritable would be registered before uWS has processed this return
          // value and be lost (uWebSockets.js issue 961): the download stalled for good.
          if (done || wrote) {
            leave();
            setImmediate(ok, done ? { kind: 'complete' } : { kind: 'sent' });
            return wrote;
          }
          // Still behind, but it took something: its stall deadline starts again. (A response that
          // just completed must not be touched again: uWS throws.)
          if (res.getWriteOffset() > offset) {
            clearTimeout(stallTimer);
            stallTimer = setTimeout(stall, slowReaders.stallMs);
          }
          return wrote;
        });
      });

    (async () => {
      let next = read(0, 0);
      let nextAt = 0;
      for (let i = 0; ; i++) {
        const n = await next;
        if (ctx.aborted) return finish(false);
        const at = nextAt;
        const end = at + n;
        if (end < length) {
          next = read(i + 1, end);
          nextAt = end;
          next.catch(() => {}); // observed by the next await; never an unhandled rejection
        }
        // Bytes handed to the client so far, counting this chunk whole: never less than it received
        // (download limits credit a cut response with them).
        ctx.bytesOut = end;
        const sent = await send(i, n, at);
        if (ctx.aborted) return finish(false);
        if (sent.kind === 'resume') {
          // The read ahead (if any) went into a released buffer: let it settle, then read again.
          await reading;
          if (ctx.aborted) return finish(false);
          next = read(i + 1, sent.at);
          nextAt = sent.at;
          continue;
        }
        if (sent.kind === 'complete' || end >= length) {
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
