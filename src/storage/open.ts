import path from 'node:path';
import type { Config } from '../config.ts';
import type { BlobStore } from './blob-store.ts';
import { createDiskStore } from './disk/store.ts';
import { ownedDirs } from '../util/data-dir.ts';
import type { Hasher } from './hasher.ts';
import { boundHeapGrowth } from '../util/gc.ts';

/**
 * The store STORAGE_URL names: an S3 bucket, or the disk under DATA_DIR when it is unset. A bucket
 * that cannot serve fails here with one line naming the setting to fix (see checkBucket).
 */
export async function openBlobStore(config: Pick<Config, 's3' | 'dataDir'>, hasher: Hasher): Promise<BlobStore> {
  if (config.s3) {
    // Spilled request bodies and the store's temporary parts are written here (a disk store checks its own tree).
    ownedDirs(path.join(config.dataDir, 'tmp'), 0);
    // Every object request goes through the AWS SDK, whose objects outlive young collections: with V8's
    // default growth the old generation held tens of MiB of them between full collections.
    boundHeapGrowth(50);
    // The S3 SDK is loaded only here (a chunk of its own in the start bundle): a disk installation never holds it.
    const { createS3Store } = await import('./s3/store.ts');
    return createS3Store({ location: config.s3, tmpDir: path.join(config.dataDir, 'tmp') });
  }
  return createDiskStore(config.dataDir, hasher);
}
