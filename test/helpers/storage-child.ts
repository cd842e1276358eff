/**
 * A writer process for the storage contract's crash tests: it opens a disk store on the data
 * directory given, brings one object to the state named, prints `ready <key or id>` and waits to
 * be killed (SIGKILL, so nothing of its own clean-up runs).
 *   midwrite <dir>           a new object half written (a temp part, never finished)
 *   published <dir>          a new object finished and published (no row will ever name it)
 *   midappend <dir> <id> <n> an append to resumable <id> at offset <n>, half written
 */
import { createDiskStore } from '../../src/storage/disk.ts';
import { createHasher } from '../../src/storage/hasher.ts';

const [mode, dir, id, offset] = process.argv.slice(2);
const store = await createDiskStore(dir!, createHasher(1));
const MiB = 1 << 20;
const bytes = Buffer.alloc(3 * MiB, 0x5a);

if (mode === 'midwrite') {
  const w = store.createWriter();
  // Ready once the ring drained: slots went out to the temp part, so it exists.
  if (!w.write(bytes)) await new Promise<void>((resolve) => w.onDrain(resolve));
  process.stdout.write(`ready ${w.key}\n`);
} else if (mode === 'published') {
  const w = store.createWriter();
  w.write(bytes);
  await w.finish();
  await w.publish();
  process.stdout.write(`ready ${w.key}\n`);
} else if (mode === 'midappend') {
  const a = await store.append(id!, Number(offset), { limit: Number.MAX_SAFE_INTEGER, hashAhead: true });
  a.write(bytes);
  // Let the writes land in the file (not yet acknowledged: finish() never runs).
  await new Promise((r) => setTimeout(r, 300));
  process.stdout.write(`ready ${id}\n`);
} else throw new Error(`unknown mode ${mode}`);
setInterval(() => {}, 1 << 30);
