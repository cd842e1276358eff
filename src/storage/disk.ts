import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { createPartWriter, type PartWriter } from './part-writer.ts';
import type { FileDigest, Hasher } from './hasher.ts';
import { probeDirect } from './direct-io.ts';

/** Storage keys are 32 lowercase hex characters the server made; nothing else becomes a path. */
const KEY_RE = /^[0-9a-f]{32}$/;

export const newStorageKey = (): string => randomBytes(16).toString('hex');

export interface Disk {
  readonly filesDir: string;
  readonly tmpDir: string;
  /** Regenerable derived files (share cards); the sweeper prunes them by age. */
  readonly cacheDir: string;
  /** Final location of a stored file: files/ab/cd/abcd…, two levels of fan-out. */
  filePath(key: string): string;
  /** A new exclusive temp part in the same filesystem as the files. */
  createPart(onError: (err: Error) => void): PartWriter;
  /** Makes a finished (fsynced) part visible under its key: rename, then fsync the directory. */
  commit(partPath: string, key: string): Promise<void>;
  /** Removes a stored file and anything cached beside it (thumbnails). Missing files are fine. */
  remove(key: string): Promise<void>;
  /** Removes every temp part this process created (shutdown, after in-flight uploads are gone). */
  removeOwnParts(): Promise<number>;
  /**
   * Size, SHA-256 and CRC-32 of a finished file, read and hashed off the event loop (bounded
   * memory). With a `key` it continues from what digestAhead(key, …) already hashed.
   */
  digest(filePath: string, key?: string): Promise<FileDigest>;
  /** Hashes a growing file's durable first `upto` bytes in the background (see Hasher.hashAhead). */
  digestAhead(key: string, filePath: string, upto: number): void;
}

export async function createDisk(dataDir: string, hasher: Hasher): Promise<Disk> {
  const filesDir = path.join(dataDir, 'files');
  const tmpDir = path.join(dataDir, 'tmp');
  await fsp.mkdir(filesDir, { recursive: true, mode: 0o700 });
  await fsp.mkdir(tmpDir, { recursive: true, mode: 0o700 });
  await probeDirect(tmpDir);
  const knownDirs = new Set<string>();

  const filePath = (key: string): string => {
    if (!KEY_RE.test(key)) throw new Error(`invalid storage key ${JSON.stringify(key)}`);
    return path.join(filesDir, key.slice(0, 2), key.slice(2, 4), key);
  };

  return {
    filesDir,
    tmpDir,
    cacheDir: path.join(dataDir, 'cache'),
    filePath,
    // The pid in the name lets the sweeper tell a crashed writer's leftovers from a live one's.
    createPart: (onError) =>
      createPartWriter(path.join(tmpDir, `${process.pid}-${randomBytes(12).toString('hex')}.part`), hasher, onError),
    async commit(partPath, key) {
      const dest = filePath(key);
      const dir = path.dirname(dest);
      if (!knownDirs.has(dir)) {
        await fsp.mkdir(dir, { recursive: true, mode: 0o700 });
        knownDirs.add(dir);
      }
      // The orphan sweep's grace period counts from now, not from when the part was written.
      const now = new Date();
      await fsp.utimes(partPath, now, now);
      await fsp.rename(partPath, dest);
      await fsyncDir(dir);
    },
    async removeOwnParts() {
      const mine = (await fsp.readdir(tmpDir)).filter((n) => n.startsWith(`${process.pid}-`) && n.endsWith('.part'));
      await Promise.all(mine.map((n) => fsp.rm(path.join(tmpDir, n), { force: true })));
      return mine.length;
    },
    digest: (filePath, key) => hasher.digestFile(filePath, key),
    digestAhead: (key, filePath, upto) => hasher.hashAhead(key, filePath, upto),
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
