/**
 * A free list of same-size buffers, so hot upload paths reuse warm memory instead of allocating
 * (page faults, then GC of external memory) per chunk, slot or PATCH. Give a buffer back only once
 * nothing reads or writes it any more; at most `max` are kept.
 */
export interface SpareBuffers {
  take(): Buffer;
  give(buf: Buffer): void;
}

/** Fresh allocations per pool name since start: a steady climb under load means buffers are not coming back. */
const fresh = new Map<string, number>();
export const freshAllocations = (): ReadonlyMap<string, number> => fresh;

export function spareBuffers(name: string, size: number, max: number): SpareBuffers {
  const list: Buffer[] = [];
  fresh.set(name, 0);
  return {
    take() {
      const kept = list.pop();
      if (kept) return kept;
      fresh.set(name, fresh.get(name)! + 1);
      return Buffer.allocUnsafeSlow(size);
    },
    give(buf) {
      if (buf.length === size && list.length < max) list.push(buf);
    },
  };
}
