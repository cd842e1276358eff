import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { randomHex } from '../../util/random.ts';
import { ownTag } from '../../util/process-tag.ts';
import { ownedDirs } from '../../util/data-dir.ts';
import { createPartWriter } from './part-writer.ts';
import type { Hasher } from '../hasher.ts';
import { probeDirect, type DirectIo } from './direct-io.ts';
import { readFullyAt } from './read-at.ts';
import { coalesced, fsyncDir, shardDirs, shardedKeys } from './dirs.ts';
import { BLOB_KEY_RE, type BlobReader, type BlobStore, type BlobWriter } from '../blob-store.ts';
import { BlobError } from '../../errors.ts';
import type { WriterCount } from './slots.ts';
import type { DiskCore, DiskLayout } from './core.ts';
import { diskResumables } from './resumable.ts';
import { diskSweep } from './sweep.ts';
import { diskCache } from './cache.ts';

/** A part last written this recently keeps its mtime at publish (see publish). */
const FRESH_PART_MS = 60_000;

export interface DiskStore extends BlobStore {
  readonly layout: DiskLayout;
  syncedHere: NonNullable<BlobStore['syncedHere']>;
  checkUnsynced: NonNullable<BlobStore['checkUnsynced']>;
}

export function diskLayout(dataDir: string): DiskLayout {
  const filesDir = path.join(dataDir, 'files');
  return {
    filesDir,
    tmpDir: path.join(dataDir, 'tmp'),
    resumableDir: path.join(dataDir, 'tus'),
    cacheDir: path.join(dataDir, 'cache'),
    filePath(key) {
      if (!BLOB_KEY_RE.test(key)) throw new Error(`invalid storage key ${JSON.stringify(key)}`);
      return path.join(filesDir, key.slice(0, 2), key.slice(2, 4), key);
    },
  };
}

