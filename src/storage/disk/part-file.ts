import fs from 'node:fs';
import { alignUp, DIRECT_ALIGN, directReady, writeDirect, type DirectIo } from './direct-io.ts';

/**
 * Durability while the file arrives. A file written in more than one piece is opened with
 * O_DIRECT (see direct-io.ts): each write goes straight to the disk, and the final fsync commits
 * the metadata and flushes the device cache. Where O_DIRECT is refused, and for a file written in
 * one piece, writes go through the page cache, with an fdatasync started whenever SYNC_EVERY more
 * bytes are written (one at a time) and writes held back while MAX_UNSYNCED are not yet synced:
 * writeback overlaps the upload, the final fsync has little left, and the dirty cache per upload
 * stays bounded (bench/RESULTS.md compares the modes).
 *
 * A file written in one piece (a small upload) is opened with O_DSYNC instead: its one write returns
 * once it is on the disk with the metadata needed to read it back (the size), which is what the
 * fsync at close would have done, so close skips that fsync. That, and closing the descriptor
 * synchronously (close(2) of a local file whose data is synced does no I/O), saves two of a small
 * upload's trips through libuv's thread pool; each trip costs the event loop a wake-up of a pool
 * thread and a completion.
 *
 * An append (a tus PATCH) opens an existing file instead, at once rather than at its first write, so
 * the open overlaps the first slot's filling. Direct writes need a block-aligned offset and buffer, so
 * a write that does not start on a block boundary (the first of an append at an unaligned offset), or
 * a small append still in its first slot, goes through a second, page-cache descriptor of the same
 * file, opened when first needed; the final fsync covers both.
 */
const SYNC_EVERY = 16 << 20;
/** Must stay well above the largest write: one larger than it would wait for a sync that never starts. */
const MAX_UNSYNCED = 64 << 20;

/** The disk side of one temp part: positioned writes, then truncate, fsync and close. */
export interface PartFile {
  /**
   * Writes view[0, len) at `at`. `released` runs once `view` may be reused: once written. A direct
   * write needs a page-aligned view with room to pad `len` to a whole block (direct-io.ts).
   * `onePiece`: this is the file's only write, so it is opened for the page cache. Errors go to the
   * creator's `onError`.
   */
  write(view: Buffer, len: number, at: number, released: () => void, onePiece: boolean): void;
  /** True while a direct write or a sync is still in flight. */
  busy(): boolean;
  /** After the last write: cuts a padded tail, fsyncs and closes (creating an empty file if none was written). */
  close(): Promise<void>;
  /** Removes the file; the descriptor closes once nothing is in flight. Safe at any time, more than once. */
  abort(): void;
}

export interface PartFileOptions {
  readonly io: DirectIo;
  /** Open the existing file for writes past its acknowledged bytes instead of creating it. */
  readonly append: boolean;
}

/**
 * Creates `path` exclusively (mode 0600) with its first write, or opens it for an append.
 * `onSettled` runs whenever a write or sync lands, so the caller can re-check whether it may close.
 */
