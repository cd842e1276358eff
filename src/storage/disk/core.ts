import type { Hasher } from '../hasher.ts';
import type { DirectIo } from './direct-io.ts';
import type { WriterCount } from './slots.ts';

/** Where a disk store keeps what: DATA_DIR/{files,tmp,tus,cache}, one filesystem (publishing is a rename). */
export interface DiskLayout {
  readonly filesDir: string;
  /** Temp parts of writers: <pid>-<start tag>-<random>.part. */
  readonly tmpDir: string;
  /** Resumable objects (tus uploads): <id>.part. */
  readonly resumableDir: string;
  /** Derived files not owned by a stored object (share cards). */
  readonly cacheDir: string;
  /** Final location of a stored file: files/ab/cd/abcd…, two levels of fan-out. */
  filePath(key: string): string;
}

/** Internals the disk store's parts share (one instance per store). */
export interface DiskCore {
  readonly layout: DiskLayout;
  readonly hasher: Hasher;
  readonly io: DirectIo;
  readonly count: WriterCount;
  newKey(): string;
  /** Makes a finished, fsynced file visible under `key`: rename, then the directory's fsync. */
  publish(from: string, key: string, finishedAt?: number): Promise<void>;
}
