/**
 * O_DIRECT writes. Direct I/O skips the page cache, so a large upload does not spend kernel CPU
 * allocating and filling cache pages it will never read again (bench/RESULTS.md has the figures).
 * It needs the buffer's address, the file offset and the length aligned to the device's logical
 * block. The part writer's slots are page-aligned (slots.ts), so a slot is written from where its
 * bytes already are; padding a short tail to a whole block uses the slot's own room.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { pageAligned } from '../../util/spare-buffers.ts';

export const DIRECT_ALIGN = 4096;

export const alignUp = (n: number): number => Math.ceil(n / DIRECT_ALIGN) * DIRECT_ALIGN;

/**
 * Whether `view` can be written with O_DIRECT as it is: page-aligned memory (pageAligned: a
 * resizable ArrayBuffer, which V8 maps in whole pages) from a block boundary on. Any other buffer
 * is refused rather than risk EINVAL, which would turn direct writes off for the whole store.
 */
export function directReady(view: Buffer): boolean {
  const ab = view.buffer as ArrayBuffer & { resizable?: boolean };
  return ab.resizable === true && view.byteOffset % DIRECT_ALIGN === 0;
}

/**
 * Writes view[0, len) at `pos` (a block boundary) with O_DIRECT, zero-padded to whole blocks in
 * the view itself (its length must reach alignUp(len)). A short write that stopped on a block
 * boundary goes on; one that did not cannot (the rest would be unaligned) and fails. `done` runs
 * once with the outcome; EINVAL turns direct writes off for the store (`io`).
 */
export function writeDirect(io: DirectIo, fd: number, view: Buffer, len: number, pos: number, done: (err: Error | null) => void): void {
  const padded = alignUp(len);
  if (!directReady(view) || view.length < padded) return done(new Error('direct write from a buffer that is not page-aligned'));
  if (padded > len) view.fill(0, len, padded);
  const go = (from: number): void => {
    fs.write(fd, view, from, padded - from, pos + from, (err, n) => {
      if (err?.code === 'EINVAL') io.supported = false;
      if (!err && n > 0 && from + n < padded && (from + n) % DIRECT_ALIGN === 0) return go(from + n);
      if (err) return done(err);
      if (from + n === padded) return done(null);
      done(new Error(n === 0 ? 'write made no progress' : 'direct write stopped inside a block'));
    });
  };
  go(0);
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
  let fh: fsp.FileHandle | undefined;
  try {
    fh = await fsp.open(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_DIRECT, 0o600);
    await fh.write(pageAligned(DIRECT_ALIGN).fill(0), 0, DIRECT_ALIGN, 0);
  } catch (err) {
    // Only a refusal of O_DIRECT itself turns it off; a transient error (ENOSPC, EMFILE) does not.
    if ((err as NodeJS.ErrnoException).code === 'EINVAL') io.supported = false;
  } finally {
    await fh?.close();
    await fsp.rm(file, { force: true });
  }
  return io.supported;
}
