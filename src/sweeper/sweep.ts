import type { Sql } from '../db/client.ts';
import { deleteExpiredBundles, knownStorageKeys } from '../db/sweep.ts';
import type { BlobStore } from '../storage/blob-store.ts';
import { sweepTus } from '../tus/sweep.ts';

export interface SweepResult {
  expiredBundles: number;
  expiredFiles: number;
  staleParts: number;
  orphanFiles: number;
  cacheFiles: number;
  /** Expired tus sessions and parts no session names. */
  tusUploads: number;
}

export interface SweepOptions {
  /** Parts whose name names no process are removed after this long. */
  partIdleMs?: number;
  /** Stored files without a row, older than this, are leftovers of a crash between rename and commit. */
  orphanGraceMs?: number;
}

/**
 * One pass of clean-up: expired bundles and their bytes, temp parts of dead or stalled writers,
 * and stored files that no committed row references. Safe to run beside live servers.
 */
export async function sweep(sql: Sql, store: BlobStore, opts: SweepOptions = {}): Promise<SweepResult> {
  const result: SweepResult = { expiredBundles: 0, expiredFiles: 0, staleParts: 0, orphanFiles: 0, cacheFiles: 0, tusUploads: 0 };
  // tus sessions first: expiring a bundle cascades to its sessions, whose parts only this pass removes.
  const idleMs = opts.partIdleMs ?? 15 * 60_000;
  result.tusUploads = await sweepTus(sql, store, idleMs);
  await sweepExpired(sql, store, result);
  // Temp objects of dead or stalled writers (resumables are sweepTus's: their rows decide).
  for (const l of await store.listLeftovers(idleMs)) {
    if (l.kind !== 'temp') continue;
    await store.removeLeftover(l);
    result.staleParts++;
  }
  result.orphanFiles = await sweepOrphans(sql, store, opts.orphanGraceMs ?? 15 * 60_000);
  result.cacheFiles = await store.cache.prune(24 * 3_600_000);
  return result;
}

async function sweepExpired(sql: Sql, store: BlobStore, result: SweepResult): Promise<void> {
  for (;;) {
    // Batches keep each transaction short; rows go first, then bytes (a crash in between leaves
    // orphans that the orphan pass reclaims).
    const batch = await deleteExpiredBundles(sql);
    if (batch === null) break;
    result.expiredBundles += batch.bundles;
    const keys = batch.keys;
    await Promise.all(keys.map((k) => store.delete(k)));
    result.expiredFiles += keys.length;
  }
}

async function sweepOrphans(sql: Sql, store: BlobStore, graceMs: number): Promise<number> {
  let removed = 0;
  for await (const keys of store.listKeys(graceMs)) {
    const known = await knownStorageKeys(sql, keys);
    for (const key of keys) {
      if (known.has(key)) continue;
      await store.delete(key);
      removed++;
    }
  }
  return removed;
}
