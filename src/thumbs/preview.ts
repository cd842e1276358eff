import type { Logger } from 'pino';
import type { Limiter } from '../util/limit.ts';
import type { Renderer } from './render-process.ts';
import { sniffRaster } from './sniff.ts';
import { type BlobStore } from '../storage/blob-store.ts';
import { isBlobError } from '../errors.ts';

/** Input bigger than this (width × height) is refused before decoding: a small file can be a huge image. */
export const MAX_INPUT_PIXELS = 50_000_000;
/**
 * Memory one preview may take to decode. The render process refuses from the header what would cost
 * more (render-worker.mjs: decodeCost) and is killed when it takes more anyway (render-process.ts).
 * 160 MiB lets a 48-megapixel RGB photo through.
 */
export const PREVIEW_MEMORY_BYTES = 160 * 1024 * 1024;
/** Long side of a thumbnail, in pixels. */
export const THUMB_PX = 320;
/** Suffix of a thumbnail's cache name after its object's key: deleting the object deletes it too. */
export const THUMB_SUFFIX = '.thumb.webp';

export interface Previews {
  /** WebP thumbnail bytes of a stored object, from the cache or freshly made; null if it is not a usable image. */
  thumbnail(key: string): Promise<Buffer | null>;
}

export function createPreviews(deps: {
  renderer: Renderer;
  limiter: Limiter;
  log: Logger;
  blobs: Pick<BlobStore, 'cache' | 'withLocalFile'>;
}): Previews {
  const { renderer, limiter, log } = deps;
  // One thumbnail per file at a time: concurrent requests for the same image share the work.
  const inflight = new Map<string, Promise<Buffer | null>>();

  const render = async (srcPath: string): Promise<Buffer | null | 'bomb'> => {
    if ((await sniffRaster(srcPath)) === null) return null;
    const r = await limiter.run(() => renderer.thumbnail(srcPath, THUMB_PX));
    if ('bytes' in r) return r.bytes;
    return r.none === 'memory' ? 'bomb' : null;
  };

  const make = async (key: string): Promise<Buffer | null> => {
    const name = `${key}${THUMB_SUFFIX}`;
    const cached = await deps.blobs.cache.get(name);
    // An empty entry marks an image whose decoding went over budget: it is not tried again.
    if (cached) return cached.length ? cached : null;
    const made = await deps.blobs.withLocalFile(key, render).catch((err: unknown) => {
      if (isBlobError(err, 'NOT_FOUND')) return null;
      throw err;
    });
    if (made === null) return null;
    // Best effort: a failed cache write only costs the next request a re-render.
    const bytes = made === 'bomb' ? Buffer.alloc(0) : made;
    await deps.blobs.cache.put(name, bytes).catch((err: unknown) => log.warn({ err, name }, 'thumbnail not cached'));
    return bytes.length ? bytes : null;
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
