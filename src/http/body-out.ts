import fs from 'node:fs';
import type { Ctx } from './context.ts';
import { streamBody, type BodySource } from './body-pump.ts';

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
    async read(target, pos) {
      const handle = await open();
      for (let done = 0; done < target.length; ) {
        if (closed) throw new Error('source closed'); // the fd may be gone (abort): never read a reused one
        const n = await new Promise<number>((resolve, reject) =>
          fs.read(handle, target, done, target.length - done, start + pos + done, (err, got) => (err ? reject(err) : resolve(got))),
        );
        if (n === 0) throw new Error(`file shorter than its recorded size: ${filePath}`);
        done += n;
      }
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
