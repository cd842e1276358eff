/**
 * The blob-store contract as a test suite over a store factory (src/storage/blob-store.ts): every
 * implementation runs it, each from its own test file (disk: test/storage-contract.test.ts). A
 * target supplies what only it can (fault injection, a full store, a crash child); a test whose
 * hook a target lacks says so and is skipped.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';
import { spawn, type ChildProcess } from 'node:child_process';
import { fromRoot } from '../../src/paths.ts';
import { waitFor } from './wait.ts';
import type { Readable } from 'node:stream';
import type { BlobAppender, BlobStore, BlobWriter } from '../../src/storage/blob-store.ts';

export interface StoreUnderTest {
  readonly store: BlobStore;
  /** Everything the store holds at rest (objects, temp objects, resumables, multipart uploads). */
  residue(): Promise<string[]>;
  cleanup(): Promise<void>;
}

export interface ContractTarget {
  readonly name: string;
  create(): Promise<StoreUnderTest>;
  /** A store with little room left (a small tmpfs): writes past it fail with ENOSPC. */
  full?(): Promise<(StoreUnderTest & { readonly room: number }) | null>;
  /** Makes the underlying writes return short counts until the returned function runs. */
  shortWrites?(): () => void;
  /** Makes the underlying writes fail with `code` until the returned function runs. */
  failWrites?(code: string): () => void;
  /** Makes the store's cache-bypassing open refused (EINVAL) until the returned function runs. */
  refuseDirect?(): () => void;
  /**
   * Starts a process that works on `sut`'s storage (see helpers/storage-child.ts for the modes) and
   * resolves once it printed `ready <key or id>`.
   */
  spawnChild?(sut: StoreUnderTest, args: string[]): Promise<{ child: ChildProcess; ready: string }>;
}

const MiB = 1 << 20;
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const PIECES = [30_011, 65_536, 1, 524_288, 4_095];

/** Feeds `data` in uneven pieces, honouring backpressure; returns how often write() said stop. */
/** Starts a crash child (`test/helpers/<script>`) and resolves once it prints `ready <key or id>`. */
export function spawnReadyChild(script: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<{ child: ChildProcess; ready: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', fromRoot(`test/helpers/${script}`), ...args], { stdio: ['ignore', 'pipe', 'inherit'], env });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /ready (\S+)\n/.exec(out);
      if (m) resolve({ child, ready: m[1]! });
    });
    child.once('exit', (code) => reject(new Error(`storage child exited (${code}) before it was ready`)));
  });
}

export async function feed(w: Pick<BlobWriter, 'write' | 'onDrain'>, data: Buffer): Promise<number> {
  let stops = 0;
  for (let at = 0, i = 0; at < data.length; i++) {
    const n = Math.min(data.length - at, PIECES[i % PIECES.length]!);
    const ok = w.write(Buffer.from(data.subarray(at, at + n)));
    at += n;
    if (!ok) {
      stops++;
      await new Promise<void>((resolve) => w.onDrain(resolve));
    }
  }
  return stops;
}

async function collect(r: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of r) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

/** Writes, finishes and publishes `data`; returns the key. */
async function put(store: BlobStore, data: Buffer): Promise<string> {
  const w = store.createWriter();
  await feed(w, data);
  await w.finish();
  await w.publish();
  return w.key;
}

async function appendAll(a: BlobAppender, data: Buffer): Promise<number> {
  await feed(a, data);
  const r = await a.finish();
  if (r.error) throw r.error;
  return r.offset;
}

/** Runs `fn` against a fresh store of `target`, cleaned up after. */
const withStore = (target: ContractTarget, fn: (sut: StoreUnderTest) => Promise<void>) => async () => {
  const sut = await target.create();
  try {
    await fn(sut);
  } finally {
    await sut.cleanup();
  }
};

