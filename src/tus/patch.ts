import fs from 'node:fs';
import { createHash, type Hash } from 'node:crypto';
import { onBody, type Ctx } from '../http/context.ts';
import { AppError } from '../errors.ts';
import { spareBuffers } from '../storage/spare-buffers.ts';
import { DIRECT_ALIGN, direct } from '../storage/direct-io.ts';
import { writeDirect, writeFully } from './part-io.ts';

/**
 * Disk writes are coalesced into slots of this size; a request reads on while at most SLOTS are in
 * use (see `spares`). Four moved a 4 GiB upload as fast as eight here, with a peak RSS of 118-119 MiB
 * instead of 130-134.
 */
const SLOT_BYTES = 1 << 20;
const SLOTS = 4;
/** Positioned writes in flight at once. */
const WRITES = 4;
/**
 * Whole 1 MiB slots are written with O_DIRECT, as multipart parts are (direct-io.ts): a slot starts
 * on a block boundary, since the first slot of a PATCH at an unaligned offset only fills up to the
 * next one. On a machine seen here, page-cache writes of a 4 GiB tus upload cost ~40% of two cores in
 * copy_folio_from_iter plus ~13% spinning on the inode lock (tus ran at 0.47× multipart). The rest
 * (that short first slot, the PATCH's last partial slot, every write where O_DIRECT is refused) goes
 * through the page cache: an fdatasync starts whenever SYNC_EVERY more such bytes are written (one at
 * a time), and they wait while MAX_UNSYNCED are not yet synced, so writeback overlaps the body and
 * the fsync that ends the PATCH has little left. A PATCH's offset is recorded only after that fsync.
 */
const SYNC_EVERY = 16 << 20;
const MAX_UNSYNCED = 64 << 20;
/**
 * Slot buffers of finished PATCHes, reused by the next: each 64 MiB PATCH of a large upload would
 * otherwise leave 8 MiB of garbage behind, which kept the peak RSS of a 4 GiB tus upload ~20 MiB
 * above the multipart path's. A PATCH pauses the socket once more than SLOTS are in use, but the
 * chunk that crossed can span two slots and one more may arrive: up to SLOTS + 2 are out (6 counted
 * in sluice_buffer_allocations_total). Keeping only SLOTS dropped one per PATCH, 64 MiB of
 * garbage per 4 GiB, and the first upload of a fresh server peaked at 129–134 MiB instead of ~114.
 */
const spares = spareBuffers('tus-slot', SLOT_BYTES, SLOTS * 2);
/**
 * Copies of sealed slots out at the hash worker (see HashFeed), at most this many per PATCH: the
 * socket pauses at the limit. The copy costs ~50 µs per MiB; hashing the part by reading it back
 * would cost a read of every byte, from the disk itself once the writes skipped the page cache.
 */
const HASH_COPIES = 4;
const hashSpares = spareBuffers('tus-hash-copy', SLOT_BYTES, HASH_COPIES * 2);

/** Hands bytes being written at `at` to the hasher; `buf` is transferred and comes back to `back`. */
export type HashFeed = (at: number, buf: ArrayBuffer, len: number, back: (buf: ArrayBuffer) => void) => void;

export interface BodyTap {
  /**
   * Streams the body into `fd` from `offset`, never past `limit` (absolute). Resolves once every
   * received byte is written — at the body's end, or after the client went away, with what had
   * arrived by then; the caller's fsync makes them durable. Never rejects: see PatchResult.error.
   */
  pipe(fd: number, offset: number, limit: number, hashName: string | null, directFd?: number, feed?: HashFeed | null): Promise<PatchResult>;
  /** Drops the body (the request was refused before streaming). */
  cancel(): void;
}

export interface PatchResult {
  /** Bytes written from `offset`: durable once the caller's fsync succeeds. */
  readonly written: number;
  /** False: the client went away before the body's end. */
  readonly complete: boolean;
  readonly digest: Buffer | null;
  /** Why streaming stopped early (size limit, disk error); `written` bytes are still durable. */
  readonly error: Error | null;
}

