/**
 * Byte layout of a STORED (uncompressed) ZIP archive, computed up front from names, sizes, CRC-32s
 * and timestamps alone. The archive is a deterministic function of those, so any byte range of it
 * can be produced without reading what comes before: that is what gives zip downloads an exact
 * Content-Length and Range support.
 *
 * Format choices (APPNOTE 6.3.x), kept identical to yazl's output for buffers with known CRC so the
 * tests can compare bytes with it: UTF-8 names (flag bit 11); CRC and sizes in the local header (no
 * data descriptors, flag bit 3 clear); Info-ZIP "UT" mtime extra in the central directory; Unix mode
 * 0100644. ZIP64 per entry once a size or local-header offset reaches 0xFFFFFFFF, and ZIP64 end
 * records once the entry count, central directory size or offset overflow their fields.
 */

export interface ZipEntry {
  /** Already sanitized, unique entry name. */
  readonly name: string;
  readonly size: number;
  /** CRC-32 of the whole content, unsigned. */
  readonly crc32: number;
  readonly mtime: Date;
}

/** Header bytes emitted as they are, or `length` bytes of entry `index`'s content from `offset`. */
export type Segment =
  | { readonly kind: 'bytes'; readonly start: number; readonly bytes: Buffer }
  | { readonly kind: 'file'; readonly start: number; readonly index: number; readonly offset: number; readonly length: number };

export interface ZipLayout {
  /** Contiguous, in archive order; segment i covers [start, start + segmentLength). */
  readonly segments: readonly Segment[];
  readonly size: number;
  /** True when any ZIP64 structure is present. */
  readonly zip64: boolean;
}

const LOCAL_FIXED = 30;
const CENTRAL_FIXED = 46;
const UT_EXTRA = 9;
const ZIP64_LOCAL_EXTRA = 20; // tag, size, original size, compressed size
const ZIP64_CENTRAL_EXTRA = 28; // tag, size, original size, compressed size, local header offset
const EOCD = 22;
const ZIP64_EOCD = 56;
const ZIP64_LOCATOR = 20;

const MAX32 = 0xffffffff;
const MAX16 = 0xffff;
const VERSION_MADE_BY = (3 << 8) | 63; // Unix, spec 6.3
const VERSION_UTF8 = 20;
const VERSION_ZIP64 = 45;
const FLAG_UTF8 = 1 << 11;
const STORED = 0;
const FILE_MODE = 0o100644;

export const segmentLength = (s: Segment): number => (s.kind === 'bytes' ? s.bytes.length : s.length);

export function zipLayout(entries: readonly ZipEntry[]): ZipLayout {
  const steps = layoutSteps(entries, Infinity);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/** Entries per slice of work on a long list (a fraction of a millisecond each). */
export const LAYOUT_SLICE = 500;

/**
 * The same layout, built `slice` entries at a time with a turn of the event loop between slices: a
 * bundle of ten thousand files does not hold the loop for the whole computation.
 */
export async function zipLayoutSliced(entries: readonly ZipEntry[], slice = LAYOUT_SLICE): Promise<ZipLayout> {
  const steps = layoutSteps(entries, slice);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
    await new Promise((r) => setImmediate(r));
  }
}

/**
 * The layout computation; it yields after every `slice` entries. A slice's local headers share one
 * buffer, and so do its central records: ten thousand entries make a few dozen buffers for the
 * garbage collector to track, not twenty thousand.
 */
