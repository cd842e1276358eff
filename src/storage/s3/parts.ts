import { MAX_PARTS, partSize } from '../../util/s3-sizes.ts';
import { failUploads, partUploads, pump, settleUploads, type PartTarget, type UploadedPart } from './part-uploads.ts';
import { pageAligned } from '../../util/spare-buffers.ts';

export { MAX_PARTS, MIN_PART, partSize } from '../../util/s3-sizes.ts';
export type { UploadedPart } from './part-uploads.ts';

const EMPTY: Buffer = Buffer.alloc(0);
/**
 * takeFilling's copies from this size up are mappings of their own (pageAligned). A plain copy under
 * glibc's mmap threshold comes from malloc's heap: hundreds of small objects held for publishing
 * left it full of holes that kept the RSS up long after they were freed; a mapping goes back whole.
 */
const OWN_MAPPING = 4096;

/**
 * Cuts a stream of chunks into parts of partSize(n) bytes and uploads them to one multipart upload,
 * at most IN_FLIGHT (part-uploads.ts) at a time. Each chunk is copied once, into the part's own buffer, so callers
 * may reuse theirs. write() answers false while a full part waits for a free upload slot or no
 * part buffer is to be had from the pool: the caller's body pauses (backpressure to the socket)
 * until onDrain's callback runs.
 */
export interface PartQueue {
  write(chunk: Uint8Array): boolean;
  onDrain(fn: () => void): void;
  /** Bytes given to write() so far. */
  readonly received: () => number;
  /** Bytes in the part being filled (not yet cut). */
  readonly filling: () => number;
  /** Parts cut so far (uploaded, uploading or waiting). */
  readonly cut: () => number;
  /** Cuts the part being filled now, whatever its size (the last part of an object). */
  flush(): void;
  /** Drops all but the first `n` bytes of the part being filled (an append cut short by its caller). */
  shrink(n: number): void;
  /** A copy of the bytes of the part being filled, whose buffer goes back (an append's short tail). */
  takeFilling(): Buffer;
  /** Resolves once every cut part is uploaded; rejects with the first failure. */
  settle(): Promise<readonly UploadedPart[]>;
  /** Cancels uploads in flight; settle() then rejects. onError is not called for it. */
  abort(): void;
}

export interface PartQueueOptions extends PartTarget {
  /** Number of the first part this queue cuts (an append continues after the parts before it). */
  firstPart: number;
  /**
   * Told the bytes of the copies this queue held while no part buffer was to be had, once they are in
   * parts: garbage that only a collection frees. The caller's own chunks are not counted; they are
   * its to reuse, and collections they did not need would only move live objects to the old generation.
   */
  garbage?: (bytes: number) => void;
}

export function createPartQueue(o: PartQueueOptions): PartQueue {
  // Each uploaded part frees a slot, which may let the caller send more.
  const up = partUploads(o, maybeDrain);
  let part: Buffer = EMPTY;
  const held: Buffer[] = [];
  let heldBytes = 0;
  let fill = 0;
  let nextPart = o.firstPart;
  let received = 0;
  let drain: (() => void) | null = null;
  /** When this queue was first refused a buffer (ms), null while it is not waiting for one. */
  let waitingSince: number | null = null;

  const cut = () => {
    if (nextPart > MAX_PARTS) failUploads(up, new Error(`an object may have at most ${MAX_PARTS} parts`));
    // After a failure nothing more goes up: a part cut now would never be sent, nor its buffer given back.
    if (up.error) o.pool.give(part, fill);
    else up.waiting.push({ n: nextPart++, body: part.subarray(0, fill), buf: part });
    part = EMPTY;
    fill = 0;
    pump(up);
  };

  /** Whether the pool grants a new part buffer now; the first refusal starts this queue's wait. */
  const mayTake = () => {
    if (o.pool.mayTake(partSize(nextPart), waitingSince)) return true;
    waitingSince ??= Date.now();
    return false;
  };
  /** Makes sure a part buffer is being filled. `force`: the bytes must go in now (the end of the object), whatever the budget. */
  const bufferAtHand = (force = false) => {
    if (part.length > 0) return true;
    if (!force && !mayTake()) return false;
    waitingSince = null;
    part = o.pool.take(partSize(nextPart));
    return true;
  };

  /** Copies a chunk into part buffers, cutting each one as it fills; what finds no buffer is held in a copy. */
  const copyIn = (chunk: Uint8Array, force = false) => {
    let at = 0;
    while (at < chunk.length && !up.error) {
      if (!bufferAtHand(force)) {
        held.push(Buffer.from(chunk.subarray(at)));
        heldBytes += chunk.length - at;
        return;
      }
      const n = Math.min(part.length - fill, chunk.length - at);
      part.set(chunk.subarray(at, at + n), fill);
      fill += n;
      at += n;
      if (fill === part.length) cut();
    }
  };

  /** Moves held chunks into part buffers, as far as buffers are to be had (all of them with `force`). */
  const absorb = (force = false) => {
    const chunks = held.splice(0);
    heldBytes = 0;
    let dropped = 0;
    for (const c of chunks) {
      if (held.length > 0) {
        held.push(c);
        heldBytes += c.length;
      } else {
        copyIn(c, force);
        dropped += c.length;
      }
    }
    if (dropped > 0) o.garbage?.(dropped);
  };

  /** Whether the caller may send more: no part waits for an upload slot, nothing is held, and a buffer is at hand or to be had. */
  const ready = () => up.waiting.length === 0 && held.length === 0 && (part.length > 0 || mayTake());

  function maybeDrain(): void {
    if (!drain || up.error) return;
    if (held.length > 0) absorb();
    if (up.waiting.length > 0) return; // the upload that frees a slot calls again
    if (!ready()) {
      o.pool.onFree(maybeDrain);
      return;
    }
    const fn = drain;
    drain = null;
    fn();
  }

  return {
    write(chunk) {
      if (up.error) return true;
      received += chunk.length;
      if (held.length > 0) {
        held.push(Buffer.from(chunk));
        heldBytes += chunk.length;
        return false;
      }
      copyIn(chunk);
      return ready();
    },
    onDrain(fn) {
      drain = fn;
      // Never from inside this call: a caller may register before it pauses its body.
      queueMicrotask(maybeDrain);
    },
    received: () => received,
    filling: () => fill + heldBytes,
    cut: () => nextPart - o.firstPart,
    flush() {
      absorb(true);
      if (fill > 0) cut();
    },
    shrink(n) {
      absorb(true);
      fill = Math.min(fill, n);
    },
    takeFilling() {
      absorb(true);
      const out = fill >= OWN_MAPPING ? pageAligned(fill) : Buffer.allocUnsafe(fill);
      out.set(part.subarray(0, fill));
      if (part.length > 0) o.pool.give(part, fill);
      part = EMPTY;
      fill = 0;
      return out;
    },
    settle: () => settleUploads(up),
    abort() {
      // The caller's own decision: no onError for it.
      failUploads(up, new Error('aborted'), false);
      if (part.length > 0) o.pool.give(part, fill);
      part = EMPTY;
      fill = 0;
    },
  };
}