/**
 * Must be called before the handler's first await: registers onData and pauses the socket, keeping
 * what arrives before pipe() (at most one uWS chunk after the pause).
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
    // uWS reuses the memory behind `ab` once we return. The sink copies every byte into its write
    // slots before returning, so it can read uWS's memory directly; only early bytes need a copy.
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
    pipe(fd, offset, limit, hashName, directFd = -1, feed = null) {
      return new Promise<PatchResult>((resolve) => {
        const hash: Hash | null = hashName === null ? null : createHash(hashName);
        const free: Buffer[] = [];
        let slots = 0;
        let cur: Buffer | null = null;
        let fill = 0;
        let received = 0;
        let written = 0;
        /** Where the next sealed slot goes. */
        let sealedTo = offset;
        /** Copies out at the hasher. */
        let hashing = 0;
        const queue: Array<{ buf: Buffer; len: number; at: number }> = [];
        /** Issued writes in file order; `written` advances over the finished, successful prefix. */
        const issued: Array<{ len: number; done: boolean; ok: boolean }> = [];
        let inFlight = 0;
        let broken = false;
        let finished = false;
        let failure: Error | null = null;
        let sawLast = false;
        /** Page-cache bytes issued since the last fdatasync started, and the prefix of `written` one covered. */
        let cachedSinceSync = 0;
        let synced = 0;
        let syncing = false;
        /** A failed sync: bytes past `synced` may be lost even if a later fsync succeeds. */
        let syncFailed = false;
        const startSync = (): void => {
          if (syncing || failure || written === synced) return;
          syncing = true;
          cachedSinceSync = 0;
          inFlight++;
          const upto = written;
          fs.fdatasync(fd, (err) => {
            inFlight--;
            syncing = false;
            if (err) {
              failure ??= err;
              syncFailed = true;
            } else synced = upto;
            pump();
          });
        };

        const settle = (): void => {
          if (finished || inFlight > 0) return;
          // After a failure, buffered bytes are dropped: only the durable prefix counts.
          if (!failure && queue.length > 0) return;
          if (failure || sawLast || ctx.aborted) {
            finished = true;
            // No write is in flight any more: every buffer can serve the next PATCH.
            for (const b of [...free, ...queue.map((q) => q.buf)]) spares.give(b);
            free.length = 0;
            queue.length = 0;
            resolve({ written: syncFailed ? synced : written, complete: sawLast && !failure, digest: hash ? hash.digest() : null, error: failure });
          }
        };
        /** Reads on once nothing holds the socket back (a write or a hash copy in flight resumes it). */
        const resume = (): void => {
          if (!failure && !ctx.done && !sawLast && queue.length < SLOTS / 2 && hashing < HASH_COPIES) res.resume();
        };
        const pump = (): void => {
          while (!failure && inFlight < WRITES && queue.length > 0) {
            const head = queue[0]!;
            const isDirect = directFd >= 0 && direct.supported && head.at % DIRECT_ALIGN === 0 && head.len % DIRECT_ALIGN === 0;
            if (!isDirect && cachedSinceSync + head.len > MAX_UNSYNCED) {
              startSync();
              break;
            }
            const next = queue.shift()!;
            if (!isDirect) cachedSinceSync += next.len;
            const rec = { len: next.len, done: false, ok: false };
            issued.push(rec);
            inFlight++;
            const write = isDirect ? writeDirect.bind(null, directFd) : writeFully.bind(null, fd);
            write(next.buf, 0, next.len, next.at, (err) => {
              inFlight--;
              rec.done = true;
              if (err) failure ??= err;
              else rec.ok = true;
              while (issued.length > 0 && issued[0]!.done) {
                const r = issued.shift()!;
                if (!r.ok) broken = true;
                if (!broken) written += r.len;
              }
              free.push(next.buf);
              if (cachedSinceSync >= SYNC_EVERY) startSync();
              resume();
              pump();
            });
          }
          settle();
        };
        const flush = (): void => {
          if (cur && fill > 0) {
            if (feed && !failure) {
              const copy = hashSpares.take();
              copy.set(cur.subarray(0, fill));
              hashing++;
              feed(sealedTo, copy.buffer as ArrayBuffer, fill, (back) => {
                hashing--;
                hashSpares.give(Buffer.from(back));
                resume();
              });
            }
            queue.push({ buf: cur, len: fill, at: sealedTo });
            sealedTo += fill;
          } else if (cur) free.push(cur);
          cur = null;
          fill = 0;
          pump();
        };
        /** A slot ends on a block boundary, so every full slot after the first starts on one. */
        const slotEnd = (): number =>
          directFd >= 0 && sealedTo % DIRECT_ALIGN !== 0 ? DIRECT_ALIGN - (sealedTo % DIRECT_ALIGN) : SLOT_BYTES;
        const take = (): Buffer => {
          const b = free.pop();
          if (b) return b;
          slots++;
          return spares.take();
        };
        sink = (chunk, last) => {
          if (finished || failure) return;
          if (offset + received + chunk.length > limit) {
            failure = new AppError('UPLOAD_TOO_LARGE', 'Body goes past Upload-Length or the size limit');
            ended = true;
            flush();
            return;
          }
          received += chunk.length;
          hash?.update(chunk);
          let at = 0;
          while (at < chunk.length) {
            cur ??= take();
            const end = slotEnd();
            const n = Math.min(chunk.length - at, end - fill);
            chunk.copy(cur, fill, at, at + n);
            fill += n;
            at += n;
            if (fill === end) flush();
          }
          if (last) {
            sawLast = true;
            // uWS keeps a paused socket paused across requests: a kept-alive connection would stall.
            if (!ctx.aborted) res.resume();
            flush();
          } else if (!ctx.aborted && (queue.length >= SLOTS / 2 || slots - free.length > SLOTS || hashing >= HASH_COPIES)) {
            // Buffers in use (not the ones ever allocated, which never shrinks): with that many
            // held, a write or a hash copy is in flight and its callback resumes; pausing with
            // none in flight would stall the request for good.
            res.pause();
          }
        };
        // The client went away: write what had arrived, then report it.
        onEnd = () => flush();
        for (const e of early.splice(0)) sink(e.buf, e.last);
        if (ctx.aborted) flush();
        else if (!failure) res.resume();
      });
    },
  };
}
