/**
 * What a crash child does to its store before it is killed (SIGKILL, so nothing of its own clean-up
 * runs): it brings one object to the state named, prints `ready <key or id>` and waits.
 *   midwrite            a new object half written (never finished)
 *   published           a new object finished and published (no row will ever name it)
 *   midappend <id> <n>  an append to resumable <id> at offset <n>, half written
 * `writing` resolves once the half-written bytes have reached the store as far as that store lets them;
 * it is given the writer or appender and what its write() answered.
 */
import type { BlobStore, BlobWriter } from '../../src/storage/blob-store.ts';

export async function runCrashMode(
  store: BlobStore,
  [mode, id, offset]: string[],
  bytes: Buffer,
  writing: (w: Pick<BlobWriter, 'onDrain'>, wrote: boolean) => Promise<void>,
): Promise<void> {
  if (mode === 'midwrite') {
    const w = store.createWriter();
    await writing(w, w.write(bytes));
    process.stdout.write(`ready ${w.key}\n`);
  } else if (mode === 'published') {
    const w = store.createWriter();
    w.write(bytes);
    await w.finish();
    await w.publish();
    process.stdout.write(`ready ${w.key}\n`);
  } else if (mode === 'midappend') {
    const a = await store.append(id!, Number(offset), { limit: Number.MAX_SAFE_INTEGER, hashAhead: true });
    await writing(a, a.write(bytes));
    process.stdout.write(`ready ${id}\n`);
  } else throw new Error(`unknown mode ${mode}`);
  setInterval(() => {}, 1 << 30);
}
