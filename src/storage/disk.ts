import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { randomHex } from '../util/random.ts';
import { ownTag } from '../util/process-tag.ts';
import { createPartWriter, type PartWriter } from './part-writer.ts';
import type { FileDigest, Hasher } from './hasher.ts';
import { probeDirect } from './direct-io.ts';

/** Storage keys are 32 lowercase hex characters the server made; nothing else becomes a path. */
const KEY_RE = /^[0-9a-f]{32}$/;

/** A random 128-bit id in storage-key form (also the id of a tus upload, which is public). */
export const newStorageKey = (): string => randomHex(16);

// A stored file's key starts with its shard (files/ab/cd/). Consecutive files share a shard for a
// run of SHARD_RUN keys, then a random next shard is drawn: shards still fill evenly in the long run,
// but a burst of small uploads creates a directory once per run instead of once per file (a new
// directory was most of the kernel time of a 1 KiB upload), and concurrent commits into one
// directory can share its fsync. The other 112 bits stay random.
const SHARD_RUN = 256;
/** A part last written this recently keeps its mtime at commit (see commit). */
const FRESH_PART_MS = 60_000;
let shard = '';
let shardUses = SHARD_RUN;

/** A new key for a stored file. */
export function newFileKey(): string {
  if (shardUses >= SHARD_RUN) {
    shard = randomHex(2);
    shardUses = 0;
  }
  shardUses++;
  return shard + randomHex(14);
}

export interface Disk {
  readonly filesDir: string;
  readonly tmpDir: string;
  /** Regenerable derived files (share cards); the sweeper prunes them by age. */
  readonly cacheDir: string;
  /** Final location of a stored file: files/ab/cd/abcd…, two levels of fan-out. */
  filePath(key: string): string;
  /** A new exclusive temp part in the same filesystem as the files. */
  createPart(onError: (err: Error) => void): PartWriter;
  /**
   * Makes a finished (fsynced) part visible under its key: rename, then fsync the directory.
   * `finishedAt` is when the part was last written, if the caller knows it.
   */
  commit(partPath: string, key: string, finishedAt?: number): Promise<void>;
  /** Removes a stored file and anything cached beside it (thumbnails). Missing files are fine. */
  remove(key: string): Promise<void>;
  /** Removes every temp part this process created (shutdown, after in-flight uploads are gone). */
  removeOwnParts(): Promise<number>;
  /**
   * Size and CRC-32 of a finished file, read and checksummed off the event loop (bounded
   * memory). With a `key` it continues from what digestAhead(key, …) already hashed.
   */
  digest(filePath: string, key?: string): Promise<FileDigest>;
  /** Hashes a growing file's durable first `upto` bytes in the background (see Hasher.hashAhead). */
  digestAhead(key: string, filePath: string, upto: number): void;
  /** Hashes bytes being written at `at` of that file from memory (see Hasher.feedAhead). */
  feedAhead(key: string, at: number, buf: ArrayBuffer, len: number, back: (buf: ArrayBuffer) => void): void;
}