export function storageContract(target: ContractTarget): void {
  describe(`blob store contract: ${target.name}`, () => {
    test(
      'an object is durable with its digest at finish, visible only after publish, and read back byte for byte',
      withStore(target, async ({ store }) => {
        for (const size of [0, 1, 4095, 4097, MiB + 1, 5 * MiB + 3]) {
          const data = randomBytes(size);
          const w = store.createWriter({ sha256: true });
          await feed(w, data);
          const d = await w.finish();
          assert.deepEqual(d, { size, crc32: crc32(data) >>> 0, sha256: sha(data) }, `digest of ${size}`);
          await assert.rejects(store.open(w.key), { code: 'NOT_FOUND' }, 'not visible before publish');
          await w.publish();
          assert.ok((await collect(await store.read(w.key))).equals(data), `bytes of ${size}`);
        }
      }),
    );

    test(
      'backpressure: a large write says stop, drains, and memory stays bounded',
      withStore(target, async ({ store }) => {
        const w = store.createWriter();
        const data = randomBytes(24 * MiB);
        const stops = await feed(w, data);
        assert.ok(stops > 0, 'write() returned false at least once');
        assert.equal((await w.finish()).size, data.length);
        await w.abort();
      }),
    );

    test('short writes of the underlying storage still store every byte', async (t) => {
      if (!target.shortWrites) return t.skip(`${target.name} has no short-write injection`);
      await withStore(target, async ({ store }) => {
        const restore = target.shortWrites!();
        try {
          const data = randomBytes(3 * MiB + 777);
          const key = await put(store, data);
          assert.ok((await collect(await store.read(key))).equals(data));
        } finally {
          restore();
        }
      })();
    });

    test('a failing write (EIO) rejects finish, and abort leaves nothing', async (t) => {
      if (!target.failWrites) return t.skip(`${target.name} has no write-failure injection`);
      await withStore(target, async (sut) => {
        const errors: Error[] = [];
        const w = sut.store.createWriter({ onError: (e) => errors.push(e) });
        const restore = target.failWrites!('EIO');
        try {
          await feed(w, randomBytes(3 * MiB));
          await assert.rejects(w.finish(), { code: 'EIO' });
        } finally {
          restore();
        }
        assert.equal(errors.length, 1, 'onError ran once');
        await w.abort();
        assert.deepEqual(await sut.residue(), []);
      })();
    });

    test('a full store (ENOSPC): finish rejects, abort leaves nothing, and the space comes back', async (t) => {
      const sut = target.full ? await target.full() : null;
      if (!sut) return t.skip(`${target.name}: no small store to fill (needs a tmpfs mount)`);
      try {
        const w = sut.store.createWriter();
        await feed(w, randomBytes(sut.room + 8 * MiB)).catch(() => {});
        await assert.rejects(w.finish(), { code: 'ENOSPC' });
        await w.abort();
        assert.deepEqual(await sut.residue(), []);
        // Room again once the aborted object's space is freed (its last write in flight closes it).
        const small = randomBytes(MiB);
        for (let i = 0; ; i++) {
          try {
            const key = await put(sut.store, small);
            assert.ok((await collect(await sut.store.read(key))).equals(small));
            break;
          } catch (err) {
            if (i > 50) throw err;
            await new Promise((r) => setTimeout(r, 100));
          }
        }
      } finally {
        await sut.cleanup();
      }
    });

    test(
      'an abort mid-write, and an abort after publish, leave nothing',
      withStore(target, async (sut) => {
        const w = sut.store.createWriter();
        await feed(w, randomBytes(5 * MiB));
        await w.abort();
        await w.abort();
        assert.deepEqual(await sut.residue(), []);
        const p = sut.store.createWriter();
        await feed(p, randomBytes(MiB));
        await p.finish();
        await p.publish();
        await p.abort();
        assert.deepEqual(await sut.residue(), []);
        await assert.rejects(sut.store.open(p.key), { code: 'NOT_FOUND' });
      }),
    );

    test('a refused O_DIRECT falls back to the page cache and stores the same bytes', async (t) => {
      if (!target.refuseDirect) return t.skip(`${target.name} has no direct I/O`);
      const restore = target.refuseDirect();
      try {
        await withStore(target, async ({ store }) => {
          assert.equal(store.fastPath(), false, 'the probe saw the refusal');
          const data = randomBytes(4 * MiB + 5);
          const key = await put(store, data);
          assert.ok((await collect(await store.read(key))).equals(data));
        })();
      } finally {
        restore();
      }
    });

    test('a writer killed mid-write leaves a temp object the sweeper listing finds', async (t) => {
      if (!target.spawnChild) return t.skip(`${target.name} has no crash child`);
      await withStore(target, async (sut) => {
        const { child } = await target.spawnChild!(sut, ['midwrite']);
        child.kill('SIGKILL');
        await new Promise((r) => child.once('exit', r));
        const left = (await sut.store.listLeftovers(0)).filter((l) => l.kind === 'temp');
        assert.equal(left.length, 1, 'the dead writer’s temp object is listed');
        await sut.store.removeLeftover(left[0]!);
        assert.deepEqual(await sut.residue(), []);
      })();
    });

    test('a crash between publish and the row commit leaves an orphan key the sweeper listing finds', async (t) => {
      if (!target.spawnChild) return t.skip(`${target.name} has no crash child`);
      await withStore(target, async (sut) => {
        const kept = await put(sut.store, randomBytes(1000));
        const { child, ready } = await target.spawnChild!(sut, ['published']);
        child.kill('SIGKILL');
        await new Promise((r) => child.once('exit', r));
        const listed: string[] = [];
        for await (const batch of sut.store.listKeys(0)) listed.push(...batch);
        assert.deepEqual(listed.sort(), [kept, ready].sort());
        const young: string[] = [];
        for await (const batch of sut.store.listKeys(60_000)) young.push(...batch);
        assert.deepEqual(young, [], 'nothing younger than the bound');
        await sut.store.delete(ready);
        assert.equal((await sut.residue()).length, 1, 'only the object with a row is left');
      })();
    });

    test(
      'a range past the end is an error; at the end it is empty; an end past it is clamped',
      withStore(target, async ({ store }) => {
        const data = randomBytes(10_000);
        const key = await put(store, data);
        await assert.rejects(store.read(key, { start: 10_001 }), { code: 'OUT_OF_RANGE' });
        assert.equal((await collect(await store.read(key, { start: 10_000 }))).length, 0);
        assert.ok((await collect(await store.read(key, { start: 9_000, end: 20_000 }))).equals(data.subarray(9_000)));
        assert.ok((await collect(await store.read(key, { start: 5, end: 15 }))).equals(data.subarray(5, 15)));
        const r = await store.open(key);
        try {
          assert.equal(r.size, data.length);
          await assert.rejects(r.readInto(Buffer.alloc(100), 9_950), { code: 'SHORT' });
        } finally {
          r.close();
        }
        await assert.rejects(store.read('0'.repeat(32)), { code: 'NOT_FOUND' });
      }),
    );

    test(
      'appends: durable offsets, unacknowledged bytes never survive, completion publishes exactly the bytes on record',
      withStore(target, async (sut) => {
        const { store } = sut;
        const id = randomBytes(16).toString('hex');
        await store.createResumable(id);
        const a = randomBytes(3 * MiB + 17);
        const b = randomBytes(2 * MiB + 5);
        let offset = await appendAll(await store.append(id, 0, { limit: 100 * MiB, hashAhead: true }), a);
        assert.equal(offset, a.length);
        // An append aborted midway, one cut back by the caller (a checksum mismatch): neither counts.
        const lost = await store.append(id, offset, { limit: 100 * MiB, hashAhead: true });
        await feed(lost, randomBytes(MiB + 3));
        lost.abort();
        // The aborted append lets go of the upload once its cut-back is done: until then a new one is BUSY.
        const cut = await waitFor('the aborted append to let go (BUSY until then)', () => store.append(id, offset, { limit: 100 * MiB, hashAhead: true }));
        await feed(cut, randomBytes(1000));
        assert.equal((await cut.finish({ cutTo: offset })).offset, offset);
        offset = await appendAll(await store.append(id, offset, { limit: 100 * MiB, hashAhead: true }), b);
        assert.equal(offset, a.length + b.length);
        await assert.rejects(store.append(id, offset + 1, { limit: 100 * MiB, hashAhead: true }), { code: 'OFFSET_MISMATCH' });
        // Past the limit: what came before the crossing chunk counts.
        const over = await store.append(id, offset, { limit: offset + 10, hashAhead: true });
        over.write(Buffer.alloc(11));
        const r = await over.finish();
        assert.equal(r.offset, offset);
        assert.equal((r.error as { code?: string } | null)?.code, 'TOO_LARGE');
        const { key, digest } = await store.completeResumable(id, offset);
        const all = Buffer.concat([a, b]);
        assert.equal(digest.size, all.length);
        assert.equal(digest.crc32, crc32(all) >>> 0);
        assert.ok((await collect(await store.read(key))).equals(all));
        await store.delete(key);
        assert.deepEqual(await sut.residue(), []);
      }),
    );

    test(
      'concurrent appends at the same offset: exactly one writes, no corruption',
      withStore(target, async ({ store }) => {
        const id = randomBytes(16).toString('hex');
        await store.createResumable(id);
        const datas = [randomBytes(2 * MiB), randomBytes(2 * MiB)];
        const settled = await Promise.allSettled(
          datas.map(async (d) => ({ d, offset: await appendAll(await store.append(id, 0, { limit: 100 * MiB, hashAhead: false }), d) })),
        );
        const won = settled.filter((s) => s.status === 'fulfilled');
        const lost = settled.filter((s) => s.status === 'rejected');
        assert.equal(won.length, 1, 'exactly one append wins');
        assert.equal((lost[0] as PromiseRejectedResult).reason.code, 'BUSY');
        const winner = (won[0] as PromiseFulfilledResult<{ d: Buffer; offset: number }>).value;
        const { key } = await store.completeResumable(id, winner.offset);
        assert.ok((await collect(await store.read(key))).equals(winner.d));
      }),
    );

    test('an append killed mid-write: its bytes never survive the next append, nor a completion', async (t) => {
      if (!target.spawnChild) return t.skip(`${target.name} has no crash child`);
      await withStore(target, async (sut) => {
        const { store } = sut;
        /** A resumable holding `first` on record, with an append to it killed midway. */
        const interrupted = async (first: Buffer): Promise<string> => {
          const id = randomBytes(16).toString('hex');
          await store.createResumable(id);
          const offset = await appendAll(await store.append(id, 0, { limit: 100 * MiB, hashAhead: true }), first);
          const { child } = await target.spawnChild!(sut, ['midappend', id, String(offset)]);
          child.kill('SIGKILL');
          await new Promise((r) => child.once('exit', r));
          return id;
        };
        const kept = randomBytes(MiB + 5);
        const done = await store.completeResumable(await interrupted(kept), kept.length);
        assert.equal(done.digest.size, kept.length);
        assert.ok((await collect(await store.read(done.key))).equals(kept), 'completed at the offset on record');
        const first = randomBytes(MiB + 11);
        const offset = first.length;
        const id = await interrupted(first);
        const next = randomBytes(4097);
        const end = await appendAll(await store.append(id, offset, { limit: 100 * MiB, hashAhead: true }), next);
        const { key, digest } = await store.completeResumable(id, end);
        const all = Buffer.concat([first, next]);
        assert.equal(digest.crc32, crc32(all) >>> 0);
        assert.ok((await collect(await store.read(key))).equals(all));
      })();
    });

    test(
      'a delete during a read does not crash the reader',
      withStore(target, async ({ store }) => {
        const data = randomBytes(6 * MiB);
        const key = await put(store, data);
        const reader = await store.open(key);
        const stream = await store.read(key);
        const first = Buffer.alloc(MiB);
        await reader.readInto(first, 0);
        await store.delete(key);
        await store.delete(key); // missing is fine
        // Either the bytes already opened stay readable, or the read fails cleanly with NOT_FOUND.
        const rest = Buffer.alloc(MiB);
        await reader.readInto(rest, 4 * MiB).then(
          () => assert.ok(rest.equals(data.subarray(4 * MiB, 5 * MiB))),
          (err: { code?: string }) => assert.equal(err.code, 'NOT_FOUND'),
        );
        reader.close();
        await collect(stream).then(
          (got) => assert.ok(got.equals(data)),
          (err: { code?: string }) => assert.equal(err.code, 'NOT_FOUND'),
        );
        await assert.rejects(store.open(key), { code: 'NOT_FOUND' });
      }),
    );

    test(
      'open with the size a row records: reads as without it; a missing object is NOT_FOUND at open or at the first read',
      withStore(target, async ({ store }) => {
        // Small objects and ones read in long spans (S3 reads those another way).
        for (const size of [300_000, 5 * MiB]) {
          const data = randomBytes(size);
          const key = await put(store, data);
          const reader = await store.open(key, { size });
          assert.equal(reader.size, size);
          const got = Buffer.alloc(size);
          await reader.readInto(got.subarray(0, 1000), 0);
          await reader.readInto(got.subarray(1000), 1000);
          assert.ok(got.equals(data));
          reader.close();
          await store.delete(key);
          await assert.rejects(
            store.open(key, { size }).then((r) => r.readInto(Buffer.alloc(10), 0).finally(() => r.close())),
            { code: 'NOT_FOUND' },
          );
        }
        // Said to be longer than it is: a read past its real end is SHORT.
        const data = randomBytes(1000);
        const key = await put(store, data);
        const r = await store.open(key, { size: 2000 });
        await assert.rejects(r.readInto(Buffer.alloc(500), 1200), { code: 'SHORT' });
        r.close();
        await store.delete(key);
      }),
    );

    test(
      'the cache: put, get, owned entries go with their object, others are pruned by age',
      withStore(target, async (sut) => {
        const { store } = sut;
        const key = await put(store, randomBytes(100));
        await store.cache.put(`${key}.thumb.webp`, Buffer.from('thumb'));
        await store.cache.put('og/Abc-123.png', Buffer.from('card'));
        assert.equal((await store.cache.get(`${key}.thumb.webp`))?.toString(), 'thumb');
        assert.equal((await store.cache.get('og/Abc-123.png'))?.toString(), 'card');
        assert.equal(await store.cache.get('og/none.png'), null);
        assert.equal(await store.cache.prune(60_000), 0, 'young entries stay');
        await store.delete(key);
        assert.equal(await store.cache.get(`${key}.thumb.webp`), null, 'went with its object');
        await new Promise((r) => setTimeout(r, 20));
        assert.equal(await store.cache.prune(0), 1);
        assert.deepEqual(await sut.residue(), []);
        await assert.rejects(store.cache.put('../escape', Buffer.from('x')));
      }),
    );
  });
}
