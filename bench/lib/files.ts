import path from 'node:path';
import { execFile } from 'node:child_process';
import { readdir, readFile, rm, stat } from 'node:fs/promises';
import { promisify } from 'node:util';

/** Deletes regular files of at least minBytes under dir, skipping `skip` subdirectories (e.g. Sluice's pg/). */
export async function removeLargeFiles(dir: string, minBytes: number, skip: readonly string[] = []): Promise<number> {
  const found = await largeFiles(dir, minBytes, skip);
  // (a server may remove its own temp files meanwhile, e.g. nginx's request bodies)
  for (const p of found) await rm(p, { force: true });
  return found.length;
}

/** Paths of the files of at least `minBytes` under `dir`, skipping the directories named in `skip` at its top. */
export async function largeFiles(dir: string, minBytes: number, skip: readonly string[] = []): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory() && !skip.includes(entry.name)) found.push(...(await largeFiles(p, minBytes)));
    else if (entry.isFile() && ((await stat(p).catch(() => null))?.size ?? -1) >= minBytes) found.push(p);
  }
  return found;
}

/** The block device's counters (/sys/dev/block/M:m/stat) of the filesystem holding `dir`, or null where there are none. */
async function deviceStat(dir: string): Promise<(() => Promise<string | null>) | null> {
  const dev = (await stat(dir)).dev;
  const major = ((dev >> 8) & 0xfff) | (Math.floor(dev / 2 ** 32) & ~0xfff);
  const minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
  const file = `/sys/dev/block/${major}:${minor}/stat`;
  const read = (): Promise<string | null> => readFile(file, 'utf8').then((s) => s.trim().split(/\s+/)[13] ?? null, () => null);
  return (await read()) === null ? null : read;
}

const QUIET_MS = 200;
const SETTLE_MAX_MS = 10_000;

/**
 * Waits until removing files under `dir` has finished with its disk, so the next measured case does not pay for
 * the last one's cleanup. On a filesystem mounted with `discard`, freeing a large file makes the kernel discard its
 * blocks after the next journal commit, for hundreds of milliseconds, and writes queue behind those discards.
 * Forces the commit (syncfs), then waits until the device's count of discarded sectors holds still for
 * QUIET_MS (SETTLE_MAX_MS at most).
 */
export async function settleDisk(dir: string): Promise<void> {
  await promisify(execFile)('sync', ['-f', dir]).catch(() => {});
  const read = await deviceStat(dir).catch(() => null);
  if (!read) return;
  const until = performance.now() + SETTLE_MAX_MS;
  let last = await read();
  let stillSince = performance.now();
  while (performance.now() < until && performance.now() - stillSince < QUIET_MS) {
    await new Promise((resolve) => setTimeout(resolve, 25));
    const now = await read();
    if (now !== last) {
      last = now;
      stillSince = performance.now();
    }
  }
}
