import fsp from 'node:fs/promises';
import path from 'node:path';
import { randomHex } from '../../util/random.ts';
import type { BlobCache } from '../blob-store.ts';
import type { DiskLayout } from './core.ts';

const NAME_RE = /^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/;
const OWNED_RE = /^[0-9a-f]{32}\./;

/**
 * Derived files on disk. A name that starts with a storage key and a dot (a thumbnail) lives beside
 * that file, so deleting the file takes it along; any other name lives under cache/ and is pruned
 * by age. Writes go to a temp name first and are renamed into place, without fsync: a cache entry
 * lost in a crash is only made again.
 */
export function diskCache(layout: DiskLayout): BlobCache {
  const pathOf = (name: string): string => {
    if (!NAME_RE.test(name) || name.split('/').includes('..')) throw new Error(`invalid cache name ${JSON.stringify(name)}`);
    if (OWNED_RE.test(name)) return `${layout.filePath(name.slice(0, 32))}${name.slice(32)}`;
    return path.join(layout.cacheDir, name);
  };
  return {
    get: (name) => fsp.readFile(pathOf(name)).catch(() => null),
    async put(name, bytes) {
      const dest = pathOf(name);
      const part = `${dest}.${randomHex(6)}.part`;
      try {
        if (!OWNED_RE.test(name)) await fsp.mkdir(path.dirname(dest), { recursive: true, mode: 0o700 });
        await fsp.writeFile(part, bytes, { flag: 'wx', mode: 0o600 });
        await fsp.rename(part, dest);
        // The owner may have been deleted meanwhile (its delete ran before this rename): the entry must not outlive it.
        if (OWNED_RE.test(name)) await fsp.access(layout.filePath(name.slice(0, 32))).catch(() => fsp.rm(dest, { force: true }));
      } catch (err) {
        await fsp.rm(part, { force: true }).catch(() => {});
        throw err;
      }
    },
    async prune(maxAgeMs) {
      let removed = 0;
      const now = Date.now();
      const entries = (await fsp.readdir(layout.cacheDir, { recursive: true }).catch(() => [] as string[])) as string[];
      for (const rel of entries) {
        const p = path.join(layout.cacheDir, rel);
        const st = await fsp.stat(p).catch(() => null);
        if (st?.isFile() && now - st.mtimeMs > maxAgeMs) {
          await fsp.rm(p, { force: true });
          removed++;
        }
      }
      return removed;
    },
  };
}
