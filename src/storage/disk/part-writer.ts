import { createHash, type Hash } from 'node:crypto';
import type { Hasher } from '../hasher.ts';
import { createPartFile } from './part-file.ts';
import { DIRECT_ALIGN, type DirectIo } from './direct-io.ts';
import type { BlobWriter } from '../blob-store.ts';
import { INLINE_HASH_BYTES, ringLimit, ROOM_BYTES, SLOT_BYTES, type WriterCount } from './slots.ts';
import { openRing, outgrow, putBack, releaseRing, ringIdle, takeSlot } from './ring.ts';
import { hashFeed, hashStream, toHasher } from './hash-feed.ts';

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

/**
 * Streams one file into `path`. Incoming chunks are copied into a ring of 1 MiB buffers, page-aligned
 * so that the part file writes them with O_DIRECT as they are (a file starts in a 64 KiB one of
 * ordinary memory, and moves into a full one once it outgrows it: outgrow in ring.ts); each full
 * buffer is handed to the part file (part-file.ts: the writes, syncs and durability), then, once
 * written, transferred to the hash worker in file order, and comes back to the ring when hashed.
 */
export function createPartWriter(path: string, opts: PartWriterOptions): PartWriter {
  const { hasher, io, count, onError, append } = opts;
  const ring = openRing(count);
  const { slots, free } = ring;
  const feed = hashFeed(hasher, append, slots, slotBack);
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
    (cur >= 0 ? room(cur) - fill : 0) + (free.length + Math.max(0, ringLimit(count) - ring.live)) * SLOT_BYTES >= ROOM_BYTES;
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

  function slotBack(slot: number, view: Buffer): void {
    if (!putBack(ring, slot, view)) return;
    // Closing: the file is complete, and the ring goes back to the pool once the hasher returns the last buffer.
    if (closing) {
      if (ringIdle(ring)) releaseRing(ring, true);
      return releaseProducer();
    }
    pump();
    if (roomy()) releaseProducer();
    idleFn?.();
  }

  /** Set by finish(): a file whose first write comes now is written in one piece. */
  let finishing = false;
  /** Set once every byte is written: the file is being synced and closed. */
  let closing = false;
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

  function submit(slot: number, len: number): void {
    const s = slots[slot]!;
    s.len = len;
    s.written = false;
    feed.order.push(slot);
    const at = position;
    s.at = at;
    position += len;
    const released = (): void => {
      s.written = true;
      toHasher(feed);
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
        const next = takeSlot(ring);
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
      if (fill < room(cur)) continue;
      const size = slots[cur]!.view!.length;
      if (size < SLOT_BYTES && fill === size) outgrow(ring, cur, fill);
      else sealCur();
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
          if (!append && feed.stream === null && position === 0 && bytes <= INLINE_HASH_BYTES) feed.inline = true;
          if (cur >= 0) {
            sealCur();
            return;
          }
          // Every byte written (each slot then went to the hasher, in order): the sync need not wait for
          // the hasher to hand the last buffers back, nor the checksum for the sync.
          if (feed.order.length > 0 || file.busy()) return;
          idleFn = null;
          closing = true;
          if (ringIdle(ring)) releaseRing(ring, true);
          // A producer still waiting for room (its last write filled the ring) goes on: nothing more is written.
          releaseProducer();
          const sha256 = sha ? sha.digest('hex') : null;
          const crc =
            append || feed.inline ? Promise.resolve(feed.inlineDigest?.crc32 ?? 0) : hashStream(feed).digest().then((d) => d.crc32);
          // (an empty file never filled a slot; an append's CRC-32 is the hasher's, under its key)
          Promise.all([file.close(), crc]).then(([, crc32]) => resolve({ size: bytes, crc32, sha256 }), reject);
        };
        idleFn = complete;
        complete();
      });
    },
    abort() {
      if (aborted) return;
      aborted = true;
      feed.stream?.discard();
      overflow.length = 0;
      releaseRing(ring, false); // writes in flight still read their buffers
      file.abort();
      idleFn?.(); // a pending finish() rejects
      releaseProducer();
    },
  };
}
