import { createHash } from 'node:crypto';
import { crc32 } from '../util/crc32.mjs';
import type { BlobKey, BlobStore } from './blob-store.ts';

/**
 * Size, CRC-32 and SHA-256 of a stored object, read through the store as a stream (disk or S3);
 * `signal` stops the read. Throws the store's NOT_FOUND when there is no such object.
 */
export async function digestStored(store: BlobStore, key: BlobKey, signal?: AbortSignal): Promise<{ size: number; crc: number; sha256: Buffer }> {
  const body = await store.read(key);
  const stop = () => body.destroy(new Error('interrupted'));
  signal?.addEventListener('abort', stop, { once: true });
  try {
    if (signal?.aborted) stop();
    const hash = createHash('sha256');
    let size = 0;
    let crc = 0;
    for await (const chunk of body as AsyncIterable<Buffer>) {
      hash.update(chunk);
      crc = crc32(chunk, crc);
      size += chunk.length;
    }
    return { size, crc: crc >>> 0, sha256: hash.digest() };
  } finally {
    signal?.removeEventListener('abort', stop);
  }
}
