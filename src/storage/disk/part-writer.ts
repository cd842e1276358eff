import { crc32 } from 'node:zlib';
import { createHash, type Hash } from 'node:crypto';
import type { Digest, Hasher, HashStream } from '../hasher.ts';
import { createPartFile } from './part-file.ts';
import { DIRECT_ALIGN, type DirectIo } from './direct-io.ts';
import type { BlobWriter } from '../blob-store.ts';
import { firstSlots, fullSlots, giveBack, INLINE_HASH_BYTES, ringLimit, ROOM_BYTES, SLOT_BYTES, type WriterCount } from './slots.ts';

export interface PartResult {
  readonly size: number;
  /** 0 for an append (its CRC-32 is followed by the hasher under its key). */
  readonly crc32: number;
  readonly sha256: string | null;
}

export interface PartWriterOptions {
  readonly hasher: Hasher;
  readonly io: DirectIo;
  readonly count: WriterCount;
  readonly onError: (err: Error) => void;
  readonly sha256?: boolean;
  /**
   * Write into the existing file from `at` on (a resumable's append) instead of creating it; the
   * bytes are fed to the hasher's state for `feedKey` (see Hasher.feedAhead), unless it is null.
   */
  readonly append?: { readonly at: number; readonly feedKey: string | null };
}

/** One part file's writer; write/onDrain/holding behave as BlobWriter's (ROOM_BYTES of headroom: see slots.ts). */
export interface PartWriter extends Pick<BlobWriter, 'write' | 'onDrain' | 'holding'> {
  readonly path: string;
  /** Flushes, fsyncs and closes; resolves with size and CRC-32 (bytes written, for an append). */
  finish(): Promise<PartResult>;
  /** Stops writing and removes the part; safe to call at any time, more than once. */
  abort(): void;
}

interface Slot {
  /** Null while the hash worker holds the buffer. */
  view: Buffer | null;
  len: number;
  /** The part file is done with the buffer (written, or copied for a direct write). */
  written: boolean;
  /** File offset of the slot's bytes. */
  at: number;
}

/**
 * Streams one file into `path`. Incoming chunks are copied into a ring of 1 MiB buffers (the first
 * one 64 KiB; plain ArrayBuffers, as copies into shared memory are 10× slower when unaligned); each
 * full buffer is handed to the part file (part-file.ts: the writes, syncs and durability), then,
 * once the file has released it, transferred to the hash worker in file order, and comes back to
 * the ring when hashed.
 */
