import type { Sql } from './sql.ts';
import { EXPIRED_BUNDLE } from './bundle-room.ts';
import { queueBundleEvents } from './webhooks.ts';

/**
 * Deletes up to 200 expired bundles (skipping rows another sweeper holds) in one short transaction,
 * returning how many and the storage keys of their files (the caller deletes those bytes after the
 * commit: a crash in between leaves orphans that the orphan pass reclaims); null when none is left.
 */
export function deleteExpiredBundles(sql: Sql): Promise<{ bundles: number; keys: string[] } | null> {
  return sql.begin(async (tx) => {
    const ids = await tx<{ id: number }[]>`
      select id from bundles b where ${tx.unsafe(EXPIRED_BUNDLE)}
      limit 200 for update skip locked`;
    if (ids.length === 0) return null;
    const list = ids.map((r) => r.id);
    await queueBundleEvents(tx as unknown as Sql, 'bundle.expired', list);
    const files = await tx<{ storage_key: string }[]>`select storage_key from files where bundle_id = any(${list})`;
    await tx`delete from bundles where id = any(${list})`;
    return { bundles: ids.length, keys: files.map((f) => f.storage_key) };
  });
}

/** Forgets vanity names whose 30-day hold is over (sql/0018_vanity_holds.sql). */
export async function pruneVanityHolds(sql: Sql): Promise<number> {
  return (await sql`delete from vanity_holds where held_until <= now() returning 1`).length;
}

/** Which of these storage keys a committed file row names. */
export async function knownStorageKeys(sql: Sql, keys: readonly string[]): Promise<Set<string>> {
  const rows = await sql<{ storage_key: string }[]>`select storage_key from files where storage_key = any(${keys as string[]})`;
  return new Set(rows.map((r) => r.storage_key));
}

/**
 * Forgets verified copies (sluice storage migrate) of files whose rows are gone: a run never asks
 * for them again, and the table would otherwise grow with every file ever copied.
 */
export async function pruneCopyRecords(sql: Sql): Promise<number> {
  const rows = await sql`
    delete from storage_copies c where not exists (select 1 from files f where f.storage_key = c.storage_key)
    returning 1`;
  return rows.length;
}
