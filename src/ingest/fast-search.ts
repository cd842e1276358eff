/**
 * busboy finds multipart boundaries with streamsearch, a streaming Boyer-Moore-Horspool search in
 * JavaScript whose scan loop is the costliest user-space code of a large upload but the CRC-32
 * (figures: bench/RESULTS.md, "Design notes moved from the code"). This replaces that one loop, the
 * scan of a chunk once nothing of the previous chunk is held back, with findNeedle (Node's native
 * search, or four interleaved Horspool lanes on random-like data: needle-search.ts). Everything else is
 * streamsearch 1.1.0's own logic, kept line for line: the held-back tail that may begin a boundary across chunks, the
 * callbacks and their arguments, and the order in which they come. test/fast-search.test.ts feeds
 * both versions the same bytes in random pieces and compares every callback.
 *
 * fast-paths.ts installs it, and only into streamsearch 1.1.0 (another version's internals may differ).
 */
import { findNeedle, skipTable } from './needle-search.ts';

interface Sbmh {
  maxMatches: number;
  matches: number;
  _cb: (isMatch: boolean, data: Buffer | undefined, start: number, end: number, isSafeData: boolean) => void;
  _lookbehindSize: number;
  _needle: Buffer;
  _bufPos: number;
  _lookbehind: Buffer;
  _occ: number[];
  /** Our bad-character shifts for findNeedle, made at the first search. */
  _skip?: Uint16Array;
}
export type Push = (this: Sbmh, chunk: Buffer | string, pos?: number) => number;

function memcmp(buf1: Buffer, pos1: number, buf2: Buffer, pos2: number, num: number): boolean {
  for (let i = 0; i < num; ++i) if (buf1[pos1 + i] !== buf2[pos2 + i]) return false;
  return true;
}

function matchNeedle(self: Sbmh, data: Buffer, pos: number, len: number): boolean {
  const lb = self._lookbehind;
  const lbSize = self._lookbehindSize;
  const needle = self._needle;
  for (let i = 0; i < len; ++i, ++pos) {
    const ch = pos < 0 ? lb[lbSize + pos] : data[pos];
    if (ch !== needle[i]) return false;
  }
  return true;
}

function feed(self: Sbmh, data: Buffer): number {
  const len = data.length;
  const needle = self._needle;
  const needleLen = needle.length;
  // Positive: a position in `data`; negative: a position in the lookbehind (held-back) bytes. Not
  // `-self._lookbehindSize`, which is -0 when nothing is held back: V8 keeps -0 as a float, and the
  // positions passed on from it made findNeedle and partialFrom deoptimise for a non-integer argument.
  let pos = 0 - self._lookbehindSize;
  const lastNeedleCharPos = needleLen - 1;
  const lastNeedleChar = needle[lastNeedleCharPos];
  const end = len - needleLen;
  const occ = self._occ;
  const lookbehind = self._lookbehind;

  if (pos < 0) {
    // streamsearch's search across the held-back bytes and this chunk, unchanged.
    while (pos < 0 && pos <= end) {
      const nextPos = pos + lastNeedleCharPos;
      const ch = (nextPos < 0 ? lookbehind[self._lookbehindSize + nextPos] : data[nextPos])!;
      if (ch === lastNeedleChar && matchNeedle(self, data, pos, lastNeedleCharPos)) {
        self._lookbehindSize = 0;
        ++self.matches;
        if (pos > -self._lookbehindSize) self._cb(true, lookbehind, 0, self._lookbehindSize + pos, false);
        else self._cb(true, undefined, 0, 0, true);
        return (self._bufPos = pos + needleLen);
      }
      pos += occ[ch]!;
    }
    while (pos < 0 && !matchNeedle(self, data, pos, len - pos)) ++pos;
    if (pos < 0) {
      const bytesToCutOff = self._lookbehindSize + pos;
      if (bytesToCutOff > 0) self._cb(false, lookbehind, 0, bytesToCutOff, false);
      self._lookbehindSize -= bytesToCutOff;
      lookbehind.copy(lookbehind, 0, bytesToCutOff, self._lookbehindSize);
      lookbehind.set(data, self._lookbehindSize);
      self._lookbehindSize += len;
      self._bufPos = len;
      return len;
    }
    self._cb(false, lookbehind, 0, self._lookbehindSize, false);
    self._lookbehindSize = 0;
  }

  pos += self._bufPos;

  // The replaced loop: the first whole needle at or after `pos` (as Boyer-Moore-Horspool finds it,
  // the leftmost), by findNeedle. Without one, no alignment up to `end` matches, and the tail after it
  // is checked for a needle's beginning below, one alignment at a time, as streamsearch does.
  if (pos <= end) {
    const found = findNeedle(data, needle, (self._skip ??= skipTable(needle)), pos);
    if (found !== -1) {
      ++self.matches;
      if (found > 0) self._cb(true, data, self._bufPos, found, true);
      else self._cb(true, undefined, 0, 0, true);
      return (self._bufPos = found + needleLen);
    }
    pos = end + 1;
  }

  pos = partialFrom(data, needle, pos);
  if (pos < len) {
    data.copy(lookbehind, 0, pos, len);
    self._lookbehindSize = len - pos;
  }
  if (pos > 0) self._cb(false, data, self._bufPos, pos < len ? pos : len, true);
  self._bufPos = len;
  return len;
}

/**
 * Whether `parser`, a patched streamsearch, would hand all of `data` on as plain bytes: it holds
 * nothing back from earlier chunks, and `data` holds no needle, nor the start of one at its end.
 * Then skipping the parser for this chunk leaves it as pushing it would have (streamsearch keeps no
 * other state between pushes). False for anything else, including an unpatched parser.
 */
export function plainData(parser: unknown, data: Buffer): boolean {
  const self = parser as Partial<Sbmh> | null;
  if (!self || typeof self !== 'object' || !(self._needle instanceof Buffer) || self._lookbehindSize !== 0) return false;
  if (self.matches === undefined || self.maxMatches === undefined || self.matches >= self.maxMatches) return false;
  const needle = self._needle;
  if (findNeedle(data, needle, (self._skip ??= skipTable(needle)), 0) !== -1) return false;
  return partialFrom(data, needle, Math.max(0, data.length - needle.length + 1)) === data.length;
}

/** The first position at or after `from` where the rest of `data` is a beginning of `needle`; data.length if none. */
function partialFrom(data: Buffer, needle: Buffer, from: number): number {
  const first = needle[0];
  let pos = from;
  while (pos < data.length && (data[pos] !== first || !memcmp(data, pos, needle, 0, data.length - pos))) ++pos;
  return pos;
}

/** streamsearch's push, calling the feed above. */
export const fastPush: Push = function push(chunk, pos) {
  let result: number | undefined;
  const data = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk, 'latin1');
  const chunkLen = data.length;
  this._bufPos = pos || 0;
  while (result !== chunkLen && this.matches < this.maxMatches) result = feed(this, data);
  return result!;
};
