import fs from 'node:fs';
import { direct, writeStaged } from '../storage/direct-io.ts';

// A tus part's descriptors and the positioned writes a PATCH makes into it (patch.ts streams the body).

/**
 * Writes buf[off, len) at `pos`, continuing after short writes: a disk that fills up mid-buffer
 * writes part of it, and the next write reports ENOSPC (so the caller sees the real error).
 */
export function writeFully(fd: number, buf: Buffer, off: number, len: number, pos: number, cb: (err: Error | null) => void): void {
  fs.write(fd, buf, off, len - off, pos, (err, n) => {
    if (err) return cb(err);
    if (n === 0) return cb(new Error('write made no progress'));
    if (off + n < len) return writeFully(fd, buf, off + n, len, pos + n, cb);
    cb(null);
  });
}

/** Writes buf[off, len) at `pos` with O_DIRECT through a staging buffer (pos and len whole blocks). */
export function writeDirect(fd: number, buf: Buffer, off: number, len: number, pos: number, cb: (err: Error | null) => void): void {
  writeStaged(fd, buf.subarray(off), len - off, pos, () => true, () => {}, cb);
}

/** An existing part's descriptors for positioned writes (made durable by closePart's fsync). */
export interface PartFds {
  readonly fd: number;
  /** The same file opened with O_DIRECT, or -1 where the filesystem refuses it. */
  readonly directFd: number;
}

/**
 * Opens the part for a PATCH at `offset`, the offset on record. Bytes past it were never
 * acknowledged (a PATCH cut off by a crash, or whose later write or sync failed): they are cut off
 * first, so nothing of them can end up in the file, whatever this PATCH writes.
 */
export async function openPart(path: string, offset: number): Promise<PartFds> {
  const open = (flags: number): Promise<number> =>
    new Promise((resolve, reject) => fs.open(path, flags, (err, fd) => (err ? reject(err) : resolve(fd))));
  const fd = await open(fs.constants.O_WRONLY);
  try {
    await cutBack(fd, offset);
  } catch (err) {
    fs.close(fd, () => {});
    throw err;
  }
  if (!direct.supported) return { fd, directFd: -1 };
  const directFd = await open(fs.constants.O_WRONLY | fs.constants.O_DIRECT).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'EINVAL') direct.supported = false;
    return -1; // page-cache writes still work
  });
  return { fd, directFd };
}

const fstat = (fd: number): Promise<fs.Stats> =>
  new Promise((resolve, reject) => fs.fstat(fd, (err, st) => (err ? reject(err) : resolve(st))));

/** Truncates to `size` when the file is longer (no write when it is not). */
async function cutBack(fd: number, size: number): Promise<void> {
  if ((await fstat(fd)).size <= size) return;
  await new Promise<void>((resolve, reject) => fs.ftruncate(fd, size, (err) => (err ? reject(err) : resolve())));
}

/**
 * Makes the part exactly `size` bytes before it becomes a file: cuts off what lies past it
 * (unacknowledged bytes, see openPart), fsyncs the cut, and fails if the part is shorter.
 */
export async function settlePart(path: string, size: number): Promise<void> {
  const fd = await new Promise<number>((resolve, reject) => fs.open(path, fs.constants.O_WRONLY, (err, n) => (err ? reject(err) : resolve(n))));
  try {
    const have = (await fstat(fd)).size;
    if (have < size) throw new Error(`tus part holds ${have} bytes, ${size} on record`);
    if (have > size) {
      await cutBack(fd, size);
      await new Promise<void>((resolve, reject) => fs.fsync(fd, (err) => (err ? reject(err) : resolve())));
    }
  } finally {
    fs.close(fd, () => {});
  }
}

/**
 * Drops bytes past `length` (the PATCH's start when its checksum failed, else the bytes it wrote
 * durably, in order), fsyncs and closes. The fsync of either
 * descriptor covers the inode, so it makes the direct writes' size and the device cache durable too.
 */
export async function closePart(fds: PartFds, truncateTo: number | null): Promise<void> {
  const run = (fn: (cb: (err: NodeJS.ErrnoException | null) => void) => void): Promise<void> =>
    new Promise((resolve, reject) => fn((err) => (err ? reject(err) : resolve())));
  try {
    if (truncateTo !== null) await run((cb) => fs.ftruncate(fds.fd, truncateTo, cb));
    await run((cb) => fs.fsync(fds.fd, cb));
  } finally {
    await run((cb) => fs.close(fds.fd, cb)).catch(() => {});
    if (fds.directFd >= 0) await run((cb) => fs.close(fds.directFd, cb)).catch(() => {});
  }
}
