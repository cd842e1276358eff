/** Shared by the zip tests: an independent ZIP reader that checks every structure it crosses. */
import assert from 'node:assert/strict';
import type { ZipLayout } from '../src/zip/layout.ts';

const MAX32 = 0xffffffff;
const MAX16 = 0xffff;

export type ReadAt = (offset: number, length: number) => Buffer;

export interface ParsedEntry {
  name: string;
  flags: number;
  method: number;
  crc32: number;
  size: number;
  compressedSize: number;
  versionNeeded: number;
  localOffset: number;
  dataOffset: number;
  /** Central directory extra fields by tag. */
  extra: Map<number, Buffer>;
  localExtra: Map<number, Buffer>;
  /** Info-ZIP "UT" mtime, Unix seconds. */
  utMtime: number | undefined;
}

export interface ParsedZip {
  entries: ParsedEntry[];
  cdOffset: number;
  cdSize: number;
  /** ZIP64 end of central directory record and locator present. */
  zip64End: boolean;
}

function extras(b: Buffer): Map<number, Buffer> {
  const m = new Map<number, Buffer>();
  for (let x = 0; x + 4 <= b.length; ) {
    const len = b.readUInt16LE(x + 2);
    assert.ok(x + 4 + len <= b.length, 'extra field overruns its block');
    assert.ok(!m.has(b.readUInt16LE(x)), 'duplicate extra field');
    m.set(b.readUInt16LE(x), b.subarray(x + 4, x + 4 + len));
    x += 4 + len;
  }
  return m;
}

const u64 = (b: Buffer, at: number): number => Number(b.readBigUInt64LE(at));

/**
 * Reads an archive of `size` bytes the way an unzipper does: end records → central directory →
 * each local header, asserting on the way that every structure is where the others say it is.
 */
