import type { Ctx } from '../http/context.ts';
import { streamBody, type BodySource } from '../http/body-pump.ts';
import type { BlobReader, BlobStore } from '../storage/blob-store.ts';
import { findSegment, segmentLength, type ZipLayout } from './layout.ts';

/**
 * Sends bytes [start, start + length) of a ZIP layout as the response body: header bytes are copied
 * from the layout, entry data is read from the stored object `keys[index]` at the right offset. Chunks mix both,
 * so an archive of many small files still goes out in 1 MiB writes. Nothing is computed per byte
 * (the CRC-32s come from upload time); memory is the two 1 MiB pump buffers plus the layout.
 * Resolves true when the whole range was handed to uWS, false if the client went away.
 */
export function sendZipRange(
  ctx: Ctx,
  store: Pick<BlobStore, 'open'>,
  layout: ZipLayout,
  keys: readonly string[],
  status: number,
  headers: Array<[string, string]>,
  start: number,
  length: number,
): Promise<boolean> {
  if (start < 0 || length < 0 || start + length > layout.size) throw new RangeError('range outside the archive');
  return streamBody(ctx, status, headers, length, zipSource(store, layout, keys, start));
}

/** A BodySource over the archive from `start`: one open object at a time, opened on first need. */
export function zipSource(store: Pick<BlobStore, 'open'>, layout: ZipLayout, keys: readonly string[], start: number): BodySource {
  let closed = false;
  let open: { index: number; reader: BlobReader } | null = null;

  const release = (): void => {
    open?.reader.close();
    open = null;
  };

  /** Opens entry `index`'s object in place of the one open (readFully reuses an open one directly). */
  const openEntry = async (index: number, size: number): Promise<BlobReader> => {
    release();
    const key = keys[index];
    if (key === undefined) throw new Error(`no file for zip entry ${index}`);
    // The size is the row's (the layout was made from it): the store need not ask for it per entry.
    const reader = await store.open(key, { size });
    if (closed) {
      reader.close();
      throw new Error('zip source closed');
    }
    open = { index, reader };
    return reader;
  };

  // An open object's read is submitted before this returns, so it overlaps the send that follows.
  const readFully = (index: number, size: number, target: Buffer, filePos: number): Promise<void> =>
    open?.index === index ? open.reader.readInto(target, filePos) : openEntry(index, size).then((r) => r.readInto(target, filePos));

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
        else await readFully(seg.index, seg.offset + seg.length, out, seg.offset + pos - seg.start);
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
