/**
 * The S3 store's crash child for the storage contract (modes: helpers/storage-child-modes.ts): it
 * opens the store named by STORAGE_URL and the AWS_* variables.
 */
import { loadConfig } from '../../src/config.ts';
import { createS3Store } from '../../src/storage/s3/store.ts';
import { runCrashMode } from './storage-child-modes.ts';

const store = await createS3Store({ location: loadConfig(process.env).s3!, tmpDir: '/tmp', check: false });
// More than a part, so some bytes have reached the bucket when the kill comes.
await runCrashMode(store, process.argv.slice(2), Buffer.alloc(11 << 20, 0x5a), () => new Promise((r) => setTimeout(r, 500)));
