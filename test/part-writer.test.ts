import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';
import { createHasher, type Hasher } from '../src/storage/hasher.ts';
import { createPartWriter, type PartWriter } from '../src/storage/disk/part-writer.ts';
import { probeDirect, type DirectIo } from '../src/storage/disk/direct-io.ts';
import { freshAllocations } from '../src/util/spare-buffers.ts';

/** Feeds `data` in pieces of the sizes busboy and uWS hand out, honouring the writer's backpressure. */
async function feed(w: PartWriter, data: Buffer): Promise<void> {
  let at = 0;
  let piece = 0;
  while (at < data.length) {
    const n = Math.min(data.length - at, [30_011, 65_536, 1, 524_288, 4_095][piece++ % 5]!);
    // A copy per piece, as the upload path copies uWS's chunks: the writer may keep a reference.
    const ok = w.write(Buffer.from(data.subarray(at, at + n)));
    at += n;
    if (!ok) await new Promise<void>((resolve) => w.onDrain(resolve));
  }
}

// Sizes on both sides of the first slot (64 KiB), a full slot (1 MiB) and a 4 KiB block.
// 70 MiB passes the page-cache mode's periodic syncs (every 16 MiB) and its unsynced bound (64 MiB).
const SIZES = [0, 1, 4095, 4096, 4097, 65_535, 65_536, 65_537, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 12_345, 70 * (1 << 20) + 7];

