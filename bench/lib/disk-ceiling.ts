// The disk's own durable write speed, measured in the same run as the servers: the same byte counts
// written from memory (no network, no parsing, no hashing), four 1 MiB writes in flight per file, then
// fsync; either with O_DIRECT, as Sluice writes, or through the page cache (which on some disks
// finishes sooner, at a higher CPU cost). The faster of the two is the most a durable upload could
// reach; page-cache-only peers can go faster, until the kernel writes their bytes back. This disk's
// speed swings within a minute, so it is sampled in the rotation with the servers.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { mkdtemp, rm } from 'node:fs/promises';
import { settleDisk } from './files.ts';

const PIECE = 1 << 20;
const IN_FLIGHT = 4;

let memory: Buffer | null = null;
function buffers(streams: number): Buffer[] {
  const need = streams * IN_FLIGHT * PIECE;
  if (!memory || memory.length < need) {
    const pages = need / 65536;
    memory = Buffer.from(new WebAssembly.Memory({ initial: pages, maximum: pages }).buffer); // page-aligned
    memory.fill(0x5a);
  }
  return Array.from({ length: streams * IN_FLIGHT }, (_, i) => memory!.subarray(i * PIECE, (i + 1) * PIECE));
}

const op = <T>(fn: (cb: (err: NodeJS.ErrnoException | null, v: T) => void) => void): Promise<T> =>
  new Promise((resolve, reject) => fn((err, v) => (err ? reject(err) : resolve(v))));

/** Writes bytes [from, to) of the file, IN_FLIGHT pieces at a time, one buffer each. */
async function writeRange(fd: number, from: number, to: number, bufs: Buffer[]): Promise<void> {
  let next = from;
  await Promise.all(
    bufs.map(async (buf) => {
      while (next < to) {
        const at = next;
        const n = Math.min(PIECE, to - at);
        next += n;
        await op<number>((cb) => fs.write(fd, buf, 0, n, at, cb));
      }
    }),
  );
}

/** Resolves with the moment (performance.now()) the writes were done, before the fsync. */
async function writeOne(file: string, size: number, bufs: Buffer[], cached: boolean): Promise<number> {
  const padded = cached ? size : Math.ceil(size / 4096) * 4096;
  const how = cached ? 0 : fs.constants.O_DIRECT;
  const fd = await op<number>((cb) => fs.open(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | how, 0o600, cb));
  await writeRange(fd, 0, padded, bufs);
  await op<void>((cb) => fs.ftruncate(fd, size, (err) => cb(err, undefined)));
  const written = performance.now();
  await op<void>((cb) => fs.fsync(fd, (err) => cb(err, undefined)));
  await op<void>((cb) => fs.close(fd, (err) => cb(err, undefined)));
  return written;
}

/**
 * Milliseconds to write `sizes` (one file each, all at once) durably into a fresh directory, and of
 * those, until the last file's writes were done (the rest is the fsyncs: the disk's flush).
 */
export async function durableWrite(sizes: readonly number[], cached = false): Promise<{ ms: number; writtenMs: number }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'sluice-bench-disk-'));
  const bufs = buffers(sizes.length);
  try {
    const started = performance.now();
    const written = await Promise.all(
      sizes.map((size, i) => writeOne(path.join(dir, `f${i}`), size, bufs.slice(i * IN_FLIGHT, (i + 1) * IN_FLIGHT), cached)),
    );
    const dirFd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
    fs.fsyncSync(dirFd);
    fs.closeSync(dirFd);
    return { ms: performance.now() - started, writtenMs: Math.max(...written) - started };
  } finally {
    await rm(dir, { recursive: true, force: true });
    await settleDisk(os.tmpdir());
  }
}

/**
 * Milliseconds to write `size` bytes as appends of `piece` bytes, one after another, each made
 * durable before the next starts: its writes (O_DIRECT, whole blocks), an fsync, then `record`,
 * which stands for the offset a resumable upload must commit before acknowledging the append. This is
 * what a tus upload in such pieces costs at the least, without HTTP; `durableWrite([size])` is the
 * same for one multipart upload.
 */
export async function durableAppends(size: number, piece: number, record: (offset: number) => Promise<void>): Promise<number> {
  if (piece % 4096 !== 0) throw new Error('durableAppends: the piece must be whole blocks');
  const dir = await mkdtemp(path.join(os.tmpdir(), 'sluice-bench-disk-'));
  const bufs = buffers(1);
  try {
    const file = path.join(dir, 'appends');
    const started = performance.now();
    await op<void>((cb) => fs.writeFile(file, '', (err) => cb(err, undefined)));
    for (let at = 0; at < size; at += piece) {
      const end = Math.min(size, at + piece);
      const fd = await op<number>((cb) => fs.open(file, fs.constants.O_WRONLY | fs.constants.O_DIRECT, cb));
      await writeRange(fd, at, Math.ceil(end / 4096) * 4096, bufs);
      if (end % 4096 !== 0) await op<void>((cb) => fs.ftruncate(fd, end, (err) => cb(err, undefined)));
      await op<void>((cb) => fs.fsync(fd, (err) => cb(err, undefined)));
      await op<void>((cb) => fs.close(fd, (err) => cb(err, undefined)));
      await record(end);
    }
    return performance.now() - started;
  } finally {
    await rm(dir, { recursive: true, force: true });
    await settleDisk(os.tmpdir());
  }
}
