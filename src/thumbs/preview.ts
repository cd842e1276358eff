import fsp from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type sharpType from 'sharp';
import { AppError } from '../errors.ts';
import type { Limiter } from './limit.ts';
import { sniffRaster } from './sniff.ts';

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
/** Suffix of the cached thumbnail beside the stored file; disk.remove() deletes it with the file. */
export const THUMB_SUFFIX = '.thumb.webp';

export interface Previews {
  /** WebP thumbnail bytes of a stored image, from the disk cache or freshly made; null if it is not a usable image. */
  thumbnail(srcPath: string): Promise<Buffer | null>;
}

export function createPreviews(deps: { sharp: () => Promise<typeof sharpType>; limiter: Limiter; log: Logger }): Previews {
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

  /** Best effort: a failed cache write only costs the next request a re-render. */
  const store = async (srcPath: string, bytes: Buffer): Promise<void> => {
    const dest = `${srcPath}${THUMB_SUFFIX}`;
    const part = `${dest}.${randomBytes(6).toString('hex')}.part`;
    try {
      await fsp.writeFile(part, bytes, { flag: 'wx', mode: 0o600 });
      await fsp.rename(part, dest);
      // The file may have been deleted while we rendered: its remove() ran before our rename.
      await fsp.access(srcPath).catch(async () => fsp.rm(dest, { force: true }));
    } catch (err) {
      log.warn({ err, dest }, 'thumbnail not cached');
      await fsp.rm(part, { force: true }).catch(() => {});
    }
  };

  const make = async (srcPath: string): Promise<Buffer | null> => {
    const cached = await fsp.readFile(`${srcPath}${THUMB_SUFFIX}`).catch(() => null);
    if (cached) return cached;
    const bytes = await render(srcPath);
    if (bytes) await store(srcPath, bytes);
    return bytes;
  };

  return {
    thumbnail(srcPath) {
      let p = inflight.get(srcPath);
      if (!p) {
        p = make(srcPath).finally(() => inflight.delete(srcPath));
        inflight.set(srcPath, p);
      }
      return p;
    },
  };
}
