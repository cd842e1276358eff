import type { Ctx } from './context.ts';
import { writeHead } from './reply.ts';
import { createResponseMemory, type MemoryTurn } from './response-memory.ts';
import { createOldCollector } from '../util/gc.ts';
import { watchClient } from './client-waits.ts';

/** Reads of this size move much more per second through uWS than 64 KiB reads (see bench/RESULTS.md). */
const CHUNK_BYTES = 1 << 20;
/**
 * Bodies larger than this read through reused, page-aligned 1 MiB buffers (reads from the page cache
 * into them are much faster than into malloc's); as many spares are kept as read-ahead may hold.
 * Smaller bodies get one buffer of their own size. Figures: bench/RESULTS.md, "Design notes moved
 * from the code".
 */
const POOLED_OVER_BYTES = 64 * 1024;
/** Read buffer bytes all responses hold together (docs/security.md, "Slow readers"). */
export const TOTAL_BUDGET_BYTES = 64 * CHUNK_BYTES;
/**
 * A response reads ahead of its send only while all responses together hold at most this much: with
 * a few streaming, the others keep the sockets busy while one reads, and each then holds one buffer,
 * not two.
 */
const AHEAD_BYTES = 8 * CHUNK_BYTES;
/**
 * A full collection soon, at most every 5 s: what a crowd of dropped connections or buffers leaves
 * lives in the old generation, and an idle server may not collect it for a long time.
 */
const collectSoon = createOldCollector(5_000);
const memory = createResponseMemory(TOTAL_BUDGET_BYTES, CHUNK_BYTES, AHEAD_BYTES / CHUNK_BYTES, collectSoon);
/** Read buffer bytes held by all responses right now, and how many responses wait for some. */
export const responseMemory = (): { inUse: number; waiting: number } => ({ inUse: memory.inUse(), waiting: memory.waiting() });

/** Where a streamed body comes from: any positioned reader (one file, a ZIP layout, …). */
export interface BodySource {
  /**
   * Fills `target` with body bytes from body offset `pos`, or rejects. Calls never overlap. A source
   * may fill only a first part of it, at least one byte, and resolve with how many: what it has is
   * then sent at once (a zip of many small files sends its first entries before reading the rest).
   */
  read(target: Buffer, pos: number): Promise<number | void>;
  /** Releases what the source holds; called exactly once, also after abort and errors. */
  close(): void;
}

/** How one send ended: the whole response went out, this chunk went out, or sending resumes at a body offset. */
type Sent = { kind: 'complete' } | { kind: 'sent' } | { kind: 'resume'; at: number };

/** A chunk of the body: `n` bytes from body offset `at`, read (or being read) into `buf`. */
interface Piece {
  buf: Buffer;
  at: number;
  n: number;
  read: Promise<void>;
}

const noop = (): void => {};
/** What a piece holds once its buffer went back: a stalled response must keep none reachable. */
const NO_BUFFER = Buffer.alloc(0);

