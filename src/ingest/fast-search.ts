import { createRequire } from 'node:module';

/**
 * busboy finds multipart boundaries with streamsearch, a streaming Boyer-Moore-Horspool search in
 * JavaScript. During large uploads its scan loop took 18% of the server's CPU samples here (a 1 GiB
 * curl upload, `perf record`), more than any other user-space code but the CRC-32. This replaces
 * that one loop, the scan of a chunk once nothing of the previous chunk is held back, with
 * Buffer#indexOf (Node's native search). Everything else is streamsearch 1.1.0's own logic, kept
 * line for line: the held-back tail that may begin a boundary across chunks, the callbacks and
 * their arguments, and the order in which they come. test/fast-search.test.ts feeds both versions
 * the same bytes in random pieces and compares every callback.
 *
 * A different streamsearch version is left as it is (its internals may have changed).
 */

interface Sbmh {
  maxMatches: number;
  matches: number;
  _cb: (isMatch: boolean, data: Buffer | undefined, start: number, end: number, isSafeData: boolean) => void;
  _lookbehindSize: number;
  _needle: Buffer;
  _bufPos: number;
  _lookbehind: Buffer;
  _occ: number[];
}
type Push = (this: Sbmh, chunk: Buffer | string, pos?: number) => number;
type SbmhClass = { prototype: { push: Push } };

const PATCHED_VERSION = '1.1.0';

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
  // Positive: a position in `data`; negative: a position in the lookbehind (held-back) bytes.
  let pos = -self._lookbehindSize;
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
  const firstNeedleChar = needle[0];

  // The replaced loop: the first whole needle at or after `pos` (as Boyer-Moore-Horspool finds it,
  // the leftmost), natively. Without one, no alignment up to `end` matches, and the tail after it
  // is checked for a needle's beginning below, one alignment at a time, as streamsearch does.
  if (pos <= end) {
    const found = data.indexOf(needle, pos);
    if (found !== -1) {
      ++self.matches;
      if (found > 0) self._cb(true, data, self._bufPos, found, true);
      else self._cb(true, undefined, 0, 0, true);
      return (self._bufPos = found + needleLen);
    }
    pos = end + 1;
  }

  while (pos < len) {
    if (data[pos] !== firstNeedleChar || !memcmp(data, pos, needle, 0, len - pos)) {
      ++pos;
      continue;
    }
    data.copy(lookbehind, 0, pos, len);
    self._lookbehindSize = len - pos;
    break;
  }
  if (pos > 0) self._cb(false, data, self._bufPos, pos < len ? pos : len, true);
  self._bufPos = len;
  return len;
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

// The streamsearch that busboy itself loads: resolved from busboy's own location.
const require = createRequire(createRequire(import.meta.url).resolve('busboy'));

/** streamsearch's own push, for comparison in tests; null when not patched. */
export let originalPush: Push | null = null;

/** Installs fastPush into the streamsearch busboy loads; false (untouched) for another version. */
export function installFastSearch(): boolean {
  const version = (require('streamsearch/package.json') as { version: string }).version;
  if (version !== PATCHED_VERSION) return false;
  const proto = (require('streamsearch') as SbmhClass).prototype;
  if (proto.push !== fastPush) {
    originalPush = proto.push;
    proto.push = fastPush;
  }
  return true;
}