function* layoutSteps(entries: readonly ZipEntry[], slice: number): Generator<void, ZipLayout> {
  const segments: Segment[] = [];
  const central: Buffer[] = [];
  let pos = 0;
  let anyZip64 = false;
  for (let first = 0; first < entries.length; first += slice) {
    if (first > 0) yield;
    const part = entries.slice(first, first + slice).map((e) => {
      if (!Number.isSafeInteger(e.size) || e.size < 0) throw new RangeError(`bad size for ${e.name}: ${e.size}`);
      const name = Buffer.from(e.name, 'utf8');
      if (name.length > MAX16) throw new RangeError(`entry name too long: ${name.length} bytes`);
      return { e, name, bigSize: e.size >= MAX32 };
    });
    let localBytes = 0;
    let centralBytes = 0;
    for (const p of part) {
      localBytes += LOCAL_FIXED + p.name.length + (p.bigSize ? ZIP64_LOCAL_EXTRA : 0);
      centralBytes += CENTRAL_FIXED + p.name.length + UT_EXTRA + ZIP64_CENTRAL_EXTRA; // at most
    }
    const locals = Buffer.alloc(localBytes);
    const centrals = Buffer.alloc(centralBytes);
    let l = 0;
    let c = 0;
    for (const [k, { e, name, bigSize }] of part.entries()) {
      const dos = dosDateTime(e.mtime);
      const zip64 = bigSize || pos >= MAX32;
      anyZip64 ||= zip64;
      c += centralRecord(centrals, c, name, e, dos, zip64, pos);
      const n = localHeader(locals, l, name, e, dos, bigSize);
      segments.push({ kind: 'bytes', start: pos, bytes: locals.subarray(l, l + n) });
      l += n;
      pos += n;
      if (e.size > 0) segments.push({ kind: 'file', start: pos, index: first + k, offset: 0, length: e.size });
      pos += e.size;
    }
    central.push(centrals.subarray(0, c));
  }
  const cdOffset = pos;
  const cdSize = central.reduce((n, b) => n + b.length, 0);
  const end = endRecords(entries.length, cdOffset, cdSize);
  const tail = Buffer.concat([...central, end.bytes]);
  segments.push({ kind: 'bytes', start: pos, bytes: tail });
  return { segments, size: pos + tail.length, zip64: anyZip64 || end.zip64 };
}

