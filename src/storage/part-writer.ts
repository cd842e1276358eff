import fs from 'node:fs';
import { crc32 } from 'node:zlib';
import type { Digest, Hasher, HashStream } from './hasher.ts';

/** Disk writes are coalesced into slots of this size (busboy hands out ~30 KB pieces). */
export const SLOT_BYTES = 1 << 20;
/** Slots per file: bounds memory per upload to SLOTS × SLOT_BYTES whatever the file size. */
const SLOTS = 8;

export interface PartResult extends Digest {
  readonly size: number;
  readonly crc32: number;
}

export interface PartWriter {
  readonly path: string;
  readonly bytes: () => number;
  /** Queues bytes (the chunk is referenced until copied, never modified). False: wait for onDrain. */
  write(chunk: Uint8Array): boolean;
  onDrain(fn: () => void): void;
  /** Flushes, fsyncs and closes; resolves with size and hashes. */
  finish(): Promise<PartResult>;
  /** Stops writing and removes the part; safe to call at any time, more than once. */
  abort(): void;
}

interface Slot {
  readonly sab: SharedArrayBuffer;
  readonly view: Buffer;
  /** Outstanding readers of the slot: the disk write and the hash worker. */
  pending: number;
}

/**
 * Streams one file into `path` (created exclusively, mode 0600): copies incoming chunks into a
 * ring of shared buffers, writes each full buffer with one positioned write, and lets the hash
 * worker read the same buffer concurrently. A buffer is reused once both are done with it.
 */
export function createPartWriter(path: string, hasher: Hasher, onError: (err: Error) => void): PartWriter {
  const slots: Slot[] = [];
  const free: number[] = [];
  for (let i = 0; i < SLOTS; i++) {
    const sab = new SharedArrayBuffer(SLOT_BYTES);
    slots.push({ sab, view: Buffer.from(sab), pending: 0 });
    free.push(i);
  }
  const overflow: Uint8Array[] = [];
  let cur = -1;
  let fill = 0;
  let bytes = 0;
  let position = 0;
  let fd = -1;
  const waitingForFd: Array<() => void> = [];
  let writesInFlight = 0;
  let crc = 0;
  let failed: Error | null = null;
  let aborted = false;
  let drainFn: (() => void) | null = null;
  let idleFn: (() => void) | null = null;

  const hash: HashStream = hasher.open((slot) => release(slot));

  fs.open(path, 'wx', 0o600, (err, opened) => {
    if (err) return fail(err);
    if (aborted) return fs.close(opened, () => {});
    fd = opened;
    for (const fn of waitingForFd.splice(0)) fn();
  });

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

  function release(slot: number): void {
    const s = slots[slot]!;
    if (--s.pending === 0) {
      free.push(slot);
      pump();
      if (overflow.length === 0 && drainFn) {
        const fn = drainFn;
        drainFn = null;
        fn();
      }
      if (idleFn) idleFn();
    }
  }

  function submit(slot: number, len: number): void {
    const s = slots[slot]!;
    s.pending = 2;
    // CRC-32 (~3 GB/s) here keeps the worker on SHA-256 alone, the slower of the two.
    crc = crc32(s.view.subarray(0, len), crc);
    hash.update(s.sab, len, slot);
    const at = position;
    position += len;
    const doWrite = (): void => {
      if (aborted) return;
      writesInFlight++;
      fs.write(fd, s.view, 0, len, at, (err) => {
        writesInFlight--;
        if (aborted) return closeIfIdle();
        if (err) fail(err);
        release(slot);
      });
    };
    if (fd >= 0) doWrite();
    else waitingForFd.push(doWrite);
  }

  function pump(): void {
    while (overflow.length > 0 && !aborted && !failed) {
      if (cur < 0) {
        const next = free.shift();
        if (next === undefined) return;
        cur = next;
        fill = 0;
      }
      const chunk = overflow[0]!;
      const n = Math.min(chunk.length, SLOT_BYTES - fill);
      slots[cur]!.view.set(n === chunk.length ? chunk : chunk.subarray(0, n), fill);
      fill += n;
      if (n === chunk.length) overflow.shift();
      else overflow[0] = chunk.subarray(n);
      if (fill === SLOT_BYTES) {
        submit(cur, fill);
        cur = -1;
      }
    }
  }

  return {
    path,
    bytes: () => bytes,
    write(chunk) {
      if (aborted || failed) return true;
      bytes += chunk.length;
      overflow.push(chunk);
      pump();
      return overflow.length === 0 && (cur >= 0 || free.length > 0);
    },
    onDrain(fn) {
      drainFn = fn;
    },
    finish() {
      return new Promise<PartResult>((resolve, reject) => {
        const complete = (): void => {
          if (failed) return reject(failed);
          if (overflow.length > 0) return; // release() pumps; we come back via idleFn
          if (cur >= 0) {
            submit(cur, fill);
            cur = -1;
            return;
          }
          if (free.length < SLOTS) return;
          idleFn = null;
          const close = (): void => {
            fs.fsync(fd, (err) => {
              if (err) return reject(err);
              fs.close(fd, (err2) => {
                fd = -1;
                if (err2) return reject(err2);
                hash.digest().then((d) => resolve({ size: bytes, sha256: d.sha256, crc32: crc >>> 0 }), reject);
              });
            });
          };
          if (fd >= 0) close();
          else waitingForFd.push(close);
        };
        idleFn = complete;
        complete();
      });
    },
    abort() {
      if (aborted) return;
      aborted = true;
      hash.discard();
      overflow.length = 0;
      fs.unlink(path, () => {});
      // Writes in flight finish against the unlinked inode; the last one closes the fd.
      closeIfIdle();
    },
  };
}