export async function createDisk(dataDir: string, hasher: Hasher): Promise<Disk> {
  const filesDir = path.join(dataDir, 'files');
  const tmpDir = path.join(dataDir, 'tmp');
  await fsp.mkdir(filesDir, { recursive: true, mode: 0o700 });
  await fsp.mkdir(tmpDir, { recursive: true, mode: 0o700 });
  await fsyncDir(dataDir); // files/ and tmp/ themselves, on a first start
  await probeDirect(tmpDir);
  const knownDirs = new Set<string>();
  const making = new Map<string, Promise<void>>();
  const syncDir = coalesced(fsyncDir);

  /**
   * Makes a shard directory (files/ab/cd) durable before its first use by this process: both levels'
   * entries are fsynced in their parents, even when the directories already existed, since another
   * process may have just made them and not yet synced (two fsyncs per shard run of files).
   */
  const ensureDir = (dir: string): Promise<void> => {
    if (knownDirs.has(dir)) return Promise.resolve();
    let p = making.get(dir);
    if (!p) {
      p = (async () => {
        await fsp.mkdir(dir, { recursive: true, mode: 0o700 });
        await Promise.all([syncDir(path.dirname(dir)), syncDir(path.dirname(path.dirname(dir)))]);
        knownDirs.add(dir);
      })().finally(() => making.delete(dir));
      making.set(dir, p);
    }
    return p;
  };

  const filePath = (key: string): string => {
    if (!KEY_RE.test(key)) throw new Error(`invalid storage key ${JSON.stringify(key)}`);
    return path.join(filesDir, key.slice(0, 2), key.slice(2, 4), key);
  };

  return {
    filesDir,
    tmpDir,
    cacheDir: path.join(dataDir, 'cache'),
    filePath,
    // The pid and its start tag in the name let the sweeper tell a crashed writer's leftovers from a
    // live one's, even when the pid runs again (process-tag.ts).
    createPart: (onError) =>
      createPartWriter(path.join(tmpDir, `${process.pid}-${ownTag}-${randomHex(12)}.part`), hasher, onError),
    async commit(partPath, key, finishedAt) {
      const dest = filePath(key);
      const dir = path.dirname(dest);
      await ensureDir(dir);
      // The orphan sweep spares files modified within its grace period (15 min), which must cover the
      // time from here to the database commit. A part written long ago (the first file of a long
      // multi-file upload, a tus upload) gets a fresh mtime; a part just written already has one.
      if (finishedAt === undefined || Date.now() - finishedAt > FRESH_PART_MS) {
        const now = new Date();
        await fsp.utimes(partPath, now, now);
      }
      await fsp.rename(partPath, dest).catch(async (err: NodeJS.ErrnoException) => {
        // The shard directory went away after this process made it (removed by hand): make it again
        // and retry once, rather than fail every upload of the shard's run. Every commit that hit the
        // gap retries, not only the first to notice: concurrent ones share the one ensureDir.
        if (err.code !== 'ENOENT') throw err;
        knownDirs.delete(dir);
        await ensureDir(dir);
        await fsp.rename(partPath, dest);
      });
      await syncDir(dir);
    },
    async removeOwnParts() {
      const mine = (await fsp.readdir(tmpDir)).filter((n) => n.startsWith(`${process.pid}-${ownTag}-`) && n.endsWith('.part'));
      await Promise.all(mine.map((n) => fsp.rm(path.join(tmpDir, n), { force: true })));
      return mine.length;
    },
    digest: (filePath, key) => hasher.digestFile(filePath, key),
    digestAhead: (key, filePath, upto) => hasher.hashAhead(key, filePath, upto),
    feedAhead: (key, at, buf, len, back) => hasher.feedAhead(key, at, buf, len, back),
    async remove(key) {
      const p = filePath(key);
      const dir = path.dirname(p);
      const names = await fsp.readdir(dir).catch(() => [] as string[]);
      await Promise.all(
        names.filter((n) => n === key || n.startsWith(`${key}.`)).map((n) => fsp.rm(path.join(dir, n), { force: true })),
      );
    },
  };
}

/**
 * Wraps a per-key task so that callers arriving while it runs share ONE next run (started when the
 * current one ends) instead of each queueing their own: a directory fsync started after a caller's
 * rename covers that rename, whoever asked for it.
 */
export function coalesced(task: (key: string) => Promise<void>): (key: string) => Promise<void> {
  const keys = new Map<string, { tail: Promise<void>; queued: Promise<void> | null }>();
  return (key) => {
    const entry = keys.get(key) ?? { tail: Promise.resolve(), queued: null };
    if (entry.queued) return entry.queued;
    const run = entry.tail.then(() => {
      entry.queued = null;
      return task(key);
    });
    const tail = run.then(
      () => {},
      () => {},
    );
    entry.queued = run;
    entry.tail = tail;
    keys.set(key, entry);
    void tail.then(() => {
      if (entry.tail === tail) keys.delete(key);
    });
    return run;
  };
}

async function fsyncDir(dir: string): Promise<void> {
  const fd = await new Promise<number>((resolve, reject) =>
    fs.open(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY, (err, fd) => (err ? reject(err) : resolve(fd))),
  );
  try {
    await new Promise<void>((resolve, reject) => fs.fsync(fd, (err) => (err ? reject(err) : resolve())));
  } finally {
    fs.close(fd, () => {});
  }
}