/**
 * Streams a body of exactly `length` bytes with tryEnd/onWritable backpressure from any BodySource.
 * One read runs ahead of the send when memory allows, so a response holds at most two 1 MiB buffers
 * whatever the body size, and all responses together at most TOTAL_BUDGET_BYTES: a response that
 * finds them spent waits its turn holding nothing. A response waiting on its client gives its
 * buffers back after RELEASE_AFTER_MS, or at once when another waits for memory, and reads the
 * unsent bytes again when the client drains. A client that takes no byte for the stall time is
 * disconnected. Resolves true when the whole body was handed to uWS, false if the client went away.
 * A failure before the first byte rejects (the caller can still answer with an error); after it,
 * the connection is dropped.
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
    const size = length > POOLED_OVER_BYTES ? CHUNK_BYTES : length;
    // Buffers this response owns; `idle` ones hold nothing to send and serve the next read.
    const held = new Set<Buffer>();
    const idle: Buffer[] = [];
    // The read in flight, if any: a buffer goes back only once no read can still write into it
    // (an abort settles the response while the pool thread may be mid-read).
    let reading: Promise<void> = Promise.resolve();
    let ahead: Piece | null = null;
    let turn: MemoryTurn | null = null;
    let settled = false;
    // Ends the wait of the send in progress, if any (its timers).
    let endWait: (() => void) | null = null;
    const drop = (b: Buffer): void => {
      if (!held.delete(b)) return;
      void reading.then(() => memory.give(b));
    };
    // Everything but the chunk being sent: what the read ahead and the spare hold.
    const dropSpare = (): void => {
      for (const b of idle.splice(0)) drop(b);
      if (ahead) drop(ahead.buf);
      ahead = null;
    };
    const finish = (ok: boolean, error?: unknown): void => {
      if (settled) return;
      settled = true;
      endWait?.();
      turn?.cancel();
      source.close();
      for (const b of [...held]) drop(b);
      idle.length = 0;
      ahead = null;
      if (!ok) collectSoon();
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

    const own = (b: Buffer): Buffer => (held.add(b), b);
    const bufferNow = (): Buffer | null => {
      const b = idle.pop() ?? memory.tryTake(size);
      return b && own(b);
    };
    // A buffer for the next chunk, in turn; null when the response settled meanwhile.
    const bufferInTurn = async (): Promise<Buffer | null> => {
      const now = bufferNow();
      if (now) return now;
      turn = memory.take(size);
      const b = await turn.buffer;
      turn = null;
      return settled ? null : own(b);
    };
    const startRead = (buf: Buffer, at: number): Piece => {
      const piece: Piece = { buf, at, n: Math.min(buf.length, length - at), read: Promise.resolve() };
      piece.read = source.read(buf.subarray(0, piece.n), at).then((filled) => {
        if (typeof filled === 'number') {
          if (!(filled > 0 && filled <= piece.n)) throw new Error(`a body source filled ${filled} of ${piece.n} bytes`);
          piece.n = filled;
        }
      });
      reading = piece.read.then(noop, noop);
      piece.read.catch(noop); // observed where the piece is awaited; never an unhandled rejection
      return piece;
    };

    let first = true;
    // Hands the piece to uWS; resolves once uWS has taken all of it, or once its buffer was given
    // back while waiting (sending then resumes where the client is).
    const send = (p: Piece): Promise<Sent> =>
      new Promise((ok) => {
        if (ctx.aborted) return ok({ kind: 'complete' });
        const base = res.getWriteOffset();
        // Dropped on release: nothing may keep a released buffer reachable (it would stay resident).
        let chunk: Buffer | null = p.buf.subarray(0, p.n);
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
          drop(p.buf);
          p.buf = NO_BUFFER;
          dropSpare();
        };
        const stall = (): void => {
          if (settled || ctx.aborted) return;
          ctx.done = true;
          res.close(); // runs onAborted: the response settles as aborted
        };
        const unwanted = memory.onWanted(release);
        // The failed tryEnd armed uWS's own HTTP timeout, which closes the connection 8-12 s later
        // without a word to us; pause() disarms it and resume() arms it afresh, so the stall
        // deadline here is the one that decides (and is counted).
        const rearm = (): void => {
          if (settled || ctx.aborted) return;
          res.pause();
          res.resume();
        };
        const watched = watchClient({ release, stall, rearm });
        const leave = (): void => {
          watched.end();
          unwanted();
          endWait = null;
        };
        endWait = leave;
        res.onWritable((offset) => {
          // After the response settled, its buffers may already belong to another response.
          if (settled || ctx.aborted) return true;
          if (chunk === null) {
            // Released: nothing to write from. Say so, and read the rest again from where the client is.
            leave();
            setImmediate(ok, { kind: 'resume', at: p.at + offset - base });
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
          if (res.getWriteOffset() > offset) watched.progressed();
          return wrote;
        });
      });

    // Buffers are only ever held by pieces, never in the loop's own variables: a suspended async
    // function keeps every value it had in its frame, and a stalled response would pin a buffer it
    // gave back.
    const readNext = async (at: number): Promise<Piece | null> => {
      const buf = await bufferInTurn();
      return buf && startRead(buf, at);
    };
    const readAhead = (at: number): void => {
      // only with memory to spare
      const buf = idle.length > 0 || memory.inUse() + size <= AHEAD_BYTES ? bufferNow() : null;
      if (buf) ahead = startRead(buf, at);
    };
    // Sent whole: its buffer serves the next read, unless another response is waiting for one or
    // read-ahead is over its share.
    const sentWhole = (p: Piece): void => {
      if (memory.waiting() > 0 || memory.inUse() > AHEAD_BYTES) drop(p.buf);
      else idle.push(p.buf);
      p.buf = NO_BUFFER;
    };

    (async () => {
      let at = 0;
      for (;;) {
        let piece: Piece | null = ahead;
        ahead = null;
        piece ??= await readNext(at);
        if (!piece) return;
        await piece.read;
        if (ctx.aborted) return finish(false);
        const end = piece.at + piece.n;
        if (end < length) readAhead(end);
        // Bytes handed to the client so far, counting this chunk whole: never less than it received
        // (download limits credit a cut response with them).
        ctx.bytesOut = end;
        const sent = await send(piece);
        if (ctx.aborted) return finish(false);
        if (sent.kind === 'complete' || (sent.kind === 'sent' && end >= length)) {
          ctx.done = true;
          ctx.bytesOut = length;
          return finish(true);
        }
        if (sent.kind === 'resume') {
          at = sent.at;
          continue;
        }
        sentWhole(piece);
        at = end;
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
