import fs from 'node:fs';
import type { Ctx } from '../http/context.ts';
import { streamBody, type BodySource } from '../http/body-pump.ts';
import { readFullyAt } from '../storage/read-at.ts';
import { findSegment, segmentLength, type ZipLayout } from './layout.ts';

/**
 * Sends bytes [start, start + length) of a ZIP layout as the response body: header bytes are copied
 * from the layout, entry data is read from `filePaths[index]` at the right offset. Chunks mix both,
 * so an archive of many small files still goes out in 1 MiB writes. Nothing is computed per byte
 * (the CRC-32s come from upload time); memory is the two 1 MiB pump buffers plus the layout.
 * Resolves true when the whole range was handed to uWS, false if the client went away.
 */
export function sendZipRange(
  ctx: Ctx,
  layout: ZipLayout,
  filePaths: readonly string[],
  status: number,
  headers: Array<[string, string]>,
  start: number,
  length: number,
): Promise<boolean> {
  if (start < 0 || length < 0 || start + length > layout.size) throw new RangeError('range outside the archive');
  return streamBody(ctx, status, headers, length, zipSource(layout, filePaths, start));
}

/** A BodySource over the archive from `start`: one open file at a time, opened on first need. */
export function zipSource(layout: ZipLayout, filePaths: readonly string[], start: number): BodySource {
  let closed = false;
  let open: { index: number; fd: number } | null = null;

  const release = (): void => {
    if (open) fs.close(open.fd, () => {});
    open = null;
  };

  /** Opens entry `index`'s file in place of the one open (readFully reuses an open one directly). */
  const openEntry = async (index: number): Promise<number> => {
    release();
    const path = filePaths[index];
    if (path === undefined) throw new Error(`no file for zip entry ${index}`);
    const fd = await new Promise<number>((ok, fail) => fs.open(path, 'r', (e, n) => (e ? fail(e) : ok(n))));
    if (closed) {
      fs.close(fd, () => {});
      throw new Error('zip source closed');
    }
    open = { index, fd };
    return fd;
  };

  // An open file's read is submitted before this returns (readFullyAt), so it overlaps the send that follows.
  const readFully = (index: number, target: Buffer, filePos: number): Promise<void> => {
    const short = (): Error => new Error(`file shorter than recorded size: ${filePaths[index]}`);
    const from = (fd: number): Promise<void> => readFullyAt(fd, target, filePos, () => !closed, short);
    return open?.index === index ? from(open.fd) : openEntry(index).then(from);
  };

  return {
    async read(target, bodyPos) {
      if (closed) throw new Error('zip source closed');
      let pos = start + bodyPos;
      const stop = pos + target.length;
      let filled = 0;
      for (let i = findSegment(layout, pos); pos < stop; i++) {
        const seg = layout.segments[i];
        if (seg === undefined) throw new RangeError('read past the end of the archive');
        const into = seg.start + segmentLength(seg) - pos;
        const take = Math.min(stop - pos, into);
        const out = target.subarray(filled, filled + take);
        if (seg.kind === 'bytes') seg.bytes.copy(out, 0, pos - seg.start, pos - seg.start + take);
        else await readFully(seg.index, out, seg.offset + pos - seg.start);
        filled += take;
        pos += take;
      }
    },
    close() {
      closed = true;
      release();
    },
  };
}
