/**
 * A free list of same-size buffers, so hot upload paths reuse warm memory instead of allocating
 * (page faults, then GC of external memory) per chunk, slot or PATCH. Give a buffer back only once
 * nothing reads or writes it any more; at most `max` are kept.
 */
export interface SpareBuffers {
  take(): Buffer;
  /** False when the buffer was not kept (the list is full, or it is not of the list's size). */
  give(buf: Buffer): boolean;
}

/**
 * A page-aligned buffer. The kernel's copy from the page cache into user memory (every fs.read of a
 * cached file) can run at a fraction of its speed when the destination starts a few bytes past a
 * 64-byte line (AMD EPYC; `rep movsb` over a short source-destination distance; bench/RESULTS.md),
 * and malloc's large chunks start 16 bytes into their page, so Buffer.allocUnsafeSlow buffers of
 * 1 MiB usually do. V8 maps a resizable ArrayBuffer's memory in whole pages itself; with
 * maxByteLength equal to the size it reserves nothing more, and it is freed by GC like any other.
 */
export function pageAligned(size: number): Buffer {
  const Resizable = ArrayBuffer as unknown as new (length: number, options: { maxByteLength: number }) => ArrayBuffer;
  return Buffer.from(new Resizable(size, { maxByteLength: size }));
}

/**
 * Gives a pageAligned buffer's memory back to the system now (V8 shrinks it in place, zeroing it,
 * then discards its pages) instead of when a collection finds it; every view of it is then empty.
 * Only for a buffer nothing can read or write any more, not even a socket write still in flight,
 * and worth it only where its pages are in memory (the zeroing touches every one).
 */
export function unmapNow(buf: Buffer): void {
  const ab = buf.buffer as ArrayBuffer & { resizable?: boolean; resize?: (n: number) => void };
  if (ab.resizable === true) ab.resize!(0);
}

/** Fresh allocations per pool name since start: a steady climb under load means buffers are not coming back. */
const fresh = new Map<string, number>();
export const freshAllocations = (): ReadonlyMap<string, number> => fresh;

export function spareBuffers(
  name: string,
  size: number,
  max: number,
  allocate: (size: number) => Buffer = Buffer.allocUnsafeSlow,
): SpareBuffers {
  const list: Buffer[] = [];
  fresh.set(name, 0);
  return {
    take() {
      const kept = list.pop();
      if (kept) return kept;
      fresh.set(name, fresh.get(name)! + 1);
      return allocate(size);
    },
    give(buf) {
      if (buf.length !== size || list.length >= max) return false;
      list.push(buf);
      return true;
    },
  };
}
