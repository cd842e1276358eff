import fs from 'node:fs';
import { createHash } from 'node:crypto';
import { crc32 } from 'node:zlib';
import type { Digest, Hasher, HashStream } from './hasher.ts';
import { spareBuffers } from './spare-buffers.ts';
import { alignUp, direct, giveStaging, withStaging } from './direct-io.ts';

/** Disk writes are coalesced into slots of this size (busboy hands out ~30 KB pieces). */
export const SLOT_BYTES = 1 << 20;
/**
 * Files up to this size are hashed on the event loop when they finish (microseconds for SHA-256
 * and CRC-32) instead of two round trips to the hash worker, which cost more than the hashing.
 */
const INLINE_HASH_BYTES = 256 * 1024;
/**
 * Slots per file: bounds memory per upload to SLOTS × SLOT_BYTES whatever the file size. Four keep
 * a write in flight while the next slot fills and one is being hashed; eight moved no faster here
 * and cost 4 MiB more per upload (32 MiB more with 8 uploads at once).
 */
const SLOTS = 4;
/** Two of uWS's largest chunks (512 KiB): see PartWriter.write. */
const ROOM_BYTES = 1 << 20;
/**
 * Every file starts in a slot this small, swapped for a full one once the file outgrows it: most
 * uploads by count are small, and a fresh 1 MiB buffer per 1 KiB file kept the GC busy.
 */
const FIRST_SLOT_BYTES = 64 * 1024;
/**
 * Durability while the file arrives. A file larger than its first slot is opened with O_DIRECT
 * (see direct-io.ts): each write goes straight to the disk, and the final fsync commits the
 * metadata and flushes the device cache. Where O_DIRECT is refused, and for a file written in one
 * piece, writes go through the page cache, with an fdatasync started whenever SYNC_EVERY more bytes
 * are written (one at a time) and writes held back while MAX_UNSYNCED are not yet synced: writeback
 * overlaps the upload, the final fsync has little left, and the dirty cache per upload stays
 * bounded. Measured here (1 GiB from memory, 3 writes in flight): page cache with these syncs
 * 0.9–1.15 GB/s, O_DSYNC writes 0.55–0.72, one fsync at the end 0.7–0.84; O_DIRECT ran at the disk's
 * speed of the moment (0.36–0.92) with 0.1 s of kernel CPU per GB instead of 2.2.
 */
const SYNC_EVERY = 16 << 20;
/** Must stay well above SLOT_BYTES: a write larger than it would wait for a sync that never starts. */
const MAX_UNSYNCED = 64 << 20;
/** Buffers of finished writers, reused by the next files. */
const firstSlots = spareBuffers(FIRST_SLOT_BYTES, 64);
const fullSlots = spareBuffers(SLOT_BYTES, 4);
const giveBack = (buf: Buffer): void => (buf.length === SLOT_BYTES ? fullSlots : firstSlots).give(buf);

export interface PartResult extends Digest {
  readonly size: number;
}

export interface PartWriter {
  readonly path: string;
  /**
   * Copies bytes into the write ring; what does not fit is referenced until copied, never modified.
   * False: the ring has less than ROOM_BYTES left (or holds a chunk); send no more until onDrain. The
   * headroom lets the rest of a socket chunk and one more after a pause land without being held.
   */
  write(chunk: Uint8Array): boolean;
  onDrain(fn: () => void): void;
  /** True while the writer still references a chunk given to write() (not yet copied). */
  holding(): boolean;
  /** Flushes, fsyncs and closes; resolves with size and hashes. */
  finish(): Promise<PartResult>;
  /** Stops writing and removes the part; safe to call at any time, more than once. */
  abort(): void;
}

interface Slot {
  /** Null while the hash worker holds the buffer. */
  view: Buffer | null;
  len: number;
  written: boolean;
}

/**
 * Streams one file into `path` (created exclusively, mode 0600). Incoming chunks are copied into
 * a ring of 1 MiB buffers (the first one 64 KiB) (plain ArrayBuffers: copies into shared memory are 10× slower when
 * unaligned); each full buffer is written with one positioned write, then transferred to the hash
 * worker in file order, and comes back to the ring when hashed.
 */
