import fsp from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type sharpType from 'sharp';
import { AppError } from '../errors.ts';
import type { Limiter } from './limit.ts';
import { sniffRaster } from './sniff.ts';

/** Input bigger than this (width × height) is refused before decoding: a small file can be a huge image. */
export const MAX_INPUT_PIXELS = 50_000_000;
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
      return await limiter.run(async () =>
        (await sharp())(srcPath, { limitInputPixels: MAX_INPUT_PIXELS, failOn: 'error' })
          .timeout({ seconds: 30 })
          .rotate() // EXIF orientation
          .resize(THUMB_PX, THUMB_PX, { fit: 'inside', withoutEnlargement: true })
          .webp({ quality: 80 })
          .toBuffer(),
      );
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
