import type { Logger } from 'pino';
import { eachLimited } from '../util/limit.ts';
import type { BlobKey, BlobStore } from './blob-store.ts';

/**
 * Objects one removal deletes at once. On S3 each is a request or two with its own buffers: a
 * bundle of thousands of files, all at once, grew the heap by tens of MiB that it then kept.
 */
export const REMOVE_AT_ONCE = 8;

/**
 * Removes the objects of rows already deleted (committed), a few at a time. A failure is logged,
 * not thrown: the rows are gone, and the sweeper's orphan pass reclaims what is left.
 */
export async function removeObjects(store: BlobStore, keys: readonly BlobKey[], log: Logger): Promise<void> {
  await eachLimited(keys, REMOVE_AT_ONCE, (key) => store.delete(key).catch((err: unknown) => log.warn({ err, key }, 'file not removed')));
}