/** `direct: false` never tries O_DIRECT (tests of the page-cache path). */
export async function createDiskStore(dataDir: string, hasher: Hasher, opts: { direct?: boolean } = {}): Promise<DiskStore> {
  const layout = diskLayout(dataDir);
  // Stored files live two levels below files/ (files/ab/cd/<key>), cached previews beside them.
  for (const [dir, depth] of [[layout.filesDir, 2], [layout.tmpDir, 0], [layout.resumableDir, 0], [layout.cacheDir, 2]] as const) ownedDirs(dir, depth);
  for (const dir of [layout.filesDir, layout.tmpDir, layout.resumableDir]) await fsp.mkdir(dir, { recursive: true, mode: 0o700 });
  await fsyncDir(dataDir); // files/, tmp/ and tus/ themselves, on a first start
  const io: DirectIo = { supported: opts.direct ?? true };
  await probeDirect(io, layout.tmpDir);
  const syncDir = coalesced(fsyncDir);
  const shards = shardDirs(syncDir);

  async function publish(from: string, key: string, finishedAt?: number): Promise<void> {
    const dest = layout.filePath(key);
    const dir = path.dirname(dest);
    await shards.ensure(dir);
    // The orphan sweep spares files modified within its grace period, which must cover the time
    // from here to the row commit. A part written long ago (the first file of a long multi-file
    // upload, a tus upload) gets a fresh mtime; a part just written already has one.
    if (finishedAt === undefined || Date.now() - finishedAt > FRESH_PART_MS) {
      const now = new Date();
      await fsp.utimes(from, now, now);
    }
    await fsp.rename(from, dest).catch(async (err: NodeJS.ErrnoException) => {
      // The shard directory went away after this store made it (removed by hand): make it again and
      // retry once, rather than fail every upload of the shard's run. Every publish that hit the gap
      // retries, not only the first to notice: concurrent ones share the one ensure.
      if (err.code !== 'ENOENT') throw err;
      shards.forget(dir);
      await shards.ensure(dir);
      await fsp.rename(from, dest);
    });
    await syncDir(dir);
  }

  const core: DiskCore = { layout, hasher, io, count: { active: 0 }, newKey: shardedKeys(), publish };
  const cache = diskCache(layout);

  async function remove(key: string): Promise<void> {
    const p = layout.filePath(key);
    const dir = path.dirname(p);
    const names = await fsp.readdir(dir).catch(() => [] as string[]);
    await Promise.all(
      names.filter((n) => n === key || n.startsWith(`${key}.`)).map((n) => fsp.rm(path.join(dir, n), { force: true })),
    );
  }

  // A stored file is opened only as itself: never through a symbolic link, never as anything but a regular file.
  const openFd = (key: string): Promise<number> =>
    new Promise((resolve, reject) =>
      fs.open(layout.filePath(key), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW, (err, fd) =>
        err ? reject(err.code === 'ENOENT' || err.code === 'ELOOP' ? new BlobError('NOT_FOUND', `no object ${key} (${err.code})`) : err) : resolve(fd),
      ),
    );
  const sizeOf = (fd: number): Promise<number> =>
    new Promise((resolve, reject) =>
      fs.fstat(fd, (err, st) => (err ? reject(err) : st.isFile() ? resolve(st.size) : reject(new BlobError('NOT_FOUND', 'not a regular file')))),
    );

  return {
    layout,
    newKey: core.newKey,
    createWriter(wopts = {}): BlobWriter {
      const key = core.newKey();
      // The pid and its start tag in the name let the sweeper tell a crashed writer's leftovers from
      // a live one's, even when the pid runs again (process-tag.ts).
      const temp = path.join(layout.tmpDir, `${process.pid}-${ownTag}-${randomHex(12)}.part`);
      const part = createPartWriter(temp, { hasher, io, count: core.count, onError: wopts.onError ?? (() => {}), sha256: wopts.sha256 });
      let finishedAt: number | undefined;
      let published = false;
      let aborted = false;
      return {
        key,
        write: (chunk, transient) => part.write(chunk, transient),
        onDrain: (fn) => part.onDrain(fn),
        holding: () => part.holding(),
        async finish() {
          const r = await part.finish();
          finishedAt = Date.now();
          return r;
        },
        async publish() {
          if (finishedAt === undefined) throw new Error('publish before finish');
          if (aborted) throw new BlobError('ABORTED', 'writer aborted');
          await publish(temp, key, finishedAt);
          published = true;
          // Aborted while the rename ran: the object must not stay.
          if (aborted) await remove(key);
        },
        async abort() {
          if (aborted) return;
          aborted = true;
          part.abort(); // unlinks the temp part (in the background while writes are in flight)
          if (finishedAt !== undefined) await fsp.rm(temp, { force: true });
          if (published) await remove(key);
        },
      };
    },
    ...diskResumables(core),
    async open(key): Promise<BlobReader> {
      const fd = await openFd(key);
      let closed = false;
      const size = await sizeOf(fd).catch((err: Error) => {
        fs.close(fd, () => {});
        throw err;
      });
      return {
        size,
        readInto: (target, pos) =>
          readFullyAt(fd, target, pos, () => !closed, () => new BlobError('SHORT', `object ${key} shorter than expected`)),
        close() {
          if (closed) return;
          closed = true;
          fs.close(fd, () => {});
        },
      };
    },
    async read(key, range = {}) {
      const fd = await openFd(key);
      try {
        const size = await sizeOf(fd);
        const start = range.start ?? 0;
        const end = Math.min(range.end ?? size, size);
        if (start > size) throw new BlobError('OUT_OF_RANGE', `range starts at ${start}, past the end (${size})`);
        if (start >= end) {
          fs.close(fd, () => {});
          return Readable.from([]);
        }
        return fs.createReadStream('', { fd, start, end: end - 1, highWaterMark: 1 << 20 });
      } catch (err) {
        fs.close(fd, () => {});
        throw err;
      }
    },
    delete: remove,
    async withLocalFile(key, fn) {
      const file = layout.filePath(key);
      const st = await fsp.lstat(file).catch(() => null);
      if (!st?.isFile()) throw new BlobError('NOT_FOUND', `no object ${key}`);
      return fn(file);
    },
    ...diskSweep(layout),
    async removeOwnTemps() {
      const mine = (await fsp.readdir(layout.tmpDir)).filter((n) => n.startsWith(`${process.pid}-${ownTag}-`) && n.endsWith('.part'));
      await Promise.all(mine.map((n) => fsp.rm(path.join(layout.tmpDir, n), { force: true })));
      return mine.length;
    },
    cache,
    fastPath: () => io.supported,
    close: async () => {},
  };
}
