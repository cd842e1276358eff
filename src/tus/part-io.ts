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

export async function openPart(path: string): Promise<PartFds> {
  const open = (flags: number): Promise<number> =>
    new Promise((resolve, reject) => fs.open(path, flags, (err, fd) => (err ? reject(err) : resolve(fd))));
  const fd = await open(fs.constants.O_WRONLY);
  if (!direct.supported) return { fd, directFd: -1 };
  const directFd = await open(fs.constants.O_WRONLY | fs.constants.O_DIRECT).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'EINVAL') direct.supported = false;
    return -1; // page-cache writes still work
  });
  return { fd, directFd };
}

/**
 * Drops bytes past `length` (a PATCH whose checksum failed), fsyncs and closes. The fsync of either
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
