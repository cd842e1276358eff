import type { Sql } from '../db/sql.ts';
import { deleteExpiredBundles, knownStorageKeys, pruneCopyRecords, pruneVanityHolds } from '../db/sweep.ts';
import type { BlobStore } from '../storage/blob-store.ts';
import { REMOVE_AT_ONCE } from '../storage/remove.ts';
import { eachLimited } from '../util/limit.ts';
import type { HashBackfill } from '../abuse/backfill.ts';
import { sweepTus } from './tus.ts';
import { pruneWebhookEvents } from '../db/webhooks.ts';

export type SweepResult = {
  expiredBundles: number;
  expiredFiles: number;
  staleParts: number;
  orphanFiles: number;
  cacheFiles: number;
  /** Expired tus sessions and parts no session names. */
  tusUploads: number;
  /** Records of copies made by `storage migrate` whose files are gone. */
  copyRecords: number;
  /** Files stored without a SHA-256 that were hashed for the blocklist (nothing removed). */
  hashedFiles: number;
};

export interface SweepOptions {
  /** Parts whose name names no process are removed after this long. */
  partIdleMs?: number;
  /** Stored files without a row, older than this, are leftovers of a crash between rename and commit. */
  orphanGraceMs?: number;
  /** Hashes a few files stored without a SHA-256 while something is blocked (see abuse/backfill.ts). */
  hashes?: HashBackfill;
}

/** The advisory lock one sweep holds (migrate.ts holds 7262001). */
const SWEEP_LOCK = 7262002;

/**
 * sweep() unless another process sweeps the same database now (every node of a cluster runs the
 * sweeper; two at once would do the same work twice): null when it was skipped. The lock is a
 * session lock on a connection of its own (the pool needs a second one for the pass), so it lasts
 * the whole pass and dies with a crashed node. The embedded database has one process sweeping and
 * one connection, so it sweeps without the lock.
 */
export async function sweepExclusive(sql: Sql, kind: 'postgres' | 'embedded', store: BlobStore, opts: SweepOptions = {}): Promise<SweepResult | null> {
  if (kind === 'embedded') return sweep(sql, store, opts);
  const conn = await sql.reserve();
  try {
    const [row] = await conn<{ locked: boolean }[]>`select pg_try_advisory_lock(${SWEEP_LOCK}) as locked`;
    if (!row!.locked) return null;
    try {
      return await sweep(sql, store, opts);
    } finally {
      await conn`select pg_advisory_unlock(${SWEEP_LOCK})`;
    }
  } finally {
    conn.release();
  }
}

/**
 * One pass of clean-up: expired bundles and their bytes, temp parts of dead or stalled writers,
 * and stored files that no committed row references; then, given `hashes`, some hashing for the
 * blocklist. Safe to run beside live servers.
 */
export async function sweep(sql: Sql, store: BlobStore, opts: SweepOptions = {}): Promise<SweepResult> {
  const result: SweepResult = { expiredBundles: 0, expiredFiles: 0, staleParts: 0, orphanFiles: 0, cacheFiles: 0, tusUploads: 0, copyRecords: 0, hashedFiles: 0 };
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
  result.copyRecords = await pruneCopyRecords(sql);
  await pruneVanityHolds(sql);
  await pruneWebhookEvents(sql);
  // Last, on what the pass kept; under the sweep lock, so nodes take turns rather than read a file twice.
  result.hashedFiles = (await opts.hashes?.sweep()) ?? 0;
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
    await eachLimited(keys, REMOVE_AT_ONCE, (k) => store.delete(k));
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