for (const mode of ['direct', 'page cache'] as const) {
  describe(`part writer (${mode})`, () => {
    let dir: string;
    let hasher: Hasher;
    const direct: DirectIo = { supported: mode === 'direct' };
    const count = { active: 0 };
    const create = (file: string): PartWriter => createPartWriter(file, { hasher, io: direct, count, onError: (err) => assert.fail(err) });
    before(async () => {
      dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'sluice-part-'));
      hasher = createHasher(1);
      if (mode === 'direct') await probeDirect(direct, dir);
    });
    after(async () => {
      await hasher.close();
      await fsp.rm(dir, { recursive: true, force: true });
    });

    test('stores every byte, with its CRC-32, whatever the size', async (t) => {
      if (mode === 'direct' && !direct.supported) return t.skip('no O_DIRECT on this filesystem');
      for (const size of SIZES) {
        const data = randomBytes(size);
        const file = path.join(dir, `f${size}`);
        const w = create(file);
        await feed(w, data);
        const r = await w.finish();
        assert.equal(r.size, size);
        assert.equal(r.crc32, crc32(data) >>> 0, `crc32 of ${size}`);
        assert.ok((await fsp.readFile(file)).equals(data), `bytes of ${size}`);
        assert.equal((await fsp.stat(file)).mode & 0o777, 0o600);
        await fsp.rm(file);
      }
      assert.equal(direct.supported, mode === 'direct', 'the mode held throughout');
    });

    test('eight files at once (rings held to two slots each) all store every byte', async (t) => {
      if (mode === 'direct' && !direct.supported) return t.skip('no O_DIRECT on this filesystem');
      const sizes = [9 << 20, (7 << 20) + 333, 1, 65_537, (5 << 20) + 4097, 3 << 20, 0, (11 << 20) + 1];
      const datas = sizes.map((n) => randomBytes(n));
      const results = await Promise.all(
        datas.map(async (data, i) => {
          const file = path.join(dir, `busy${i}`);
          const w = create(file);
          await feed(w, data);
          return { file, data, r: await w.finish() };
        }),
      );
      for (const { file, data, r } of results) {
        assert.equal(r.size, data.length);
        assert.equal(r.crc32, crc32(data) >>> 0);
        assert.ok((await fsp.readFile(file)).equals(data), `bytes of ${data.length}`);
        await fsp.rm(file);
      }
    });

    test('rings that grew before a burst joined shrink back, so bursts reuse the spare slots', async (t) => {
      if (mode === 'direct' && !direct.supported) return t.skip('no O_DIRECT on this filesystem');
      const slotsAllocated = (): number => freshAllocations().get('slot')!;
      const burst = async (round: number): Promise<void> => {
        const data = randomBytes(12 << 20);
        const open = (i: number): PartWriter =>
          create(path.join(dir, `burst${round}-${i}`));
        // Two files alone grow rings of four slots. Six more join (a byte each: the small first slot),
        // the limit drops to two, and the first two go on: their rings shrink as slots come back.
        // Only then do the six need full slots: they find the ones given back.
        const early = [open(0), open(1)];
        await Promise.all(early.map((w) => feed(w, data.subarray(0, 4 << 20))));
        const late = Array.from({ length: 6 }, (_, i) => open(i + 2));
        await Promise.all(late.map((w) => feed(w, data.subarray(0, 1))));
        await Promise.all(early.map((w) => feed(w, data.subarray(4 << 20))));
        await Promise.all(late.map((w) => feed(w, data.subarray(1))));
        for (const [i, w] of [...early, ...late].entries()) {
          assert.equal((await w.finish()).crc32, crc32(data) >>> 0, `crc32 of file ${i}`);
          assert.ok((await fsp.readFile(w.path)).equals(data), `bytes of file ${i}`);
          await fsp.rm(w.path);
        }
      };
      await burst(1);
      const before = slotsAllocated();
      await burst(2);
      await burst(3);
      assert.equal(slotsAllocated() - before, 0, 'later bursts take only kept slots');
    });

    test('appends of every size, at block-aligned and unaligned offsets, follow what the file held', async (t) => {
      if (mode === 'direct' && !direct.supported) return t.skip('no O_DIRECT on this filesystem');
      for (const head of [0, 4096, 5000]) {
        for (const size of SIZES.filter((n) => n < 64 << 20)) {
          const file = path.join(dir, `append-${head}-${size}`);
          const prefix = randomBytes(head);
          await fsp.writeFile(file, prefix);
          const key = `append-${mode}-${head}-${size}`;
          const w = createPartWriter(file, { hasher, io: direct, count, onError: (err) => assert.fail(err), append: { at: head, feedKey: key } });
          const data = randomBytes(size);
          await feed(w, data);
          assert.equal((await w.finish()).size, size);
          const whole = Buffer.concat([prefix, data]);
          assert.ok((await fsp.readFile(file)).equals(whole), `bytes of ${size} after ${head}`);
          // The hasher was fed the append's bytes; it reads the head it missed from the file.
          hasher.hashAhead(key, file, whole.length);
          assert.equal((await hasher.digestFile(file, key)).crc32, crc32(whole) >>> 0, `crc32 of ${size} after ${head}`);
          await fsp.rm(file);
        }
      }
    });

    test('a producer told to wait for room is let go once the file is written, not when the hasher hands buffers back', async (t) => {
      if (mode === 'direct' && !direct.supported) return t.skip('no O_DIRECT on this filesystem');
      // The hasher's acks are held until the end, so no buffer comes back to make room meanwhile.
      const held: Array<() => void> = [];
      const slow: Hasher = { ...hasher, open: (onAck) => hasher.open((slot, buf) => held.push(() => onAck(slot, buf))) };
      const w = createPartWriter(path.join(dir, 'waiting'), { hasher: slow, io: direct, count, onError: (err) => assert.fail(err) });
      const piece = Buffer.alloc(512 * 1024, 7);
      // Fill the ring until it says stop, as a parser does before it pauses the socket.
      let written = 0;
      while (w.write(Buffer.from(piece))) written += piece.length;
      written += piece.length;
      let released = false;
      w.onDrain(() => (released = true));
      const r = await w.finish();
      assert.equal(r.size, written);
      assert.equal(released, true, 'the drain callback ran');
      for (const ack of held.splice(0)) ack();
      await fsp.rm(w.path);
    });

    test('an abort mid-file leaves nothing behind', async () => {
      const file = path.join(dir, 'aborted');
      const w = create(file);
      await feed(w, randomBytes(5 << 20));
      w.abort();
      w.abort();
      // The unlink queues on libuv's pool behind direct writes still in flight: wait for it, not a fixed time.
      const deadline = Date.now() + 5000;
      while (fs.existsSync(file) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      assert.equal(fs.existsSync(file), false);
    });
  });
}

