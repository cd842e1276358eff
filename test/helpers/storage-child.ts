/**
 * The disk store's crash child for the storage contract (modes: helpers/storage-child-modes.ts):
 *   storage-child.ts <mode> <data dir> [id offset]
 */
import { createDiskStore } from '../../src/storage/disk/store.ts';
import { createHasher } from '../../src/storage/hasher.ts';
import { runCrashMode } from './storage-child-modes.ts';

const [mode, dir, ...rest] = process.argv.slice(2);
const store = await createDiskStore(dir!, createHasher(1));
// More than a write ring holds (four 1 MiB slots and 1 MiB of room): write() answers false, and its
// drain comes once a slot is back from the disk. By then the temp part (or the append's file) exists
// and holds bytes; finish() never runs, so nothing is acknowledged. With fewer bytes write() answered
// true at once, and a kill right after `ready` could come before the part was even opened.
await runCrashMode(store, [mode!, ...rest], Buffer.alloc(6 << 20, 0x5a), async (w, wrote) => {
  if (wrote) throw new Error('the crash child\'s bytes fit the write ring: it would report ready before they reach the disk');
  await new Promise<void>((resolve) => w.onDrain(resolve));
});
