import type { Ctx } from './context.ts';
import { streamBody, type BodySource } from './body-pump.ts';
import type { BlobReader, BlobStore } from '../storage/blob-store.ts';

/**
 * A BodySource reading one stored object from byte `start` on; the object is opened on the first read.
 * `size`, the row's, spares the store asking for it (see BlobStore.open).
 */
export function fileSource(store: Pick<BlobStore, 'open'>, key: string, start: number, size?: number): BodySource {
  let reader: BlobReader | null = null;
  let closed = false;
  let opening: Promise<BlobReader> | null = null;
  const open = (): Promise<BlobReader> =>
    (opening ??= store.open(key, { size }).then((r) => {
      if (closed) {
        r.close();
        throw new Error('source closed');
      }
      reader = r;
      return r;
    }));
  return {
    read(target, pos) {
      // Submitted at once when the object is open: the read overlaps the send that follows.
      return reader ? reader.readInto(target, start + pos) : open().then((r) => r.readInto(target, start + pos));
    },
    close() {
      closed = true;
      reader?.close();
      reader = null;
    },
  };
}

/**
 * Streams bytes [start, start+length) of a stored object of `size` bytes (its row's) as the response
 * body (tryEnd/onWritable backpressure, 1 MiB reads, one read ahead; see streamBody). An object that
 * cannot be opened or read from rejects before any byte is sent (headers go out with the first
 * bytes). Resolves true when the whole body went out.
 */
export const streamFile = (
  ctx: Ctx,
  store: Pick<BlobStore, 'open'>,
  key: string,
  size: number,
  status: number,
  headers: Array<[string, string]>,
  start: number,
  length: number,
  /** Wraps the file's source (a limited bundle's credit, see bundles/limits.ts). */
  wrap: (source: BodySource) => BodySource = (s) => s,
): Promise<boolean> => streamBody(ctx, status, headers, length, wrap(fileSource(store, key, start, size)));