export function createPartWriter(path: string, hasher: Hasher, onError: (err: Error) => void): PartWriter {
  // Buffers are taken as the file needs them (a small file uses one small one) and given up when the
  // writer finishes or aborts, so a request with many files holds at most one ring at a time.
  const slots: Slot[] = [];
  const free: number[] = [];
  const takeSlot = (): number | undefined => {
    if (free.length > 0) {
      const i = free.shift()!;
      const s = slots[i]!;
      // Reused means the file outgrew the small first slot: a full one takes its place.
      if (s.view!.length < SLOT_BYTES) {
        giveBack(s.view!);
        s.view = fullSlots.take();
      }
      return i;
    }
    if (slots.length < SLOTS) {
      slots.push({ view: (slots.length === 0 ? firstSlots : fullSlots).take(), len: 0, written: false });
      return slots.length - 1;
    }
    return undefined;
  };
  const idle = (): boolean => free.length === slots.length;
  const room = (slot: number): number => slots[slot]!.view!.length;
  /** Accepts more without holding a reference: nothing queued and ROOM_BYTES of ring left. */
  const roomy = (): boolean =>
    overflow.length === 0 && (cur >= 0 ? room(cur) - fill : 0) + (free.length + SLOTS - slots.length) * SLOT_BYTES >= ROOM_BYTES;
  /** Drops the ring; `reuse` only when idle (no write or hash holds a buffer). */
  const release = (reuse: boolean): void => {
    if (reuse) for (const s of slots) if (s.view) giveBack(s.view);
    slots.length = 0;
    free.length = 0;
  };
  /** Submitted slots in file order, until handed to the hasher. */
  const order: number[] = [];
  const overflow: Uint8Array[] = [];
  let cur = -1;
  let fill = 0;
  let bytes = 0;
  let position = 0;
  let fd = -1;
  const waitingForFd: Array<() => void> = [];
  let writesInFlight = 0;
  let failed: Error | null = null;
  let aborted = false;
  let drainFn: (() => void) | null = null;
  let idleFn: (() => void) | null = null;

  /** Opened with the first slot handed over: a small file never needs one (see INLINE_HASH_BYTES). */
  let stream: HashStream | null = null;
  let inline = false;
  let inlineDigest: Digest | null = null;
  const hashStream = (): HashStream => (stream ??= hasher.open((slot, buf) => slotBack(slot, Buffer.from(buf))));

  function slotBack(slot: number, view: Buffer): void {
    const s = slots[slot];
    if (!s) return; // released after an abort
    s.view = view;
    free.push(slot);
    pump();
    if (drainFn && roomy()) {
      const fn = drainFn;
      drainFn = null;
      fn();
    }
    idleFn?.();
  }

  // The part is created with its first write. A file that fits its first slot is written once,
  // through the page cache, and fsynced once.
  let opening = false;
  let finishing = false;
  /** Writes go through staging buffers with O_DIRECT; a tail shorter than a block is padded. */
  let isDirect = false;
  /** The size to cut the file back to after a padded tail. */
  let truncateTo = -1;
  /** Direct writes issued and not yet finished (their slots may already be back in the ring). */
  let directPending = 0;
  function ensureOpen(): void {
    if (opening) return;
    opening = true;
    const tryDirect = direct.supported && !finishing;
    const flags = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL;
    fs.open(path, flags | (tryDirect ? fs.constants.O_DIRECT : 0), 0o600, (err, opened) => {
      if (err && tryDirect && err.code === 'EINVAL') {
        direct.supported = false; // this filesystem has no O_DIRECT
        opening = false;
        // Linux creates the file before refusing the flag: remove it, or O_EXCL fails the retry.
        return fs.unlink(path, () => ensureOpen());
      }
      if (err) return fail(err);
      // Aborted before the open landed: abort's unlink found nothing, so remove it here.
      if (aborted) return fs.close(opened, () => fs.unlink(path, () => {}));
      fd = opened;
      isDirect = tryDirect;
      for (const fn of waitingForFd.splice(0)) fn();
    });
  }

  /** Bytes handed to write(2), bytes it returned for, and bytes a finished fdatasync covered. */
  let issued = 0;
  let completed = 0;
  let synced = 0;
  let syncing = false;
  const waitingForSync: Array<() => void> = [];
  function syncIfDue(): void {
    if (syncing || aborted || failed || completed - synced < (waitingForSync.length > 0 ? 1 : SYNC_EVERY)) return;
    syncing = true;
    const upto = completed;
    writesInFlight++; // an abort meanwhile leaves the fd to us
    fs.fdatasync(fd, (err) => {
      writesInFlight--;
      syncing = false;
      if (aborted) return closeIfIdle();
      if (err) return fail(err);
      synced = upto;
      for (const fn of waitingForSync.splice(0)) fn();
      syncIfDue();
      idleFn?.();
    });
  }

  function closeIfIdle(): void {
    if (fd >= 0 && writesInFlight === 0) {
      fs.close(fd, () => {});
      fd = -1;
    }
  }

  function fail(err: Error): void {
    if (failed || aborted) return;
    failed = err;
    onError(err);
    idleFn?.();
  }

  /** Hands written slots to the hasher strictly in file order. */
  function toHasher(): void {
    while (order.length > 0 && slots[order[0]!]!.written) {
      const slot = order.shift()!;
      const s = slots[slot]!;
      const view = s.view!;
      if (inline) {
        const bytesOfFile = view.subarray(0, s.len);
        inlineDigest = { sha256: createHash('sha256').update(bytesOfFile).digest('hex'), crc32: crc32(bytesOfFile) >>> 0 };
        slotBack(slot, view);
        continue;
      }
      s.view = null;
      hashStream().update(view.buffer as ArrayBuffer, s.len, slot);
    }
  }

  function submit(slot: number, len: number): void {
    const s = slots[slot]!;
    s.len = len;
    s.written = false;
    order.push(slot);
    const at = position;
    position += len;
    // A short write (a disk filling up mid-buffer) continues from where it stopped; the retry then
    // fails with ENOSPC instead of the part silently missing the rest of the buffer.
    const doWrite = (done = 0): void => {
      if (aborted) return;
      writesInFlight++;
      fs.write(fd, s.view!, done, len - done, at + done, (err, n) => {
        writesInFlight--;
        if (aborted) return closeIfIdle();
        if (err) return fail(err);
        if (n === 0) return fail(new Error('write made no progress'));
        completed += n;
        if (done + n < len) return doWrite(done + n);
        finished();
      });
    };
    const finished = (): void => {
      s.written = true;
      syncIfDue();
      toHasher();
    };
    /**
     * Copies the slot into a staging buffer and writes that with O_DIRECT, padded to a whole block.
     * The slot goes on to the hasher at once: the file's writes in flight are bounded by the
     * staging pool, not by its ring, so the disk sees as deep a queue as the pool allows.
     */
    const directWrite = (): void =>
      withStaging((stage) => {
        if (aborted || failed) return false;
        const padded = alignUp(len);
        stage.set(s.view!.subarray(0, len));
        if (padded > len) {
          stage.fill(0, len, padded);
          truncateTo = at + len;
        }
        directPending++;
        const go = (from: number): void => {
          writesInFlight++;
          fs.write(fd, stage, from, padded - from, at + from, (err, n) => {
            writesInFlight--;
            const over = aborted || failed || err !== null || n === 0 || from + n === padded;
            if (over) {
              giveStaging(stage);
              directPending--;
            }
            if (aborted) return closeIfIdle();
            if (failed) return;
            // (createDisk probes O_DIRECT once; should a write still refuse it, later files skip it.)
            if (err?.code === 'EINVAL') direct.supported = false;
            if (err) return fail(err);
            if (n === 0) return fail(new Error('write made no progress'));
            if (from + n < padded) return go(from + n);
            idleFn?.();
          });
        };
        go(0);
        finished();
        return true;
      });
    const start = (): void => {
      if (isDirect) return directWrite();
      if (issued + len - synced > MAX_UNSYNCED) {
        waitingForSync.push(start);
        syncIfDue();
        return;
      }
      issued += len;
      doWrite();
    };
    if (fd >= 0) start();
    else {
      waitingForFd.push(start);
      ensureOpen();
    }
  }

  function pump(): void {
    while (overflow.length > 0 && !aborted && !failed) {
      if (cur < 0) {
        const next = takeSlot();
        if (next === undefined) return;
        cur = next;
        fill = 0;
      }
      const chunk = overflow[0]!;
      const n = Math.min(chunk.length, room(cur) - fill);
      slots[cur]!.view!.set(n === chunk.length ? chunk : chunk.subarray(0, n), fill);
      fill += n;
      if (n === chunk.length) overflow.shift();
      else overflow[0] = chunk.subarray(n);
      if (fill === room(cur)) {
        submit(cur, fill);
        cur = -1;
      }
    }
  }

  return {
    path,
    write(chunk) {
      if (aborted || failed) return true;
      if (chunk.length === 0) return roomy(); // would leave an empty slot that no write can store
      bytes += chunk.length;
      overflow.push(chunk);
      pump();
      return roomy();
    },
    onDrain(fn) {
      drainFn = fn;
    },
    holding: () => overflow.length > 0,
    finish() {
      finishing = true;
      return new Promise<PartResult>((resolve, reject) => {
        const complete = (): void => {
          if (aborted) return reject(new Error('part aborted'));
          if (failed) return reject(failed);
          if (overflow.length > 0) return; // the next ack pumps and calls us again
          // The whole file still sits in its first slot (nothing submitted, so nothing hashed): hash it
          // here. Once a slot went out, every slot goes to the worker, in order.
          if (stream === null && position === 0 && bytes <= INLINE_HASH_BYTES) inline = true;
          if (cur >= 0) {
            submit(cur, fill);
            cur = -1;
            return;
          }
          if (!idle() || syncing || directPending > 0) return;
          idleFn = null;
          release(true);
          /** Ends a closing step: false (and the promise rejected) when aborted or failed. */
          const stepOk = (err: Error | null): boolean => {
            writesInFlight--;
            if (!aborted && !err) return true;
            closeIfIdle();
            reject(aborted ? new Error('part aborted') : err);
            return false;
          };
          const close = (): void => {
            // Each step counts as a write in flight, so an abort meanwhile leaves the fd to us.
            writesInFlight++;
            if (truncateTo >= 0) {
              // Cut the padded last block back to the file's size; the fsync below covers it.
              const size = truncateTo;
              truncateTo = -1;
              return fs.ftruncate(fd, size, (err) => stepOk(err) && close());
            }
            fs.fsync(fd, (err) => {
              if (!stepOk(err)) return;
              const closing = fd;
              fd = -1;
              fs.close(closing, (err2) => {
                if (err2) return reject(err2);
                if (aborted) return reject(new Error('part aborted')); // its file is gone
                if (!inline) return hashStream().digest().then((d) => resolve({ size: bytes, ...d }), reject);
                // (an empty file never filled a slot)
                resolve({ size: bytes, ...(inlineDigest ?? { sha256: createHash('sha256').digest('hex'), crc32: 0 }) });
              });
            });
          };
          if (fd >= 0) close();
          else {
            waitingForFd.push(close);
            ensureOpen(); // an empty file: created here
          }
        };
        idleFn = complete;
        complete();
      });
    },
    abort() {
      if (aborted) return;
      aborted = true;
      stream?.discard();
      overflow.length = 0;
      release(false); // writes in flight still read their buffers
      fs.unlink(path, () => {});
      // Writes in flight finish against the unlinked inode; the last one closes the fd.
      closeIfIdle();
      idleFn?.(); // a pending finish() rejects
    },
  };
}
