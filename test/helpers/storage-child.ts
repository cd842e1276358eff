/**
 * The disk store's crash child for the storage contract (modes: helpers/storage-child-modes.ts):
 *   storage-child.ts <mode> <data dir> [id offset]
 */
import { createDiskStore } from '../../src/storage/disk/store.ts';
import { createHasher } from '../../src/storage/hasher.ts';
import { runCrashMode } from './storage-child-modes.ts';

const [mode, dir, ...rest] = process.argv.slice(2);
const store = await createDiskStore(dir!, createHasher(1));
await runCrashMode(store, [mode!, ...rest], Buffer.alloc(3 << 20, 0x5a), async (w, wrote) => {
  // A writer is half written once its ring drained (slots went out to the temp part, so it exists);
  // an append, once its writes landed in the file (not acknowledged: finish() never runs).
  if (w) {
    if (!wrote) await new Promise<void>((resolve) => w.onDrain(resolve));
  } else await new Promise((r) => setTimeout(r, 300));
});