describe('part file syncs', () => {
  test('a file written in one piece is opened O_DSYNC and closed without an fsync; others, and empty ones, are fsynced', async () => {
    const { createPartFile } = await import('../src/storage/disk/part-file.ts');
    const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'sluice-sync-'));
    const flagsOf = new Map<string, number>();
    let fsyncs = 0;
    const { open, fsync } = fs;
    const io: DirectIo = { supported: false }; // the page-cache path, where the two differ
    (fs as { open: unknown }).open = (p: string, flags: number, mode: number, cb: unknown) => {
      if (p.startsWith(dir)) flagsOf.set(p, flags);
      return (open as (...a: unknown[]) => void)(p, flags, mode, cb);
    };
    (fs as { fsync: unknown }).fsync = (fd: number, cb: unknown) => {
      fsyncs++;
      return (fsync as (...a: unknown[]) => void)(fd, cb);
    };
    try {
      const store = async (name: string, pieces: Buffer[]): Promise<number> => {
        const before = fsyncs;
        const p = path.join(dir, name);
        const f = createPartFile(p, { io, append: false }, (err) => assert.fail(err), () => {});
        let at = 0;
        await Promise.all(pieces.map((b) => {
          const written = new Promise<void>((resolve) => f.write(b, b.length, at, resolve, pieces.length === 1));
          at += b.length;
          return written;
        }));
        await f.close();
        assert.ok((await fsp.readFile(p)).equals(Buffer.concat(pieces)), `bytes of ${name}`);
        return fsyncs - before;
      };
      assert.equal(await store('one', [randomBytes(1024)]), 0);
      assert.ok(flagsOf.get(path.join(dir, 'one'))! & fs.constants.O_DSYNC, 'one piece: O_DSYNC');
      assert.equal(await store('two', [randomBytes(1024), randomBytes(2048)]), 1);
      assert.equal(flagsOf.get(path.join(dir, 'two'))! & fs.constants.O_DSYNC, 0);
      assert.equal(await store('empty', []), 1, 'an empty file is created at close and fsynced');
    } finally {
      (fs as { open: unknown }).open = open;
      (fs as { fsync: unknown }).fsync = fsync;
      await fsp.rm(dir, { recursive: true, force: true });
    }
  });
});

describe('direct writes', () => {
  test('go out from page-aligned memory only: any other buffer fails its file and leaves O_DIRECT on for the rest', async (t) => {
    const { createPartFile } = await import('../src/storage/disk/part-file.ts');
    const { pageAligned } = await import('../src/util/spare-buffers.ts');
    const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'sluice-direct-'));
    const io: DirectIo = { supported: true };
    try {
      if (!(await probeDirect(io, dir))) return t.skip('no O_DIRECT on this filesystem');
      const store = (name: string, buf: Buffer): Promise<Error | null> =>
        new Promise((resolve) => {
          const f = createPartFile(path.join(dir, name), { io, append: false }, (err) => (f.abort(), resolve(err)), () => {});
          // Not the file's only write: it is opened with O_DIRECT.
          f.write(buf, 5000, 0, () => f.close().then(() => resolve(null), resolve), false);
        });
      const plain = Buffer.alloc(8192, 1);
      const err = await store('plain', plain);
      assert.match(String(err), /not page-aligned/);
      assert.equal(io.supported, true, 'a refused buffer is not a refusal of O_DIRECT');
      const aligned = pageAligned(8192).fill(2);
      assert.equal(await store('aligned', aligned), null);
      assert.deepEqual(await fsp.readFile(path.join(dir, 'aligned')), Buffer.alloc(5000, 2), 'the padded tail is cut back');
    } finally {
      await fsp.rm(dir, { recursive: true, force: true });
    }
  });
});
