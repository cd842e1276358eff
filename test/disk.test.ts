import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fsp from 'node:fs/promises';
import os from 'node:os';
import { randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';
import path from 'node:path';
import { createDiskStore, type DiskStore } from '../src/storage/disk/store.ts';
import { coalesced, shardedKeys } from '../src/storage/disk/dirs.ts';
import { createHasher, type Hasher } from '../src/storage/hasher.ts';

describe('storage keys', () => {
  test('file keys are unique 32-hex keys that share a shard for runs, then move on', () => {
    const newKey = shardedKeys();
    const keys = Array.from({ length: 2048 }, () => newKey());
    for (const k of keys) assert.match(k, /^[0-9a-f]{32}$/);
    assert.equal(new Set(keys).size, keys.length);
    const shards = new Set(keys.map((k) => k.slice(0, 4)));
    // 2048 keys in runs of 256: at most 9 runs (the first may be partial), far fewer than random keys' ~2000 shards.
    assert.ok(shards.size >= 2 && shards.size <= 9, `shards: ${shards.size}`);
  });
});

describe('coalesced task', () => {
  test('callers arriving while a run is in flight share one next run; each caller sees a run that started after it', async () => {
    const started: number[] = [];
    let release: (() => void) | undefined;
    const run = coalesced(async () => {
      started.push(Date.now());
      await new Promise<void>((resolve) => (release = resolve));
    });
    const first = [run('d'), run('d')]; // same tick: one run
    await new Promise((r) => setImmediate(r));
    assert.equal(started.length, 1);
    const second = [run('d'), run('d'), run('d')]; // while it runs: one queued run for all three
    await new Promise((r) => setImmediate(r));
    assert.equal(started.length, 1);
    release!();
    await Promise.all(first);
    await new Promise((r) => setImmediate(r));
    assert.equal(started.length, 2);
    release!();
    await Promise.all(second);
    const other = run('e');
    await new Promise((r) => setImmediate(r));
    assert.equal(started.length, 3, 'another key runs on its own');
    release!();
    await other;
  });

  test('a failed run rejects every caller that shared it, and the next call runs again', async () => {
    let calls = 0;
    const run = coalesced(async () => {
      calls++;
      if (calls === 1) throw new Error('EIO');
    });
    const results = await Promise.allSettled([run('d'), run('d')]);
    assert.deepEqual(results.map((r) => r.status), ['rejected', 'rejected']);
    await run('d');
    assert.equal(calls, 2);
  });
});

/** A disk store in a directory of its own for the enclosing describe block (made before its tests, removed after). */
function freshDisk(): { readonly store: DiskStore } {
  let dir: string;
  let hasher: Hasher;
  let store: DiskStore;
  before(async () => {
    dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'sluice-disk-'));
    hasher = createHasher(1);
    store = await createDiskStore(dir, hasher);
  });
  after(async () => {
    await hasher.close();
    await fsp.rm(dir, { recursive: true, force: true });
  });
  return {
    get store() {
      return store;
    },
  };
}

describe('disk publish', () => {
  const fresh = freshDisk();

  /** Writes `text` as a new object and publishes it; returns its key. */
  const store = async (text: string): Promise<string> => {
    const w = fresh.store.createWriter();
    w.write(Buffer.from(text));
    await w.finish();
    await w.publish();
    return w.key;
  };
  const text = async (key: string): Promise<string> => fsp.readFile(fresh.store.layout.filePath(key), 'utf8');

  test('concurrent publishes into new and shared shard directories all land', async () => {
    const keys = await Promise.all(Array.from({ length: 40 }, (_, i) => store(`file ${i}`)));
    for (const [i, key] of keys.entries()) assert.equal(await text(key), `file ${i}`);
    assert.deepEqual(await fsp.readdir(fresh.store.layout.tmpDir), []);
  });

  test('a shard directory removed by hand after its first use is made again by the next publish', async () => {
    const first = await store('file 1');
    const shard = path.join(fresh.store.layout.filesDir, first.slice(0, 2));
    await fsp.rm(shard, { recursive: true });
    // Keys come in shard runs: the next ones land in the directory just removed.
    const second = await store('file 2');
    assert.equal(second.slice(0, 4), first.slice(0, 4));
    assert.equal(await text(second), 'file 2');
    // Several publishes into the gone directory at once: each one retries, not only the first to notice.
    await fsp.rm(shard, { recursive: true });
    const more = await Promise.all([4, 5, 6, 7].map((n) => store(`file ${n}`)));
    for (const [i, key] of more.entries()) assert.equal(await text(key), `file ${i + 4}`);
    // Publishing what was never finished is an error, not a retry loop.
    await assert.rejects(fresh.store.createWriter().publish());
  });
});

describe('disk resumables: a range on record before its sync', () => {
  const fresh = freshDisk();

  const MiB = 1 << 20;
  const newId = (): string => randomBytes(16).toString('hex');
  async function append(id: string, at: number, data: Buffer): Promise<number> {
    const ap = await fresh.store.append(id, at, { limit: 1 << 30, hashAhead: false });
    ap.write(data);
    const f = await ap.finish({ crc32: crc32(data) });
    assert.equal(f.error, null);
    return f.offset;
  }

  test('an append the store synced is known at once; another range is read back and must match its CRC-32', async () => {
    const id = newId();
    await fresh.store.createResumable(id);
    const first = randomBytes(MiB + 123);
    const second = randomBytes(3 * MiB);
    assert.equal(await append(id, 0, first), first.length);
    assert.equal(await append(id, first.length, second), first.length + second.length);
    const range = { from: first.length, to: first.length + second.length, crc32: crc32(second) };
    assert.ok(fresh.store.syncedHere(id, range), 'the last append is known synced');
    assert.ok(!fresh.store.syncedHere(id, { ...range, crc32: (range.crc32 ^ 1) >>> 0 }), 'the same range with other bytes');
    assert.ok(!fresh.store.syncedHere(id, { from: 0, to: first.length, crc32: crc32(first) }), 'only the last append is remembered');
    assert.ok(await fresh.store.checkUnsynced(id, { from: 0, to: first.length, crc32: crc32(first) }), 'read back and matching');
    assert.ok(fresh.store.syncedHere(id, { from: 0, to: first.length, crc32: crc32(first) }), 'a checked range is then known');
    assert.ok(!(await fresh.store.checkUnsynced(id, { from: 0, to: first.length, crc32: (crc32(first) ^ 1) >>> 0 })), 'a wrong CRC-32');
    assert.ok(!(await fresh.store.checkUnsynced(id, { from: range.from, to: range.to + 1, crc32: range.crc32 })), 'past the end of the file');
    assert.ok(!(await fresh.store.checkUnsynced(newId(), range)), 'no such resumable');
  });

  test('a range written again is no longer known, nor one of a removed resumable', async () => {
    const id = newId();
    await fresh.store.createResumable(id);
    const data = randomBytes(2 * MiB);
    await append(id, 0, data);
    const whole = { from: 0, to: data.length, crc32: crc32(data) };
    assert.ok(fresh.store.syncedHere(id, whole));
    // The range was dropped (its client resumed from its start) and is being written again.
    const ap = await fresh.store.append(id, 0, { limit: 1 << 30, hashAhead: false });
    assert.ok(!fresh.store.syncedHere(id, whole));
    ap.abort();
    await fresh.store.removeResumable(id);
    assert.ok(!fresh.store.syncedHere(id, whole));
  });
});