/** Index of the segment holding archive byte `pos` (0 <= pos < size). */
export function findSegment(layout: ZipLayout, pos: number): number {
  const s = layout.segments;
  let lo = 0;
  let hi = s.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (s[mid]!.start <= pos) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

interface Dos {
  readonly date: number;
  readonly time: number;
}

const MIN_DOS = Date.UTC(1980, 0, 1);
const MAX_DOS = Date.UTC(2107, 11, 31, 23, 59, 58);

/** MS-DOS date and time fields, in UTC: the server's time zone must not change the bytes. */
export function dosDateTime(d: Date): Dos {
  const t = new Date(Math.min(MAX_DOS, Math.max(MIN_DOS, d.getTime())));
  return {
    date: ((t.getUTCFullYear() - 1980) << 9) | ((t.getUTCMonth() + 1) << 5) | t.getUTCDate(),
    time: (t.getUTCHours() << 11) | (t.getUTCMinutes() << 5) | (t.getUTCSeconds() >> 1),
  };
}

/** Writes entry `e`'s local header into `b` at `at`; returns its length. */
function localHeader(b: Buffer, at: number, name: Buffer, e: ZipEntry, dos: Dos, bigSize: boolean): number {
  const extra = bigSize ? ZIP64_LOCAL_EXTRA : 0;
  b.writeUInt32LE(0x04034b50, at);
  b.writeUInt16LE(bigSize ? VERSION_ZIP64 : VERSION_UTF8, at + 4);
  b.writeUInt16LE(FLAG_UTF8, at + 6);
  b.writeUInt16LE(STORED, at + 8);
  b.writeUInt16LE(dos.time, at + 10);
  b.writeUInt16LE(dos.date, at + 12);
  b.writeUInt32LE(e.crc32 >>> 0, at + 14);
  b.writeUInt32LE(bigSize ? MAX32 : e.size, at + 18); // compressed = original: STORED
  b.writeUInt32LE(bigSize ? MAX32 : e.size, at + 22);
  b.writeUInt16LE(name.length, at + 26);
  b.writeUInt16LE(extra, at + 28);
  name.copy(b, at + LOCAL_FIXED);
  if (bigSize) {
    const x = at + LOCAL_FIXED + name.length;
    b.writeUInt16LE(0x0001, x);
    b.writeUInt16LE(ZIP64_LOCAL_EXTRA - 4, x + 2);
    b.writeBigUInt64LE(BigInt(e.size), x + 4);
    b.writeBigUInt64LE(BigInt(e.size), x + 12);
  }
  return LOCAL_FIXED + name.length + extra;
}

/** Writes entry `e`'s central directory record into `b` at `at`; returns its length. */
function centralRecord(b: Buffer, at: number, name: Buffer, e: ZipEntry, dos: Dos, zip64: boolean, offset: number): number {
  const extra = UT_EXTRA + (zip64 ? ZIP64_CENTRAL_EXTRA : 0);
  b.writeUInt32LE(0x02014b50, at);
  b.writeUInt16LE(VERSION_MADE_BY, at + 4);
  b.writeUInt16LE(zip64 ? VERSION_ZIP64 : VERSION_UTF8, at + 6);
  b.writeUInt16LE(FLAG_UTF8, at + 8);
  b.writeUInt16LE(STORED, at + 10);
  b.writeUInt16LE(dos.time, at + 12);
  b.writeUInt16LE(dos.date, at + 14);
  b.writeUInt32LE(e.crc32 >>> 0, at + 16);
  // Every ZIP64 field sits in the extra block and its 32-bit slot holds the 0xFFFFFFFF marker.
  b.writeUInt32LE(zip64 ? MAX32 : e.size, at + 20);
  b.writeUInt32LE(zip64 ? MAX32 : e.size, at + 24);
  b.writeUInt16LE(name.length, at + 28);
  b.writeUInt16LE(extra, at + 30);
  // comment length, disk number start, internal attributes: 0
  b.writeUInt32LE((FILE_MODE << 16) >>> 0, at + 38);
  b.writeUInt32LE(zip64 ? MAX32 : offset, at + 42);
  let x = at + CENTRAL_FIXED;
  x += name.copy(b, x);
  // Info-ZIP extended timestamp: the exact mtime in UTC seconds (mtime and atime flags, mtime only).
  b.writeUInt16LE(0x5455, x);
  b.writeUInt16LE(UT_EXTRA - 4, x + 2);
  b.writeUInt8(0b11, x + 4);
  b.writeUInt32LE(Math.min(0x7fffffff, Math.max(0, Math.floor(e.mtime.getTime() / 1000))), x + 5);
  x += UT_EXTRA;
  if (zip64) {
    b.writeUInt16LE(0x0001, x);
    b.writeUInt16LE(ZIP64_CENTRAL_EXTRA - 4, x + 2);
    b.writeBigUInt64LE(BigInt(e.size), x + 4);
    b.writeBigUInt64LE(BigInt(e.size), x + 12);
    b.writeBigUInt64LE(BigInt(offset), x + 20);
  }
  return CENTRAL_FIXED + name.length + extra;
}

/** End of central directory, preceded by the ZIP64 record and locator when a field overflows. */
function endRecords(count: number, cdOffset: number, cdSize: number): { bytes: Buffer; zip64: boolean } {
  const bigCount = count >= MAX16;
  const bigSize = cdSize >= MAX32;
  const bigOffset = cdOffset >= MAX32;
  const zip64 = bigCount || bigSize || bigOffset;
  const b = Buffer.alloc((zip64 ? ZIP64_EOCD + ZIP64_LOCATOR : 0) + EOCD);
  let x = 0;
  if (zip64) {
    b.writeUInt32LE(0x06064b50, 0);
    b.writeBigUInt64LE(BigInt(ZIP64_EOCD - 12), 4); // size of the record after this field
    b.writeUInt16LE(VERSION_MADE_BY, 12);
    b.writeUInt16LE(VERSION_ZIP64, 14);
    // this disk, disk with the central directory: 0
    b.writeBigUInt64LE(BigInt(count), 24);
    b.writeBigUInt64LE(BigInt(count), 32);
    b.writeBigUInt64LE(BigInt(cdSize), 40);
    b.writeBigUInt64LE(BigInt(cdOffset), 48);
    b.writeUInt32LE(0x07064b50, ZIP64_EOCD);
    b.writeBigUInt64LE(BigInt(cdOffset + cdSize), ZIP64_EOCD + 8); // where the ZIP64 record starts
    b.writeUInt32LE(1, ZIP64_EOCD + 16); // total number of disks
    x = ZIP64_EOCD + ZIP64_LOCATOR;
  }
  b.writeUInt32LE(0x06054b50, x);
  b.writeUInt16LE(bigCount ? MAX16 : count, x + 8);
  b.writeUInt16LE(bigCount ? MAX16 : count, x + 10);
  b.writeUInt32LE(bigSize ? MAX32 : cdSize, x + 12);
  b.writeUInt32LE(bigOffset ? MAX32 : cdOffset, x + 16);
  return { bytes: b, zip64 };
}