export function parseZip(read: ReadAt, size: number): ParsedZip {
  assert.ok(size >= 22, 'too small for an end of central directory record');
  const eocd = read(size - 22, 22);
  assert.equal(eocd.readUInt32LE(0), 0x06054b50, 'EOCD signature (archives carry no comment)');
  let count = eocd.readUInt16LE(10);
  let cdSize = eocd.readUInt32LE(12);
  let cdOffset = eocd.readUInt32LE(16);
  let cdEnd = size - 22;
  const zip64End = size >= 22 + 20 && read(size - 42, 4).readUInt32LE(0) === 0x07064b50;
  if (zip64End) {
    const loc = read(size - 42, 20);
    const at = u64(loc, 8);
    const rec = read(at, 56);
    assert.equal(rec.readUInt32LE(0), 0x06064b50, 'ZIP64 EOCD signature where the locator points');
    assert.equal(u64(rec, 4), 44);
    assert.equal(u64(rec, 24), u64(rec, 32));
    assert.ok(count === MAX16 || count === u64(rec, 32));
    count = u64(rec, 32);
    cdSize = u64(rec, 40);
    cdOffset = u64(rec, 48);
    cdEnd = at;
    assert.equal(at + 56, size - 42, 'ZIP64 EOCD sits right before its locator');
  } else {
    assert.ok(count !== MAX16 && cdSize !== MAX32 && cdOffset !== MAX32, 'a marker value without ZIP64 records');
  }
  assert.equal(cdOffset + cdSize, cdEnd, 'central directory ends where the end records start');

  const cd = read(cdOffset, cdSize);
  const entries: ParsedEntry[] = [];
  for (let x = 0, i = 0; i < count; i++) {
    assert.equal(cd.readUInt32LE(x), 0x02014b50, `central record ${i} signature`);
    const nameLen = cd.readUInt16LE(x + 28);
    const extraLen = cd.readUInt16LE(x + 30);
    const commentLen = cd.readUInt16LE(x + 32);
    const name = cd.subarray(x + 46, x + 46 + nameLen).toString('utf8');
    const extra = extras(cd.subarray(x + 46 + nameLen, x + 46 + nameLen + extraLen));
    let size32 = cd.readUInt32LE(x + 24);
    let comp32 = cd.readUInt32LE(x + 20);
    let offset = cd.readUInt32LE(x + 42);
    const z = extra.get(0x0001);
    if (z) {
      // Only the fields whose 32-bit slot holds the marker are present, in this order.
      let at = 0;
      const next = (): number => {
        assert.ok(at + 8 <= z.length, `${name}: ZIP64 extra too short`);
        return u64(z, (at += 8) - 8);
      };
      if (size32 === MAX32) size32 = next();
      if (comp32 === MAX32) comp32 = next();
      if (offset === MAX32) offset = next();
    } else assert.ok(size32 !== MAX32 && comp32 !== MAX32 && offset !== MAX32, `${name}: marker without ZIP64 extra`);
    const ut = extra.get(0x5455);
    const e: ParsedEntry = {
      name,
      flags: cd.readUInt16LE(x + 8),
      method: cd.readUInt16LE(x + 10),
      crc32: cd.readUInt32LE(x + 16),
      size: size32,
      compressedSize: comp32,
      versionNeeded: cd.readUInt16LE(x + 6),
      localOffset: offset,
      dataOffset: 0,
      extra,
      localExtra: new Map(),
      utMtime: ut ? ut.readUInt32LE(1) : undefined,
    };
    x += 46 + nameLen + extraLen + commentLen;

    const lh = read(offset, 30);
    assert.equal(lh.readUInt32LE(0), 0x04034b50, `${name}: local header signature at ${offset}`);
    const lNameLen = lh.readUInt16LE(26);
    const lExtraLen = lh.readUInt16LE(28);
    const rest = read(offset + 30, lNameLen + lExtraLen);
    assert.equal(rest.subarray(0, lNameLen).toString('utf8'), name, 'local and central names agree');
    assert.equal(lh.readUInt16LE(6), e.flags, `${name}: flags agree`);
    assert.equal(lh.readUInt16LE(8), e.method, `${name}: method agrees`);
    assert.equal(lh.readUInt32LE(14), e.crc32, `${name}: local CRC agrees`);
    e.localExtra = extras(rest.subarray(lNameLen));
    let lComp = lh.readUInt32LE(18);
    let lSize = lh.readUInt32LE(22);
    if (lSize === MAX32 || lComp === MAX32) {
      const lz = e.localExtra.get(0x0001);
      assert.ok(lz && lz.length >= 16, `${name}: local ZIP64 extra with both sizes`);
      lSize = u64(lz, 0);
      lComp = u64(lz, 8);
    }
    assert.equal(lSize, e.size, `${name}: local size agrees`);
    assert.equal(lComp, e.compressedSize, `${name}: local compressed size agrees`);
    e.dataOffset = offset + 30 + lNameLen + lExtraLen;
    entries.push(e);
  }
  // Entries are laid out back to back, in order, and end where the central directory starts.
  entries.forEach((e, i) => {
    const next = entries[i + 1]?.localOffset ?? cdOffset;
    assert.equal(e.dataOffset + e.compressedSize, next, `${e.name}: data ends where the next structure starts`);
  });
  if (entries.length === 0) assert.equal(cdOffset, 0);
  return { entries, cdOffset, cdSize, zip64End };
}

export const bufferReader =
  (b: Buffer): ReadAt =>
  (offset, length) => {
    assert.ok(offset >= 0 && offset + length <= b.length, `read [${offset}, +${length}) outside ${b.length} bytes`);
    return b.subarray(offset, offset + length);
  };

/** Reads a layout without any file data: entry contents read as zeros. */
export function layoutReader(layout: ZipLayout): ReadAt {
  return (offset, length) => {
    const out = Buffer.alloc(length);
    for (const s of layout.segments) {
      if (s.kind !== 'bytes') continue;
      const from = Math.max(offset, s.start);
      const to = Math.min(offset + length, s.start + s.bytes.length);
      if (from < to) s.bytes.copy(out, from - offset, from - s.start, to - s.start);
    }
    return out;
  };
}
