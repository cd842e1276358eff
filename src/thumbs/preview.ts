import type { Logger } from 'pino';
import type sharpType from 'sharp';
import { AppError } from '../errors.ts';
import type { Limiter } from './limit.ts';
import { sniffRaster } from './sniff.ts';
import { isBlobError, type BlobStore } from '../storage/blob-store.ts';

/** Input bigger than this (width × height) is refused before decoding: a small file can be a huge image. */
export const MAX_INPUT_PIXELS = 50_000_000;
/**
 * Decoded size (width × height × channels × bytes per channel, from the file's header) above which an
 * image gets no preview. Pixels alone say little: an interlaced 16-bit RGBA PNG is decoded whole,
 * 8 bytes a pixel, so 50 million pixels take 400 MB. 160 MiB lets a 48-megapixel RGB photo through;
 * with one render at a time (see contentRoutes) it bounds what previews hold.
 */
export const MAX_DECODED_BYTES = 160 * 1024 * 1024;
/** Bytes per channel of each libvips band format sharp reports as `depth`. */
const DEPTH_BYTES: Readonly<Record<string, number>> = {
  uchar: 1, char: 1, ushort: 2, short: 2, uint: 4, int: 4, float: 4, complex: 8, double: 8, dpcomplex: 16,
};

/** What decoding the image would take, from its header alone; Infinity when the header does not say. */
export function decodedBytes(meta: { width?: number; height?: number; channels?: number; depth?: string }): number {
  const per = meta.depth === undefined ? undefined : DEPTH_BYTES[meta.depth];
  if (!meta.width || !meta.height || !meta.channels || per === undefined) return Infinity;
  return meta.width * meta.height * meta.channels * per;
}
/** Long side of a thumbnail, in pixels. */
export const THUMB_PX = 320;
/** Suffix of a thumbnail's cache name after its object's key: deleting the object deletes it too. */
export const THUMB_SUFFIX = '.thumb.webp';

export interface Previews {
  /** WebP thumbnail bytes of a stored object, from the cache or freshly made; null if it is not a usable image. */
  thumbnail(key: string): Promise<Buffer | null>;
}

export function createPreviews(deps: {
  sharp: () => Promise<typeof sharpType>;
  limiter: Limiter;
  log: Logger;
  blobs: Pick<BlobStore, 'cache' | 'withLocalFile'>;
}): Previews {
  const { sharp, limiter, log } = deps;
  // One thumbnail per file at a time: concurrent requests for the same image share the work.
  const inflight = new Map<string, Promise<Buffer | null>>();

  const render = async (srcPath: string): Promise<Buffer | null> => {
    if ((await sniffRaster(srcPath)) === null) return null;
    try {
      return await limiter.run(async () => {
        const open = (await sharp())(srcPath, { limitInputPixels: MAX_INPUT_PIXELS, failOn: 'error' });
        // The header only: refused before a single pixel is decoded.
        const bytes = decodedBytes(await open.metadata());
        if (bytes > MAX_DECODED_BYTES) {
          log.debug({ srcPath, bytes }, 'no preview: image too large to decode');
          return null;
        }
        return open
          .timeout({ seconds: 30 })
          .rotate() // EXIF orientation
          .resize(THUMB_PX, THUMB_PX, { fit: 'inside', withoutEnlargement: true })
          .webp({ quality: 80 })
          .toBuffer();
      });
    } catch (err) {
      // Busy (503) is the caller's to report; anything the decoder says means "not a usable image".
      if (err instanceof AppError) throw err;
      log.debug({ err, srcPath }, 'no preview: image not decodable');
      return null;
    }
  };

  const make = async (key: string): Promise<Buffer | null> => {
    const name = `${key}${THUMB_SUFFIX}`;
    const cached = await deps.blobs.cache.get(name);
    if (cached) return cached;
    const bytes = await deps.blobs.withLocalFile(key, render).catch((err: unknown) => {
      if (isBlobError(err, 'NOT_FOUND')) return null;
      throw err;
    });
    // Best effort: a failed cache write only costs the next request a re-render.
    if (bytes) await deps.blobs.cache.put(name, bytes).catch((err: unknown) => log.warn({ err, name }, 'thumbnail not cached'));
    return bytes;
  };

  return {
    thumbnail(key) {
      let p = inflight.get(key);
      if (!p) {
        p = make(key).finally(() => inflight.delete(key));
        inflight.set(key, p);
      }
      return p;
    },
  };
}
