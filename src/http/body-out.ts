import fs from 'node:fs';
import type { Ctx } from './context.ts';
import { streamBody, type BodySource } from './body-pump.ts';
import { readFullyAt } from '../storage/read-at.ts';

/** A BodySource reading one file from byte `start` on; the file is opened on the first read. */
export function fileSource(filePath: string, start: number): BodySource {
  let fd = -1;
  let closed = false;
  let opening: Promise<number> | null = null;
  const open = (): Promise<number> =>
    (opening ??= new Promise<number>((resolve, reject) =>
      fs.open(filePath, 'r', (err, opened) => {
        if (err) return reject(err);
        if (closed) {
          fs.close(opened, () => {});
          return reject(new Error('source closed'));
        }
        fd = opened;
        resolve(opened);
      }),
    ));
  return {
    read(target, pos) {
      const short = (): Error => new Error(`file shorter than its recorded size: ${filePath}`);
      const from = (handle: number): Promise<void> => readFullyAt(handle, target, start + pos, () => !closed, short);
      // Submit at once when the file is open: see readFullyAt.
      return fd >= 0 ? from(fd) : open().then(from);
    },
    close() {
      closed = true;
      if (fd >= 0) fs.close(fd, () => {});
      fd = -1;
    },
  };
}

/**
 * Streams bytes [start, start+length) of a file as the response body (tryEnd/onWritable
 * backpressure, 1 MiB reads, one read ahead; see streamBody). A file that cannot be opened
 * rejects before any byte is sent. Resolves true when the whole body went out.
 */
export const streamFile = (
  ctx: Ctx,
  filePath: string,
  status: number,
  headers: Array<[string, string]>,
  start: number,
  length: number,
): Promise<boolean> => streamBody(ctx, status, headers, length, fileSource(filePath, start));