export function createPartWriter(path: string, opts: PartWriterOptions): PartWriter {
  const { hasher, io, count, onError, append } = opts;
  // Buffers are taken as the file needs them (a small file uses one small one) and given up when the
  // writer finishes or aborts, so a request with many files holds at most one ring at a time.
  const slots: Slot[] = [];
  const free: number[] = [];
  /** Slot numbers whose buffer was given back because the ring shrank (see slotBack). */
  const retired: number[] = [];
  /** Slots holding a buffer: slots.length less the retired ones. */
  let live = 0;
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
    if (live < ringLimit(count)) {
      live++;
      const i = retired.pop();
      if (i !== undefined) {
        slots[i]!.view = fullSlots.take();
        return i;
      }
      slots.push({ view: (slots.length === 0 ? firstSlots : fullSlots).take(), len: 0, written: false, at: 0 });
      return slots.length - 1;
    }
    return undefined;
  };
  const idle = (): boolean => free.length === live;
  /**
   * Bytes the slot takes: all of it, except that a slot starting off a block boundary (the first of
   * an append at an unaligned offset) ends on the next one, so every later slot can go direct.
   */
  const room = (slot: number): number => {
    const len = slots[slot]!.view!.length;
    return position % DIRECT_ALIGN === 0 ? len : Math.min(len, DIRECT_ALIGN - (position % DIRECT_ALIGN));
  };
  /** Accepts more without holding a reference: nothing queued and ROOM_BYTES of ring left. */
  const roomy = (): boolean =>
    overflow.length === 0 &&
    (cur >= 0 ? room(cur) - fill : 0) + (free.length + Math.max(0, ringLimit(count) - live)) * SLOT_BYTES >= ROOM_BYTES;
  count.active++;
  let counted = true;
  /** Drops the ring; `reuse` only when idle (no write or hash holds a buffer). */
  const release = (reuse: boolean): void => {
    if (counted) count.active--;
    counted = false;
    if (reuse) for (const s of slots) if (s.view) giveBack(s.view);
    slots.length = 0;
    free.length = 0;
    retired.length = 0;
    live = 0;
  };
  /** Submitted slots in file order, until handed to the hasher. */
  const order: number[] = [];
  const overflow: Uint8Array[] = [];
  let cur = -1;
  let fill = 0;
  let bytes = 0;
  let position = append?.at ?? 0;
  const sha: Hash | null = opts.sha256 ? createHash('sha256') : null;
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
    if (live > ringLimit(count)) {
      // More writers joined since this ring grew: give the buffer to them (a burst of uploads holds
      // BUSY_SLOTS each, which the spares kept cover, not the SLOTS its first writers grew to).
      giveBack(view);
      s.view = null;
      live--;
      retired.push(slot);
    } else {
      s.view = view;
      free.push(slot);
    }
    pump();
    if (roomy()) releaseProducer();
    idleFn?.();
  }

  /** Set by finish(): a file whose first write comes now is written in one piece. */
  let finishing = false;
  const file = createPartFile(path, { io, append: append !== undefined }, (err) => fail(err), () => idleFn?.());

  /** Runs the producer's drain callback: room again, or a stopped writer (whose write() takes anything). */
  function releaseProducer(): void {
    const fn = drainFn;
    drainFn = null;
    fn?.();
  }

  function fail(err: Error): void {
    if (failed || aborted) return;
    failed = err;
    onError(err);
    idleFn?.();
    releaseProducer();
  }

  /** Hands written slots to the hasher strictly in file order. */
  function toHasher(): void {
    while (order.length > 0 && slots[order[0]!]!.written) {
      const slot = order.shift()!;
      const s = slots[slot]!;
      const view = s.view!;
      if (append) {
        if (append.feedKey === null) slotBack(slot, view);
        else {
          s.view = null;
          hasher.feedAhead(append.feedKey, s.at, view.buffer as ArrayBuffer, s.len, (buf) => slotBack(slot, Buffer.from(buf)));
        }
        continue;
      }
      if (inline) {
        const bytesOfFile = view.subarray(0, s.len);
        inlineDigest = { crc32: crc32(bytesOfFile) >>> 0 };
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
    s.at = at;
    position += len;
    const released = (): void => {
      s.written = true;
      toHasher();
    };
    file.write(s.view!, len, at, released, finishing);
  }

  /** Submits the slot being filled; `cur` is cleared first, as a slot handed back during submit re-enters pump. */
  function sealCur(): void {
    const slot = cur;
    cur = -1;
    submit(slot, fill);
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
      if (fill === room(cur)) sealCur();
    }
  }

  return {
    path,
    write(chunk, transient = false) {
      if (aborted || failed) return true;
      if (chunk.length === 0) return roomy(); // would leave an empty slot that no write can store
      bytes += chunk.length;
      sha?.update(chunk);
      overflow.push(chunk);
      pump();
      if (transient && overflow.length > 0 && overflow[overflow.length - 1]!.buffer === chunk.buffer) {
        overflow[overflow.length - 1] = Buffer.from(overflow[overflow.length - 1]!);
      }
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
          if (!append && stream === null && position === 0 && bytes <= INLINE_HASH_BYTES) inline = true;
          if (cur >= 0) {
            sealCur();
            return;
          }
          if (!idle() || file.busy()) return;
          idleFn = null;
          release(true);
          const sha256 = sha ? sha.digest('hex') : null;
          file.close().then(() => {
            if (append) return resolve({ size: bytes, crc32: 0, sha256 });
            if (!inline) return hashStream().digest().then((d) => resolve({ size: bytes, crc32: d.crc32, sha256 }), reject);
            // (an empty file never filled a slot)
            resolve({ size: bytes, crc32: inlineDigest?.crc32 ?? 0, sha256 });
          }, reject);
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
      file.abort();
      idleFn?.(); // a pending finish() rejects
      releaseProducer();
    },
  };
}
