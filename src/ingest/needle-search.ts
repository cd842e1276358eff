// The search for a multipart delimiter in a chunk (fast-search.ts uses it in place of streamsearch's scan).
/**
 * Below this many bytes to scan, Buffer#indexOf; above it, see findNeedle. Also the length of the
 * probe that decides between them.
 */
const LANES_MIN = 4096;
/** A probe that finds this many of the needle's first byte sees random-like data. */
const PROBE_HITS = 4;

/** Set in a shift-table entry (skipTable) when the byte is the needle's last: a window there may match. */
const LAST_BYTE = 0x100;
const SHIFT = 0xff;

/**
 * Boyer-Moore-Horspool shifts: for each byte, how far a window may move when it is the window's last
 * (the low 8 bits), with LAST_BYTE added for the needle's own last byte.
 */
export function skipTable(needle: Uint8Array): Uint16Array {
  const last = needle.length - 1;
  const skip = new Uint16Array(256).fill(Math.min(needle.length, 255));
  for (let i = Math.max(0, last - 254); i < last; i++) skip[needle[i]!] = last - i;
  skip[needle[last]!]! |= LAST_BYTE;
  return skip;
}

/**
 * The first `needle` in `hay` at or after `from`, or -1: what hay.indexOf(needle, from) returns.
 *
 * Node's search walks to each occurrence of the needle's first byte (memchr) and turns to
 * Boyer-Moore-Horspool once those come often. Text and most uncompressed data rarely hold a CR
 * (a multipart needle begins "\r\n--"), and there memchr is nearly free. Compressed media, archives
 * and random bytes, which make most large uploads, hold one every 256 bytes, and there each Horspool
 * step waits on the load the previous one computed. For such data, probed by counting first bytes,
 * the chunk is cut into four lanes searched in one loop, so four of those loads are in flight at
 * once (figures: bench/RESULTS.md, "Design notes moved from the code"). Should a lane meet many near misses
 * (crafted input costs Horspool up to a needle's length per byte), the search starts over natively,
 * whose Boyer-Moore stays linear.
 *
 * Each lane holds the position of the byte it reads (a window's last). The inner loop runs as many
 * steps as every lane has room for, so a step tests no lane's end; one test of the four table entries'
 * LAST_BYTE bits stands for four comparisons with the needle's last byte; and `| 0` keeps the sums
 * integer additions, which V8 then does without overflow checks (instructions per byte before and
 * after: bench/RESULTS.md, "Design notes moved from the code").
 */
export function findNeedle(hay: Buffer, needle: Buffer, skip: Uint16Array, from: number): number {
  const n = needle.length;
  const end = hay.length - n; // the last start a needle fits at
  if (end - from < LANES_MIN || n < 8 || !randomLike(hay, needle[0]!, from)) return hay.indexOf(needle, from);
  const last = n - 1;
  const longest = Math.min(n, 255); // the longest shift
  // Bytes compared in near misses, against a budget of one per four bytes scanned, plus slack.
  let work = 0;
  const budget = ((end - from) >> 2) + 4096;
  // Lane k reads the last byte of the windows starting in [its start, the next lane's start): bytes
  // e in [its first, xk). Together, every start from `from` to `end`.
  const q = ((end - from + 1) / 4) | 0;
  const x0 = from + q + last;
  const x1 = x0 + q;
  const x2 = x1 + q;
  const x3 = end + 1 + last;
  let e0 = from + last;
  let e1 = x0;
  let e2 = x1;
  let e3 = x2;
  let f1 = -1;
  let f2 = -1;
  let f3 = -1;
  for (;;) {
    const room = Math.min(x0 - e0, x1 - e1, x2 - e2, x3 - e3);
    if (room <= 0) break;
    // Steps every lane can take without passing its end, whatever the shifts.
    let steps = (((room - 1) / longest) | 0) + 1;
    for (; steps > 0; steps--) {
      const s0 = skip[hay[e0]!]!;
      const s1 = skip[hay[e1]!]!;
      const s2 = skip[hay[e2]!]!;
      const s3 = skip[hay[e3]!]!;
      if (((s0 | s1 | s2 | s3) & LAST_BYTE) !== 0) break;
      e0 = (e0 + s0) | 0;
      e1 = (e1 + s1) | 0;
      e2 = (e2 + s2) | 0;
      e3 = (e3 + s3) | 0;
    }
    if (steps === 0) continue;
    // A lane stands on the needle's last byte: compare there, then every lane takes its step. A later
    // lane's find ends that lane; the ones to its left may still find an earlier one.
    let r = tried(hay, needle, skip, e0);
    if (r < 0) return e0 - last; // lane 0 holds the leftmost starts
    work += r;
    if ((r = tried(hay, needle, skip, e1)) < 0) f1 = e1 - last;
    else work += r;
    if ((r = tried(hay, needle, skip, e2)) < 0) f2 = e2 - last;
    else work += r;
    if ((r = tried(hay, needle, skip, e3)) < 0) f3 = e3 - last;
    else work += r;
    e0 += skip[hay[e0]!]! & SHIFT;
    e1 += skip[hay[e1]!]! & SHIFT;
    e2 += skip[hay[e2]!]! & SHIFT;
    e3 += skip[hay[e3]!]! & SHIFT;
    if (work > budget) return hay.indexOf(needle, from);
    if (f1 >= 0 || f2 >= 0 || f3 >= 0) break;
  }
  return finishLanes(hay, needle, skip, [e0, x0, -1, e1, x1, f1, e2, x2, f2, e3, x3, f3], work, budget, from);
}

/** Whether the LANES_MIN bytes at `from` hold PROBE_HITS of the needle's first byte. */
function randomLike(hay: Buffer, first: number, from: number): boolean {
  const probe = hay.subarray(from, from + LANES_MIN);
  let hits = 0;
  for (let p = probe.indexOf(first); p !== -1 && hits < PROBE_HITS; p = probe.indexOf(first, p + 1)) hits++;
  return hits >= PROBE_HITS;
}

/**
 * Finishes the lanes left to right, one at a time: the first find is the leftmost. `lanes` holds, for
 * each, the next byte it reads, its end, and the start of its find or -1.
 */
function finishLanes(hay: Buffer, needle: Buffer, skip: Uint16Array, lanes: number[], work: number, budget: number, from: number): number {
  const last = needle.length - 1;
  for (let k = 0; k < 12; k += 3) {
    if (lanes[k + 2]! >= 0) return lanes[k + 2]!;
    const limit = lanes[k + 1]!;
    for (let e = lanes[k]!; e < limit; e += skip[hay[e]!]! & SHIFT) {
      const r = tried(hay, needle, skip, e);
      if (r < 0) return e - last;
      if ((work += r) > budget) return hay.indexOf(needle, from);
    }
  }
  return -1;
}

/**
 * -1 when the window whose last byte is at `e` holds the needle, else the bytes compared: none unless
 * that byte is the needle's last.
 */
function tried(hay: Buffer, needle: Buffer, skip: Uint16Array, e: number): number {
  if ((skip[hay[e]!]! & LAST_BYTE) === 0) return 0;
  const pos = e - needle.length + 1;
  for (let j = needle.length - 2; j >= 0; j--) if (hay[pos + j] !== needle[j]) return needle.length - 1 - j;
  return -1;
}