export function createPartFile(
  path: string,
  { io, append }: PartFileOptions,
  onError: (err: Error) => void,
  onSettled: () => void,
): PartFile {
  let fd = -1;
  /** Page-cache descriptor beside a direct one, for unaligned writes of an append (or -1). */
  let cachedFd = -1;
  let opening = false;
  const waitingForFd: Array<() => void> = [];
  /** Operations using the descriptor: the last to finish after an abort closes it. */
  let inFlight = 0;
  let failed: Error | null = null;
  let aborted = false;
  /** Writes go out with O_DIRECT from the caller's aligned views; a tail shorter than a block is padded. */
  let isDirect = false;
  /** The size to cut the file back to after a padded tail. */
  let truncateTo = -1;
  /** Direct writes issued and not yet finished. */
  let directPending = 0;
  /** Page cache: bytes handed to write(2), bytes it returned for, and bytes a finished fdatasync covered. */
  let issued = 0;
  let completed = 0;
  let synced = 0;
  let syncing = false;
  /** Opened with O_DSYNC: every finished write is already durable. */
  let dsync = false;
  const waitingForSync: Array<() => void> = [];

  function fail(err: Error): void {
    if (failed || aborted) return;
    failed = err;
    onError(err);
  }

  function closeIfIdle(): void {
    if (fd >= 0 && inFlight === 0) {
      fs.close(fd, () => {});
      if (cachedFd >= 0) fs.close(cachedFd, () => {});
      fd = cachedFd = -1;
    }
  }

  function ensureOpen(onePiece: boolean): void {
    if (opening) return;
    opening = true;
    const tryDirect = io.supported && !onePiece;
    const flags = fs.constants.O_WRONLY | (append ? 0 : fs.constants.O_CREAT | fs.constants.O_EXCL);
    const how = tryDirect ? fs.constants.O_DIRECT : onePiece && !append ? fs.constants.O_DSYNC : 0;
    fs.open(path, flags | how, 0o600, (err, opened) => {
      if (err && tryDirect && err.code === 'EINVAL') {
        io.supported = false; // this filesystem has no O_DIRECT
        opening = false;
        // Linux creates the file before refusing the flag: remove it, or O_EXCL fails the retry.
        if (append) return ensureOpen(onePiece);
        return fs.unlink(path, () => ensureOpen(onePiece));
      }
      if (err) return fail(err);
      const ready = (): void => {
        // Aborted before the open landed: abort's unlink found nothing, so remove it here.
        if (aborted) {
          if (cachedFd >= 0) fs.close(cachedFd, () => {});
          cachedFd = -1;
          return fs.close(opened, () => (append ? undefined : fs.unlink(path, () => {})));
        }
        fd = opened;
        isDirect = tryDirect;
        dsync = onePiece && !append;
        for (const fn of waitingForFd.splice(0)) fn();
      };
      ready();
    });
  }

  /** Opens the page-cache descriptor of an append, for its unaligned first write, then runs `then`. */
  function openCached(then: () => void): void {
    inFlight++;
    fs.open(path, fs.constants.O_WRONLY, (err, plain) => {
      inFlight--;
      if (aborted) {
        if (!err) fs.close(plain, () => {});
        return closeIfIdle();
      }
      if (err) return fail(err);
      cachedFd = plain;
      then();
    });
  }
  /** The descriptor for page-cache writes and syncs. */
  const plainFd = (): number => (cachedFd >= 0 ? cachedFd : fd);

  function syncIfDue(): void {
    if (syncing || aborted || failed || completed - synced < (waitingForSync.length > 0 ? 1 : SYNC_EVERY)) return;
    syncing = true;
    const upto = completed;
    inFlight++;
    fs.fdatasync(plainFd(), (err) => {
      inFlight--;
      syncing = false;
      if (aborted) return closeIfIdle();
      if (err) return fail(err);
      synced = upto;
      for (const fn of waitingForSync.splice(0)) fn();
      syncIfDue();
      onSettled();
    });
  }

  /**
   * Page cache. A short write (a disk filling up mid-buffer) continues from where it stopped; the
   * retry then fails with ENOSPC instead of the part silently missing the rest of the buffer.
   */
  function cachedWrite(view: Buffer, len: number, at: number, released: () => void, done = 0): void {
    if (aborted) return;
    inFlight++;
    fs.write(plainFd(), view, done, len - done, at + done, (err, n) => {
      inFlight--;
      if (aborted) return closeIfIdle();
      if (err) return fail(err);
      if (n === 0) return fail(new Error('write made no progress'));
      completed += n;
      if (dsync) synced = completed;
      if (done + n < len) return cachedWrite(view, len, at, released, done + n);
      syncIfDue();
      released();
      onSettled();
    });
  }

  /**
   * Writes the view itself with O_DIRECT, padded to a whole block (direct-io.ts). The view is
   * released once written, so the writes in flight are bounded by the caller's own slots.
   */
  function directWrite(view: Buffer, len: number, at: number, released: () => void): void {
    // A padded tail is cut back at close. (createDisk probes O_DIRECT once; should a write still
    // refuse it, writeDirect turns it off and later files skip it.)
    if (alignUp(len) > len) truncateTo = at + len;
    directPending++;
    inFlight++;
    writeDirect(io, fd, view, len, at, (err) => {
      inFlight--;
      directPending--;
      if (aborted) return closeIfIdle();
      if (failed) return;
      if (err) return fail(err);
      released();
      onSettled();
    });
  }

  function start(view: Buffer, len: number, at: number, released: () => void): void {
    if (aborted || failed) return;
    // An append's unaligned head, and a small append still in its first (ordinary) slot, go through the page cache.
    if (isDirect && (!append || (at % DIRECT_ALIGN === 0 && directReady(view)))) return directWrite(view, len, at, released);
    if (isDirect && cachedFd < 0) return openCached(() => start(view, len, at, released));
    if (issued + len - synced > MAX_UNSYNCED) {
      waitingForSync.push(() => start(view, len, at, released));
      syncIfDue();
      return;
    }
    issued += len;
    cachedWrite(view, len, at, released);
  }

  if (append) ensureOpen(false);

  return {
    write(view, len, at, released, onePiece) {
      if (fd >= 0) return start(view, len, at, released);
      waitingForFd.push(() => start(view, len, at, released));
      ensureOpen(onePiece);
    },
    busy: () => syncing || directPending > 0,
    close() {
      return new Promise<void>((resolve, reject) => {
        /** Ends a closing step: false (and the promise rejected) when aborted or failed. */
        const stepOk = (err: Error | null): boolean => {
          inFlight--;
          if (!aborted && !err) return true;
          closeIfIdle();
          reject(aborted ? new Error('part aborted') : err);
          return false;
        };
        const steps = (): void => {
          if (aborted) return reject(new Error('part aborted'));
          if (failed) return reject(failed);
          // Each step counts as in flight, so an abort meanwhile leaves the fd to us.
          inFlight++;
          if (truncateTo >= 0) {
            // Cut the padded last block back to the file's size; the fsync below covers it.
            const size = truncateTo;
            truncateTo = -1;
            return fs.ftruncate(fd, size, (err) => stepOk(err) && steps());
          }
          const closeFd = (err: Error | null): void => {
            if (!stepOk(err)) return;
            const closing = fd;
            const closingPlain = cachedFd;
            fd = cachedFd = -1;
            try {
              if (closingPlain >= 0) fs.closeSync(closingPlain);
              fs.closeSync(closing);
            } catch (err2) {
              return reject(err2 as Error);
            }
            resolve();
          };
          // An O_DSYNC file needs no fsync once something was written (an empty one still does:
          // its creation is not yet durable).
          if (dsync && completed > 0 && synced === completed) closeFd(null);
          else fs.fsync(fd, closeFd);
        };
        if (fd >= 0) steps();
        else {
          waitingForFd.push(steps);
          ensureOpen(true); // an empty file: created here
        }
      });
    },
    abort() {
      if (aborted) return;
      aborted = true;
      // An append's file holds acknowledged bytes: its owner cuts it back instead.
      if (!append) fs.unlink(path, () => {});
      // Writes in flight finish against the unlinked inode; the last one closes the fd.
      closeIfIdle();
    },
  };
}
