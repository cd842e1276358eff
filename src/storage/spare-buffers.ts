/**
 * A free list of same-size buffers, so hot upload paths reuse warm memory instead of allocating
 * (page faults, then GC of external memory) per chunk, slot or PATCH. Give a buffer back only once
 * nothing reads or writes it any more; at most `max` are kept.
 */
export interface SpareBuffers {
  take(): Buffer;
  give(buf: Buffer): void;
}

export function spareBuffers(size: number, max: number): SpareBuffers {
  const list: Buffer[] = [];
  return {
    take: () => list.pop() ?? Buffer.allocUnsafeSlow(size),
    give(buf) {
      if (buf.length === size && list.length < max) list.push(buf);
    },
  };
}
