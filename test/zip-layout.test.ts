import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { crc32 } from 'node:zlib';
import { findSegment, segmentLength, zipLayout, zipLayoutSliced, type ZipEntry, type ZipLayout } from '../src/zip/layout.ts';
import { sanitizeEntryName, uniqueEntryNames } from '../src/zip/names.ts';
import { zipSource } from '../src/zip/stream.ts';
import { createDiskStore } from '../src/storage/disk/store.ts';
import { createHasher } from '../src/storage/hasher.ts';
import { bufferReader, layoutReader, parseZip } from './zip-util.ts';
import { pythonZip, yazlZip } from './zip-tools.ts';

const GiB = 1024 ** 3;

interface Source {
  name: string;
  data: Buffer;
  mtime: Date;
}

const entriesOf = (files: Source[]): ZipEntry[] =>
  files.map((f) => ({ name: f.name, size: f.data.length, crc32: crc32(f.data), mtime: f.mtime }));

/** The whole archive in memory: header segments as laid out, data segments from the sources. */
function render(layout: ZipLayout, files: Source[]): Buffer {
  return Buffer.concat(
    layout.segments.map((s) => (s.kind === 'bytes' ? s.bytes : files[s.index]!.data.subarray(s.offset, s.offset + s.length))),
  );
}

