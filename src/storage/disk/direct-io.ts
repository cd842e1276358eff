/**
 * Staging buffers for O_DIRECT writes. Direct I/O skips the page cache, so a large upload does not
 * spend kernel CPU allocating and filling cache pages it will never read again (bench/RESULTS.md has
 * the figures). Direct I/O needs the buffer's address, the file offset and the
 * length aligned to the device's logical block; Node buffers are not page-aligned, WebAssembly
 * memory is. A slot's bytes are copied here just before their write (~50 µs per MiB), so the slot
 * itself stays an ordinary transferable buffer for the hash worker.
 *
 * One small pool serves the whole process: libuv runs at most 4 file operations at once, so more
 * staging buffers than that would only hold memory. A write waits in line for a free one.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';

export const DIRECT_ALIGN = 4096;
export const STAGING_BYTES = 1 << 20;
const STAGING_COUNT = 6;

let free: Buffer[] | null = null;
const waiting: Array<(buf: Buffer) => boolean> = [];

/**
 * Calls `fn` with a staging buffer, now or once one is given back. `fn` returns false when it no
 * longer wants one (its writer went away): the buffer then goes to the next in line. Otherwise
 * `fn` owns it and must give it back.
 */
export function withStaging(fn: (buf: Buffer) => boolean): void {
  if (free === null) {
    // Never grown, so the views stay valid (growing a Memory detaches its old buffer).
    const pages = (STAGING_BYTES * STAGING_COUNT) / 65536;
    const memory = new WebAssembly.Memory({ initial: pages, maximum: pages });
    free = Array.from({ length: STAGING_COUNT }, (_, i) => Buffer.from(memory.buffer, i * STAGING_BYTES, STAGING_BYTES));
  }
  const buf = free.pop();
  if (buf === undefined) waiting.push(fn);
  else if (!fn(buf)) free.push(buf);
}

/** A loop, not a recursion: thousands of abandoned waiters must not grow the stack. */
export function giveStaging(buf: Buffer): void {
  for (let next = waiting.shift(); next; next = waiting.shift()) if (next(buf)) return;
  free!.push(buf);
}

export const alignUp = (n: number): number => Math.ceil(n / DIRECT_ALIGN) * DIRECT_ALIGN;

/**
 * Writes view[0, len) at `pos` (a block boundary) with O_DIRECT: once a staging buffer is free and
 * `wanted()` still holds, the bytes are copied into it, zero-padded to whole blocks, and `copied`
 * runs (the view may be reused from then on). A short write that stopped on a block boundary goes
 * on; one that did not cannot (the rest would be unaligned) and fails. `done` runs once with the
 * outcome, the staging buffer given back; EINVAL turns direct writes off for the store (`io`). Returns
 * nothing if `wanted()` was false by the time a buffer was free: neither callback runs then.
 */
export function writeStaged(
  io: DirectIo,
  fd: number,
  view: Buffer,
  len: number,
  pos: number,
  wanted: () => boolean,
  copied: () => void,
  done: (err: Error | null) => void,
): void {
  withStaging((stage) => {
    if (!wanted()) return false;
    const padded = alignUp(len);
    stage.set(view.subarray(0, len));
    if (padded > len) stage.fill(0, len, padded);
    copied();
    const go = (from: number): void => {
      fs.write(fd, stage, from, padded - from, pos + from, (err, n) => {
        if (err?.code === 'EINVAL') io.supported = false;
        if (!err && n > 0 && from + n < padded && (from + n) % DIRECT_ALIGN === 0) return go(from + n);
        giveStaging(stage);
        if (err) return done(err);
        if (from + n === padded) return done(null);
        done(new Error(n === 0 ? 'write made no progress' : 'direct write stopped inside a block'));
      });
    };
    go(0);
    return true;
  });
}

/**
 * One store's O_DIRECT state: cleared when its filesystem refuses the flag (at open or on a write);
 * files are then written through the page cache, synced as they grow.
 */
export interface DirectIo {
  supported: boolean;
}

/** Writes one aligned block with O_DIRECT into `dir` and removes it; EINVAL turns direct I/O off. */
export async function probeDirect(io: DirectIo, dir: string): Promise<boolean> {
  if (!io.supported) return false;
  const file = path.join(dir, `${process.pid}-direct-probe`);
  const stage = await new Promise<Buffer>((resolve) =>
    withStaging((buf) => {
      resolve(buf);
      return true;
    }),
  );
  let fh: fsp.FileHandle | undefined;
  try {
    fh = await fsp.open(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_DIRECT, 0o600);
    await fh.write(stage.fill(0, 0, DIRECT_ALIGN), 0, DIRECT_ALIGN, 0);
  } catch (err) {
    // Only a refusal of O_DIRECT itself turns it off; a transient error (ENOSPC, EMFILE) does not.
    if ((err as NodeJS.ErrnoException).code === 'EINVAL') io.supported = false;
  } finally {
    giveStaging(stage);
    await fh?.close();
    await fsp.rm(file, { force: true });
  }
  return io.supported;
}
