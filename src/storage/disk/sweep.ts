import fsp from 'node:fs/promises';
import path from 'node:path';
import { writerAlive, isAlive } from '../../util/process-tag.ts';
import { BLOB_KEY_RE, type BlobStore, type Leftover } from '../blob-store.ts';
import type { DiskLayout } from './core.ts';

/** Keys per batch of listKeys: the sweeper looks each batch up in one query. */
const KEY_BATCH = 500;

type Sweep = Pick<BlobStore, 'listLeftovers' | 'removeLeftover' | 'listKeys'>;

/** What the sweeper may reclaim on disk: temp parts, resumables and stored files, by age. */
export function diskSweep(layout: DiskLayout): Sweep {
  const resumablePath = (id: string): string => path.join(layout.resumableDir, `${id}.part`);
  return {
    async listLeftovers(idleMs) {
      const out: Leftover[] = [];
      const now = Date.now();
      for (const name of await fsp.readdir(layout.tmpDir).catch(() => [] as string[])) {
        // <pid>-<start tag>-<random>.part; before tags, <pid>-<random>.part (24 hex digits)
        const m = /^(\d+)-(?:([0-9a-f]{8})-)?[0-9a-f]{24}\.part$/.exec(name);
        const pid = Number(m?.[1]);
        const st = await fsp.stat(path.join(layout.tmpDir, name)).catch(() => null);
        if (!st) continue;
        // A live process's finished parts sit untouched until its request publishes them (a long
        // multi-file upload can take hours): only a dead writer's parts are leftovers, whatever
        // their age. A tagged part whose pid runs again as another process (a container's pid 1
        // after a crash) is one too. A name that names no process is judged by its age.
        const named = m !== null && pid > 0;
        const tag = m?.[2];
        const deadWriter = named && (tag === undefined ? pid !== process.pid && !isAlive(pid) : !writerAlive(pid, tag));
        const idle = now - st.mtimeMs;
        if (deadWriter || (!named && idle > idleMs)) out.push({ kind: 'temp', id: name, idleMs: idle });
      }
      for (const name of await fsp.readdir(layout.resumableDir).catch(() => [] as string[])) {
        if (!/^[0-9a-f]{32}\.part$/.test(name)) continue;
        const st = await fsp.stat(path.join(layout.resumableDir, name)).catch(() => null);
        const idle = st ? now - st.mtimeMs : 0;
        if (st && idle >= idleMs) out.push({ kind: 'resumable', id: name.slice(0, 32), idleMs: idle });
      }
      return out;
    },

    async removeLeftover(l) {
      if (l.kind === 'resumable') return fsp.rm(resumablePath(l.id), { force: true });
      if (l.id.includes('/') || !l.id.endsWith('.part')) throw new Error(`not a temp part: ${l.id}`);
      await fsp.rm(path.join(layout.tmpDir, l.id), { force: true });
    },

    async *listKeys(olderThanMs) {
      let batch: string[] = [];
      const now = Date.now();
      for (const a of await fsp.readdir(layout.filesDir).catch(() => [] as string[])) {
        for (const b of await fsp.readdir(path.join(layout.filesDir, a)).catch(() => [] as string[])) {
          const dir = path.join(layout.filesDir, a, b);
          const seen = new Set<string>();
          for (const name of await fsp.readdir(dir).catch(() => [] as string[])) {
            // Cache entries beside a file (thumbnails) name its key: listed by it (delete takes both),
            // so one left behind by a file deleted during its rendering goes too.
            const key = name.slice(0, 32);
            if (!BLOB_KEY_RE.test(key) || seen.has(key)) continue;
            const st = await fsp.stat(path.join(dir, name)).catch(() => null);
            if (!st || now - st.mtimeMs < olderThanMs) continue;
            seen.add(key);
            batch.push(key);
            if (batch.length >= KEY_BATCH) {
              yield batch;
              batch = [];
            }
          }
        }
      }
      if (batch.length > 0) yield batch;
    },
  };
}