describe('zip layout', () => {
  test('is byte-identical to yazl (STORED, known CRC) and predicts the same size', async () => {
    const files: Source[] = [
      { name: 'a.txt', data: Buffer.from('hello zip'), mtime: new Date('2024-05-06T07:08:09.500Z') },
      { name: 'empty', data: Buffer.alloc(0), mtime: new Date('2030-12-31T23:59:59Z') },
      { name: 'résumé ✓ 日本.txt', data: randomBytes(70_000), mtime: new Date('1975-01-01T00:00:00Z') }, // DOS clamps to 1980
      { name: 'b (1).bin', data: randomBytes(1), mtime: new Date() },
    ];
    const layout = zipLayout(entriesOf(files));
    const ours = render(layout, files);
    const ref = await yazlZip(files);
    assert.equal(layout.size, ours.length);
    assert.equal(ref.finalSize, layout.size, 'yazl finalSize');
    assert.ok(ours.equals(ref.bytes), 'same bytes as yazl');
    assert.equal(layout.zip64, false);

    const parsed = parseZip(bufferReader(ours), ours.length);
    assert.deepEqual(parsed.entries.map((e) => e.name), files.map((f) => f.name));
    parsed.entries.forEach((e, i) => {
      const data = ours.subarray(e.dataOffset, e.dataOffset + e.size);
      assert.ok(data.equals(files[i]!.data), e.name);
      assert.equal(e.crc32, crc32(data));
      assert.equal(e.flags, 1 << 11, 'UTF-8 names, no data descriptor');
      assert.equal(e.method, 0, 'STORED');
      assert.equal(e.utMtime, Math.floor(files[i]!.mtime.getTime() / 1000));
    });
  });

  test('many random entries still match yazl; the empty archive is a bare EOCD', async () => {
    const files: Source[] = Array.from({ length: 60 }, (_, i) => ({
      name: `f${i}-${randomBytes(randomInt(1, 20)).toString('base64url')}`,
      data: randomBytes(randomInt(0, 3000)),
      mtime: new Date(Date.UTC(2000 + randomInt(0, 60), randomInt(0, 12), randomInt(1, 29), randomInt(0, 24), randomInt(0, 60), randomInt(0, 60))),
    }));
    const layout = zipLayout(entriesOf(files));
    assert.ok(render(layout, files).equals((await yazlZip(files)).bytes));

    const empty = zipLayout([]);
    assert.equal(empty.size, 22);
    const ref = await yazlZip([]);
    assert.ok(render(empty, []).equals(ref.bytes));
    assert.deepEqual(parseZip(bufferReader(ref.bytes), 22).entries, []);
  });

  test('segments are contiguous and findSegment locates every boundary', () => {
    const files: Source[] = [0, 5, 0, 1, 100].map((n, i) => ({ name: `x${i}`, data: randomBytes(n), mtime: new Date() }));
    const layout = zipLayout(entriesOf(files));
    let pos = 0;
    layout.segments.forEach((s, i) => {
      assert.equal(s.start, pos);
      assert.ok(segmentLength(s) > 0, 'no empty segments');
      assert.equal(findSegment(layout, s.start), i);
      assert.equal(findSegment(layout, s.start + segmentLength(s) - 1), i);
      pos += segmentLength(s);
    });
    assert.equal(pos, layout.size);
  });

  test('ZIP64: a 5 GiB entry, an entry past 4 GiB, and the 0xFFFFFFFF boundary', () => {
    const mtime = new Date('2025-01-02T03:04:05Z');
    const entries: ZipEntry[] = [
      { name: 'a.txt', size: 3, crc32: crc32(Buffer.from('abc')), mtime },
      { name: 'big.bin', size: 5 * GiB, crc32: 0x12345678, mtime },
      { name: 'after.txt', size: 3, crc32: crc32(Buffer.from('xyz')), mtime },
    ];
    const layout = zipLayout(entries);
    assert.equal(layout.zip64, true);
    const { entries: parsed, zip64End, cdOffset } = parseZip(layoutReader(layout), layout.size);
    const [a, big, after] = parsed;
    assert.ok(a && big && after && zip64End, 'ZIP64 end records: the central directory starts past 4 GiB');
    assert.ok(cdOffset > 5 * GiB);
    assert.equal(a.extra.has(0x0001), false);
    assert.equal(a.versionNeeded, 20);
    assert.equal(big.size, 5 * GiB);
    assert.equal(big.compressedSize, 5 * GiB);
    assert.equal(big.versionNeeded, 45);
    assert.equal(big.extra.get(0x0001)?.length, 24, 'central ZIP64 extra: size, compressed size, offset');
    assert.equal(big.localExtra.get(0x0001)?.length, 16, 'local ZIP64 extra: both sizes');
    assert.equal(big.crc32, 0x12345678);
    assert.ok(after.localOffset > 4 * GiB);
    assert.equal(after.extra.has(0x0001), true, 'offset past 4 GiB needs the central ZIP64 extra');
    assert.equal(after.localExtra.has(0x0001), false, 'small sizes stay in the local header');
    assert.equal(after.size, 3);
    const headers = layout.segments.filter((s) => s.kind === 'bytes').reduce((n, s) => n + segmentLength(s), 0);
    assert.equal(layout.size, headers + 5 * GiB + 6);

    // 0xFFFFFFFF is the marker value itself: that size already needs ZIP64; one less does not.
    const edge = zipLayout([
      { name: 'fits', size: 0xfffffffe, crc32: 1, mtime },
      { name: 'marker', size: 0xffffffff, crc32: 2, mtime },
    ]);
    const [fits, marker] = parseZip(layoutReader(edge), edge.size).entries;
    assert.equal(fits?.extra.has(0x0001), false);
    assert.equal(marker?.extra.has(0x0001), true);
    assert.equal(marker?.size, 0xffffffff);
    assert.ok((marker?.localOffset ?? 0) > 0xfffffffe);
  });

  test('built in slices, the layout has the same segments and bytes, ZIP64 included', async () => {
    const mtime = new Date('2025-01-02T03:04:05Z');
    const entries: ZipEntry[] = Array.from({ length: 11 }, (_, i) => ({
      name: `é${i}.txt`,
      size: i === 4 ? 5 * GiB : i === 6 ? 0 : i + 1,
      crc32: i * 7919,
      mtime,
    }));
    const whole = zipLayout(entries);
    for (const slice of [1, 3, 4, 11, 500]) {
      const sliced = await zipLayoutSliced(entries, slice);
      assert.equal(sliced.size, whole.size, `size, slices of ${slice}`);
      assert.equal(sliced.zip64, true);
      assert.deepEqual(sliced.segments, whole.segments, `segments, slices of ${slice}`);
    }
    assert.deepEqual(await zipLayoutSliced([], 3), zipLayout([]));
  });

  test('ZIP64 archive (sparse file) is read by python zipfile and unzip', (t) => {
    const mtime = new Date('2025-01-02T03:04:05Z');
    const small = [Buffer.from('abc'), Buffer.from('xyz')];
    const entries: ZipEntry[] = [
      { name: 'a.txt', size: 3, crc32: crc32(small[0]!), mtime },
      { name: 'big.bin', size: 5 * GiB, crc32: 0, mtime },
      { name: 'after.txt', size: 3, crc32: crc32(small[1]!), mtime },
    ];
    const layout = zipLayout(entries);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-zip64-'));
    const file = path.join(dir, 'big.zip');
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
    const fd = fs.openSync(file, 'w');
    try {
      for (const s of layout.segments) {
        if (s.kind === 'bytes') fs.writeSync(fd, s.bytes, 0, s.bytes.length, s.start);
        else if (s.index !== 1) fs.writeSync(fd, small[s.index === 0 ? 0 : 1]!, 0, s.length, s.start);
      }
      fs.ftruncateSync(fd, layout.size); // the 5 GiB of data stay a hole
    } finally {
      fs.closeSync(fd);
    }
    const py = pythonZip(file, 'list', ['a.txt', 'after.txt']); // reading checks local header and CRC
    if (py === undefined) t.diagnostic('python3 not installed: skipped');
    else {
      assert.deepEqual(py.entries.map(([n, s]) => [n, s]), [['a.txt', 3], ['big.bin', 5 * GiB], ['after.txt', 3]]);
      assert.deepEqual(py.read, { 'a.txt': 3, 'after.txt': 3 });
    }
    const unzip = spawnSync('unzip', ['-l', file], { encoding: 'utf8' });
    if (unzip.error) t.diagnostic('unzip not installed: skipped');
    else {
      assert.equal(unzip.status, 0, unzip.stderr);
      assert.match(unzip.stdout, /5368709120\s+2025-01-02 03:04\s+big\.bin/);
    }
  });
});

