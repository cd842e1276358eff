import type { Sql } from '../db/sql.ts';
import { deleteExpiredUploads, knownUploadIds } from '../db/tus-uploads.ts';
import type { BlobStore } from '../storage/blob-store.ts';

/**
 * Drops expired tus sessions and the objects of unfinished ones, then resumable objects that no row
 * names (a crash between creating the object and its row, or a bundle deleted under an append) once
 * they are idle for `graceMs`. Completed sessions have no object: their file belongs to the bundle.
 */
export async function sweepTus(sql: Sql, store: BlobStore, graceMs = 15 * 60_000): Promise<number> {
  let removed = 0;
  for (;;) {
    const ids = await deleteExpiredUploads(sql);
    if (ids.length === 0) break;
    await Promise.all(ids.filter((r) => !r.completed).map((r) => store.removeResumable(r.id)));
    removed += ids.length;
  }
  const idle = (await store.listLeftovers(graceMs)).filter((l) => l.kind === 'resumable');
  if (idle.length === 0) return removed;
  const known = await knownUploadIds(sql, idle.map((l) => l.id));
  for (const l of idle) {
    if (known.has(l.id)) continue;
    await store.removeLeftover(l);
    removed++;
  }
  return removed;
}
