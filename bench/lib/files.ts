import path from 'node:path';
import { readdir, rm, stat } from 'node:fs/promises';

/** Deletes regular files of at least minBytes under dir, skipping `skip` subdirectories (e.g. Sluice's pg/). */
export async function removeLargeFiles(dir: string, minBytes: number, skip: readonly string[] = []): Promise<number> {
  let removed = 0;
  for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory() && !skip.includes(entry.name)) removed += await removeLargeFiles(p, minBytes);
    else if (entry.isFile() && ((await stat(p).catch(() => null))?.size ?? -1) >= minBytes) {
      // (a server may remove its own temp files meanwhile, e.g. nginx's request bodies)
      await rm(p, { force: true });
      removed++;
    }
  }
  return removed;
}