describe('zip entry names', () => {
  test('sanitized to one safe path component', () => {
    const cases: Array<[string, string]> = [
      ['../x', '_x'],
      ['a/b', 'a_b'],
      ['a\\b', 'a_b'],
      ['..', 'file'],
      ['.hidden', 'hidden'],
      ['...', 'file'],
      ['C:evil.exe', 'C_evil.exe'],
      ['ctl\u0001\u202e.txt', 'ctl.txt'],
      ['trailing. ', 'trailing'],
      ['', 'file'],
      ['e\u0301.txt', 'é.txt'], // NFC
    ];
    for (const [raw, want] of cases) assert.equal(sanitizeEntryName(raw), want, JSON.stringify(raw));
    const long = sanitizeEntryName('日'.repeat(200));
    assert.ok(Buffer.byteLength(long) <= 255 && long.length === 85);
  });

  test('made unique, case-insensitively, in input order', () => {
    assert.deepEqual(uniqueEntryNames(['a.txt', 'a.txt', 'A.TXT', 'a (1).txt', 'noext', 'noext', '../a.txt', '.a.txt']), [
      'a.txt',
      'a (1).txt',
      'A (2).TXT',
      'a (1) (1).txt',
      'noext',
      'noext (1)',
      '_a.txt',
      'a (3).txt',
    ]);
  });
});

describe('zip source', () => {
  test('any byte range reads the same bytes as the whole archive', async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-zipsrc-'));
    const hasher = createHasher(1);
    t.after(async () => {
      await hasher.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    const store = await createDiskStore(dir, hasher);
    /** Stores each file; their keys, in order. */
    const stored = async (sources: Source[]): Promise<string[]> => {
      const keys: string[] = [];
      for (const f of sources) {
        const w = store.createWriter();
        w.write(f.data);
        await w.finish();
        await w.publish();
        keys.push(w.key);
      }
      return keys;
    };
    const files: Source[] = [50, 0, 3 << 20, 7, 1 << 20].map((n, i) => ({ name: `f${i}`, data: randomBytes(n), mtime: new Date() }));
    const keys = await stored(files);
    const layout = zipLayout(entriesOf(files));
    const whole = render(layout, files);
    const ranges: Array<[number, number]> = [[0, whole.length], [0, 1], [whole.length - 1, 1], [10, 100]];
    for (let i = 0; i < 40; i++) {
      const start = randomInt(0, whole.length);
      ranges.push([start, randomInt(1, Math.min(whole.length - start, 2 << 20) + 1)]);
    }
    for (const [start, length] of ranges) {
      const src = zipSource(store, layout, keys, start);
      const out = Buffer.alloc(length);
      await src.read(out, 0);
      src.close();
      assert.ok(out.equals(whole.subarray(start, start + length)), `range ${start}+${length}`);
    }
    const src = zipSource(store, layout, keys, 0);
    src.close();
    await assert.rejects(src.read(Buffer.alloc(10), 0), /closed/);

    // Many small files: a read covers a bounded number of entries, says how many bytes it filled,
    // and the next read goes on from there.
    const small: Source[] = Array.from({ length: 100 }, (_, i) => ({ name: `s${i}`, data: randomBytes(10), mtime: new Date() }));
    const smallKeys = await stored(small);
    const smallLayout = zipLayout(entriesOf(small));
    const smallWhole = render(smallLayout, small);
    const many = zipSource(store, smallLayout, smallKeys, 0);
    const out = Buffer.alloc(smallWhole.length);
    const fills: number[] = [];
    for (let at = 0; at < out.length;) {
      const filled = (await many.read(out.subarray(at), at)) ?? out.length - at;
      assert.ok(filled > 0);
      fills.push(filled);
      at += filled;
    }
    many.close();
    assert.ok(out.equals(smallWhole));
    assert.ok(fills.length >= 4 && fills[0]! < smallWhole.length / 3, `reads filled ${fills.join(', ')}`);
  });
});
