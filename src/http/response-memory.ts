import { pageAligned, spareBuffers } from '../util/spare-buffers.ts';

/** A turn in the queue for response memory. */
export interface MemoryTurn {
  /** The buffer, once the budget has room for it and every earlier turn was served. */
  readonly buffer: Promise<Buffer>;
  /** Leaves the queue; a buffer already handed over goes back. */
  cancel(): void;
}

/**
 * The read buffers of every streamed response of the process, under one byte budget. A response
 * that finds the budget spent waits its turn (first come, first served) holding nothing; one that
 * waits on its client gives its buffers back when anyone is queued (`onWanted`), so clients that
 * stop reading cannot keep memory from those that read.
 */
export interface ResponseMemory {
  /** A buffer of `size` bytes now, or null when that would pass the budget or others are queued. */
  tryTake(size: number): Buffer | null;
  /** A buffer of `size` bytes in turn. */
  take(size: number): MemoryTurn;
  /** Gives a buffer back; nothing may read or write it any more. */
  give(buf: Buffer): void;
  /**
   * Runs `fn` once, when a response starts to wait for memory (or at once if one does); the
   * returned function unregisters it.
   */
  onWanted(fn: () => void): () => void;
  /** Bytes handed out and not yet given back. */
  inUse(): number;
  /** Responses waiting for a buffer. */
  waiting(): number;
}

/**
 * `pooledSize` buffers are page-aligned and reused (`spares` of them kept); other sizes are
 * allocated for one response. Buffers past the spares are dropped, and `collect` (a full
 * collection soon) is called, so a burst of downloads does not leave its memory resident.
 */
export function createResponseMemory(budget: number, pooledSize: number, spares: number, collect: () => void): ResponseMemory {
  const pool = spareBuffers('download', pooledSize, spares, pageAligned);
  const allocate = (size: number): Buffer => (size === pooledSize ? pool.take() : Buffer.allocUnsafeSlow(size));
  const queue: Array<{ size: number; hand: (b: Buffer) => void }> = [];
  const wanted = new Set<() => void>();
  let used = 0;

  const fits = (size: number): boolean => used === 0 || used + size <= budget;
  const serve = (): void => {
    while (queue.length > 0 && fits(queue[0]!.size)) {
      const next = queue.shift()!;
      used += next.size;
      next.hand(allocate(next.size));
    }
  };
  const tellWanted = (): void => {
    const fns = [...wanted];
    wanted.clear();
    for (const fn of fns) fn();
  };
  const memory: ResponseMemory = {
    tryTake(size) {
      if (queue.length > 0 || !fits(size)) return null;
      used += size;
      return allocate(size);
    },
    take(size) {
      const now = memory.tryTake(size);
      if (now) return { buffer: Promise.resolve(now), cancel: () => memory.give(now) };
      let handed: Buffer | null = null;
      let cancelled = false;
      let entry!: { size: number; hand: (b: Buffer) => void };
      const buffer = new Promise<Buffer>((resolve) => {
        entry = {
          size,
          hand: (b) => {
            if (cancelled) return memory.give(b);
            handed = b;
            resolve(b);
          },
        };
      });
      queue.push(entry);
      tellWanted();
      return {
        buffer,
        cancel() {
          if (cancelled) return;
          cancelled = true;
          const i = queue.indexOf(entry);
          if (i >= 0) queue.splice(i, 1);
          if (handed) memory.give(handed);
        },
      };
    },
    give(buf) {
      used -= buf.length;
      if (buf.length === pooledSize && !pool.give(buf)) collect();
      serve();
    },
    onWanted(fn) {
      if (queue.length > 0) {
        fn();
        return () => {};
      }
      wanted.add(fn);
      return () => void wanted.delete(fn);
    },
    inUse: () => used,
    waiting: () => queue.length,
  };
  return memory;
}
